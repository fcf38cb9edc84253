"""Overrides `dwellmq_options`: these tests' brokers start from a definitions file and at a
fixed time."""

import json

import pytest


@pytest.fixture(scope="session")
def dwellmq_options(tmp_path_factory):
    path = tmp_path_factory.mktemp("fixture") / "definitions.json"
    path.write_text(json.dumps({"queues": [{"name": "orders", "vhost": "/", "durable": True,
                                            "auto_delete": False, "arguments": {}}]}))
    return {"definitions": str(path), "manual_clock": "2030-01-01T00:00:00Z"}

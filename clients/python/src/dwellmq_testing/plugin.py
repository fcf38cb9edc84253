"""pytest fixtures for dwellmq (registered through the `pytest11` entry point).

- `dwellmq`: a broker of the test's own (function scope), stopped afterwards.
- `dwellmq_session`: one broker for the whole run; call `.reset()` between tests if they share it.

Both run in memory on free ports with a manual clock starting now and seeded names. Override
the `dwellmq_options` fixture (a dict of `Dwellmq.start` keyword arguments) in a conftest.py
to change that, e.g. `{"definitions": "tests/definitions.json"}`.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from . import Dwellmq


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--dwellmq-bin",
        default=None,
        help="path to the dwellmq binary (default: $DWELLMQ_BIN, then the one installed with this package, then PATH)",
    )


@pytest.fixture(scope="session")
def dwellmq_options() -> dict:
    """Keyword arguments for `Dwellmq.start` (override it to add a definitions file, say)."""
    return {}


def _start(config: pytest.Config, options: dict) -> Dwellmq:
    return Dwellmq.start(config.getoption("--dwellmq-bin"), **options)


@pytest.fixture(scope="session")
def dwellmq_session(pytestconfig: pytest.Config, dwellmq_options: dict) -> Iterator[Dwellmq]:
    broker = _start(pytestconfig, dwellmq_options)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def dwellmq(pytestconfig: pytest.Config, dwellmq_options: dict) -> Iterator[Dwellmq]:
    broker = _start(pytestconfig, dwellmq_options)
    try:
        yield broker
    finally:
        broker.stop()

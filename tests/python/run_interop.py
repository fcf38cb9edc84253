#!/usr/bin/env python3
"""Runs the pika interop tests against the real `dwellmq` binary (what CI runs).

    python3 tests/python/run_interop.py [extra pytest arguments]

Runs the binary in $DWELLMQ_BIN when set (CI passes the one debug build every step shares);
else builds it with `cargo build --bin dwellmq` (into $CARGO_TARGET_DIR, default `target/`).
Then runs pytest on tests/python. The session fixture in conftest.py starts the binary with
`--listen 127.0.0.1:0 --in-memory`, reads the AMQP URL from its first stdout line and stops it
afterwards. Exits with pytest's status (non-zero on any failure, also when no test ran).
Needs `python3 -m pip install pika==1.3.2 pytest prometheus-client`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True

from conftest import REPO, broker_binary  # noqa: E402

# Seconds for the whole suite (each test also has its own alarm): below the limit .ci/run
# gives this step, so that this script stops pytest and the broker itself and says why.
PYTEST_TIMEOUT = 150


def main(argv: list[str]) -> int:
    for module in ("pika", "pytest", "prometheus_client"):
        try:
            __import__(module)
        except ImportError:
            print(
                f"run_interop: python module '{module}' is missing: "
                "python3 -m pip install pika==1.3.2 pytest prometheus-client",
                file=sys.stderr,
            )
            return 2

    try:
        binary = broker_binary()
    except (subprocess.CalledProcessError, RuntimeError, FileNotFoundError) as e:
        print(f"run_interop: building the broker failed: {e}", file=sys.stderr)
        return 1

    env = dict(os.environ, DWELLMQ_BIN=str(binary), PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "-m", "pytest", str(HERE), *argv]
    print(f"run_interop: {' '.join(command)} (broker {binary})", flush=True)
    # pytest (and the broker it starts) run in their own process group, so that a timeout or
    # Ctrl-C here stops both and leaves no broker behind.
    proc = subprocess.Popen(command, cwd=REPO, env=env, start_new_session=True)
    # Stopped from outside (.ci/run's step limit sends SIGTERM to this process's group, which
    # pytest's is not): stop pytest's group too, quickly, so that no broker is left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(stop_group(proc, grace=3) or 143))
    try:
        status = proc.wait(PYTEST_TIMEOUT)
    except subprocess.TimeoutExpired:
        print(f"run_interop: the suite did not finish within {PYTEST_TIMEOUT}s", file=sys.stderr)
        stop_group(proc)
        return 1
    except KeyboardInterrupt:
        stop_group(proc)
        return 130
    if status == 5:
        print("run_interop: pytest collected no tests", file=sys.stderr)
        return 1
    return status


def stop_group(proc: subprocess.Popen, grace: float = 10) -> None:
    """Stops pytest's process group (pytest and the broker it started), politely first."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Runs README.md's commands and examples as printed, from this checkout (CI calls it).

    python3 .ci/readme.py
    python3 .ci/readme.py --prebuild   (only compiles step 4's crate, ahead of time)

1. Starts the broker with the README's first command (`cargo run --release -- --in-memory`),
   then runs the README's Python (pika) and Node.js (amqplib) examples against it. Each must exit
   0 on its own within a time limit, so an example that leaves its connection open fails; the
   Python one must show its 5-second delayed message arriving. Then the README's curl blocks
   ($HTTP_URL: the aliveness check, the delayed-message endpoints) run against it as bash
   scripts in which a failed request fails, their output checked.
2. Starts the broker with the README's TOML example as its config file, with the command its
   first line prints, and checks what the README says of it: the configured user logs in,
   `guest` no longer does.
3. Runs the test-double examples (pytest with the plugin from clients/python, node --test),
   each starting the binary the first command built; the node one again without a binary, which
   must fail at once saying so. Checks that the README's wheel line names the script that
   .ci/run's wheel step builds, installs and tests the wheel with.
4. Builds a scratch crate whose Cargo.toml has the README's dependency lines (the `path` pointing
   at this checkout) and runs the README's Rust example in it as a test; checks that
   tests/amqp/readme_example.rs is the same code (it runs with the README's test command); and checks
   that the library without default features pulls in none of the binary's dependencies, nor
   the HTTP and TLS stacks (axum, hyper, rustls, ring), which the default features do pull in.

The README's test command, the interop test runs and the benchmark commands are not
repeated here: `.ci/run` runs the first ones, and benchmarks measure rather than check.

Needs pika (`pip install pika==1.3.2`) and amqplib (`npm install --prefix tests/node`).
If 127.0.0.1:5672 is taken (a RabbitMQ), the broker is started with `--listen 127.0.0.1:0` added,
as the README advises. The examples get the printed URLs in AMQP_URL and HTTP_URL, which they read.

Which binary the `cargo run` lines start:
- DWELLMQ_BIN set (what .ci/run does): the README's `cargo run --release -- ARGS` lines are
  checked as printed (exactly `cargo run`, `--release`, `--`, then the arguments), `cargo
  metadata` must show that `cargo run` picks the `dwellmq` binary (`default-run`, its required
  features in the default ones), and then that binary runs with the printed ARGS from the
  checkout. The binary is CI's one debug build, compiled from the same source with the same
  features; the code has no `cfg(debug_assertions)` branch, and debug builds check more
  (overflow, debug assertions), so what the examples prove of it holds for the release build.
  What this does not prove is that the release profile compiles; that would take a third full
  build of every dependency (minutes on CI's two cores) to catch a compiler bug.
- otherwise: each line runs as printed (`cargo run --release` builds in release mode), or
  without `--release` when README_PROFILE=debug, for a quicker check by hand.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import queue
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
STARTUP_TIMEOUT = 1800.0  # run as printed, the first command compiles the broker in release mode
EXAMPLE_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
BINARY_ONLY_DEPENDENCIES = ("clap", "mimalloc", "toml", "tracing-subscriber")
# What the `http` and `tls` features bring in (the HTTP server stack, rustls and its crypto), which
# an AMQP-only embedder does not compile.
HTTP_AND_TLS_DEPENDENCIES = ("axum", "hyper", "rustls", "ring")


def fail(message: str) -> None:
    print(f"readme: FAILED: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def step(message: str) -> None:
    print(f"readme: {message}", flush=True)


def code_blocks(language: str) -> list[str]:
    """The README's fenced code blocks in `language`, in order."""
    text = README.read_text()
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


# The first line of a test-double example names its file: `# test_reminder.py: ...`.
TEST_FILE_LINE = re.compile(r"^(?:#|//) (\S+\.(?:py|js)): ")


def test_file_blocks(language: str) -> list[tuple[str, str]]:
    """(file name, code) of the README's test-double examples in `language`."""
    found = []
    for block in code_blocks(language):
        match = TEST_FILE_LINE.match(block)
        if match:
            found.append((match.group(1), block))
    return found


def only_block(language: str) -> str:
    blocks = [b for b in code_blocks(language) if not TEST_FILE_LINE.match(b)]
    if len(blocks) != 1:
        fail(f"expected one ```{language} block in README.md, found {len(blocks)}")
    return blocks[0]


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def target_dir() -> Path:
    configured = os.environ.get("CARGO_TARGET_DIR")
    if configured:
        path = Path(configured)
        return path if path.is_absolute() else REPO / path
    return REPO / "target"


class Broker:
    """A broker process started by `command`; its first stdout line is its AMQP URL, the
    second (unless HTTP is off) its HTTP URL."""

    def __init__(self, command: list[str], log: Path):
        step(f"$ {shlex.join(command)}")
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            command,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        # One reader for the process's life, so that it never blocks on a full pipe.
        lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in self.proc.stdout], daemon=True).start()
        self.url = self.http_url = ""
        try:
            self.url = lines.get(timeout=STARTUP_TIMEOUT).decode().strip()
            # Both lines are printed together once the listeners are bound.
            self.http_url = lines.get(timeout=STOP_TIMEOUT).decode().strip()
        except queue.Empty:
            pass
        if not self.url.startswith("amqp://"):
            self.stop()
            fail(f"no AMQP URL on stdout (got {self.url!r}); log: {log}\n{log.read_text()[-3000:]}")
        step(f"broker listening: {self.url} {self.http_url}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            # `cargo run` replaces itself with the broker, so this reaches the broker itself.
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                fail("the broker did not stop on SIGTERM")
        self.log.close()
        if self.proc.returncode != 0:
            fail(f"the broker exited with {self.proc.returncode} on SIGTERM")


def start_command() -> list[str]:
    """The README's first shell command (starting the broker), as it is to be run here."""
    first = code_blocks("sh")[0].strip()
    if "\n" in first or not first.startswith("cargo run"):
        fail(f"the README's first sh block should be the one command that starts the broker: {first!r}")
    return runnable(first)


def runnable(printed: str) -> list[str]:
    """The command to run for a README line `cargo run --release -- ARGS`: $DWELLMQ_BIN ARGS
    when DWELLMQ_BIN is set (see the module's doc), else the line as printed."""
    command = shlex.split(printed)
    if command[:3] != ["cargo", "run", "--release"] or command[3:4] != ["--"]:
        fail(f"expected a README line `cargo run --release -- ARGS`, found {printed!r}")
    binary = os.environ.get("DWELLMQ_BIN")
    if binary:
        return [binary, *command[4:]]
    if os.environ.get("README_PROFILE") == "debug":
        command.remove("--release")
    return command


def cargo_run_starts_the_broker() -> None:
    """`cargo run` in the checkout runs the `dwellmq` binary with the default features: what
    running $DWELLMQ_BIN in place of the README's `cargo run` lines relies on."""
    metadata = json.loads(subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1"],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout)
    package = next(p for p in metadata["packages"] if p["name"] == "dwellmq")
    if package.get("default_run") != "dwellmq":
        fail(f"`cargo run` would not pick the dwellmq binary (default-run = {package.get('default_run')!r})")
    binary = next(t for t in package["targets"] if t["name"] == "dwellmq" and "bin" in t["kind"])
    missing = set(binary.get("required-features") or []) - set(package["features"].get("default", []))
    if missing:
        fail(f"`cargo run` would not build the dwellmq binary: {sorted(missing)} not default")
    step("`cargo run` runs the dwellmq binary with the default features (cargo metadata)")


def with_free_port(command: list[str]) -> tuple[list[str], bool]:
    """The command as printed if port 5672 is free; else with `--listen 127.0.0.1:0` added."""
    if port_free(5672):
        return command, False
    step("127.0.0.1:5672 is taken: adding --listen 127.0.0.1:0, as the README advises")
    return command + ["--listen", "127.0.0.1:0"], True


def run_example(
    what: str, command: list[str], env: dict[str, str], cwd: Path, should_fail: bool = False
) -> str:
    """Runs an example, which must exit within EXAMPLE_TIMEOUT (0, or not 0 if it
    `should_fail`); shows and returns its output."""
    step(f"$ {shlex.join(command)}   ({what})")
    try:
        done = subprocess.run(
            command, cwd=cwd, env=env, timeout=EXAMPLE_TIMEOUT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
    except subprocess.TimeoutExpired as timeout:
        print(timeout.output or "", flush=True)
        fail(f"the {what} did not exit within {EXAMPLE_TIMEOUT:.0f}s (a connection left open?)")
    print(done.stdout, end="" if done.stdout.endswith("\n") else "\n", flush=True)
    if should_fail and done.returncode == 0:
        fail(f"the {what} exited with 0")
    if not should_fail and done.returncode != 0:
        fail(f"the {what} exited with {done.returncode}")
    return done.stdout


def examples_against_the_first_command(work: Path) -> None:
    command, _ = with_free_port(start_command())
    broker = Broker(command, work / "broker.log")
    # The README says to take the printed URLs: the examples read them from AMQP_URL and HTTP_URL.
    env = dict(os.environ, AMQP_URL=broker.url, HTTP_URL=broker.http_url)
    try:
        python = work / "example.py"
        python.write_text(only_block("python"))
        output = run_example("Python example", [sys.executable, str(python)], env, work)
        # The message is due 5 s after its publish, which the example's clock reads before.
        arrived = re.search(r"'call mum' arrived after (\d+\.\d) s", output)
        if not arrived or float(arrived.group(1)) < 5.0:
            fail("the Python example should show its delayed message arriving after 5 s")
        the_curl_blocks(env, work)

        node_modules = REPO / "tests" / "node" / "node_modules"
        if not (node_modules / "amqplib").is_dir():
            fail("amqplib is missing: npm install --prefix tests/node")
        node = work / "example.js"
        node.write_text(only_block("js"))
        node_env = dict(env, NODE_PATH=str(node_modules))
        run_example("Node.js example", ["node", str(node)], node_env, work)
        check_what_the_examples_declared(broker.url)
    finally:
        broker.stop()


# The README's curl blocks against the broker ($HTTP_URL, without rabbitmqadmin, which needs
# RabbitMQ's script), each with what its output must show.
CURL_BLOCKS = {
    "aliveness-test": [r'\{"status":"ok"\}'],
    "/publish": [r'\{"routed":true\}', r"first held: \d+-\d+\n", r'\{"purged":0\}'],
}


def the_curl_blocks(env: dict[str, str], work: Path) -> None:
    """Runs each curl block as one bash script in which a failed request fails the script
    (curl --fail-with-body) and checks its output."""
    blocks = [b for b in code_blocks("sh") if "$HTTP_URL" in b and "rabbitmqadmin" not in b]
    for block in blocks:
        keys = [key for key in CURL_BLOCKS if key in block]
        if len(keys) != 1:
            fail(f"a curl block .ci/readme.py has no check for: {block[:200]!r}")
        script = (
            "set -euo pipefail\n"
            'curl() { command curl --fail-with-body --silent --show-error "$@"; }\n' + block
        )
        output = run_example(f"curl block ({keys[0]})", ["bash", "-c", script], env, work)
        for expected in CURL_BLOCKS[keys[0]]:
            if not re.search(expected, output):
                fail(f"the curl block ({keys[0]}) printed no {expected!r}")
    if len(blocks) != len(CURL_BLOCKS):
        fail(f"expected {len(CURL_BLOCKS)} curl blocks using $HTTP_URL, found {len(blocks)}")


def check_what_the_examples_declared(url: str) -> None:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(f"{url}/%2f"))
    try:
        ch = conn.channel()
        for exchange in ("reminders", "retries"):
            ch.exchange_declare(exchange, passive=True)
        for queue in ("due", "webhooks"):
            ch.queue_declare(queue, passive=True)
    finally:
        conn.close()


def the_toml_example(work: Path) -> None:
    import pika
    import pika.exceptions

    config_text = toml_blocks()[0]
    first_line = config_text.splitlines()[0]
    match = re.fullmatch(r"# (\S+): (cargo run .*)", first_line)
    if not match:
        fail(f"the TOML example should start with '# FILE: cargo run ...', not {first_line!r}")
    name, printed = match.groups()
    command, _ = with_free_port(runnable(printed))
    # The command names the file relative to the checkout, where `cargo run` runs.
    config = REPO / name
    if config.exists():
        fail(f"{config} exists already; not overwriting it")
    config.write_text(config_text)
    try:
        broker = Broker(command, work / "broker-toml.log")
    finally:
        config.unlink()
    try:
        port = broker.url.rsplit(":", 1)[1]
        for vhost in ("%2f", "staging"):
            conn = pika.BlockingConnection(
                pika.URLParameters(f"amqp://app:secret@127.0.0.1:{port}/{vhost}")
            )
            conn.close()
        try:
            pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/%2f"))
        except pika.exceptions.ProbableAuthenticationError:
            pass
        else:
            fail("guest logged in although the TOML example lists its own [[users]]")
        step("the TOML example: app logs in to / and staging, guest is refused")
    finally:
        broker.stop()


def toml_blocks() -> tuple[str, str]:
    """(the broker's config file, the Cargo.toml dependency lines)."""
    blocks = code_blocks("toml")
    if len(blocks) != 2:
        fail(f"expected two ```toml blocks (config file, Cargo.toml), found {len(blocks)}")
    if blocks[0].startswith("# Cargo.toml"):  # the Rust example comes before the config file
        blocks.reverse()
    return blocks[0], blocks[1]


def the_rust_example(work: Path) -> None:
    crate, env = scratch_crate(work)
    step("$ cargo test   (the README's Rust example in a crate with its Cargo.toml lines)")
    done = subprocess.run(["cargo", "test", "--test", "reminder"], cwd=crate, env=env)
    if done.returncode != 0:
        fail("the README's Rust example failed in a crate of its own")

    rust = only_block("rust")
    formatted = work / "formatted.rs"
    formatted.write_text(rust)
    subprocess.run(["rustfmt", "--edition", "2021", str(formatted)], check=True)
    in_tests = (REPO / "tests" / "amqp" / "readme_example.rs").read_text()
    body = "\n".join(
        line for line in in_tests.splitlines() if not line.startswith("//!")
    ).lstrip("\n")
    if body.strip() != formatted.read_text().strip():
        fail("tests/amqp/readme_example.rs differs from the README's Rust example (rustfmt both)")
    step("tests/amqp/readme_example.rs matches the README's Rust example")


def prebuild_the_rust_example() -> int:
    """Compiles the scratch crate without running it (`--prebuild`): .ci/run starts this in the
    background while the interop steps, which hardly use the CPU, run, so that the README step
    finds its dependencies built. The crate's own path does not matter: cargo keys what it
    reuses (dwellmq and the registry crates) by package and features."""
    with tempfile.TemporaryDirectory(prefix="dwellmq-readme-prebuild-") as tmp:
        crate, env = scratch_crate(Path(tmp))
        done = subprocess.run(
            ["cargo", "test", "--quiet", "--no-run", "--test", "reminder"], cwd=crate, env=env
        )
    return done.returncode


def scratch_crate(work: Path) -> tuple[Path, dict[str, str]]:
    """A crate in `work` with the README's Cargo.toml lines and its Rust example as a test, and
    the environment to build it in."""
    rust = only_block("rust")
    cargo_lines = toml_blocks()[1]
    printed_path = 'path = "../dwellmq"'
    if printed_path not in cargo_lines:
        fail(f"the README's Cargo.toml lines no longer say {printed_path}")
    crate = work / "readme-crate"
    (crate / "src").mkdir(parents=True)
    (crate / "tests").mkdir()
    (crate / "src" / "lib.rs").write_text("")
    (crate / "tests" / "reminder.rs").write_text(rust)
    (crate / "Cargo.toml").write_text(
        '[package]\nname = "readme-example"\nversion = "0.0.0"\nedition = "2021"\n'
        "publish = false\n\n[workspace]\n\n"
        + cargo_lines.replace(printed_path, f"path = {str(REPO)!r}".replace("'", '"'))
    )
    # The checkout's lock file: the same dependency versions, so its build cache is reused.
    shutil.copy(REPO / "Cargo.lock", crate / "Cargo.lock")
    env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir()))
    # As a newcomer builds it: without the clippy wrapper .ci/run sets for the workspace.
    env.pop("RUSTC_WORKSPACE_WRAPPER", None)
    env.pop("CLIPPY_ARGS", None)
    return crate, env


def dependency_names(*features: str) -> set[str]:
    """The names of the crates dwellmq's library and binaries depend on, with `features`
    (cargo tree's arguments), normal dependencies only."""
    tree = subprocess.run(
        ["cargo", "tree", "-p", "dwellmq", *features, "-e", "normal", "--prefix", "none"],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout
    return {line.split(" ", 1)[0] for line in tree.splitlines() if line}


def no_binary_dependencies_for_embedders() -> None:
    left_out = BINARY_ONLY_DEPENDENCIES + HTTP_AND_TLS_DEPENDENCIES
    # The names are the crates' own: the default build has every one of them.
    missing = sorted(set(left_out) - dependency_names())
    if missing:
        fail(f"the default build no longer depends on {missing}: update this check's names")
    pulled = sorted(dependency_names("--no-default-features").intersection(left_out))
    if pulled:
        fail(f"dwellmq without default features still depends on {pulled}")
    step("the library without default features pulls in none of " + ", ".join(left_out))


def the_test_double_examples(work: Path) -> None:
    """The pytest and node --test examples, each against a broker it starts itself from the
    binary the first command built (DWELLMQ_BIN)."""
    profile = "debug" if os.environ.get("README_PROFILE") == "debug" else "release"
    binary = Path(os.environ.get("DWELLMQ_BIN") or target_dir() / profile / "dwellmq")
    if not binary.is_file():
        fail(f"{binary} is missing (the README's first command builds it)")
    env = dict(os.environ, DWELLMQ_BIN=str(binary))
    python = test_file_blocks("python")
    node = test_file_blocks("js")
    if len(python) != 1 or len(node) != 1:
        fail(f"expected one pytest and one node --test example, found {len(python)} and {len(node)}")
    try:
        import dwellmq_testing  # noqa: F401
    except ImportError:
        fail("the pytest plugin is missing: pip install ./clients/python")
    name, code = python[0]
    (work / name).write_text(code)
    run_example("pytest example", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name], env, work)
    name, code = node[0]
    (work / name).write_text(code)
    node_env = dict(env, NODE_PATH=str(REPO / "tests" / "node" / "node_modules"))
    run_example("node --test example", ["node", "--test", name], node_env, work)
    # Without the binary it fails at once, saying so, rather than waiting forever for its URLs.
    missing = dict(node_env, DWELLMQ_BIN=str(work / "missing" / "dwellmq"))
    output = run_example(
        "node --test example without the binary", ["node", "--test", name], missing, work,
        should_fail=True,
    )
    if "cannot start" not in output:
        fail("the node --test example without the binary should say it cannot start it")


def the_wheel_lines() -> None:
    """The README's wheel-building line names the script .ci/run's wheel step runs (which
    installs the wheel into a fresh virtual environment and runs the plugin's tests)."""
    lines = [x for b in code_blocks("sh") for x in b.splitlines() if "build_wheel.py" in x]
    if not lines:
        fail("the README no longer shows how to build the wheel")
    for line in lines:
        script = shlex.split(line, comments=True)[1]
        if not (REPO / script).is_file():
            fail(f"the README's wheel line names {script}, which does not exist")
    step("the README's wheel line names clients/python/wheel/build_wheel.py")


def main() -> int:
    if sys.argv[1:] == ["--prebuild"]:
        return prebuild_the_rust_example()
    with tempfile.TemporaryDirectory(prefix="dwellmq-readme-") as tmp:
        work = Path(tmp)
        if os.environ.get("DWELLMQ_BIN"):
            cargo_run_starts_the_broker()
        examples_against_the_first_command(work)
        the_test_double_examples(work)
        the_wheel_lines()
        the_toml_example(work)
        the_rust_example(work)
    no_binary_dependencies_for_embedders()
    step("all README commands and examples ran as printed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Builds the dwellmq-testing wheel that carries the broker: the pytest plugin plus the
`dwellmq` executable, so that `pip install` of the wheel is a Python team's whole set-up.

    cargo build --release
    python3 clients/python/wheel/build_wheel.py target/release/dwellmq --out-dir dist
    pip install dist/dwellmq_testing-*.whl pika

Prints the wheel's path. The executable goes in the wheel's `.data/scripts/`, which pip
installs into the environment's `bin/` (a venv's, or `~/.local/bin` with `--user`) and lists in
the installed RECORD, where the plugin finds it before `PATH`. The platform tag is the one the
binary's ELF headers justify (`elf_tag.py`): `manylinux_2_N_x86_64`, N its newest glibc symbol
version. A copy of the binary is stripped of its symbols (`strip`, binutils) unless
`--keep-symbols`; a release build's debug info is most of its size.

Needs Python 3.11+ (tomllib) and only the standard library. The wheel is the same for the same
inputs (entry times fixed), so a rebuild can be compared byte for byte.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

from elf_tag import NotManylinux, manylinux_tag

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # clients/python
SOURCES = PACKAGE_ROOT / "src"
# Zip entry times: the earliest a zip can say, so the wheel depends only on its contents.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def metadata(project: dict, readme: str) -> str:
    """The METADATA file (core metadata 2.1) from pyproject.toml's [project] table."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"License: {project['license']['text']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + readme


def entry_points(project: dict) -> str:
    text = ""
    for group, entries in project.get("entry-points", {}).items():
        text += f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n"
    return text


class WheelWriter:
    """Writes entries and keeps the RECORD lines for them."""

    def __init__(self, path: Path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=6)
        self.record: list[tuple[str, str, str]] = []

    def add(self, name: str, data: bytes, executable: bool = False) -> None:
        info = zipfile.ZipInfo(name, FIXED_TIME)
        info.compress_type = zipfile.ZIP_DEFLATED
        # pip keeps the executable bit it finds in the entry's Unix mode.
        info.external_attr = ((0o755 if executable else 0o644) | 0o100000) << 16
        self.zip.writestr(info, data)
        self.record.append((name, record_hash(data), str(len(data))))

    def close(self, record_name: str) -> None:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows(self.record)
        writer.writerow((record_name, "", ""))
        info = zipfile.ZipInfo(record_name, FIXED_TIME)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (0o644 | 0o100000) << 16
        self.zip.writestr(info, out.getvalue())
        self.zip.close()


def stripped_copy(binary: Path, scratch: Path) -> Path:
    if shutil.which("strip") is None:
        sys.exit("build_wheel: `strip` (binutils) is missing; install it or pass --keep-symbols")
    copy = scratch / "dwellmq"
    shutil.copyfile(binary, copy)
    subprocess.run(["strip", str(copy)], check=True)
    return copy


def build(binary: Path, out_dir: Path, keep_symbols: bool) -> Path:
    project = tomllib.loads((PACKAGE_ROOT / "pyproject.toml").read_text())["project"]
    try:
        platform = manylinux_tag(binary)
    except NotManylinux as why:
        sys.exit(f"build_wheel: {why}")
    name = project["name"].replace("-", "_")
    version = project["version"]
    tag = f"py3-none-{platform}"
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel_path = out_dir / f"{name}-{version}-{tag}.whl"
    dist_info = f"{name}-{version}.dist-info"

    with tempfile.TemporaryDirectory(prefix="dwellmq-wheel-") as scratch:
        payload = binary if keep_symbols else stripped_copy(binary, Path(scratch))
        wheel = WheelWriter(wheel_path)
        for source in sorted(SOURCES.rglob("*.py")):
            wheel.add(source.relative_to(SOURCES).as_posix(), source.read_bytes())
        wheel.add(f"{name}-{version}.data/scripts/dwellmq", payload.read_bytes(), executable=True)
        readme = (PACKAGE_ROOT / project["readme"]).read_text()
        wheel.add(f"{dist_info}/METADATA", metadata(project, readme).encode())
        wheel.add(f"{dist_info}/entry_points.txt", entry_points(project).encode())
        wheel.add(
            f"{dist_info}/WHEEL",
            (
                "Wheel-Version: 1.0\n"
                "Generator: dwellmq build_wheel.py\n"
                "Root-Is-Purelib: false\n"
                f"Tag: {tag}\n"
            ).encode(),
        )
        wheel.close(f"{dist_info}/RECORD")
    return wheel_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary", type=Path, help="the dwellmq executable (target/release/dwellmq)")
    parser.add_argument("--out-dir", type=Path, default=Path("dist"), help="where to write the wheel (default: dist)")
    parser.add_argument("--keep-symbols", action="store_true", help="put the binary in as it is, unstripped")
    args = parser.parse_args()
    if not args.binary.is_file():
        sys.exit(f"build_wheel: {args.binary} is not a file (build it first: cargo build --release)")
    print(build(args.binary, args.out_dir, args.keep_symbols))


if __name__ == "__main__":
    main()

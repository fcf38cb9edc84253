"""The wheel that carries the binary (clients/python/wheel): its platform tag, its contents, and
the plugin's choice of binary. .ci/run's wheel step installs such a wheel and runs these tests
through it."""

import base64
import csv
import hashlib
import io
import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import dwellmq_testing

pytest.importorskip("tomllib", reason="the wheel script needs Python 3.11+")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "wheel"))
import build_wheel  # noqa: E402
import elf_tag  # noqa: E402


def test_the_tag_is_the_newest_glibc_version_the_binary_needs():
    binary = Path(dwellmq_testing.find_binary())
    tag = elf_tag.manylinux_tag(binary)
    # An independent reading: every version name is a string in the binary's dynamic string table.
    named = {int(m) for m in re.findall(rb"GLIBC_2\.(\d+)", binary.read_bytes())}
    assert tag == f"manylinux_2_{max(named | {17})}_x86_64"


def test_what_is_not_a_glibc_x86_64_executable_is_refused(tmp_path):
    script = tmp_path / "dwellmq"
    script.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(elf_tag.NotManylinux, match="not an ELF"):
        elf_tag.manylinux_tag(script)
    # A 32-bit ELF header.
    script.write_bytes(b"\x7fELF\x01\x01" + bytes(58))
    with pytest.raises(elf_tag.NotManylinux, match="64-bit"):
        elf_tag.manylinux_tag(script)


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    """A wheel built from a small stand-in for the binary (the tag is tested above)."""
    monkeypatch.setattr(build_wheel, "manylinux_tag", lambda _: "manylinux_2_34_x86_64")
    binary = tmp_path / "dwellmq"
    binary.write_bytes(b"\x7fELF stand-in" * 100)
    return build_wheel.build(binary, tmp_path / "dist", keep_symbols=True), binary


def test_the_wheel_records_every_file_with_its_hash(wheel):
    path, binary = wheel
    assert path.name == "dwellmq_testing-0.1.0-py3-none-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        record = list(csv.reader(io.StringIO(z.read("dwellmq_testing-0.1.0.dist-info/RECORD").decode())))
        assert sorted(row[0] for row in record) == sorted(names)
        for name, digest, size in record:
            if name.endswith("/RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = z.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert (digest, size) == ("sha256=" + expected.decode(), str(len(data))), name
        script = z.getinfo("dwellmq_testing-0.1.0.data/scripts/dwellmq")
        assert z.read(script) == binary.read_bytes()
        assert (script.external_attr >> 16) & 0o777 == 0o755
        assert "dwellmq_testing/plugin.py" in names
        wheel_file = z.read("dwellmq_testing-0.1.0.dist-info/WHEEL").decode()
        assert "Tag: py3-none-manylinux_2_34_x86_64\n" in wheel_file
        assert "Root-Is-Purelib: false\n" in wheel_file
        metadata = Parser().parsestr(z.read("dwellmq_testing-0.1.0.dist-info/METADATA").decode())
        assert (metadata["Name"], metadata["Version"]) == ("dwellmq-testing", "0.1.0")
        assert "pytest>=7" in metadata.get_all("Requires-Dist")
        entry_points = z.read("dwellmq_testing-0.1.0.dist-info/entry_points.txt").decode()
        assert "[pytest11]\ndwellmq = dwellmq_testing.plugin\n" in entry_points


def test_the_same_inputs_make_the_same_wheel(wheel, tmp_path):
    path, binary = wheel
    again = build_wheel.build(binary, tmp_path / "again", keep_symbols=True)
    assert again.read_bytes() == path.read_bytes()


def test_the_binary_installed_with_the_plugin_comes_before_path(tmp_path, monkeypatch):
    on_path = tmp_path / "dwellmq"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("DWELLMQ_BIN", raising=False)
    monkeypatch.setattr(dwellmq_testing, "bundled_binary", lambda: None)
    assert dwellmq_testing.find_binary() == str(on_path)
    monkeypatch.setattr(dwellmq_testing, "bundled_binary", lambda: "/venv/bin/dwellmq")
    assert dwellmq_testing.find_binary() == "/venv/bin/dwellmq"
    # DWELLMQ_BIN and an explicit path still choose another.
    monkeypatch.setenv("DWELLMQ_BIN", "/elsewhere/dwellmq")
    assert dwellmq_testing.find_binary() == "/elsewhere/dwellmq"
    assert dwellmq_testing.find_binary("/given/dwellmq") == "/given/dwellmq"

"""Topology and experiment files are stat'ed and read with a bound: a FIFO, /dev/zero or a
directory is refused without reading (as root, `up /dev/zero` read until memory ran out;
a FIFO blocked forever), and never more than the limit + 1 bytes are read."""

from __future__ import annotations

import os
import threading

import pytest
from click.testing import CliRunner

from emulator import boundedread
from emulator.cli import main
from emulator.errors import SpecError
from emulator.experiment.spec import load as load_experiment
from emulator.spec import MAX_FILE_BYTES, load


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "topo.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("reader", [load, load_experiment])
def test_a_fifo_is_refused_without_waiting_for_a_writer(fifo, reader):
    with pytest.raises(SpecError) as err:
        reader(fifo)
    assert str(err.value) == f"{fifo}: (file): is a FIFO, not a regular file"


def test_dev_zero_and_a_directory_are_refused(tmp_path):
    with pytest.raises(SpecError, match=r"^/dev/zero: \(file\): is a character device, not a "):
        load("/dev/zero")
    with pytest.raises(SpecError, match=r": \(file\): is a directory, not a regular file$"):
        load(tmp_path)


def test_a_symlink_to_a_device_is_refused_too(tmp_path):
    (tmp_path / "t.yaml").symlink_to("/dev/zero")
    with pytest.raises(SpecError, match="is a character device"):
        load(tmp_path / "t.yaml")


def test_the_cli_says_one_line_and_exit_2(fifo):
    out = str(fifo.parent / "out")
    for args in (["up", str(fifo)], ["render", "/dev/zero", "-o", out], ["run", str(fifo), "--out", out]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2, (args, res.stderr)
        assert res.stderr.count("\n") == 1 and "not a regular file" in res.stderr, res.stderr


def test_no_more_than_the_limit_plus_one_byte_is_read(tmp_path, monkeypatch):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_FILE_BYTES + 10))
    with pytest.raises(SpecError, match=f"is {MAX_FILE_BYTES + 10} bytes; at most {MAX_FILE_BYTES}"):
        load(big)
    # a file that grows after its stat (the size said small): the read stops at limit + 1
    asked = []
    real_read = os.read
    monkeypatch.setattr(boundedread.os, "fstat", lambda fd: os.stat_result((0o100644,) + (0,) * 9))
    monkeypatch.setattr(boundedread.os, "read", lambda fd, n: asked.append(n) or real_read(fd, n))
    with pytest.raises(boundedread.TooLargeError):
        boundedread.read_bytes(big, 100)
    assert sum(min(n, 101) for n in asked) <= 101 and max(asked) <= 101


def test_a_regular_file_reads_whole(tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text("name: x\n")
    assert boundedread.read_bytes(f, 8) == b"name: x\n"
    with pytest.raises(boundedread.TooLargeError):
        boundedread.read_bytes(f, 7)


def test_a_fifo_is_never_opened(fifo):
    # opening a FIFO for reading blocks until a writer comes: a writer that never comes
    # must not be needed (the open would hang the test; the stat refuses first)
    done = threading.Event()

    def read() -> None:
        with pytest.raises(boundedread.NotRegularError):
            boundedread.read_bytes(fifo, 10)
        done.set()
    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(30)
    assert done.is_set()

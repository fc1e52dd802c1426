"""`rocelab perftest` engine <-> engine on the 2x4 Clos: perftest's exchange on TCP 18515,
its output parsed back, exit codes."""

from __future__ import annotations

import json

import pytest

from emulator.errors import ExitCode
from emulator.perftest import report

from .conftest import UNNUM, cli

LAB = UNNUM  # conftest's clos_unnumbered: the session's leftover check covers it


@pytest.fixture(scope="module")
def fabric(clos_unnumbered):
    return clos_unnumbered


def perftest(*args: str, check: bool = True):
    return cli("perftest", LAB, *args, check=check, timeout=120)


@pytest.mark.parametrize("test,args", [
    ("write_bw", ["-n", "300"]), ("read_bw", ["-n", "200", "-q", "2"]),
    ("send_bw", ["-n", "300", "-s", "4096"]), ("write_lat", ["-n", "200"]),
])
def test_engine_to_engine(fabric, test, args):
    res = perftest(test, "--src", "prefill1", "--dst", "decode1", *args)
    rows = report.parse(res.stdout)
    assert len(rows) == 1, res.stdout
    row = rows[0]
    if test.endswith("_bw"):
        assert isinstance(row, report.BwRow) and row.bw_avg > 0 and row.msg_rate > 0
        assert row.size == (4096 if test == "send_bw" else 65536)
    else:
        assert isinstance(row, report.LatRow) and 0 < row.t_min <= row.t_typical <= row.t_max
    assert " #bytes" in res.stdout and res.stdout.rstrip().endswith("-" * 87)


def test_json_and_all_sizes_duplex(fabric):
    res = perftest("write_bw", "--src", "prefill2", "--dst", "decode2", "-a", "-b", "-n", "5",
                   "--json")
    out = json.loads(res.stdout)
    sizes = [r["size"] for r in out["client"]["rows"]]
    assert sizes == [1 << i for i in range(1, 24)]
    assert len(out["server"]["rows"]) == 23  # -b: the server runs and prints every size too
    assert out["client"]["peer"] == fabric.plan.node("decode2").address


def test_errors_are_one_line(fabric):
    res = perftest("write_bw", "--src", "prefill1", check=False)  # a bad command line, as in docs/cli.md
    assert res.returncode == ExitCode.USAGE and len(res.stderr.strip().splitlines()) == 1
    res = perftest("write_bw", "--src", "prefill1", "--dst", "prefill1", check=False)
    assert res.returncode == ExitCode.USAGE and "same host" in res.stderr
    res = perftest("write_bw", "--src", "prefill1", "--dst", "decode1", "-q", "0", check=False)
    assert res.returncode == ExitCode.USAGE and res.stderr.count("\n") == 1 and "-q" in res.stderr
    res = perftest("bogus_bw", "--src", "prefill1", "--dst", "decode1", check=False)
    assert res.returncode == ExitCode.USAGE and res.stderr.count("\n") == 1
    res = perftest("write_bw", "--src", "nosuch", "--dst", "decode1", check=False)
    assert res.returncode == ExitCode.NOT_FOUND

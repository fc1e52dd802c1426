"""perftest's output: the 4.5-0.17 format strings, their parser, and the figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.errors import RocelabError
from emulator.perftest import report
from emulator.perftest.exchange import Test as PerfTest
from emulator.perftest.session import Options

FIXTURES = Path(__file__).parents[2] / "fixtures" / "perftest"


def test_bw_row_is_report_fmt():
    # REPORT_FMT " %-7lu    %-10" PRIu64 "       %-7.2lf            %-7.2lf\t\t   %-7.6lf" + "\n"
    row = report.bw_row(report.BwRow(65536, 5000, 2743.21, 2740.87, 0.043854))
    assert row == " 65536      5000             2743.21            2740.87\t\t   0.043854\n"


def test_lat_row_is_report_fmt_lat():
    row = report.lat_row(report.LatRow(2, 1000, 1.5, 10.2, 2.0, 2.1, 0.3, 4.0, 9.9))
    assert row == (" 2       1000          1.50           10.20        2.00     \t       2.10        "
                   "\t0.30   \t\t4.00    \t\t9.90   \n")


def test_headers_are_perftests():
    assert report.header(PerfTest.WRITE_BW).splitlines()[1] == (
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
    assert report.header(PerfTest.WRITE_LAT).splitlines()[1] == (
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
        "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
    assert report.RESULT_LINE == "-" * 87 + "\n"


def test_parse_real_perftest_output():
    rows = report.parse((FIXTURES / "ib_write_bw-server.txt").read_text())
    assert rows == [report.BwRow(65536, 5000, 112.35, 111.87, 0.00179)]


@pytest.mark.parametrize("row", [
    report.BwRow(2, 5000, 1.5, 1.25, 0.655),
    report.BwRow(8388608, 100, 2743.21, 2740.87, 0.000327),
    report.LatRow(2, 1000, 1.5, 10.2, 2.0, 2.1, 0.3, 4.0, 9.9),
    report.LatDurRow(2, 123456, 3.25, 153846.15),
])
def test_parse_round_trips_our_rows(row):
    text = (report.header(PerfTest.WRITE_BW) if isinstance(row, report.BwRow)
            else report.header(PerfTest.WRITE_LAT, isinstance(row, report.LatDurRow)))
    line = report.bw_row(row) if isinstance(row, report.BwRow) else report.lat_row(row)
    assert report.parse(text + line + report.RESULT_LINE) == [row]


def test_bw_figures_as_perftest_computes_them():
    # 4 messages of 1 MiB: posted at 0, completions every 0.25 s -> 4 MiB in 1 s
    posted = [0.0, 0.0, 0.0, 0.0]
    completed = [0.25, 0.5, 0.75, 1.0]
    row = report.bw_figures(1 << 20, posted, completed, cq_mod=1)
    assert row.iters == 4 and row.bw_avg == pytest.approx(4.0) and row.msg_rate == pytest.approx(4e-6)
    assert row.bw_peak == pytest.approx(4.0)  # the best window: (1.0 - 0) / 4 per message


def test_lat_figures_drop_the_tail_and_halve_round_trips():
    posted = [i * 10e-6 for i in range(12)] + [200e-6, 400e-6]  # 11 x 10 us, then 2 slow ones
    row = report.lat_figures(2, posted, rtt_factor=2)
    assert row.t_min == pytest.approx(5.0) and row.t_typical == pytest.approx(5.0)
    assert row.iters == 14


@pytest.mark.parametrize("kw,match", [
    ({"qps": 0}, "-q"), ({"size": 1 << 24}, "-s"), ({"iters": 2, "test": PerfTest.WRITE_LAT}, "-n"),
    ({"duration": 5, "run_all": True}, "-D"), ({"duplex": True, "test": PerfTest.READ_LAT}, "-b"),
])
def test_bad_options_are_one_line_errors(kw, match):
    with pytest.raises(RocelabError, match=match):
        Options(**({"test": PerfTest.WRITE_BW} | kw))


def test_options_defaults_follow_perftest():
    assert Options(PerfTest.WRITE_BW).n_iters == 5000 and Options(PerfTest.READ_BW).n_iters == 1000
    assert Options(PerfTest.SEND_BW).msg_size == 65536 and Options(PerfTest.SEND_LAT).msg_size == 2
    assert Options(PerfTest.WRITE_BW).depth == 128 and Options(PerfTest.WRITE_LAT).depth == 1
    o = Options(PerfTest.READ_BW, size=4096, qps=2, duplex=True)
    assert Options.from_json(o.to_json()) == o

"""Run reports from synthetic results: every picture is drawn, non-trivial, and the
reports carry the headline numbers in wall and real-equivalent time."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from emulator.lab import load_topology
from emulator.report import data, write
from emulator.report.data import PLOTS

PICTURES = [*PLOTS, "topology.png"]


@pytest.fixture(scope="module")
def plan():
    return load_topology("topologies/clos-2x4-cc.yaml", "rep")[1]


def _series(fn, n: int = 60, dt: float = 0.1) -> list[list[float]]:
    return [[round(i * dt, 3), fn(i)] for i in range(n)]


def _port(node: str, port: str, tc: int, peak: float, pauses: int = 0) -> dict:
    queued = _series(lambda i: peak * max(0.0, math.sin(i / 9)))
    return {"node": node, "port": port, "tc": tc, "max_queued": peak, "max_buffered": peak / 2,
            "tx_packets": 1000, "tx_bytes": 12_000_000, "ce_marked": 40, "ecn_capable": 1000,
            "rx_ce": 0, "pause_tx": pauses, "pause_rx": 0,
            "series": {"queued": queued, "buffered": queued, "tx_bytes": _series(lambda i: i * 2e5),
                       "ce_marked": _series(lambda i: i), "pause_tx": _series(
                           lambda i: min(pauses, max(0, (i - 10) // 8)))}}


def experiment() -> dict:
    flows = [{"name": f"p{k}", "src": f"prefill{k}", "dst": "decode1", "op": "write",
              "bytes": 25_165_824, "start_s": 0.0, "end_s": 5.0 + k / 10, "fct_s": 5.0 + k / 10,
              "fct_real_s": (5.0 + k / 10) / 4000, "goodput_bps": 4e7, "integrity_ok": True,
              "error": None, "retransmitted_packets": 0, "timeouts": 0, "naks_rx": 0,
              "cnps_rx": 30, "cnps_tx": 30, "spines": ["spine1"],
              "rate_series": _series(lambda i, k=k: 25e6 + 5e6 * math.sin(i / 5 + k))}
             for k in range(1, 5)]
    ports = [_port("leaf3", "decode1", 3, 2.5e6, pauses=5), _port("spine1", "leaf3", 3, 1.2e6),
             _port("spine2", "leaf3", 3, 0.9e6), _port("prefill1", "eth0", 3, 3e6)]
    return {"experiment": "incast", "lab": "rep", "dilation": 4000.0, "link_rate_bps": 100_000_000,
            "declared_speed_bps": 400_000_000_000, "flows": flows, "ports": ports,
            "events": [{"t_s": 1.5, "kind": "drain", "host": "decode1", "enabled": False}],
            "steady": {"from_s": 1.0, "to_s": 5.0, "rates_bps": {}, "jain": 0.998},
            "pfc": {"pauses": 3, "reaction_us_p50": 250.0, "reaction_us_p99": 1500.0,
                    "paused_s": {"spine1:leaf3:3": 0.8}},
            "lossless_drops": 0, "integrity_ok": True}


def _non_trivial(path: Path) -> None:
    img = mpimg.imread(path)
    assert img.shape[0] >= 300 and img.shape[1] >= 600, (path.name, img.shape)
    rgb = img[..., :3]
    ink = np.mean(np.any(rgb < 0.9, axis=-1))  # share of pixels that are not (near) white
    colours = len(np.unique((rgb * 15).astype(int).reshape(-1, 3), axis=0))
    assert ink > 0.02 and colours >= 8, (path.name, ink, colours)


def test_experiment_report_has_every_picture_and_the_numbers(tmp_path, plan):
    paths = write(tmp_path, experiment(), plan)
    names = {p.name for p in paths}
    assert set(PICTURES) | {"topology.svg", "report.md", "report.html"} <= names
    for name in PICTURES:
        _non_trivial(tmp_path / name)
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# incast on lab rep")
    assert "1.275 ms" in md  # p1: FCT 5.1 s wall = 1.275 ms real-equivalent (D = 4000)
    for name in PICTURES:
        assert f"({name})" in md
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(PICTURES)  # self-contained
    assert "src='http" not in page and "Jain" in page
    assert (tmp_path / "topology.svg").read_text().lstrip().startswith("<?xml")


def test_pictures_without_data_say_why(tmp_path, plan):
    r = experiment() | {"ports": [], "pfc": {"pauses": 0, "reaction_us_p50": None,
                                             "reaction_us_p99": None, "paused_s": {}}}
    write(tmp_path, r, plan)
    for name in PICTURES:
        assert (tmp_path / name).stat().st_size > 5000


def test_transfer_and_kv_results_make_reports(tmp_path, plan):
    qps = [{"qpn": 0x100 + i, "remote_qpn": 0x200 + i, "udp_sport": 50000 + i,
            "spine": f"spine{1 + i % 2}", "retransmitted_packets": 0, "cnps_rx": 1}
           for i in range(4)]
    transfer = {"op": "write", "src": "prefill1", "dst": "decode3", "bytes": 16 << 20,
                "duration_s": 1.4, "setup_s": 0.02, "handoff_s": 1.42, "goodput_gbps": 0.096,
                "integrity_ok": True, "retransmitted_packets": 0, "naks_rx": 0, "timeouts": 0,
                "qps": qps, "kind": "transfer", "lab": "rep", "dilation": 4000.0,
                "link_rate_bps": 100_000_000, "declared_speed_bps": 4e11, "recorded_s": 1.5,
                "flows": [{"name": "prefill1 -> decode3", "src": "prefill1", "dst": "decode3",
                           "rate_series": _series(lambda i: 9e7, 14)}],
                "ports": [_port("leaf1", "spine1", 3, 1e6)], "pfc": {"pauses": 0, "paused_s": {}}}
    write(tmp_path / "t", transfer, plan)
    assert "355.0 us" in (tmp_path / "t" / "report.md").read_text()  # handoff real-equivalent
    requests = [transfer | {"request": i, "handoff_s": 1.0 + i / 10} for i in range(6)]
    kv = {"requests": requests, "sizing": "Llama-3-8B ...", "kind": "kv", "lab": "rep",
          "aggregate": {"transfers": 6, "bytes": 6 << 24, "wall_s": 3.0, "goodput_gbps": 0.27,
                        "handoff_p50_s": 1.2, "handoff_p99_s": 1.5, "handoff_max_s": 1.5,
                        "integrity_ok": True, "retransmitted_packets": 0, "naks_rx": 0,
                        "timeouts": 0},
          **{k: transfer[k] for k in ("dilation", "link_rate_bps", "declared_speed_bps",
                                      "flows", "ports", "pfc")}}
    write(tmp_path / "kv", kv, plan)
    d = data.load(json.loads(json.dumps(kv)))
    assert d.latencies == [1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    assert d.spine_qps == {"spine1": 12, "spine2": 12}
    for name in PICTURES:
        if name != "pause_timeline.png":  # no pauses in these results: a text-only picture
            _non_trivial(tmp_path / "kv" / name)


def test_topology_colours_the_hottest_links(plan):
    from emulator.report.topology import utilisation
    load = {("leaf3", "decode1"): 50e6, ("spine1", "leaf3"): 25e6}
    util, what = utilisation(plan, load, duration_s=8.0)
    by_name = {(link.a, link.b): u for link, u in util.items()}
    assert by_name[("leaf3", "decode1")] == pytest.approx(0.5)  # 400 Mbit over 8 s at 100 Mbit/s
    assert by_name[("leaf3", "spine1")] == pytest.approx(0.25)
    assert "share of line rate" in what


def test_progress_from_many_threads_is_binned_before_rates():
    from emulator.experiment.series import rates
    from emulator.report.record import binned
    clumped = [(0.0, 0), (0.1, 10), (0.1001, 20), (0.5, 50), (0.5002, 60), (1.0, 100)]
    bins = binned(clumped, 0.25)
    assert [t for t, _ in bins] == [0.0, 0.25, 0.5, 0.75, 1.0] and bins[-1] == (1.0, 100)
    per_bin = [bps for _, bps in rates(bins)]  # 100 bytes in 1 s: 800 bit/s on average
    assert 0.7 * 800 < min(per_bin) and max(per_bin) < 1.3 * 800, per_bin  # 0.1 ms clump: 800k


def test_kv_on_a_congestion_lab_has_one_flow_per_sender(plan):
    from emulator.report.record import Recorder
    rec = Recorder(plan)
    rec.elapsed = 6.0
    rec.ports = [_port(h, "eth0", 3, 1e6) for h in ("prefill1", "prefill2")]
    r = rec.results("kv", {"requests": []}, {"name": "all", "src": "x", "dst": "y"},
                    [("prefill1", "decode1"), ("prefill2", "decode1"), ("prefill1", "decode2")])
    assert [(f["name"], f["dst"]) for f in r["flows"]] == [("prefill1 (port)", "decode1,decode2"),
                                                          ("prefill2 (port)", "decode1")]
    assert r["flows"][0]["rate_series"][0][1] == pytest.approx(2e5 * 8 / 0.1)
    assert r["recorded_s"] == 6.0 and r["kind"] == "kv" and r["dilation"] == 4000


def test_graph_command_needs_no_lab(tmp_path):
    from click.testing import CliRunner

    from emulator.cli import main
    runner = CliRunner()
    res = runner.invoke(main, ["graph", "topologies/clos-2x4.yaml", "-o", str(tmp_path / "f.svg")])
    assert res.exit_code == 0, res.output
    assert "<text" in (tmp_path / "f.svg").read_text()  # labels stay text in SVG
    res = runner.invoke(main, ["graph", "topologies/clos-2x4.yaml", "-o", str(tmp_path / "f.jpg")])
    assert res.exit_code == 1 and ".png or .svg" in res.output


def test_recorded_interface_bytes_colour_links_and_spread_on_plain_labs():
    r = experiment() | {"ports": [], "link_bytes": {"spine1:leaf3": 3e6, "spine2:leaf3": 1e6,
                                                    "leaf3:decode1": 4e6}}
    d = data.load(r)
    assert d.link_load()[("leaf3", "decode1")] == 4e6
    assert d.spine_bytes == {"spine1": 3e6, "spine2": 1e6}


INCAST = Path(__file__).parent / "fixtures" / "report" / "incast-results.json"


@pytest.fixture(scope="module")
def incast() -> dict:
    """results.json of `rocelab run experiments/incast.yaml` on the reference machine, trimmed
    (sampled ports dropped, rates rounded to whole bit/s): four flows of 40 MiB into decode1
    at ~20-25 Mbit/s each on 100 Mbit/s links, Jain 1.000, the bottleneck ~97 % busy."""
    return json.loads(INCAST.read_text())


def test_binning_a_real_run_makes_whole_bins_only(incast):
    for f in incast["flows"]:
        recorded = [tuple(x) for x in f["rate_series"]]
        cumulative, step = data.cumulative(recorded), data.bin_step(recorded)
        bins = data.binned(cumulative, step)
        edges = [t for t, _ in bins]
        widths = [b - a for a, b in zip(edges, edges[1:])]
        assert len(bins) > 100 and min(widths) >= step - 1e-3, (f["name"], min(widths), step)
        assert edges[0] == pytest.approx(cumulative[0][0], abs=1e-4)
        assert 0 <= cumulative[-1][0] - edges[-1] < step  # the tail shorter than a bin is left out


def test_the_rate_plot_of_a_real_run_shows_its_real_rates(incast):
    from emulator.report import plots
    d = data.load(incast)
    link = incast["link_rate_bps"]
    recorded = {f["name"]: f for f in incast["flows"]}
    fig = plots.flow_rates_figure(d)
    try:
        ax = fig.axes[0]
        lines = {ln.get_label().split()[0]: ln for ln in ax.get_lines() if "->" in ln.get_label()}
        assert sorted(lines) == ["p1", "p2", "p3", "p4"]
        peak = max(max(ln.get_ydata()) for ln in lines.values())  # Mbit/s
        assert 20 < peak < link / 1e6, peak  # once a 0.3 ms last bin plotted 200-800 Mbit/s
        assert ax.get_ylim()[1] <= link / 1e6 * 1.2  # the axis is scaled to the link, not a spike
    finally:
        plots.plt.close(fig)
    steady = incast["steady"]
    for f in d.flows:
        step = data.bin_step([tuple(x) for x in recorded[f.name]["rate_series"]])
        times = [t for t, _ in f.series]
        assert min(b - a for a, b in zip(times, times[1:])) >= step - 1e-3, f.name
        # in the steady state every bin is near the flow's mean: no spikes, no emptied bins
        mean = steady["rates_bps"][f.name]
        inside = [r for t, r in f.series if steady["from_s"] + step <= t <= steady["to_s"] - step]
        assert 0.6 * mean < min(inside) and max(inside) < 1.4 * mean, (f.name, inside, mean)
        # the bins carry the recorded bytes, less only the tail shorter than a bin
        carried = sum(r * (t1 - t0) for (t0, _), (t1, r) in zip(f.series, f.series[1:])) / 8
        carried += f.series[0][1] * step / 8
        sent = data.cumulative([tuple(x) for x in recorded[f.name]["rate_series"]])[-1][1]
        assert 0.99 < carried / sent <= 1.001, (f.name, carried, sent)


def test_a_series_shorter_than_one_bin_is_one_bin_and_a_sliver_is_left_out():
    assert data.binned([(0.0, 0), (0.05, 10)], 0.25) == [(0.0, 0), (0.05, 10)]
    assert data.binned([(0.0, 0), (0.25, 10), (0.2503, 11)], 0.25) == [(0.0, 0), (0.25, 10)]
    assert data.binned([(1.0, 5)], 0.25) == [(1.0, 5)]


def test_the_docs_quote_the_numbers_of_the_run_they_picture():
    """`make docs-images` redraws docs/images/ and writes that run's numbers; the prose
    around the pictures must be updated with them."""
    n = json.loads(Path("docs/images/incast-numbers.json").read_text())
    busy = f"{n['bottleneck_utilisation'] * 100:.1f} %"
    for doc in ("README.md", "docs/telemetry.md"):
        text = " ".join(Path(doc).read_text().split())
        assert busy in text and f"Jain's index is {n['jain']:.3f}" in text, (doc, busy, n["jain"])

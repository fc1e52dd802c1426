"""The exporter on captured inputs: golden exposition, naming rules, and what each
collector makes of a real lab's raw data (clos-2x4-cc during a 4-to-1 incast).

Fixtures: `rocelab metrics LAB --capture tests/unit/fixtures/metrics/clos-2x4-cc`
(taken while `rocelab kv` ran 4 prefill hosts into decode1). The golden
exposition is rewritten by `make golden` (ROCELAB_UPDATE_GOLDEN=1).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from emulator.errors import RocelabError
from emulator.metrics.collectors.engine import QP_COUNTERS
from emulator.metrics.exporter import Listen, exposition, reference_exposition
from emulator.metrics.model import Family, Kind
from emulator.metrics.scrape import Outcome, build, load_capture

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"
CAPTURE = FIXTURES / "clos-2x4-cc"
GOLDEN = FIXTURES / "clos-2x4-cc.prom"
LABELS = {"lab", "node", "port", "tc", "qp", "peer", "collector", "topology", "addressing",
          "spines", "leaves", "hosts", "flow", "src", "dst", "event", "kind", "target", "how",
          "setting", "action", "conn", "state", "ev", "plane"}
STORM = FIXTURES / "clos-2x4-cc-storm"  # histograms, flows, faults and actions (test_metrics_storm)


@pytest.fixture(scope="module")
def captured():
    plan, outcomes = load_capture(CAPTURE, source="topologies/clos-2x4-cc.yaml")
    return plan, outcomes, build(plan, outcomes, clock=lambda: 0.0)


def values(scrape, name: str) -> dict[tuple, float]:
    fam = next(f for f in scrape.families if f.name == name)
    return {tuple(sorted((k, v) for k, v in labels.items() if k != "lab")): v
            for labels, v in fam.samples}


def one(scrape, name: str, **labels: str) -> float:
    return values(scrape, name)[tuple(sorted(labels.items()))]


def test_golden_exposition(captured, golden):
    golden(str(GOLDEN), exposition(captured[2].families))  # an absolute path: kept beside the capture


def test_fast_exposition_is_byte_identical_to_prometheus_client(captured):
    families = captured[2].families
    assert exposition(families) == reference_exposition(families)
    parsed = {f.name for f in text_string_to_metric_families(exposition(families))}
    assert {"rocelab_qdisc_sent_bytes", "rocelab_bgp_sessions_established"} <= parsed


@pytest.fixture(scope="module")
def storm():
    plan, outcomes = load_capture(STORM, source="topologies/clos-2x4-cc.yaml")
    return build(plan, outcomes, clock=lambda: 0.0)


def test_names_units_and_labels_follow_the_convention(captured, storm):
    for fam in captured[2].families + storm.families:
        assert re.fullmatch(r"rocelab_[a-z]+_[a-z0-9_]+", fam.name), fam.name
        assert (fam.kind is Kind.COUNTER) == fam.name.endswith("_total"), fam.name
        assert (fam.kind is Kind.HISTOGRAM) == bool(fam.histograms) or not fam.samples, fam.name
        for labels, _ in fam.samples + fam.histograms:
            assert list(labels)[0] == "lab" and set(labels) <= LABELS, (fam.name, labels)
    with pytest.raises(ValueError):
        Family("rocelab_x_bytes", Kind.COUNTER, "a counter without _total")


def test_every_collector_succeeded_and_reports_its_duration(captured):
    scrape = captured[2]
    ok = values(scrape, "rocelab_scrape_collector_success")
    assert ok == {(("collector", c),): 1.0
                  for c in ("lab", "interface", "qdisc", "dataplane", "bgp", "engine")}
    assert set(values(scrape, "rocelab_scrape_collector_duration_seconds")) == set(ok)


def test_interface_counters_agree_across_each_host_link(captured):
    plan, _, scrape = captured
    tx = values(scrape, "rocelab_interface_tx_bytes_total")
    rx = values(scrape, "rocelab_interface_rx_bytes_total")
    for host in plan.hosts:
        sent = tx[(("node", host.name), ("port", "eth0"))]
        got = rx[(("node", host.leaf), ("port", host.name))]
        assert sent == pytest.approx(got, rel=0.01), host.name
    assert one(scrape, "rocelab_interface_up", node="leaf1", port="spine1") == 1


def test_qdisc_root_and_per_tc_classes(captured):
    scrape = captured[2]
    roce = one(scrape, "rocelab_qdisc_class_sent_bytes_total", node="leaf3", port="decode1", tc="3")
    root = one(scrape, "rocelab_qdisc_sent_bytes_total", node="leaf3", port="decode1")
    assert roce > 10_000_000 and root >= roce  # the incast's bottleneck, in the RoCE class
    assert one(scrape, "rocelab_qdisc_class_dropped_packets_total", node="leaf3", port="decode1",
               tc="3") == 0  # lossless
    assert len(values(scrape, "rocelab_qdisc_sent_bytes_total")) == 32  # every port once


def test_dataplane_marks_pauses_and_queues(captured):
    scrape = captured[2]
    assert one(scrape, "rocelab_dataplane_ce_marked_packets_total",
               node="leaf3", port="decode1", tc="3") > 0
    assert one(scrape, "rocelab_dataplane_queued_max_bytes", node="leaf3", port="decode1",
               tc="3") > 150_000  # above Kmin
    assert one(scrape, "rocelab_pfc_pauses_total") > 0
    assert 0 < one(scrape, "rocelab_pfc_reaction_p50_seconds") < 0.1
    assert all(v >= 0 for v in values(scrape, "rocelab_dataplane_queued_bytes").values())


def test_bgp_sessions_and_ecmp(captured):
    plan, _, scrape = captured
    est = values(scrape, "rocelab_bgp_sessions_established")
    assert est == values(scrape, "rocelab_bgp_sessions_configured")
    assert {k[0][1]: v for k, v in values(scrape, "rocelab_bgp_ecmp_min_paths").items()} == {
        n.name: (2.0 if n.name.startswith("leaf") else 1.0) for n in plan.routers}
    assert one(scrape, "rocelab_bgp_session_up", node="leaf1", port="spine2") == 1
    assert one(scrape, "rocelab_bgp_prefixes_received", node="leaf1") > 0


def test_engine_qps_dcqcn_and_transfers(captured):
    scrape = captured[2]
    rates = values(scrape, "rocelab_qp_dcqcn_rate_bits_per_second")
    senders = {k: v for k, v in rates.items() if dict(k)["node"].startswith("prefill")}
    assert len(senders) == 8 and len(rates) == 16  # 4 senders x 2 QPs, and their peers
    assert max(senders.values()) < 100e6  # DCQCN cut every sender below line rate
    assert all(0 <= a <= 1 for a in values(scrape, "rocelab_qp_dcqcn_alpha_ratio").values())
    assert sum(values(scrape, "rocelab_qp_cnps_received_total").values()) > 0
    transfers = values(scrape, "rocelab_engine_transfer_size_bytes")
    assert {dict(k)["peer"] for k in transfers} == {"decode1"} and len(transfers) == 4
    assert one(scrape, "rocelab_engine_up", node="decode1") == 1


def test_a_failed_collector_costs_only_its_own_metrics(captured):
    plan, outcomes, _ = captured
    broken = dict(outcomes, bgp=Outcome(error="VtyError: no bgpd"),
                  engine=Outcome(raw={"prefill1": {"event": "stats", "qps": "nonsense"}}))
    scrape = build(plan, broken, clock=lambda: 0.0)
    ok = values(scrape, "rocelab_scrape_collector_success")
    assert ok[(("collector", "bgp"),)] == 0 and ok[(("collector", "engine"),)] == 0
    assert ok[(("collector", "qdisc"),)] == 1
    assert not any(f.name.startswith(("rocelab_bgp_", "rocelab_qp_")) for f in scrape.families)
    assert "parse: " in broken["engine"].error


def test_every_metric_is_documented(captured, storm):
    doc = Path("docs/telemetry.md").read_text()
    patterns = {f"rocelab_{scope}_{name}_total" for scope in ("engine_qp", "flow")
                for name, _ in QP_COUNTERS.values()}  # documented as patterns
    missing = [f.name for f in captured[2].families + storm.families
               if f"`{f.name}`" not in doc and f.name not in patterns]
    assert not missing, f"docs/telemetry.md lacks {missing}"
    assert "`rocelab_engine_qp_<counter>_total`" in doc and "`rocelab_flow_<counter>_total`" in doc


FINDING_KINDS = ("pause-storm", "ecn-off", "dcqcn-off-host", "ecmp-collision", "congested-spine",
                 "routing", "gray-link", "lossless-drops", "mtu-mismatch")  # rocelab diagnose's


def dashboard_exprs(dash: dict) -> list[str]:
    """Every PromQL expression of the dashboard: panels' targets and annotations."""
    return ([t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
            + [a["expr"] for a in dash["annotations"]["list"]])


def test_grafana_dashboard_uses_only_exported_metrics(captured, storm):
    dash = json.loads(Path("docs/grafana-dashboard.json").read_text())
    known = {f.name for f in captured[2].families + storm.families}
    known |= {f"{f.name}_{s}" for f in storm.families if f.kind is Kind.HISTOGRAM
              for s in ("bucket", "count", "sum")}
    exprs = dashboard_exprs(dash)
    used = {m for e in exprs for m in re.findall(r"rocelab_[a-z0-9_]+", e)}
    assert len(exprs) >= 20 and used and used <= known, used - known
    assert {"rocelab_pfc_reaction_seconds_bucket", "rocelab_kv_handoff_seconds_bucket",
            "rocelab_transfer_duration_seconds_bucket"} <= used
    assert all("histogram_quantile" in e for e in exprs if "_bucket" in e)
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    titles = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert titles == ["Fabric overview", "Hottest queues", "ECN and PFC", "Queue pairs", "Flows",
                      *(f"diagnose: {k}" for k in FINDING_KINDS)]
    rows = [i for i, p in enumerate(dash["panels"]) if p["type"] == "row"] + [len(dash["panels"])]
    for a, b in zip(rows[5:], rows[6:]):  # each finding: 1-3 panels
        assert 1 <= b - a - 1 <= 3, dash["panels"][a]["title"]
    notes = {a["expr"] for a in dash["annotations"]["list"]}
    assert notes == {'rocelab_fault_active{lab="$lab"}', 'rocelab_action_active{lab="$lab"}'}
    y = [(p["gridPos"]["y"], p["gridPos"]["x"]) for p in dash["panels"]]
    assert y == sorted(y)  # laid out top to bottom, as Grafana reads them


def test_listen_addresses():
    assert Listen.parse("127.0.0.1:9464") == Listen("127.0.0.1", 9464)
    assert Listen.parse("[::1]:0") == Listen("::1", 0)
    for bad in ("9464", "localhost:9464", "127.0.0.1:http", "127.0.0.1:70000"):
        with pytest.raises(RocelabError, match="--listen"):
            Listen.parse(bad)

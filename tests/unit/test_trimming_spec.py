"""congestion.mrc_dscp and congestion.trimming: defaults, what the dataplane is given, and
each refusal as one line naming the field (a lossless class is never trimmed)."""

from __future__ import annotations

import struct

import pytest

from emulator.congestion.maps import CFG, NTC, pack_cfg, peer_faces_host
from emulator.errors import SpecError
from emulator.plan import compile_plan
from emulator.plan.congestion import CNP_TC, MRC_TC, ROCE_TC
from emulator.spec import parse


def plan_of(congestion: dict):
    data = {"name": "lab", "congestion": {"enabled": True, **congestion}}
    return compile_plan(parse(data, "t.yaml"), "t.yaml")


def test_mrc_data_has_its_own_lossy_class_and_trimming_is_off_by_default():
    cp = plan_of({}).congestion
    assert cp.mrc_dscp == 18 and cp.dscp_tc()[18] == MRC_TC == 2
    assert cp.trim is None and 11 not in cp.dscp_tc()


def test_defaults_when_enabled():
    cp = plan_of({"trimming": {"enabled": True}}).congestion
    t = cp.trim
    assert (t.tcs, t.size, t.dscp, t.tc) == ((2,), 128, 11, 6)
    assert t.threshold == cp.buffer_bytes // 2 == 2_000_000
    assert cp.dscp_tc()[11] == CNP_TC  # a trimmed packet rides the priority class every hop


def test_given_values():
    cp = plan_of({"buffer": "8MB", "mrc_dscp": 20, "trimming": {
        "enabled": True, "classes": [0, 2], "threshold": "500KB", "size": 256, "dscp": 5}}).congestion
    assert (cp.trim.tcs, cp.trim.threshold, cp.trim.size, cp.trim.dscp) == ((0, 2), 500_000, 256, 5)
    assert cp.dscp_tc()[20] == MRC_TC


def _cfg(plan, node: str, port: str) -> tuple[int, ...]:
    n = plan.node(node)
    p = n.interface(port)
    peer = plan.node(p.peer).interface(p.peer_ifname)
    return CFG.unpack(pack_cfg(plan, n, peer.port_id, peer_faces_host(plan, p)))


def test_switch_ports_get_the_trim_config_hosts_do_not():
    plan = plan_of({"trimming": {"enabled": True, "threshold": "1MB"}})
    leaf = plan.node("leaf1")
    down = next(p for p in leaf.interfaces if plan.node(p.peer).is_router is False)
    up = next(p for p in leaf.interfaces if plan.node(p.peer).is_router)
    tail = 4 + 5 * NTC  # peer_host, size, dscp, tc, limit, threshold[NTC]
    d = _cfg(plan, "leaf1", down.name)[tail:]
    assert d[:5] == (1, 128, 11, 6, plan.congestion.buffer_bytes)
    assert d[5:] == tuple(1_000_000 if tc == 2 else 0 for tc in range(NTC))
    assert _cfg(plan, "leaf1", up.name)[tail] == 0  # faces a spine: not the last hop
    host = plan.node(down.peer)
    assert _cfg(plan, host.name, host.interfaces[0].name)[tail + 1:] == (0,) * (4 + NTC)


def test_without_trimming_the_cfg_tail_is_zero():
    plan = plan_of({})
    port = plan.node("leaf1").interfaces[0]
    assert _cfg(plan, "leaf1", port.name)[4 + 5 * NTC + 1:] == (0,) * (4 + NTC)
    assert struct.calcsize("=4I8I8I8I8I8I5I8I") == CFG.size


@pytest.mark.parametrize(("congestion", "field", "message"), [
    ({"trimming": {"enabled": True, "classes": [3]}}, "congestion.trimming.classes",
     "TC 3 is the lossless RoCE class: it keeps PFC"),
    ({"trimming": {"enabled": True, "classes": [2, 6]}}, "congestion.trimming.classes",
     "TC 6 is not a lossy class with a queue; allowed: 0, 2"),
    ({"trimming": {"enabled": True, "classes": []}}, "congestion.trimming.classes",
     "must name at least one lossy class"),
    ({"trimming": {"enabled": True, "threshold": "4MB"}}, "congestion.trimming.threshold",
     "at least 64KiB below congestion.buffer"),
    ({"trimming": {"enabled": True, "threshold": "lots"}}, "congestion.trimming.threshold",
     "size like"),
    ({"trimming": {"enabled": True, "size": 63}}, "congestion.trimming.size",
     "greater than or equal to 64"),
    ({"trimming": {"enabled": True, "size": 1501}}, "congestion.trimming.size",
     "less than or equal to 1500"),
    ({"trimming": {"enabled": True, "dscp": 26}}, "congestion.trimming.dscp",
     "must differ from roce_dscp"),
    ({"trimming": {"enabled": True, "dscp": 18}}, "congestion.trimming.dscp",
     "must differ from"),
    ({"trimming": {"enabled": True, "priority_tc": 3}}, "congestion.trimming.priority_tc",
     "must be 6"),
    ({"mrc_dscp": 48}, "congestion.mrc_dscp", "must differ from roce_dscp"),
    ({"mrc_dscp": 64}, "congestion.mrc_dscp", "less than or equal to 63"),
    ({"trimming": {"enabled": True, "sizes": 1}}, "congestion.trimming", "unknown field"),
])
def test_bad_values_are_one_line_errors_naming_the_field(congestion, field, message):
    with pytest.raises(SpecError) as e:
        plan_of(congestion)
    text = str(e.value)
    assert "\n" not in text and field in text and message in text, text


def test_trimming_needs_the_congestion_plane():
    data = {"name": "lab", "congestion": {"trimming": {"enabled": True}}}
    with pytest.raises(SpecError, match="congestion.trimming.enabled: needs congestion.enabled"):
        compile_plan(parse(data, "t.yaml"), "t.yaml")


def test_lossless_class_is_untouched_by_trimming():
    cp = plan_of({"trimming": {"enabled": True}}).congestion
    assert ROCE_TC not in cp.trim.tcs and cp.dscp_tc()[cp.roce_dscp] == ROCE_TC

"""bgp.aggregate_hosts on a real FRR fabric (issue 26): each leaf announces its /24, the
other routers route it at full ECMP width with no host /31 of another leaf, the hosts reach
each other, and the /24 outlives one host link but not the leaf's last."""

from __future__ import annotations

import pytest

from emulator import converge

from .conftest import PREFIX, make_lab, poll

TOPOLOGY = """name: agg
spines: 2
leaves: 4
addressing: {addressing}
hosts: {{per_leaf: 2}}
bgp: {{aggregate_hosts: true}}
"""


@pytest.fixture(scope="module", params=["unnumbered", "numbered"])
def agg(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("agg") / "agg.yaml"
    path.write_text(TOPOLOGY.format(addressing=request.param))
    yield from make_lab(str(path), f"{PREFIX}agg-{request.param[:3]}")


def _routes(lab, node: str) -> dict[str, int]:
    return converge.route_widths(lab.plan.node(node))


def test_leaves_learn_slash24s_at_full_width_and_no_remote_slash31(agg):
    st = agg.status()
    assert st["converged"] and st["reachability"]["ok"] and st["reachability"]["full_mesh"]
    have = _routes(agg, "leaf1")
    assert {p: have.get(p) for p in ("10.2.1.0/24", "10.2.2.0/24", "10.2.3.0/24")} == \
        dict.fromkeys(("10.2.1.0/24", "10.2.2.0/24", "10.2.3.0/24"), 2)
    remote = [p for p in have if p.endswith("/31") and not p.startswith("10.2.0.")
              and p.startswith("10.2.")]
    assert remote == []  # the other leaves' host /31s stay at home
    spine = {p: w for p, w in _routes(agg, "spine1").items() if p.startswith("10.2.")}
    assert spine == {f"10.2.{i}.0/24": 1 for i in range(4)}


def test_the_slash24_stays_while_one_host_link_is_up_and_goes_with_the_last(agg):
    leaf4_hosts = [i.name for i in agg.plan.node("leaf4").interfaces if not i.fabric]
    try:
        agg.exec("leaf4", "ip", "link", "set", leaf4_hosts[0], "down")
        poll(lambda: converge.check_fib(agg.plan).ok, what="fib settled")  # nothing to move
        assert _routes(agg, "leaf1").get("10.2.3.0/24") == 2
        agg.exec("leaf4", "ip", "link", "set", leaf4_hosts[1], "down")
        poll(lambda: "10.2.3.0/24" not in _routes(agg, "leaf1"), what="leaf4's /24 withdrawn")
    finally:
        for port in leaf4_hosts:
            agg.exec("leaf4", "ip", "link", "set", port, "up")
    poll(lambda: _routes(agg, "leaf1").get("10.2.3.0/24") == 2, what="leaf4's /24 back")
    out = agg.exec("decode3", "ping", "-c", "1", "-W", "2", agg.plan.node("prefill1").address)
    assert "1 received" in out.stdout
    assert agg.status()["converged"]

"""Link rules: a gray link (loses or corrupts while up and routed) and an MTU mismatch."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..evidence import Evidence
from .common import Finding, Severity, affected, directions, flow_links, item

ROCE_HEADERS = 20 + 8 + 12 + 4  # IPv4 + UDP + BTH + ICRC: an IP packet of RoCE payload + these
LOSS_MIN_PACKETS = 200  # a link direction must carry this many packets to judge its loss
LOSS_RATIO = 0.002  # 0.2 %: far above what a healthy veth loses (nothing)
LOSS_MIN_LOST = 10  # ... and this many: the two ends are read a few ms apart (in flight)
DAMAGE = ("retransmitted_packets", "naks_rx", "bad_icrc")  # per QP: it lost or got bad packets

Link = frozenset[str]
Mismatch = tuple[str, str, str, str, float, float]  # node, port, peer, peer port, MTUs


# -- gray link -----------------------------------------------------------------------


def gray_link(ev: Evidence, silent: set[Link] | None = None) -> list[Finding]:
    bad = [f for f in ev.flows if any((q.get(k) or 0) > 0 for q in f.get("qps", [])
                                      for k in DAMAGE)
           or (f.get("bad_icrc") or 0) > 0]
    suspects = _suspects(ev, bad)
    # The two ends of a link are read a few ms apart, so a link busy at either edge of
    # the window shows packets "in flight" as lost; a RoCE flow that really lost packets
    # retransmits. Counter loss counts only with retransmissions behind it: a damaged flow
    # across that link (a run), or any host retransmitting (live: paths are unknown).
    live_retx = sum(ev.by_node("rocelab_engine_qp_retransmitted_packets_total").values())
    lossy = {link: e for link, e in _lossy(ev).items()
             if any(link in flow_links(ev, f) for f in bad) or (not ev.flows and live_retx > 0)}
    out = []
    for link in sorted((set(lossy) | suspects) - (silent or set()), key=sorted):
        hurt = [f for f in bad if link in flow_links(ev, f)]
        if lossy.get(link) or hurt:
            out.append(_gray(link, lossy.get(link, []), hurt))
    return out


def _lossy(ev: Evidence) -> dict[Link, list[dict[str, Any]]]:
    """Links with a direction that lost packets between one end's tx and the other's rx."""
    tx = ev.by_port("rocelab_interface_tx_packets_total")
    rx = ev.by_port("rocelab_interface_rx_packets_total")
    lossy: dict[Link, list[dict[str, Any]]] = defaultdict(list)
    for a, ap, b, bp in directions(ev):
        sent, got = tx.get(f"{a}:{ap}"), rx.get(f"{b}:{bp}")
        if sent is None or got is None or sent < LOSS_MIN_PACKETS or got == 0:
            continue
        lost = sent - got
        if lost >= LOSS_MIN_LOST and lost / sent >= LOSS_RATIO:
            lossy[frozenset((a, b))].append(item("lost_packets", lost, a, ap, to=b,
                                                 sent=int(sent), ratio=round(lost / sent, 4)))
    return lossy


def _suspects(ev: Evidence, bad: list[dict[str, Any]]) -> set[Link]:
    """Fabric links every damaged flow crosses and no clean flow does."""
    if not bad:
        return set()
    common = set.intersection(*(flow_links(ev, f) for f in bad))
    for f in ev.flows:
        if f not in bad and f.get("qps"):
            common -= flow_links(ev, f)
    # the edge link is the flow's own NIC, not the fabric
    return {link for link in common
            if ev.kinds.get(min(link)) != "host" and ev.kinds.get(max(link)) != "host"}


def _gray(link: Link, lost: list[dict[str, Any]], hurt: list[dict[str, Any]]) -> Finding:
    a, b = sorted(link)
    retx = sum(q.get("retransmitted_packets") or 0 for f in hurt for q in f.get("qps", []))
    naks = sum(q.get("naks_rx") or 0 for f in hurt for q in f.get("qps", []))
    icrc = sum(f.get("bad_icrc") or 0 for f in hurt)
    what = "corrupts" if icrc and any((f.get("bad_icrc") or 0) > 0 for f in hurt) else "loses"
    evidence = list(lost)
    if hurt:
        evidence += [item("retransmitted_packets", retx, flows=len(hurt)),
                     item("naks_received", naks), item("bad_icrc_packets", icrc)]
    ratios = ", ".join(f"{e['ratio']:.2%} {e['node']}->{e['to']}" for e in lost)
    cause = (f"gray link {a}-{b}: it {what} packets while staying up and routed"
             + (f" ({ratios} lost)" if ratios else "")
             + (f"; {len(hurt)} flow(s) crossing it retransmitted {retx} packets, "
                f"{icrc} bad ICRC, and flows avoiding it did not" if hurt else ""))
    return Finding("gray-link", Severity.CRITICAL if lost or retx > 100 else Severity.WARNING,
                   cause, evidence, affected(hurt),
                   f"drain {a}-{b} (shut it or raise its BGP cost) and replace the "
                   "optic/cable; a RoCE flow pays a go-back-N retransmission per loss",
                   1.7, [a, b])


# -- MTU mismatch ----------------------------------------------------------------------


def mtu_mismatch(ev: Evidence) -> list[Finding]:
    need = ev.roce_mtu + ROCE_HEADERS
    out = []
    for key, links in sorted(_by_odd_end(ev, need).items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out.append(_mtu_finding(ev, key, links, need))
    return out


def _by_odd_end(ev: Evidence, need: int) -> dict[str, list[Mismatch]]:
    """Links whose ends' MTUs differ or are too small for a RoCE frame, grouped by the
    node with the smaller end (one finding for all its links), or by the link if equal."""
    mtu = ev.by_port("rocelab_interface_mtu_bytes")
    odd: dict[str, list[Mismatch]] = defaultdict(list)
    seen: set[Link] = set()
    for a, ap, b, bp in directions(ev):
        link = frozenset((a, b))
        ma, mb = mtu.get(f"{a}:{ap}"), mtu.get(f"{b}:{bp}")
        if ma is None or mb is None or link in seen or (ma == mb and ma >= need):
            continue
        seen.add(link)
        if ma == mb:
            odd[f"{a}-{b}"].append((a, ap, b, bp, ma, mb))
        else:
            odd[a if ma < mb else b].append((a, ap, b, bp, ma, mb) if ma < mb
                                            else (b, bp, a, ap, mb, ma))
    return odd


def _mtu_finding(ev: Evidence, key: str, links: list[Mismatch], need: int) -> Finding:
    drops = ev.by_port("rocelab_interface_tx_dropped_packets_total")
    small = min(min(m, t) for *_, m, t in links)
    node = links[0][0]
    peers = [lk[2] for lk in links]
    pairs = {frozenset((lk[0], lk[2])) for lk in links}
    hurt = [f for f in ev.flows if flow_links(ev, f) & pairs]
    dropped = sum(drops.get(f"{lk[2]}:{lk[3]}", 0) + drops.get(f"{lk[0]}:{lk[1]}", 0)
                  for lk in links)
    if "-" in key:
        cause = f"MTU {int(small)} on both ends of {key}"
    else:
        cause = (f"MTU mismatch: {node}'s end of {len(links)} link(s) is at "
                 f"{int(links[0][4])} while {', '.join(peers)} are at "
                 f"{int(max(t for *_, t in links))}")
    if small < need:
        cause += (f": below the {need} B a {ev.roce_mtu} B RoCE frame needs, so full "
                  "frames are dropped")
    evidence = [item("mtu_bytes", m, n, p) for n, p, *_, m, _ in links[:4]]
    evidence += [item("mtu_bytes", t, pe, pp) for _, _, pe, pp, _, t in links[:4]]
    evidence.append(item("tx_dropped_packets", dropped, node))
    return Finding("mtu-mismatch", Severity.CRITICAL if small < need else Severity.WARNING,
                   cause, evidence, affected(hurt),
                   f"set the same MTU on both ends ({node} and its peers), at least "
                   f"{need} (9000 on a RoCE fabric), or lower the RoCE path MTU",
                   3.0, [node, *peers, *[f"{lk[0]}:{lk[1]}" for lk in links]])

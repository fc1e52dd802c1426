"""The lean rtnetlink decoder and the vty client, checked against references.

The decoder reads captured kernel dumps (tests/unit/fixtures/metrics) and
must agree with pyroute2's full decoder on every field it extracts; the
vty client talks to a fake daemon speaking vtysh's framing.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from pathlib import Path

import pytest
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from emulator.metrics import netlink, vty
from emulator.metrics.scrape import decode_raw

CAPTURE = Path(__file__).parent / "fixtures" / "metrics" / "clos-2x4-cc"


def _raw(name: str) -> dict:
    return decode_raw(json.loads((CAPTURE / f"{name}.json").read_text()))


def _pyroute2(data: bytes, cls, mtype: int) -> list:
    out, off = [], 0
    while off < len(data):
        length, t = struct.unpack_from("=IH", data, off)
        if t == mtype:
            msg = cls(data[off:off + length])
            msg.decode()
            out.append(msg)
        off += (length + 3) & ~3
    return out


@pytest.mark.parametrize("node", ["spine1", "leaf3", "decode1"])
def test_links_match_pyroute2(node):
    data = _raw("interface")[node]
    ours = netlink.parse_links(data)
    ref = _pyroute2(data, ifinfmsg, 16)
    assert [link.name for link in ours] == [m.get_attr("IFLA_IFNAME") for m in ref]
    for link, msg in zip(ours, ref):
        stats = msg.get_attr("IFLA_STATS64")
        assert link.index == msg["index"]
        assert link.stats == {k: stats[k] for k in netlink.STATS64_FIELDS}
        assert link.oper_up == (msg.get_attr("IFLA_OPERSTATE") == "UP")


@pytest.mark.parametrize("node,part", [("leaf3", "qdiscs"), ("leaf3", "classes"),
                                       ("spine2", "classes"), ("prefill1", "qdiscs")])
def test_qdiscs_and_classes_match_pyroute2(node, part):
    data = _raw("qdisc")[node][part]
    ours = netlink.parse_tc(data)
    ref = _pyroute2(data, tcmsg, 36 if part == "qdiscs" else 40)
    assert len(ours) == len(ref) > 0
    for obj, msg in zip(ours, ref):
        assert (obj.index, obj.handle, obj.parent, obj.kind) == (
            msg["index"], msg["handle"], msg["parent"], msg.get_attr("TCA_KIND"))
        st = msg.get_attr("TCA_STATS2")
        zeros = dict.fromkeys(("bytes", "packets", *netlink.QUEUE_FIELDS), 0)
        basic = st.get_attr("TCA_STATS_BASIC") or zeros  # tbf's pseudo-class has empty stats
        queue = st.get_attr("TCA_STATS_QUEUE") or zeros
        assert obj.stats == {"bytes": basic["bytes"], "packets": basic["packets"],
                             **{k: queue[k] for k in netlink.QUEUE_FIELDS}}


def test_tc_indexes_and_filtering():
    data = _raw("qdisc")["leaf1"]["qdiscs"]
    names = {int(i) for i in _raw("qdisc")["leaf1"]["ifnames"]}
    assert netlink.tc_indexes(data) == names
    roots = netlink.parse_tc(data, lambda _h, parent: parent == 0xFFFFFFFF)
    assert sorted(q.index for q in roots) == sorted(names)  # one root qdisc per device


def test_truncated_input_is_not_an_error():
    data = _raw("interface")["leaf1"]
    assert len(netlink.parse_links(data[:-60])) == len(netlink.parse_links(data)) - 1
    assert netlink.parse_links(b"") == []


class FakeDaemon(threading.Thread):
    """Answers one command per connection, framed as FRR's vty does."""

    def __init__(self, path: Path, answers: dict[str, tuple[bytes, int]]):
        super().__init__(daemon=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(4)
        self.answers = answers

    def run(self) -> None:
        while True:
            conn, _ = self.server.accept()
            with conn:
                line = conn.recv(4096).rstrip(b"\0").decode()
                text, status = self.answers[line]
                for i in range(0, len(text), 7):  # in pieces, as a stream may deliver it
                    conn.sendall(text[i:i + 7])
                conn.sendall(b"\0\0\0" + bytes([status]))


def test_vty_client_reads_framed_answers(tmp_path):
    path = tmp_path / "bgpd.vty"
    FakeDaemon(path, {"show bgp json": (b'{"peers": {"spine1": {"state": "Established"}}}', 0),
                      "show nonsense": (b"% Unknown command", 1)}).start()
    assert vty.command_json(path, "show bgp json")["peers"]["spine1"]["state"] == "Established"
    with pytest.raises(vty.VtyError, match="status 1"):
        vty.command(path, "show nonsense")
    with pytest.raises(vty.VtyError):
        vty.command(tmp_path / "missing.vty", "show bgp json")

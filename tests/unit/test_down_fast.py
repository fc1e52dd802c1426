"""`down` of a big lab: the namespace tag read with one raw netlink request, only the lab's
own namespaces (named <lab>-*) asked, processes signalled at once, progress as it goes."""

from __future__ import annotations

import socket
import struct

import pytest
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from emulator import lab, neighbours, netns, nstag, procs, state
from emulator.metrics import launch as metrics_launch


def link_reply(attrs: list[tuple[str, object]], index: int = 1) -> bytes:
    """An RTM_NEWLINK message as pyroute2 encodes it (what the kernel sends back)."""
    m = ifinfmsg()
    m["family"], m["index"], m["attrs"] = 0, index, attrs
    m["header"]["type"] = nstag.RTM_NEWLINK
    m.encode()
    return bytes(m.data)


def test_the_tag_is_read_from_los_alias():
    data = link_reply([("IFLA_IFNAME", "lo"), ("IFLA_MTU", 65536), ("IFLA_IFALIAS", "rocelab:xc-big")])
    assert nstag.parse(data) == {nstag.IFLA_IFNAME: "lo", nstag.IFLA_IFALIAS: "rocelab:xc-big"}
    assert nstag.lab_of(nstag.parse(data)) == "xc-big"


@pytest.mark.parametrize("attrs", [
    [("IFLA_IFNAME", "lo")],  # untagged: someone else's namespace
    [("IFLA_IFNAME", "lo"), ("IFLA_IFALIAS", "my loopback")],
    [("IFLA_IFNAME", "eth0"), ("IFLA_IFALIAS", "rocelab:xc-big")],  # only lo's alias counts
    [("IFLA_IFNAME", "lo"), ("IFLA_IFALIAS", "rocelab:")],
])
def test_anything_else_is_no_lab(attrs):
    assert nstag.lab_of(nstag.parse(link_reply(attrs))) is None


def test_a_netlink_error_is_an_oserror():
    err = struct.pack("=IHHII", 36, nstag.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -19) + bytes(16)
    with pytest.raises(OSError) as e:
        nstag.parse(err)
    assert e.value.errno == 19


def test_the_request_asks_for_link_1():
    req = nstag.request()
    length, kind, flags, _, _ = struct.unpack_from("=IHHII", req)
    family, _, index, _, _ = nstag.IFINFOMSG.unpack_from(req, 16)
    assert (length, kind, flags, family, index) == (len(req), nstag.RTM_GETLINK, 1, socket.AF_UNSPEC, 1)


def test_only_namespaces_named_like_the_labs_are_entered(monkeypatch):
    monkeypatch.setattr(netns, "list_names", lambda: ["xc-a-leaf1", "xc-a-b-leaf1", "xc-ab-h1", "other"])
    asked: list[str] = []
    tags = {"xc-a-leaf1": "xc-a", "xc-a-b-leaf1": "xc-a-b", "xc-ab-h1": "xc-ab"}
    monkeypatch.setattr(nstag, "read", lambda n: asked.append(n) or tags.get(n))
    assert state.tagged_namespaces("xc-a-") == {"xc-a-leaf1": "xc-a", "xc-a-b-leaf1": "xc-a-b"}
    assert asked == ["xc-a-leaf1", "xc-a-b-leaf1"]  # the tag still decides: xc-a-b is another lab
    assert len(state.tagged_namespaces()) == 3


@pytest.fixture
def kernel(monkeypatch, tmp_path):
    """A lab xc-a of 3 processes and 3 namespaces (one of lab xc-a-b's beside it)."""
    seen: dict[str, list] = {"killed": [], "removed": [], "prefix": []}
    monkeypatch.setattr(lab, "require_root", lambda: None)
    monkeypatch.setattr(lab, "own_run_dir", lambda name: None)
    daemons = [{"node": "leaf1", "name": "bgpd", "pid": 12}, {"node": "leaf1", "name": "x", "pid": "?"}]
    monkeypatch.setattr(state, "read", lambda name: {"daemons": daemons})
    monkeypatch.setattr(metrics_launch, "stop", lambda name: None)
    monkeypatch.setattr(neighbours, "restore_if_idle", lambda: [])
    monkeypatch.setattr(procs, "tagged_processes", lambda: {11: "xc-a", 12: "xc-a", 13: "xc-a", 14: "xc-b"})

    def kill(pids, name, timeout_s=5.0, exited=None, at_once=()):
        seen["killed"].append(list(pids))
        seen["at_once"] = set(at_once)
        for n in range(1, len(pids) + 1):
            exited(n)
    monkeypatch.setattr(procs, "kill_pids", kill)

    def tagged(prefix=""):
        seen["prefix"].append(prefix)
        return {"xc-a-h1": "xc-a", "xc-a-leaf1": "xc-a", "xc-a-spine1": "xc-a", "xc-a-b-h1": "xc-a-b"}
    monkeypatch.setattr(state, "tagged_namespaces", tagged)
    monkeypatch.setattr(netns, "remove", lambda n: seen["removed"].append(n) or True)
    return seen


def test_down_signals_every_process_at_once_and_reports_progress(kernel):
    lines: list[str] = []
    result = lab.down("xc-a", progress=lines.append)
    assert (result.processes, result.namespaces) == (3, 3)
    assert kernel["killed"] == [[11, 12, 13]]  # one kill_pids: signal all, then one wait
    assert kernel["at_once"] == {12}  # the record's FRR daemon: SIGKILL, no orderly exit
    assert kernel["prefix"] == ["xc-a-"]
    assert sorted(kernel["removed"]) == ["xc-a-h1", "xc-a-leaf1", "xc-a-spine1"]
    assert [ln.split(",")[0] for ln in lines] == [  # the first and the last of each phase
        "down xc-a: processes: 1/3 exited (33%)", "down xc-a: processes: 3/3 exited (100%)",
        "down xc-a: namespaces: 1/3 removed (33%)", "down xc-a: namespaces: 3/3 removed (100%)"]
    assert ", in " in lines[1] and ", in " in lines[3]  # each phase's last line: how long it took

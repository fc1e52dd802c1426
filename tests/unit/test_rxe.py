"""rxe hosts without root: the cpio writer, module resolution, the spec's hosts.kind, the
agent protocol (the real agent's Session on one end of a socketpair, the host's Channel on
the other)."""

from __future__ import annotations

import contextlib
import gzip
import socket
import stat
import threading

import pytest

from emulator.errors import SpecError
from emulator.plan import compile_plan
from emulator.rxe import agent, cpio, guest
from emulator.rxe.channel import AgentError, Channel, hello
from emulator.spec import HostKind, parse


def test_cpio_round_trip_and_layout():
    entries = [cpio.Entry.dir("bin"), cpio.Entry.file("bin/x", b"abc", 0o755),
               cpio.Entry.symlink("bin/sh", "busybox"), cpio.Entry.char("dev/console", 5, 1)]
    data = cpio.archive(entries)
    assert data.startswith(b"070701") and len(data) % 4 == 0
    assert cpio.parse(data) == entries
    assert data.endswith(b"TRAILER!!!\0" + b"\0" * (-len(data) % 4)) or b"TRAILER!!!" in data[-128:]
    head = cpio.header(1, entries[1])
    assert len(head) % 4 == 0 and int(head[54:62], 16) == 3  # c_filesize
    assert stat.S_ISCHR(cpio.parse(data)[3].mode)


def test_depends_and_load_order():
    ko = b"\x7fELF...\x00license=GPL\x00depends=ib_uverbs,ib_core,udp_tunnel\x00vermagic=6.1\x00"
    assert guest.depends(ko) == ["ib_uverbs", "ib_core", "udp_tunnel"]
    assert guest.depends(b"\x00depends=\x00") == []
    deps = {"rdma_rxe": ["ib_uverbs", "ib_core"], "ib_uverbs": ["ib_core"], "ib_core": [],
            "9p": ["9pnet"], "9pnet": []}
    assert guest.load_order(["rdma_rxe", "9p"], deps) == ["ib_core", "ib_uverbs", "rdma_rxe", "9pnet", "9p"]
    with pytest.raises(guest.GuestError, match="module udp_tunnel not in the guest kernel "
                       r"\(needed by rdma_rxe\)"):
        guest.load_order(["rdma_rxe"], {"rdma_rxe": ["udp_tunnel"]})


@pytest.fixture
def fake_kernel(tmp_path, monkeypatch):
    """A guest kernel in tmp_path with one module, and a stand-in busybox."""
    k = tmp_path / "linux-image-test"
    (k / "modules").mkdir(parents=True)
    (k / "modules" / "a.ko").write_bytes(b"\0depends=\0")
    (k / "modules.order").write_text("a\n")
    (k / "wanted").write_text("\n".join(guest.WANTED) + "\n")
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"#!busybox")
    monkeypatch.setattr(guest, "BUSYBOX", busybox)
    kernel = guest.installed(tmp_path)
    assert kernel is not None
    return kernel


def test_initramfs_is_cached_by_content(tmp_path, fake_kernel):
    kernel, k = fake_kernel, tmp_path / "linux-image-test"
    first = guest.initramfs(kernel, tmp_path)
    assert guest.initramfs(kernel, tmp_path) == first  # same content, same file
    names = {e.name for e in cpio.parse(gzip.decompress(first.read_bytes()))}
    assert {"init", "bin/busybox", "lib/modules/a.ko", "modules.order", "dev/console"} <= names
    (k / "modules" / "a.ko").write_bytes(b"\0depends=\0changed")
    assert guest.initramfs(kernel, tmp_path) != first



@pytest.mark.parametrize("tamper", [b"not gzip at all", gzip.compress(b"070701 a forged archive")],
                         ids=["garbage", "forged"])
def test_a_tampered_cached_initramfs_is_rebuilt_not_booted(tmp_path, fake_kernel, tamper):
    """The cache is trusted by content: bytes swapped in under the cached name (garbage,
    or a valid gzip of another archive) are replaced by the real build before use."""
    kernel = fake_kernel
    (tmp_path / "run").mkdir()
    first = guest.initramfs(kernel, tmp_path)
    genuine = first.read_bytes()
    first.write_bytes(tamper)
    again = guest.initramfs(kernel, tmp_path)
    assert again == first and again.read_bytes() == genuine
    assert again.name == f"initramfs-{guest.unpacked_digest(again.read_bytes())[:16]}.gz"  # its own content
    first.write_bytes(tamper)
    booted = guest.initramfs(kernel, tmp_path, into=tmp_path / "run" / "initramfs.gz")
    assert booted == tmp_path / "run" / "initramfs.gz" and booted.read_bytes() == genuine

BASE = {"name": "t", "spines": 2, "leaves": 4, "hosts": {"per_leaf": 2}}


def plan_with(kind, **hosts):
    return compile_plan(parse(BASE | {"hosts": {"per_leaf": 2, "kind": kind, **hosts}}, "t.yaml"), "t.yaml")


def test_host_kinds():
    assert {h.host_kind for h in plan_with("rxe").hosts} == {HostKind.RXE}
    p = plan_with({"prefill1": "rxe", "leaf4": "rxe"})
    assert [h.name for h in p.hosts if h.host_kind is HostKind.RXE] == ["prefill1", "decode3", "decode4"]
    assert {h.host_kind for h in compile_plan(parse(BASE, "t.yaml")).hosts} == {HostKind.ENGINE}


@pytest.mark.parametrize("kind, extra, message", [
    ("vm", {}, 't.yaml: hosts.kind: must be one of \'engine\', \'rxe\' (got "vm")'),
    ({"prefill1": "qemu"}, {}, "t.yaml: hosts.kind.prefill1: must be one of 'engine', 'rxe'"),
    ({"leaf9": "rxe"}, {}, "t.yaml: hosts.kind.leaf9: names no host or leaf; hosts: prefill1"),
    ("rxe", {"dual_homed": True}, "t.yaml: hosts.kind: prefill1: an rxe host has one NIC "
     "(prefill1 has 2: dual-homed)"),
])
def test_host_kind_errors(kind, extra, message):
    with pytest.raises(SpecError) as e:
        plan_with(kind, **extra)
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


@pytest.fixture
def pair():
    """A Channel talking to the real agent's Session over a socketpair."""
    host, guest_end = socket.socketpair()
    session = agent.Session(guest_end.fileno(), agent.Jobs())

    def serve():
        lines = agent.Lines()
        while data := guest_end.recv(65536):
            for line in lines.feed(data):
                threading.Thread(target=session.handle, args=(line,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    ch = Channel(host)
    yield ch
    ch.close()
    guest_end.close()


def test_agent_protocol(pair, tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "JOBS", tmp_path / "jobs")
    assert hello(pair, deadline=__import__("time").monotonic() + 5)["pid"] > 0
    r = pair.request("run", wait_s=10, argv=["sh", "-c", "echo out; echo err >&2; exit 3"], env={})
    assert (r["rc"], r["stdout"], r["stderr"]) == (3, "out\n", "err\n")
    slow = pair.request("run", wait_s=10, argv=["sleep", "5"], env={}, timeout=0.2)
    assert slow["rc"] is None and slow["timeout"]
    job = pair.request("spawn", wait_s=10, argv=["sh", "-c", "echo bg"], env={})["job"]
    assert pair.request("wait", wait_s=10, job=job, timeout=5)["rc"] == 0
    assert pair.request("read", wait_s=10, job=job)["stdout"] == "bg\n"
    with pytest.raises(AgentError, match="unknown op 'nope'"):
        pair.request("nope", wait_s=5)


def test_agent_multiplexes_concurrent_requests(pair):
    """A slow request does not hold up a fast one: replies are matched by id."""
    results = {}
    t = threading.Thread(target=lambda: results.setdefault(
        "slow", pair.request("run", wait_s=10, argv=["sh", "-c", "sleep 0.5; echo slow"], env={})))
    t.start()
    results["fast"] = pair.request("run", wait_s=10, argv=["echo", "fast"], env={})
    assert "slow" not in results  # the fast reply came back first
    t.join()
    assert results["slow"]["stdout"] == "slow\n"


def test_lines_framing():
    lines = agent.Lines()
    assert lines.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert lines.feed(b':2}\n\n') == [b'{"b":2}']
    assert agent.encode({"x": "é"}).endswith(b"\n")


def test_a_line_over_the_cap_is_refused_and_skipped_to_its_newline():
    lines = agent.Lines(max_line=8)
    assert lines.feed(b"12345678\n") == [b"12345678"]  # exactly the cap
    with pytest.raises(agent.LineTooLong, match="longer than 8 bytes"):
        lines.feed(b"123456789")  # no newline yet, already too long: never buffered
    assert lines.feed(b"x" * 100) == [] and lines.buf == b""  # still that line: dropped
    assert lines.feed(b'tail\n{"a":1}\n') == [b'{"a":1}']  # its end, then the next message
    with pytest.raises(agent.LineTooLong):
        lines.feed(b"0123456789\n")  # a whole line over the cap
    assert lines.feed(b"ok\n") == [b"ok"]
    assert agent.Lines().max_line == agent.MAX_LINE == 16 << 20


def test_a_guest_that_never_ends_its_line_is_dropped():
    host, guest_end = socket.socketpair()
    ch = Channel(host, max_line=4096)

    def flood() -> None:
        with contextlib.suppress(OSError):  # EPIPE once the host drops us
            guest_end.sendall(b"x" * (1 << 20))
    t = threading.Thread(target=flood, daemon=True)
    t.start()
    try:
        t.join(30)
        assert not t.is_alive()  # its sendall failed: the host stopped reading, shut the socket
        ch.reader.join(30)
        assert ch.closed == "the agent sent a message longer than 4096 bytes: connection dropped"
        with pytest.raises(AgentError, match="longer than 4096 bytes: connection dropped"):
            ch.request("hello", wait_s=30)
    finally:
        ch.close()
        guest_end.close()


def test_native_path_says_which_kernels_could_give_a_namespace_its_own_rxe(tmp_path) -> None:
    from emulator.rxe.hosts import native_path

    ok, why = native_path("6.18.0-x", modules=str(tmp_path), loaded=str(tmp_path / "no"))
    assert not ok and "no rdma_rxe module" in why
    rxe = tmp_path / "6.1.0-56-amd64/kernel/drivers/infiniband/sw/rxe"
    rxe.mkdir(parents=True)
    (rxe / "rdma_rxe.ko").write_bytes(b"")
    ok, why = native_path("6.1.0-56-amd64", modules=str(tmp_path), loaded=str(tmp_path / "no"))
    assert not ok and "initial network namespace" in why
    rxe7 = tmp_path / "7.1.0/kernel/drivers/infiniband/sw/rxe"
    rxe7.mkdir(parents=True)
    (rxe7 / "rdma_rxe.ko.xz").write_bytes(b"")
    ok, why = native_path("7.1.0", modules=str(tmp_path))
    assert ok and "per-namespace" in why

"""rocelab's userspace RoCEv2 engine (Soft-RoCE is not available per namespace).

Layers, bottom up (docs/roce.md has the wire format and the rxe comparison):

- headers.py, layout.py: opcodes, AETH syndromes, declarative header layouts
- codec.py: readable codec, whole frames <-> dataclasses (tests, tools, pcaps)
- fastpath.py, icrc.py: the per-packet codec (`Segment`, `FrameBuilder`, `parse`)
- memory.py: registered regions, (va, rkey) access checks
- verbs.py, requester.py, responder.py, rc.py: the sans-IO RC queue pair
- sockfilter.py, transport.py: raw-socket I/O for one namespace
- endpoint.py: the loop tying queue pairs to a transport
- pcap.py: classic pcap read/write
"""

from emulator.roce.endpoint import Endpoint
from emulator.roce.errors import MalformedPacket, QpStateError
from emulator.roce.fastpath import FrameBuilder, Segment, parse
from emulator.roce.headers import Opcode, Syndrome, udp_source_port
from emulator.roce.icrc import check_icrc, icrc
from emulator.roce.memory import Access, MemoryRegion, MemoryTable
from emulator.roce.rc import QueuePair
from emulator.roce.transport import Transport
from emulator.roce.verbs import Completion, QpConfig, QpCounters, QpState, WcStatus, WrKind

__all__ = [
    "Access", "Completion", "Endpoint", "FrameBuilder", "MalformedPacket", "MemoryRegion",
    "MemoryTable", "Opcode", "QpConfig", "QpCounters", "QpState", "QpStateError", "QueuePair",
    "Segment", "Syndrome", "Transport", "WcStatus", "WrKind", "check_icrc", "icrc", "parse",
    "udp_source_port",
]

-- Wireshark/tshark dissector for rocelab's MRC packets (rocelab MRC encoding v1, docs/mrc.md
-- "Wire format"): RoCEv2 over UDP 4791 with BTH opcodes 0xE0-0xE5, the 16-byte MRC header
-- (MRCH) after the BTH, a RETH on data packets and the SACK/NACK extensions.
--
--   tshark -r run.pcap -X lua_script:/path/to/mrc.lua -Y mrc
--   wireshark -X lua_script:/path/to/mrc.lua run.pcap   (or copy it to ~/.local/lib/wireshark/plugins/)
--
-- It takes UDP port 4791 and hands every packet that is not MRC to Wireshark's own RoCEv2
-- dissector ("RRoCE"), so standard RoCEv2 dissects exactly as without it. A packet is MRC when
-- its BTH opcode is 0xE0-0xE5 and its MRCH version is 1. A switch-trimmed packet (MRCH flag
-- TRIMMED) is cut after its headers: its payload is partial and it has no ICRC.

local mrc = Proto("mrc", "rocelab MRC (Multipath Reliable Connection)")

local OPCODES = {
    [0xE0] = "MRC_WRITE", [0xE1] = "MRC_WRITE_IMM", [0xE2] = "MRC_SACK",
    [0xE3] = "MRC_NACK", [0xE4] = "MRC_PROBE", [0xE5] = "MRC_PROBE_REPLY",
}
local NACK_CODES = { [1] = "TRIMMED", [2] = "TRIMMED_LASTHOP", [3] = "MISSING", [4] = "ACCESS" }
local VERSION = 1
local BTH, MRCH, RETH, IMM, ICRC = 12, 16, 16, 4, 4
local EXT = { [0xE2] = 16, [0xE3] = 8, [0xE4] = 0, [0xE5] = 0 }

local f = {
    opcode = ProtoField.uint8("mrc.bth.opcode", "Opcode", base.HEX, OPCODES),
    se = ProtoField.bool("mrc.bth.se", "Solicited event", 8, nil, 0x80),
    mig = ProtoField.bool("mrc.bth.m", "MigReq", 8, nil, 0x40),
    padcnt = ProtoField.uint8("mrc.bth.padcnt", "Pad count", base.DEC, nil, 0x30),
    tver = ProtoField.uint8("mrc.bth.tver", "Header version", base.DEC, nil, 0x0F),
    pkey = ProtoField.uint16("mrc.bth.pkey", "Partition key", base.HEX),
    destqp = ProtoField.uint24("mrc.bth.destqp", "Destination connection (QP)", base.HEX),
    ackreq = ProtoField.bool("mrc.bth.ackreq", "AckReq", 8, nil, 0x80),
    psn = ProtoField.uint24("mrc.bth.psn", "PSN", base.DEC),
    version = ProtoField.uint8("mrc.version", "MRCH version", base.DEC, nil, 0xF0),
    flags = ProtoField.uint8("mrc.flags", "Flags", base.HEX, nil, 0x0F),
    trimmed = ProtoField.bool("mrc.flags.trimmed", "TRIMMED", 8, nil, 0x01),
    lasthop = ProtoField.bool("mrc.flags.lasthop", "LASTHOP", 8, nil, 0x02),
    ack_req = ProtoField.bool("mrc.flags.ack_req", "ACK_REQ", 8, nil, 0x04),
    reserved = ProtoField.bool("mrc.flags.reserved", "Reserved", 8, nil, 0x08),
    plane = ProtoField.uint8("mrc.plane", "Plane", base.DEC),
    ev = ProtoField.uint16("mrc.ev", "Entropy value (EV)", base.DEC),
    msg = ProtoField.uint32("mrc.msg", "Message number", base.DEC),
    timestamp = ProtoField.uint32("mrc.timestamp", "Timestamp (us)", base.DEC),
    msg_len = ProtoField.uint32("mrc.msg_len", "Message length", base.DEC),
    rx_timestamp = ProtoField.uint32("mrc.rx_timestamp", "Receiver timestamp (us)", base.DEC),
    probe_seq = ProtoField.uint32("mrc.probe_seq", "Probe sequence", base.DEC),
    va = ProtoField.uint64("mrc.reth.va", "Virtual address", base.HEX),
    rkey = ProtoField.uint32("mrc.reth.rkey", "Remote key", base.HEX),
    dmalen = ProtoField.uint32("mrc.reth.len", "DMA length", base.DEC),
    imm = ProtoField.uint32("mrc.imm", "Immediate data", base.HEX),
    payload = ProtoField.bytes("mrc.payload", "Payload"),
    payload_len = ProtoField.uint32("mrc.payload_len", "Payload bytes here", base.DEC),
    pad = ProtoField.bytes("mrc.pad", "Pad"),
    icrc = ProtoField.uint32("mrc.icrc", "ICRC", base.HEX),
    sack_bitmap = ProtoField.uint64("mrc.sack.bitmap", "SACK bitmap", base.HEX),
    sack_packets = ProtoField.uint16("mrc.sack.packets", "Packets since last SACK", base.DEC),
    sack_ce = ProtoField.uint16("mrc.sack.ce", "CE-marked of those", base.DEC),
    sack_echo = ProtoField.uint8("mrc.sack.echo_flags", "Echo flags", base.HEX),
    sack_echo_ce = ProtoField.bool("mrc.sack.echo_ce", "Trigger was CE-marked", 8, nil, 0x01),
    sack_trigger = ProtoField.uint24("mrc.sack.trigger_psn", "Trigger PSN", base.DEC),
    sack_cum = ProtoField.uint24("mrc.sack.cum_ack", "Cumulative ack (first PSN missing)", base.DEC),
    nack_code = ProtoField.uint8("mrc.nack.code", "NACK code", base.DEC, NACK_CODES),
    nack_cum = ProtoField.uint24("mrc.nack.cum_ack", "Cumulative ack", base.DEC),
}
mrc.fields = f

local e = {
    short = ProtoExpert.new("mrc.short", "MRC packet shorter than its headers",
                            expert.group.MALFORMED, expert.severity.ERROR),
    ev_sport = ProtoExpert.new("mrc.ev_sport", "EV differs from the UDP source port",
                               expert.group.PROTOCOL, expert.severity.WARN),
    trimmed = ProtoExpert.new("mrc.trimmed_note", "Trimmed by a switch: payload cut, no ICRC",
                              expert.group.SEQUENCE, expert.severity.NOTE),
}
mrc.experts = { e.short, e.ev_sport, e.trimmed }

local udp_port = DissectorTable.get("udp.port")
local rroce = udp_port:get_dissector(4791)  -- Wireshark's RoCEv2 dissector, for everything else
local udp_srcport = Field.new("udp.srcport")

local function is_mrc(tvb)
    if tvb:len() < BTH + 1 then return false end
    local op = tvb(0, 1):uint()
    return OPCODES[op] ~= nil and bit.rshift(tvb(BTH, 1):uint(), 4) == VERSION
end

local function add_bth(tree, tvb)
    local t = tree:add(mrc, tvb(0, BTH), "Base Transport Header")
    t:add(f.opcode, tvb(0, 1))
    t:add(f.se, tvb(1, 1)); t:add(f.mig, tvb(1, 1)); t:add(f.padcnt, tvb(1, 1)); t:add(f.tver, tvb(1, 1))
    t:add(f.pkey, tvb(2, 2))
    t:add(f.destqp, tvb(5, 3))
    t:add(f.ackreq, tvb(8, 1))
    t:add(f.psn, tvb(9, 3))
end

local EXT_FIELD = { [0xE0] = "msg_len", [0xE1] = "msg_len", [0xE2] = "rx_timestamp",
                    [0xE3] = "rx_timestamp", [0xE4] = "probe_seq", [0xE5] = "probe_seq" }

local function add_mrch(tree, tvb, op, pinfo)
    local r = tvb(BTH, MRCH)
    local t = tree:add(mrc, r, "MRC Header (MRCH)")
    t:add(f.version, r(0, 1))
    local ft = t:add(f.flags, r(0, 1))
    ft:add(f.trimmed, r(0, 1)); ft:add(f.lasthop, r(0, 1)); ft:add(f.ack_req, r(0, 1))
    ft:add(f.reserved, r(0, 1))
    t:add(f.plane, r(1, 1))
    local ev_item = t:add(f.ev, r(2, 2))
    t:add(f.msg, r(4, 4))
    t:add(f.timestamp, r(8, 4))
    t:add(f[EXT_FIELD[op]], r(12, 4))
    local sport = udp_srcport()
    if sport and (op <= 0xE1 or op >= 0xE4) and sport.value ~= r(2, 2):uint() then
        ev_item:add_proto_expert_info(e.ev_sport)
    end
    return bit.band(r(0, 1):uint(), 0x01) ~= 0
end

local function add_data(tree, tvb, op, trimmed, pinfo)
    local off = BTH + MRCH
    local t = tree:add(mrc, tvb(off, RETH), "RDMA Extended Transport Header")
    t:add(f.va, tvb(off, 8)); t:add(f.rkey, tvb(off + 8, 4)); t:add(f.dmalen, tvb(off + 12, 4))
    off = off + RETH
    if op == 0xE1 then
        tree:add(f.imm, tvb(off, IMM)); off = off + IMM
    end
    local pad = bit.rshift(bit.band(tvb(1, 1):uint(), 0x30), 4)
    local tail = trimmed and 0 or (ICRC + pad)
    local n = tvb:len() - off - tail
    if n < 0 then return false end
    tree:add(f.payload_len, n):set_generated()
    if n > 0 then tree:add(f.payload, tvb(off, n)) end
    if not trimmed then
        if pad > 0 then tree:add(f.pad, tvb(off + n, pad)) end
        tree:add(f.icrc, tvb(tvb:len() - ICRC, ICRC))
    end
    return true
end

local function add_ext(tree, tvb, op)
    local off = BTH + MRCH
    if op == 0xE2 then
        local t = tree:add(mrc, tvb(off, 16), "SACK extension")
        t:add(f.sack_cum, tvb(9, 3)):set_generated()
        t:add(f.sack_bitmap, tvb(off, 8)); t:add(f.sack_packets, tvb(off + 8, 2))
        t:add(f.sack_ce, tvb(off + 10, 2))
        t:add(f.sack_echo, tvb(off + 12, 1)):add(f.sack_echo_ce, tvb(off + 12, 1))
        t:add(f.sack_trigger, tvb(off + 13, 3))
    elseif op == 0xE3 then
        local t = tree:add(mrc, tvb(off, 8), "NACK extension")
        t:add(f.nack_code, tvb(off, 1)); t:add(f.nack_cum, tvb(off + 5, 3))
    end
    off = off + EXT[op]
    if tvb:len() - off >= ICRC then tree:add(f.icrc, tvb(tvb:len() - ICRC, ICRC)) end
end

local function info(tvb, op, trimmed)
    local s = string.format("%s PSN=%d EV=%d plane=%d msg=%d", OPCODES[op], tvb(9, 3):uint(),
                            tvb(BTH + 2, 2):uint(), tvb(BTH + 1, 1):uint(), tvb(BTH + 4, 4):uint())
    if op == 0xE3 and tvb:len() > BTH + MRCH then
        s = s .. " " .. (NACK_CODES[tvb(BTH + MRCH, 1):uint()] or "code?")
    end
    if trimmed then s = s .. " [TRIMMED]" end
    return s
end

local function needed(op)
    return BTH + MRCH + (EXT[op] or (RETH + (op == 0xE1 and IMM or 0)))
end

function mrc.dissector(tvb, pinfo, tree)
    if not is_mrc(tvb) then
        if rroce then return rroce:call(tvb, pinfo, tree) end
        return 0
    end
    local op = tvb(0, 1):uint()
    pinfo.cols.protocol = "MRC"
    local root = tree:add(mrc, tvb(), "rocelab MRC, " .. OPCODES[op])
    add_bth(root, tvb)
    if tvb:len() < needed(op) then
        root:add_proto_expert_info(e.short)
        return tvb:len()
    end
    local trimmed = add_mrch(root, tvb, op, pinfo)
    pinfo.cols.info = info(tvb, op, trimmed)
    if trimmed then root:add_proto_expert_info(e.trimmed) end
    local ok = true
    if op <= 0xE1 then ok = add_data(root, tvb, op, trimmed, pinfo) else add_ext(root, tvb, op) end
    if not ok then root:add_proto_expert_info(e.short) end
    return tvb:len()
end

udp_port:add(4791, mrc)

// rocelab fabric dataplane: one BPF object per lab, attached with clsact to
// every port of every node (ingress and egress).
//
// Port identity: the controller attaches each port's two filters with the
// port's lab-wide id as their classid (cls_bpf, minor number). cls_bpf sets
// skb->tc_classid to the running filter's classid before the program runs,
// so the program knows which port it serves from the attachment itself: one
// program serves all namespaces, and no frame field is trusted. (MACs did
// this job when every hop rewrote them; a bridge keeps the hosts' MACs end
// to end. bpf_get_netns_cookie(skb) is no help: at tc it returns the netns
// of the skb's socket, or init_net's, not the device's.)
//
// Per (port, TC) the maps hold:
//   queued   bytes in this port's egress queue: + at our egress, - when the
//            frame arrives at the peer's ingress (veth delivers at once, so
//            that is when it left our queue). Every frame counts, unicast,
//            flooded or multicast, except 802.1Qbb frames (never queued):
//            both ends apply the same test, so the two stay balanced;
//   buffered bytes held in this switch that came in through this port:
//            + at the switch's egress (tagged with its ingress port in
//            skb->tc_index, which survives veth, bridge forwarding and
//            flooding (clones copy it) and VXLAN encap/decap), - at the next
//            hop's ingress.
// Egress: classify DSCP -> TC (skb->priority = HTB class 1:1<tc>), trim,
// mark CE RED-style on `queued`, count. Above XOFF `buffered` sends an XOFF
// event on the ring buffer (the controller pauses the upstream port); below
// XON, an XON event.
//
// Trimming (switch ports, trimmable TCs): a frame that would take its class's
// `queued` above trim_threshold is cut to trim_size bytes instead (IPv4 total
// length and header checksum, UDP length fixed, UDP checksum 0), re-marked
// trim_dscp (ECN bits kept; the controller maps trim_dscp to trim_tc, so every
// later hop classifies it there too) and queued on trim_tc. An MRC data packet
// (UDP 4791, BTH opcode 0xE0/0xE1) gets MRCH TRIMMED, and LASTHOP when the
// peer is a host. It is queued, and counted in `queued`/`buffered`, at its
// trimmed length on trim_tc. Counters, on the trimmed-from (port, TC): trim;
// dropped_trim (trim_tc over trim_limit: shot here, never queued); tx_trim
// when the trimmed frame arrives at the peer (tc_index bits 12-14 carry the
// trimmed-from TC + 1 across the veth).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_PORTS 4096
#define NTC 8
#define ETH_P_PAUSE 0x8808
#define TC_INDEX_VALID 0x8000
#define TC_INDEX_TRIM_SHIFT 12  // bits 12-14: trimmed-from TC + 1 (0: not trimmed)
#define ROCE_UDP_PORT 4791
#define VXLAN_UDP_PORT 4789
#define MRC_WRITE 0xE0
#define MRC_WRITE_IMM 0xE1
#define MRCH_OFF 54            // 14 Ethernet + 20 IPv4 + 8 UDP + 12 BTH
#define BTH_OPCODE_OFF 42
#define MRCH_TRIMMED 0x1
#define MRCH_LASTHOP 0x2
#define TRIM_NONE 0
#define TRIM_DONE 1
#define TRIM_DROP 2
#define TRIM_FAILED 3  // the kernel would not cut it (a GSO frame): queued whole, not counted

struct port_cfg {
    __u32 peer;          // port id at the other end of the veth
    __u32 is_switch;     // 1 for router ports (buffer accounting), 0 for hosts
    __u32 ecn_on;        // RED marking enabled on this port
    __u32 pfc_on;        // send XOFF/XON for frames that came in here
    __u32 kmin[NTC];     // bytes; kmax == 0 disables marking for that TC
    __u32 kmax[NTC];
    __u32 pmax[NTC];     // marking probability at kmax, in 1/2^32 units (0..0xffffffff)
    __u32 xoff[NTC];     // bytes buffered from this port that trigger XOFF; 0 = never
    __u32 xon[NTC];
    __u32 peer_host;     // the peer is a host: a trim here is at the last hop
    __u32 trim_size;     // frame bytes a trimmed packet keeps; 0 = no trimming here
    __u32 trim_dscp;
    __u32 trim_tc;       // the class trimmed packets are sent on
    __u32 trim_limit;    // bytes trim_tc may queue (its FIFO's limit)
    __u32 trim_threshold[NTC];  // queued bytes above which the TC trims; 0 = never
};

struct tc_stat {
    __s64 queued;
    __s64 buffered;
    __u64 max_queued;
    __u64 max_buffered;
    __u64 tx_packets;
    __u64 tx_bytes;
    __u64 ecn_capable;
    __u64 ce_marked;
    __u64 rx_ce;          // CE-marked frames arriving at this port
    __u64 pause_tx;       // 802.1Qbb frames sent out of this port
    __u64 pause_rx;
    __u32 paused;         // XOFF outstanding for frames from this port
    __u32 pad;
    __u64 trim;           // packets of this TC trimmed at this port's egress
    __u64 tx_trim;        // ... that arrived at the peer
    __u64 dropped_trim;   // ... that the priority class could not take (dropped)
};

struct event {
    __u64 ts;
    __u32 port;          // ingress port whose buffered bytes crossed a threshold
    __u32 tc;
    __u32 xoff;          // 1 = XOFF, 0 = XON
    __u32 bytes;
};

struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, MAX_PORTS);
         __type(key, __u32); __type(value, struct port_cfg); } cfg SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, MAX_PORTS * NTC);
         __uint(map_flags, BPF_F_MMAPABLE);
         __type(key, __u32); __type(value, struct tc_stat); } stats SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 64);
         __type(key, __u32); __type(value, __u32); } dscp_tc SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 1 << 16); } events SEC(".maps");
// 1 once the controller has attached both programs to every port. Until then nothing is
// counted: a frame counted at an egress whose peer's ingress is not attached yet (or the
// reverse) would leave `queued` off by its size for the lab's lifetime.
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1);
         __type(key, __u32); __type(value, __u32); } armed SEC(".maps");

static __always_inline int is_armed(void) {
    __u32 zero = 0;
    __u32 *on = bpf_map_lookup_elem(&armed, &zero);
    return on && *on;
}

// The port this program instance serves: its filter's classid (0: not attached by rocelab).
static __always_inline int port_of(struct __sk_buff *skb) {
    __u32 port = skb->tc_classid;
    return port > 0 && port < MAX_PORTS ? (int)port : -1;
}

static __always_inline struct tc_stat *stat_of(__u32 port, __u32 tc) {
    __u32 key = port * NTC + tc;
    return bpf_map_lookup_elem(&stats, &key);
}

struct parsed { struct ethhdr *eth; struct iphdr *ip; __u32 tc; };

static __always_inline int parse(struct __sk_buff *skb, struct parsed *p) {
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    p->eth = data;
    p->ip = 0;
    p->tc = 0;
    if ((void *)(p->eth + 1) > end)
        return -1;
    if (p->eth->h_proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = (void *)(p->eth + 1);
        if ((void *)(ip + 1) > end)
            return -1;
        __u32 dscp = ip->tos >> 2;
        __u32 *tc = bpf_map_lookup_elem(&dscp_tc, &dscp);
        p->ip = ip;
        p->tc = tc ? (*tc & (NTC - 1)) : 0;
    } else if (p->eth->h_proto == bpf_htons(ETH_P_IPV6)) {
        p->tc = 6;  // routing control (RA, ND, BGP over link-local) rides with CNPs
    }
    return 0;
}

static __always_inline void emit(__u32 port, __u32 tc, __u32 xoff, __s64 bytes) {
    struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
    if (!e)
        return;
    e->ts = bpf_ktime_get_ns();
    e->port = port;
    e->tc = tc;
    e->xoff = xoff;
    e->bytes = bytes > 0 ? (__u32)bytes : 0;
    bpf_ringbuf_submit(e, 0);
}

static __always_inline void red_mark(struct __sk_buff *skb, struct parsed *p, struct port_cfg *c,
                                     struct tc_stat *s, __s64 depth) {
    __u8 ecn = p->ip->tos & 3;
    if (!ecn)
        return;
    __sync_fetch_and_add(&s->ecn_capable, 1);  // atomic: both CPUs may serve one port
    __u32 tc = p->tc;
    if (!c->ecn_on || c->kmax[tc] == 0 || depth <= c->kmin[tc] || ecn == 3)
        return;
    __u32 prob = 0xffffffff;
    if (depth < c->kmax[tc]) {
        __u64 span = c->kmax[tc] - c->kmin[tc];
        prob = (__u32)(((__u64)c->pmax[tc] * (__u64)(depth - c->kmin[tc])) / (span ? span : 1));
    }
    if (bpf_get_prandom_u32() <= prob && bpf_skb_ecn_set_ce(skb))
        __sync_fetch_and_add(&s->ce_marked, 1);
}

static __always_inline void ip_csum(struct iphdr *ip) {
    __u16 *w = (__u16 *)ip;
    __u32 sum = 0;
    ip->check = 0;
#pragma unroll
    for (int i = 0; i < 10; i++)
        sum += w[i];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    ip->check = (__u16)~sum;
}

// Cut the frame to `size` bytes and rewrite its headers (see the top of the file).
static __always_inline int cut(struct __sk_buff *skb, struct port_cfg *c, __u32 size) {
    if (bpf_skb_change_tail(skb, size, 0) || bpf_skb_pull_data(skb, size))
        return -1;
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    struct iphdr *ip = data + sizeof(struct ethhdr);
    if ((void *)(ip + 1) > end)
        return -1;
    ip->tot_len = bpf_htons(size - sizeof(struct ethhdr));
    ip->tos = (__u8)((c->trim_dscp << 2) | (ip->tos & 3));
    ip_csum(ip);
    struct udphdr_min { __u16 source, dest, len, check; } *udp = (void *)(ip + 1);
    if (ip->protocol != IPPROTO_UDP || (void *)(udp + 1) > end)
        return 0;
    udp->len = bpf_htons(size - sizeof(struct ethhdr) - sizeof(struct iphdr));
    udp->check = 0;
    __u8 *b = data;
    if (udp->dest != bpf_htons(ROCE_UDP_PORT) || (void *)(b + MRCH_OFF + 1) > end)
        return 0;
    if (b[BTH_OPCODE_OFF] == MRC_WRITE || b[BTH_OPCODE_OFF] == MRC_WRITE_IMM)
        b[MRCH_OFF] |= MRCH_TRIMMED | (c->peer_host ? MRCH_LASTHOP : 0);
    return 0;
}

// Trim instead of queueing whole when this TC's queue is over its threshold.
static __always_inline int trim(struct __sk_buff *skb, struct port_cfg *c, struct parsed *p,
                                __u32 port) {
    __u32 tc = p->tc, size = c->trim_size;
    if (!size || !p->ip || c->trim_threshold[tc] == 0 || skb->len <= size)
        return TRIM_NONE;
    struct tc_stat *s = stat_of(port, tc), *ps = stat_of(port, c->trim_tc & (NTC - 1));
    if (!s || !ps || s->queued + (__s64)skb->len <= (__s64)c->trim_threshold[tc])
        return TRIM_NONE;
    struct iphdr *ip = p->ip;
    if (ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)))
        return TRIM_NONE;  // options or a fragment: queued whole
    if (ip->protocol == IPPROTO_UDP) {
        __u16 *dport = (void *)(ip + 1) + 2;
        if ((void *)(dport + 1) > (void *)(long)skb->data_end || *dport == bpf_htons(VXLAN_UDP_PORT))
            return TRIM_NONE;  // an encapsulated frame is not trimmed (as Cumulus)
    }
    if (ps->queued + (__s64)size > (__s64)c->trim_limit) {
        __sync_fetch_and_add(&s->trim, 1);
        __sync_fetch_and_add(&s->dropped_trim, 1);
        return TRIM_DROP;
    }
    if (cut(skb, c, size))
        return TRIM_FAILED;
    __sync_fetch_and_add(&s->trim, 1);
    return TRIM_DONE;
}

SEC("tc")
int fabric_egress(struct __sk_buff *skb) {
    int port = port_of(skb);
    struct parsed p;
    if (port < 0 || parse(skb, &p) < 0)
        return TC_ACT_UNSPEC;
    __u32 key = port;
    struct port_cfg *c = bpf_map_lookup_elem(&cfg, &key);
    struct tc_stat *s = stat_of(port, p.tc);
    if (!c || !s)
        return TC_ACT_UNSPEC;
    skb->priority = (1 << 16) | (0x10 + p.tc);  // HTB class 1:1<tc>
    if (!is_armed())
        return TC_ACT_UNSPEC;
    if (p.eth->h_proto == bpf_htons(ETH_P_PAUSE)) {
        __sync_fetch_and_add(&s->pause_tx, 1);
        return TC_ACT_UNSPEC;
    }
    __u32 trimmed_from = 0;  // TC + 1
    if (c->is_switch && c->trim_size) {
        __u32 from = p.tc;
        int t = trim(skb, c, &p, port);
        if (t == TRIM_DROP)
            return TC_ACT_SHOT;
        if (t != TRIM_NONE) {  // trim()'s helpers ran: the packet's data may have moved
            if (parse(skb, &p) < 0)
                return TC_ACT_UNSPEC;
            if (t == TRIM_DONE) {
                trimmed_from = from + 1;
                p.tc = c->trim_tc & (NTC - 1);
                skb->priority = (1 << 16) | (0x10 + p.tc);
            }
            s = stat_of(port, p.tc);
            if (!s)
                return TC_ACT_UNSPEC;
        }
    }
    __s64 depth = __sync_fetch_and_add(&s->queued, skb->len) + skb->len;
    if (depth > 0 && (__u64)depth > s->max_queued)
        s->max_queued = depth;
    __sync_fetch_and_add(&s->tx_packets, 1);
    __sync_fetch_and_add(&s->tx_bytes, skb->len);
    if (p.ip)
        red_mark(skb, &p, c, s, depth);
    __u32 in = skb->tc_index;
    if (c->is_switch && (in & TC_INDEX_VALID)) {
        __u32 in_port = in & 0x0fff;
        struct port_cfg *ic = bpf_map_lookup_elem(&cfg, &in_port);
        struct tc_stat *is = stat_of(in_port, p.tc);
        if (ic && is) {
            __s64 held = __sync_fetch_and_add(&is->buffered, skb->len) + skb->len;
            if (held > 0 && (__u64)held > is->max_buffered)
                is->max_buffered = held;
            __u32 xoff = ic->xoff[p.tc];
            if (ic->pfc_on && xoff && held > xoff && !is->paused) {
                is->paused = 1;
                emit(in_port, p.tc, 1, held);
            }
        }
    } else {
        skb->tc_index = 0;  // originated here: nobody upstream holds it
    }
    if (trimmed_from)
        skb->tc_index |= (__u16)(trimmed_from << TC_INDEX_TRIM_SHIFT);
    return TC_ACT_UNSPEC;  // not TC_ACT_OK: that would overwrite skb->tc_index
}

SEC("tc")
int fabric_ingress(struct __sk_buff *skb) {
    int port = port_of(skb);
    struct parsed p;
    if (port < 0 || !is_armed() || parse(skb, &p) < 0)
        return TC_ACT_UNSPEC;
    __u32 key = port;
    struct port_cfg *c = bpf_map_lookup_elem(&cfg, &key);
    if (!c)
        return TC_ACT_UNSPEC;
    if (p.eth->h_proto == bpf_htons(ETH_P_PAUSE)) {  // hop-local: no queue held it
        struct tc_stat *rs = stat_of(port, 3);
        if (rs)
            __sync_fetch_and_add(&rs->pause_rx, 1);
        skb->tc_index = 0;
        return TC_ACT_UNSPEC;
    }
    struct tc_stat *up = stat_of(c->peer, p.tc);  // the sender's egress queue drained this frame
    if (up)
        __sync_fetch_and_add(&up->queued, -(__s64)skb->len);
    if (p.ip && (p.ip->tos & 3) == 3) {
        struct tc_stat *me = stat_of(port, p.tc);
        if (me)
            __sync_fetch_and_add(&me->rx_ce, 1);
    }
    __u32 in = skb->tc_index;
    __u32 trimmed_from = (in >> TC_INDEX_TRIM_SHIFT) & 7;
    if (trimmed_from) {  // a trimmed frame left the peer's queue
        struct tc_stat *ts = stat_of(c->peer, trimmed_from - 1);
        if (ts)
            __sync_fetch_and_add(&ts->tx_trim, 1);
    }
    if (in & TC_INDEX_VALID) {  // the previous switch no longer holds this frame
        __u32 prev = in & 0x0fff;
        struct port_cfg *pc = bpf_map_lookup_elem(&cfg, &prev);
        struct tc_stat *ps = stat_of(prev, p.tc);
        if (pc && ps) {
            __s64 held = __sync_fetch_and_add(&ps->buffered, -(__s64)skb->len) - skb->len;
            if (ps->paused && held < pc->xon[p.tc]) {
                ps->paused = 0;
                emit(prev, p.tc, 0, held);
            }
        }
    }
    skb->tc_index = c->is_switch ? (TC_INDEX_VALID | (port & 0x0fff)) : 0;
    // RPS (on every port of a shaped lab, for in-order receive) hashed this frame with the
    // boot's random key and marked it an L4 hash; forwarding would then take the ECMP next
    // hop from that hash instead of computing the FIB's own (fib_multipath_hash_seed), and
    // `ip route get ... sport S` (how flows are pinned to a spine) would not predict the
    // path. Drop the hash: the FIB recomputes it from the five-tuple.
    if (c->is_switch)
        bpf_set_hash_invalid(skb);
    return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";

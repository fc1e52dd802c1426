/* emulator.roce._wire: the engine's per-packet byte work and batch socket I/O.
 *
 * The readable reference is fastpath.py (FrameBuilder.build_into, parse) with
 * icrc.py (check_in_place) and transport.py (SendBatch); the unit tests check
 * that this module and they agree byte for byte. What is here, and why in C:
 * on a veth the kernel's own cost is ~3.5 us per datagram, so the 2-3 us that
 * Python spent per datagram on headers, ICRC and one recv(2) each was most of
 * what the engine lost against iperf3.
 *
 *   Flow(src, dst, sport, ttl, pkey, port)   one flow's fixed header fields
 *   Sender(capacity, slot)                   datagrams built in place, one sendmmsg(2)
 *     .add(flow, items, start, sub, tos, cnp_tos, ip_id) -> (next item, sub, ip_id)
 *        items: Segments, and Runs (fastpath.Run: many MIDDLE packets, one object)
 *     .send(fd) -> (sent, refused, bytes)     refused ones stay queued, in order
 *   Receiver(capacity, slot)                 one recvmmsg(2) into a ring
 *     .recv(fd, limit) -> (good, bad_icrc, datagrams, bytes, malformed)
 *   configure(Segment, crc32, seed, ext)     the Python objects this module uses
 *   mrc_build, mrc_parse, mrc_configure      MRC datagrams (_wire_mrc.h, mrc_wire.py)
 *   mrc_add, mrc_drop, mrc_recv              MRC packets and MrcRuns into a Sender's batch,
 *                                            a Receiver's recvmmsg(2) ring parsed (_wire_mrcio.h)
 *   mrc_rx_state, mrc_rx_sack, mrc_place     an MRC receiver's bursts placed, its PSN bitmap
 *                                            (_wire_mrcrx.h)
 *   SentPacket, mrc_tx_configure, mrc_track, an MRC sender's records of its packets in
 *   mrc_ack_range, mrc_scan, mrc_take        flight: made per run, acknowledged, scanned
 *                                            for loss per EV; a run's EVs (_wire_mrctx.h)
 *
 * The CRC-32 is the one icrc.py uses (zlib-ng's when installed), called through
 * vectorcall, so both paths share one implementation. No state machine here:
 * segments go back to the sans-IO RC code in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#define MASKED_SPAN 40 /* IPv4 + UDP + BTH */
#define ICRC_SIZE 4
#define ROCE_PORT 4791
#define OP_CNP 0x81
#define SEG_FIELDS 13 /* fastpath.Segment */

static PyTypeObject *segment_type; /* fastpath.Segment (a tuple subclass) */
static PyObject *crc_fn;           /* icrc.crc32 */
static PyObject *crc_seed;         /* icrc.PSEUDO_LRH_CRC */
static int ext_len[256];           /* headers.EXT_LENGTH; -1: not an opcode we speak */

static inline void put16(unsigned char *p, unsigned v) { p[0] = v >> 8; p[1] = v; }
static inline void put32(unsigned char *p, uint32_t v) { put16(p, v >> 16); put16(p + 2, v); }
static inline unsigned get16(const unsigned char *p) { return (unsigned)p[0] << 8 | p[1]; }
static inline uint32_t get32(const unsigned char *p) { return (uint32_t)get16(p) << 16 | get16(p + 2); }

static int crc_of(const unsigned char *p, Py_ssize_t n, uint32_t *out)
{
    PyObject *view = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (view == NULL)
        return -1;
    PyObject *args[2] = {view, crc_seed};
    PyObject *r = PyObject_Vectorcall(crc_fn, args, 2, NULL);
    Py_DECREF(view);
    if (r == NULL)
        return -1;
    unsigned long v = PyLong_AsUnsignedLongMask(r);
    Py_DECREF(r);
    if (v == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* -- Flow ------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    unsigned char src[4], dst[4];
    unsigned sport, ttl, pkey;
    uint32_t ip_sum; /* the IPv4 header words that never change */
    struct sockaddr_in sa;
} FlowObject;

static int Flow_init(FlowObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"src", "dst", "sport", "ttl", "pkey", "port", NULL};
    Py_buffer src, dst;
    unsigned sport, ttl = 64, pkey = 0xFFFF, port = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*y*I|III", names, &src, &dst, &sport, &ttl,
                                     &pkey, &port))
        return -1;
    int ok = src.len == 4 && dst.len == 4;
    if (ok) {
        memcpy(self->src, src.buf, 4);
        memcpy(self->dst, dst.buf, 4);
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "Flow: src and dst must be 4-byte IPv4 addresses");
        return -1;
    }
    self->sport = sport & 0xFFFF, self->ttl = ttl & 0xFF, self->pkey = pkey & 0xFFFF;
    self->ip_sum = 0x4500 + 0x4000 + (self->ttl << 8 | IPPROTO_UDP) + get16(self->src) +
                   get16(self->src + 2) + get16(self->dst) + get16(self->dst + 2);
    memset(&self->sa, 0, sizeof self->sa);
    self->sa.sin_family = AF_INET;
    self->sa.sin_port = htons(port);
    memcpy(&self->sa.sin_addr, self->dst, 4);
    return 0;
}

static PyTypeObject FlowType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "emulator.roce._wire.Flow",
    .tp_basicsize = sizeof(FlowObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One flow's fixed header fields and destination.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Flow_init,
};

/* -- building one datagram (fastpath.FrameBuilder.build_into) ---------------- */

typedef struct {
    unsigned long op, qpn, psn, syndrome, msn, rkey, dlen;
    unsigned long long va;
    int ackreq, becn;
} Fields;

static int read_fields(PyObject *seg, Fields *f, Py_buffer *payload)
{
    if (!PyTuple_Check(seg) || PyTuple_GET_SIZE(seg) < 11) {
        PyErr_SetString(PyExc_TypeError, "expected a Segment");
        return -1;
    }
    f->op = PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(seg, 0));
    f->qpn = PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(seg, 1));
    f->psn = PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(seg, 2));
    f->ackreq = PyObject_IsTrue(PyTuple_GET_ITEM(seg, 3));
    f->va = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(seg, 4));
    f->rkey = PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(seg, 5));
    f->dlen = PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(seg, 6));
    f->syndrome = PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(seg, 7));
    f->msn = PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(seg, 8));
    f->becn = PyObject_IsTrue(PyTuple_GET_ITEM(seg, 10));
    if (PyErr_Occurred() || f->ackreq < 0 || f->becn < 0)
        return -1;
    return PyObject_GetBuffer(PyTuple_GET_ITEM(seg, 9), payload, PyBUF_SIMPLE);
}

static void put_ext(unsigned char *p, const Fields *f, int ext)
{
    if (ext == 4)
        put32(p, (uint32_t)((f->syndrome & 0xFF) << 24 | (f->msn & 0xFFFFFF)));
    else if (ext == 16 && f->op != OP_CNP) {
        put32(p, (uint32_t)(f->va >> 32));
        put32(p + 4, (uint32_t)f->va);
        put32(p + 8, (uint32_t)f->rkey);
        put32(p + 12, (uint32_t)f->dlen);
    } else
        memset(p, 0, ext);
}

/* Build the datagram of `f` with payload `pl` (n bytes) at `p` (room bytes); its
 * length, or -1 with an exception set. */
static Py_ssize_t build_fields(const FlowObject *fl, const Fields *fp, const char *pl,
                               Py_ssize_t n, unsigned ip_id, unsigned tos, unsigned char *p,
                               Py_ssize_t room)
{
    Fields f = *fp;
    int ext = ext_len[f.op & 0xFF];
    Py_ssize_t pad = -n & 3, start = MASKED_SPAN + ext, end = start + n + pad;
    Py_ssize_t total = end + ICRC_SIZE;
    if (ext < 0 || f.op > 0xFF || total > room) {
        PyErr_Format(PyExc_ValueError, "opcode %lu with %zd payload bytes: not buildable into "
                     "%zd bytes", f.op, n, room);
        return -1;
    }
    p[0] = 0x45, p[1] = 0xFF, put16(p + 2, total), put16(p + 4, ip_id), put16(p + 6, 0x4000);
    p[8] = 0xFF, p[9] = IPPROTO_UDP, put16(p + 10, 0xFFFF);
    memcpy(p + 12, fl->src, 4), memcpy(p + 16, fl->dst, 4);
    put16(p + 20, fl->sport), put16(p + 22, ROCE_PORT), put16(p + 24, total - 20);
    put16(p + 26, 0xFFFF);
    p[28] = f.op, p[29] = pad << 4, put16(p + 30, fl->pkey);
    put32(p + 32, 0xFF000000u | (f.qpn & 0xFFFFFF));
    put32(p + 36, (uint32_t)f.ackreq << 31 | (f.psn & 0x7FFFFFFF));
    put_ext(p + MASKED_SPAN, &f, ext);
    memcpy(p + start, pl, n);
    memset(p + start + n, 0, pad);
    uint32_t crc;
    if (crc_of(p, end, &crc) < 0)
        return -1;
    p[end] = crc, p[end + 1] = crc >> 8, p[end + 2] = crc >> 16, p[end + 3] = crc >> 24;
    uint32_t s = fl->ip_sum + tos + total + ip_id;
    s = (s & 0xFFFF) + (s >> 16);
    p[1] = tos, p[8] = fl->ttl, put16(p + 10, ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF);
    p[26] = p[27] = 0; /* UDP checksum: none, as rxe sends */
    p[32] = f.becn << 6;
    return total;
}

/* Build the Segment `seg` at `p` (fastpath.FrameBuilder.build_into). */
static Py_ssize_t build(const FlowObject *fl, PyObject *seg, unsigned ip_id, unsigned tos,
                        unsigned char *p, Py_ssize_t room)
{
    Fields f;
    Py_buffer pl;
    if (read_fields(seg, &f, &pl) < 0)
        return -1;
    Py_ssize_t n = build_fields(fl, &f, pl.buf, pl.len, ip_id, tos, p, room);
    PyBuffer_Release(&pl);
    return n;
}

/* A fastpath.Run: (opcode, dest_qp, psn, packets, fill, mtu, payload). */
typedef struct {
    Fields f;
    long packets, fill, mtu;
} RunFields;

static int read_run(PyObject *run, RunFields *r, Py_buffer *payload)
{
    memset(r, 0, sizeof *r);
    r->f.op = PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(run, 0));
    r->f.qpn = PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(run, 1));
    r->f.psn = PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(run, 2));
    r->packets = PyLong_AsLong(PyTuple_GET_ITEM(run, 3));
    r->fill = PyLong_AsLong(PyTuple_GET_ITEM(run, 4));
    r->mtu = PyLong_AsLong(PyTuple_GET_ITEM(run, 5));
    if (PyErr_Occurred() || PyObject_GetBuffer(PyTuple_GET_ITEM(run, 6), payload, PyBUF_SIMPLE) < 0)
        return -1;
    if (r->packets < 1 || r->mtu < 1 || payload->len != r->packets * r->mtu ||
        ext_len[r->f.op & 0xFF] != 0) {
        PyBuffer_Release(payload);
        PyErr_SetString(PyExc_ValueError, "a Run: packets x mtu payload bytes of a "
                        "payload-only opcode");
        return -1;
    }
    return 0;
}

#include "_wire_send.h"
#include "_wire_recv.h"
#include "_wire_mrc.h"
#include "_wire_mrcio.h"
#include "_wire_mrcrx.h"
#include "_wire_mrctx.h"

static PyObject *configure(PyObject *mod, PyObject *args)
{
    PyObject *type, *fn, *seed;
    Py_buffer ext;
    if (!PyArg_ParseTuple(args, "O!OO!y*", &PyType_Type, &type, &fn, &PyLong_Type, &seed, &ext))
        return NULL;
    if (ext.len != 256 || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyBuffer_Release(&ext);
        PyErr_SetString(PyExc_ValueError, "configure: a tuple type and 256 extension lengths");
        return NULL;
    }
    for (int i = 0; i < 256; i++)
        ext_len[i] = ((unsigned char *)ext.buf)[i] == 0xFF ? -1 : ((unsigned char *)ext.buf)[i];
    PyBuffer_Release(&ext);
    Py_XSETREF(segment_type, (PyTypeObject *)Py_NewRef(type));
    Py_XSETREF(crc_fn, Py_NewRef(fn));
    Py_XSETREF(crc_seed, Py_NewRef(seed));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS, "configure(Segment, crc32, seed, ext: bytes[256])"},
    {"mrc_configure", mrc_configure, METH_O, "mrc_configure(MrcPacket)"},
    {"mrc_build", (PyCFunction)(void (*)(void))mrc_build, METH_FASTCALL,
     "mrc_build(out, MrcPacket, src, dst, tos, ip_id) -> length"},
    {"mrc_parse", mrc_parse, METH_O, "mrc_parse(view) -> MrcPacket | None"},
    {"mrc_add", mrc_add, METH_VARARGS,
     "mrc_add(sender, flows, items, start, sub, data_tos, ctrl_tos, ip_id) -> (next, sub, ip_id)"},
    {"mrc_drop", mrc_drop, METH_O, "mrc_drop(sender): forget the queued datagrams"},
    {"mrc_recv", mrc_recv, METH_VARARGS,
     "mrc_recv(receiver, sock, limit) -> (MrcPackets, datagrams, malformed)"},
    {"mrc_rx_state", mrc_rx_state, METH_NOARGS, "mrc_rx_state() -> an MRC receiver's state"},
    {"mrc_rx_sack", mrc_rx_sack, METH_O, "mrc_rx_sack(state) -> (cack, bitmap, packets, ce)"},
    {"mrc_place", mrc_place, METH_VARARGS,
     "mrc_place(state, packets, start, conn, peers, rkey, region, mr_va, ack_every) -> "
     "(next, events, counts, last)"},
    {"mrc_tx_configure", mrc_tx_configure, METH_VARARGS,
     "mrc_tx_configure(Path, SentMessage, EvState.UNKNOWN, EvState.GOOD)"},
    {"mrc_track", mrc_track, METH_VARARGS,
     "mrc_track(unacked, psn, msg, index, length, paths, now) -> [plane << 16 | ev]"},
    {"mrc_ack_range", mrc_ack_range, METH_VARARGS,
     "mrc_ack_range(unacked, lo, hi, acked_paths, done, fresh, plane_acks, acks) -> "
     "(acked, inflight, acks)"},
    {"mrc_scan", mrc_scan, METH_VARARGS, "mrc_scan(acked_paths, allowance) -> [lost]"},
    {"mrc_take", mrc_take, METH_VARARGS,
     "mrc_take(fresh, usable, active, cursor, picks, n) -> (paths, cursor, picks, recycled)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT, "_wire", "RoCEv2 datagram building, parsing and batch I/O.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__wire(void)
{
    for (int i = 0; i < 256; i++)
        ext_len[i] = -1;
    PyTypeObject *types[] = {&FlowType, &SenderType, &ReceiverType, &SentType};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    PyObject *m = PyModule_Create(&wire_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Flow", (PyObject *)&FlowType) < 0 ||
        PyModule_AddObjectRef(m, "Sender", (PyObject *)&SenderType) < 0 ||
        PyModule_AddObjectRef(m, "Receiver", (PyObject *)&ReceiverType) < 0 ||
        PyModule_AddObjectRef(m, "SentPacket", (PyObject *)&SentType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

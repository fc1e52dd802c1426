/* The MRC receiver's per-packet work in C, for _wire.c (included there, once, after
 * _wire_mrcio.h): a burst of MrcPackets (mrc_recv's) of one connection placed into the
 * registered region and recorded in a received-PSN bitmap. The reference is
 * mrc_receiver.MrcReceiver's pure-Python path (ROCELAB_ENGINE_PURE=1); tests/unit/roce/
 * test_mrc_rx.py compares the two. docs/mrc.md "Speed". */

#define MRCRX_BITS (1u << 16) /* PSNs ahead of the cumulative point the bitmap can hold */

/* A receiver's state, in a bytearray (mrc_rx_state) so Python reads it: the cumulative
 * point (every PSN below it received), packets and CE marks since the last SACK, and
 * one bit per PSN in (cack, cack + MRCRX_BITS), at index psn % MRCRX_BITS. */
typedef struct {
    uint64_t cack, pending, pending_ce, beyond;
    uint64_t words[MRCRX_BITS / 64];
} MrcRxState;

static int rx_has(const MrcRxState *s, uint64_t psn)
{
    return s->words[psn % MRCRX_BITS / 64] >> (psn % 64) & 1;
}

static void rx_flip(MrcRxState *s, uint64_t psn)
{
    s->words[psn % MRCRX_BITS / 64] ^= 1ull << (psn % 64);
}

/* The SACK bitmap: bit i is PSN cack + 1 + i. */
static uint64_t rx_bitmap(const MrcRxState *s)
{
    uint64_t b = 0;
    for (unsigned i = 0; i < 64; i++)
        b |= (uint64_t)rx_has(s, s->cack + 1 + i) << i;
    return b;
}

/* mrc_received in the reference: psn received (not a duplicate, inside the window). */
static void rx_mark(MrcRxState *s, uint64_t psn)
{
    if (psn != s->cack) {
        rx_flip(s, psn);
        return;
    }
    s->cack++;
    while (rx_has(s, s->cack)) {
        rx_flip(s, s->cack);
        s->cack++;
    }
}

static PyObject *mrc_rx_state(PyObject *mod, PyObject *unused)
{
    PyObject *b = PyByteArray_FromStringAndSize(NULL, sizeof(MrcRxState));
    if (b != NULL)
        memset(PyByteArray_AS_STRING(b), 0, sizeof(MrcRxState));
    return b;
}

/* mrc_rx_sack(state) -> (cack, bitmap, packets, ce): a SACK's fields; packets and ce reset. */
static PyObject *mrc_rx_sack(PyObject *mod, PyObject *state)
{
    if (!PyByteArray_Check(state) || PyByteArray_GET_SIZE(state) != sizeof(MrcRxState))
        return PyErr_Format(PyExc_TypeError, "mrc_rx_sack(state): an mrc_rx_state()");
    MrcRxState *s = (MrcRxState *)PyByteArray_AS_STRING(state);
    PyObject *t = Py_BuildValue("(KKKK)", s->cack, rx_bitmap(s), s->pending, s->pending_ce);
    s->pending = s->pending_ce = 0;
    return t;
}

/* What mrc_place hands back besides the events (the reference's counters). */
typedef struct {
    long long packets, bytes, duplicates, ce, access_errors, last;
} RxCounts;

typedef struct { /* the message run being placed: one event per run of one msg and opcode */
    unsigned long msg, ext, imm, op;
    long long bytes;
} RxRun;

static int rx_event(PyObject *events, PyObject *e)
{
    int r = e == NULL ? -1 : PyList_Append(events, e);
    Py_XDECREF(e);
    return r;
}

static int rx_run_flush(PyObject *events, RxRun *run)
{
    if (run->bytes == 0)
        return 0;
    long long n = run->bytes;
    run->bytes = 0;
    return rx_event(events, Py_BuildValue("(ikLkkk)", 0, run->msg, n, run->ext, run->op, run->imm));
}

static int rx_sack(PyObject *events, MrcRxState *s, Py_ssize_t i, RxRun *run)
{
    if (rx_run_flush(events, run) < 0)
        return -1;
    PyObject *e = Py_BuildValue("(inKKKK)", 1, i, s->cack, rx_bitmap(s), s->pending, s->pending_ce);
    s->pending = s->pending_ce = 0;
    return rx_event(events, e);
}

typedef struct { /* mrc_place's arguments: the region cached for one R_Key (or none) */
    unsigned long conn, rkey;
    unsigned long long mr_va, mr_len;
    Py_buffer mr;
    int has_mr;
    long ack_every;
    PyObject *peers;
} RxArgs;

/* One data packet of the run: 0 placed or answered, 1 stop (hand it to Python), -1 error. */
static int rx_one(MrcRxState *s, RxArgs *a, PyObject *p, Py_ssize_t i, PyObject *events,
                  RxRun *run, RxCounts *c)
{
    unsigned long op = item_ul(p, 0), flags = item_ul(p, 3);
    if (op > 0xE1 || flags & 1 || item_ul(p, 10) != a->rkey)
        return 1;
    uint64_t diff = (item_ul(p, 2) - s->cack) & 0xFFFFFF;
    uint64_t psn = diff < (1u << 23) ? s->cack + diff : s->cack + diff - (1u << 24);
    if (psn > s->cack && psn - s->cack >= MRCRX_BITS) { /* too far ahead to record: resent */
        s->beyond++;
        return 0;
    }
    s->pending++;
    if (item_ul(p, 19) == 3)
        s->pending_ce++, c->ce++;
    if (psn < s->cack || (psn > s->cack && psn - s->cack < MRCRX_BITS && rx_has(s, psn))) {
        c->duplicates++;
        return rx_sack(events, s, i, run) < 0 ? -1 : (c->last = -1, 0);
    }
    Py_buffer pl;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(p, 13), &pl, PyBUF_SIMPLE) < 0)
        return -1;
    unsigned long long va = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(p, 9)), n = pl.len;
    int ok = a->has_mr && n == item_ul(p, 11) && a->mr_va <= va && va + n >= va &&
             va + n <= a->mr_va + a->mr_len;
    if (ok)
        memcpy((char *)a->mr.buf + (va - a->mr_va), pl.buf, n);
    PyBuffer_Release(&pl);
    if (PyErr_Occurred())
        return -1;
    if (!ok) {
        c->access_errors++;
        if (rx_run_flush(events, run) < 0)
            return -1;
        return rx_event(events, Py_BuildValue("(inK)", 2, i, s->cack));
    }
    c->packets++, c->bytes += n;
    unsigned long msg = item_ul(p, 6);
    if (run->bytes && (run->msg != msg || run->op != op) && rx_run_flush(events, run) < 0)
        return -1;
    run->msg = msg, run->op = op, run->ext = item_ul(p, 8), run->imm = item_ul(p, 12);
    run->bytes += n;
    rx_mark(s, psn);
    if (flags & 4 || (long)s->pending >= a->ack_every || psn > s->cack + 64)
        return rx_sack(events, s, i, run) < 0 ? -1 : (c->last = -1, 0);
    c->last = i;
    return 0;
}

static int rx_from_peer(RxArgs *a, PyObject *p)
{
    if (item_ul(p, 1) != a->conn)
        return 0;
    if (a->peers == Py_None)
        return 1;
    return PySequence_Contains(a->peers, PyTuple_GET_ITEM(p, 20));
}

/* mrc_place(state, packets, start, conn, peers, rkey, region, mr_va, ack_every) ->
 * (next, events, (packets, bytes, duplicates, ce, access_errors), last): the data packets
 * of connection `conn` from `packets[start]` on, until one that needs Python (another
 * connection or a sender outside `peers` (None: any), a probe, a trimmed packet, another
 * R_Key: `next` is its index). region: the writable buffer of R_Key `rkey`'s region, or
 * None (no such region, or not remotely writable: an access NACK). Events, in order:
 * (0, msg, bytes, ext, opcode, imm) bytes placed; (1, i, cack, bitmap, packets, ce) a SACK
 * answering packets[i]; (2, i, cack) an access NACK. last: the index of the last packet
 * not yet acknowledged, or -1. */
static PyObject *mrc_place(PyObject *mod, PyObject *args)
{
    PyObject *state, *packets, *region;
    Py_ssize_t i;
    RxArgs a = {0};
    if (!PyArg_ParseTuple(args, "O!O!nkOkOKl", &PyByteArray_Type, &state, &PyList_Type, &packets,
                          &i, &a.conn, &a.peers, &a.rkey, &region, &a.mr_va, &a.ack_every))
        return NULL;
    if (PyByteArray_GET_SIZE(state) != sizeof(MrcRxState) || mrc_type == NULL)
        return PyErr_Format(PyExc_ValueError, "mrc_place: an mrc_rx_state(), mrc_configure first");
    a.has_mr = region != Py_None;
    if (a.has_mr && PyObject_GetBuffer(region, &a.mr, PyBUF_WRITABLE) < 0)
        return NULL;
    a.mr_len = a.has_mr ? (unsigned long long)a.mr.len : 0;
    MrcRxState *s = (MrcRxState *)PyByteArray_AS_STRING(state);
    RxCounts c = {.last = -1};
    RxRun run = {0};
    PyObject *events = PyList_New(0);
    int r = events == NULL ? -1 : 0;
    for (; r == 0 && i < PyList_GET_SIZE(packets); i++) {
        PyObject *p = PyList_GET_ITEM(packets, i);
        if (!PyObject_TypeCheck(p, mrc_type)) {
            PyErr_SetString(PyExc_TypeError, "mrc_place: a list of MrcPackets");
            r = -1;
        } else if ((r = rx_from_peer(&a, p)) == 1) {
            r = rx_one(s, &a, p, i, events, &run, &c);
        } else if (r == 0) {
            r = 1;
        }
    }
    if (r == 1)
        i--, r = 0;
    if (r == 0)
        r = rx_run_flush(events, &run);
    if (a.has_mr)
        PyBuffer_Release(&a.mr);
    if (r < 0) {
        Py_XDECREF(events);
        return NULL;
    }
    return Py_BuildValue("(nN(LLLLL)L)", i, events, c.packets, c.bytes, c.duplicates, c.ce,
                         c.access_errors, c.last);
}

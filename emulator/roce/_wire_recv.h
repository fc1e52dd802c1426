/* Batch receiving for _wire.c (included there, once): Receiver, one recvmmsg(2)
 * per turn, parsing, the ICRC check, and in-order placement. See _wire.c. */

/* -- Receiver: recvmmsg, fastpath.parse, icrc.check_in_place ------------------ */

typedef struct {
    PyObject_HEAD
    Py_ssize_t capacity, slot;
    PyObject *ring; /* bytearray: the received datagrams; payloads are views of it */
    PyObject *view; /* memoryview of ring */
    struct iovec *iov;
    struct mmsghdr *msgs;
} ReceiverObject;

static int Receiver_init(ReceiverObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"capacity", "slot", NULL};
    Py_ssize_t capacity = 64, slot = 8192;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|nn", names, &capacity, &slot))
        return -1;
    if (self->ring != NULL || capacity < 1 || capacity > 1024 || slot < 64 || slot > 65536) {
        PyErr_SetString(PyExc_ValueError, "Receiver: capacity 1..1024, slot 64..65536, once");
        return -1;
    }
    self->ring = PyByteArray_FromStringAndSize(NULL, capacity * slot);
    if (self->ring == NULL || (self->view = PyMemoryView_FromObject(self->ring)) == NULL)
        return -1;
    self->iov = PyMem_Calloc(capacity, sizeof *self->iov);
    self->msgs = PyMem_Calloc(capacity, sizeof *self->msgs);
    if (!self->iov || !self->msgs) {
        PyErr_NoMemory();
        return -1;
    }
    self->capacity = capacity, self->slot = slot;
    char *base = PyByteArray_AS_STRING(self->ring);
    for (Py_ssize_t i = 0; i < capacity; i++) {
        self->iov[i].iov_base = base + i * slot, self->iov[i].iov_len = slot;
        self->msgs[i].msg_hdr.msg_iov = &self->iov[i];
        self->msgs[i].msg_hdr.msg_iovlen = 1;
    }
    return 0;
}

static void Receiver_dealloc(ReceiverObject *self)
{
    Py_XDECREF(self->view), Py_XDECREF(self->ring);
    PyMem_Free(self->iov), PyMem_Free(self->msgs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline int set_long(PyObject *t, int i, unsigned long long v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    if (o == NULL)
        return -1;
    PyTuple_SET_ITEM(t, i, o);
    return 0;
}

/* The Segment of the datagram at offset `off` of the ring (n bytes), or NULL
 * with no exception set if it is malformed (fastpath.parse's checks). */
static PyObject *parse_at(ReceiverObject *self, Py_ssize_t off, Py_ssize_t n)
{
    const unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(self->ring) + off;
    if (n < MASKED_SPAN + ICRC_SIZE || p[0] != 0x45 || p[9] != IPPROTO_UDP ||
        (get16(p + 6) & 0x3FFF) || get16(p + 2) != n || get16(p + 22) != ROCE_PORT ||
        get16(p + 24) != n - 20)
        return NULL;
    unsigned op = p[28];
    int ext = ext_len[op];
    Py_ssize_t start = MASKED_SPAN + ext, stop = n - ICRC_SIZE - (p[29] >> 4 & 3);
    if (ext < 0 || stop < start)
        return NULL;
    unsigned long long va = 0, rkey = 0, dlen = 0, syn = 0, msn = 0;
    const unsigned char *e = p + MASKED_SPAN;
    if (ext == 16 && op != OP_CNP)
        va = (unsigned long long)get32(e) << 32 | get32(e + 4), rkey = get32(e + 8), dlen = get32(e + 12);
    else if (ext == 4)
        syn = e[0], msn = get32(e) & 0xFFFFFF;
    uint32_t w1 = get32(p + 32), w2 = get32(p + 36);
    PyObject *seg = segment_type->tp_alloc(segment_type, SEG_FIELDS);
    if (seg == NULL)
        return NULL;
    PyObject *payload = PySequence_GetSlice(self->view, off + start, off + stop);
    if (payload == NULL || set_long(seg, 0, op) || set_long(seg, 1, w1 & 0xFFFFFF) ||
        set_long(seg, 2, w2 & 0xFFFFFF) || set_long(seg, 4, va) || set_long(seg, 5, rkey) ||
        set_long(seg, 6, dlen) || set_long(seg, 7, syn) || set_long(seg, 8, msn) ||
        set_long(seg, 11, p[1] & 3) || set_long(seg, 12, get32(p + 12))) {
        Py_XDECREF(payload);
        Py_DECREF(seg); /* unset items are NULL: tuple dealloc skips them */
        return NULL;
    }
    PyTuple_SET_ITEM(seg, 3, Py_NewRef(w2 >> 31 ? Py_True : Py_False));
    PyTuple_SET_ITEM(seg, 9, payload);
    PyTuple_SET_ITEM(seg, 10, Py_NewRef(w1 >> 30 & 1 ? Py_True : Py_False));
    return seg;
}

/* icrc.check_in_place: mask the variant fields in the ring itself (read first). */
static const int masked[] = {1, 8, 10, 11, 26, 27, 32}; /* TOS, TTL, checksums, BTH byte 4 */

static int icrc_ok(ReceiverObject *self, Py_ssize_t off, Py_ssize_t n)
{
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(self->ring) + off, keep[7];
    const unsigned char *w = p + n - ICRC_SIZE;
    uint32_t want = w[0] | w[1] << 8 | w[2] << 16 | (uint32_t)w[3] << 24, crc;
    for (int i = 0; i < 7; i++)
        keep[i] = p[masked[i]], p[masked[i]] = 0xFF;
    int r = crc_of(p, n - ICRC_SIZE, &crc);
    for (int i = 0; i < 7; i++)
        p[masked[i]] = keep[i];
    return r < 0 ? -1 : crc == want;
}

/* -- in-order placement: MIDDLE payloads straight into the target memory ----- */

/* A target (from Python, per QP: rc.QueuePair.burst_targets) is a list
 * [opcode, src_ip, psn, dest, offset, mtu, open, packets, bytes]: a datagram of
 * `opcode` from src_ip at exactly `psn`, mtu bytes long, without CE, AckReq or
 * BECN, is copied to dest[offset:] (if it fits); psn, offset, packets, bytes
 * advance. The first datagram of that QP that is not placed closes all its
 * targets (open = 0), so what Python sees of a QP comes after what was placed. */
enum { T_OP, T_SRC, T_PSN, T_DEST, T_OFF, T_MTU, T_OPEN, T_PACKETS, T_BYTES, T_SIZE };

static long item(PyObject *t, int i) { return PyLong_AsLong(PyList_GET_ITEM(t, i)); }

static int set_item(PyObject *t, int i, long v)
{
    PyObject *o = PyLong_FromLong(v);
    return o == NULL ? -1 : PyList_SetItem(t, i, o);
}

static int place_into(PyObject *t, const unsigned char *payload, Py_ssize_t n, uint32_t psn)
{
    Py_buffer dest;
    long off = item(t, T_OFF);
    if (PyErr_Occurred() || PyObject_GetBuffer(PyList_GET_ITEM(t, T_DEST), &dest, PyBUF_WRITABLE) < 0)
        return -1;
    int fits = off >= 0 && off + n <= dest.len;
    if (fits)
        memcpy((char *)dest.buf + off, payload, n);
    PyBuffer_Release(&dest);
    if (!fits)
        return 0;
    if (set_item(t, T_PSN, (psn + 1) & 0xFFFFFF) < 0 || set_item(t, T_OFF, off + n) < 0 ||
        set_item(t, T_PACKETS, item(t, T_PACKETS) + 1) < 0 ||
        set_item(t, T_BYTES, item(t, T_BYTES) + n) < 0)
        return -1;
    return 1;
}

/* 1: placed; 0: not (its QP's targets are closed now); -1: error. */
static int try_place(PyObject *targets, const unsigned char *p, Py_ssize_t start, Py_ssize_t stop,
                     int icrc_good)
{
    uint32_t w1 = get32(p + 32), w2 = get32(p + 36);
    PyObject *key = PyLong_FromUnsignedLong(w1 & 0xFFFFFF);
    if (key == NULL)
        return -1;
    PyObject *list = PyDict_GetItemWithError(targets, key); /* borrowed */
    Py_DECREF(key);
    if (list == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int plain = icrc_good && (p[1] & 3) != 3 && !(w2 >> 31) && !(w1 >> 30 & 1);
    for (Py_ssize_t i = 0; plain && i < PyList_Size(list); i++) {
        PyObject *t = PyList_GET_ITEM(list, i);
        if (!PyList_Check(t) || PyList_GET_SIZE(t) != T_SIZE) {
            PyErr_SetString(PyExc_TypeError, "a placement target is a list of 9");
            return -1;
        }
        if (item(t, T_OPEN) && item(t, T_OP) == p[28] && (uint32_t)item(t, T_SRC) == get32(p + 12)
            && item(t, T_PSN) == (long)(w2 & 0xFFFFFF) && item(t, T_MTU) == stop - start) {
            int r = place_into(t, p + start, stop - start, w2 & 0xFFFFFF);
            if (r != 0)
                return r;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_Size(list); i++)
        if (set_item(PyList_GET_ITEM(list, i), T_OPEN, 0) < 0)
            return -1;
    return PyErr_Occurred() ? -1 : 0;
}

static int receive(int fd, struct mmsghdr *msgs, unsigned limit)
{
    int k;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        k = recvmmsg(fd, msgs, limit, MSG_DONTWAIT, NULL);
        Py_END_ALLOW_THREADS
        if (k >= 0 || (errno != EINTR))
            break;
        if (PyErr_CheckSignals() < 0)
            return -2;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (k < 0)
        PyErr_SetFromErrno(PyExc_OSError);
    return k;
}

/* fastpath.parse's checks; the payload's [start, stop) in the datagram, or -1. */
static int bounds(const unsigned char *p, Py_ssize_t n, Py_ssize_t *start, Py_ssize_t *stop)
{
    if (n < MASKED_SPAN + ICRC_SIZE || p[0] != 0x45 || p[9] != IPPROTO_UDP ||
        (get16(p + 6) & 0x3FFF) || get16(p + 2) != n || get16(p + 22) != ROCE_PORT ||
        get16(p + 24) != n - 20 || ext_len[p[28]] < 0)
        return -1;
    *start = MASKED_SPAN + ext_len[p[28]];
    *stop = n - ICRC_SIZE - (p[29] >> 4 & 3);
    return *stop < *start ? -1 : 0;
}

static PyObject *Receiver_recv(ReceiverObject *self, PyObject *args)
{
    PyObject *sock, *targets = Py_None;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "On|O", &sock, &limit, &targets))
        return NULL;
    if (targets != Py_None && !PyDict_Check(targets))
        return PyErr_Format(PyExc_TypeError, "Receiver.recv: targets must be a dict or None");
    int fd = PyObject_AsFileDescriptor(sock);
    if (fd < 0 || segment_type == NULL || self->ring == NULL)
        return fd < 0 ? NULL : PyErr_Format(PyExc_RuntimeError, "Receiver: not configured");
    limit = limit < 1 ? 1 : limit > self->capacity ? self->capacity : limit;
    int k = receive(fd, self->msgs, (unsigned)limit);
    if (k < 0)
        return NULL;
    PyObject *good = PyList_New(0), *bad = PyList_New(0);
    Py_ssize_t nbytes = 0, malformed = 0, start, stop;
    const unsigned char *ring = (unsigned char *)PyByteArray_AS_STRING(self->ring);
    for (int i = 0; good && bad && i < k; i++) {
        Py_ssize_t n = self->msgs[i].msg_len, off = i * self->slot;
        nbytes += n;
        if (self->msgs[i].msg_hdr.msg_flags & MSG_TRUNC || bounds(ring + off, n, &start, &stop)) {
            malformed++;
            continue;
        }
        int ok = icrc_ok(self, off, n), placed = 0;
        if (ok >= 0 && targets != Py_None)
            placed = try_place(targets, ring + off, start, stop, ok);
        if (ok < 0 || placed < 0)
            goto fail;
        if (placed)
            continue;
        PyObject *seg = parse_at(self, off, n);
        int r = seg == NULL ? -1 : PyList_Append(ok ? good : bad, seg);
        Py_XDECREF(seg);
        if (r < 0)
            goto fail;
    }
    if (good && bad)
        return Py_BuildValue("(NNinn)", good, bad, k, nbytes, malformed);
fail:
    Py_XDECREF(good), Py_XDECREF(bad);
    return NULL;
}

static PyMethodDef Receiver_methods[] = {
    {"recv", (PyCFunction)Receiver_recv, METH_VARARGS,
     "recv(sock, limit, targets=None) -> (good, bad_icrc, datagrams, bytes, malformed); "
     "payloads are views of a ring the next call overwrites; in-order MIDDLE payloads for "
     "a target (qpn -> [target, ...]) are placed, not returned"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReceiverType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "emulator.roce._wire.Receiver",
    .tp_basicsize = sizeof(ReceiverObject),
    .tp_dealloc = (destructor)Receiver_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Up to `capacity` datagrams per recvmmsg(2), parsed and ICRC-checked.",
    .tp_methods = Receiver_methods,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Receiver_init,
};

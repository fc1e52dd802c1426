/* MRC batch I/O for _wire.c (included there, once, after _wire_send.h, _wire_recv.h and
 * _wire_mrc.h): MRC datagrams built straight into a Sender's slots (single packets and
 * mrc_wire.MrcRun bursts), and a Receiver's recvmmsg(2) ring parsed into MrcPackets.
 * The references are mrc_wire.build_into / MrcRun.packets / parse; tests/unit/roce/
 * test_mrc_fast.py checks them byte for byte. docs/mrc.md "Speed". */

#define MRC_RUN_FIELDS 12 /* mrc_wire.MrcRun */

/* Build packets `*sub`.. of an MrcRun (conn, psn, packets, msg, ts, length, va, rkey,
 * mtu, every, evs, payload) until it ends or the batch is full; 0, or -1 (set). */
static int mrc_add_run(SenderObject *self, PyObject *flows, PyObject *run, Py_ssize_t *sub,
                       unsigned tos, unsigned *ip_id)
{
    MrcFields f = {.op = 0xE0};
    PyObject *evs = PyTuple_GET_ITEM(run, 10);
    f.conn = item_ul(run, 0), f.msg = item_ul(run, 3), f.ts = item_ul(run, 4);
    f.ext = item_ul(run, 5), f.rkey = item_ul(run, 7);
    unsigned long long psn = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(run, 1));
    unsigned long long va = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(run, 6));
    long packets = PyLong_AsLong(PyTuple_GET_ITEM(run, 2)), mtu = PyLong_AsLong(PyTuple_GET_ITEM(run, 8));
    long every = PyLong_AsLong(PyTuple_GET_ITEM(run, 9));
    Py_buffer pl;
    if (PyErr_Occurred() || PyObject_GetBuffer(PyTuple_GET_ITEM(run, 11), &pl, PyBUF_SIMPLE) < 0)
        return -1;
    int rc = 0;
    if (!PyList_Check(evs) || PyList_GET_SIZE(evs) != packets || mtu < 1 || every < 1 ||
        pl.len != packets * mtu) {
        PyErr_SetString(PyExc_ValueError, "an MrcRun: one EV and mtu payload bytes per packet");
        rc = -1;
    }
    Py_ssize_t nflows = PyTuple_GET_SIZE(flows);
    for (; rc == 0 && *sub < packets && self->count < self->capacity; (*sub)++) {
        unsigned long pe = PyLong_AsUnsignedLongMask(PyList_GET_ITEM(evs, *sub));
        FlowObject *fl = (FlowObject *)PyTuple_GET_ITEM(flows, (pe >> 16) % nflows);
        f.psn = (psn + *sub) & 0xFFFFFF, f.flags = (psn + *sub) % every ? 0 : 4;
        f.plane = pe >> 16 & 0xFF, f.ev = pe & 0xFFFF, f.va = va + *sub * mtu, f.length = mtu;
        *ip_id = next_ident(*ip_id);
        Py_ssize_t n = mrc_write(self->buf + self->count * self->slot, self->slot, &f, fl->src,
                                 fl->dst, tos, *ip_id, (char *)pl.buf + *sub * mtu, mtu);
        if (n < 0 || PyErr_Occurred())
            rc = -1;
        else
            queued(self, fl, n);
    }
    PyBuffer_Release(&pl);
    return rc;
}

/* One MrcPacket into the batch, from the Flow of its plane. */
static int mrc_add_one(SenderObject *self, PyObject *flows, PyObject *t, unsigned data_tos,
                       unsigned ctrl_tos, unsigned *ip_id)
{
    MrcFields f;
    Py_buffer pl;
    if (mrc_read(t, &f, &pl) < 0)
        return -1;
    FlowObject *fl = (FlowObject *)PyTuple_GET_ITEM(flows, f.plane % PyTuple_GET_SIZE(flows));
    *ip_id = next_ident(*ip_id);
    Py_ssize_t n = mrc_write(self->buf + self->count * self->slot, self->slot, &f, fl->src, fl->dst,
                             f.op <= 0xE1 ? data_tos : ctrl_tos, *ip_id, pl.buf, pl.len);
    if (pl.obj)
        PyBuffer_Release(&pl);
    if (n < 0)
        return -1;
    queued(self, fl, n);
    return 0;
}

/* mrc_add(sender, flows, items, start, sub, data_tos, ctrl_tos, ip_id) -> (next item, next
 * packet in it, last ip_id): MrcPackets and MrcRuns into the batch until done or full.
 * flows: one Flow per plane (this host's address, the peer's; the port is unused). */
static PyObject *mrc_add(PyObject *mod, PyObject *args)
{
    SenderObject *self;
    PyObject *flows, *items;
    Py_ssize_t i, sub;
    unsigned data_tos, ctrl_tos, ip_id;
    if (!PyArg_ParseTuple(args, "O!O!O!nnIII", &SenderType, &self, &PyTuple_Type, &flows,
                          &PyList_Type, &items, &i, &sub, &data_tos, &ctrl_tos, &ip_id))
        return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(flows); k++)
        if (!PyObject_TypeCheck(PyTuple_GET_ITEM(flows, k), &FlowType))
            return PyErr_Format(PyExc_TypeError, "mrc_add: flows is a tuple of Flows");
    if (self->buf == NULL || PyTuple_GET_SIZE(flows) == 0)
        return PyErr_Format(PyExc_ValueError, "mrc_add: an initialised Sender and a Flow per plane");
    for (; i < PyList_GET_SIZE(items) && self->count < self->capacity; i++, sub = 0) {
        PyObject *t = PyList_GET_ITEM(items, i);
        if (PyTuple_Check(t) && PyTuple_GET_SIZE(t) == MRC_RUN_FIELDS) {
            if (mrc_add_run(self, flows, t, &sub, data_tos, &ip_id) < 0)
                return NULL;
            if (sub < PyLong_AsLong(PyTuple_GET_ITEM(t, 2)))
                break; /* full in the middle of it */
        } else if (mrc_add_one(self, flows, t, data_tos, ctrl_tos, &ip_id) < 0)
            return NULL;
    }
    return Py_BuildValue("(nnI)", i, sub, ip_id);
}

/* mrc_drop(sender): forget what is queued (datagrams the kernel refused: MRC recovers). */
static PyObject *mrc_drop(PyObject *mod, PyObject *arg)
{
    if (!PyObject_TypeCheck(arg, &SenderType))
        return PyErr_Format(PyExc_TypeError, "mrc_drop(sender)");
    keep_from((SenderObject *)arg, ((SenderObject *)arg)->count);
    Py_RETURN_NONE;
}

/* mrc_recv(receiver, sock, limit) -> (packets, datagrams, malformed): one recvmmsg(2) into
 * the Receiver's ring, each datagram checked as mrc_parse does; the packets' payloads are
 * views of the ring, which the next call overwrites. */
static PyObject *mrc_recv(PyObject *mod, PyObject *args)
{
    ReceiverObject *self;
    PyObject *sock;
    Py_ssize_t limit, malformed = 0;
    if (!PyArg_ParseTuple(args, "O!On", &ReceiverType, &self, &sock, &limit))
        return NULL;
    int fd = PyObject_AsFileDescriptor(sock);
    if (fd < 0)
        return NULL;
    if (mrc_type == NULL || self->ring == NULL)
        return PyErr_Format(PyExc_RuntimeError, "mrc_recv: mrc_configure(MrcPacket) first");
    limit = limit < 1 ? 1 : limit > self->capacity ? self->capacity : limit;
    int k = receive(fd, self->msgs, (unsigned)limit);
    PyObject *out = k < 0 ? NULL : PyList_New(0);
    unsigned char *ring = (unsigned char *)PyByteArray_AS_STRING(self->ring);
    for (int i = 0; out && i < k; i++) {
        Py_ssize_t n = self->msgs[i].msg_len, off = i * self->slot;
        int r = self->msgs[i].msg_hdr.msg_flags & MSG_TRUNC ? -1 : mrc_check(ring + off, n);
        if (r == -1) {
            malformed++;
            continue;
        }
        PyObject *p = r == -2 ? NULL : mrc_packet(self->view, off, ring + off, n, r);
        if (p == NULL || PyList_Append(out, p) < 0)
            Py_CLEAR(out);
        Py_XDECREF(p);
    }
    return out == NULL ? NULL : Py_BuildValue("(Nin)", out, k, malformed);
}

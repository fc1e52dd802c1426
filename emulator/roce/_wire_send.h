/* Batch sending for _wire.c (included there, once): Sender, one sendmmsg(2) per
 * batch of datagrams built in place. See _wire.c for the overview. */

/* -- Sender: transport.SendBatch ------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t capacity, slot, count, bytes;
    unsigned char *buf;
    struct iovec *iov;
    struct mmsghdr *msgs;
    PyObject **flows; /* the Flow each queued datagram goes to (its sockaddr) */
} SenderObject;

static int Sender_init(SenderObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"capacity", "slot", NULL};
    Py_ssize_t capacity = 64, slot = 4160;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|nn", names, &capacity, &slot))
        return -1;
    if (self->buf != NULL || capacity < 1 || capacity > 1024 || slot < 64 || slot > 65536) {
        PyErr_SetString(PyExc_ValueError, "Sender: capacity 1..1024, slot 64..65536, once");
        return -1;
    }
    self->buf = PyMem_Calloc(capacity, slot);
    self->iov = PyMem_Calloc(capacity, sizeof *self->iov);
    self->msgs = PyMem_Calloc(capacity, sizeof *self->msgs);
    self->flows = PyMem_Calloc(capacity, sizeof *self->flows);
    if (!self->buf || !self->iov || !self->msgs || !self->flows) {
        PyErr_NoMemory();
        return -1;
    }
    self->capacity = capacity, self->slot = slot;
    for (Py_ssize_t i = 0; i < capacity; i++) {
        self->iov[i].iov_base = self->buf + i * slot;
        self->msgs[i].msg_hdr.msg_iov = &self->iov[i];
        self->msgs[i].msg_hdr.msg_iovlen = 1;
        self->msgs[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_in);
    }
    return 0;
}

static void Sender_dealloc(SenderObject *self)
{
    for (Py_ssize_t i = 0; i < self->count; i++)
        Py_XDECREF(self->flows[i]);
    PyMem_Free(self->buf), PyMem_Free(self->iov), PyMem_Free(self->msgs);
    PyMem_Free(self->flows);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void queued(SenderObject *self, FlowObject *flow, Py_ssize_t n)
{
    Py_ssize_t k = self->count;
    self->iov[k].iov_len = n;
    self->msgs[k].msg_hdr.msg_name = &flow->sa;
    Py_INCREF(flow);
    self->flows[k] = (PyObject *)flow;
    self->count = k + 1, self->bytes += n;
}

static inline unsigned next_ident(unsigned ip_id)
{
    return (ip_id + 1) & 0xFFFF ? (ip_id + 1) & 0xFFFF : 1; /* 0: the kernel would pick one */
}

/* Build packets `*sub`.. of a Run until it ends or the batch is full. */
static int add_run(SenderObject *self, FlowObject *flow, PyObject *run, Py_ssize_t *sub,
                   unsigned tos, unsigned *ip_id)
{
    RunFields r;
    Py_buffer pl;
    if (read_run(run, &r, &pl) < 0)
        return -1;
    int rc = 0;
    for (; *sub < r.packets && self->count < self->capacity; (*sub)++) {
        r.f.psn = (PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(run, 2)) + *sub) & 0xFFFFFF;
        r.f.ackreq = (long)r.f.psn == r.fill;
        *ip_id = next_ident(*ip_id);
        Py_ssize_t n = build_fields(flow, &r.f, (char *)pl.buf + *sub * r.mtu, r.mtu, *ip_id, tos,
                                    self->buf + self->count * self->slot, self->slot);
        if (n < 0) {
            rc = -1;
            break;
        }
        queued(self, flow, n);
    }
    PyBuffer_Release(&pl);
    return rc;
}

static PyObject *Sender_add(SenderObject *self, PyObject *args)
{
    FlowObject *flow;
    PyObject *segs;
    Py_ssize_t i, sub;
    unsigned tos, cnp_tos, ip_id;
    if (!PyArg_ParseTuple(args, "O!O!nnIII", &FlowType, &flow, &PyList_Type, &segs, &i, &sub,
                          &tos, &cnp_tos, &ip_id))
        return NULL;
    if (self->buf == NULL || segment_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Sender: not initialised or not configured");
        return NULL;
    }
    for (; i < PyList_GET_SIZE(segs) && self->count < self->capacity; i++, sub = 0) {
        PyObject *seg = PyList_GET_ITEM(segs, i);
        if (!PyTuple_Check(seg) || (PyTuple_GET_SIZE(seg) != 7 && PyTuple_GET_SIZE(seg) < 11)) {
            PyErr_SetString(PyExc_TypeError, "Sender.add: a list of Segments and Runs");
            return NULL;
        }
        if (PyTuple_GET_SIZE(seg) == 7) { /* a Run */
            if (add_run(self, flow, seg, &sub, tos, &ip_id) < 0)
                return NULL;
            if (sub < PyLong_AsLong(PyTuple_GET_ITEM(seg, 3)))
                break; /* full in the middle of it */
            continue;
        }
        unsigned op = (unsigned)PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(seg, 0));
        if (PyErr_Occurred())
            return NULL;
        ip_id = next_ident(ip_id);
        Py_ssize_t n = build(flow, seg, ip_id, op == OP_CNP ? cnp_tos : tos,
                             self->buf + self->count * self->slot, self->slot);
        if (n < 0)
            return NULL;
        queued(self, flow, n);
    }
    return Py_BuildValue("(nnI)", i, sub, ip_id);
}

/* Drop the first `first` datagrams; move the rest to the front, in order. */
static void keep_from(SenderObject *self, Py_ssize_t first)
{
    for (Py_ssize_t j = 0; j < first; j++)
        Py_CLEAR(self->flows[j]);
    Py_ssize_t left = self->count - first;
    self->bytes = 0;
    for (Py_ssize_t j = 0; j < left; j++) {
        Py_ssize_t i = first + j;
        memcpy(self->buf + j * self->slot, self->buf + i * self->slot, self->iov[i].iov_len);
        self->iov[j].iov_len = self->iov[i].iov_len;
        self->msgs[j].msg_hdr.msg_name = self->msgs[i].msg_hdr.msg_name;
        self->flows[j] = self->flows[i], self->flows[i] = NULL;
        self->bytes += self->iov[j].iov_len;
    }
    self->count = left;
}

static PyObject *Sender_send(SenderObject *self, PyObject *arg)
{
    int fd = PyObject_AsFileDescriptor(arg), err = 0;
    if (fd < 0)
        return NULL;
    Py_ssize_t count = self->count, sent = 0, queued = self->bytes;
    while (sent < count) {
        int k;
        Py_BEGIN_ALLOW_THREADS
        k = sendmmsg(fd, self->msgs + sent, (unsigned)(count - sent), 0);
        Py_END_ALLOW_THREADS
        if (k > 0) {
            sent += k;
            continue;
        }
        err = errno;
        if (err == EINTR && PyErr_CheckSignals() == 0)
            continue;
        break;
    }
    if (err && err != EAGAIN && err != ENOBUFS && err != EINTR) {
        keep_from(self, count);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (PyErr_Occurred())
        return NULL;
    keep_from(self, sent);
    return Py_BuildValue("(nnn)", sent, count - sent, queued - self->bytes);
}

static PyObject *Sender_datagram(SenderObject *self, PyObject *arg)
{
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0 || i >= self->count) {
        PyErr_SetString(PyExc_IndexError, "no datagram queued there");
        return NULL;
    }
    return PyBytes_FromStringAndSize((char *)self->buf + i * self->slot, self->iov[i].iov_len);
}

static PyObject *Sender_count(SenderObject *self, void *closure) { return PyLong_FromSsize_t(self->count); }
static PyObject *Sender_room(SenderObject *self, void *closure)
{
    return PyLong_FromSsize_t(self->capacity - self->count);
}

static PyMethodDef Sender_methods[] = {
    {"add", (PyCFunction)Sender_add, METH_VARARGS,
     "add(flow, items, start, sub, tos, cnp_tos, ip_id) -> (next item, next packet in it, "
     "last ip_id): build Segments and Runs until done or full"},
    {"send", (PyCFunction)Sender_send, METH_O, "send(fd) -> (sent, refused, bytes sent)"},
    {"datagram", (PyCFunction)Sender_datagram, METH_O, "datagram(i) -> bytes of the i-th queued"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Sender_getset[] = {
    {"count", (getter)Sender_count, NULL, "datagrams queued", NULL},
    {"room", (getter)Sender_room, NULL, "datagrams that fit before a send", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "emulator.roce._wire.Sender",
    .tp_basicsize = sizeof(SenderObject),
    .tp_dealloc = (destructor)Sender_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Datagrams built into preallocated slots, sent with one sendmmsg(2).",
    .tp_methods = Sender_methods,
    .tp_getset = Sender_getset,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Sender_init,
};

/* MRC datagrams for _wire.c (included there, once): mrc_wire.build_into and
 * mrc_wire.parse(in_place=True) in C, byte for byte (tests/unit/roce/test_mrc.py
 * checks both against the Python reference). docs/mrc.md "Wire format". */

#define MRC_FIELDS 21 /* mrc_wire.MrcPacket */
#define MRC_EXT_AT 56
static PyTypeObject *mrc_type; /* mrc_wire.MrcPacket */
static PyObject *empty_bytes;

static int mrc_ext_len(unsigned op)
{
    static const int lens[6] = {16, 20, 16, 8, 0, 0};
    return op >= 0xE0 && op <= 0xE5 ? lens[op - 0xE0] : -1;
}

static unsigned long item_ul(PyObject *t, int i) { return PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(t, i)); }

/* One MRC packet's fields (mrc_wire.MrcPacket's, by index) for mrc_write. */
typedef struct {
    unsigned op, flags, plane, ev, echo;
    unsigned long conn, psn, msg, ts, ext, rkey, length, imm, packets, ce, ref;
    unsigned long long va, bitmap;
} MrcFields;

static int mrc_read(PyObject *t, MrcFields *f, Py_buffer *pl)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < MRC_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "expected an MrcPacket");
        return -1;
    }
    f->op = item_ul(t, 0), f->conn = item_ul(t, 1), f->psn = item_ul(t, 2);
    f->flags = item_ul(t, 3) & 0xF, f->plane = item_ul(t, 4), f->ev = item_ul(t, 5) & 0xFFFF;
    f->msg = item_ul(t, 6), f->ts = item_ul(t, 7), f->ext = item_ul(t, 8);
    f->va = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(t, 9));
    f->rkey = item_ul(t, 10), f->length = item_ul(t, 11), f->imm = item_ul(t, 12);
    f->bitmap = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(t, 14));
    f->packets = item_ul(t, 15), f->ce = item_ul(t, 16), f->echo = item_ul(t, 17);
    f->ref = item_ul(t, 18);
    if (PyErr_Occurred())
        return -1;
    if (mrc_ext_len(f->op) < 0) {
        PyErr_SetString(PyExc_ValueError, "mrc_build: not an MRC opcode");
        return -1;
    }
    memset(pl, 0, sizeof *pl);
    return f->op <= 0xE1 ? PyObject_GetBuffer(PyTuple_GET_ITEM(t, 13), pl, PyBUF_SIMPLE) : 0;
}

static void mrc_put_ext(unsigned char *p, const MrcFields *f)
{
    if (f->op <= 0xE1) {
        put32(p, (uint32_t)(f->va >> 32)), put32(p + 4, (uint32_t)f->va);
        put32(p + 8, (uint32_t)f->rkey), put32(p + 12, (uint32_t)f->length);
        if (f->op == 0xE1)
            put32(p + 16, (uint32_t)f->imm);
    } else if (f->op == 0xE2) {
        put32(p, (uint32_t)(f->bitmap >> 32)), put32(p + 4, (uint32_t)f->bitmap);
        put16(p + 8, f->packets & 0xFFFF), put16(p + 10, f->ce & 0xFFFF);
        p[12] = f->echo, p[13] = f->ref >> 16, put16(p + 14, f->ref & 0xFFFF);
    } else if (f->op == 0xE3) {
        p[0] = f->echo, p[1] = p[2] = p[3] = 0;
        put32(p + 4, f->ref & 0xFFFFFF);
    }
}

/* Build the datagram of `f` (payload `pl`, n bytes; data opcodes only) from src to dst
 * (4 bytes each) at `p` (room bytes): mrc_wire.build_into. Its length, or -1 (set). */
static Py_ssize_t mrc_write(unsigned char *p, Py_ssize_t room, const MrcFields *f,
                            const unsigned char *s, const unsigned char *d, unsigned tos,
                            unsigned ip_id, const void *pl, Py_ssize_t n)
{
    int ext = mrc_ext_len(f->op);
    n = f->op <= 0xE1 ? n : 0;
    Py_ssize_t pad = -n & 3, body = MRC_EXT_AT + ext, end = body + n + pad, total = end + ICRC_SIZE;
    if (ext < 0 || total > room) {
        PyErr_SetString(PyExc_ValueError, "mrc_build: an MRC opcode and room for the datagram");
        return -1;
    }
    p[0] = 0x45, p[1] = 0xFF, put16(p + 2, total), put16(p + 4, ip_id), put16(p + 6, 0x4000);
    p[8] = 0xFF, p[9] = IPPROTO_UDP, put16(p + 10, 0xFFFF), memcpy(p + 12, s, 4), memcpy(p + 16, d, 4);
    put16(p + 20, f->ev), put16(p + 22, ROCE_PORT), put16(p + 24, total - 20), put16(p + 26, 0xFFFF);
    p[28] = f->op, p[29] = pad << 4, put16(p + 30, 0xFFFF);
    put32(p + 32, 0xFF000000u | (f->conn & 0xFFFFFF));
    put32(p + 36, (uint32_t)(f->flags & 4 ? 1u << 31 : 0) | (f->psn & 0xFFFFFF));
    p[40] = 0x10 | f->flags, p[41] = f->plane, put16(p + 42, f->ev);
    put32(p + 44, f->msg), put32(p + 48, f->ts), put32(p + 52, f->ext);
    mrc_put_ext(p + MRC_EXT_AT, f);
    memcpy(p + body, pl, n), memset(p + body + n, 0, pad);
    uint32_t crc;
    if (crc_of(p, end, &crc) < 0)
        return -1;
    p[end] = crc, p[end + 1] = crc >> 8, p[end + 2] = crc >> 16, p[end + 3] = crc >> 24;
    uint32_t sum = 0x4500 + 0x4000 + (64 << 8 | IPPROTO_UDP) + get16(s) + get16(s + 2) +
                   get16(d) + get16(d + 2) + tos + total + ip_id;
    sum = (sum & 0xFFFF) + (sum >> 16);
    p[1] = tos, p[8] = 64, put16(p + 10, ~((sum & 0xFFFF) + (sum >> 16)) & 0xFFFF);
    p[26] = p[27] = p[32] = 0;
    return total;
}

/* mrc_build(out, packet, src, dst, tos, ip_id) -> length */
static PyObject *mrc_build(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "mrc_build(out, MrcPacket, src, dst, tos, ip_id)");
        return NULL;
    }
    unsigned tos = PyLong_AsUnsignedLongMask(args[4]), ip_id = PyLong_AsUnsignedLongMask(args[5]);
    MrcFields f;
    Py_buffer out, pl, src, dst;
    if (PyErr_Occurred() || mrc_read(args[1], &f, &pl) < 0)
        return NULL;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[0], &out, PyBUF_WRITABLE) < 0)
        goto out_pl;
    if (PyObject_GetBuffer(args[2], &src, PyBUF_SIMPLE) < 0)
        goto out_buf;
    if (PyObject_GetBuffer(args[3], &dst, PyBUF_SIMPLE) < 0)
        goto out_src;
    if (src.len != 4 || dst.len != 4)
        PyErr_SetString(PyExc_ValueError, "mrc_build: 4-byte addresses");
    else {
        Py_ssize_t n = mrc_write(out.buf, out.len, &f, src.buf, dst.buf, tos, ip_id, pl.buf, pl.len);
        result = n < 0 ? NULL : PyLong_FromSsize_t(n);
    }
    PyBuffer_Release(&dst);
out_src:
    PyBuffer_Release(&src);
out_buf:
    PyBuffer_Release(&out);
out_pl:
    if (pl.obj)
        PyBuffer_Release(&pl);
    return result;
}

static int set_ul(PyObject *t, int i, unsigned long long v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    if (o == NULL)
        return -1;
    PyTuple_SET_ITEM(t, i, o);
    return 0;
}

/* The MrcPacket of a checked datagram at `p` (n bytes), which starts `at` bytes into
 * `view` (its payload is a view of that; fields as mrc_wire._extension reads them). */
static PyObject *mrc_packet(PyObject *view, Py_ssize_t at, const unsigned char *p, Py_ssize_t n,
                            int trimmed)
{
    unsigned op = p[28], ext = mrc_ext_len(op), pad = p[29] >> 4 & 3;
    unsigned long long v[MRC_FIELDS] = {0};
    v[0] = op, v[1] = get32(p + 32) & 0xFFFFFF, v[2] = get32(p + 36) & 0xFFFFFF;
    v[3] = p[40] & 0xF, v[4] = p[41], v[5] = get16(p + 42), v[6] = get32(p + 44);
    v[7] = get32(p + 48), v[8] = get32(p + 52);
    const unsigned char *e = p + MRC_EXT_AT;
    if (op <= 0xE1) {
        v[9] = (unsigned long long)get32(e) << 32 | get32(e + 4), v[10] = get32(e + 8);
        v[11] = get32(e + 12), v[12] = op == 0xE1 ? get32(e + 16) : 0;
    } else if (op == 0xE2) {
        v[14] = (unsigned long long)get32(e) << 32 | get32(e + 4), v[15] = get16(e + 8);
        v[16] = get16(e + 10), v[17] = e[12], v[18] = (unsigned long)e[13] << 16 | get16(e + 14);
    } else if (op == 0xE3) {
        v[17] = e[0], v[18] = get32(e + 4);
    }
    v[19] = p[1] & 3, v[20] = get32(p + 12);
    PyObject *t = mrc_type->tp_alloc(mrc_type, MRC_FIELDS);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < MRC_FIELDS; i++) {
        if (i == 13) {
            Py_ssize_t body = at + MRC_EXT_AT + ext, stop = at + n - ICRC_SIZE - pad;
            PyObject *pl = op <= 0xE1 && !trimmed ? PySequence_GetSlice(view, body, stop)
                                                  : Py_NewRef(empty_bytes);
            if (pl == NULL) {
                Py_DECREF(t);
                return NULL;
            }
            PyTuple_SET_ITEM(t, 13, pl);
        } else if (set_ul(t, i, v[i]) < 0) {
            Py_DECREF(t);
            return NULL;
        }
    }
    return t;
}

/* mrc_wire.parse's checks and the ICRC (its masked fields overwritten in `p`, after they
 * were read; the TOS restored): 0 good, 1 good and TRIMMED, -1 malformed, -2 error. */
static int mrc_check(unsigned char *p, Py_ssize_t n)
{
    int ext = n >= MRC_EXT_AT + ICRC_SIZE ? mrc_ext_len(p[28]) : -1;
    if (ext < 0 || p[0] != 0x45 || p[9] != IPPROTO_UDP || get16(p + 6) & 0x3FFF ||
        get16(p + 22) != ROCE_PORT || p[40] >> 4 != 1)
        return -1;
    int trimmed = p[40] & 1;
    if ((Py_ssize_t)get16(p + 2) != n || (Py_ssize_t)get16(p + 24) != n - 20 ||
        n < MRC_EXT_AT + ext + (trimmed ? 0 : ICRC_SIZE))
        return -1;
    if (trimmed)
        return 1;
    Py_ssize_t end = n - ICRC_SIZE;
    uint32_t want = p[end] | p[end + 1] << 8 | p[end + 2] << 16 | (uint32_t)p[end + 3] << 24;
    unsigned char tos = p[1];
    uint32_t crc;
    p[1] = p[8] = p[10] = p[11] = p[26] = p[27] = p[32] = 0xFF;
    if (crc_of(p, end, &crc) < 0)
        return -2;
    p[1] = tos; /* the packet's ECN is read from it */
    return crc == want ? 0 : -1;
}

/* mrc_parse(view) -> MrcPacket, or None if malformed or its ICRC is wrong. The ICRC's
 * masked fields are overwritten in `view` (a receive buffer), after they were read. */
static PyObject *mrc_parse(PyObject *mod, PyObject *view)
{
    Py_buffer b;
    if (mrc_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "mrc_parse: mrc_configure(MrcPacket) first");
        return NULL;
    }
    if (PyObject_GetBuffer(view, &b, PyBUF_WRITABLE) < 0)
        return NULL;
    int r = mrc_check(b.buf, b.len);
    PyObject *out = r == -2 ? NULL : r == -1 ? Py_NewRef(Py_None)
                                             : mrc_packet(view, 0, b.buf, b.len, r);
    PyBuffer_Release(&b);
    return out;
}

static PyObject *mrc_configure(PyObject *mod, PyObject *type)
{
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "mrc_configure(MrcPacket): a tuple type");
        return NULL;
    }
    Py_XSETREF(mrc_type, (PyTypeObject *)Py_NewRef(type));
    if (empty_bytes == NULL && (empty_bytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL)
        return NULL;
    Py_RETURN_NONE;
}

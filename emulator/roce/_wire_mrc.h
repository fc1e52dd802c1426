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

static void mrc_put_ext(unsigned char *p, PyObject *t, unsigned op)
{
    if (op <= 0xE1) {
        unsigned long long va = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(t, 9));
        put32(p, (uint32_t)(va >> 32)), put32(p + 4, (uint32_t)va);
        put32(p + 8, (uint32_t)item_ul(t, 10)), put32(p + 12, (uint32_t)item_ul(t, 11));
        if (op == 0xE1)
            put32(p + 16, (uint32_t)item_ul(t, 12));
    } else if (op == 0xE2) {
        unsigned long long bm = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(t, 14));
        unsigned long ref = item_ul(t, 18);
        put32(p, (uint32_t)(bm >> 32)), put32(p + 4, (uint32_t)bm);
        put16(p + 8, item_ul(t, 15) & 0xFFFF), put16(p + 10, item_ul(t, 16) & 0xFFFF);
        p[12] = item_ul(t, 17), p[13] = ref >> 16, put16(p + 14, ref & 0xFFFF);
    } else if (op == 0xE3) {
        p[0] = item_ul(t, 17), p[1] = p[2] = p[3] = 0;
        put32(p + 4, item_ul(t, 18) & 0xFFFFFF);
    }
}

/* mrc_build(out, packet, src, dst, tos, ip_id) -> length */
static PyObject *mrc_build(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) < MRC_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "mrc_build(out, MrcPacket, src, dst, tos, ip_id)");
        return NULL;
    }
    PyObject *t = args[1];
    unsigned op = item_ul(t, 0), tos = PyLong_AsUnsignedLongMask(args[4]);
    unsigned ip_id = PyLong_AsUnsignedLongMask(args[5]), flags = item_ul(t, 3) & 0xF;
    int ext = mrc_ext_len(op);
    Py_buffer out, pl = {0}, src, dst;
    if (PyErr_Occurred() || ext < 0 || PyObject_GetBuffer(args[0], &out, PyBUF_WRITABLE) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "mrc_build: not an MRC opcode");
        return NULL;
    }
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[2], &src, PyBUF_SIMPLE) < 0)
        goto out_buf;
    if (PyObject_GetBuffer(args[3], &dst, PyBUF_SIMPLE) < 0)
        goto out_src;
    if (op <= 0xE1 && PyObject_GetBuffer(PyTuple_GET_ITEM(t, 13), &pl, PyBUF_SIMPLE) < 0)
        goto out_dst;
    Py_ssize_t n = op <= 0xE1 ? pl.len : 0, pad = -n & 3, body = MRC_EXT_AT + ext;
    Py_ssize_t end = body + n + pad, total = end + ICRC_SIZE;
    if (src.len != 4 || dst.len != 4 || total > out.len) {
        PyErr_SetString(PyExc_ValueError, "mrc_build: 4-byte addresses and room for the datagram");
        goto out_pl;
    }
    unsigned char *p = out.buf, *s = src.buf, *d = dst.buf;
    unsigned ev = item_ul(t, 5) & 0xFFFF;
    p[0] = 0x45, p[1] = 0xFF, put16(p + 2, total), put16(p + 4, ip_id), put16(p + 6, 0x4000);
    p[8] = 0xFF, p[9] = IPPROTO_UDP, put16(p + 10, 0xFFFF), memcpy(p + 12, s, 4), memcpy(p + 16, d, 4);
    put16(p + 20, ev), put16(p + 22, ROCE_PORT), put16(p + 24, total - 20), put16(p + 26, 0xFFFF);
    p[28] = op, p[29] = pad << 4, put16(p + 30, 0xFFFF);
    put32(p + 32, 0xFF000000u | (item_ul(t, 1) & 0xFFFFFF));
    put32(p + 36, (uint32_t)(flags & 4 ? 1u << 31 : 0) | (item_ul(t, 2) & 0xFFFFFF));
    p[40] = 0x10 | flags, p[41] = item_ul(t, 4), put16(p + 42, ev);
    put32(p + 44, item_ul(t, 6)), put32(p + 48, item_ul(t, 7)), put32(p + 52, item_ul(t, 8));
    mrc_put_ext(p + MRC_EXT_AT, t, op);
    if (PyErr_Occurred())
        goto out_pl;
    memcpy(p + body, pl.buf, n), memset(p + body + n, 0, pad);
    uint32_t crc;
    if (crc_of(p, end, &crc) < 0)
        goto out_pl;
    p[end] = crc, p[end + 1] = crc >> 8, p[end + 2] = crc >> 16, p[end + 3] = crc >> 24;
    uint32_t sum = 0x4500 + 0x4000 + (64 << 8 | IPPROTO_UDP) + get16(s) + get16(s + 2) +
                   get16(d) + get16(d + 2) + tos + total + ip_id;
    sum = (sum & 0xFFFF) + (sum >> 16);
    p[1] = tos, p[8] = 64, put16(p + 10, ~((sum & 0xFFFF) + (sum >> 16)) & 0xFFFF);
    p[26] = p[27] = p[32] = 0;
    result = PyLong_FromSsize_t(total);
out_pl:
    if (pl.obj)
        PyBuffer_Release(&pl);
out_dst:
    PyBuffer_Release(&dst);
out_src:
    PyBuffer_Release(&src);
out_buf:
    PyBuffer_Release(&out);
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

/* The MrcPacket of a checked datagram (fields as mrc_wire._extension reads them). */
static PyObject *mrc_packet(PyObject *view, const unsigned char *p, Py_ssize_t n, int trimmed)
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
            Py_ssize_t body = MRC_EXT_AT + ext, stop = n - ICRC_SIZE - pad;
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
    unsigned char *p = b.buf;
    Py_ssize_t n = b.len;
    PyObject *r = Py_None;
    int ext = n >= MRC_EXT_AT + ICRC_SIZE ? mrc_ext_len(p[28]) : -1;
    if (ext < 0 || p[0] != 0x45 || p[9] != IPPROTO_UDP || get16(p + 6) & 0x3FFF ||
        get16(p + 22) != ROCE_PORT || p[40] >> 4 != 1)
        goto done;
    int trimmed = p[40] & 1;
    if ((Py_ssize_t)get16(p + 2) != n || (Py_ssize_t)get16(p + 24) != n - 20 ||
        n < MRC_EXT_AT + ext + (trimmed ? 0 : ICRC_SIZE))
        goto done;
    if (!trimmed) {
        Py_ssize_t end = n - ICRC_SIZE;
        uint32_t want = p[end] | p[end + 1] << 8 | p[end + 2] << 16 | (uint32_t)p[end + 3] << 24;
        unsigned char tos = p[1];
        uint32_t crc;
        p[1] = p[8] = p[10] = p[11] = p[26] = p[27] = p[32] = 0xFF;
        if (crc_of(p, end, &crc) < 0) {
            r = NULL;
            goto done;
        }
        p[1] = tos; /* the packet's ECN is read from it below */
        if (crc != want)
            goto done;
    }
    r = mrc_packet(view, p, n, trimmed);
done:
    PyBuffer_Release(&b);
    if (r == Py_None)
        Py_INCREF(r);
    return r;
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

/* The MRC sender's per-packet records in C, for _wire.c (included there, once): the
 * record of each packet in flight (SentPacket, the type mrc_state.SentPacket stands for),
 * a run's records made in one call (mrc_track), a cumulative acknowledgement's advance
 * (mrc_ack_range) and the per-EV loss scan (mrc_scan). The reference is
 * mrc_sender.MrcSender's pure-Python path (`pure=True`, ROCELAB_ENGINE_PURE=1);
 * tests/unit/roce/test_mrc_tx.py drives both through the same lossy, reordering channel
 * and compares every packet and counter. docs/mrc.md "Speed".
 *
 * The EVs (mrc_ev.Path) and messages (mrc_state.SentMessage) stay Python objects with
 * __slots__; mrc_tx_configure finds their slots' offsets once, so the loops here read
 * and write those fields without an attribute lookup. */

#include <structmember.h>

typedef struct {
    PyObject_HEAD
    long long psn, index, length, seq, retries;
    PyObject *msg, *path;
    double sent;
    char lost, resent, acked; /* acked: out of `unacked` for good */
} SentObject;

static int Sent_init(SentObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"psn", "msg", "index", "length", "path", "sent", "seq", "retries",
                            "lost", "resent", "acked", NULL};
    PyObject *msg, *path;
    int lost = 0, resent = 0, acked = 0;
    self->seq = self->retries = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LOLLOd|LLppp", names, &self->psn, &msg,
                                     &self->index, &self->length, &path, &self->sent, &self->seq,
                                     &self->retries, &lost, &resent, &acked))
        return -1;
    Py_XSETREF(self->msg, Py_NewRef(msg));
    Py_XSETREF(self->path, Py_NewRef(path));
    self->lost = (char)lost;
    self->resent = (char)resent;
    self->acked = (char)acked;
    return 0;
}

static int Sent_traverse(SentObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->msg);
    Py_VISIT(self->path);
    return 0;
}

static int Sent_clear(SentObject *self)
{
    Py_CLEAR(self->msg);
    Py_CLEAR(self->path); /* a Path's queue holds its packets: a cycle the GC breaks here */
    return 0;
}

static void Sent_dealloc(SentObject *self)
{
    PyObject_GC_UnTrack(self);
    Sent_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Sent_members[] = {
    {"psn", T_LONGLONG, offsetof(SentObject, psn), 0, NULL},
    {"msg", T_OBJECT_EX, offsetof(SentObject, msg), 0, NULL},
    {"index", T_LONGLONG, offsetof(SentObject, index), 0, NULL},
    {"length", T_LONGLONG, offsetof(SentObject, length), 0, NULL},
    {"path", T_OBJECT_EX, offsetof(SentObject, path), 0, NULL},
    {"sent", T_DOUBLE, offsetof(SentObject, sent), 0, NULL},
    {"seq", T_LONGLONG, offsetof(SentObject, seq), 0, "its place in its EV's sending order"},
    {"retries", T_LONGLONG, offsetof(SentObject, retries), 0, NULL},
    {"lost", T_BOOL, offsetof(SentObject, lost), 0, NULL},
    {"acked", T_BOOL, offsetof(SentObject, acked), 0, "acknowledged: no longer outstanding"},
    {"resent", T_BOOL, offsetof(SentObject, resent), 0,
     "an acknowledgement may be of an earlier transmission"},
    {NULL},
};

static PyTypeObject SentType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emulator.roce._wire.SentPacket",
    .tp_doc = "SentPacket(psn, msg, index, length, path, sent, seq=0, retries=0, lost=False, "
              "resent=False, acked=False): one MRC packet in flight (mrc_state.SentPacket)",
    .tp_basicsize = sizeof(SentObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Sent_init,
    .tp_traverse = (traverseproc)Sent_traverse,
    .tp_clear = (inquiry)Sent_clear,
    .tp_dealloc = (destructor)Sent_dealloc,
    .tp_members = Sent_members,
};

/* -- the slots of Path and SentMessage ------------------------------------------------ */

enum { P_PLANE, P_EV, P_SEQ_SENT, P_SEQ_ACKED, P_PACKETS, P_BYTES, P_QUEUE, P_ACKED_AT, P_STATE,
       P_ASIDE, P_FIELDS };
enum { M_WR_ID, M_PACKETS, M_MADE, M_UNACKED, M_FIELDS };
static const char *path_names[P_FIELDS] = {"plane", "ev", "seq_sent", "seq_acked", "packets",
                                           "bytes", "queue", "acked_at", "state",
                                           "aside_until"};
static const char *msg_names[M_FIELDS] = {"wr_id", "packets", "made", "unacked"};
static Py_ssize_t path_off[P_FIELDS], msg_off[M_FIELDS];
static PyTypeObject *path_type, *msg_type;
static PyObject *ev_unknown, *ev_good;
/* deque's own methods (descriptors), called with the deque as first argument: no lookup */
static PyObject *dq_append, *dq_appendleft, *dq_popleft, *dq_extend;

static PyObject *dq_call(PyObject *method, PyObject *dq, PyObject *arg)
{
    PyObject *argv[2] = {dq, arg};
    return PyObject_Vectorcall(method, argv, arg == NULL ? 1 : 2, NULL);
}

static int slot_offsets(PyTypeObject *type, const char **names, int n, Py_ssize_t *out)
{
    for (int i = 0; i < n; i++) {
        PyObject *d = PyDict_GetItemString(type->tp_dict, names[i]);
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "mrc_tx_configure: %s.%s is not a slot", type->tp_name,
                         names[i]);
            return -1;
        }
        out[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    return 0;
}

/* mrc_tx_configure(Path, SentMessage, EvState.UNKNOWN, EvState.GOOD) */
static PyObject *mrc_tx_configure(PyObject *mod, PyObject *args)
{
    PyObject *pt, *mt, *unknown, *good;
    if (!PyArg_ParseTuple(args, "O!O!OO", &PyType_Type, &pt, &PyType_Type, &mt, &unknown, &good))
        return NULL;
    if (slot_offsets((PyTypeObject *)pt, path_names, P_FIELDS, path_off) < 0 ||
        slot_offsets((PyTypeObject *)mt, msg_names, M_FIELDS, msg_off) < 0)
        return NULL;
    if (dq_append == NULL) {
        PyObject *collections = PyImport_ImportModule("collections");
        PyObject *deque = collections ? PyObject_GetAttrString(collections, "deque") : NULL;
        Py_XDECREF(collections);
        if (deque == NULL)
            return NULL;
        dq_append = PyObject_GetAttrString(deque, "append");
        dq_appendleft = PyObject_GetAttrString(deque, "appendleft");
        dq_popleft = PyObject_GetAttrString(deque, "popleft");
        dq_extend = PyObject_GetAttrString(deque, "extend");
        Py_DECREF(deque);
        if (!dq_append || !dq_appendleft || !dq_popleft || !dq_extend) {
            Py_CLEAR(dq_append);
            Py_CLEAR(dq_appendleft);
            Py_CLEAR(dq_popleft);
            Py_CLEAR(dq_extend);
            return NULL;
        }
    }
    Py_XSETREF(path_type, (PyTypeObject *)Py_NewRef(pt));
    Py_XSETREF(msg_type, (PyTypeObject *)Py_NewRef(mt));
    Py_XSETREF(ev_unknown, Py_NewRef(unknown));
    Py_XSETREF(ev_good, Py_NewRef(good));
    Py_RETURN_NONE;
}

static inline PyObject **slot(PyObject *o, Py_ssize_t off) { return (PyObject **)((char *)o + off); }

/* A slot's object (borrowed; NULL with an exception if it is unset). */
static PyObject *slot_obj(PyObject *o, Py_ssize_t off)
{
    PyObject *v = *slot(o, off);
    if (v == NULL)
        PyErr_SetString(PyExc_AttributeError, "an MRC record's field is unset");
    return v;
}

/* A slot's int value (-1 with an exception if it is unset or not an int). */
static long long slot_ll(PyObject *o, Py_ssize_t off)
{
    PyObject *v = *slot(o, off);
    if (v == NULL || !PyLong_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "an MRC record's field is unset or not an int");
        return -1;
    }
    return PyLong_AsLongLong(v);
}

static int slot_set(PyObject *o, Py_ssize_t off, long long v)
{
    PyObject *n = PyLong_FromLongLong(v);
    if (n == NULL)
        return -1;
    Py_XSETREF(*slot(o, off), n);
    return 0;
}

static int slot_add(PyObject *o, Py_ssize_t off, long long d)
{
    long long v = slot_ll(o, off);
    return v == -1 && PyErr_Occurred() ? -1 : slot_set(o, off, v + d);
}

static int check_path(PyObject *p)
{
    if (path_type == NULL || !Py_IS_TYPE(p, path_type)) {
        PyErr_SetString(PyExc_TypeError, "not an mrc_ev.Path (or mrc_tx_configure not called)");
        return -1;
    }
    return 0;
}

static SentObject *as_sent(PyObject *o)
{
    if (!Py_IS_TYPE(o, &SentType)) {
        PyErr_SetString(PyExc_TypeError, "not an _wire.SentPacket");
        return NULL;
    }
    return (SentObject *)o;
}

/* mrc_track(unacked, psn, msg, index, length, paths, now) -> [plane << 16 | ev, ...]
 * Packets psn.. (message indexes index..), `length` bytes each, one on each of `paths`:
 * each a SentPacket in `unacked` and on its EV's queue, at the EV's next sending-order
 * place, counted on the EV: MrcSender._track of each (the message's count stays Python's). */
static PyObject *mrc_track(PyObject *mod, PyObject *args)
{
    PyObject *unacked, *msg, *paths;
    long long psn, index, length;
    double now;
    if (!PyArg_ParseTuple(args, "O!LOLLO!d", &PyDict_Type, &unacked, &psn, &msg, &index, &length,
                          &PyList_Type, &paths, &now))
        return NULL;
    if (msg_type == NULL || !Py_IS_TYPE(msg, msg_type))
        return PyErr_Format(PyExc_TypeError, "mrc_track: msg is not a SentMessage");
    Py_ssize_t n = PyList_GET_SIZE(paths);
    PyObject *evs = PyList_New(n);
    if (evs == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *path = PyList_GET_ITEM(paths, i);
        if (check_path(path) < 0)
            goto fail;
        long long seq = slot_ll(path, path_off[P_SEQ_SENT]);
        long long plane = slot_ll(path, path_off[P_PLANE]), ev = slot_ll(path, path_off[P_EV]);
        if (PyErr_Occurred())
            goto fail;
        SentObject *st = PyObject_GC_New(SentObject, &SentType);
        if (st == NULL)
            goto fail;
        st->psn = psn + i;
        st->index = index + i;
        st->length = length;
        st->seq = seq;
        st->retries = 0;
        st->msg = Py_NewRef(msg);
        st->path = Py_NewRef(path);
        st->sent = now;
        st->lost = st->resent = st->acked = 0;
        PyObject_GC_Track(st);
        PyObject *key = PyLong_FromLongLong(psn + i);
        int bad = key == NULL || PyDict_SetItem(unacked, key, (PyObject *)st) < 0;
        Py_XDECREF(key);
        PyObject *queue = bad ? NULL : slot_obj(path, path_off[P_QUEUE]);
        PyObject *r = queue == NULL ? NULL
                                    : dq_call(dq_append, queue, (PyObject *)st);
        Py_DECREF(st);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
        PyObject *e = PyLong_FromLongLong(plane << 16 | ev);
        if (e == NULL || slot_set(path, path_off[P_SEQ_SENT], seq + 1) < 0 ||
            slot_add(path, path_off[P_PACKETS], 1) < 0 ||
            slot_add(path, path_off[P_BYTES], length) < 0) {
            Py_XDECREF(e);
            goto fail;
        }
        PyList_SET_ITEM(evs, i, e);
    }
    return evs;
fail:
    Py_DECREF(evs);
    return NULL;
}

/* mrc_ack_range(unacked, lo, hi, acked_paths, done, fresh, plane_acks, acks)
 *   -> (bytes acknowledged, bytes of them in flight, acks)
 * MrcSender._ack_range with EvSet.acked_all: every PSN in [lo, hi) still in `unacked`
 * acknowledged, in order. */
static PyObject *mrc_ack_range(PyObject *mod, PyObject *args)
{
    PyObject *unacked, *acked_paths, *done, *fresh, *plane_acks;
    long long lo, hi, acks;
    if (!PyArg_ParseTuple(args, "O!LLO!O!OO!L", &PyDict_Type, &unacked, &lo, &hi, &PyDict_Type,
                          &acked_paths, &PyList_Type, &done, &fresh, &PyList_Type, &plane_acks,
                          &acks))
        return NULL;
    Py_ssize_t planes = PyList_GET_SIZE(plane_acks);
    long long *per_plane = PyMem_Calloc(planes ? planes : 1, sizeof *per_plane);
    PyObject *recycled = PyList_New(0);
    long long acked = 0, inflight = 0;
    if (per_plane == NULL || recycled == NULL)
        goto fail;
    for (long long psn = lo; psn < hi; psn++) {
        PyObject *key = PyLong_FromLongLong(psn);
        if (key == NULL)
            goto fail;
        PyObject *o = PyDict_GetItemWithError(unacked, key);
        if (o == NULL) {
            Py_DECREF(key);
            if (PyErr_Occurred())
                goto fail;
            continue;
        }
        SentObject *st = as_sent(o);
        Py_XINCREF(st);
        int bad = st == NULL || PyDict_DelItem(unacked, key) < 0;
        Py_DECREF(key);
        if (bad) {
            Py_XDECREF(st);
            goto fail;
        }
        st->acked = 1;
        PyObject *path = st->path, *msg = st->msg;
        acked += st->length;
        if (check_path(path) < 0)
            goto fail_st;
        if (msg == NULL || !Py_IS_TYPE(msg, msg_type)) {
            PyErr_SetString(PyExc_TypeError, "mrc_ack_range: a record whose msg is not a SentMessage");
            goto fail_st;
        }
        if (!st->lost) {
            inflight += st->length;
            if (PyList_Append(recycled, path) < 0)
                goto fail_st;
        }
        if (!st->resent) { /* no EV known: certain if not resent */
            long long seq_acked = slot_ll(path, path_off[P_SEQ_ACKED]);
            if (seq_acked == -1 && PyErr_Occurred())
                goto fail_st;
            if (st->seq > seq_acked && (slot_set(path, path_off[P_SEQ_ACKED], st->seq) < 0 ||
                                        PyDict_SetItem(acked_paths, path, Py_None) < 0))
                goto fail_st;
        }
        long long plane = slot_ll(path, path_off[P_PLANE]);
        if (plane < 0 || plane >= planes) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "mrc_ack_range: a plane past plane_acks");
            goto fail_st;
        }
        per_plane[plane]++;
        if (slot_set(path, path_off[P_ACKED_AT], ++acks) < 0)
            goto fail_st;
        if (*slot(path, path_off[P_STATE]) == ev_unknown)
            Py_XSETREF(*slot(path, path_off[P_STATE]), Py_NewRef(ev_good));
        long long left = slot_ll(msg, msg_off[M_UNACKED]) - 1;
        if (PyErr_Occurred() || slot_set(msg, msg_off[M_UNACKED], left) < 0)
            goto fail_st;
        if (left == 0) {
            long long made = slot_ll(msg, msg_off[M_MADE]), all = slot_ll(msg, msg_off[M_PACKETS]);
            if (PyErr_Occurred())
                goto fail_st;
            if (made == all) {
                PyObject *t = PyTuple_Pack(2, *slot(msg, msg_off[M_WR_ID]), Py_True);
                if (t == NULL || PyList_Append(done, t) < 0) {
                    Py_XDECREF(t);
                    goto fail_st;
                }
                Py_DECREF(t);
            }
        }
        Py_DECREF(st);
        continue;
    fail_st:
        Py_DECREF(st);
        goto fail;
    }
    for (Py_ssize_t p = 0; p < planes; p++) {
        if (!per_plane[p])
            continue;
        PyObject *was = PyList_GET_ITEM(plane_acks, p);
        long long v = PyLong_AsLongLong(was);
        PyObject *now = v == -1 && PyErr_Occurred() ? NULL : PyLong_FromLongLong(v + per_plane[p]);
        if (now == NULL)
            goto fail;
        PyList_SetItem(plane_acks, p, now); /* steals now, drops was */
    }
    PyObject *r = PyList_GET_SIZE(recycled) ? dq_call(dq_extend, fresh, recycled)
                                            : Py_NewRef(Py_None);
    if (r == NULL)
        goto fail;
    Py_DECREF(r);
    PyMem_Free(per_plane);
    Py_DECREF(recycled);
    return Py_BuildValue("(LLL)", acked, inflight, acks);
fail:
    PyMem_Free(per_plane);
    Py_XDECREF(recycled);
    return NULL;
}

/* mrc_scan(acked_paths, allowance) -> [SentPacket lost, ...]
 * MrcSender._scan_losses without the losing: per EV of `acked_paths` (a dict: in its order),
 * in its sending order, each packet still outstanding while more than `allowance` packets
 * sent after it on the same EV were acknowledged is marked lost and listed; the stale
 * entries before it (acknowledged, lost or resent elsewhere) leave the queue. */
static PyObject *mrc_scan(PyObject *mod, PyObject *args)
{
    PyObject *acked_paths, *path, *value;
    long long allowance;
    if (!PyArg_ParseTuple(args, "O!L", &PyDict_Type, &acked_paths, &allowance))
        return NULL;
    PyObject *lost = PyList_New(0);
    if (lost == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    while (PyDict_Next(acked_paths, &pos, &path, &value)) { /* borrowed; nothing here adds keys */
        int bad = check_path(path) < 0;
        PyObject *queue = bad ? NULL : slot_obj(path, path_off[P_QUEUE]);
        long long limit = bad ? 0 : slot_ll(path, path_off[P_SEQ_ACKED]) - allowance;
        bad = bad || PyErr_Occurred() || queue == NULL;
        while (!bad) {
            Py_ssize_t n = PyObject_Length(queue);
            if (n <= 0) {
                bad = n < 0;
                break;
            }
            PyObject *head = dq_call(dq_popleft, queue, NULL); /* put back if it stays */
            SentObject *st = head ? as_sent(head) : NULL;
            if (st == NULL) {
                Py_XDECREF(head);
                bad = 1;
                break;
            }
            /* live: on this EV, not lost, not acknowledged (still in `unacked`) */
            if (st->path == path && !st->lost && !st->acked) {
                if (st->seq >= limit) {
                    PyObject *r = dq_call(dq_appendleft, queue, head);
                    bad = r == NULL;
                    Py_XDECREF(r);
                    Py_DECREF(head);
                    break;
                }
                st->lost = 1; /* as _lose does first: a second entry of it is now stale */
                bad = PyList_Append(lost, head) < 0;
            }
            Py_DECREF(head);
        }
        if (bad) {
            Py_DECREF(lost);
            return NULL;
        }
    }
    return lost;
}

/* A Path's set-aside clock (aside_until); -1 with an exception if it is not a Path. */
static long long aside_of(PyObject *path)
{
    return check_path(path) < 0 ? -1 : slot_ll(path, path_off[P_ASIDE]);
}

/* mrc_take(fresh, usable, active, cursor, picks, n) -> (paths, cursor, picks, recycled)
 * EvSet.take: the EVs of a run of `n` new packets. Each pick advances `picks` (the
 * set-aside clock) and takes the oldest EV of `fresh` (a deque: the recycled EVs) whose
 * state is one of `usable` and which is not set aside; with none left, the round robin's
 * next EV of `active` (from `cursor`), or the next one after it not set aside. */
static PyObject *mrc_take(PyObject *mod, PyObject *args)
{
    PyObject *fresh, *usable, *active;
    Py_ssize_t cursor, n;
    long long picks, recycled = 0;
    if (!PyArg_ParseTuple(args, "OO!O!nLn", &fresh, &PyTuple_Type, &usable, &PyList_Type, &active,
                          &cursor, &picks, &n))
        return NULL;
    Py_ssize_t na = PyList_GET_SIZE(active), nu = PyTuple_GET_SIZE(usable);
    if (na == 0 || n < 0 || cursor < 0)
        return PyErr_Format(PyExc_ValueError, "mrc_take: no active EV, or a negative count");
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *path = NULL;
        picks++;
        Py_ssize_t left;
        while (path == NULL && (left = PyObject_Length(fresh)) > 0) {
            PyObject *cand = dq_call(dq_popleft, fresh, NULL);
            long long aside = cand == NULL ? -1 : aside_of(cand);
            PyObject *state = aside == -1 && PyErr_Occurred() ? NULL : slot_obj(cand, path_off[P_STATE]);
            if (state == NULL) {
                Py_XDECREF(cand);
                goto fail;
            }
            int ok = 0;
            for (Py_ssize_t u = 0; u < nu && !ok; u++)
                ok = PyTuple_GET_ITEM(usable, u) == state;
            if (ok && aside <= picks) {
                path = cand;
                recycled++;
            } else {
                Py_DECREF(cand);
            }
        }
        if (path == NULL) {
            if (left < 0)
                goto fail;
            cursor = (cursor + 1) % na;
            path = PyList_GET_ITEM(active, cursor);
            long long aside = aside_of(path);
            if (aside == -1 && PyErr_Occurred())
                goto fail;
            for (Py_ssize_t k = 1; aside > picks && k < na; k++) { /* EvSet._not_aside */
                PyObject *cand = PyList_GET_ITEM(active, (cursor + k) % na);
                long long a = aside_of(cand);
                if (a == -1 && PyErr_Occurred())
                    goto fail;
                if (a <= picks) {
                    cursor = (cursor + k) % na;
                    path = cand;
                    break;
                }
            }
            Py_INCREF(path);
        }
        PyList_SET_ITEM(out, i, path);
    }
    return Py_BuildValue("(NnLL)", out, cursor, picks, recycled);
fail:
    Py_DECREF(out);
    return NULL;
}

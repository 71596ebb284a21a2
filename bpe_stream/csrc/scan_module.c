/*
 * scan_module.c -- bpe_stream._scan: the Python face of the native scanner (scan.c) and
 * of the pretoken count table (counttable.c).
 *
 * Only argument parsing and object conversion live here; the algorithms know nothing of
 * Python.  (To be folded into the shared module file of bpe_stream/csrc/ later.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "counttable.h"
#include "scan.h"

#define SPAN_BATCH 1024 /* spans per bs_scan call, on the stack */

/* Parses the keyword arguments (data, pattern): a buffer, to be released, and a
 * bs_scan_pattern.  0 (an exception set, nothing to release) when they do not parse. */
static int data_and_pattern(PyObject *args, PyObject *kwargs, const char *format, Py_buffer *buf, int *pattern) {
    static char *keywords[] = {"data", "pattern", NULL};
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, keywords, buf, &name)) return 0;
    if ((*pattern = bs_scan_pattern_by_name(name)) == BS_SCAN_EPATTERN) {
        PyErr_Format(PyExc_ValueError, "no native scanner for the pretokenizer '%s'", name);
        PyBuffer_Release(buf);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(scan_doc,
             "scan(data, pattern) -> list of bytes\n\n"
             "The pretokens of the bytes-like ``data`` for the named pattern (gpt2, cl100k, o200k,\n"
             "whitespace, words, none): exactly ``regex.findall`` on\n"
             "``data.decode('utf-8', 'surrogateescape')``, each match encoded back the same way.");

static PyObject *py_scan(PyObject *self, PyObject *args, PyObject *kwargs) {
    Py_buffer buf;
    int pattern;
    if (!data_and_pattern(args, kwargs, "y*s:scan", &buf, &pattern)) return NULL;
    PyObject *result = NULL, *list = PyList_New(0);
    if (!list) goto done;
    bs_span spans[SPAN_BATCH];
    const uint8_t *data = buf.buf;
    size_t pos = 0;
    ptrdiff_t got;
    while ((got = bs_scan(pattern, data, (size_t)buf.len, &pos, spans, SPAN_BATCH)) > 0) {
        for (ptrdiff_t i = 0; i < got; i++) {
            PyObject *piece = PyBytes_FromStringAndSize((const char *)data + spans[i].start,
                                                        (Py_ssize_t)(spans[i].end - spans[i].start));
            if (!piece || PyList_Append(list, piece) < 0) {
                Py_XDECREF(piece);
                goto done;
            }
            Py_DECREF(piece);
        }
    }
    result = list;
    list = NULL;
done:
    Py_XDECREF(list);
    PyBuffer_Release(&buf);
    return result;
}

/* -- CountTable ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    bs_counttable *table; /* used with the GIL held: one thread at a time */
} CountTableObject;

static PyObject *table_error(int rc) {
    switch (rc) {
    case BS_CT_ENOMEM: return PyErr_NoMemory();
    case BS_CT_ELIMIT:
        PyErr_SetString(PyExc_OverflowError, "count table limit: a pretoken over 4 GiB, 2**32-1 distinct "
                                             "pretokens, or counts over 2**64-1");
        return NULL;
    case BS_CT_EPACKED:
        PyErr_SetString(PyExc_ValueError, "packed counts are malformed (entries before the fault were merged)");
        return NULL;
    default: PyErr_Format(PyExc_SystemError, "count table error %d", rc); return NULL;
    }
}

static PyObject *table_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":CountTable", keywords)) return NULL;
    CountTableObject *self = (CountTableObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (!(self->table = bs_ct_new())) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void table_dealloc(CountTableObject *self) {
    bs_ct_free(self->table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(feed_doc, "feed(data, pattern) -> int\n\n"
                       "Counts the pretokens of the bytes-like ``data`` for the named pattern (as ``scan``)\n"
                       "and returns how many there were.");

static PyObject *table_feed(CountTableObject *self, PyObject *args, PyObject *kwargs) {
    Py_buffer buf;
    int pattern;
    if (!data_and_pattern(args, kwargs, "y*s:feed", &buf, &pattern)) return NULL;
    uint64_t counted = 0;
    int rc = bs_ct_feed(self->table, pattern, buf.buf, (size_t)buf.len, &counted);
    PyBuffer_Release(&buf);
    if (rc != BS_CT_OK) return table_error(rc);
    return PyLong_FromUnsignedLongLong(counted);
}

PyDoc_STRVAR(add_doc, "add(key, count=1)\n\nAdds ``count`` to the count of the bytes-like ``key``.");

static PyObject *table_add(CountTableObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"key", "count", NULL};
    Py_buffer key;
    PyObject *count_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|O!:add", keywords, &key, &PyLong_Type, &count_obj)) return NULL;
    unsigned long long count = 1;
    if (count_obj && (count = PyLong_AsUnsignedLongLong(count_obj)) == (unsigned long long)-1 && PyErr_Occurred()) {
        PyBuffer_Release(&key);
        return NULL;
    }
    int rc = bs_ct_add(self->table, key.buf, (size_t)key.len, count);
    PyBuffer_Release(&key);
    if (rc != BS_CT_OK) return table_error(rc);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(merge_doc, "merge(packed)\n\nAdds the counts of a bytes-like ``packed`` (what ``pack`` gives).");

static PyObject *table_merge(CountTableObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"packed", NULL};
    Py_buffer buf;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*:merge", keywords, &buf)) return NULL;
    int rc = bs_ct_merge_packed(self->table, buf.buf, (size_t)buf.len);
    PyBuffer_Release(&buf);
    if (rc != BS_CT_OK) return table_error(rc);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(pack_doc, "pack() -> bytes\n\n"
                       "The entries, in insertion order, each as a little-endian u32 length, the pretoken's\n"
                       "bytes and a little-endian u64 count.");

static PyObject *table_pack(CountTableObject *self, PyObject *unused) {
    size_t size = bs_ct_packed_size(self->table);
    if (size > PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out) bs_ct_pack(self->table, (uint8_t *)PyBytes_AS_STRING(out));
    return out;
}

PyDoc_STRVAR(to_dict_doc, "to_dict() -> dict\n\nThe counts as a dict of bytes -> int, in insertion order.");

static PyObject *table_to_dict(CountTableObject *self, PyObject *unused) {
    PyObject *dict = PyDict_New();
    size_t n = bs_ct_len(self->table);
    for (size_t i = 0; dict && i < n; i++) {
        const uint8_t *key;
        size_t len;
        uint64_t count;
        bs_ct_entry(self->table, i, &key, &len, &count);
        PyObject *k = PyBytes_FromStringAndSize((const char *)key, (Py_ssize_t)len);
        PyObject *v = k ? PyLong_FromUnsignedLongLong(count) : NULL;
        if (!v || PyDict_SetItem(dict, k, v) < 0) Py_CLEAR(dict);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return dict;
}

static PyObject *table_clear(CountTableObject *self, PyObject *unused) {
    bs_ct_clear(self->table);
    Py_RETURN_NONE;
}

static Py_ssize_t table_len(CountTableObject *self) { return (Py_ssize_t)bs_ct_len(self->table); }

static PyObject *table_total(CountTableObject *self, void *unused) {
    return PyLong_FromUnsignedLongLong(bs_ct_total(self->table));
}

static PyMethodDef table_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))table_feed, METH_VARARGS | METH_KEYWORDS, feed_doc},
    {"add", (PyCFunction)(void (*)(void))table_add, METH_VARARGS | METH_KEYWORDS, add_doc},
    {"merge", (PyCFunction)(void (*)(void))table_merge, METH_VARARGS | METH_KEYWORDS, merge_doc},
    {"pack", (PyCFunction)table_pack, METH_NOARGS, pack_doc},
    {"to_dict", (PyCFunction)table_to_dict, METH_NOARGS, to_dict_doc},
    {"clear", (PyCFunction)table_clear, METH_NOARGS, "clear()\n\nRemoves every entry."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef table_getset[] = {
    {"total", (getter)table_total, NULL, "The sum of the counts.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods table_as_sequence = {.sq_length = (lenfunc)table_len};

static PyTypeObject CountTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_stream._scan.CountTable",
    .tp_doc = "CountTable()\n\nPretoken bytes -> 64-bit counts in native memory (len(): distinct pretokens).",
    .tp_basicsize = sizeof(CountTableObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = table_new,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_methods = table_methods,
    .tp_getset = table_getset,
    .tp_as_sequence = &table_as_sequence,
};

/* -- the module ---------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))py_scan, METH_VARARGS | METH_KEYWORDS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan",
    "The native pretokenizer scanner of bpe_stream (see bpe_stream/scan.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&CountTableType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CountTableType);
    if (PyModule_AddObject(m, "CountTable", (PyObject *)&CountTableType) < 0) {
        Py_DECREF(&CountTableType);
        goto fail;
    }
    PyObject *names = PyTuple_New(BS_SCAN_N_PATTERNS);
    if (!names) goto fail;
    for (int i = 0; i < BS_SCAN_N_PATTERNS; i++) {
        PyObject *name = PyUnicode_FromString(bs_scan_pattern_name(i));
        if (!name) {
            Py_DECREF(names);
            goto fail;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    if (PyModule_AddObject(m, "PATTERNS", names) < 0) {
        Py_DECREF(names);
        goto fail;
    }
    if (PyModule_AddStringConstant(m, "REGEX_VERSION", bs_scan_regex_version()) < 0 ||
        PyModule_AddStringConstant(m, "UNICODE_VERSION", bs_scan_unicode_version()) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}

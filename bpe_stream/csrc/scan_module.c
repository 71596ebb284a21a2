/*
 * scan_module.c -- bpe_stream._scan: the Python face of the native scanner (scan.c).
 *
 * Only argument parsing and object conversion live here; scan.c knows nothing of Python.
 * (To be folded into the shared module file of bpe_stream/csrc/ later.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "scan.h"

#define SPAN_BATCH 1024 /* spans per bs_scan call, on the stack */

static int pattern_arg(const char *name) {
    int pattern = bs_scan_pattern_by_name(name);
    if (pattern == BS_SCAN_EPATTERN)
        PyErr_Format(PyExc_ValueError, "no native scanner for the pretokenizer '%s'", name);
    return pattern;
}

PyDoc_STRVAR(scan_doc,
             "scan(data, pattern) -> list of bytes\n\n"
             "The pretokens of the bytes-like ``data`` for the named pattern (gpt2, cl100k, o200k,\n"
             "whitespace, words, none): exactly ``regex.findall`` on\n"
             "``data.decode('utf-8', 'surrogateescape')``, each match encoded back the same way.");

static PyObject *py_scan(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"data", "pattern", NULL};
    Py_buffer buf;
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*s:scan", keywords, &buf, &name)) return NULL;
    PyObject *result = NULL, *list = NULL;
    int pattern = pattern_arg(name);
    if (pattern < 0) goto done;
    if (!(list = PyList_New(0))) goto done;
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

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))py_scan, METH_VARARGS | METH_KEYWORDS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan",
    "The native pretokenizer scanner of bpe_stream (see bpe_stream/scan.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
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

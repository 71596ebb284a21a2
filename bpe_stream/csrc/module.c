/*
 * module.c: the extension bpe_stream._fastbpe -- the only file here that includes Python.h.
 *
 * It parses the arguments (keywords allowed everywhere), turns Python objects into the
 * plain buffers the algorithms take, their results back into objects, and their statuses
 * (common.h) into exceptions: BS_NO_MEMORY -> MemoryError, BS_TOO_LARGE -> OverflowError
 * (the Python callers word it as their own "too large" error), BS_OUT_OF_ORDER ->
 * RuntimeError, the rest -> ValueError.  The algorithms:
 *
 *   common.{h,c}      sentinels, statuses, the hash, checked growth (bs_limit32)
 *   layout.h          the tie-break rules, shared with Python
 *   pairs.{h,c}       pair records, pair table, heap with the tie-break, cold list
 *   merge_loop.{h,c}  the merge loop (in memory, or in a file arena)  -> MergeLoop
 *   filearena.{h,c}   memory in a scratch file: the disk path's tables -> MergeLoop(scratch_dir=)
 *   encoder.{h,c}     rank-ordered BPE of one pretoken               -> Encoder
 *   textencoder.{h,c} UTF-8 bytes to ids: special tokens (specials.{h,c}), the scanner,
 *                     a bounded pretoken cache (idcache.{h,c}), the encoder
 *                                                                    -> Encoder.encode_text()
 *   idformat.{h,c}    ids as txt, u16, u32 bytes                     -> Encoder.encode_text()
 *   scan.{h,c}        the named pretokenizers over UTF-8 bytes       -> scan()
 *                     (character classes in unicode_tables.h, generated from regex)
 *   counttable.{h,c}  pretoken bytes -> 64-bit counts, scan + count   -> CountTable
 *                     (its large arrays on huge pages: hugepages.{h,c})
 *   runs.{h,c}        tables packed in key order, merged k-way        -> CountTable.pack(sorted=True),
 *                                                                        merge_runs(), merge_runs_packed()
 *   storecheck.{h,c}  an LMDB data file's structure checked           -> store_check()
 *   storewrite.{h,c}  a batch of counts written into the store        -> StoreWriter
 *                     (LMDB itself: lmdb/, compiled by lmdb_build.c)
 *   filedigest.{h,c}  the XXH3-128 digest of a counted file's bytes  -> FileDigest
 *                     (xxHash itself: xxhash/)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>

#include "common.h"
#include "encoder.h"
#include "filedigest.h"
#include "idformat.h"
#include "layout.h"
#include "merge_loop.h"
#include "counttable.h"
#include "runs.h"
#include "scan.h"
#include "specials.h"
#include "storecheck.h"
#include "storewrite.h"
#include "lmdb/lmdb.h"
#include "textencoder.h"

/* NULL, with the exception of an algorithm's status set. */
static PyObject *raise_status(int status) {
    const char *text = bs_status_text(status);
    switch (status) {
    case BS_NO_MEMORY: return PyErr_NoMemory();
    case BS_TOO_LARGE: PyErr_SetString(PyExc_OverflowError, text); break;
    case BS_OUT_OF_ORDER: PyErr_SetString(PyExc_RuntimeError, text); break;
    case BS_NO_DISK: return PyErr_SetFromErrno(PyExc_OSError); /* errno set where it failed */
    default: PyErr_SetString(PyExc_ValueError, text); break;
    }
    return NULL;
}

/* The number of a tie-break rule from its name, or -1 with ValueError set. */
static int tie_break_number(const char *name) {
    for (int rule = 0; rule < TB_COUNT; rule++)
        if (!strcmp(name, bs_tie_break_name(rule))) return rule;
    PyErr_Format(PyExc_ValueError, "unknown tie-break '%s'", name);
    return -1;
}

/* Adds each bytes object of the list `tokens` with add(target, ...); -1 with an exception. */
static int add_tokens(PyObject *tokens, int (*add)(void *, const uint8_t *, size_t), void *target) {
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(tokens); t++) {
        PyObject *item = PyList_GET_ITEM(tokens, t);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "tokens must be bytes");
            return -1;
        }
        int rc = add(target, (const uint8_t *)PyBytes_AS_STRING(item), (size_t)PyBytes_GET_SIZE(item));
        if (rc) { raise_status(rc); return -1; }
    }
    return 0;
}

static int add_loop_token(void *m, const uint8_t *data, size_t len) { return merge_loop_add_token(m, data, len); }

/* A token id from Python; ids beyond 32 bits become BS_NONE, which no token has. */
static uint32_t token_id(unsigned long long v) { return v >= BS_NONE ? BS_NONE : (uint32_t)v; }

/* -- MergeLoop -------------------------------------------------------------------------- */
/* BPE_STREAM_DEBUG=1: the time spent loading and merging (bs_seconds), reported by stats(). */

typedef struct {
    PyObject_HEAD
    MergeLoop *m;
    double load_seconds, merge_seconds;
} MergeLoopObject;

static void MergeLoop_dealloc(MergeLoopObject *self) {
    merge_loop_free(self->m);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int MergeLoop_init(MergeLoopObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"tokens", "tie_break", "scratch_dir", "scratch_quota", NULL};
    PyObject *tokens, *scratch = Py_None;
    const char *tie_name;
    unsigned long long quota = 0;
    int rule, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!s|OK", kwlist, &PyList_Type, &tokens, &tie_name, &scratch, &quota))
        return -1;
    if ((rule = tie_break_number(tie_name)) < 0) return -1;
    FileArena *arena = NULL;
    if (scratch != Py_None) {
        PyObject *path = NULL;
        if (!PyUnicode_FSConverter(scratch, &path)) return -1;
        arena = file_arena_open(PyBytes_AS_STRING(path), 0);
        if (!arena) {
            PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, scratch);
            Py_DECREF(path);
            return -1;
        }
        Py_DECREF(path);
        file_arena_set_quota(arena, (uint64_t)quota);
    }
    merge_loop_free(self->m);
    self->m = merge_loop_new(rule, arena, &rc);
    if (!self->m) { raise_status(rc); return -1; }
    self->load_seconds = self->merge_seconds = 0;
    return add_tokens(tokens, add_loop_token, self->m);
}

/* raise_status, except that a loop whose scratch file ran out of disk raises OSError(errno). */
static PyObject *raise_loop_status(MergeLoop *m, int status) {
    int err = status == BS_NO_MEMORY ? merge_loop_disk_error(m) : 0;
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return raise_status(status);
}

/* The loop, or NULL with an exception when __init__ did not make one. */
static MergeLoop *loop_of(MergeLoopObject *self) {
    if (!self->m) PyErr_SetString(PyExc_RuntimeError, "MergeLoop.__init__ was not called");
    return self->m;
}

/* Reads the three buffers of `words`; -1 with an exception (the buffers then released). */
static int get_word_buffers(PyObject *words, Py_buffer bufs[3]) {
    if (PyList_GET_SIZE(words) != 3) {
        PyErr_SetString(PyExc_ValueError, "words must be [symbols, word_ends, freqs]");
        return -1;
    }
    for (int k = 0; k < 3; k++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(words, k), &bufs[k], PyBUF_SIMPLE) < 0) {
            while (k--) PyBuffer_Release(&bufs[k]);
            return -1;
        }
    }
    return 0;
}

static PyObject *MergeLoop_load(MergeLoopObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"words", "width", NULL};
    PyObject *words;
    int width;
    MergeLoop *m = loop_of(self);
    if (!m || !PyArg_ParseTupleAndKeywords(args, kwds, "O!i", kwlist, &PyList_Type, &words, &width)) return NULL;
    if (width != 1 && width != 4) {
        PyErr_SetString(PyExc_ValueError, "width must be 1 or 4");
        return NULL;
    }
    Py_buffer bufs[3]; /* symbols, word_ends, freqs */
    if (get_word_buffers(words, bufs) < 0) return NULL;
    double t0 = bs_seconds();
    uint64_t n_pos = (uint64_t)bufs[0].len / (uint64_t)width;
    uint64_t n_words = (uint64_t)bufs[1].len / sizeof(uint64_t);
    int rc = BS_OK;
    if ((uint64_t)bufs[0].len % (uint64_t)width || (uint64_t)bufs[2].len / sizeof(int64_t) != n_words) {
        PyErr_SetString(PyExc_ValueError, "symbols, word_ends and freqs disagree");
        rc = BS_BAD_ARGUMENT;
    } else {
        rc = merge_loop_load(m, bufs[0].buf, width, n_pos, (const uint64_t *)bufs[1].buf,
                             (const int64_t *)bufs[2].buf, n_words);
        if (rc) raise_loop_status(m, rc);
    }
    for (int k = 0; k < 3; k++) PyBuffer_Release(&bufs[k]);
    if (rc) return NULL;
    /* The input is copied into the loop: let it go before the merges grow the tables. */
    if (PyList_SetSlice(words, 0, PyList_GET_SIZE(words), NULL) < 0) return NULL;
    if ((rc = merge_loop_start(m))) return raise_loop_status(m, rc);
    self->load_seconds += bs_seconds() - t0;
    Py_RETURN_NONE;
}

static PyObject *MergeLoop_merge_given(MergeLoopObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"pairs", NULL};
    PyObject *pairs;
    MergeLoop *m = loop_of(self);
    if (!m || !PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, &PyList_Type, &pairs)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(pairs);
    uint32_t *ids = (uint32_t *)bs_realloc_n(NULL, 2 * (uint64_t)n, sizeof(uint32_t));
    int64_t *counts = (int64_t *)bs_realloc_n(NULL, (uint64_t)n, sizeof(int64_t));
    PyObject *out = NULL;
    if (!ids || !counts) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < n; k++) {
        unsigned long long left, right;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(pairs, k), "KK", &left, &right)) goto done;
        ids[2 * k] = token_id(left);
        ids[2 * k + 1] = token_id(right);
    }
    double t0 = bs_seconds();
    int rc = merge_loop_merge_given(m, ids, (uint64_t)n, counts);
    self->merge_seconds += bs_seconds() - t0;
    if (rc) { raise_loop_status(m, rc); goto done; }
    if (!(out = PyList_New(n))) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *c = PyLong_FromLongLong((long long)counts[k]);
        if (!c) { Py_CLEAR(out); goto done; }
        PyList_SET_ITEM(out, k, c);
    }
done:
    free(ids);
    free(counts);
    return out;
}

/* Merges are made a block at a time into buffers of this many (a caller's n may be large). */
#define BEST_BLOCK 1024

static PyObject *MergeLoop_merge_best(MergeLoopObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"n", "min_count", NULL};
    long long n, min_count;
    MergeLoop *m = loop_of(self);
    if (!m || !PyArg_ParseTupleAndKeywords(args, kwds, "LL", kwlist, &n, &min_count)) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    uint32_t pairs[2 * BEST_BLOCK];
    int64_t counts[BEST_BLOCK];
    for (long long made = 0; made < n;) {
        uint64_t want = (uint64_t)(n - made) < BEST_BLOCK ? (uint64_t)(n - made) : BEST_BLOCK, got;
        double t0 = bs_seconds();
        int rc = merge_loop_merge_best(m, want, min_count, pairs, counts, &got);
        self->merge_seconds += bs_seconds() - t0;
        for (uint64_t k = 0; k < got; k++) {
            PyObject *merge = Py_BuildValue("(IIL)", pairs[2 * k], pairs[2 * k + 1], (long long)counts[k]);
            if (!merge || PyList_Append(out, merge) < 0) { Py_XDECREF(merge); goto fail; }
            Py_DECREF(merge);
        }
        if (rc) { raise_loop_status(m, rc); goto fail; }
        made += (long long)got;
        if (got < want) break;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *MergeLoop_stats(MergeLoopObject *self, PyObject *noargs) {
    MergeLoop *m = loop_of(self);
    if (!m) return NULL;
    MergeLoopStats st;
    merge_loop_stats(m, &st);
    return Py_BuildValue("{s:K,s:K,s:I,s:K,s:d,s:d,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d}", "visits", (unsigned long long)st.visits, "merged",
                         (unsigned long long)st.merged, "pairs", st.pairs, "heap", (unsigned long long)st.heap,
                         "load_seconds", self->load_seconds, "merge_seconds", self->merge_seconds,
                         "disk_bytes", (unsigned long long)st.disk_bytes,
                         "peak_disk_bytes", (unsigned long long)st.peak_disk_bytes,
                         "anon_bytes", (unsigned long long)st.anon_bytes,
                         "peak_anon_bytes", (unsigned long long)st.peak_anon_bytes,
                         "anon_quota", (unsigned long long)st.anon_quota,
                         "moved_to_file", (unsigned long long)st.moved_to_file,
                         "moved_to_anon", (unsigned long long)st.moved_to_anon,
                         "compactions", (unsigned long long)st.compactions, "compact_seconds", st.compact_seconds);
}

static PyObject *MergeLoop_set_quota(MergeLoopObject *self, PyObject *arg) {
    MergeLoop *m = loop_of(self);
    if (!m) return NULL;
    unsigned long long q = PyLong_AsUnsignedLongLong(arg);
    if (q == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    merge_loop_set_quota(m, (uint64_t)q);
    Py_RETURN_NONE;
}

#define KW (METH_VARARGS | METH_KEYWORDS)
static PyMethodDef MergeLoop_methods[] = {
    {"load", (PyCFunction)(void (*)(void))MergeLoop_load, KW,
     "load(words, width): once, all the words.  words: a list [symbols, word_ends, freqs], emptied as soon\n"
     "as the loop holds its own copy (so that, given the only references, their memory is freed before the\n"
     "merges): symbols, all words' symbols, word after word, `width` bytes each (1: a bytearray of byte\n"
     "symbols, 4: array('I')); word_ends: array('Q') of each word's end offset; freqs: array('q')."},
    {"merge_given", (PyCFunction)(void (*)(void))MergeLoop_merge_given, KW,
     "merge_given(pairs) -> [count, ...]: applies the (left, right) merges in order, each one's count as applied."},
    {"merge_best", (PyCFunction)(void (*)(void))MergeLoop_merge_best, KW,
     "merge_best(n, min_count) -> [(left, right, count), ...]: up to n merges of the best pair, fewer when\n"
     "no pair reaches min_count."},
    {"set_quota", (PyCFunction)MergeLoop_set_quota, METH_O,
     "set_quota(bytes): the scratch file's anonymous quota from now on (raised: more of the positions move\n"
     "from the file into memory); no effect without scratch_dir."},
    {"stats", (PyCFunction)MergeLoop_stats, METH_NOARGS,
     "Occurrences visited and merged, pairs, heap entries, the seconds spent loading and merging, and the\n"
     "scratch file's bytes (disk_bytes, peak_disk_bytes) and anonymous bytes (anon_bytes, peak_anon_bytes,\n"
     "anon_quota; moved_to_file, moved_to_anon: blocks moved between them as they grew)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MergeLoopType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_stream._fastbpe.MergeLoop",
    .tp_basicsize = sizeof(MergeLoopObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "MergeLoop(tokens, tie_break, scratch_dir=None): the merge loop (tokens: the bytes of ids 0..n-1;\n"
              "merges take the ids after them).  load once, then merge_given / merge_best in any order.\n"
              "scratch_dir: keep every table in an unnamed scratch file there (file-backed pages, not\n"
              "anonymous memory) except up to scratch_quota bytes (default 0) kept in anonymous memory, the\n"
              "positions first (every merge rewrites the ones it merges); a full disk is OSError(ENOSPC).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)MergeLoop_init,
    .tp_dealloc = (destructor)MergeLoop_dealloc,
    .tp_methods = MergeLoop_methods,
};


/* -- Encoder ------------------------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    Encoder *enc;
    PyObject *cache; /* dict: str -> bytes (uint32 ids) */
    Py_ssize_t cache_limit;
    bs_text_encoder *text; /* encode_text's, over enc; NULL without a pattern */
    /* what made text, for clone(): the pattern's name, the cap, the (bytes, id) specials */
    const char *pattern_name;
    size_t max_bytes;
    PyObject *specials;
    int busy; /* encode_text runs without the GIL: a second thread on this object is refused */
} EncoderObject;

static void Encoder_dealloc(EncoderObject *self) {
    bs_te_free(self->text);
    encoder_free(self->enc);
    Py_XDECREF(self->cache);
    Py_XDECREF(self->specials);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Makes self->text for the named pattern and pretoken cap (0: none), with the special
 * tokens: a list of (bytes, id). */
static int make_text_encoder(EncoderObject *self, const char *pattern_name, size_t max_bytes, PyObject *specials) {
    int pattern = bs_scan_pattern_by_name(pattern_name), rc;
    if (pattern == BS_SCAN_EPATTERN) {
        PyErr_Format(PyExc_ValueError, "no native scanner for the pretokenizer '%s'", pattern_name);
        return -1;
    }
    uint32_t entries = self->cache_limit > (Py_ssize_t)UINT32_MAX ? UINT32_MAX : (uint32_t)self->cache_limit;
    if (!(self->text = bs_te_new(self->enc, pattern, max_bytes, entries, &rc))) { raise_status(rc); return -1; }
    self->pattern_name = bs_scan_pattern_name(pattern); /* (static) */
    self->max_bytes = max_bytes;
    Py_XINCREF(specials);
    Py_XSETREF(self->specials, specials);
    for (Py_ssize_t k = 0; specials && k < PyList_GET_SIZE(specials); k++) {
        const char *token;
        Py_ssize_t len;
        unsigned long long id;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(specials, k), "y#K;specials are (bytes, id) pairs", &token, &len, &id))
            return -1;
        if ((rc = bs_te_add_special(self->text, (const uint8_t *)token, (size_t)len, token_id(id)))) {
            raise_status(rc);
            return -1;
        }
    }
    return 0;
}

static int Encoder_init(EncoderObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"merges", "byte_ids", "marker", "cache_limit", "pattern", "specials", "max_bytes", NULL};
    PyObject *merges, *byte_ids, *specials = NULL;
    long long marker;
    Py_ssize_t cache_limit, max_bytes = 0;
    const char *pattern = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!Ln|zO!n", kwlist, &PyList_Type, &merges, &PyList_Type, &byte_ids,
                                     &marker, &cache_limit, &pattern, &PyList_Type, &specials, &max_bytes))
        return -1;
    if (max_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "max_bytes must be at least 0 (0: no cap)");
        return -1;
    }
    if (cache_limit < 0) {
        PyErr_SetString(PyExc_ValueError, "cache_limit must be at least 0");
        return -1;
    }
    if (PyList_GET_SIZE(byte_ids) != 256) {
        PyErr_SetString(PyExc_ValueError, "byte_ids must have 256 entries");
        return -1;
    }
    uint32_t ids[256];
    for (int b = 0; b < 256; b++) {
        unsigned long v = PyLong_AsUnsignedLong(PyList_GET_ITEM(byte_ids, b));
        if (PyErr_Occurred()) return -1;
        ids[b] = token_id(v);
    }
    int rc;
    bs_te_free(self->text);
    self->text = NULL;
    encoder_free(self->enc);
    self->enc = encoder_new(ids, marker < 0 ? -1 : marker, (uint64_t)PyList_GET_SIZE(merges), &rc);
    if (!self->enc) { raise_status(rc); return -1; }
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(merges); r++) {
        unsigned long long a, b, z;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(merges, r), "KKK", &a, &b, &z)) return -1;
        if ((rc = encoder_add_merge(self->enc, token_id(a), token_id(b), token_id(z)))) { raise_status(rc); return -1; }
    }
    self->cache_limit = cache_limit;
    Py_XSETREF(self->cache, PyDict_New());
    if (!self->cache) return -1;
    return pattern ? make_text_encoder(self, pattern, (size_t)max_bytes, specials) : 0;
}

/* The ids of one pretoken as bytes (uint32, host order), new reference.  Its bytes are
 * its UTF-8, lone surrogates back to their bytes. */
static PyObject *encode_piece(Encoder *enc, PyObject *piece) {
    PyObject *raw = PyUnicode_AsEncodedString(piece, "utf-8", "surrogateescape");
    if (!raw) return NULL;
    const uint32_t *ids;
    size_t n_ids;
    int rc = encoder_encode(enc, (const uint8_t *)PyBytes_AS_STRING(raw), (size_t)PyBytes_GET_SIZE(raw), &ids, &n_ids);
    Py_DECREF(raw);
    if (rc) return raise_status(rc);
    return PyBytes_FromStringAndSize((const char *)ids, (Py_ssize_t)(n_ids * sizeof(uint32_t)));
}

/* encode(pieces) -> bytes: the ids (uint32, host order) of the pretokens, in order. */
static PyObject *Encoder_encode(EncoderObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"pieces", NULL};
    PyObject *pieces;
    if (!self->enc) {
        PyErr_SetString(PyExc_RuntimeError, "Encoder.__init__ was not called");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, &PyList_Type, &pieces)) return NULL;
    if (self->busy) { /* encode_text on another thread is using the merges' scratch */
        PyErr_SetString(PyExc_RuntimeError, "this Encoder is encoding on another thread; give each thread its clone()");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(pieces);
    size_t cap = (size_t)n * 2 + 16, len = 0;
    uint32_t *buf = (uint32_t *)bs_realloc_n(NULL, cap, sizeof(uint32_t));
    if (!buf) return PyErr_NoMemory();
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *piece = PyList_GET_ITEM(pieces, k);
        PyObject *ids = PyDict_GetItemWithError(self->cache, piece); /* borrowed */
        if (!ids) {
            if (PyErr_Occurred()) goto fail;
            if (!PyUnicode_Check(piece)) { PyErr_SetString(PyExc_TypeError, "pretokens must be str"); goto fail; }
            ids = encode_piece(self->enc, piece);
            if (!ids) goto fail;
            if (PyDict_GET_SIZE(self->cache) >= self->cache_limit) PyDict_Clear(self->cache);
            if (PyDict_SetItem(self->cache, piece, ids) < 0) { Py_DECREF(ids); goto fail; }
            Py_DECREF(ids); /* the cache holds it */
        }
        size_t m = (size_t)PyBytes_GET_SIZE(ids) / sizeof(uint32_t);
        if (len + m > cap) {
            while (len + m > cap) cap *= 2;
            uint32_t *d = (uint32_t *)bs_realloc_n(buf, cap, sizeof(uint32_t));
            if (!d) { PyErr_NoMemory(); goto fail; }
            buf = d;
        }
        memcpy(buf + len, PyBytes_AS_STRING(ids), m * sizeof(uint32_t));
        len += m;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)(len * sizeof(uint32_t)));
    free(buf);
    return out;
fail:
    free(buf);
    return NULL;
}

PyDoc_STRVAR(encode_text_doc,
             "encode_text(data, fmt='ids', specials=True) -> (bytes, n_ids)\n\n"
             "The ids of the UTF-8 bytes ``data`` (bytes-like; bytes that are not UTF-8 are kept) in\n"
             "``fmt`` -- 'ids' (host-order uint32), 'u32' or 'u16' (little-endian), 'txt' (decimal,\n"
             "single spaces) -- and how many ids they are: split on the special tokens (unless\n"
             "``specials`` is false: the data holds none), pretokenized with the encoder's pattern,\n"
             "each pretoken's ids from the native cache or the merges.");

static PyObject *Encoder_encode_text(EncoderObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"data", "fmt", "specials", NULL};
    Py_buffer buf;
    const char *fmt_name = "ids";
    int split_specials = 1;
    if (!self->text) {
        PyErr_SetString(PyExc_RuntimeError, "the Encoder was made without a pattern: it has no encode_text");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|sp:encode_text", kwlist, &buf, &fmt_name, &split_specials))
        return NULL;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this Encoder is encoding on another thread; give each thread its clone()");
        PyBuffer_Release(&buf);
        return NULL;
    }
    self->busy = 1; /* (set and tested with the GIL held) */
    PyObject *out = NULL;
    int fmt = bs_format_by_name(fmt_name);
    const uint32_t *ids;
    size_t n_ids, size;
    if (fmt < 0) {
        PyErr_Format(PyExc_ValueError, "unknown ids format '%s'", fmt_name);
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS /* the scan and the merges are C on this object's own state */
    rc = bs_te_encode(self->text, (const uint8_t *)buf.buf, (size_t)buf.len, split_specials, &ids, &n_ids);
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_status(rc);
        goto done;
    }
    /* an id that u16 cannot hold: ValueError (OverflowError says the encoder's limits were passed) */
    if ((rc = bs_format_size(ids, n_ids, fmt, &size))) {
        PyErr_SetString(PyExc_ValueError, rc == BS_TOO_LARGE ? "an id above 65535 cannot be written as u16"
                                                             : bs_status_text(rc));
        goto done;
    }
    if (size > PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!data) goto done;
    Py_BEGIN_ALLOW_THREADS
    bs_format(ids, n_ids, fmt, (uint8_t *)PyBytes_AS_STRING(data));
    Py_END_ALLOW_THREADS
    out = Py_BuildValue("(Nn)", data, (Py_ssize_t)n_ids);
done:
    bs_te_trim(self->text);
    self->busy = 0;
    PyBuffer_Release(&buf);
    return out;
}

PyDoc_STRVAR(clone_doc, "clone() -> Encoder\n\n"
                        "An encoder with the same merges, pattern and special tokens and caches of its own:\n"
                        "encode_text runs without the GIL, each thread on its own clone.");

static PyObject *Encoder_clone(EncoderObject *self, PyObject *unused) {
    if (!self->enc) {
        PyErr_SetString(PyExc_RuntimeError, "Encoder.__init__ was not called");
        return NULL;
    }
    EncoderObject *copy = (EncoderObject *)PyType_GenericNew(Py_TYPE(self), NULL, NULL);
    if (!copy) return NULL;
    int rc;
    copy->cache_limit = self->cache_limit;
    if (!(copy->cache = PyDict_New())) goto fail;
    if (!(copy->enc = encoder_clone(self->enc, &rc))) {
        raise_status(rc);
        goto fail;
    }
    if (self->text && make_text_encoder(copy, self->pattern_name, self->max_bytes, self->specials) < 0) goto fail;
    return (PyObject *)copy;
fail:
    Py_DECREF(copy);
    return NULL;
}

static PyObject *Encoder_text_cached(EncoderObject *self, void *unused) {
    return PyLong_FromSize_t(self->text ? bs_te_cached(self->text) : 0);
}

static PyGetSetDef Encoder_getset[] = {
    {"text_cached", (getter)Encoder_text_cached, NULL, "The pretokens encode_text has cached now.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Encoder_methods[] = {
    {"encode", (PyCFunction)(void (*)(void))Encoder_encode, KW, "encode(pieces) -> bytes of uint32 ids (host order)."},
    {"encode_text", (PyCFunction)(void (*)(void))Encoder_encode_text, KW, encode_text_doc},
    {"clone", (PyCFunction)Encoder_clone, METH_NOARGS, clone_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_stream._fastbpe.Encoder",
    .tp_basicsize = sizeof(EncoderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Encoder(merges, byte_ids, marker, cache_limit, pattern=None, specials=None): pretokens to ids\n"
              "by merge rank (encode), and with a named pattern and the special tokens as (bytes, id)\n"
              "pairs, UTF-8 bytes to ids (encode_text).  cache_limit: the pretokens each cache holds.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Encoder_init,
    .tp_dealloc = (destructor)Encoder_dealloc,
    .tp_methods = Encoder_methods,
    .tp_getset = Encoder_getset,
};

/* -- the module ------------------------------------------------------------------------------ */
/* _set_limit32(limit) -> the previous limit: lowers bs_limit32 (common.h) so that a test
 * reaches the 32-bit overflow checks with small inputs.  Not for use outside tests. */
/* -- the pretokenizer scanner (scan.c) and the pretoken count table (counttable.c) -------- */

#define SPAN_BATCH 1024 /* spans per bs_scan call, on the stack */

/* The bs_scan_pattern named `name`, checked with the pretokens' cap (at least 0), or -1
 * with ValueError set. */
static int pattern_and_cap(const char *name, Py_ssize_t max_bytes) {
    if (max_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "max_bytes must be at least 0 (0: no cap)");
        return -1;
    }
    int pattern = bs_scan_pattern_by_name(name);
    if (pattern == BS_SCAN_EPATTERN) {
        PyErr_Format(PyExc_ValueError, "no native scanner for the pretokenizer '%s'", name);
        return -1;
    }
    return pattern;
}

/* Parses the keyword arguments (data, pattern, max_bytes=0): a buffer, to be released, a
 * bs_scan_pattern and the pretokens' cap.  0 (an exception set, nothing to release) when
 * they do not parse. */
static int data_and_pattern(PyObject *args, PyObject *kwargs, const char *format, Py_buffer *buf, int *pattern,
                            Py_ssize_t *max_bytes) {
    static char *keywords[] = {"data", "pattern", "max_bytes", NULL};
    const char *name;
    *max_bytes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, keywords, buf, &name, max_bytes)) return 0;
    if ((*pattern = pattern_and_cap(name, *max_bytes)) < 0) {
        PyBuffer_Release(buf);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(scan_doc,
             "scan(data, pattern, max_bytes=0) -> list of bytes\n\n"
             "The pretokens of the bytes-like ``data`` for the named pattern (gpt2, cl100k, o200k,\n"
             "whitespace, words, none): exactly ``regex.findall`` on\n"
             "``data.decode('utf-8', 'surrogateescape')``, each match encoded back the same way;\n"
             "one longer than ``max_bytes`` (0: no cap) as its pieces (``pretokenize.cap_pieces``).");

static PyObject *py_scan(PyObject *self, PyObject *args, PyObject *kwargs) {
    Py_buffer buf;
    int pattern;
    Py_ssize_t max_bytes;
    if (!data_and_pattern(args, kwargs, "y*s|n:scan", &buf, &pattern, &max_bytes)) return NULL;
    PyObject *result = NULL, *list = PyList_New(0);
    if (!list) goto done;
    bs_span spans[SPAN_BATCH];
    const uint8_t *data = buf.buf;
    size_t pos = 0, rest = 0;
    ptrdiff_t got;
    while ((got = bs_scan_pieces(pattern, (size_t)max_bytes, data, (size_t)buf.len, &pos, &rest, spans, SPAN_BATCH)) > 0) {
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

PyDoc_STRVAR(first_invalid_utf8_doc,
             "first_invalid_utf8(data) -> int\n\n"
             "The offset of the first byte of the bytes-like ``data`` that is not part of well-formed\n"
             "UTF-8 (the start of ``data.decode('utf-8')``'s error), or -1 when it is all UTF-8.");

static PyObject *py_first_invalid_utf8(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"data", NULL};
    Py_buffer buf;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*:first_invalid_utf8", keywords, &buf)) return NULL;
    size_t at = bs_utf8_first_invalid((const uint8_t *)buf.buf, (size_t)buf.len);
    Py_ssize_t len = buf.len;
    PyBuffer_Release(&buf);
    return PyLong_FromSsize_t(at == (size_t)len ? -1 : (Py_ssize_t)at);
}

/* -- CountTable ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    bs_counttable *table;
    int busy; /* a feed or pack runs on it without the GIL: every other call is refused */
} CountTableObject;

/* Feeds and packs of at least this many bytes release the GIL (threads count ranges in
 * parallel, counting.ThreadRunner); smaller ones are not worth the switch. */
#define GIL_FREE_BYTES (64u << 10)

/* Runs `stmt` on the table without the GIL when `big`: the table is marked busy meanwhile,
 * so that another thread's call on it is an error, not a race. */
#define ON_TABLE(self, big, stmt)                                                             \
    do {                                                                                      \
        if (big) {                                                                            \
            (self)->busy = 1;                                                                 \
            Py_BEGIN_ALLOW_THREADS stmt;                                                      \
            Py_END_ALLOW_THREADS;                                                             \
            (self)->busy = 0;                                                                 \
        } else {                                                                              \
            stmt;                                                                             \
        }                                                                                     \
    } while (0)

static int table_in_use(CountTableObject *self) {
    if (!self->busy) return 0;
    PyErr_SetString(PyExc_RuntimeError, "CountTable is in use by another thread");
    return 1;
}

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

PyDoc_STRVAR(feed_doc, "feed(data, pattern, max_bytes=0) -> int\n\n"
                       "Counts the pretokens of the bytes-like ``data`` for the named pattern (as ``scan``,\n"
                       "with its ``max_bytes``) and returns how many there were.");

static PyObject *table_feed(CountTableObject *self, PyObject *args, PyObject *kwargs) {
    Py_buffer buf;
    int pattern;
    Py_ssize_t max_bytes;
    if (table_in_use(self) || !data_and_pattern(args, kwargs, "y*s|n:feed", &buf, &pattern, &max_bytes)) return NULL;
    uint64_t counted = 0;
    int rc;
    ON_TABLE(self, (size_t)buf.len >= GIL_FREE_BYTES,
             rc = bs_ct_feed(self->table, pattern, (size_t)max_bytes, buf.buf, (size_t)buf.len, &counted));
    PyBuffer_Release(&buf);
    if (rc != BS_CT_OK) return table_error(rc);
    return PyLong_FromUnsignedLongLong(counted);
}

PyDoc_STRVAR(feed_between_doc,
             "feed_between(data, pattern, max_bytes, specials) -> (pretokens, specials found)\n\n"
             "``feed`` of each stretch of the bytes-like ``data`` between the special tokens\n"
             "``specials`` (a list of non-empty bytes), which are found left to right, the longest\n"
             "at a position first, and not counted.");

static PyObject *table_feed_between(CountTableObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"data", "pattern", "max_bytes", "specials", NULL};
    Py_buffer buf;
    const char *name;
    Py_ssize_t max_bytes;
    PyObject *tokens;
    if (table_in_use(self)) return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*snO!:feed_between", keywords, &buf, &name, &max_bytes,
                                     &PyList_Type, &tokens))
        return NULL;
    PyObject *result = NULL;
    bs_specials *specials = NULL;
    int pattern = pattern_and_cap(name, max_bytes);
    if (pattern < 0) goto done;
    if (!(specials = bs_specials_new())) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(tokens); k++) {
        PyObject *token = PyList_GET_ITEM(tokens, k);
        if (!PyBytes_Check(token) || PyBytes_GET_SIZE(token) == 0) {
            PyErr_SetString(PyExc_TypeError, "specials must be non-empty bytes");
            goto done;
        }
        int rc = bs_specials_add(specials, (const uint8_t *)PyBytes_AS_STRING(token), (size_t)PyBytes_GET_SIZE(token), 0);
        if (rc != BS_OK) {
            raise_status(rc);
            goto done;
        }
    }
    uint64_t counted = 0, found = 0;
    int rc;
    ON_TABLE(self, (size_t)buf.len >= GIL_FREE_BYTES,
             rc = bs_ct_feed_between(self->table, specials, pattern, (size_t)max_bytes, buf.buf, (size_t)buf.len,
                                     &counted, &found));
    if (rc != BS_CT_OK)
        table_error(rc);
    else
        result = Py_BuildValue("KK", (unsigned long long)counted, (unsigned long long)found);
done:
    bs_specials_free(specials);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(add_doc, "add(key, count=1)\n\nAdds ``count`` to the count of the bytes-like ``key``.");

static PyObject *table_add(CountTableObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"key", "count", NULL};
    Py_buffer key;
    PyObject *count_obj = NULL;
    if (table_in_use(self)) return NULL;
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
    if (table_in_use(self) || !PyArg_ParseTupleAndKeywords(args, kwargs, "y*:merge", keywords, &buf)) return NULL;
    int rc = bs_ct_merge_packed(self->table, buf.buf, (size_t)buf.len);
    PyBuffer_Release(&buf);
    if (rc != BS_CT_OK) return table_error(rc);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(pack_doc, "pack(*, sorted=False) -> bytes\n\n"
                       "The entries, in insertion order (with ``sorted``: in key order, a run for\n"
                       "``merge_runs``), each as a little-endian u32 length, the pretoken's bytes and a\n"
                       "little-endian u64 count.");

static int pack_into(bs_counttable *table, int sorted, uint8_t *into) {
    if (sorted) return bs_runs_pack_sorted(table, into);
    bs_ct_pack(table, into);
    return BS_CT_OK;
}

static PyObject *table_pack(CountTableObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"sorted", NULL};
    int sorted = 0;
    if (table_in_use(self) || !PyArg_ParseTupleAndKeywords(args, kwargs, "|$p:pack", keywords, &sorted)) return NULL;
    size_t size = bs_ct_packed_size(self->table);
    if (size > PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!out) return NULL;
    uint8_t *into = (uint8_t *)PyBytes_AS_STRING(out);
    int rc;
    ON_TABLE(self, size >= GIL_FREE_BYTES, rc = pack_into(self->table, sorted, into));
    if (rc != BS_CT_OK) {
        Py_DECREF(out);
        return table_error(rc);
    }
    return out;
}

PyDoc_STRVAR(to_dict_doc, "to_dict() -> dict\n\nThe counts as a dict of bytes -> int, in insertion order.");

static PyObject *table_to_dict(CountTableObject *self, PyObject *unused) {
    if (table_in_use(self)) return NULL;
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

PyDoc_STRVAR(sorted_items_doc, "sorted_items() -> (keys, counts)\n\n"
                               "The pretokens (a list of bytes, in increasing order) and their counts (a list of\n"
                               "int, in the same order): what ``sorted(table.to_dict().items())`` unzips to.");

static PyObject *table_sorted_items(CountTableObject *self, PyObject *unused) {
    if (table_in_use(self)) return NULL;
    size_t n = bs_ct_len(self->table);
    if (n > (size_t)PY_SSIZE_T_MAX / sizeof(uint32_t)) return PyErr_NoMemory();
    uint32_t *order = PyMem_Malloc((n ? n : 1) * sizeof *order);
    if (!order) return PyErr_NoMemory();
    int rc = bs_ct_sorted(self->table, order);
    if (rc != BS_CT_OK) {
        PyMem_Free(order);
        return table_error(rc);
    }
    PyObject *keys = PyList_New((Py_ssize_t)n), *counts = keys ? PyList_New((Py_ssize_t)n) : NULL;
    /* the entries are read in key order, at random: each is prefetched 16 entries ahead,
     * its key (found through the entry, by then cached) 8 ahead */
    for (size_t i = 0; counts && i < n; i++) {
        const uint8_t *key;
        size_t len;
        uint64_t count;
        if (i + 16 < n) bs_ct_prefetch(self->table, order[i + 16], 0);
        if (i + 8 < n) bs_ct_prefetch(self->table, order[i + 8], 1);
        bs_ct_entry(self->table, order[i], &key, &len, &count);
        PyObject *k = PyBytes_FromStringAndSize((const char *)key, (Py_ssize_t)len);
        PyObject *v = k ? PyLong_FromUnsignedLongLong(count) : NULL;
        if (!v) {
            Py_XDECREF(k);
            Py_CLEAR(counts);
            break;
        }
        PyList_SET_ITEM(keys, (Py_ssize_t)i, k);
        PyList_SET_ITEM(counts, (Py_ssize_t)i, v);
    }
    PyMem_Free(order);
    if (!counts) {
        Py_XDECREF(keys);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, keys, counts);
    Py_DECREF(keys);
    Py_DECREF(counts);
    return result;
}

static PyObject *table_clear(CountTableObject *self, PyObject *unused) {
    if (table_in_use(self)) return NULL;
    bs_ct_clear(self->table);
    Py_RETURN_NONE;
}

static Py_ssize_t table_len(CountTableObject *self) {
    return table_in_use(self) ? -1 : (Py_ssize_t)bs_ct_len(self->table);
}

static PyObject *table_total(CountTableObject *self, void *unused) {
    if (table_in_use(self)) return NULL;
    return PyLong_FromUnsignedLongLong(bs_ct_total(self->table));
}

static PyObject *table_key_bytes(CountTableObject *self, void *unused) {
    if (table_in_use(self)) return NULL;
    /* the packed form is each key and its fixed overhead */
    size_t packed = bs_ct_packed_size(self->table);
    return PyLong_FromSize_t(packed - BS_CT_PACKED_OVERHEAD * bs_ct_len(self->table));
}

static PyObject *table_mark_in_use(CountTableObject *self, PyObject *flag) {
    int on = PyObject_IsTrue(flag);
    if (on < 0) return NULL;
    self->busy = on;
    Py_RETURN_NONE;
}

static PyMethodDef table_methods[] = {
    {"_mark_in_use", (PyCFunction)table_mark_in_use, METH_O,
     "_mark_in_use(flag)\n\nFor tests: marks the table as a feed or pack running on another thread does."},
    {"feed", (PyCFunction)(void (*)(void))table_feed, METH_VARARGS | METH_KEYWORDS, feed_doc},
    {"feed_between", (PyCFunction)(void (*)(void))table_feed_between, METH_VARARGS | METH_KEYWORDS, feed_between_doc},
    {"add", (PyCFunction)(void (*)(void))table_add, METH_VARARGS | METH_KEYWORDS, add_doc},
    {"merge", (PyCFunction)(void (*)(void))table_merge, METH_VARARGS | METH_KEYWORDS, merge_doc},
    {"pack", (PyCFunction)(void (*)(void))table_pack, METH_VARARGS | METH_KEYWORDS, pack_doc},
    {"to_dict", (PyCFunction)table_to_dict, METH_NOARGS, to_dict_doc},
    {"sorted_items", (PyCFunction)table_sorted_items, METH_NOARGS, sorted_items_doc},
    {"clear", (PyCFunction)table_clear, METH_NOARGS, "clear()\n\nRemoves every entry."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef table_getset[] = {
    {"total", (getter)table_total, NULL, "The sum of the counts.", NULL},
    {"key_bytes", (getter)table_key_bytes, NULL, "The sum of the keys' lengths.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods table_as_sequence = {.sq_length = (lenfunc)table_len};

static PyTypeObject CountTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_stream._fastbpe.CountTable",
    .tp_doc = "CountTable()\n\nPretoken bytes -> 64-bit counts in native memory (len(): distinct pretokens).",
    .tp_basicsize = sizeof(CountTableObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = table_new,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_methods = table_methods,
    .tp_getset = table_getset,
    .tp_as_sequence = &table_as_sequence,
};

/* -- sorted runs (runs.c) ------------------------------------------------------------- */

/* The buffers of a list or tuple of bytes-like runs; *views (PyMem) to be released with
 * release_runs.  NULL with an exception set. */
static bs_run *runs_of(PyObject *seq_obj, Py_buffer **views, Py_ssize_t *n_out, size_t *total) {
    PyObject *seq = PySequence_Fast(seq_obj, "runs must be a sequence of bytes-like objects");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if ((size_t)n > BS_RUNS_MAX) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_OverflowError, "at most %u runs are merged at once", BS_RUNS_MAX);
        return NULL;
    }
    bs_run *runs = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *runs);
    Py_buffer *bufs = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *bufs);
    Py_ssize_t got = 0;
    *total = 0;
    if (!runs || !bufs) {
        PyErr_NoMemory();
        goto fail;
    }
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &bufs[got], PyBUF_SIMPLE) < 0) goto fail;
        runs[got] = (bs_run){bufs[got].buf, (size_t)bufs[got].len};
        *total += (size_t)bufs[got].len;
    }
    Py_DECREF(seq);
    *views = bufs;
    *n_out = n;
    return runs;
fail:
    while (got-- > 0) PyBuffer_Release(&bufs[got]);
    PyMem_Free(runs);
    PyMem_Free(bufs);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *runs_error(int rc) {
    if (rc != BS_CT_EPACKED) return table_error(rc);
    PyErr_SetString(PyExc_ValueError, "a run of counts is malformed or not in increasing key order");
    return NULL;
}

static void release_runs(bs_run *runs, Py_buffer *views, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(runs);
}

/* The argument of merge_runs and merge_runs_packed: the runs' buffers, held until released. */
typedef struct {
    bs_run *runs;
    Py_buffer *views;
    Py_ssize_t n;
    size_t total; /* the sum of their lengths */
} runs_arg;

static int parse_runs(PyObject *args, PyObject *kwargs, const char *format, runs_arg *r) {
    static char *keywords[] = {"runs", NULL};
    PyObject *seq;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, keywords, &seq)) return 0;
    r->runs = runs_of(seq, &r->views, &r->n, &r->total);
    return r->runs != NULL;
}

/* merge_runs_packed's: the runs, and the threads (keyword only, 1 to BS_RUNS_THREADS_MAX). */
static int parse_packed_runs(PyObject *args, PyObject *kwargs, runs_arg *r, size_t *threads) {
    static char *keywords[] = {"runs", "threads", NULL};
    PyObject *seq;
    Py_ssize_t n = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$n:merge_runs_packed", keywords, &seq, &n)) return 0;
    if (n < 1 || (size_t)n > BS_RUNS_THREADS_MAX) {
        PyErr_Format(PyExc_ValueError, "threads must be from 1 to %u", BS_RUNS_THREADS_MAX);
        return 0;
    }
    *threads = (size_t)n;
    r->runs = runs_of(seq, &r->views, &r->n, &r->total);
    return r->runs != NULL;
}

typedef struct {
    PyObject *keys, *counts;
} lists_out;

#define BS_EMIT_PYERR 1 /* emit_lists: a Python exception is set */

static int emit_lists(void *ctx, const uint8_t *key, size_t len, uint64_t count) {
    lists_out *o = ctx;
    PyObject *k = PyBytes_FromStringAndSize((const char *)key, (Py_ssize_t)len);
    PyObject *v = k ? PyLong_FromUnsignedLongLong(count) : NULL;
    int rc = (v && PyList_Append(o->keys, k) == 0 && PyList_Append(o->counts, v) == 0) ? 0 : BS_EMIT_PYERR;
    Py_XDECREF(k);
    Py_XDECREF(v);
    return rc;
}

PyDoc_STRVAR(merge_runs_doc, "merge_runs(runs) -> (keys, counts)\n\n"
                             "The runs (bytes-like, each ``CountTable.pack(sorted=True)``) merged: the distinct\n"
                             "pretokens in increasing order and the sums of their counts.  ValueError for a run\n"
                             "that does not parse or is not in strictly increasing key order.");

static PyObject *py_merge_runs(PyObject *self, PyObject *args, PyObject *kwargs) {
    runs_arg r;
    if (!parse_runs(args, kwargs, "O:merge_runs", &r)) return NULL;
    lists_out o = {PyList_New(0), PyList_New(0)};
    PyObject *result = NULL;
    if (o.keys && o.counts) {
        int rc = bs_runs_merge(r.runs, (size_t)r.n, emit_lists, &o);
        if (rc == BS_CT_OK)
            result = PyTuple_Pack(2, o.keys, o.counts);
        else if (rc != BS_EMIT_PYERR)
            runs_error(rc);
    }
    Py_XDECREF(o.keys);
    Py_XDECREF(o.counts);
    release_runs(r.runs, r.views, r.n);
    return result;
}

PyDoc_STRVAR(merge_runs_packed_doc, "merge_runs_packed(runs, *, threads=1) -> (run, entries)\n\n"
                                    "``merge_runs`` into one run (bytes) and its number of entries, on up to\n"
                                    "``threads`` threads (the key space split between them; the same result).");

static PyObject *py_merge_runs_packed(PyObject *self, PyObject *args, PyObject *kwargs) {
    runs_arg r;
    size_t threads;
    if (!parse_packed_runs(args, kwargs, &r, &threads)) return NULL;
    PyObject *out = r.total <= PY_SSIZE_T_MAX ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)r.total) : PyErr_NoMemory();
    PyObject *result = NULL;
    if (out) {
        size_t len = 0, entries = 0;
        int rc;
        uint8_t *buf = (uint8_t *)PyBytes_AS_STRING(out);
        Py_BEGIN_ALLOW_THREADS /* (the runs' buffers are held: their views until release_runs) */
        rc = bs_runs_merge_packed_threads(r.runs, (size_t)r.n, threads, buf, &len, &entries);
        Py_END_ALLOW_THREADS
        if (rc != BS_CT_OK)
            runs_error(rc);
        else if (_PyBytes_Resize(&out, (Py_ssize_t)len) == 0) {
            PyObject *e = PyLong_FromSize_t(entries);
            if (e) result = PyTuple_Pack(2, out, e);
            Py_XDECREF(e);
        }
    }
    Py_XDECREF(out);
    release_runs(r.runs, r.views, r.n);
    return result;
}

/* -- the store's batch columns ---------------------------------------------------------- */

PyDoc_STRVAR(column_stats_doc,
             "column_stats(keys, counts) -> (key_bytes, max_len, total, min_count, max_count) or None\n\n"
             "In one pass over two lists of equal length (not empty): the sum and the largest of the\n"
             "keys' lengths (bytes), and the sum, smallest and largest of the counts -- or None when a\n"
             "key is not bytes, a count not an int of 64 bits, or the sum passes them (the caller\n"
             "then computes them in Python).");

static PyObject *py_column_stats(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"keys", "counts", NULL};
    PyObject *keys, *counts;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!:column_stats", keywords, &PyList_Type, &keys, &PyList_Type,
                                     &counts))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (n == 0 || PyList_GET_SIZE(counts) != n) Py_RETURN_NONE;
    unsigned long long key_bytes = 0;
    Py_ssize_t max_len = 0;
    long long total = 0, lo = LLONG_MAX, hi = LLONG_MIN;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i), *c = PyList_GET_ITEM(counts, i);
        if (!PyBytes_CheckExact(k) || !PyLong_CheckExact(c)) Py_RETURN_NONE;
        Py_ssize_t len = PyBytes_GET_SIZE(k);
        key_bytes += (unsigned long long)len;
        if (len > max_len) max_len = len;
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(c, &overflow);
        if (overflow) Py_RETURN_NONE;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
        if (__builtin_add_overflow(total, v, &total)) Py_RETURN_NONE;
    }
    return Py_BuildValue("(KnLLL)", key_bytes, max_len, total, lo, hi);
}

/* A store value: the count as 8 bytes, little-endian (counttable.h's encoding).  The
 * values of counts below SMALL_VALUES are made once and shared: of 420k multilingual
 * pretokens 99% are counted fewer than 64 times, and LMDB's put only reads a value
 * (le64_values of those 420k: 18.4 -> 7.5 ms). */
#define SMALL_VALUES 64
static PyObject *small_values[SMALL_VALUES];

static PyObject *le64_bytes(uint64_t v) {
    uint8_t le[8];
    bs_ct_put_le(le, v, 8);
    if (v >= SMALL_VALUES) return PyBytes_FromStringAndSize((const char *)le, 8);
    if (!small_values[v] && !(small_values[v] = PyBytes_FromStringAndSize((const char *)le, 8))) return NULL;
    Py_INCREF(small_values[v]);
    return small_values[v];
}

PyDoc_STRVAR(le64_values_doc, "le64_values(counts) -> list of bytes\n\n"
                              "Each count (an int from 0 to 2**64-1) as 8 bytes, little-endian: the store's values.");

static PyObject *py_le64_values(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"counts", NULL};
    PyObject *counts;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!:le64_values", keywords, &PyList_Type, &counts)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(counts);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *c = PyList_GET_ITEM(counts, i);
        if (!PyLong_Check(c)) {
            PyErr_Format(PyExc_TypeError, "a count must be an int, not %.100s", Py_TYPE(c)->tp_name);
            Py_CLEAR(out);
            break;
        }
        unsigned long long v = PyLong_AsUnsignedLongLong(c);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            Py_CLEAR(out);
            break;
        }
        PyObject *value = le64_bytes(v);
        if (!value) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, value);
    }
    return out;
}

PyDoc_STRVAR(add_le64_doc,
             "add_le64(keys, olds, counts, absent, floor) -> (values, highest, new, new_bytes, top) or None\n\n"
             "For a batch into a store that holds counts: each old value (8 bytes, little-endian, or\n"
             "the object ``absent`` for a key not there) plus its count, as the new values (8 bytes,\n"
             "little-endian); the largest new count; how many keys were absent and their bytes; the\n"
             "(new count, index) of every key whose new count reaches ``floor`` (the store's\n"
             "kept most frequent pretokens).  None when an old value is not 8 bytes, a count not an int\n"
             "of 0 to 2**63-1, or a sum passes 64 bits (the caller then does it in Python, with its errors).");

static PyObject *py_add_le64(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"keys", "olds", "counts", "absent", "floor", NULL};
    PyObject *keys, *olds, *counts, *absent;
    unsigned long long floor;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!OK:add_le64", keywords, &PyList_Type, &keys, &PyList_Type,
                                     &olds, &PyList_Type, &counts, &absent, &floor))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(olds);
    if (PyList_GET_SIZE(counts) != n || PyList_GET_SIZE(keys) != n) Py_RETURN_NONE;
    PyObject *top = PyList_New(0);
    if (!top) return NULL;
    PyObject *values = PyList_New(n);
    if (!values) { Py_DECREF(top); return NULL; }
    unsigned long long highest = 0, new_bytes = 0;
    Py_ssize_t fresh = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *old = PyList_GET_ITEM(olds, i), *c = PyList_GET_ITEM(counts, i);
        uint64_t before = 0;
        if (old == absent) {
            PyObject *k = PyList_GET_ITEM(keys, i);
            if (!PyBytes_CheckExact(k)) goto fallback;
            fresh++;
            new_bytes += (unsigned long long)PyBytes_GET_SIZE(k);
        } else {
            if (!PyBytes_CheckExact(old) || PyBytes_GET_SIZE(old) != 8) goto fallback;
            before = bs_ct_get_le((const uint8_t *)PyBytes_AS_STRING(old), 8);
        }
        if (!PyLong_CheckExact(c)) goto fallback;
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(c, &overflow);
        if (overflow || v < 0) goto fallback;
        uint64_t after;
        if (__builtin_add_overflow(before, (uint64_t)v, &after)) goto fallback;
        if (after > highest) highest = after;
        PyObject *value = le64_bytes(after);
        if (!value) goto fail;
        PyList_SET_ITEM(values, i, value);
        if (after >= floor) {
            PyObject *item = Py_BuildValue("(Kn)", (unsigned long long)after, i);
            int rc = item ? PyList_Append(top, item) : -1;
            Py_XDECREF(item);
            if (rc) goto fail;
        }
    }
    return Py_BuildValue("(NKnKN)", values, highest, fresh, new_bytes, top);
fallback:
    Py_DECREF(values);
    Py_DECREF(top);
    Py_RETURN_NONE;
fail:
    Py_DECREF(values);
    Py_DECREF(top);
    return NULL;
}

/* -- the store's structure check (storecheck.c) ------------------------------------------ */

static PyObject *store_check(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"buffer", "txnid", NULL};
    Py_buffer buf;
    unsigned long long txnid;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*K", kwlist, &buf, &txnid)) return NULL;
    char error[256] = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = bs_store_check(buf.buf, (uint64_t)buf.len, (uint64_t)txnid, error, sizeof error);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (rc == BS_BAD_ROW) {
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    if (rc < 0) return raise_status(rc);
    return PyLong_FromLong(rc);
}

/* _set_compact_min(positions) -> the previous value of bs_compact_min (merge_loop.h), so that a
 * test reaches the compaction of positions with small inputs.  Not for use outside tests. */
static PyObject *set_compact_min(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"positions", NULL};
    unsigned long long positions;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "K", kwlist, &positions)) return NULL;
    uint64_t previous = bs_compact_min;
    bs_compact_min = positions;
    return PyLong_FromUnsignedLongLong(previous);
}

/* -- the store written from native code (storewrite.c) ----------------------------------- */

static PyObject *LmdbError; /* _fastbpe.LmdbError(code, text): LMDB's own failures */

typedef struct {
    PyObject_HEAD
    bs_sw *w;
} StoreWriterObject;

/* NULL with the exception of a storewrite status: OverflowError(the sum) past 2**63-1,
 * ValueError for a malformed run or a damaged count, LmdbError(code, text) for LMDB's. */
static PyObject *sw_error(int rc, const bs_sw_result *r) {
    if (rc == BS_SW_ENOMEM) return PyErr_NoMemory();
    if (rc == BS_SW_EOVERFLOW) {
        PyObject *hi = PyLong_FromUnsignedLongLong(r->over_hi), *lo = PyLong_FromUnsignedLongLong(r->over_lo);
        PyObject *shift = PyLong_FromLong(64), *high = NULL, *sum = NULL;
        if (hi && lo && shift && (high = PyNumber_Lshift(hi, shift))) sum = PyNumber_Or(high, lo);
        if (sum) PyErr_SetObject(PyExc_OverflowError, sum);
        Py_XDECREF(hi), Py_XDECREF(lo), Py_XDECREF(shift), Py_XDECREF(high), Py_XDECREF(sum);
        return NULL;
    }
    if (rc == BS_SW_ELIMIT) {
        PyErr_SetString(PyExc_OverflowError, bs_sw_strerror(rc));
        return NULL;
    }
    if (rc == BS_SW_EPACKED || rc == BS_SW_EDAMAGED || rc == BS_SW_ENOTXN) {
        PyErr_SetString(PyExc_ValueError, bs_sw_strerror(rc));
        return NULL;
    }
    PyObject *args = Py_BuildValue("(is)", rc, bs_sw_strerror(rc));
    if (args) PyErr_SetObject(LmdbError, args);
    Py_XDECREF(args);
    return NULL;
}

static bs_sw *sw_of(StoreWriterObject *self) {
    if (!self->w) PyErr_SetString(PyExc_ValueError, "the store writer is closed");
    return self->w;
}

static PyObject *sw_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"path", "map_size", NULL};
    PyObject *path;
    unsigned long long map_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&K:StoreWriter", keywords, PyUnicode_FSConverter, &path, &map_size))
        return NULL;
    StoreWriterObject *self = (StoreWriterObject *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(path);
        return NULL;
    }
    int rc;
    bs_sw *w = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = bs_sw_open(PyBytes_AS_STRING(path), (size_t)map_size, &w);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (rc) {
        Py_DECREF(self);
        return sw_error(rc, NULL);
    }
    self->w = w;
    return (PyObject *)self;
}

static void sw_dealloc(StoreWriterObject *self) {
    bs_sw_close(self->w);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *sw_close(StoreWriterObject *self, PyObject *unused) {
    bs_sw *w = self->w;
    self->w = NULL;
    Py_BEGIN_ALLOW_THREADS
    bs_sw_close(w);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *sw_map_size(StoreWriterObject *self, PyObject *unused) {
    bs_sw *w = sw_of(self);
    return w ? PyLong_FromSize_t(bs_sw_map_size(w)) : NULL;
}

static PyObject *sw_set_map_size(StoreWriterObject *self, PyObject *arg) {
    bs_sw *w = sw_of(self);
    size_t size = w ? PyLong_AsSize_t(arg) : 0;
    if (!w || (size == (size_t)-1 && PyErr_Occurred())) return NULL;
    int rc = bs_sw_set_map_size(w, size);
    if (rc) return sw_error(rc, NULL);
    Py_RETURN_NONE;
}

static PyObject *sw_max_key(StoreWriterObject *self, PyObject *unused) {
    bs_sw *w = sw_of(self);
    return w ? PyLong_FromSize_t(bs_sw_max_key(w)) : NULL;
}

static PyObject *sw_begin(StoreWriterObject *self, PyObject *unused) {
    bs_sw *w = sw_of(self);
    if (!w) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = bs_sw_begin(w);
    Py_END_ALLOW_THREADS
    if (rc) return sw_error(rc, NULL);
    Py_RETURN_NONE;
}

static PyObject *sw_commit(StoreWriterObject *self, PyObject *unused) {
    bs_sw *w = sw_of(self);
    if (!w) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS /* the commit syncs the file */
    rc = bs_sw_commit(w);
    Py_END_ALLOW_THREADS
    if (rc) return sw_error(rc, NULL);
    Py_RETURN_NONE;
}

static PyObject *sw_abort(StoreWriterObject *self, PyObject *unused) {
    if (self->w) bs_sw_abort(self->w);
    Py_RETURN_NONE;
}

static PyObject *sw_get(StoreWriterObject *self, PyObject *args) {
    int db;
    Py_buffer key;
    bs_sw *w = sw_of(self);
    if (!w || !PyArg_ParseTuple(args, "iy*:get", &db, &key)) return NULL;
    const uint8_t *val;
    size_t vlen;
    int rc = bs_sw_get(w, db, key.buf, (size_t)key.len, &val, &vlen);
    PyBuffer_Release(&key);
    if (rc == MDB_NOTFOUND) Py_RETURN_NONE;
    if (rc) return sw_error(rc, NULL);
    return PyBytes_FromStringAndSize((const char *)val, (Py_ssize_t)vlen);
}

static PyObject *sw_put(StoreWriterObject *self, PyObject *args) {
    int db;
    Py_buffer key, value;
    bs_sw *w = sw_of(self);
    if (!w || !PyArg_ParseTuple(args, "iy*y*:put", &db, &key, &value)) return NULL;
    int rc = bs_sw_put(w, db, key.buf, (size_t)key.len, value.buf, (size_t)value.len);
    PyBuffer_Release(&key);
    PyBuffer_Release(&value);
    if (rc) return sw_error(rc, NULL);
    Py_RETURN_NONE;
}

static PyObject *sw_delete(StoreWriterObject *self, PyObject *args) {
    int db;
    Py_buffer key;
    bs_sw *w = sw_of(self);
    if (!w || !PyArg_ParseTuple(args, "iy*:delete", &db, &key)) return NULL;
    int rc = bs_sw_del(w, db, key.buf, (size_t)key.len);
    PyBuffer_Release(&key);
    if (rc == MDB_NOTFOUND) Py_RETURN_FALSE;
    if (rc) return sw_error(rc, NULL);
    Py_RETURN_TRUE;
}

static PyObject *sw_first_from(StoreWriterObject *self, PyObject *args) {
    int db;
    Py_buffer key;
    bs_sw *w = sw_of(self);
    if (!w || !PyArg_ParseTuple(args, "iy*:first_from", &db, &key)) return NULL;
    const uint8_t *k, *v;
    size_t kl, vl;
    int rc = bs_sw_first_from(w, db, key.buf, (size_t)key.len, &k, &kl, &v, &vl);
    PyBuffer_Release(&key);
    if (rc == MDB_NOTFOUND) Py_RETURN_NONE;
    if (rc) return sw_error(rc, NULL);
    return Py_BuildValue("(y#y#)", (const char *)k, (Py_ssize_t)kl, (const char *)v, (Py_ssize_t)vl);
}

static PyObject *sw_stat(StoreWriterObject *self, PyObject *args) {
    int db;
    bs_sw *w = sw_of(self);
    if (!w || !PyArg_ParseTuple(args, "i:stat", &db)) return NULL;
    uint64_t entries, pages;
    int rc = bs_sw_stat(w, db, &entries, &pages);
    if (rc) return sw_error(rc, NULL);
    return Py_BuildValue("(KK)", (unsigned long long)entries, (unsigned long long)pages);
}

/* (new, new_bytes, total, [(key, count) of the entries left to the caller]) */
static PyObject *sw_result(const bs_sw_result *r) {
    PyObject *skipped = PyList_New((Py_ssize_t)r->n_skipped);
    for (size_t i = 0; skipped && i < r->n_skipped; i++) {
        PyObject *item = Py_BuildValue("(y#K)", (const char *)r->skipped[i].key, (Py_ssize_t)r->skipped[i].len,
                                       (unsigned long long)r->skipped[i].count);
        if (!item) Py_CLEAR(skipped);
        else PyList_SET_ITEM(skipped, (Py_ssize_t)i, item);
    }
    if (!skipped) return NULL;
    PyObject *top = PyList_New((Py_ssize_t)r->n_top);
    for (size_t i = 0; top && i < r->n_top; i++) {
        PyObject *item = Py_BuildValue("(Ky#)", (unsigned long long)r->top[i].count, (const char *)r->top[i].key,
                                       (Py_ssize_t)r->top[i].len);
        if (!item) Py_CLEAR(top);
        else PyList_SET_ITEM(top, (Py_ssize_t)i, item);
    }
    if (!top) { Py_DECREF(skipped); return NULL; }
    PyObject *hi = PyLong_FromUnsignedLongLong(r->total_hi), *lo = PyLong_FromUnsignedLongLong(r->total_lo);
    PyObject *shift = PyLong_FromLong(64), *high = NULL, *total = NULL, *result = NULL;
    if (hi && lo && shift && (high = PyNumber_Lshift(hi, shift))) total = PyNumber_Or(high, lo);
    if (total)
        result = Py_BuildValue("(KKOOO)", (unsigned long long)r->new_keys, (unsigned long long)r->new_bytes, total,
                               skipped, top);
    Py_XDECREF(hi), Py_XDECREF(lo), Py_XDECREF(shift), Py_XDECREF(high), Py_XDECREF(total);
    Py_DECREF(skipped);
    Py_DECREF(top);
    return result;
}

static PyObject *sw_add(StoreWriterObject *self, PyObject *args, int chunk) {
    Py_buffer buf;
    bs_sw *w = sw_of(self);
    unsigned long long floor = UINT64_MAX; /* (none: no entry is listed) */
    Py_ssize_t keep = PY_SSIZE_T_MAX;       /* (every entry that reaches the floor) */
    if (!w || !PyArg_ParseTuple(args, chunk ? "y*|Kn:add_chunk" : "y*|Kn:add_run", &buf, &floor, &keep)) return NULL;
    if (keep < 0) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "keep must not be negative");
        return NULL;
    }
    bs_sw_result r;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = chunk ? bs_sw_add_chunk(w, buf.buf, (size_t)buf.len, floor, (size_t)keep, &r)
               : bs_sw_add_run(w, buf.buf, (size_t)buf.len, floor, (size_t)keep, &r);
    Py_END_ALLOW_THREADS
    PyObject *result = rc == BS_SW_EINELIGIBLE ? Py_NewRef(Py_None) : rc ? sw_error(rc, &r) : sw_result(&r);
    bs_sw_result_free(&r); /* (the skipped keys point into buf: released after) */
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *sw_add_run(StoreWriterObject *self, PyObject *args) { return sw_add(self, args, 0); }

static PyObject *sw_add_runs(StoreWriterObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"runs", "floor", "keep", "threads", NULL};
    PyObject *seq;
    bs_sw *w = sw_of(self);
    unsigned long long floor = UINT64_MAX;
    Py_ssize_t keep = PY_SSIZE_T_MAX, threads = 1;
    if (!w || !PyArg_ParseTupleAndKeywords(args, kwargs, "O|Kn$n:add_runs", keywords, &seq, &floor, &keep, &threads))
        return NULL;
    if (keep < 0 || threads < 1 || (size_t)threads > BS_RUNS_THREADS_MAX) {
        PyErr_Format(PyExc_ValueError, "keep must not be negative, threads from 1 to %u", BS_RUNS_THREADS_MAX);
        return NULL;
    }
    Py_buffer *views;
    Py_ssize_t n;
    size_t total;
    bs_run *runs = runs_of(seq, &views, &n, &total);
    if (!runs) return NULL;
    uint8_t *out = PyMem_RawMalloc(total ? total : 1); /* (written by the helper threads: no GIL held) */
    if (!out) {
        release_runs(runs, views, n);
        return PyErr_NoMemory();
    }
    bs_sw_result r;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = bs_sw_add_runs(w, runs, (size_t)n, (size_t)threads, out, floor, (size_t)keep, &r);
    Py_END_ALLOW_THREADS
    PyObject *result = rc ? sw_error(rc, &r) : sw_result(&r);
    bs_sw_result_free(&r); /* (the skipped keys point into out: freed after) */
    PyMem_RawFree(out);
    release_runs(runs, views, n);
    return result;
}
static PyObject *sw_add_chunk(StoreWriterObject *self, PyObject *args) { return sw_add(self, args, 1); }

static PyObject *sw_stage_run(StoreWriterObject *self, PyObject *args) {
    Py_buffer run, prefix;
    Py_ssize_t chunk_keys;
    bs_sw *w = sw_of(self);
    if (!w || !PyArg_ParseTuple(args, "y*ny*:stage_run", &run, &chunk_keys, &prefix)) return NULL;
    size_t chunks = 0;
    int rc = chunk_keys > 0 ? 0 : EINVAL;
    if (!rc) {
        Py_BEGIN_ALLOW_THREADS
        rc = bs_sw_stage_run(w, run.buf, (size_t)run.len, (size_t)chunk_keys, prefix.buf, (size_t)prefix.len, &chunks);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&run);
    PyBuffer_Release(&prefix);
    if (rc) return sw_error(rc, NULL);
    return PyLong_FromSize_t(chunks);
}

static PyMethodDef sw_methods[] = {
    {"close", (PyCFunction)sw_close, METH_NOARGS, "close()\n\nAborts an open transaction and closes the environment."},
    {"map_size", (PyCFunction)sw_map_size, METH_NOARGS, "map_size() -> the environment's map size."},
    {"set_map_size", (PyCFunction)sw_set_map_size, METH_O, "set_map_size(n)\n\nNo transaction open; 0: the file's."},
    {"max_key", (PyCFunction)sw_max_key, METH_NOARGS, "max_key() -> LMDB's largest key (bytes)."},
    {"begin", (PyCFunction)sw_begin, METH_NOARGS, "begin()\n\nStarts the write transaction."},
    {"commit", (PyCFunction)sw_commit, METH_NOARGS, "commit()\n\nCommits it (synced)."},
    {"abort", (PyCFunction)sw_abort, METH_NOARGS, "abort()\n\nAborts it (none open: nothing)."},
    {"get", (PyCFunction)sw_get, METH_VARARGS, "get(db, key) -> bytes or None"},
    {"put", (PyCFunction)sw_put, METH_VARARGS, "put(db, key, value)"},
    {"delete", (PyCFunction)sw_delete, METH_VARARGS, "delete(db, key) -> whether it was there"},
    {"first_from", (PyCFunction)sw_first_from, METH_VARARGS, "first_from(db, key) -> (key, value) of the first >= key, or None"},
    {"stat", (PyCFunction)sw_stat, METH_VARARGS, "stat(db) -> (entries, pages)"},
    {"add_run", (PyCFunction)sw_add_run, METH_VARARGS,
     "add_run(run, floor=none, keep=all) -> (new, new_bytes, total, skipped, top)\n\n"
     "Adds a sorted run to the words table (see storewrite.h); ``skipped``: (key, count) of the\n"
     "entries whose keys are not words keys (empty, longer than max_key()), left to the caller;\n"
     "``top``: (new count, key) of the best ``keep`` entries whose new count reached ``floor``,\n"
     "count descending, then key.\n"
     "OverflowError(sum) for a count past 2**63-1, ValueError for a malformed run or a stored\n"
     "count that is not 8 bytes, LmdbError(code, text): abort the transaction after any."},
    {"add_runs", (PyCFunction)(void (*)(void))sw_add_runs, METH_VARARGS | METH_KEYWORDS,
     "add_runs(runs, floor=none, keep=all, *, threads=1) -> as add_run\n\n"
     "add_run of the runs merged (merge_runs_packed), each part of the merge added as soon as\n"
     "it is merged while ``threads`` helper threads merge the next.  ValueError for a malformed\n"
     "run, OverflowError(text) for a merged count past 2**64-1, found part by part: abort the\n"
     "transaction after any error."},
    {"add_chunk", (PyCFunction)sw_add_chunk, METH_VARARGS,
     "add_chunk(chunk, floor=none, keep=all) -> as add_run, or None (nothing written) for a chunk\n"
     "that is not increasing keys with positive counts."},
    {"stage_run", (PyCFunction)sw_stage_run, METH_VARARGS,
     "stage_run(run, chunk_keys, prefix) -> chunks\n\nThe run into meta as msgpack [keys, counts] chunks."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StoreWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_stream._fastbpe.StoreWriter",
    .tp_doc = "StoreWriter(path, map_size)\n\nA store's LMDB environment opened by the vendored LMDB, for\n"
              "writing (storewrite.h; lmdb_store.py says when it may be open).",
    .tp_basicsize = sizeof(StoreWriterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = sw_new,
    .tp_dealloc = (destructor)sw_dealloc,
    .tp_methods = sw_methods,
};

/* -- FileDigest: filedigest.h ------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    bs_filedigest *d;
} FileDigestObject;

static PyTypeObject FileDigestType;
/* Feeds of at least this many bytes run without the GIL (a count hashes on a thread). */
#define FD_NOGIL_BYTES 65536

static int fd_feed(FileDigestObject *self, PyObject *data) {
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return -1;
    if (view.len >= FD_NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        bs_fd_update(self->d, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        bs_fd_update(self->d, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return 0;
}

static PyObject *fd_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"data", NULL};
    PyObject *data = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &data)) return NULL;
    FileDigestObject *self = (FileDigestObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->d = bs_fd_new();
    if (!self->d) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if (data && fd_feed(self, data) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void fd_dealloc(FileDigestObject *self) {
    bs_fd_free(self->d);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *fd_update(FileDigestObject *self, PyObject *data) {
    if (fd_feed(self, data) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *fd_digest(FileDigestObject *self, PyObject *Py_UNUSED(ignored)) {
    uint8_t out[BS_FD_DIGEST_SIZE];
    bs_fd_digest(self->d, out);
    return PyBytes_FromStringAndSize((const char *)out, BS_FD_DIGEST_SIZE);
}

static PyObject *fd_copy(FileDigestObject *self, PyObject *Py_UNUSED(ignored)) {
    FileDigestObject *twin = (FileDigestObject *)FileDigestType.tp_alloc(&FileDigestType, 0);
    if (!twin) return NULL;
    twin->d = bs_fd_copy(self->d);
    if (!twin->d) {
        Py_DECREF(twin);
        return PyErr_NoMemory();
    }
    return (PyObject *)twin;
}

static PyMethodDef fd_methods[] = {
    {"update", (PyCFunction)fd_update, METH_O, "update(data): feed a bytes-like object"},
    {"digest", (PyCFunction)fd_digest, METH_NOARGS, "digest() -> 16 bytes: XXH3-128 of what was fed, big-endian"},
    {"copy", (PyCFunction)fd_copy, METH_NOARGS, "copy() -> a FileDigest that goes on from here"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FileDigestType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_stream._fastbpe.FileDigest",
    .tp_doc = "FileDigest(data=b'')\n\nThe XXH3-128 digest of the bytes fed (filedigest.h), as hashlib's\n"
              "objects: update(), digest(), copy().",
    .tp_basicsize = sizeof(FileDigestObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = fd_new,
    .tp_dealloc = (destructor)fd_dealloc,
    .tp_methods = fd_methods,
};

static PyObject *set_limit32(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"limit", NULL};
    unsigned long long limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "K", kwlist, &limit)) return NULL;
    if (limit < 1 || limit > BS_NONE - 1) {
        PyErr_Format(PyExc_ValueError, "the limit must be 1 to %u", BS_NONE - 1);
        return NULL;
    }
    uint32_t previous = bs_limit32;
    bs_limit32 = (uint32_t)limit;
    return PyLong_FromUnsignedLong(previous);
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))py_scan, KW, scan_doc},
    {"store_check", (PyCFunction)(void (*)(void))store_check, KW,
     "store_check(buffer, txnid) -> 0 (consistent) or 1 (snapshot gone: retry); ValueError names the damage."},
    {"first_invalid_utf8", (PyCFunction)(void (*)(void))py_first_invalid_utf8, KW, first_invalid_utf8_doc},
    {"merge_runs", (PyCFunction)(void (*)(void))py_merge_runs, KW, merge_runs_doc},
    {"merge_runs_packed", (PyCFunction)(void (*)(void))py_merge_runs_packed, KW, merge_runs_packed_doc},
    {"column_stats", (PyCFunction)(void (*)(void))py_column_stats, KW, column_stats_doc},
    {"le64_values", (PyCFunction)(void (*)(void))py_le64_values, KW, le64_values_doc},
    {"add_le64", (PyCFunction)(void (*)(void))py_add_le64, KW, add_le64_doc},
    {"_set_compact_min", (PyCFunction)(void (*)(void))set_compact_min, KW,
     "_set_compact_min(positions) -> previous: the fewest positions the disk path compacts (tests only)."},
    {"_set_limit32", (PyCFunction)(void (*)(void))set_limit32, KW,
     "_set_limit32(limit) -> previous: the most items of an array counted in 32 bits (tests only)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastbpe",
                                    "The BPE merge loop, encoder, pretokenizer scanner and count table in C.", -1, methods};

/* TIE_BREAKS: the rules' names in the order of their numbers, from layout.h. */
static int add_layout(PyObject *m) {
#define BS_TB_NAME_(id, name) name,
    static const char *rules[] = {BS_TIE_BREAKS(BS_TB_NAME_)};
#undef BS_TB_NAME_
    PyObject *names = PyTuple_New(TB_COUNT);
    if (!names) return -1;
    for (int k = 0; k < TB_COUNT; k++) {
        PyObject *s = PyUnicode_FromString(rules[k]);
        if (!s) { Py_DECREF(names); return -1; }
        PyTuple_SET_ITEM(names, k, s);
    }
    if (PyModule_AddObject(m, "TIE_BREAKS", names) < 0) { Py_DECREF(names); return -1; }
    return 0;
}

/* PATTERNS: the scanner's pattern names in the order of their numbers; REGEX_VERSION and
 * UNICODE_VERSION: what unicode_tables.h was generated from (tools/gen_unicode_tables.py). */
static int add_scan_constants(PyObject *m) {
    PyObject *names = PyTuple_New(BS_SCAN_N_PATTERNS);
    if (!names) return -1;
    for (int i = 0; i < BS_SCAN_N_PATTERNS; i++) {
        PyObject *name = PyUnicode_FromString(bs_scan_pattern_name(i));
        if (!name) { Py_DECREF(names); return -1; }
        PyTuple_SET_ITEM(names, i, name);
    }
    if (PyModule_AddObject(m, "PATTERNS", names) < 0) { Py_DECREF(names); return -1; }
    if (PyModule_AddStringConstant(m, "REGEX_VERSION", bs_scan_regex_version()) < 0 ||
        PyModule_AddStringConstant(m, "UNICODE_VERSION", bs_scan_unicode_version()) < 0)
        return -1;
    return 0;
}

static int add_type(PyObject *m, const char *name, PyTypeObject *type) {
    Py_INCREF(type);
    if (PyModule_AddObject(m, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

static int add_lmdb_error(PyObject *m) {
    LmdbError = PyErr_NewException("bpe_stream._fastbpe.LmdbError", NULL, NULL);
    if (!LmdbError) return -1;
    Py_INCREF(LmdbError);
    if (PyModule_AddObject(m, "LmdbError", LmdbError) < 0) {
        Py_DECREF(LmdbError);
        return -1;
    }
    /* the codes the store tells apart (lmdb_store.Store.write) */
    static const struct {
        const char *name;
        int code;
    } codes[] = {{"MDB_MAP_FULL", MDB_MAP_FULL}, {"MDB_MAP_RESIZED", MDB_MAP_RESIZED},
                 {"MDB_CORRUPTED", MDB_CORRUPTED}, {"MDB_PAGE_NOTFOUND", MDB_PAGE_NOTFOUND},
                 {"MDB_INVALID", MDB_INVALID}, {"MDB_PANIC", MDB_PANIC}, {"MDB_BAD_VALSIZE", MDB_BAD_VALSIZE},
                 {"MDB_VERSION_MISMATCH", MDB_VERSION_MISMATCH}};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (PyModule_AddIntConstant(m, codes[i].name, codes[i].code) < 0) return -1;
    return 0;
}

PyMODINIT_FUNC PyInit__fastbpe(void) {
    if (PyType_Ready(&MergeLoopType) < 0 || PyType_Ready(&EncoderType) < 0 ||
        PyType_Ready(&CountTableType) < 0 || PyType_Ready(&StoreWriterType) < 0 ||
        PyType_Ready(&FileDigestType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (add_type(m, "MergeLoop", &MergeLoopType) < 0 ||
        add_type(m, "Encoder", &EncoderType) < 0 || add_type(m, "CountTable", &CountTableType) < 0 ||
        add_type(m, "StoreWriter", &StoreWriterType) < 0 || add_type(m, "FileDigest", &FileDigestType) < 0 ||
        add_lmdb_error(m) < 0 ||
        add_layout(m) < 0 || add_scan_constants(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

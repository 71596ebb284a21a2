/*
 * _fastbpe: the BPE merge loop in C, with a cost that follows pair occurrences.
 *
 * Same rules and results as the pure-Python trainer (bpe_stream/trainer.py), which stays
 * as the reference and the fallback when this extension is not built.
 *
 * Layout.  All symbols of all distinct words sit in one array, word after word.  Each
 * position has its symbol, and links to the previous and next live position of its word
 * (NONE at the word's ends), and the id of its word (for the word's frequency).  Each pair
 * has a record: its count (weighted by word frequency, 64-bit) and the list of positions
 * where it starts.  Entries of that list may be stale (the pair is no longer there): a
 * merge checks each one and skips those.
 *
 * A merge of (a, b) into z visits only the positions of (a, b), in increasing order, so
 * within a word it replaces non-overlapping occurrences left to right (aaa -> [aa, a]).
 * At an occurrence i (next j, previous x, after-next y) the counts of (x, a) and (b, y)
 * fall, those of (x, z) and (z, y) rise, i takes z and j is unlinked.  Work is therefore
 * proportional to the occurrences, not to the length of the words that hold them.
 *
 * Priority: a binary heap of (count, pair) entries, best first: the highest count, then
 * the tie-break rule -- max-bytes: the greatest (bytes(left), bytes(right)); min-bytes:
 * the smallest; min-ids: the smallest (id(left), id(right)).  Counts of existing pairs
 * only fall (only pairs with the new token are born), so invalidation is lazy: a popped
 * entry whose count is stale is pushed back with the current count.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NONE 0xFFFFFFFFu
#define DEAD 0xFFFFFFFFu
#define EMPTY_KEY 0xFFFFFFFFFFFFFFFFull

enum { TB_MAX_BYTES = 0, TB_MIN_BYTES = 1, TB_MIN_IDS = 2 };

typedef struct {
    uint32_t *data;
    uint32_t len, cap;
} PosList;

typedef struct {
    uint64_t key;
    int64_t count;
    PosList occ;
    uint64_t pushed_at; /* the merge (1-based) after which it was last pushed as a new pair */
} PairRec;

typedef struct {
    int64_t count;
    uint32_t rec;
} HeapEntry;

typedef struct {
    uint8_t *data;
    uint32_t len;
} Token;

typedef struct {
    /* positions */
    uint32_t *sym, *prev, *next, *wid;
    uint64_t n_pos;
    int64_t *freq;
    /* pairs */
    PairRec *recs;
    uint32_t n_recs, cap_recs;
    uint32_t *table; /* open addressing: record index or NONE */
    uint64_t table_mask;
    /* heap */
    HeapEntry *heap;
    uint64_t heap_len, heap_cap;
    /* tokens */
    Token *tokens;
    uint32_t n_tokens, cap_tokens;
    int tie_break;
} State;

static int poslist_push(PosList *l, uint32_t v) {
    if (l->len == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 2;
        uint32_t *d = (uint32_t *)realloc(l->data, (size_t)cap * sizeof(uint32_t));
        if (!d) return -1;
        l->data = d;
        l->cap = cap;
    }
    l->data[l->len++] = v;
    return 0;
}

static inline uint64_t hash64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static int table_grow(State *s) {
    uint64_t new_size = (s->table_mask + 1) * 2;
    uint32_t *t = (uint32_t *)malloc(new_size * sizeof(uint32_t));
    if (!t) return -1;
    memset(t, 0xFF, new_size * sizeof(uint32_t));
    for (uint32_t r = 0; r < s->n_recs; r++) {
        uint64_t h = hash64(s->recs[r].key) & (new_size - 1);
        while (t[h] != NONE) h = (h + 1) & (new_size - 1);
        t[h] = r;
    }
    free(s->table);
    s->table = t;
    s->table_mask = new_size - 1;
    return 0;
}

/* The record of pair `key`, created with count 0 when `create`; NONE when absent or on error. */
static uint32_t pair_get(State *s, uint64_t key, int create) {
    uint64_t h = hash64(key) & s->table_mask;
    for (;;) {
        uint32_t r = s->table[h];
        if (r == NONE) break;
        if (s->recs[r].key == key) return r;
        h = (h + 1) & s->table_mask;
    }
    if (!create) return NONE;
    if ((uint64_t)(s->n_recs + 1) * 2 > s->table_mask + 1) {
        if (table_grow(s) < 0) return NONE;
        h = hash64(key) & s->table_mask;
        while (s->table[h] != NONE) h = (h + 1) & s->table_mask;
    }
    if (s->n_recs == s->cap_recs) {
        uint32_t cap = s->cap_recs ? s->cap_recs * 2 : 1024;
        PairRec *d = (PairRec *)realloc(s->recs, (size_t)cap * sizeof(PairRec));
        if (!d) return NONE;
        s->recs = d;
        s->cap_recs = cap;
    }
    uint32_t r = s->n_recs++;
    s->recs[r].key = key;
    s->recs[r].count = 0;
    s->recs[r].occ.data = NULL;
    s->recs[r].occ.len = s->recs[r].occ.cap = 0;
    s->recs[r].pushed_at = 0;
    s->table[h] = r;
    return r;
}

static inline int bytes_cmp(const Token *x, const Token *y) {
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->data, y->data, n) : 0;
    if (c) return c;
    return (x->len > y->len) - (x->len < y->len);
}

/* 1 when entry p must come out of the heap before entry q. */
static inline int better(const State *s, const HeapEntry *p, const HeapEntry *q) {
    if (p->count != q->count) return p->count > q->count;
    uint64_t kp = s->recs[p->rec].key, kq = s->recs[q->rec].key;
    if (s->tie_break == TB_MIN_IDS) return kp < kq;
    const Token *lp = &s->tokens[kp >> 32], *rp = &s->tokens[kp & 0xFFFFFFFFu];
    const Token *lq = &s->tokens[kq >> 32], *rq = &s->tokens[kq & 0xFFFFFFFFu];
    int c = bytes_cmp(lp, lq);
    if (!c) c = bytes_cmp(rp, rq);
    return s->tie_break == TB_MAX_BYTES ? c > 0 : c < 0;
}

static void sift_down(State *s, uint64_t i) {
    HeapEntry *h = s->heap;
    uint64_t n = s->heap_len;
    HeapEntry e = h[i];
    for (;;) {
        uint64_t l = 2 * i + 1;
        if (l >= n) break;
        uint64_t best = l;
        if (l + 1 < n && better(s, &h[l + 1], &h[l])) best = l + 1;
        if (!better(s, &h[best], &e)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = e;
}

static void sift_up(State *s, uint64_t i) {
    HeapEntry *h = s->heap;
    HeapEntry e = h[i];
    while (i > 0) {
        uint64_t parent = (i - 1) / 2;
        if (!better(s, &e, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
}

static int heap_push(State *s, int64_t count, uint32_t rec) {
    if (s->heap_len == s->heap_cap) {
        uint64_t cap = s->heap_cap ? s->heap_cap * 2 : 1024;
        HeapEntry *d = (HeapEntry *)realloc(s->heap, cap * sizeof(HeapEntry));
        if (!d) return -1;
        s->heap = d;
        s->heap_cap = cap;
    }
    s->heap[s->heap_len].count = count;
    s->heap[s->heap_len].rec = rec;
    sift_up(s, s->heap_len++);
    return 0;
}

static void heap_pop(State *s) {
    s->heap[0] = s->heap[--s->heap_len];
    if (s->heap_len) sift_down(s, 0);
}

static int add_token(State *s, const uint8_t *data, uint32_t len) {
    if (s->n_tokens == s->cap_tokens) {
        uint32_t cap = s->cap_tokens ? s->cap_tokens * 2 : 1024;
        Token *d = (Token *)realloc(s->tokens, (size_t)cap * sizeof(Token));
        if (!d) return -1;
        s->tokens = d;
        s->cap_tokens = cap;
    }
    uint8_t *copy = (uint8_t *)malloc(len ? len : 1);
    if (!copy) return -1;
    if (len) memcpy(copy, data, len);
    s->tokens[s->n_tokens].data = copy;
    s->tokens[s->n_tokens].len = len;
    s->n_tokens++;
    return 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void state_free(State *s) {
    free(s->sym); free(s->prev); free(s->next); free(s->wid); free(s->freq);
    if (s->recs)
        for (uint32_t r = 0; r < s->n_recs; r++) free(s->recs[r].occ.data);
    free(s->recs); free(s->table); free(s->heap);
    if (s->tokens)
        for (uint32_t t = 0; t < s->n_tokens; t++) free(s->tokens[t].data);
    free(s->tokens);
}

/* Adds f to the count of `key` (creating it); pushes `pos` on its occurrences when pos != NONE. */
static int bump(State *s, uint64_t key, int64_t f, uint32_t pos, uint32_t *touched, uint32_t *n_touched, uint32_t cap_touched) {
    uint32_t r = pair_get(s, key, 1);
    if (r == NONE) return -1;
    PairRec *rec = &s->recs[r];
    rec->count += f;
    if (pos != NONE) {
        if (poslist_push(&rec->occ, pos) < 0) return -1;
        if (touched && *n_touched < cap_touched) touched[(*n_touched)++] = r;
    }
    return 0;
}

/* Applies the merge of record `r` = (a, b) as token z; returns 0 or -1 (no memory). */
static int apply_merge(State *s, uint32_t r, uint32_t z, uint32_t **touched, uint32_t *cap_touched, uint32_t *n_touched) {
    uint64_t key = s->recs[r].key;
    uint32_t a = (uint32_t)(key >> 32), b = (uint32_t)(key & 0xFFFFFFFFu);
    PosList occ = s->recs[r].occ;
    s->recs[r].occ.data = NULL;
    s->recs[r].occ.len = s->recs[r].occ.cap = 0;
    if (occ.len > 1) qsort(occ.data, occ.len, sizeof(uint32_t), cmp_u32);
    /* at most two new-pair records per occurrence */
    uint64_t need = (uint64_t)occ.len * 2 + 1;
    if (need > *cap_touched) {
        uint32_t *t = (uint32_t *)realloc(*touched, need * sizeof(uint32_t));
        if (!t) { free(occ.data); return -1; }
        *touched = t;
        *cap_touched = (uint32_t)need;
    }
    *n_touched = 0;
    uint32_t *sym = s->sym, *prev = s->prev, *next = s->next;
    uint32_t last = NONE;
    for (uint32_t k = 0; k < occ.len; k++) {
        uint32_t i = occ.data[k];
        if (i == last) continue;
        last = i;
        if (sym[i] != a) continue;
        uint32_t j = next[i];
        if (j == NONE || sym[j] != b) continue;
        int64_t f = s->freq[s->wid[i]];
        uint32_t x = prev[i], y = next[j];
        if (x != NONE) {
            uint64_t old = ((uint64_t)sym[x] << 32) | a;
            if (bump(s, old, -f, NONE, NULL, NULL, 0) < 0) goto fail;
            if (bump(s, ((uint64_t)sym[x] << 32) | z, f, x, *touched, n_touched, *cap_touched) < 0) goto fail;
        }
        if (y != NONE) {
            uint64_t old = ((uint64_t)b << 32) | sym[y];
            if (bump(s, old, -f, NONE, NULL, NULL, 0) < 0) goto fail;
            if (bump(s, ((uint64_t)z << 32) | sym[y], f, i, *touched, n_touched, *cap_touched) < 0) goto fail;
        }
        sym[i] = z;
        sym[j] = DEAD;
        next[i] = y;
        if (y != NONE) prev[y] = i;
    }
    free(occ.data);
    s->recs[r].count = 0;
    return 0;
fail:
    free(occ.data);
    return -1;
}

static const char *TRAIN_DOC =
    "train(symbols, word_ends, freqs, tokens, max_merges, min_count, tie_break, forced, callback, every)\n"
    "--\n\n"
    "symbols: array('I') of all words' symbols, word after word; word_ends: array('Q') of each\n"
    "word's end offset; freqs: array('q') of word frequencies; tokens: list of bytes, the\n"
    "token bytes of ids 0..len(tokens)-1 (new ids follow); forced: list of (left, right)\n"
    "merges to apply first, in order (resume); callback(list of (left, right, count)) is\n"
    "called every `every` merges and at the end.  Returns the number of merges done.";

static PyObject *train(PyObject *self, PyObject *args) {
    Py_buffer symbols = {0}, word_ends = {0}, freqs = {0};
    PyObject *tokens, *forced, *callback;
    long long max_merges, min_count;
    int tie_break;
    Py_ssize_t every;
    if (!PyArg_ParseTuple(args, "y*y*y*O!LLiO!On", &symbols, &word_ends, &freqs, &PyList_Type, &tokens,
                          &max_merges, &min_count, &tie_break, &PyList_Type, &forced, &callback, &every))
        return NULL;
    State s;
    memset(&s, 0, sizeof(s));
    s.tie_break = tie_break;
    PyObject *result = NULL, *chunk = NULL;
    uint32_t *touched = NULL, cap_touched = 0, n_touched = 0;
    uint64_t n_pos = (uint64_t)symbols.len / sizeof(uint32_t);
    uint64_t n_words = (uint64_t)word_ends.len / sizeof(uint64_t);
    const uint32_t *in_sym = (const uint32_t *)symbols.buf;
    const uint64_t *ends = (const uint64_t *)word_ends.buf;
    const int64_t *in_freq = (const int64_t *)freqs.buf;
    if ((uint64_t)freqs.len / sizeof(int64_t) != n_words || (n_words && ends[n_words - 1] != n_pos)) {
        PyErr_SetString(PyExc_ValueError, "symbols, word_ends and freqs disagree");
        goto done;
    }
    if (n_pos >= NONE) {
        PyErr_SetString(PyExc_OverflowError, "too many symbols for the in-memory trainer");
        goto done;
    }
    if (every < 1) every = 1;
    s.n_pos = n_pos;
    size_t bytes = (size_t)(n_pos ? n_pos : 1) * sizeof(uint32_t);
    s.sym = (uint32_t *)malloc(bytes);
    s.prev = (uint32_t *)malloc(bytes);
    s.next = (uint32_t *)malloc(bytes);
    s.wid = (uint32_t *)malloc(bytes);
    s.freq = (int64_t *)malloc((n_words ? n_words : 1) * sizeof(int64_t));
    s.table = (uint32_t *)malloc(1024 * sizeof(uint32_t));
    if (!s.sym || !s.prev || !s.next || !s.wid || !s.freq || !s.table) { PyErr_NoMemory(); goto done; }
    memset(s.table, 0xFF, 1024 * sizeof(uint32_t));
    s.table_mask = 1023;
    Py_ssize_t n_tok = PyList_GET_SIZE(tokens);
    for (Py_ssize_t t = 0; t < n_tok; t++) {
        PyObject *item = PyList_GET_ITEM(tokens, t);
        if (!PyBytes_Check(item)) { PyErr_SetString(PyExc_TypeError, "tokens must be bytes"); goto done; }
        if (add_token(&s, (const uint8_t *)PyBytes_AS_STRING(item), (uint32_t)PyBytes_GET_SIZE(item)) < 0) {
            PyErr_NoMemory(); goto done;
        }
    }
    memcpy(s.sym, in_sym, n_pos * sizeof(uint32_t));
    memcpy(s.freq, in_freq, n_words * sizeof(int64_t));
    uint64_t start = 0;
    for (uint64_t w = 0; w < n_words; w++) {
        uint64_t end = ends[w];
        if (end < start || end > n_pos) { PyErr_SetString(PyExc_ValueError, "word_ends must increase"); goto done; }
        for (uint64_t i = start; i < end; i++) {
            if (s.sym[i] >= s.n_tokens) { PyErr_SetString(PyExc_ValueError, "symbol id without a token"); goto done; }
            s.wid[i] = (uint32_t)w;
            s.prev[i] = i > start ? (uint32_t)(i - 1) : NONE;
            s.next[i] = i + 1 < end ? (uint32_t)(i + 1) : NONE;
            if (i + 1 < end && s.freq[w] > 0) {
                uint64_t key = ((uint64_t)s.sym[i] << 32) | s.sym[i + 1];
                if (bump(&s, key, s.freq[w], (uint32_t)i, NULL, NULL, 0) < 0) { PyErr_NoMemory(); goto done; }
            }
        }
        start = end;
    }
    for (uint32_t r = 0; r < s.n_recs; r++)
        if (s.recs[r].count > 0 && heap_push(&s, s.recs[r].count, r) < 0) { PyErr_NoMemory(); goto done; }

    chunk = PyList_New(0);
    if (!chunk) goto done;
    long long done_merges = 0;
    Py_ssize_t n_forced = PyList_GET_SIZE(forced);
    while (done_merges < max_merges) {
        uint32_t r;
        int64_t count;
        if (done_merges < n_forced) {
            unsigned long long left, right;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(forced, done_merges), "KK", &left, &right)) goto done;
            if (left >= s.n_tokens || right >= s.n_tokens) {
                PyErr_SetString(PyExc_ValueError, "forced merge names an unknown token");
                goto done;
            }
            r = pair_get(&s, ((uint64_t)left << 32) | right, 1);
            if (r == NONE) { PyErr_NoMemory(); goto done; }
            count = s.recs[r].count;
        } else {
            if (!s.heap_len) break;
            HeapEntry top = s.heap[0];
            int64_t current = s.recs[top.rec].count;
            if (current != top.count) {
                heap_pop(&s);
                if (current > 0 && heap_push(&s, current, top.rec) < 0) { PyErr_NoMemory(); goto done; }
                continue;
            }
            if (current < min_count || current <= 0) break;
            heap_pop(&s);
            r = top.rec;
            count = current;
        }
        uint64_t key = s.recs[r].key;
        uint32_t a = (uint32_t)(key >> 32), b = (uint32_t)(key & 0xFFFFFFFFu);
        uint32_t z = s.n_tokens;
        {
            Token ta = s.tokens[a], tb = s.tokens[b];
            uint8_t *buf = (uint8_t *)malloc(ta.len + tb.len + 1);
            if (!buf) { PyErr_NoMemory(); goto done; }
            memcpy(buf, ta.data, ta.len);
            memcpy(buf + ta.len, tb.data, tb.len);
            int rc = add_token(&s, buf, ta.len + tb.len);
            free(buf);
            if (rc < 0) { PyErr_NoMemory(); goto done; }
        }
        if (apply_merge(&s, r, z, &touched, &cap_touched, &n_touched) < 0) { PyErr_NoMemory(); goto done; }
        /* push each pair born in this merge once, with its final count */
        for (uint32_t k = 0; k < n_touched; k++) {
            uint32_t t = touched[k];
            if (s.recs[t].count > 0 && s.recs[t].pushed_at != (uint64_t)done_merges + 1) {
                s.recs[t].pushed_at = (uint64_t)done_merges + 1;
                if (heap_push(&s, s.recs[t].count, t) < 0) { PyErr_NoMemory(); goto done; }
            }
        }
        PyObject *m = Py_BuildValue("(IIL)", a, b, (long long)count);
        if (!m || PyList_Append(chunk, m) < 0) { Py_XDECREF(m); goto done; }
        Py_DECREF(m);
        done_merges++;
        if (done_merges % every == 0) {
            PyObject *rv = PyObject_CallFunctionObjArgs(callback, chunk, NULL);
            if (!rv) goto done;
            Py_DECREF(rv);
            Py_DECREF(chunk);
            chunk = PyList_New(0);
            if (!chunk) goto done;
            if (PyErr_CheckSignals() < 0) goto done;
        }
    }
    if (PyList_GET_SIZE(chunk)) {
        PyObject *rv = PyObject_CallFunctionObjArgs(callback, chunk, NULL);
        if (!rv) goto done;
        Py_DECREF(rv);
    }
    result = PyLong_FromLongLong(done_merges);
done:
    Py_XDECREF(chunk);
    free(touched);
    state_free(&s);
    PyBuffer_Release(&symbols);
    PyBuffer_Release(&word_ends);
    PyBuffer_Release(&freqs);
    return result;
}

static PyMethodDef methods[] = {
    {"train", (PyCFunction)train, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastbpe", "The BPE merge loop in C.", -1, methods};

PyMODINIT_FUNC PyInit__fastbpe(void) {
    methods[0].ml_doc = TRAIN_DOC;
    return PyModule_Create(&module);
}

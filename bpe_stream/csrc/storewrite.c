/*
 * storewrite.c -- see storewrite.h.  The environment is opened with the flags py-lmdb gets
 * from lmdb_store._open_env (a subdirectory, synced commits, no read-ahead, five named
 * tables), so either library may open the store next.
 */
#include "storewrite.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "counttable.h"
#include "lmdb/lmdb.h"

struct bs_sw {
    MDB_env *env;
    MDB_txn *txn; /* the open write transaction, or NULL */
    MDB_dbi dbi[BS_SW_NDBS];
};

static const char *const db_names[BS_SW_NDBS] = {"meta", "words", "longwords", "sources", "train"};

void bs_sw_result_free(bs_sw_result *r) {
    free(r->skipped);
    free(r->top);
    memset(r, 0, sizeof *r);
}

int bs_sw_open(const char *path, size_t map_size, bs_sw **out) {
    bs_sw *w = calloc(1, sizeof *w);
    if (!w) return BS_SW_ENOMEM;
    int rc = mdb_env_create(&w->env);
    if (rc == 0) rc = mdb_env_set_maxdbs(w->env, BS_SW_NDBS);
    if (rc == 0) rc = mdb_env_set_mapsize(w->env, map_size);
    if (rc == 0) rc = mdb_env_open(w->env, path, MDB_NORDAHEAD, 0644);
    if (rc != 0) {
        if (w->env) mdb_env_close(w->env);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

void bs_sw_close(bs_sw *w) {
    if (!w) return;
    bs_sw_abort(w);
    mdb_env_close(w->env);
    free(w);
}

size_t bs_sw_map_size(bs_sw *w) {
    MDB_envinfo info;
    return mdb_env_info(w->env, &info) == 0 ? info.me_mapsize : 0;
}

int bs_sw_set_map_size(bs_sw *w, size_t size) {
    if (w->txn) return BS_SW_ENOTXN;
    return mdb_env_set_mapsize(w->env, size);
}

size_t bs_sw_max_key(bs_sw *w) { return (size_t)mdb_env_get_maxkeysize(w->env); }

int bs_sw_begin(bs_sw *w) {
    if (w->txn) return BS_SW_ENOTXN;
    int rc = mdb_txn_begin(w->env, NULL, 0, &w->txn);
    if (rc == MDB_MAP_RESIZED) { /* another process grew the map: adopt its size */
        rc = mdb_env_set_mapsize(w->env, 0);
        if (rc == 0) rc = mdb_txn_begin(w->env, NULL, 0, &w->txn);
    }
    if (rc != 0) {
        w->txn = NULL;
        return rc;
    }
    for (int i = 0; i < BS_SW_NDBS && rc == 0; i++) rc = mdb_dbi_open(w->txn, db_names[i], 0, &w->dbi[i]);
    if (rc != 0) bs_sw_abort(w);
    return rc;
}

int bs_sw_commit(bs_sw *w) {
    if (!w->txn) return BS_SW_ENOTXN;
    int rc = mdb_txn_commit(w->txn); /* frees the transaction, committed or not */
    w->txn = NULL;
    return rc;
}

void bs_sw_abort(bs_sw *w) {
    if (w->txn) mdb_txn_abort(w->txn);
    w->txn = NULL;
}

static int check_db(bs_sw *w, int db) {
    if (!w->txn) return BS_SW_ENOTXN;
    return db >= 0 && db < BS_SW_NDBS ? 0 : EINVAL;
}

int bs_sw_get(bs_sw *w, int db, const uint8_t *key, size_t klen, const uint8_t **val, size_t *vlen) {
    int rc = check_db(w, db);
    if (rc) return rc;
    MDB_val k = {klen, (void *)key}, v;
    rc = mdb_get(w->txn, w->dbi[db], &k, &v);
    if (rc == 0) *val = v.mv_data, *vlen = v.mv_size;
    return rc;
}

int bs_sw_put(bs_sw *w, int db, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen) {
    int rc = check_db(w, db);
    if (rc) return rc;
    MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
    return mdb_put(w->txn, w->dbi[db], &k, &v, 0);
}

int bs_sw_del(bs_sw *w, int db, const uint8_t *key, size_t klen) {
    int rc = check_db(w, db);
    if (rc) return rc;
    MDB_val k = {klen, (void *)key};
    return mdb_del(w->txn, w->dbi[db], &k, NULL);
}

int bs_sw_first_from(bs_sw *w, int db, const uint8_t *key, size_t klen, const uint8_t **k, size_t *kl,
                     const uint8_t **v, size_t *vl) {
    int rc = check_db(w, db);
    if (rc) return rc;
    MDB_cursor *cur;
    rc = mdb_cursor_open(w->txn, w->dbi[db], &cur);
    if (rc) return rc;
    MDB_val mk = {klen, (void *)key}, mv;
    rc = mdb_cursor_get(cur, &mk, &mv, MDB_SET_RANGE);
    if (rc == 0) *k = mk.mv_data, *kl = mk.mv_size, *v = mv.mv_data, *vl = mv.mv_size;
    mdb_cursor_close(cur);
    return rc;
}

int bs_sw_stat(bs_sw *w, int db, uint64_t *entries, uint64_t *pages) {
    int rc = check_db(w, db);
    if (rc) return rc;
    MDB_stat st;
    rc = mdb_stat(w->txn, w->dbi[db], &st);
    if (rc == 0) {
        *entries = st.ms_entries;
        *pages = (uint64_t)st.ms_leaf_pages + st.ms_branch_pages + st.ms_overflow_pages;
    }
    return rc;
}

/* -- the merge of sorted counts into the words table --------------------------------------- */

typedef struct {
    bs_sw *w;
    MDB_cursor *cur;
    size_t max_key;
    int appending;   /* every key from here on is past the table's last */
    uint8_t last[512]; /* the table's last key before the merge (max_key is 511) */
    size_t last_len;
    int have_last;
    uint64_t floor; /* new counts at or above it are candidates for r->top */
    size_t keep;    /* ... of which r->top keeps the best this many */
    bs_sw_result *r;
} merger;

static int merger_start(merger *m, bs_sw *w, bs_sw_result *r) {
    memset(r, 0, sizeof *r);
    m->w = w;
    m->r = r;
    m->max_key = bs_sw_max_key(w);
    int rc = check_db(w, BS_SW_WORDS);
    if (rc) return rc;
    rc = mdb_cursor_open(w->txn, w->dbi[BS_SW_WORDS], &m->cur);
    if (rc) return rc;
    MDB_val k, v;
    rc = mdb_cursor_get(m->cur, &k, &v, MDB_LAST);
    m->have_last = rc == 0;
    m->appending = rc == MDB_NOTFOUND; /* an empty table: every key is appended */
    if (rc != 0 && rc != MDB_NOTFOUND) {
        mdb_cursor_close(m->cur);
        return rc;
    }
    if (m->have_last) {
        if (k.mv_size > sizeof m->last) {
            mdb_cursor_close(m->cur);
            return MDB_CORRUPTED;
        }
        memcpy(m->last, k.mv_data, k.mv_size);
        m->last_len = k.mv_size;
    }
    return 0;
}

static void add128(uint64_t *lo, uint64_t *hi, uint64_t v) {
    *lo += v;
    if (*lo < v) (*hi)++;
}

static int push_entry(bs_sw_skip **list, size_t *n, size_t *cap, const uint8_t *key, size_t len, uint64_t count) {
    if (*n == *cap) {
        size_t grown_cap = *cap ? 2 * *cap : 16;
        bs_sw_skip *grown = realloc(*list, grown_cap * sizeof *grown);
        if (!grown) return BS_SW_ENOMEM;
        *list = grown;
        *cap = grown_cap;
    }
    (*list)[(*n)++] = (bs_sw_skip){key, len, count};
    return 0;
}

static int skip(bs_sw_result *r, const uint8_t *key, size_t len, uint64_t count) {
    return push_entry(&r->skipped, &r->n_skipped, &r->cap_skipped, key, len, count);
}

/* r->top, while a merge runs: a min-heap of at most m->keep entries whose root is the one to
 * drop first -- the least count, and among equal counts the greatest key (the top ranks the
 * smaller bytes first); top_sorted then orders it best first. */
static int ranks_below(const bs_sw_skip *a, const bs_sw_skip *b) {
    if (a->count != b->count) return a->count < b->count;
    return bs_ct_key_cmp(a->key, a->len, b->key, b->len) > 0;
}

static void top_sift_down(bs_sw_skip *heap, size_t n, size_t i) {
    bs_sw_skip moving = heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && ranks_below(&heap[child + 1], &heap[child])) child++;
        if (!ranks_below(&heap[child], &moving)) break;
        heap[i] = heap[child];
        i = child;
    }
    heap[i] = moving;
}

static void top_sift_up(bs_sw_skip *heap, size_t i) {
    bs_sw_skip moving = heap[i];
    while (i > 0 && ranks_below(&moving, &heap[(i - 1) / 2])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = moving;
}

/* The heap sorted in place, best first: the root (the worst left) swapped to the end each time. */
static void top_sorted(bs_sw_result *r) {
    for (size_t n = r->n_top; n > 1; n--) {
        bs_sw_skip worst = r->top[0];
        r->top[0] = r->top[n - 1];
        r->top[n - 1] = worst;
        top_sift_down(r->top, n - 1, 0);
    }
}

/* The entry written with its new count `now`: a candidate for the top when it reaches the
 * floor, kept while it is among the best m->keep of the merge's so far. */
static int written(merger *m, int rc, const uint8_t *key, size_t len, uint64_t now) {
    if (rc || now < m->floor || m->keep == 0) return rc;
    bs_sw_result *r = m->r;
    bs_sw_skip entry = {key, len, now};
    if (r->n_top < m->keep) {
        rc = push_entry(&r->top, &r->n_top, &r->cap_top, key, len, now);
        if (rc == 0) top_sift_up(r->top, r->n_top - 1);
        return rc;
    }
    if (ranks_below(&r->top[0], &entry)) {
        r->top[0] = entry;
        top_sift_down(r->top, r->n_top, 0);
    }
    return 0;
}

/* A key the table does not hold, written with count n (flags: MDB_APPEND past its last key). */
static int put_new(merger *m, const uint8_t *key, size_t klen, uint64_t n, unsigned flags) {
    bs_sw_result *r = m->r;
    if (n > BS_SW_MAX_COUNT) {
        r->over_lo = n, r->over_hi = 0;
        return BS_SW_EOVERFLOW;
    }
    uint8_t value[8];
    MDB_val k = {klen, (void *)key}, v = {8, value};
    bs_ct_put_le(value, n, 8);
    r->new_keys++;
    r->new_bytes += klen;
    return written(m, mdb_cursor_put(m->cur, &k, &v, flags), key, klen, n);
}

/* One entry of a sorted batch, added. */
static int merge_one(merger *m, const uint8_t *key, size_t klen, uint64_t n) {
    bs_sw_result *r = m->r;
    add128(&r->total_lo, &r->total_hi, n);
    if (n == 0) return 0; /* adds nothing (the Python path writes nothing for it either) */
    if (klen == 0 || klen > m->max_key) return skip(r, key, klen, n);
    if (!m->appending && bs_ct_key_cmp(key, klen, m->last, m->last_len) > 0) m->appending = 1;
    if (m->appending) return put_new(m, key, klen, n, MDB_APPEND);
    uint8_t value[8];
    MDB_val k = {klen, (void *)key}, v = {8, value};
    MDB_val found = k, old;
    int rc = mdb_cursor_get(m->cur, &found, &old, MDB_SET_RANGE);
    if (rc == 0 && found.mv_size == klen && memcmp(found.mv_data, key, klen) == 0) {
        if (old.mv_size != 8) return BS_SW_EDAMAGED;
        uint64_t was = bs_ct_get_le(old.mv_data, 8), sum = was + n;
        if (sum < was || sum > BS_SW_MAX_COUNT) {
            r->over_lo = sum, r->over_hi = sum < was;
            return BS_SW_EOVERFLOW;
        }
        bs_ct_put_le(value, sum, 8);
        return written(m, mdb_cursor_put(m->cur, &found, &v, MDB_CURRENT), key, klen, sum);
    }
    if (rc != 0 && rc != MDB_NOTFOUND) return rc;
    return put_new(m, key, klen, n, 0);
}

/* The entries of run[0:len) added in order, their keys strictly increasing and after *prev
 * (the key added before, NULL: none; left at the last key added). */
static int add_entries(merger *m, const uint8_t *run, size_t len, const uint8_t **prev, size_t *prev_len) {
    size_t off = 0, klen;
    const uint8_t *key;
    uint64_t count;
    for (;;) {
        int more = bs_ct_next_entry(run, len, &off, &key, &klen, &count);
        if (more <= 0 || (*prev && bs_ct_key_cmp(*prev, *prev_len, key, klen) >= 0))
            return more == 0 ? 0 : BS_SW_EPACKED;
        *prev = key, *prev_len = klen;
        int rc = merge_one(m, key, klen, count);
        if (rc) return rc;
    }
}

int bs_sw_add_run(bs_sw *w, const uint8_t *run, size_t len, uint64_t floor, size_t keep, bs_sw_result *r) {
    merger m;
    int rc = merger_start(&m, w, r);
    if (rc) return rc;
    m.floor = floor;
    m.keep = keep;
    const uint8_t *prev = NULL;
    size_t prev_len = 0;
    rc = add_entries(&m, run, len, &prev, &prev_len);
    mdb_cursor_close(m.cur);
    top_sorted(r);
    return rc;
}

int bs_sw_add_runs(bs_sw *w, const bs_run *runs, size_t n, size_t threads, uint8_t *out, uint64_t floor, size_t keep,
                   bs_sw_result *r) {
    merger m;
    int rc = merger_start(&m, w, r);
    if (rc) return rc;
    m.floor = floor;
    m.keep = keep;
    bs_runs_stream *s;
    rc = bs_runs_stream_start(runs, n, threads, out, &s);
    const uint8_t *prev = NULL, *part;
    size_t prev_len = 0, len;
    while (rc == BS_CT_OK) {
        int got = bs_runs_stream_next(s, &part, &len);
        if (got != 1) {
            rc = got;
            break;
        }
        rc = add_entries(&m, part, len, &prev, &prev_len);
    }
    bs_runs_stream_end(s);
    mdb_cursor_close(m.cur);
    top_sorted(r);
    /* (the merge's own statuses in the writer's terms) */
    return rc == BS_CT_EPACKED ? BS_SW_EPACKED : rc == BS_CT_ELIMIT ? BS_SW_ELIMIT : rc == BS_CT_ENOMEM ? BS_SW_ENOMEM : rc;
}

/* -- staged chunks: msgpack [keys, counts] ------------------------------------------------ */

static uint8_t *put_be(uint8_t *out, uint64_t v, int bytes) {
    for (int k = bytes - 1; k >= 0; k--) *out++ = (uint8_t)(v >> (8 * k));
    return out;
}

static uint64_t get_be(const uint8_t *in, int bytes) {
    uint64_t v = 0;
    for (int k = 0; k < bytes; k++) v = (v << 8) | in[k];
    return v;
}

/* msgpack's smallest headers, as msgpack-python writes them. */
static uint8_t *mp_array(uint8_t *out, uint64_t n) {
    if (n < 16) {
        *out++ = (uint8_t)(0x90 | n);
        return out;
    }
    if (n < 65536) {
        *out++ = 0xdc;
        return put_be(out, n, 2);
    }
    *out++ = 0xdd;
    return put_be(out, n, 4);
}

static uint8_t *mp_bin(uint8_t *out, const uint8_t *b, size_t n) {
    if (n < 256) *out++ = 0xc4, out = put_be(out, n, 1);
    else if (n < 65536) *out++ = 0xc5, out = put_be(out, n, 2);
    else *out++ = 0xc6, out = put_be(out, n, 4);
    if (n) memcpy(out, b, n);
    return out + n;
}

static uint8_t *mp_uint(uint8_t *out, uint64_t v) {
    if (v < 128) *out++ = (uint8_t)v;
    else if (v < 256) *out++ = 0xcc, out = put_be(out, v, 1);
    else if (v < 65536) *out++ = 0xcd, out = put_be(out, v, 2);
    else if (v <= UINT32_MAX) *out++ = 0xce, out = put_be(out, v, 4);
    else *out++ = 0xcf, out = put_be(out, v, 8);
    return out;
}

static size_t array_size(uint64_t n) { return n < 16 ? 1 : n < 65536 ? 3 : 5; }
static size_t bin_size(size_t n) { return n + (n < 256 ? 2 : n < 65536 ? 3 : 5); }
static size_t uint_size(uint64_t v) { return v < 128 ? 1 : v < 256 ? 2 : v < 65536 ? 3 : v <= UINT32_MAX ? 5 : 9; }

int bs_sw_stage_run(bs_sw *w, const uint8_t *run, size_t len, size_t chunk_keys, const uint8_t *prefix,
                    size_t prefix_len, size_t *chunks) {
    int rc = check_db(w, BS_SW_META);
    if (rc) return rc;
    if (chunk_keys == 0 || prefix_len > 64) return EINVAL;
    uint8_t name[64 + 4];
    memcpy(name, prefix, prefix_len);
    size_t off = 0, number = 0;
    while (off < len) {
        /* the chunk's entries and the size of its msgpack form */
        size_t end = off, n = 0, size = 1, klen;
        const uint8_t *key;
        uint64_t count;
        while (n < chunk_keys && (rc = bs_ct_next_entry(run, len, &end, &key, &klen, &count)) == 1) {
            if (klen > UINT32_MAX) return BS_SW_EPACKED;
            size += bin_size(klen) + uint_size(count);
            n++;
        }
        if (rc < 0) return BS_SW_EPACKED;
        if (number > UINT32_MAX) return EINVAL;
        size += 2 * array_size(n);
        put_be(name + prefix_len, number, 4);
        MDB_val k = {prefix_len + 4, name}, v = {size, NULL};
        rc = mdb_put(w->txn, w->dbi[BS_SW_META], &k, &v, MDB_RESERVE);
        if (rc) return rc;
        uint8_t *out = v.mv_data;
        *out++ = 0x92;
        out = mp_array(out, n);
        size_t at = off;
        for (size_t i = 0; i < n; i++) {
            bs_ct_next_entry(run, len, &at, &key, &klen, &count);
            out = mp_bin(out, key, klen);
        }
        out = mp_array(out, n);
        at = off;
        for (size_t i = 0; i < n; i++) {
            bs_ct_next_entry(run, len, &at, &key, &klen, &count);
            out = mp_uint(out, count);
        }
        off = end;
        number++;
    }
    *chunks = number;
    return 0;
}

/* A chunk's parts: the keys' and the counts' first bytes, their number. */
typedef struct {
    const uint8_t *buf;
    size_t len, keys_at, counts_at, n;
} chunk_view;

static int read_array(const uint8_t *b, size_t len, size_t *off, size_t *n) {
    if (*off >= len) return BS_SW_EINELIGIBLE;
    uint8_t t = b[*off];
    if ((t & 0xf0) == 0x90) { *n = t & 0x0f; *off += 1; return 0; }
    int w = t == 0xdc ? 2 : t == 0xdd ? 4 : 0;
    if (!w || len - *off < (size_t)1 + w) return BS_SW_EINELIGIBLE;
    *n = (size_t)get_be(b + *off + 1, w);
    *off += 1 + w;
    return 0;
}

static int read_bin(const uint8_t *b, size_t len, size_t *off, const uint8_t **key, size_t *klen) {
    if (*off >= len) return BS_SW_EINELIGIBLE;
    uint8_t t = b[*off];
    int w = t == 0xc4 ? 1 : t == 0xc5 ? 2 : t == 0xc6 ? 4 : 0;
    if (!w || len - *off < (size_t)1 + w) return BS_SW_EINELIGIBLE;
    size_t n = (size_t)get_be(b + *off + 1, w);
    if (len - *off - 1 - w < n) return BS_SW_EINELIGIBLE;
    *key = b + *off + 1 + w;
    *klen = n;
    *off += 1 + w + n;
    return 0;
}

/* A positive integer (a negative one, or another type: ineligible). */
static int read_uint(const uint8_t *b, size_t len, size_t *off, uint64_t *v) {
    if (*off >= len) return BS_SW_EINELIGIBLE;
    uint8_t t = b[*off];
    if (t < 0x80) { *v = t; *off += 1; return 0; }
    int w = t == 0xcc ? 1 : t == 0xcd ? 2 : t == 0xce ? 4 : t == 0xcf ? 8 : 0;
    if (!w || len - *off < (size_t)1 + w) return BS_SW_EINELIGIBLE;
    *v = get_be(b + *off + 1, w);
    *off += 1 + w;
    return 0;
}

/* Checks the whole chunk before anything is written. */
static int view_chunk(const uint8_t *b, size_t len, chunk_view *c) {
    size_t off = 1, n, m;
    if (len < 1 || b[0] != 0x92) return BS_SW_EINELIGIBLE;
    if (read_array(b, len, &off, &n)) return BS_SW_EINELIGIBLE;
    c->buf = b, c->len = len, c->keys_at = off, c->n = n;
    const uint8_t *key, *prev = NULL;
    size_t klen, prev_len = 0;
    for (size_t i = 0; i < n; i++) {
        if (read_bin(b, len, &off, &key, &klen)) return BS_SW_EINELIGIBLE;
        if (prev && bs_ct_key_cmp(prev, prev_len, key, klen) >= 0) return BS_SW_EINELIGIBLE;
        prev = key, prev_len = klen;
    }
    if (read_array(b, len, &off, &m) || m != n) return BS_SW_EINELIGIBLE;
    c->counts_at = off;
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        if (read_uint(b, len, &off, &v) || v == 0) return BS_SW_EINELIGIBLE;
    }
    return off == len ? 0 : BS_SW_EINELIGIBLE;
}

int bs_sw_add_chunk(bs_sw *w, const uint8_t *chunk, size_t len, uint64_t floor, size_t keep, bs_sw_result *r) {
    chunk_view c;
    memset(r, 0, sizeof *r);
    int rc = view_chunk(chunk, len, &c);
    if (rc) return rc;
    merger m;
    rc = merger_start(&m, w, r);
    if (rc) return rc;
    m.floor = floor;
    m.keep = keep;
    size_t koff = c.keys_at, coff = c.counts_at, klen;
    const uint8_t *key;
    uint64_t count;
    for (size_t i = 0; i < c.n && rc == 0; i++) {
        read_bin(chunk, len, &koff, &key, &klen);
        read_uint(chunk, len, &coff, &count);
        rc = merge_one(&m, key, klen, count);
    }
    mdb_cursor_close(m.cur);
    top_sorted(r);
    return rc;
}

const char *bs_sw_strerror(int rc) {
    switch (rc) {
    case BS_SW_EPACKED: return "a run of counts is malformed or not in increasing key order";
    case BS_SW_EOVERFLOW: return "a count would pass 2**63-1";
    case BS_SW_EDAMAGED: return "a count is not 8 bytes";
    case BS_SW_ENOMEM: return "out of memory";
    case BS_SW_EINELIGIBLE: return "a staged chunk this writer does not add";
    case BS_SW_ENOTXN: return "no write transaction is open (or one already is)";
    case BS_SW_ELIMIT: return "the runs' counts of a pretoken sum past 2**64-1 (or there are too many runs)";
    default: return mdb_strerror(rc);
    }
}

/*
 * runs.c -- sorted runs of counts (runs.h): packing a table in key order, the k-way merge of
 * runs through a binary heap of cursors, one per run, and that merge split by key ranges
 * over several threads.
 */
#include "runs.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int bs_runs_pack_sorted(const bs_counttable *t, uint8_t *out) {
    size_t n = bs_ct_len(t);
    if (n == 0) return BS_CT_OK;
    if (n > SIZE_MAX / sizeof(uint32_t)) return BS_CT_ENOMEM;
    uint32_t *order = malloc(n * sizeof *order);
    if (!order) return BS_CT_ENOMEM;
    int rc = bs_ct_sorted(t, order);
    if (rc != BS_CT_OK) {
        free(order);
        return rc;
    }
    /* the entries are read in key order, at random: each is prefetched 16 ahead, its key
     * (found through the entry, by then cached) 8 ahead -- as CountTable.sorted_items does */
    for (size_t i = 0; i < n; i++) {
        const uint8_t *key;
        size_t len;
        uint64_t count;
        if (i + 16 < n) bs_ct_prefetch(t, order[i + 16], 0);
        if (i + 8 < n) bs_ct_prefetch(t, order[i + 8], 1);
        bs_ct_entry(t, order[i], &key, &len, &count);
        out = bs_ct_put_entry(out, key, len, count);
    }
    free(order);
    return BS_CT_OK;
}

/* One run being read (buf[0:size), the next entry at off): its current entry (key, len,
 * count) and the key's first 8 bytes as a big-endian number (zero-padded: comparing heads
 * orders keys unless the heads are equal). */
typedef struct {
    const uint8_t *buf, *key;
    size_t size, off, len;
    uint64_t count, head;
} cursor;

static inline uint64_t head_of(const uint8_t *key, size_t len) {
    uint64_t h = 0;
    size_t n = len < 8 ? len : 8;
    for (size_t k = 0; k < n; k++) h |= (uint64_t)key[k] << (56 - 8 * k);
    return h;
}

/* Moves c to its next entry: 1, 0 at the run's end, BS_CT_EPACKED if the entry does not
 * parse or its key is not greater than the one before. */
static int cursor_next(cursor *c, int first) {
    const uint8_t *key;
    size_t len;
    uint64_t count;
    int got = bs_ct_next_entry(c->buf, c->size, &c->off, &key, &len, &count);
    if (got <= 0) return got;
    uint64_t head = head_of(key, len);
    if (!first && (head < c->head || (head == c->head && bs_ct_key_cmp(c->key, c->len, key, len) >= 0)))
        return BS_CT_EPACKED;
    c->key = key;
    c->len = len;
    c->count = count;
    c->head = head;
    return 1;
}

static inline int cursor_less(const cursor *a, const cursor *b) {
    if (a->head != b->head) return a->head < b->head;
    return bs_ct_key_cmp(a->key, a->len, b->key, b->len) < 0;
}

/* heap[0:n) of cursor indexes: restores the order below position i */
static void sift_down(const cursor *cur, uint32_t *heap, size_t n, size_t i) {
    uint32_t top = heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && cursor_less(&cur[heap[child + 1]], &cur[heap[child]])) child++;
        if (!cursor_less(&cur[heap[child]], &cur[top])) break;
        heap[i] = heap[child];
        i = child;
    }
    heap[i] = top;
}

int bs_runs_merge(const bs_run *runs, size_t n, bs_runs_emit emit, void *ctx) {
    if (n > BS_RUNS_MAX) return BS_CT_ELIMIT;
    if (n == 0) return BS_CT_OK;
    cursor *cur = malloc(n * sizeof *cur);
    uint32_t *heap = malloc(n * sizeof *heap);
    int rc = BS_CT_OK;
    if (!cur || !heap) {
        rc = BS_CT_ENOMEM;
        goto done;
    }
    size_t live = 0;
    for (size_t i = 0; i < n; i++) {
        cur[i] = (cursor){.buf = runs[i].buf, .size = runs[i].len};
        int got = cursor_next(&cur[i], 1);
        if (got < 0) {
            rc = got;
            goto done;
        }
        if (got) heap[live++] = (uint32_t)i;
    }
    for (size_t i = live / 2; i-- > 0;) sift_down(cur, heap, live, i);
    while (live) {
        /* the smallest key, and every run's entry equal to it, summed */
        cursor *c = &cur[heap[0]];
        const uint8_t *key = c->key;
        size_t len = c->len;
        uint64_t head = c->head, sum = 0;
        do {
            if (c->count > UINT64_MAX - sum) {
                rc = BS_CT_ELIMIT;
                goto done;
            }
            sum += c->count;
            int got = cursor_next(c, 0);
            if (got < 0) {
                rc = got;
                goto done;
            }
            if (!got) heap[0] = heap[--live];
            if (live) sift_down(cur, heap, live, 0);
            c = &cur[heap[0]];
        } while (live && c->head == head && bs_ct_key_cmp(c->key, c->len, key, len) == 0);
        if ((rc = emit(ctx, key, len, sum)) != 0) goto done;
    }
done:
    free(cur);
    free(heap);
    return rc;
}

typedef struct {
    uint8_t *out;
    size_t entries;
} packed_out;

static int emit_packed(void *ctx, const uint8_t *key, size_t len, uint64_t count) {
    packed_out *o = ctx;
    o->out = bs_ct_put_entry(o->out, key, len, count);
    o->entries++;
    return 0;
}

int bs_runs_merge_packed(const bs_run *runs, size_t n, uint8_t *out, size_t *out_len, size_t *entries) {
    packed_out o = {out, 0};
    int rc = bs_runs_merge(runs, n, emit_packed, &o);
    *out_len = (size_t)(o.out - out);
    if (entries) *entries = o.entries;
    return rc;
}

/* -- the merge on several threads ------------------------------------------------------------
 *
 * The key space is cut at pivots (keys of the largest run, evenly spaced among its entries);
 * each run is cut at the first entry >= each pivot, found by binary search in an index of
 * every SAMPLE_EVERY-th entry's offset and a short walk; the parts -- one key range across
 * every run, so a key found in several runs falls in one part -- are merged concurrently,
 * each into its own stretch of `out` (a part's merge is no longer than its input), and the
 * stretches moved together in order.  The runs are indexed concurrently too.
 *
 * Order is checked without a pass of its own: the pivots must increase (else: one thread);
 * then, whatever a run holds, the binary search (monotone in the key sought) and the walk
 * give cuts that do not decrease, and the entries on either side of a cut are x < pivot <= y;
 * every other pair of neighbours is inside one part, whose merge checks it.  Any failure -- a
 * run that does not parse or is out of order, a sum past 2**64-1, memory -- sends the whole
 * merge to the one-thread path, whose result and error are then exactly
 * bs_runs_merge_packed's. */

#define SAMPLE_EVERY 32          /* entries between two offsets the index of a run keeps */
#define MAX_SLICES (1u << 20)    /* parts times runs at most: the cuts' arrays stay under 25 MB */
#define THREAD_STACK (256 << 10) /* the jobs keep what they need on the heap */

/* fn(jobs + i * size) for i in [0, count): job 0 on this thread, the others on threads of their
 * own (one that cannot start runs here, after). */
static void on_threads(void *(*fn)(void *), void *jobs, size_t size, size_t count) {
    pthread_t *tid = malloc(count * sizeof *tid);
    char *started = calloc(count ? count : 1, 1);
    pthread_attr_t attr;
    int have_attr = pthread_attr_init(&attr) == 0;
    if (have_attr) pthread_attr_setstacksize(&attr, THREAD_STACK);
    for (size_t i = 1; i < count && tid && started; i++)
        started[i] = pthread_create(&tid[i], have_attr ? &attr : NULL, fn, (char *)jobs + i * size) == 0;
    if (count) fn(jobs);
    for (size_t i = 1; i < count; i++) {
        if (tid && started && started[i]) pthread_join(tid[i], NULL);
        else fn((char *)jobs + i * size);
    }
    if (have_attr) pthread_attr_destroy(&attr);
    free(tid);
    free(started);
}

typedef struct {
    size_t *at; /* the offsets of entries 0, SAMPLE_EVERY, 2 * SAMPLE_EVERY, ... */
    size_t n_at, entries;
} run_index;

/* The index of a run: BS_CT_EPACKED for one that does not parse. */
static int index_run(const bs_run *r, run_index *ix) {
    size_t cap = 0, off = 0, here = 0, klen;
    const uint8_t *key;
    uint64_t count;
    int got;
    while ((got = bs_ct_next_entry(r->buf, r->len, &off, &key, &klen, &count)) == 1) {
        if (ix->entries % SAMPLE_EVERY == 0) {
            if (ix->n_at == cap) {
                size_t grown = cap ? 2 * cap : 64;
                size_t *at = grown <= SIZE_MAX / sizeof *at ? realloc(ix->at, grown * sizeof *at) : NULL;
                if (!at) return BS_CT_ENOMEM;
                ix->at = at, cap = grown;
            }
            ix->at[ix->n_at++] = here;
        }
        ix->entries++;
        here = off;
    }
    return got;
}

/* One thread's share of the indexing: runs first, first + step, ... */
typedef struct {
    const bs_run *runs;
    run_index *ix;
    size_t n, first, step;
    int rc;
} index_job;

static void *index_share(void *arg) {
    index_job *j = arg;
    j->rc = BS_CT_OK;
    for (size_t i = j->first; i < j->n && j->rc == BS_CT_OK; i += j->step) j->rc = index_run(&j->runs[i], &j->ix[i]);
    return NULL;
}

static int index_runs(const bs_run *runs, size_t n, run_index *ix, size_t threads) {
    size_t shares = threads < n ? threads : n;
    index_job *jobs = malloc(shares * sizeof *jobs);
    if (!jobs) return BS_CT_ENOMEM;
    for (size_t t = 0; t < shares; t++) jobs[t] = (index_job){runs, ix, n, t, shares, BS_CT_OK};
    on_threads(index_share, jobs, sizeof *jobs, shares);
    int rc = BS_CT_OK;
    for (size_t t = 0; t < shares && rc == BS_CT_OK; t++) rc = jobs[t].rc;
    free(jobs);
    return rc;
}

/* The key of the entry at off (an offset index_run kept: it parses). */
static const uint8_t *key_at(const bs_run *r, size_t off, size_t *klen) {
    const uint8_t *key = NULL;
    uint64_t count;
    *klen = 0;
    bs_ct_next_entry(r->buf, r->len, &off, &key, klen, &count);
    return key;
}

/* The key of entry k (< ix->entries) of run r: from the sample before it, a short walk. */
static const uint8_t *key_of_entry(const bs_run *r, const run_index *ix, size_t k, size_t *klen) {
    size_t off = ix->at[k / SAMPLE_EVERY];
    const uint8_t *key = NULL;
    uint64_t count;
    for (size_t skip = k % SAMPLE_EVERY; skip > 0; skip--) bs_ct_next_entry(r->buf, r->len, &off, &key, klen, &count);
    return key_at(r, off, klen);
}

/* The offset of the first entry of run r whose key is >= p, in a run in increasing order (in
 * another: a cut that does not decrease as p grows, after an entry < p); r->len: none. */
static size_t lower_bound(const bs_run *r, const run_index *ix, const uint8_t *p, size_t plen) {
    size_t lo = 0, hi = ix->n_at, klen;
    while (lo < hi) { /* lo: the samples whose keys are < p */
        size_t mid = lo + (hi - lo) / 2;
        const uint8_t *key = key_at(r, ix->at[mid], &klen);
        if (bs_ct_key_cmp(key, klen, p, plen) < 0) lo = mid + 1;
        else hi = mid;
    }
    size_t off = lo ? ix->at[lo - 1] : 0, here = off;
    const uint8_t *key = NULL;
    uint64_t count;
    klen = 0;
    while (bs_ct_next_entry(r->buf, r->len, &off, &key, &klen, &count) == 1) {
        if (bs_ct_key_cmp(key, klen, p, plen) >= 0) return here;
        here = off;
    }
    return r->len;
}

/* The cuts: cut[p * n + i] the offset in run i where part p begins (part 0 at 0; cut[parts * n
 * + i] the run's end); the pivots are the keys of the run with most entries that split it
 * evenly (fewer parts when it has fewer entries).  Returns the parts; 0 when the pivots do
 * not increase (that run is out of order). */
static size_t cut_runs(const bs_run *runs, size_t n, const run_index *ix, size_t parts, size_t *cut) {
    size_t big = 0, made = 1, last = 0, last_len = 0;
    const uint8_t *last_pivot = NULL;
    for (size_t i = 1; i < n; i++)
        if (ix[i].entries > ix[big].entries) big = i;
    for (size_t i = 0; i < n; i++) cut[i] = 0;
    for (size_t p = 1; p < parts; p++) {
        size_t k = p * ix[big].entries / parts, plen; /* (parts <= 256: no overflow below 2**56 entries) */
        if (k == 0 || k == last) continue;            /* (none at the start, none twice) */
        last = k;
        const uint8_t *pivot = key_of_entry(&runs[big], &ix[big], k, &plen);
        if (last_pivot && bs_ct_key_cmp(last_pivot, last_len, pivot, plen) >= 0) return 0;
        last_pivot = pivot, last_len = plen;
        for (size_t i = 0; i < n; i++) cut[made * n + i] = lower_bound(&runs[i], &ix[i], pivot, plen);
        made++;
    }
    for (size_t i = 0; i < n; i++) cut[made * n + i] = runs[i].len;
    return made;
}

typedef struct {
    bs_run *slices; /* the part of each run */
    size_t n;
    uint8_t *out;   /* its stretch of the output */
    size_t out_len, entries;
    int rc;
} part_job;

static void *merge_part(void *arg) {
    part_job *j = arg;
    j->rc = bs_runs_merge_packed(j->slices, j->n, j->out, &j->out_len, &j->entries);
    return NULL;
}

/* The parts' stretches of out moved together, in order. */
static void join_parts(const part_job *jobs, size_t parts, uint8_t *out, size_t *out_len, size_t *entries) {
    size_t len = 0, count = 0;
    for (size_t p = 0; p < parts; p++) {
        if (jobs[p].out != out + len) memmove(out + len, jobs[p].out, jobs[p].out_len);
        len += jobs[p].out_len;
        count += jobs[p].entries;
    }
    *out_len = len;
    if (entries) *entries = count;
}

/* The runs (indexed) cut into parts and merged concurrently; 0, or an error (out then undefined). */
static int merge_cut(const bs_run *runs, size_t n, const run_index *ix, size_t threads, uint8_t *out,
                     size_t *out_len, size_t *entries) {
    size_t *cut = malloc((threads + 1) * n * sizeof *cut);
    bs_run *slices = malloc(threads * n * sizeof *slices);
    part_job *jobs = calloc(threads, sizeof *jobs);
    size_t parts = cut && slices && jobs ? cut_runs(runs, n, ix, threads, cut) : 0;
    int rc = parts ? BS_CT_OK : BS_CT_EPACKED; /* (or out of memory: either way, one thread) */
    for (size_t p = 0, base = 0; p < parts; p++) {
        jobs[p] = (part_job){.slices = slices + p * n, .n = n, .out = out + base};
        for (size_t i = 0; i < n; i++) {
            size_t from = cut[p * n + i], to = cut[(p + 1) * n + i];
            slices[p * n + i] = (bs_run){runs[i].buf + from, to - from};
            base += to - from;
        }
    }
    if (parts) on_threads(merge_part, jobs, sizeof *jobs, parts);
    for (size_t p = 0; p < parts && rc == BS_CT_OK; p++) rc = jobs[p].rc;
    if (parts && rc == BS_CT_OK) join_parts(jobs, parts, out, out_len, entries);
    free(cut);
    free(slices);
    free(jobs);
    return rc;
}

int bs_runs_merge_packed_threads(const bs_run *runs, size_t n, size_t threads, uint8_t *out, size_t *out_len,
                                 size_t *entries) {
    if (threads > BS_RUNS_THREADS_MAX) threads = BS_RUNS_THREADS_MAX;
    if (n > 0 && threads > MAX_SLICES / n) threads = MAX_SLICES / n; /* (many runs: fewer parts) */
    if (threads < 2 || n == 0 || n > BS_RUNS_MAX) return bs_runs_merge_packed(runs, n, out, out_len, entries);
    run_index *ix = calloc(n, sizeof *ix);
    int rc = ix ? index_runs(runs, n, ix, threads) : BS_CT_ENOMEM;
    if (rc == BS_CT_OK) rc = merge_cut(runs, n, ix, threads, out, out_len, entries);
    for (size_t i = 0; ix && i < n; i++) free(ix[i].at);
    free(ix);
    /* any failure: the one-thread merge, for its result or its error exactly */
    return rc == BS_CT_OK ? rc : bs_runs_merge_packed(runs, n, out, out_len, entries);
}

/* -- the merge handed over part by part (bs_runs_stream) ---------------------------------- */

struct bs_runs_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    part_job *jobs;      /* the parts, in key order; jobs[p].rc once done[p] */
    char *done;
    size_t parts, next_job, next_out, n_threads;
    int stop;            /* bs_runs_stream_end: no part is started after it */
    pthread_t *tid;
    size_t *cut;
    bs_run *slices;
};

/* A helper thread: the parts not yet taken, in order, each merged into its stretch of out. */
static void *stream_worker(void *arg) {
    bs_runs_stream *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        size_t p = s->stop ? s->parts : s->next_job;
        if (p < s->parts) s->next_job++;
        pthread_mutex_unlock(&s->mu);
        if (p >= s->parts) return NULL;
        merge_part(&s->jobs[p]);
        pthread_mutex_lock(&s->mu);
        s->done[p] = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* The parts of the stream: the runs cut as the threaded merge cuts them (STREAM_PARTS of about
 * equal size, so the first is ready soon), or one part, all of each run, when they cannot be
 * (few entries, pivots out of order: that part's merge then finds the fault). */
#define STREAM_PARTS 64u
static int stream_cut(bs_runs_stream *s, const bs_run *runs, size_t n, size_t threads, uint8_t *out) {
    size_t want = STREAM_PARTS;
    if (n > 0 && want > MAX_SLICES / n) want = MAX_SLICES / n ? MAX_SLICES / n : 1;
    s->cut = malloc((want + 1) * (n ? n : 1) * sizeof *s->cut);
    s->slices = malloc(want * (n ? n : 1) * sizeof *s->slices);
    s->jobs = calloc(want, sizeof *s->jobs);
    s->done = calloc(want, 1);
    if (!s->cut || !s->slices || !s->jobs || !s->done) return BS_CT_ENOMEM;
    size_t parts = 0;
    if (want > 1 && n > 1) {
        run_index *ix = calloc(n, sizeof *ix);
        if (!ix) return BS_CT_ENOMEM;
        int rc = index_runs(runs, n, ix, threads);
        if (rc == BS_CT_OK) parts = cut_runs(runs, n, ix, want, s->cut);
        for (size_t i = 0; i < n; i++) free(ix[i].at);
        free(ix);
        if (rc == BS_CT_ENOMEM) return rc;
    }
    if (parts == 0) { /* one part: every run whole */
        parts = 1;
        for (size_t i = 0; i < n; i++) s->cut[i] = 0, s->cut[n + i] = runs[i].len;
    }
    for (size_t p = 0, base = 0; p < parts; p++) {
        s->jobs[p] = (part_job){.slices = s->slices + p * n, .n = n, .out = out + base};
        for (size_t i = 0; i < n; i++) {
            size_t from = s->cut[p * n + i], to = s->cut[(p + 1) * n + i];
            s->slices[p * n + i] = (bs_run){runs[i].buf + from, to - from};
            base += to - from;
        }
    }
    s->parts = parts;
    return BS_CT_OK;
}

int bs_runs_stream_start(const bs_run *runs, size_t n, size_t threads, uint8_t *out, bs_runs_stream **out_s) {
    *out_s = NULL;
    if (n > BS_RUNS_MAX) return BS_CT_ELIMIT;
    if (threads < 1) threads = 1;
    if (threads > BS_RUNS_THREADS_MAX) threads = BS_RUNS_THREADS_MAX;
    bs_runs_stream *s = calloc(1, sizeof *s);
    if (!s) return BS_CT_ENOMEM;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return BS_CT_ENOMEM;
    }
    if (pthread_cond_init(&s->cv, NULL) != 0) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return BS_CT_ENOMEM;
    }
    int rc = stream_cut(s, runs, n, threads, out);
    if (rc == BS_CT_OK && (s->tid = malloc(threads * sizeof *s->tid)) == NULL) rc = BS_CT_ENOMEM;
    if (rc != BS_CT_OK) {
        bs_runs_stream_end(s);
        return rc;
    }
    pthread_attr_t attr;
    int have_attr = pthread_attr_init(&attr) == 0;
    if (have_attr) pthread_attr_setstacksize(&attr, THREAD_STACK);
    /* (none started: bs_runs_stream_next merges each part itself) */
    while (s->n_threads < threads && pthread_create(&s->tid[s->n_threads], have_attr ? &attr : NULL, stream_worker, s) == 0)
        s->n_threads++;
    if (have_attr) pthread_attr_destroy(&attr);
    *out_s = s;
    return BS_CT_OK;
}

int bs_runs_stream_next(bs_runs_stream *s, const uint8_t **part, size_t *len) {
    if (s->next_out >= s->parts) return 0;
    size_t p = s->next_out++;
    if (s->n_threads == 0) {
        merge_part(&s->jobs[p]);
    } else {
        pthread_mutex_lock(&s->mu);
        while (!s->done[p]) pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
    }
    if (s->jobs[p].rc != BS_CT_OK) return s->jobs[p].rc;
    *part = s->jobs[p].out;
    *len = s->jobs[p].out_len;
    return 1;
}

void bs_runs_stream_end(bs_runs_stream *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    for (size_t t = 0; t < s->n_threads; t++) pthread_join(s->tid[t], NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->tid);
    free(s->cut);
    free(s->slices);
    free(s->jobs);
    free(s->done);
    free(s);
}

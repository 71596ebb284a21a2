/*
 * runs.c -- sorted runs of counts (runs.h): packing a table in key order, and the k-way
 * merge of runs through a binary heap of cursors, one per run.
 */
#include "runs.h"

#include <stdlib.h>
#include <string.h>

/* bytes order: memcmp over the shorter length, then the shorter first */
static inline int key_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) return c;
    return alen < blen ? -1 : alen > blen;
}

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
    if (!first && (head < c->head || (head == c->head && key_cmp(c->key, c->len, key, len) >= 0)))
        return BS_CT_EPACKED;
    c->key = key;
    c->len = len;
    c->count = count;
    c->head = head;
    return 1;
}

static inline int cursor_less(const cursor *a, const cursor *b) {
    if (a->head != b->head) return a->head < b->head;
    return key_cmp(a->key, a->len, b->key, b->len) < 0;
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
        } while (live && c->head == head && key_cmp(c->key, c->len, key, len) == 0);
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

/* encoder.c: rank-ordered BPE of one pretoken (see encoder.h). */
#include "encoder.h"

#define EMPTY_KEY 0xFFFFFFFFFFFFFFFFull
#define SHORT_PRETOKEN 32 /* symbols; longer pretokens are merged with the heap */

typedef struct {
    uint64_t key;
    uint32_t rank, id;
} RankSlot;

struct Encoder {
    RankSlot *ranks; /* open addressing, at most half full */
    uint64_t mask, n_merges, added;
    uint32_t byte_ids[256];
    int64_t marker; /* -1: none */
    /* scratch */
    uint32_t *sym, *nxt, *prv;
    uint64_t *heap; /* (rank << 32) | pos */
    size_t cap;
};

Encoder *encoder_new(const uint32_t byte_ids[256], int64_t marker, uint64_t n_merges, int *status) {
    /* ranks are uint32, and the positions of a pretoken too */
    if (n_merges > bs_limit32 || marker > (int64_t)bs_limit32) { *status = BS_TOO_LARGE; return NULL; }
    Encoder *e = (Encoder *)calloc(1, sizeof(Encoder));
    if (!e) { *status = BS_NO_MEMORY; return NULL; }
    uint64_t size = 16;
    while (size < n_merges * 2 + 16) size *= 2;
    e->ranks = (RankSlot *)bs_realloc_n(NULL, size, sizeof(RankSlot));
    if (!e->ranks) { free(e); *status = BS_NO_MEMORY; return NULL; }
    for (uint64_t i = 0; i < size; i++) e->ranks[i].key = EMPTY_KEY;
    e->mask = size - 1;
    e->n_merges = n_merges;
    memcpy(e->byte_ids, byte_ids, sizeof(e->byte_ids));
    e->marker = marker;
    *status = BS_OK;
    return e;
}

Encoder *encoder_clone(const Encoder *src, int *status) {
    Encoder *e = (Encoder *)calloc(1, sizeof(Encoder));
    if (e) e->ranks = (RankSlot *)bs_realloc_n(NULL, src->mask + 1, sizeof(RankSlot));
    if (!e || !e->ranks) {
        free(e);
        *status = BS_NO_MEMORY;
        return NULL;
    }
    memcpy(e->ranks, src->ranks, (src->mask + 1) * sizeof(RankSlot));
    e->mask = src->mask, e->n_merges = src->n_merges, e->added = src->added, e->marker = src->marker;
    memcpy(e->byte_ids, src->byte_ids, sizeof(e->byte_ids));
    *status = BS_OK; /* (the scratch is its own, grown on first use) */
    return e;
}

void encoder_free(Encoder *e) {
    if (!e) return;
    free(e->ranks); free(e->sym); free(e->nxt); free(e->prv); free(e->heap);
    free(e);
}

int encoder_add_merge(Encoder *e, uint32_t a, uint32_t b, uint32_t z) {
    if (e->added >= e->n_merges) return BS_OUT_OF_ORDER; /* more than the table was made for */
    uint32_t rank = (uint32_t)e->added++;
    uint64_t key = ((uint64_t)a << 32) | b;
    uint64_t h = hash64(key) & e->mask;
    while (e->ranks[h].key != EMPTY_KEY && e->ranks[h].key != key) h = (h + 1) & e->mask;
    if (e->ranks[h].key == key) return BS_OK; /* the first merge of a pair wins */
    e->ranks[h].key = key;
    e->ranks[h].rank = rank;
    e->ranks[h].id = z;
    return BS_OK;
}

static inline const RankSlot *rank_find(const Encoder *e, uint64_t key) {
    uint64_t h = hash64(key) & e->mask;
    for (;;) {
        const RankSlot *slot = &e->ranks[h];
        if (slot->key == EMPTY_KEY) return NULL;
        if (slot->key == key) return slot;
        h = (h + 1) & e->mask;
    }
}

static int ensure_scratch(Encoder *e, size_t n) {
    if (n <= e->cap) return BS_OK;
    size_t cap = e->cap ? e->cap : 64;
    while (cap < n) cap *= 2;
    uint32_t *a = (uint32_t *)bs_realloc_n(e->sym, cap, 4);
    if (!a) return BS_NO_MEMORY;
    e->sym = a;
    a = (uint32_t *)bs_realloc_n(e->nxt, cap, 4);
    if (!a) return BS_NO_MEMORY;
    e->nxt = a;
    a = (uint32_t *)bs_realloc_n(e->prv, cap, 4);
    if (!a) return BS_NO_MEMORY;
    e->prv = a;
    uint64_t *h = (uint64_t *)bs_realloc_n(e->heap, (uint64_t)cap * 3 + 8, 8); /* n initial pairs + 2 per merge */
    if (!h) return BS_NO_MEMORY;
    e->heap = h;
    e->cap = cap;
    return BS_OK;
}

static inline void mh_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static inline uint64_t mh_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= *n) break;
        size_t c = (l + 1 < *n && h[l + 1] < h[l]) ? l + 1 : l;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

/* A pair's merge packed as (rank << 32) | new id, or NO_MERGE. */
#define NO_MERGE 0xFFFFFFFFFFFFFFFFull

static inline uint64_t merge_of(const Encoder *e, uint32_t a, uint32_t b) {
    const RankSlot *r = rank_find(e, ((uint64_t)a << 32) | b);
    return r ? ((uint64_t)r->rank << 32) | r->id : NO_MERGE;
}

/* The merges of a short pretoken's symbols sym[0:len) in place; returns how many are left.
 * The same order as the heap's (the lowest rank, the leftmost among equal ones) found by a
 * scan of the pairs, which for a few symbols costs less than a heap and its stale entries. */
static size_t merge_short(const Encoder *e, uint32_t *sym, size_t len) {
    uint64_t pair[SHORT_PRETOKEN]; /* pair[i]: the merge of sym[i], sym[i + 1] */
    for (size_t i = 0; i + 1 < len; i++) pair[i] = merge_of(e, sym[i], sym[i + 1]);
    while (len > 1) {
        size_t at = 0;
        for (size_t i = 1; i + 1 < len; i++)
            if (pair[i] >> 32 < pair[at] >> 32) at = i;
        if (pair[at] == NO_MERGE) break;
        sym[at] = (uint32_t)pair[at];
        for (size_t i = at + 1; i + 1 < len; i++) sym[i] = sym[i + 1]; /* sym[at + 1] merged away */
        for (size_t i = at + 1; i + 2 < len; i++) pair[i] = pair[i + 1];
        len--;
        if (at > 0) pair[at - 1] = merge_of(e, sym[at - 1], sym[at]);
        if (at + 1 < len) pair[at] = merge_of(e, sym[at], sym[at + 1]);
    }
    return len;
}

int encoder_encode(Encoder *e, const uint8_t *data, size_t n, const uint32_t **ids, size_t *n_ids) {
    size_t len = n + (e->marker >= 0 ? 1 : 0);
    if ((uint64_t)len > bs_limit32) return BS_TOO_LARGE; /* positions are uint32 below BS_NONE */
    int rc = ensure_scratch(e, len + 1);
    if (rc) return rc;
    uint32_t *sym = e->sym, *nxt = e->nxt, *prv = e->prv;
    for (size_t i = 0; i < n; i++) sym[i] = e->byte_ids[data[i]];
    if (e->marker >= 0) sym[n] = (uint32_t)e->marker;
    *ids = sym;
    if (len <= SHORT_PRETOKEN) {
        *n_ids = merge_short(e, sym, len);
        return BS_OK;
    }
    size_t hn = 0;
    for (size_t i = 0; i < len; i++) {
        nxt[i] = i + 1 < len ? (uint32_t)(i + 1) : BS_NONE;
        prv[i] = i ? (uint32_t)(i - 1) : BS_NONE;
        if (i + 1 < len) {
            const RankSlot *r = rank_find(e, ((uint64_t)sym[i] << 32) | sym[i + 1]);
            if (r) mh_push(e->heap, &hn, ((uint64_t)r->rank << 32) | i);
        }
    }
    while (hn) {
        uint64_t top = mh_pop(e->heap, &hn);
        uint32_t rank = (uint32_t)(top >> 32), i = (uint32_t)(top & 0xFFFFFFFFu);
        if (sym[i] == BS_DEAD) continue;
        uint32_t j = nxt[i];
        if (j == BS_NONE) continue;
        const RankSlot *r = rank_find(e, ((uint64_t)sym[i] << 32) | sym[j]);
        if (!r || r->rank != rank) continue; /* stale: the pair here changed */
        sym[i] = r->id;
        sym[j] = BS_DEAD;
        uint32_t k = nxt[j];
        nxt[i] = k;
        if (k != BS_NONE) prv[k] = i;
        uint32_t p = prv[i];
        if (p != BS_NONE) {
            const RankSlot *rp = rank_find(e, ((uint64_t)sym[p] << 32) | sym[i]);
            if (rp) mh_push(e->heap, &hn, ((uint64_t)rp->rank << 32) | p);
        }
        if (k != BS_NONE) {
            const RankSlot *rk = rank_find(e, ((uint64_t)sym[i] << 32) | sym[k]);
            if (rk) mh_push(e->heap, &hn, ((uint64_t)rk->rank << 32) | i);
        }
    }
    /* the live symbols to the front, in order (a write never passes the read) */
    size_t m = 0;
    for (size_t i = 0; len && i != BS_NONE; i = nxt[i]) sym[m++] = sym[i];
    *n_ids = m;
    return BS_OK;
}

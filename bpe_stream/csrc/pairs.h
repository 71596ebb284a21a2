/*
 * pairs.h: the pairs of symbols and their order, for the merge loop (merge_loop.c).
 *
 * Each pair has a 32-byte record: its count (weighted by word frequency, 64-bit) and the
 * list of where it occurs (positions; two held in place, more allocated).  Entries of that list may be stale (the pair is no longer
 * there): a merge checks each one and skips those.  The pair table maps a pair to its
 * record; the tokens' bytes are kept for the tie-break.
 *
 * Priority: a binary heap of (count, pair) entries, best first: the highest count, then
 * the tie-break rule (layout.h).  Counts of existing pairs only fall (only pairs with the
 * new token are born), so invalidation is lazy: a popped entry whose count is stale is
 * pushed back with the current count.  Rare pairs wait in a cold list outside the heap
 * (see pairs_offer in pairs.c).
 *
 * The lookups and list appends that run once per position are inline here; growth, the
 * heap and the cold list are in pairs.c.
 */
#ifndef BPE_STREAM_PAIRS_H
#define BPE_STREAM_PAIRS_H

#include "common.h"

/* A pair's record, 32 bytes: there are millions of pairs, most of them rare.  Its list of
 * occurrences holds up to INLINE_OCC items in place -- no allocation for the many pairs
 * seen once or twice -- and beyond that lives in an allocation whose first item is its
 * capacity. */
#define INLINE_OCC 2u
typedef struct {
    uint64_t key; /* (left << 32) | right */
    int64_t count;
    union {
        uint32_t inl[INLINE_OCC];
        uint32_t *ext; /* ext[0]: capacity; items from ext[1] */
    } occ;
    uint32_t n_occ;
    uint32_t pushed_at; /* the merge (1-based) after which it was last pushed as a new pair */
} PairRec;

/* A list taken out of its record (see occ_take). */
typedef struct {
    uint32_t *items, *owned;
    uint32_t len;
    uint32_t inl[INLINE_OCC];
} OccList;

typedef struct {
    int64_t count;
    uint64_t key; /* the pair, so comparisons stay inside the heap array */
    uint32_t rec;
} HeapEntry;

typedef struct {
    uint8_t *data;
    uint32_t len;
} Token;

typedef struct {
    PairRec *recs;
    uint32_t n_recs, cap_recs;
    uint64_t *table; /* open addressing, see pair_get */
    uint64_t table_mask;
    /* the heap, and the cold pairs kept out of it (see pairs_offer) */
    HeapEntry *heap;
    uint64_t heap_len, heap_cap;
    uint32_t *cold;
    uint64_t n_cold, cap_cold;
    int64_t cold_below;
    /* tokens: ids 0..n_tokens-1 */
    Token *tokens;
    uint32_t n_tokens, cap_tokens;
    int tie_break;
} PairSet;

static inline uint64_t pair_key(uint32_t left, uint32_t right) { return ((uint64_t)left << 32) | right; }
static inline uint32_t pair_left(uint64_t key) { return (uint32_t)(key >> 32); }
static inline uint32_t pair_right(uint64_t key) { return (uint32_t)(key & 0xFFFFFFFFu); }

/* -- the set ------------------------------------------------------------------------------ */
int pairs_init(PairSet *ps, int tie_break); /* on failure the set is still safe to free */
void pairs_free(PairSet *ps);
/* Appends a token (its bytes copied); its id is n_tokens - 1. */
int pairs_add_token(PairSet *ps, const uint8_t *data, size_t len);
/* Appends the token of the merge of a and b: the bytes of a, then those of b. */
int pairs_add_merged_token(PairSet *ps, uint32_t a, uint32_t b);

/* -- occurrence lists ---------------------------------------------------------------------- */
static inline uint32_t *occ_items(PairRec *p) {
    return p->n_occ <= INLINE_OCC ? p->occ.inl : p->occ.ext + 1;
}

static inline uint32_t occ_cap(const PairRec *p) {
    return p->n_occ <= INLINE_OCC ? INLINE_OCC : p->occ.ext[0];
}

/* Makes the list `len` items long (new items undefined), growing its room to at least
 * `room` items (clamped to bs_limit32). */
int occ_resize(PairRec *p, uint64_t len, uint64_t room);

static inline int occ_push(PairRec *p, uint32_t v) {
    uint32_t n = p->n_occ;
    if (n >= occ_cap(p) || n == INLINE_OCC) { /* grow by half: millions of lists, slack adds up */
        int rc = occ_resize(p, (uint64_t)n + 1, (uint64_t)n + n / 2 + 2);
        if (rc) return rc;
    } else {
        p->n_occ = n + 1;
    }
    occ_items(p)[n] = v;
    return BS_OK;
}

void occ_free(PairRec *p);
/* Moves the record's list out (the record is left empty); free with occ_release. */
void occ_take(PairRec *p, OccList *out);
void occ_release(OccList *l);
/* Gives back the growth slack of an allocated list. */
void occ_trim(PairRec *p);

/* -- the pair table -------------------------------------------------------------------------
 * Slots hold a record index (low 32 bits) and the top half of the key's hash (high 32
 * bits): a probe compares hashes before it loads a record, so looking up a pair that does
 * not exist yet (every pair with a new token) touches no record at all. */
#define SLOT_EMPTY 0xFFFFFFFFFFFFFFFFull
#define SLOT_TAG 0xFFFFFFFF00000000ull

/* The record of `key`, or BS_NONE. */
static inline uint32_t pair_find(const PairSet *ps, uint64_t key) {
    uint64_t hv = hash64(key), tag = hv & SLOT_TAG;
    for (uint64_t h = hv & ps->table_mask;; h = (h + 1) & ps->table_mask) {
        uint64_t slot = ps->table[h];
        if (slot == SLOT_EMPTY) return BS_NONE;
        if ((slot & SLOT_TAG) == tag && ps->recs[(uint32_t)slot].key == key) return (uint32_t)slot;
    }
}

/* Adds the record of `key` (count 0) at free slot `h` of the table (see pair_get). */
int pair_insert(PairSet *ps, uint64_t key, uint64_t hv, uint64_t h, uint32_t *rec);

/* The record of `key` in *rec, created with count 0 when absent. */
static inline int pair_get(PairSet *ps, uint64_t key, uint32_t *rec) {
    uint64_t hv = hash64(key), tag = hv & SLOT_TAG;
    uint64_t h = hv & ps->table_mask;
    for (;;) {
        uint64_t slot = ps->table[h];
        if (slot == SLOT_EMPTY) break;
        if ((slot & SLOT_TAG) == tag && ps->recs[(uint32_t)slot].key == key) {
            *rec = (uint32_t)slot;
            return BS_OK;
        }
        h = (h + 1) & ps->table_mask;
    }
    return pair_insert(ps, key, hv, h, rec);
}

/* -- order ------------------------------------------------------------------------------------ */
/* Puts every pair with a positive count in the heap or the cold list, once, after the
 * last pair was counted (trim_lists: give back the lists' growth slack on the way). */
int pairs_build_heap(PairSet *ps, int trim_lists);
/* Offers a pair with its current count: to the heap, or to the cold list when rare. */
int pairs_offer(PairSet *ps, int64_t count, uint32_t rec);
/* Offers the pairs born in merge number `merge` (1-based) once each, with their final
 * counts: `born` may name a record more than once. */
int pairs_offer_born(PairSet *ps, const uint32_t *born, uint64_t n_born, uint32_t merge);
/* Pops the best pair whose count is at least max(min_count, 1): 1 and its record and
 * count, 0 when there is none, or a status. */
int pairs_pop_best(PairSet *ps, int64_t min_count, uint32_t *rec, int64_t *count);

/* Sorts ascending (qsort). */
void bs_sort_u32(uint32_t *v, uint32_t n);

#endif

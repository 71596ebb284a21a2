/*
 * pairs.c: growth of the pairs' lists and table, the tokens, and the order in which pairs
 * are merged -- the heap with the tie-break and the cold list (see pairs.h).
 */
#include "pairs.h"

#include "layout.h"

/* -- occurrence lists ---------------------------------------------------------------------- */
int occ_resize(PairRec *p, uint64_t len, uint64_t room) {
    if (len > bs_limit32) return BS_TOO_LARGE;
    if (room > bs_limit32) room = bs_limit32;
    if (room < len) room = len;
    if (len <= INLINE_OCC && p->n_occ <= INLINE_OCC) { p->n_occ = (uint32_t)len; return BS_OK; }
    if (p->n_occ <= INLINE_OCC) { /* inline -> allocated */
        uint32_t *e = (uint32_t *)bs_realloc_n(NULL, room + 1, sizeof(uint32_t));
        if (!e) return BS_NO_MEMORY;
        e[0] = (uint32_t)room;
        memcpy(e + 1, p->occ.inl, p->n_occ * sizeof(uint32_t));
        p->occ.ext = e;
    } else if (len > p->occ.ext[0]) {
        uint32_t *e = (uint32_t *)bs_realloc_n(p->occ.ext, room + 1, sizeof(uint32_t));
        if (!e) return BS_NO_MEMORY;
        e[0] = (uint32_t)room;
        p->occ.ext = e;
    }
    p->n_occ = (uint32_t)len; /* an allocated list stays allocated, even when short */
    if (len <= INLINE_OCC) { /* ...except that a short length means inline: move back */
        uint32_t *e = p->occ.ext, keep[INLINE_OCC];
        memcpy(keep, e + 1, len * sizeof(uint32_t));
        bs_free(e);
        memcpy(p->occ.inl, keep, len * sizeof(uint32_t));
    }
    return BS_OK;
}

void occ_free(PairRec *p) {
    if (p->n_occ > INLINE_OCC) bs_free(p->occ.ext);
    p->n_occ = 0;
}

void occ_take(PairRec *p, OccList *out) {
    out->len = p->n_occ;
    if (p->n_occ <= INLINE_OCC) {
        memcpy(out->inl, p->occ.inl, sizeof(out->inl));
        out->items = out->inl;
        out->owned = NULL;
    } else {
        out->owned = p->occ.ext;
        out->items = p->occ.ext + 1;
    }
    p->n_occ = 0;
}

void occ_release(OccList *l) {
    bs_free(l->owned);
    l->owned = NULL;
}

void occ_trim(PairRec *p) {
    if (p->n_occ > INLINE_OCC && p->occ.ext[0] > p->n_occ) {
        uint32_t *d = (uint32_t *)bs_realloc(p->occ.ext, ((size_t)p->n_occ + 1) * sizeof(uint32_t));
        if (d) { p->occ.ext = d; d[0] = p->n_occ; }
    }
}

/* -- the set and its tokens ------------------------------------------------------------------ */
#define FIRST_TABLE 1024u

int pairs_init(PairSet *ps, int tie_break) {
    memset(ps, 0, sizeof(*ps));
    if (!bs_tie_break_name(tie_break)) return BS_UNKNOWN_TIE_BREAK;
    ps->tie_break = tie_break;
    ps->table = (uint64_t *)bs_malloc(FIRST_TABLE * sizeof(uint64_t));
    if (!ps->table) return BS_NO_MEMORY;
    memset(ps->table, 0xFF, FIRST_TABLE * sizeof(uint64_t));
    ps->table_mask = FIRST_TABLE - 1;
    return BS_OK;
}

void pairs_free(PairSet *ps) {
    if (ps->recs)
        for (uint32_t r = 0; r < ps->n_recs; r++) occ_free(&ps->recs[r]);
    bs_free(ps->recs);
    bs_free(ps->table);
    bs_free(ps->heap);
    bs_free(ps->cold);
    if (ps->tokens)
        for (uint32_t t = 0; t < ps->n_tokens; t++) bs_free(ps->tokens[t].data);
    bs_free(ps->tokens);
    memset(ps, 0, sizeof(*ps));
}

/* Appends a token whose `len` bytes are in `data`, an allocation the set takes over. */
static int adopt_token(PairSet *ps, uint8_t *data, uint64_t len) {
    if (len > bs_limit32) { bs_free(data); return BS_TOO_LARGE; }
    uint64_t need = (uint64_t)ps->n_tokens + 1;
    if (need > ps->cap_tokens) {
        uint64_t cap = bs_grown_cap(ps->cap_tokens, need, 1024, bs_limit32);
        Token *d = cap ? (Token *)bs_realloc_n(ps->tokens, cap, sizeof(Token)) : NULL;
        if (!d) { bs_free(data); return cap ? BS_NO_MEMORY : BS_TOO_LARGE; }
        ps->tokens = d;
        ps->cap_tokens = (uint32_t)cap;
    }
    ps->tokens[ps->n_tokens].data = data;
    ps->tokens[ps->n_tokens].len = (uint32_t)len;
    ps->n_tokens++;
    return BS_OK;
}

int pairs_add_token(PairSet *ps, const uint8_t *data, size_t len) {
    if ((uint64_t)len > bs_limit32) return BS_TOO_LARGE;
    uint8_t *copy = (uint8_t *)bs_malloc(len ? len : 1);
    if (!copy) return BS_NO_MEMORY;
    if (len) memcpy(copy, data, len);
    return adopt_token(ps, copy, len);
}

int pairs_add_merged_token(PairSet *ps, uint32_t a, uint32_t b) {
    if (a >= ps->n_tokens || b >= ps->n_tokens) return BS_UNKNOWN_SYMBOL;
    Token ta = ps->tokens[a], tb = ps->tokens[b];
    uint64_t len = (uint64_t)ta.len + tb.len;
    if (len > bs_limit32) return BS_TOO_LARGE;
    uint8_t *buf = (uint8_t *)bs_malloc((size_t)len + 1);
    if (!buf) return BS_NO_MEMORY;
    memcpy(buf, ta.data, ta.len);
    memcpy(buf + ta.len, tb.data, tb.len);
    return adopt_token(ps, buf, len);
}

/* -- the pair table ---------------------------------------------------------------------------- */
static int table_grow(PairSet *ps) {
    uint64_t new_size = (ps->table_mask + 1) * 2;
    uint64_t *t = (uint64_t *)bs_realloc_n(NULL, new_size, sizeof(uint64_t));
    if (!t) return BS_NO_MEMORY;
    memset(t, 0xFF, new_size * sizeof(uint64_t));
    for (uint64_t old = 0; old <= ps->table_mask; old++) {
        uint64_t slot = ps->table[old];
        if (slot == SLOT_EMPTY) continue;
        uint64_t h = hash64(ps->recs[(uint32_t)slot].key) & (new_size - 1);
        while (t[h] != SLOT_EMPTY) h = (h + 1) & (new_size - 1);
        t[h] = slot;
    }
    bs_free(ps->table);
    ps->table = t;
    ps->table_mask = new_size - 1;
    return BS_OK;
}

int pair_insert(PairSet *ps, uint64_t key, uint64_t hv, uint64_t h, uint32_t *rec) {
    uint64_t need = (uint64_t)ps->n_recs + 1;
    /* a record index is below BS_NONE, so a slot (tag | index) is never SLOT_EMPTY */
    BS_RESERVE_OR_RETURN(ps->recs, ps->cap_recs, need, 1024, bs_limit32);
    if (need * 4 > (ps->table_mask + 1) * 3) { /* load 3/4: the hash tags keep probes cheap */
        int rc = table_grow(ps);
        if (rc) return rc;
        h = hv & ps->table_mask;
        while (ps->table[h] != SLOT_EMPTY) h = (h + 1) & ps->table_mask;
    }
    uint32_t r = ps->n_recs++;
    ps->recs[r].key = key;
    ps->recs[r].count = 0;
    ps->recs[r].n_occ = 0;
    ps->recs[r].pushed_at = 0;
    ps->table[h] = (hv & SLOT_TAG) | r;
    *rec = r;
    return BS_OK;
}

/* -- the heap ------------------------------------------------------------------------------------ */
static inline int bytes_cmp(const Token *x, const Token *y) {
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->data, y->data, n) : 0;
    if (c) return c;
    return (x->len > y->len) - (x->len < y->len);
}

/* 1 when entry p must come out of the heap before entry q: the higher count, then the
 * tie-break -- max-bytes: the greater (bytes(left), bytes(right)); min-bytes: the smaller;
 * min-ids: the smaller (left, right); equal bytes (a marker spelled like a byte): the
 * smaller ids.  The rules' names are bpe.TIE_BREAKS (layout.h's list is checked against
 * it at import); the Python engine implements the same order (memory_engines.py). */
static inline int better(const PairSet *ps, const HeapEntry *p, const HeapEntry *q) {
    if (p->count != q->count) return p->count > q->count;
    uint64_t kp = p->key, kq = q->key;
    if (ps->tie_break == TB_MIN_IDS) return kp < kq;
    const Token *lp = &ps->tokens[pair_left(kp)], *rp = &ps->tokens[pair_right(kp)];
    const Token *lq = &ps->tokens[pair_left(kq)], *rq = &ps->tokens[pair_right(kq)];
    int c = bytes_cmp(lp, lq);
    if (!c) c = bytes_cmp(rp, rq);
    if (!c) return kp < kq; /* same bytes (a marker spelled like a byte): the smaller ids */
    return ps->tie_break == TB_MAX_BYTES ? c > 0 : c < 0;
}

static void sift_down(PairSet *ps, uint64_t i) {
    HeapEntry *h = ps->heap;
    uint64_t n = ps->heap_len;
    HeapEntry e = h[i];
    for (;;) {
        uint64_t l = 2 * i + 1;
        if (l >= n) break;
        uint64_t best = l;
        if (l + 1 < n && better(ps, &h[l + 1], &h[l])) best = l + 1;
        if (!better(ps, &h[best], &e)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = e;
}

static void sift_up(PairSet *ps, uint64_t i) {
    HeapEntry *h = ps->heap;
    HeapEntry e = h[i];
    while (i > 0) {
        uint64_t parent = (i - 1) / 2;
        if (!better(ps, &e, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
}

static int heap_push(PairSet *ps, int64_t count, uint32_t rec) {
    BS_RESERVE_OR_RETURN(ps->heap, ps->heap_cap, ps->heap_len + 1, 1024, BS_LIMIT64(ps->heap));
    ps->heap[ps->heap_len].count = count;
    ps->heap[ps->heap_len].key = ps->recs[rec].key;
    ps->heap[ps->heap_len].rec = rec;
    sift_up(ps, ps->heap_len++);
    return BS_OK;
}

static void heap_pop(PairSet *ps) {
    ps->heap[0] = ps->heap[--ps->heap_len];
    if (ps->heap_len) sift_down(ps, 0);
}

/* -- the cold list ---------------------------------------------------------------------------------
 * Most pairs are rare (counts of a few units) and will never be merged, yet each would be
 * a heap entry that every pop sifts past.  A pair whose count is below `cold_below` is kept
 * in a plain list instead.  This is exact because a pair's count only rises in the merge
 * that creates its newer token, where it is offered with its final count: a cold pair stays
 * below the threshold.  So while the heap's best count is at least `cold_below` it beats
 * every cold pair; when it falls below (or the heap empties), thaw() lowers the threshold
 * and moves the cold pairs that reach it into the heap. */
int pairs_offer(PairSet *ps, int64_t count, uint32_t rec) {
    if (count >= ps->cold_below) return heap_push(ps, count, rec);
    BS_RESERVE_OR_RETURN(ps->cold, ps->cap_cold, ps->n_cold + 1, 1024, BS_LIMIT64(ps->cold));
    ps->cold[ps->n_cold++] = rec;
    return BS_OK;
}

/* The first threshold, from the best count before any merge: pairs under 1/65536 of it
 * are rarely merged by any usual vocabulary size, and a thaw is cheap when they are. */
static void set_cold_threshold(PairSet *ps) {
    int64_t best = 0;
    for (uint32_t r = 0; r < ps->n_recs; r++)
        if (ps->recs[r].count > best) best = ps->recs[r].count;
    ps->cold_below = best >> 16;
    if (ps->cold_below < 2) ps->cold_below = 0;
}

static int thaw(PairSet *ps) {
    ps->cold_below /= 4;
    if (ps->cold_below < 2) ps->cold_below = 0;
    uint64_t kept = 0;
    for (uint64_t k = 0; k < ps->n_cold; k++) {
        uint32_t r = ps->cold[k];
        int64_t c = ps->recs[r].count;
        if (c <= 0) continue;
        if (c < ps->cold_below) {
            ps->cold[kept++] = r;
        } else {
            int rc = heap_push(ps, c, r);
            if (rc) return rc;
        }
    }
    ps->n_cold = kept;
    if (!kept) { bs_free(ps->cold); ps->cold = NULL; ps->cap_cold = 0; }
    return BS_OK;
}

int pairs_build_heap(PairSet *ps, int trim_lists) {
    set_cold_threshold(ps);
    for (uint32_t r = 0; r < ps->n_recs; r++) {
        if (trim_lists) occ_trim(&ps->recs[r]);
        if (ps->recs[r].count > 0) {
            int rc = pairs_offer(ps, ps->recs[r].count, r);
            if (rc) return rc;
        }
    }
    return BS_OK;
}

int pairs_offer_born(PairSet *ps, const uint32_t *born, uint64_t n_born, uint32_t merge) {
    for (uint64_t k = 0; k < n_born; k++) {
        PairRec *p = &ps->recs[born[k]];
        if (p->count > 0 && p->pushed_at != merge) {
            p->pushed_at = merge;
            int rc = pairs_offer(ps, p->count, born[k]);
            if (rc) return rc;
        }
    }
    return BS_OK;
}

/* Lazy invalidation: an entry whose count is stale (counts only fall) is offered again
 * with the current count. */
int pairs_pop_best(PairSet *ps, int64_t min_count, uint32_t *rec, int64_t *count) {
    for (;;) {
        if (ps->n_cold && (!ps->heap_len || ps->heap[0].count < ps->cold_below)) {
            int rc = thaw(ps);
            if (rc) return rc;
            continue;
        }
        if (!ps->heap_len) return 0;
        HeapEntry top = ps->heap[0];
        int64_t current = ps->recs[top.rec].count;
        if (current != top.count) {
            heap_pop(ps);
            if (current > 0) {
                int rc = pairs_offer(ps, current, top.rec);
                if (rc) return rc;
            }
            continue;
        }
        if (current < min_count || current <= 0) return 0;
        heap_pop(ps);
        *rec = top.rec;
        *count = current;
        return 1;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

void bs_sort_u32(uint32_t *v, uint32_t n) {
    if (n > 1) qsort(v, n, sizeof(uint32_t), cmp_u32);
}

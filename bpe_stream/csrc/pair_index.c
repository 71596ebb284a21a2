/*
 * pair_index.c: the pair index of the out-of-core trainer (see pair_index.h).
 *
 * A merge of (a, b) into z runs as begin_merge, then merge_row on the rows of the pair's
 * words, then end_merge.  end_merge pushes the pairs born in the merge with their final
 * counts: pushing them earlier, with a count that a later row raises, would break the
 * heap's rule that an entry's count is never below the pair's current count.
 */
#include "pair_index.h"

#include "layout.h"

struct PairIndex {
    PairSet ps;
    uint64_t merges; /* merges begun, for pushed_at */
    int merging;     /* between begin_merge and end_merge */
    uint32_t ma, mb, mz;
    uint32_t *born, n_born, cap_born; /* records of pairs born in the open merge */
    /* Per word, a 64-bit signature of the pairs it holds (one bit per pair, by hash),
     * recomputed whenever the word is rewritten: a pair appears in a word only when the
     * word is rewritten, so the signature always covers the word's pairs, and take_words
     * drops the ids whose signature lacks the pair -- stale entries that would otherwise
     * cost a read from disk each (about 40% of the reads on generated web text). */
    uint64_t *sig;
    uint32_t n_sig, cap_sig;
    uint8_t *row; /* merge_row's output: the row's new value */
    uint64_t cap_row;
};

PairIndex *pair_index_new(int tie_break, int *status) {
    PairIndex *pi = (PairIndex *)calloc(1, sizeof(PairIndex));
    if (!pi) { *status = BS_NO_MEMORY; return NULL; }
    *status = pairs_init(&pi->ps, tie_break);
    if (*status) { pair_index_free(pi); return NULL; }
    return pi;
}

void pair_index_free(PairIndex *pi) {
    if (!pi) return;
    pairs_free(&pi->ps);
    free(pi->born);
    free(pi->sig);
    free(pi->row);
    free(pi);
}

int pair_index_add_token(PairIndex *pi, const uint8_t *data, size_t len) {
    return pairs_add_token(&pi->ps, data, len);
}

static inline uint64_t pair_bit(uint64_t key) {
    return 1ull << (hash64(key) >> 58);
}

static uint64_t row_signature(const uint8_t *symbols, size_t n) {
    uint64_t sig = 0;
    for (size_t i = 0; i + 1 < n; i++)
        sig |= pair_bit(pair_key(bs_seq_symbol(symbols, i), bs_seq_symbol(symbols, i + 1)));
    return sig;
}

static int set_signature(PairIndex *pi, uint32_t wid, uint64_t sig) {
    if (wid >= pi->n_sig) {
        BS_RESERVE_OR_RETURN(pi->sig, pi->cap_sig, (uint64_t)wid + 1, 1024, bs_limit32);
        while (pi->n_sig <= wid) pi->sig[pi->n_sig++] = ~0ull; /* unknown words: keep */
    }
    pi->sig[wid] = sig;
    return BS_OK;
}

static inline int push_wid(PairRec *p, uint32_t wid) {
    if (p->n_occ && occ_items(p)[p->n_occ - 1] == wid) return BS_OK;
    return occ_push(p, wid);
}

int pair_index_add_word(PairIndex *pi, uint32_t wid, int64_t freq, const uint8_t *symbols, size_t n) {
    PairSet *ps = &pi->ps;
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t x = bs_seq_symbol(symbols, i), y = bs_seq_symbol(symbols, i + 1), r;
        if (x >= ps->n_tokens || y >= ps->n_tokens) return BS_UNKNOWN_SYMBOL;
        int rc = pair_get(ps, pair_key(x, y), &r);
        if (!rc) rc = push_wid(&ps->recs[r], wid);
        if (rc) return rc;
        if (freq < 0 || ps->recs[r].count > INT64_MAX - freq) return BS_COUNT_OVERFLOW; /* see merge_loop.c */
        ps->recs[r].count += freq;
    }
    return set_signature(pi, wid, row_signature(symbols, n));
}

int pair_index_build_heap(PairIndex *pi) {
    return pairs_build_heap(&pi->ps, 1); /* the lists are done growing: trim their slack */
}

int pair_index_pop_best(PairIndex *pi, int64_t min_count, uint32_t *left, uint32_t *right, int64_t *count) {
    uint32_t r;
    int got = pairs_pop_best(&pi->ps, min_count, &r, count);
    if (got <= 0) return got;
    *left = pair_left(pi->ps.recs[r].key);
    *right = pair_right(pi->ps.recs[r].key);
    return 1;
}

int64_t pair_index_count(const PairIndex *pi, uint32_t left, uint32_t right) {
    uint32_t r = pair_find(&pi->ps, pair_key(left, right));
    return r == BS_NONE ? 0 : pi->ps.recs[r].count;
}

int pair_index_take_words(PairIndex *pi, uint32_t left, uint32_t right, OccList *out) {
    uint64_t key = pair_key(left, right);
    uint32_t r = pair_find(&pi->ps, key);
    if (r == BS_NONE) {
        memset(out, 0, sizeof(*out));
        out->items = out->inl;
        return BS_OK;
    }
    occ_take(&pi->ps.recs[r], out);
    uint32_t *items = out->items, n = 0;
    bs_sort_u32(items, out->len);
    uint64_t bit = pair_bit(key);
    for (uint32_t k = 0; k < out->len; k++) {
        uint32_t w = items[k];
        if (n && items[n - 1] == w) continue;
        if (w < pi->n_sig && !(pi->sig[w] & bit)) continue; /* certainly stale */
        items[n++] = w;
    }
    out->len = n;
    return BS_OK;
}

int pair_index_begin_merge(PairIndex *pi, uint32_t a, uint32_t b, uint32_t *new_id) {
    PairSet *ps = &pi->ps;
    if (pi->merging) return BS_OUT_OF_ORDER;
    uint32_t z = ps->n_tokens;
    int rc = pairs_add_merged_token(ps, a, b);
    if (rc) return rc;
    pi->merges++;
    pi->merging = 1;
    pi->ma = a;
    pi->mb = b;
    pi->mz = z;
    pi->n_born = 0;
    *new_id = z;
    return BS_OK;
}

/* The neighbour x of a merged occurrence, on the left (x, a) -> (x, z) or the right
 * (b, x) -> (z, x): moves the word's count from the lost pair to the gaining one. */
static inline int move_count(PairIndex *pi, uint64_t lost, uint64_t gained, int64_t f, uint32_t wid) {
    PairSet *ps = &pi->ps;
    uint32_t r1, r2;
    int rc = pair_get(ps, lost, &r1);
    if (!rc) rc = pair_get(ps, gained, &r2);
    if (rc) return rc;
    ps->recs[r1].count -= f;
    ps->recs[r2].count += f;
    if ((rc = push_wid(&ps->recs[r2], wid))) return rc;
    pi->born[pi->n_born++] = r2;
    return BS_OK;
}

int pair_index_merge_row(PairIndex *pi, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len,
                         const uint8_t **out_row, size_t *out_len) {
    if (!pi->merging) return BS_OUT_OF_ORDER;
    if (key_len != BS_SEQ_KEY_BYTES || value_len < BS_SEQ_COUNT_BYTES ||
        (value_len - BS_SEQ_COUNT_BYTES) % BS_SEQ_SYMBOL_BYTES)
        return BS_BAD_ROW;
    uint32_t a = pi->ma, b = pi->mb, z = pi->mz;
    uint32_t wid = bs_seq_key(key);
    int64_t f = bs_seq_count(value);
    const uint8_t *w = value + BS_SEQ_COUNT_BYTES;
    size_t n = (value_len - BS_SEQ_COUNT_BYTES) / BS_SEQ_SYMBOL_BYTES, m = 0;
    /* the new value is written as it is made: the count, then the symbols so far */
    BS_RESERVE_OR_RETURN(pi->row, pi->cap_row, value_len, 256, BS_LIMIT64(pi->row));
    /* at most two born-pair records per occurrence */
    BS_RESERVE_OR_RETURN(pi->born, pi->cap_born, (uint64_t)pi->n_born + n + 2, 1024, bs_limit32);
    uint8_t *out = pi->row + BS_SEQ_COUNT_BYTES;
    size_t i = 0;
    int rc;
    while (i < n) {
        uint32_t s = bs_seq_symbol(w, i);
        if (s == a && i + 1 < n && bs_seq_symbol(w, i + 1) == b) {
            if (m) {
                uint32_t x = bs_seq_symbol(out, m - 1);
                if ((rc = move_count(pi, pair_key(x, a), pair_key(x, z), f, wid))) return rc;
            }
            if (i + 2 < n) {
                uint32_t y = bs_seq_symbol(w, i + 2);
                if ((rc = move_count(pi, pair_key(b, y), pair_key(z, y), f, wid))) return rc;
            }
            bs_seq_put_symbol(out, m++, z);
            i += 2;
        } else {
            bs_seq_put_symbol(out, m++, s);
            i++;
        }
    }
    if (m == n) return 0;
    if ((rc = set_signature(pi, wid, row_signature(out, m)))) return rc;
    memcpy(pi->row, value, BS_SEQ_COUNT_BYTES);
    *out_row = pi->row;
    *out_len = BS_SEQ_COUNT_BYTES + m * BS_SEQ_SYMBOL_BYTES;
    return 1;
}

int pair_index_end_merge(PairIndex *pi) {
    PairSet *ps = &pi->ps;
    if (!pi->merging) return BS_OUT_OF_ORDER;
    uint32_t r;
    int rc = pair_get(ps, pair_key(pi->ma, pi->mb), &r);
    if (rc) return rc;
    ps->recs[r].count = 0;
    if ((rc = pairs_offer_born(ps, pi->born, pi->n_born, (uint32_t)pi->merges))) return rc;
    pi->merging = 0;
    pi->n_born = 0;
    return BS_OK;
}

void pair_index_memory(const PairIndex *pi, PairIndexMemory *out) {
    const PairSet *ps = &pi->ps;
    uint64_t lists = 0;
    for (uint32_t r = 0; r < ps->n_recs; r++)
        if (ps->recs[r].n_occ > INLINE_OCC) lists += ((uint64_t)ps->recs[r].occ.ext[0] + 1) * 4;
    out->pairs = ps->n_recs;
    out->signatures = (uint64_t)pi->cap_sig * 8;
    out->cold = ps->cap_cold * 4;
    out->records = (uint64_t)ps->cap_recs * sizeof(PairRec);
    out->table = (ps->table_mask + 1) * 8;
    out->heap = ps->heap_cap * sizeof(HeapEntry);
    out->heap_entries = ps->heap_len;
    out->word_lists = lists;
}

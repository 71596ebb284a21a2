/*
 * pair_index.h: the in-memory half of the out-of-core trainer (bpe_stream/sequences.py).
 *
 * The symbol sequences live elsewhere (the sequence table, an LMDB table read and
 * rewritten by Python; its rows are laid out in layout.h); this index holds only what
 * must be in memory: each pair's 64-bit count, the ids of the words that may hold it (an
 * id may be stale and is then skipped), the heap with the same order and lazy
 * invalidation as the merge loop, and the token bytes for the tie-break.
 *
 * Use: pair_index_new, pair_index_add_token for ids 0, 1, ..., pair_index_add_word for
 * every word, pair_index_build_heap once; then per merge: pair_index_pop_best (or a
 * forced pair), pair_index_take_words, and pair_index_begin_merge, pair_index_merge_row
 * on each of the words' rows (in as many batches as the caller likes, so memory stays
 * bounded), pair_index_end_merge.  A merge call out of that order is BS_OUT_OF_ORDER.
 */
#ifndef BPE_STREAM_PAIR_INDEX_H
#define BPE_STREAM_PAIR_INDEX_H

#include "common.h"
#include "pairs.h"

typedef struct PairIndex PairIndex;

/* Sizes of the index's parts in bytes, and counts of pairs and heap entries. */
typedef struct {
    uint64_t pairs, signatures, cold, records, table, heap, heap_entries, word_lists;
} PairIndexMemory;

PairIndex *pair_index_new(int tie_break, int *status);
void pair_index_free(PairIndex *pi);
int pair_index_add_token(PairIndex *pi, const uint8_t *data, size_t len);
/* Indexes word `word_id` (counted `freq` times): `n` symbols, little-endian uint32 each
 * (a row's symbols, layout.h). */
int pair_index_add_word(PairIndex *pi, uint32_t word_id, int64_t freq, const uint8_t *symbols, size_t n);
int pair_index_build_heap(PairIndex *pi);
/* As pairs_pop_best: 1 with the best pair and its count, 0 when none reaches min_count. */
int pair_index_pop_best(PairIndex *pi, int64_t min_count, uint32_t *left, uint32_t *right, int64_t *count);
/* The current count of (left, right). */
int64_t pair_index_count(const PairIndex *pi, uint32_t left, uint32_t right);
/* Removes the word ids that may hold (left, right) and gives them to *out, sorted and
 * distinct (out->items[0 .. out->len)); free with occ_release. */
int pair_index_take_words(PairIndex *pi, uint32_t left, uint32_t right, OccList *out);
/* Opens the merge of (left, right); *new_id: its token. */
int pair_index_begin_merge(PairIndex *pi, uint32_t left, uint32_t right, uint32_t *new_id);
/* Replaces the non-overlapping occurrences of the open merge's pair in one row, left to
 * right, and updates the counts and word lists.  1 when the word changed, with its new
 * value (count and symbols, layout.h) in *out, *out_len bytes -- the index's buffer, valid
 * until the next call; 0 when it did not change. */
int pair_index_merge_row(PairIndex *pi, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len,
                         const uint8_t **out, size_t *out_len);
/* Closes the merge: pushes the pairs it made, with their final counts. */
int pair_index_end_merge(PairIndex *pi);
void pair_index_memory(const PairIndex *pi, PairIndexMemory *out);

#endif

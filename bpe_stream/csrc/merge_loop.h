/*
 * merge_loop.h: the BPE merge loop in memory, with a cost that follows pair occurrences.
 *
 * Same rules and results as the pure-Python trainer (bpe_stream/trainer.py), which stays
 * as the reference and the fallback when the extension is not built.
 *
 * Use: merge_loop_new, merge_loop_add_token for ids 0, 1, ... (the tokens' bytes, for the
 * tie-break), merge_loop_load once with all words (copied: the caller may free them
 * after), merge_loop_start, then merge_loop_step until it returns 0.  Every function
 * returns BS_OK (or 1, see merge_loop_step) or a negative bs_status (common.h).
 */
#ifndef BPE_STREAM_MERGE_LOOP_H
#define BPE_STREAM_MERGE_LOOP_H

#include "common.h"

typedef struct MergeLoop MergeLoop;

typedef struct {
    uint64_t visits, merged; /* occurrences visited, and of those, merged */
    uint32_t pairs;          /* pair records */
    uint64_t heap;           /* heap entries left */
} MergeLoopStats;

/* NULL with *status set when it cannot (a tie-break that is none, no memory). */
MergeLoop *merge_loop_new(int tie_break, int *status);
void merge_loop_free(MergeLoop *m);
int merge_loop_add_token(MergeLoop *m, const uint8_t *data, size_t len);
/* The words: `n_pos` symbols, `width` bytes each (1: byte ids, 4: uint32 in host order),
 * word after word; word w ends at offset ends[w] (so ends[n_words - 1] == n_pos) and
 * counts freqs[w] times.  Every symbol must be a token's id. */
int merge_loop_load(MergeLoop *m, const void *symbols, int width, uint64_t n_pos, const uint64_t *ends,
                    const int64_t *freqs, uint64_t n_words);
/* Orders the pairs counted by the load; call once, before the first step. */
int merge_loop_start(MergeLoop *m);
/* One merge: of `forced` (a pair {left, right}) when not NULL, else of the best pair whose
 * count is at least max(min_count, 1).  1 with the pair and its count, 0 when no pair is
 * left, or a status.  The merge's new token takes the next id. */
int merge_loop_step(MergeLoop *m, int64_t min_count, const uint32_t *forced, uint32_t *left, uint32_t *right,
                    int64_t *count);
void merge_loop_stats(const MergeLoop *m, MergeLoopStats *out);

#endif

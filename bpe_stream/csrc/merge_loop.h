/*
 * merge_loop.h: the BPE merge loop in memory, with a cost that follows pair occurrences.
 *
 * Same rules and results as the pure-Python trainer (bpe_stream/train/trainer.py), which stays
 * as the reference and the fallback when the extension is not built.
 *
 * Life cycle: merge_loop_new, merge_loop_add_token for ids 0, 1, ... (the tokens' bytes,
 * for the tie-break), merge_loop_load once with all words (copied: the caller may free
 * them after), merge_loop_start once, then any sequence of merge_loop_merge_given (merges
 * given in advance: resume, continue a tokenizer), merge_loop_merge_best (merges learned)
 * and merge_loop_step (one of either), the state kept between calls; merge_loop_free.
 * The merges' new tokens take the ids after the tokens, in order.  Every function returns
 * BS_OK (or 1, see merge_loop_step) or a negative bs_status (common.h); a call out of
 * that order is BS_OUT_OF_ORDER.
 */
#ifndef BPE_STREAM_MERGE_LOOP_H
#define BPE_STREAM_MERGE_LOOP_H

#include "common.h"

typedef struct MergeLoop MergeLoop;

typedef struct {
    uint64_t visits, merged; /* occurrences visited, and of those, merged */
    uint32_t pairs;          /* pair records */
    uint64_t heap;           /* heap entries left */
    uint64_t disk_bytes, peak_disk_bytes; /* of the arena's file, if any (now, at most) */
    uint64_t anon_bytes, peak_anon_bytes, anon_quota; /* the arena's anonymous blocks (now, at most, limit) */
    uint64_t moved_to_file, moved_to_anon;             /* blocks the arena moved on growth (filearena.h) */
    uint64_t compactions;                              /* times the positions were compacted */
    double compact_seconds;                            /* the time those compactions took */
} MergeLoopStats;

/* NULL with *status set when it cannot (a tie-break that is none, no memory).  With an
 * `arena` (filearena.h; the loop takes it over, and closes it even when it fails) every
 * table of the loop -- positions, pair records and their lists, the heap -- lives in the
 * arena's scratch file instead of the process's anonymous memory: same merges, memory the
 * kernel may write back and drop -- except what the arena keeps in anonymous memory
 * within its quota (filearena.h), the positions first. */
MergeLoop *merge_loop_new(int tie_break, FileArena *arena, int *status);
/* The errno of the arena's last failure for want of disk (ENOSPC ...), else 0: a call that
 * returned BS_NO_MEMORY then failed for that. */
int merge_loop_disk_error(const MergeLoop *m);
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
/* Applies the `n` merges of `pairs` ({left, right} of merge k at pairs[2k], pairs[2k + 1])
 * in order, whatever their counts; counts[k] receives merge k's count when it was applied
 * (0 for a pair no word holds).  On a status the merges before the failing one are done. */
int merge_loop_merge_given(MergeLoop *m, const uint32_t *pairs, uint64_t n, int64_t *counts);
/* Up to `n` merges, each of the best pair whose count is at least max(min_count, 1):
 * merge k's pair in pairs[2k], pairs[2k + 1] and its count in counts[k]; *done receives
 * how many were made, fewer than n when no pair reaches min_count (or none is left). */
int merge_loop_merge_best(MergeLoop *m, uint64_t n, int64_t min_count, uint32_t *pairs, int64_t *counts,
                          uint64_t *done);
void merge_loop_stats(const MergeLoop *m, MergeLoopStats *out);
/* The anonymous quota of the loop's arena (filearena.h's file_arena_set_quota; nothing without
 * an arena): raised after the load, when the caller's copy of the words is gone. */
void merge_loop_set_quota(MergeLoop *m, uint64_t quota);
/* A loop in a file arena compacts its positions once a third of them are dead (merged into the
 * position on their left) and they number at least this many (see compact_positions in
 * merge_loop.c); tests lower it to reach the compaction with small inputs. */
extern uint64_t bs_compact_min;

#endif

/*
 * runs.h -- sorted runs of counts: a count table packed in key order, and the merge of
 * such runs into one (summing the counts of a key found in several).
 *
 * A run is counttable.h's packed form (per entry: u32 length, little-endian | the key's
 * bytes | u64 count, little-endian) with its keys strictly increasing in bytes order
 * (memcmp over the shorter length, then the shorter first: Python's bytes order and LMDB's
 * default key order).  Counting workers hand their parent runs instead of unordered packed
 * tables: the parent then merges a batch's runs in one sequential pass, straight into the
 * sorted form the store takes, instead of inserting every entry into a hash table and
 * sorting it afterwards.
 *
 * Example: the runs  [b"a":2, b"ab":1]  and  [b"a":1, b"b":4]  merge into
 * [b"a":3, b"ab":1, b"b":4].
 */
#ifndef BS_RUNS_H
#define BS_RUNS_H
#include <stddef.h>
#include <stdint.h>

#include "counttable.h"

/* The table's entries packed in key order into out[0:bs_ct_packed_size(t)) (a run).
 * BS_CT_ENOMEM if the sort's scratch cannot be allocated. */
int bs_runs_pack_sorted(const bs_counttable *t, uint8_t *out);

typedef struct {
    const uint8_t *buf;
    size_t len;
} bs_run;

/* Called once per distinct key of the merge, in increasing key order, with the sum of its
 * counts; a nonzero return stops the merge and is returned by it. */
typedef int (*bs_runs_emit)(void *ctx, const uint8_t *key, size_t len, uint64_t count);

/* Merges runs[0:n) (n <= BS_RUNS_MAX): BS_CT_OK, BS_CT_EPACKED for a run that does not parse
 * or whose keys are not strictly increasing, BS_CT_ELIMIT for a sum over 2**64-1,
 * BS_CT_ENOMEM, or what emit returned.  Keys emitted before an error stay emitted. */
#define BS_RUNS_MAX 65536u
int bs_runs_merge(const bs_run *runs, size_t n, bs_runs_emit emit, void *ctx);

/* bs_runs_merge into one run at out (room for the sum of the runs' lengths, which the
 * merge never exceeds); *out_len gets its length and *entries (if not NULL) its keys. */
int bs_runs_merge_packed(const bs_run *runs, size_t n, uint8_t *out, size_t *out_len, size_t *entries);

/* bs_runs_merge_packed on up to `threads` threads (the calling one among them; at most
 * BS_RUNS_THREADS_MAX): the key space cut into that many ranges, merged concurrently.  The
 * same bytes, entries and status as bs_runs_merge_packed for every input; threads < 2: it. */
#define BS_RUNS_THREADS_MAX 256u
int bs_runs_merge_packed_threads(const bs_run *runs, size_t n, size_t threads, uint8_t *out, size_t *out_len,
                                 size_t *entries);

/* The merge of runs[0:n) handed over in parts, in key order, while later parts are still being
 * merged on helper threads (the store writer adds each part as it comes: bs_sw_add_runs).  The
 * parts together are bs_runs_merge_packed's run: each is a run whose keys follow the previous
 * part's.
 *
 * bs_runs_stream_start starts the merge into out (room for the sum of the runs' lengths,
 * written until bs_runs_stream_end) on `threads` threads of its own (1 to
 * BS_RUNS_THREADS_MAX; where none can start, bs_runs_stream_next merges each part itself):
 * BS_CT_OK with *s set, BS_CT_ENOMEM, or BS_CT_ELIMIT for more than BS_RUNS_MAX runs.
 * bs_runs_stream_next waits for the next part: 1 with *part and *len set, 0 after the last,
 * or the part's error (BS_CT_EPACKED, BS_CT_ELIMIT, BS_CT_ENOMEM: the parts before it stand).
 * bs_runs_stream_end lets the part being merged finish, starts no other, and frees s. */
typedef struct bs_runs_stream bs_runs_stream;
int bs_runs_stream_start(const bs_run *runs, size_t n, size_t threads, uint8_t *out, bs_runs_stream **s);
int bs_runs_stream_next(bs_runs_stream *s, const uint8_t **part, size_t *len);
void bs_runs_stream_end(bs_runs_stream *s);

#endif

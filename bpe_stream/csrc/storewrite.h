/*
 * storewrite.h -- the store's counts written from native code: one LMDB environment (the
 * vendored library in lmdb/, the release py-lmdb bundles, so one on-disk format), one write
 * transaction at a time, and the hot step of a batch -- a sorted run of counts merged into
 * the ``words`` table -- without an object per pretoken.
 *
 * The layout is bpe_stream/store/lmdb_store.py's: ``words`` maps a pretoken of 1 to max_key
 * bytes to its count, 8 bytes little-endian, at most 2**63-1.  Pretokens that are not keys of
 * their own there (empty, or longer than max_key) are left to the caller, which stores them
 * under their digest in ``longwords``.
 *
 * Who owns the environment: LMDB forbids opening one environment twice in one process (its
 * locks are per process: closing one handle drops the other's), so the caller (the Store)
 * closes py-lmdb's handle before it opens a bs_sw and reopens it after bs_sw_close.
 *
 * Statuses: 0, an LMDB status (MDB_* codes, or an errno), or one of BS_SW_* below.
 */
#ifndef BS_STOREWRITE_H
#define BS_STOREWRITE_H
#include <stddef.h>
#include <stdint.h>

#include "runs.h"

enum {
    BS_SW_EPACKED = -1,   /* a run that does not parse or whose keys are not strictly increasing */
    BS_SW_EOVERFLOW = -2, /* a count would pass 2**63-1 (the value: bs_sw_result.over_*) */
    BS_SW_EDAMAGED = -3,  /* a stored count that is not 8 bytes */
    BS_SW_ENOMEM = -4,
    BS_SW_EINELIGIBLE = -5, /* a staged chunk that is not increasing keys with positive counts */
    BS_SW_ENOTXN = -6,      /* no transaction is open (or one is, for begin) */
    BS_SW_ELIMIT = -7,      /* runs merged: a sum over 2**64-1, or more than BS_RUNS_MAX runs */
};

/* The tables, in lmdb_store._DBS's order. */
enum { BS_SW_META, BS_SW_WORDS, BS_SW_LONGWORDS, BS_SW_SOURCES, BS_SW_TRAIN, BS_SW_NDBS };

#define BS_SW_MAX_COUNT ((uint64_t)INT64_MAX)

typedef struct bs_sw bs_sw;

/* An entry left to the caller: its key points into the run or chunk given. */
typedef struct {
    const uint8_t *key;
    size_t len;
    uint64_t count;
} bs_sw_skip;

/* What adding a run or a chunk did. */
typedef struct {
    uint64_t new_keys, new_bytes; /* keys the words table did not hold, their bytes */
    uint64_t total_lo, total_hi;  /* the sum of every entry's count (128 bits) */
    uint64_t over_lo, over_hi;    /* BS_SW_EOVERFLOW: the sum that passed 2**63-1 */
    bs_sw_skip *skipped;          /* the entries whose keys are not words keys */
    size_t n_skipped, cap_skipped;
    bs_sw_skip *top;              /* the best entries whose new count reached the floor (count: the new one) */
    size_t n_top, cap_top;
} bs_sw_result;

void bs_sw_result_free(bs_sw_result *r);

int bs_sw_open(const char *path, size_t map_size, bs_sw **out);
void bs_sw_close(bs_sw *w); /* aborts an open transaction */
size_t bs_sw_map_size(bs_sw *w);
int bs_sw_set_map_size(bs_sw *w, size_t size); /* no transaction open; 0: adopt the file's */
size_t bs_sw_max_key(bs_sw *w);

int bs_sw_begin(bs_sw *w); /* a write transaction, the five tables opened in it */
int bs_sw_commit(bs_sw *w);
void bs_sw_abort(bs_sw *w);

/* Plain operations inside the transaction.  get: MDB_NOTFOUND when absent; *val points into
 * the map (valid until the next write).  del: MDB_NOTFOUND when absent. */
int bs_sw_get(bs_sw *w, int db, const uint8_t *key, size_t klen, const uint8_t **val, size_t *vlen);
int bs_sw_put(bs_sw *w, int db, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen);
int bs_sw_del(bs_sw *w, int db, const uint8_t *key, size_t klen);
/* The first entry whose key is >= key: MDB_NOTFOUND past the end. */
int bs_sw_first_from(bs_sw *w, int db, const uint8_t *key, size_t klen, const uint8_t **k, size_t *kl,
                     const uint8_t **v, size_t *vl);
/* A table's entries, and its leaf, branch and overflow pages. */
int bs_sw_stat(bs_sw *w, int db, uint64_t *entries, uint64_t *pages);

/* Adds a run (counttable.h's packed form, keys strictly increasing) to the words table:
 * each count added to the stored one (a cursor walk in key order: keys past the table's
 * last are appended), the entries with keys that are not words keys listed in r->skipped,
 * and in r->top the best `keep` of those whose new count is at least `floor` (the store's
 * kept most frequent pretokens; UINT64_MAX: none), best first: count descending, then key
 * bytes ascending -- lmdb_store._best's order.  A candidate past the best `keep` of its call
 * cannot enter a top of `keep` (that many written keys rank above it), so the caller loses
 * nothing, and a new store's batch (floor 0) hands over `keep` entries, not every key.
 * On an error the transaction must be aborted. */
int bs_sw_add_run(bs_sw *w, const uint8_t *run, size_t len, uint64_t floor, size_t keep, bs_sw_result *r);

/* bs_sw_add_run of the merge of runs[0:n) (runs.h), each part of the merge added as soon as
 * it is merged while `threads` helper threads merge the next (bs_runs_stream): the same
 * table, result and status as bs_sw_add_run(bs_runs_merge_packed(runs)), except that a fault
 * of the runs is found part by part (BS_SW_EPACKED or BS_SW_ELIMIT after the parts before it
 * were written: on any error the transaction must be aborted).  out: room for the sum of the
 * runs' lengths, where the merge is written; r's skipped keys point into it. */
int bs_sw_add_runs(bs_sw *w, const bs_run *runs, size_t n, size_t threads, uint8_t *out, uint64_t floor, size_t keep,
                   bs_sw_result *r);

/* The run staged into the meta table as chunks of at most chunk_keys entries, each under
 * prefix + its number (4 bytes, big-endian), as msgpack [keys (bin), counts (uint)] -- what
 * lmdb_store.py's msgpack.packb([keys, counts], use_bin_type=True) writes; *chunks gets
 * how many. */
int bs_sw_stage_run(bs_sw *w, const uint8_t *run, size_t len, size_t chunk_keys, const uint8_t *prefix,
                    size_t prefix_len, size_t *chunks);

/* bs_sw_add_run of a staged chunk (msgpack [keys, counts]); BS_SW_EINELIGIBLE, before any
 * write, when it is not keys in strictly increasing order with counts from 1 to 2**64-1
 * (counts taken back: the caller adds those itself). */
int bs_sw_add_chunk(bs_sw *w, const uint8_t *chunk, size_t len, uint64_t floor, size_t keep, bs_sw_result *r);

const char *bs_sw_strerror(int rc);

#endif

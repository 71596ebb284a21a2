/*
 * idcache.h: a bounded cache pretoken bytes -> ids, in native memory.
 *
 * Most pretokens of a text have been seen before; their ids are looked up here instead of
 * merged again.  The memory stays bounded on text that never repeats: pretokens longer
 * than BS_IDCACHE_MAX_KEY bytes are not cached (they are rare and seldom repeat), and
 * when the cache holds max_entries entries, or its keys and ids BS_IDCACHE_MAX_BYTES
 * bytes, the next pretokens go uncached until as many have as it holds; then it is emptied
 * and fills again.
 * In all at most 48 * max_entries bytes of slots and entries, and BS_IDCACHE_MAX_BYTES of
 * keys and ids.
 */
#ifndef BPE_STREAM_IDCACHE_H
#define BPE_STREAM_IDCACHE_H

#include "common.h"
#include "scan.h"

#define BS_IDCACHE_MAX_KEY 64u
#define BS_IDCACHE_MAX_BYTES (16u << 20)

typedef struct bs_idcache bs_idcache;

/* A cache of at most max_entries entries (0: nothing is cached); NULL when out of memory. */
bs_idcache *bs_idcache_new(uint32_t max_entries);
void bs_idcache_free(bs_idcache *c);
size_t bs_idcache_len(const bs_idcache *c);

/* One pretoken's lookup: its hash (for get and put) and its ids (NULL: not cached). */
typedef struct {
    uint64_t hash;
    const uint32_t *ids;
    size_t n_ids;
} bs_idcache_found;

/* Looks up the pretokens data[spans[k].start:spans[k].end), k < n, into found[k] -- all
 * at once, so that their memory latency overlaps.  data[0:len) may all be read.  The ids
 * stay valid while bs_idcache_generation stays the same. */
void bs_idcache_lookup(const bs_idcache *c, const uint8_t *data, size_t len, const bs_span *spans, size_t n,
                       bs_idcache_found *found);

/* The ids cached for key[0:len), whose hash a lookup gave, *n_ids of them, or NULL. */
const uint32_t *bs_idcache_get(const bs_idcache *c, const uint8_t *key, size_t len, uint64_t hash, size_t *n_ids);

/* Caches the ids of a key that is not cached (one longer than BS_IDCACHE_MAX_KEY, or with
 * more than BS_IDCACHE_MAX_KEY + 1 ids, is left out).  BS_OK or BS_NO_MEMORY. */
int bs_idcache_put(bs_idcache *c, const uint8_t *key, size_t len, uint64_t hash, const uint32_t *ids, size_t n_ids);

/* Changes whenever a put moves or drops cached ids (the cache emptied, its arena grown). */
uint64_t bs_idcache_generation(const bs_idcache *c);

#endif

/*
 * idcache.h: a bounded cache pretoken bytes -> ids, in native memory.
 *
 * Most pretokens of a text have been seen before; their ids are looked up here instead of
 * merged again.  The memory stays bounded on text that never repeats: pretokens longer
 * than BS_IDCACHE_MAX_KEY bytes are not cached (they are rare, and encoding one costs
 * about what copying it costs), and when the cache holds max_entries entries, or its keys
 * and ids BS_IDCACHE_MAX_BYTES bytes, it is emptied and fills again from the next one.
 * In all at most 48 * max_entries bytes of slots and entries, and BS_IDCACHE_MAX_BYTES of
 * keys and ids.
 */
#ifndef BPE_STREAM_IDCACHE_H
#define BPE_STREAM_IDCACHE_H

#include "common.h"

#define BS_IDCACHE_MAX_KEY 64u
#define BS_IDCACHE_MAX_BYTES (16u << 20)

typedef struct bs_idcache bs_idcache;

/* A cache of at most max_entries entries (0: nothing is cached); NULL when out of memory. */
bs_idcache *bs_idcache_new(uint32_t max_entries);
void bs_idcache_free(bs_idcache *c);
size_t bs_idcache_len(const bs_idcache *c);

/* The hash of key[0:len), the argument of get and put.  `readable`: how many bytes from
 * key may be read (at least len); 8 or more lets the first eight be read in one load. */
uint64_t bs_idcache_hash(const uint8_t *key, size_t len, size_t readable);

/* The ids cached for key[0:len) (its hash: bs_idcache_hash), *n_ids of them, or NULL.
 * They stay valid until the next put. */
const uint32_t *bs_idcache_get(const bs_idcache *c, const uint8_t *key, size_t len, uint64_t hash, size_t *n_ids);

/* Caches the ids of a key that get did not find (one longer than BS_IDCACHE_MAX_KEY, or
 * with more than BS_IDCACHE_MAX_KEY + 1 ids, is left out).  BS_OK or BS_NO_MEMORY. */
int bs_idcache_put(bs_idcache *c, const uint8_t *key, size_t len, uint64_t hash, const uint32_t *ids, size_t n_ids);

#endif

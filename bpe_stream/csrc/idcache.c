/*
 * idcache.c: the pretoken -> ids cache (see idcache.h).
 *
 * Open addressing with linear probing over 8-byte slots, made at most half full for
 * max_entries and never grown: a slot holds the high 32 bits of its key's hash (compared
 * before any key is touched) and 1 + the index of its entry (0: empty).  An entry holds
 * its key's first eight bytes (most keys compare there) and where, in one arena of 32-bit
 * words, its key (padded to whole words) and then its ids are.  Emptying the cache is
 * clearing the slots and forgetting the entries and the arena.
 */
#include "idcache.h"

typedef struct {
    uint64_t head; /* the key's first eight bytes, zeros after a shorter key */
    uint32_t off;  /* of the key in the arena, in words; its ids follow it */
    uint8_t len, n_ids;
} entry_t;

struct bs_idcache {
    uint64_t *slots;
    size_t mask;
    entry_t *entries;
    uint32_t n, max_entries;
    uint32_t *arena;
    size_t used, cap; /* words */
    uint64_t generation;
    uint32_t refused; /* pretokens not cached since the cache filled */
};

#define ARENA_WORDS (BS_IDCACHE_MAX_BYTES / 4u)
#define TAG(hash) ((hash) & 0xFFFFFFFF00000000ull)
#define KEY_WORDS(len) (((size_t)(len) + 3) / 4)

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

bs_idcache *bs_idcache_new(uint32_t max_entries) {
    if (max_entries > (1u << 30)) max_entries = 1u << 30; /* 2 * max_entries slots must fit */
    bs_idcache *c = (bs_idcache *)calloc(1, sizeof(bs_idcache));
    if (!c) return NULL;
    size_t slots = 16;
    while (slots < 2 * (size_t)max_entries) slots *= 2;
    c->slots = (uint64_t *)calloc(slots, sizeof(uint64_t));
    c->entries = (entry_t *)bs_realloc_n(NULL, max_entries, sizeof(entry_t));
    if (!c->slots || !c->entries) {
        bs_idcache_free(c);
        return NULL;
    }
    c->mask = slots - 1;
    c->max_entries = max_entries;
    return c;
}

void bs_idcache_free(bs_idcache *c) {
    if (!c) return;
    free(c->slots);
    free(c->entries);
    free(c->arena);
    free(c);
}

size_t bs_idcache_len(const bs_idcache *c) { return c->n; }

uint64_t bs_idcache_generation(const bs_idcache *c) { return c->generation; }

/* Up to eight bytes of p[0:n) as a number, zeros after them (in the host's byte order: the
 * cache never leaves the process).  `readable`: the bytes from p that may be read. */
static inline uint64_t load_word(const uint8_t *p, size_t n, size_t readable) {
    uint64_t w = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (readable >= 8) { /* one load and a mask: no branch on the length */
        memcpy(&w, p, 8);
        return n >= 8 ? w : w & ((1ull << (8 * n)) - 1);
    }
#endif
    memcpy(&w, p, n < 8 ? n : 8);
    return w;
}

static inline uint64_t hash_key(const uint8_t *key, size_t len, uint64_t head, size_t readable) {
    uint64_t h = (head ^ ((uint64_t)len << 56)) * 0x9E3779B97F4A7C15ull;
    for (size_t k = 8; k < len; k += 8)
        h = (h ^ (h >> 29) ^ load_word(key + k, len - k, readable - k)) * 0x9E3779B97F4A7C15ull;
    return hash64(h);
}

static inline const uint32_t *find(const bs_idcache *c, const uint8_t *key, size_t len, uint64_t head, uint64_t hash,
                                   size_t *n_ids) {
    if (len > BS_IDCACHE_MAX_KEY) return NULL;
    uint64_t s;
    for (size_t i = hash & c->mask; (s = c->slots[i]) != 0; i = (i + 1) & c->mask) {
        if (TAG(s) != TAG(hash)) continue;
        const entry_t *e = &c->entries[(uint32_t)s - 1];
        const uint32_t *at = c->arena + e->off;
        if (e->head == head && e->len == len && (len <= 8 || !memcmp((const uint8_t *)at + 8, key + 8, len - 8))) {
            *n_ids = e->n_ids;
            return at + KEY_WORDS(len);
        }
    }
    return NULL;
}

/* Starts loading the entry and the arena words of the first slot of `hash` with its tag. */
static inline void prefetch_entry(const bs_idcache *c, uint64_t hash) {
    uint64_t s = c->slots[hash & c->mask];
    if (s && TAG(s) == TAG(hash)) {
        const entry_t *e = &c->entries[(uint32_t)s - 1];
        PREFETCH(e);
        PREFETCH(c->arena + e->off);
    }
}

/* The entries are prefetched this far ahead of the lookup (their slots first, for all). */
#define ENTRY_AHEAD 8

void bs_idcache_lookup(const bs_idcache *c, const uint8_t *data, size_t len, const bs_span *spans, size_t n,
                       bs_idcache_found *found) {
    for (size_t k = 0; k < n; k++) {
        const uint8_t *key = data + spans[k].start;
        size_t klen = spans[k].end - spans[k].start;
        found[k].hash = hash_key(key, klen, load_word(key, klen, len - spans[k].start), len - spans[k].start);
        PREFETCH(&c->slots[found[k].hash & c->mask]);
    }
    for (size_t k = 0; k < n; k++) {
        if (k + ENTRY_AHEAD < n) prefetch_entry(c, found[k + ENTRY_AHEAD].hash);
        const uint8_t *key = data + spans[k].start;
        size_t klen = spans[k].end - spans[k].start;
        found[k].ids = find(c, key, klen, load_word(key, klen, len - spans[k].start), found[k].hash, &found[k].n_ids);
    }
}

const uint32_t *bs_idcache_get(const bs_idcache *c, const uint8_t *key, size_t len, uint64_t hash, size_t *n_ids) {
    return find(c, key, len, load_word(key, len, len), hash, n_ids);
}

static void empty(bs_idcache *c) {
    memset(c->slots, 0, (c->mask + 1) * sizeof(uint64_t));
    c->n = 0;
    c->used = 0;
    c->refused = 0;
    c->generation++;
}

int bs_idcache_put(bs_idcache *c, const uint8_t *key, size_t len, uint64_t hash, const uint32_t *ids, size_t n_ids) {
    if (len > BS_IDCACHE_MAX_KEY || n_ids > BS_IDCACHE_MAX_KEY + 1 || !c->max_entries) return BS_OK;
    size_t words = KEY_WORDS(len) + n_ids;
    if (c->n >= c->max_entries || c->used + words > ARENA_WORDS) {
        /* Full: the pretokens it holds came first and are mostly the frequent ones, so the
         * next ones are merged uncached -- until as many have been as it holds, when it is
         * emptied and fills again (text whose words change keeps a cache of its own).
         * Emptying it at once re-merged every frequent pretoken each time it filled. */
        if (c->refused < c->max_entries) {
            c->refused++;
            return BS_OK;
        }
        empty(c);
    }
    if (c->used + words > c->cap) {
        c->generation++; /* the arena may move */
        BS_RESERVE_OR_RETURN(c->arena, c->cap, c->used + words, 1024, ARENA_WORDS);
    }
    uint32_t *at = c->arena + c->used;
    memcpy(at, key, len);
    memcpy(at + KEY_WORDS(len), ids, n_ids * sizeof(uint32_t));
    entry_t *e = &c->entries[c->n];
    e->head = load_word(key, len, len);
    e->off = (uint32_t)c->used;
    e->len = (uint8_t)len;
    e->n_ids = (uint8_t)n_ids;
    size_t i = hash & c->mask;
    while (c->slots[i]) i = (i + 1) & c->mask;
    c->slots[i] = TAG(hash) | (uint64_t)(c->n + 1);
    c->n++;
    c->used += words;
    return BS_OK;
}

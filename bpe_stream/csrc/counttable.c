/*
 * counttable.c -- the pretoken count table (see counttable.h).
 *
 * Open addressing with linear probing over 8-byte slots: a slot holds the high 32 bits
 * of its key's hash (a tag compared before any key is touched) and 1 + the index of its
 * entry (0: empty).  Entries sit in insertion order in one array of 32-byte entries (the
 * key's first 8 bytes, its length, its count, the low 32 bits of its hash); their keys,
 * one after the other, in one byte arena.  The hash is wyhash-like, a multiplication per
 * 16 bytes, and keys compare as 8-byte words, so a key up to 8 bytes is decided by its
 * entry alone.  The slots are at most half full, so a probe is short, and growing them
 * re-slots the entries from the old slots without touching keys.
 */
#include "counttable.h"

#include "hugepages.h"
#include "scan.h"
#include "specials.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t count;
    uint64_t head; /* the key's first 8 bytes (zeros after a shorter key): most keys compare here */
    size_t off;    /* of its key in the arena */
    uint32_t len;
    uint32_t hash_lo; /* the low 32 bits of its hash (its slot holds the high 32): growing reads no key */
} entry_t; /* 32 bytes on a 64-bit machine: an entry never straddles a cache line */

struct bs_counttable {
    uint64_t *slots;
    size_t mask; /* slot capacity - 1, a power of two minus one */
    entry_t *entries;
    size_t n, entries_cap;
    uint8_t *keys;
    size_t keys_len, keys_cap;
    uint64_t total;
};

#define INITIAL_SLOTS 1024u
#define SPAN_BATCH 256u

#if defined(__GNUC__) || defined(__clang__)
#define HOT static inline __attribute__((always_inline))
#define COLD static __attribute__((noinline))
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define HOT static inline
#define COLD static
#define PREFETCH(p) ((void)(p))
#endif

/* Up to 8 bytes as a little-endian number (zeros above them). */
static inline uint64_t load_head(const uint8_t *p, size_t n) {
    uint64_t w = 0;
    if (n >= 8) {
        for (int k = 0; k < 8; k++) w |= (uint64_t)p[k] << (8 * k);
        return w;
    }
    switch (n) { /* falls through: byte k goes to bits 8k.. */
    case 7: w |= (uint64_t)p[6] << 48; /* fall through */
    case 6: w |= (uint64_t)p[5] << 40; /* fall through */
    case 5: w |= (uint64_t)p[4] << 32; /* fall through */
    case 4: w |= (uint64_t)p[3] << 24; /* fall through */
    case 3: w |= (uint64_t)p[2] << 16; /* fall through */
    case 2: w |= (uint64_t)p[1] << 8;  /* fall through */
    case 1: w |= (uint64_t)p[0];
    }
    return w;
}

/* load_head where 8 bytes from p may be read (the key may be shorter): one load and a
 * mask, computed without a branch on the length, which random pretoken lengths mispredict
 * (`n >= 8 ? w : masked` compiles to a branch). */
static inline uint64_t load_head_readable(const uint8_t *p, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    size_t k = n < 8 ? n : 8;
    memcpy(&w, p, 8);
    return w & (((1ull << (4 * k)) << (4 * k)) - 1); /* k == 8 keeps all 64 bits */
#else
    return load_head(p, n);
#endif
}

/* load_head_readable of a key of at least 1 byte: the mask from a table. */
static const uint64_t HEAD_MASK[9] = {0, 0xffull, 0xffffull, 0xffffffull, 0xffffffffull, 0xffffffffffull,
                                      0xffffffffffffull, 0xffffffffffffffull, ~0ull};
static inline uint64_t load_head_nonempty(const uint8_t *p, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    memcpy(&w, p, 8);
    return w & HEAD_MASK[n < 8 ? n : 8];
#else
    return load_head(p, n);
#endif
}

/* 8 bytes in the machine's order: hashed and compared, never ordered. */
static inline uint64_t load64(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* The 128-bit product of a and b, its halves xored (wyhash's mum). */
static inline uint64_t mum(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
    unsigned __int128 r = (unsigned __int128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
    uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    uint64_t lo = (mid << 32) | (uint32_t)ll;
    uint64_t hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return lo ^ hi;
#endif
}

#define K0 0xa0761d6478bd642full
#define K1 0xe7037ed1a0b428dbull
#define K2 0x8ebc6af09c88c6e3ull

/* The hash of a key whose first 8 bytes are `head` (wyhash-like: one multiplication for
 * a key up to 16 bytes, its last 8 read as one word that may overlap the head). */
HOT uint64_t hash_key(const uint8_t *p, size_t n, uint64_t head) {
    uint64_t seed = (uint64_t)n ^ K1;
    if (n <= 8) return mum(head ^ K0, seed);
    if (n <= 16) return mum(head ^ K0, load64(p + n - 8) ^ seed);
    size_t i = 0;
    for (; n - i > 16; i += 16) seed = mum(load64(p + i) ^ K2, load64(p + i + 8) ^ seed);
    return mum(load64(p + n - 16) ^ K0, load64(p + n - 8) ^ seed);
}

/* hash_key of a key of up to 16 bytes where 8 bytes from p may be read, without a branch on the length
 * (a key up to 8 bytes hashes its head with a zero word, as hash_key does). */
HOT uint64_t hash_key_readable(const uint8_t *p, size_t n, uint64_t head) {
    uint64_t longer = 0 - (uint64_t)(n > 8);
    uint64_t last = load64(p + (n & (size_t)longer) - (8 & (size_t)longer)) & longer;
    return mum(head ^ K0, last ^ ((uint64_t)n ^ K1));
}

/* Whether two keys of len > 8 bytes whose first 8 agree are the same: word by word, the
 * last word read where it ends (overlapping the one before). */
HOT int same_tail(const uint8_t *a, const uint8_t *b, size_t len) {
    size_t i = 8;
    for (; len - i > 8; i += 8)
        if (load64(a + i) != load64(b + i)) return 0;
    return load64(a + len - 8) == load64(b + len - 8);
}

HOT int same_key(const bs_counttable *t, const entry_t *e, const uint8_t *key, size_t len, uint64_t head) {
    return e->head == head && e->len == len && (len <= 8 || same_tail(t->keys + e->off, key, len));
}

bs_counttable *bs_ct_new(void) {
    bs_counttable *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->slots = bs_huge_zeroed(INITIAL_SLOTS * sizeof *t->slots);
    if (!t->slots) {
        free(t);
        return NULL;
    }
    t->mask = INITIAL_SLOTS - 1;
    return t;
}

void bs_ct_free(bs_counttable *t) {
    if (!t) return;
    bs_huge_free(t->slots, (t->mask + 1) * sizeof *t->slots);
    bs_huge_free(t->entries, t->entries_cap * sizeof *t->entries);
    bs_huge_free(t->keys, t->keys_cap);
    free(t);
}

void bs_ct_clear(bs_counttable *t) {
    memset(t->slots, 0, (t->mask + 1) * sizeof *t->slots);
    t->n = t->keys_len = 0;
    t->total = 0;
}

size_t bs_ct_len(const bs_counttable *t) { return t->n; }
uint64_t bs_ct_total(const bs_counttable *t) { return t->total; }

/* A key's first slot: its hash rotated by 32 bits, masked.  Up to 2**32 slots that is the
 * high half, the tag its slot keeps, so growing needs no more than the old slots. */
static inline size_t home(uint64_t hash, size_t mask) { return (size_t)((hash >> 32) | (hash << 32)) & mask; }
static inline size_t first_slot(const bs_counttable *t, uint64_t hash) { return home(hash, t->mask); }
static inline uint64_t slot_tag(uint64_t hash) { return hash & 0xffffffff00000000ull; }

/* Doubles the slots (when adding one more entry would make them more than half full).
 * The old slots are read in order, the new ones written nearly in order (a key's new home
 * is its old one or that plus the old capacity); up to 2**32 slots the tags are all it
 * takes, beyond that each entry's low hash bits are read too (prefetched a few slots
 * ahead).  No key is read. */
#define GROW_AHEAD 16
COLD int grow_slots(bs_counttable *t) {
    size_t cap = t->mask + 1;
    if (cap > SIZE_MAX / 2 / sizeof *t->slots) return BS_CT_ENOMEM;
    uint64_t *slots = bs_huge_zeroed(2 * cap * sizeof *slots);
    if (!slots) return BS_CT_ENOMEM;
    const uint64_t *old = t->slots;
    size_t mask = 2 * cap - 1;
    int tags_do = (uint64_t)mask <= UINT32_MAX;
    for (size_t i = 0; i < cap; i++) {
        uint64_t s = old[i];
        if (!s) continue;
        uint64_t hash = slot_tag(s);
        if (!tags_do) {
            if (i + GROW_AHEAD < cap && old[i + GROW_AHEAD]) PREFETCH(&t->entries[(uint32_t)old[i + GROW_AHEAD] - 1]);
            hash |= t->entries[(uint32_t)s - 1].hash_lo;
        }
        size_t j = home(hash, mask);
        while (slots[j]) j = (j + 1) & mask;
        slots[j] = s;
    }
    bs_huge_free(t->slots, cap * sizeof *t->slots);
    t->slots = slots;
    t->mask = mask;
    return BS_CT_OK;
}

/* Room for `more` elements of `size` bytes after the `len` used in buf (capacity *cap):
 * *out is buf, or its reallocation with a doubled capacity.  On failure buf is unchanged. */
static int reserve(void *buf, size_t *cap, size_t len, size_t more, size_t size, void **out) {
    *out = buf;
    if (more <= *cap - len) return BS_CT_OK;
    if (more > SIZE_MAX / size - len) return BS_CT_ENOMEM;
    size_t want = *cap ? *cap : 256;
    while (want < len + more) want = want > SIZE_MAX / size / 2 ? len + more : 2 * want;
    void *p = bs_huge_resize(buf, *cap * size, want * size);
    if (!p) return BS_CT_ENOMEM;
    *out = p;
    *cap = want;
    return BS_CT_OK;
}

/* A new entry for a key not in the table, whose empty slot is i. */
COLD int insert_new(bs_counttable *t, const uint8_t *key, size_t len, uint64_t head, uint64_t hash, uint64_t n,
                    size_t i) {
    /* everything that can fail comes before anything changes */
    if (t->n >= BS_CT_MAX_ENTRIES || len > UINT32_MAX) return BS_CT_ELIMIT;
    int rc;
    void *p;
    if ((rc = reserve(t->entries, &t->entries_cap, t->n, 1, sizeof *t->entries, &p)) != BS_CT_OK) return rc;
    t->entries = p;
    if ((rc = reserve(t->keys, &t->keys_cap, t->keys_len, len, 1, &p)) != BS_CT_OK) return rc;
    t->keys = p;
    if (2 * (t->n + 1) > t->mask + 1) { /* the slots grow: find the key's empty slot anew */
        if ((rc = grow_slots(t)) != BS_CT_OK) return rc;
        i = first_slot(t, hash);
        while (t->slots[i]) i = (i + 1) & t->mask;
    }
    entry_t *e = &t->entries[t->n];
    e->count = n;
    e->head = head;
    e->off = t->keys_len;
    e->len = (uint32_t)len;
    e->hash_lo = (uint32_t)hash;
    if (len) memcpy(t->keys + t->keys_len, key, len);
    t->keys_len += len;
    t->slots[i] = slot_tag(hash) | (uint64_t)(t->n + 1);
    t->n++;
    t->total += n;
    return BS_CT_OK;
}

/* The probe: the entry of the key whose head and hash are known, or NULL with *free_slot
 * the empty slot where it would go. */
static inline entry_t *find_entry(bs_counttable *t, const uint8_t *key, size_t len, uint64_t head, uint64_t hash,
                                  size_t *free_slot) {
    uint64_t tag = slot_tag(hash);
    const uint64_t *slots = t->slots;
    size_t mask = t->mask, i = home(hash, mask);
    for (uint64_t s; (s = slots[i]) != 0; i = (i + 1) & mask) {
        if ((s & 0xffffffff00000000ull) != tag) continue;
        entry_t *e = &t->entries[(uint32_t)s - 1];
        if (same_key(t, e, key, len, head)) return e;
    }
    *free_slot = i;
    return NULL;
}

/* bs_ct_add with the key's head and hash known: the probe inline, a new entry out of line. */
HOT int add_hashed(bs_counttable *t, const uint8_t *key, size_t len, uint64_t head, uint64_t hash, uint64_t n) {
    if (n > UINT64_MAX - t->total) return BS_CT_ELIMIT;
    size_t i;
    entry_t *e = find_entry(t, key, len, head, hash, &i);
    if (!e) return insert_new(t, key, len, head, hash, n, i);
    e->count += n; /* <= total, which did not overflow */
    t->total += n;
    return BS_CT_OK;
}

int bs_ct_add(bs_counttable *t, const uint8_t *key, size_t len, uint64_t n) {
    uint64_t head = load_head(key, len);
    return add_hashed(t, key, len, head, hash_key(key, len, head), n);
}

/* Counts a batch of spans of data.  The lookups of a batch are independent, so memory
 * latency is hidden by prefetching: first every key's slot, then, a few keys ahead of
 * the one being counted, the entry its slot points to. */
#define ENTRY_AHEAD 8

/* Prefetches the entry of the key's first slot: where a key that is in the table most
 * often is (the slots are at most half full), found with one read and no tag compared. */
HOT void prefetch_entry(const bs_counttable *t, uint64_t hash) {
    uint64_t s = t->slots[first_slot(t, hash)];
    PREFETCH(&t->entries[(uint32_t)s - (s != 0)]); /* (an empty slot: the first entry, no branch) */
}
/* Up to SPAN_BATCH keys to add, hashed, their slots prefetched (batch_put), then added
 * with their entries prefetched a few keys ahead (add_keys): feed's pretokens and a
 * packed table's entries alike. */
typedef struct {
    const uint8_t *key[SPAN_BATCH];
    size_t len[SPAN_BATCH];
    uint64_t head[SPAN_BATCH], hash[SPAN_BATCH], n[SPAN_BATCH];
} key_batch;

HOT void batch_put(const bs_counttable *t, key_batch *b, size_t k, const uint8_t *key, size_t len, uint64_t head,
                   uint64_t n) {
    b->key[k] = key;
    b->len[k] = len;
    b->head[k] = head;
    b->hash[k] = hash_key(key, len, head);
    b->n[k] = n;
    PREFETCH(&t->slots[first_slot(t, b->hash[k])]);
}

/* Adds the batch's first `count` keys; *added gets how many were, also when one fails. */
static int add_keys(bs_counttable *t, const key_batch *b, size_t count, uint64_t *added) {
    for (size_t k = 0; k < count; k++) {
        if (k + ENTRY_AHEAD < count) prefetch_entry(t, b->hash[k + ENTRY_AHEAD]);
        int rc = add_hashed(t, b->key[k], b->len[k], b->head[k], b->hash[k], b->n[k]);
        if (rc != BS_CT_OK) return rc;
        ++*added;
    }
    return BS_CT_OK;
}

/* Feed's keys, each counted once: the same two passes as add_keys, leaner.  The first
 * pass hashes the spans and prefetches their slots; the second probes, a few keys ahead
 * prefetching the entry of each key's first slot.  A key found adds 1 to its entry, and the
 * batch's found keys to the total at the end (the batch fits: checked before it starts). */
typedef struct {
    uint64_t head[SPAN_BATCH], hash[SPAN_BATCH];
} span_hashes;

/* The count of an entry already found; the first slot's entry, or the new one of a key not
 * in the table.  Returns 1 for found, 0 for a new entry, or an error. */
HOT int add_once(bs_counttable *t, const uint8_t *key, size_t len, uint64_t head, uint64_t hash) {
    size_t i;
    entry_t *e = find_entry(t, key, len, head, hash, &i);
    if (!e) return insert_new(t, key, len, head, hash, 1, i);
    e->count++; /* <= total + the batch, which does not overflow */
    return 1;
}

/* Counts spans[0:count) of data (each at most max_bytes long, if max_bytes); *counted is
 * raised by how many were counted, also when one fails. */
static int add_spans(bs_counttable *t, const uint8_t *data, size_t data_len, const bs_span *spans, size_t count,
                     uint64_t *counted) {
    if (count == 0) return BS_CT_OK;
    if ((uint64_t)count > UINT64_MAX - t->total) { /* near the limit: one key at a time, each checked */
        key_batch b;
        for (size_t k = 0; k < count; k++) {
            const uint8_t *key = data + spans[k].start;
            size_t len = spans[k].end - spans[k].start;
            batch_put(t, &b, k, key, len, load_head(key, len), 1);
        }
        return add_keys(t, &b, count, counted);
    }
    span_hashes h;
    if (data_len >= 8 && spans[count - 1].start <= data_len - 8) {
        /* 8 bytes can be read from every key's start (the spans are in order): its head
         * is one load and a mask, its hash (up to 16 bytes) without a branch on its length */
        for (size_t k = 0; k < count; k++) {
            size_t start = spans[k].start, len = spans[k].end - start;
            const uint8_t *key = data + start;
            uint64_t head = load_head_nonempty(key, len);
            uint64_t hash = len > 16 ? hash_key(key, len, head) : hash_key_readable(key, len, head);
            h.head[k] = head;
            h.hash[k] = hash;
            PREFETCH(&t->slots[first_slot(t, hash)]);
        }
    } else {
        for (size_t k = 0; k < count; k++) {
            size_t start = spans[k].start, len = spans[k].end - start;
            const uint8_t *key = data + start;
            uint64_t head = load_head(key, len);
            uint64_t hash = hash_key(key, len, head);
            h.head[k] = head;
            h.hash[k] = hash;
            PREFETCH(&t->slots[first_slot(t, hash)]);
        }
    }
    uint64_t found = 0;
    int rc = BS_CT_OK;
    size_t k = 0;
    for (; k < count; k++) {
        if (k + ENTRY_AHEAD < count) prefetch_entry(t, h.hash[k + ENTRY_AHEAD]);
        rc = add_once(t, data + spans[k].start, spans[k].end - spans[k].start, h.head[k], h.hash[k]);
        if (rc < 0) break;
        found += (uint64_t)rc;
        rc = BS_CT_OK;
    }
    t->total += found;
    *counted += k;
    return rc;
}

/* Counts the pieces of the pretoken data[start:end) longer than max_bytes, one by one. */
COLD int add_pieces(bs_counttable *t, const uint8_t *data, size_t start, size_t end, size_t max_bytes,
                    uint64_t *counted) {
    while (start < end) {
        size_t e = bs_piece_end(data, start, end, max_bytes);
        int rc = bs_ct_add(t, data + start, e - start, 1);
        if (rc != BS_CT_OK) return rc;
        ++*counted;
        start = e;
    }
    return BS_CT_OK;
}

/* bs_scan_pieces's pieces, found here: the spans of a batch are counted up to a pretoken
 * longer than the cap, then its pieces, then the rest (the same keys in the same order). */
int bs_ct_feed(bs_counttable *t, int pattern, size_t max_bytes, const uint8_t *data, size_t len, uint64_t *pretokens) {
    bs_span spans[SPAN_BATCH];
    size_t pos = 0;
    uint64_t counted = 0;
    ptrdiff_t got;
    int rc = BS_CT_OK;
    if (!bs_scan_pattern_name(pattern)) rc = BS_CT_EPATTERN;
    while (rc == BS_CT_OK && (got = bs_scan(pattern, data, len, &pos, spans, SPAN_BATCH)) > 0) {
        size_t done = 0, n = (size_t)got;
        for (size_t i = 0; max_bytes && rc == BS_CT_OK; i++) {
            while (i < n && spans[i].end - spans[i].start <= max_bytes) i++;
            if (i == n) break;
            if ((rc = add_spans(t, data, len, spans + done, i - done, &counted)) == BS_CT_OK)
                rc = add_pieces(t, data, spans[i].start, spans[i].end, max_bytes, &counted);
            done = i + 1;
        }
        if (rc == BS_CT_OK) rc = add_spans(t, data, len, spans + done, n - done, &counted);
    }
    if (pretokens) *pretokens = counted;
    return rc;
}

int bs_ct_feed_between(bs_counttable *t, const bs_specials *specials, int pattern, size_t max_bytes,
                       const uint8_t *data, size_t len, uint64_t *pretokens, uint64_t *found) {
    uint64_t counted = 0, specials_found = 0;
    size_t pos = 0, match_len;
    uint32_t id;
    int rc = BS_CT_OK;
    while (rc == BS_CT_OK) {
        size_t at = bs_specials_find(specials, data, len, pos, &match_len, &id);
        uint64_t stretch = 0;
        if (at > pos) rc = bs_ct_feed(t, pattern, max_bytes, data + pos, at - pos, &stretch);
        counted += stretch;
        if (at >= len) break;
        specials_found++;
        pos = at + match_len;
    }
    if (pretokens) *pretokens = counted;
    if (found) *found = specials_found;
    return rc;
}

void bs_ct_entry(const bs_counttable *t, size_t i, const uint8_t **key, size_t *len, uint64_t *count) {
    const entry_t *e = &t->entries[i];
    *key = t->keys + e->off;
    *len = e->len;
    *count = e->count;
}

void bs_ct_prefetch(const bs_counttable *t, size_t i, int with_key) {
    const entry_t *e = &t->entries[i];
    if (with_key)
        PREFETCH(t->keys + e->off);
    else
        PREFETCH(e);
}

/* Sorting: an MSD radix sort of (head, head2, key, length, index) items on the keys' first
 * 16 bytes (two big-endian numbers, zeros after a shorter key), a byte at a time from the
 * first; a bucket of at most MSD_SMALL items is insertion-sorted, and a bucket whose 16
 * bytes all tie is ordered by the rest of its keys (compare_items).  b"a" and b"a\0" tie
 * on their bytes and the length orders them.  The second 8 bytes are read when the items
 * are made, in the arena's order: multilingual keys often share their first 8 bytes (a
 * space and three Cyrillic letters), and an LSD sort on 8 bytes that broke those ties with
 * memcmp at random addresses took 31 ms for 420k keys, against 24 ms for this one. */
typedef struct {
    uint64_t head, head2; /* the key's bytes 0-7 and 8-15, big-endian: these order most keys */
    const uint8_t *key;
    uint32_t len, index;
} sort_item;

static int compare_items(const void *pa, const void *pb) {
    const sort_item *a = pa, *b = pb;
    if (a->head != b->head) return a->head < b->head ? -1 : 1;
    if (a->head2 != b->head2) return a->head2 < b->head2 ? -1 : 1;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n > 16 ? memcmp(a->key + 16, b->key + 16, n - 16) : 0;
    if (c) return c;
    return a->len < b->len ? -1 : (a->len > b->len);
}

#define MSD_SMALL 48 /* buckets up to this many items are insertion-sorted */

static void insertion_sort(sort_item *run, size_t n) {
    for (size_t i = 1; i < n; i++) {
        sort_item x = run[i];
        size_t j = i;
        for (; j > 0 && compare_items(&x, &run[j - 1]) < 0; j--) run[j] = run[j - 1];
        run[j] = x;
    }
}

/* Byte `level` (0-15) of an item's key, zero past its end. */
static inline unsigned item_byte(const sort_item *it, int level) {
    return level < 8 ? (unsigned)(it->head >> (56 - 8 * level)) & 0xff
                     : (unsigned)(it->head2 >> (56 - 8 * (level - 8))) & 0xff;
}

/* Sorts items[0..n), whose keys agree before byte `level`, with n items of scratch. */
static void msd_sort(sort_item *items, sort_item *scratch, size_t n, int level) {
    for (;;) {
        if (n <= MSD_SMALL) {
            insertion_sort(items, n);
            return;
        }
        if (level == 16) { /* the first 16 bytes tie: the rest of the keys decide */
            qsort(items, n, sizeof *items, compare_items);
            return;
        }
        size_t count[256] = {0};
        for (size_t i = 0; i < n; i++) count[item_byte(&items[i], level)]++;
        if (count[item_byte(&items[0], level)] == n) { /* one bucket: the next byte */
            level++;
            continue;
        }
        size_t start[256], sum = 0;
        for (int v = 0; v < 256; v++) {
            start[v] = sum;
            sum += count[v];
        }
        for (size_t i = 0; i < n; i++) scratch[start[item_byte(&items[i], level)]++] = items[i];
        memcpy(items, scratch, n * sizeof *items);
        for (size_t v = 0, lo = 0; v < 256; lo += count[v], v++)
            if (count[v] > 1) msd_sort(items + lo, scratch + lo, count[v], level + 1);
        return;
    }
}

int bs_ct_sorted(const bs_counttable *t, uint32_t *order) {
    size_t n = t->n;
    if (n == 0) return BS_CT_OK;
    if (n > SIZE_MAX / 2 / sizeof(sort_item)) return BS_CT_ENOMEM;
    size_t items_size = 2 * n * sizeof(sort_item);
    sort_item *items = bs_huge_zeroed(items_size); /* the items, and as many of scratch */
    if (!items) return BS_CT_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const entry_t *e = &t->entries[i];
        const uint8_t *key = t->keys + e->off;
        uint64_t head2 = e->len > 8 ? load_head(key + 8, e->len - 8) : 0;
        items[i] = (sort_item){__builtin_bswap64(e->head), __builtin_bswap64(head2), key, e->len, (uint32_t)i};
    }
    msd_sort(items, items + n, n, 0);
    for (size_t i = 0; i < n; i++) order[i] = items[i].index;
    bs_huge_free(items, items_size);
    return BS_CT_OK;
}

size_t bs_ct_packed_size(const bs_counttable *t) { return t->keys_len + BS_CT_PACKED_OVERHEAD * t->n; }

void bs_ct_pack(const bs_counttable *t, uint8_t *out) {
    for (size_t i = 0; i < t->n; i++) {
        const entry_t *e = &t->entries[i];
        out = bs_ct_put_entry(out, e->len ? t->keys + e->off : NULL, e->len, e->count); /* keys is NULL while every key is b"" */
    }
}

int bs_ct_merge_packed(bs_counttable *t, const uint8_t *buf, size_t len) {
    key_batch b;
    size_t off = 0, n = 0, klen;
    uint64_t added = 0, count;
    const uint8_t *key;
    int rc = BS_CT_OK, got;
    while ((got = bs_ct_next_entry(buf, len, &off, &key, &klen, &count)) != 0) {
        if (got < 0) {
            rc = got;
            break;
        }
        batch_put(t, &b, n, key, klen, load_head(key, klen), count);
        if (++n == SPAN_BATCH) {
            if ((rc = add_keys(t, &b, n, &added)) != BS_CT_OK) return rc;
            n = 0;
        }
    }
    /* the entries before a fault are merged, as the header says */
    int last = add_keys(t, &b, n, &added);
    return last != BS_CT_OK ? last : rc;
}

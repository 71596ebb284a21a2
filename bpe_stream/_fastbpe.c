/*
 * _fastbpe: the BPE merge loop in C, with a cost that follows pair occurrences.
 *
 * Same rules and results as the pure-Python trainer (bpe_stream/trainer.py), which stays
 * as the reference and the fallback when this extension is not built.
 *
 * Layout.  All symbols of all distinct words sit in one array, word after word.  Each
 * position has its symbol, and links to the previous and next live position of its word
 * (NONE at the word's ends), and its word's frequency (see Node).  Each pair has a 32-byte
 * record: its count (weighted by word frequency, 64-bit) and the list of positions where
 * it starts (two held in place, more allocated).  Entries of that list may be stale (the
 * pair is no longer there): a merge checks each one and skips those.
 *
 * A merge of (a, b) into z visits only the positions of (a, b), in increasing order, so
 * within a word it replaces non-overlapping occurrences left to right (aaa -> [aa, a]).
 * At an occurrence i (next j, previous x, after-next y) the counts of (x, a) and (b, y)
 * fall, those of (x, z) and (z, y) rise, i takes z and j is unlinked.  Work is therefore
 * proportional to the occurrences, not to the length of the words that hold them.
 *
 * Priority: a binary heap of (count, pair) entries, best first: the highest count, then
 * the tie-break rule -- max-bytes: the greatest (bytes(left), bytes(right)); min-bytes:
 * the smallest; min-ids: the smallest (id(left), id(right)).  Pairs with the same bytes
 * (a word-end marker spelled like a byte) fall back to the smaller ids.  Counts of existing pairs
 * only fall (only pairs with the new token are born), so invalidation is lazy: a popped
 * entry whose count is stale is pushed back with the current count.  Rare pairs wait in a
 * cold list outside the heap (see offer).
 *
 * Speed comes from memory access, not arithmetic: a merge prefetches the positions it will
 * visit, resolves the neighbours' pair records once per merge (see resolve_sides), and the
 * pair table compares hash tags before touching a record.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* BPE_STREAM_DEBUG=1: the loop's two phases timed and its visits counted, on stderr. */
static double dbg_now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double dbg_t0, dbg_t1;

#define NONE 0xFFFFFFFFu
/* Counts are int64.  A pair's count never exceeds the first count of the byte pair at the
 * same places (every occurrence of (X, Y) sits where the last byte of X met the first of
 * Y), so checking the counts as they are first summed keeps every later one in range. */
#define COUNT_OVERFLOW "the pair counts of these words pass 2**63-1, the limit of the merge loop's 64-bit counts"
#define DEAD 0xFFFFFFFFu
#define EMPTY_KEY 0xFFFFFFFFFFFFFFFFull

enum { TB_MAX_BYTES = 0, TB_MIN_BYTES = 1, TB_MIN_IDS = 2 };
#define SMALL 512u

/* A pair's record, 32 bytes: there are millions of pairs, most of them rare.  Its list of
 * occurrences (positions, or word ids in the PairIndex) holds up to INLINE_OCC items in
 * place -- no allocation for the many pairs seen once or twice -- and beyond that lives in
 * an allocation whose first item is its capacity. */
#define INLINE_OCC 2u
typedef struct {
    uint64_t key;
    int64_t count;
    union {
        uint32_t inl[INLINE_OCC];
        uint32_t *ext; /* ext[0]: capacity; items from ext[1] */
    } occ;
    uint32_t n_occ;
    uint32_t pushed_at; /* the merge (1-based) after which it was last pushed as a new pair */
} PairRec;

/* A list taken out of its record (see occ_take). */
typedef struct {
    uint32_t *items, *owned;
    uint32_t len;
    uint32_t inl[INLINE_OCC];
} OccList;

typedef struct {
    int64_t count;
    uint64_t key; /* the pair, so comparisons stay inside the heap array */
    uint32_t rec;
} HeapEntry;

typedef struct {
    uint8_t *data;
    uint32_t len;
} Token;

/* A position: its symbol, its neighbours' positions, and its word's frequency when that
 * fits in 31 bits (nearly always), else BIG_FREQ | word id -- so a visit needs no second
 * random load from the frequency array. */
typedef struct {
    uint32_t sym, prev, next, wfreq;
} Node;
#define BIG_FREQ 0x80000000u
/* How many occurrences ahead a merge prefetches positions: each visit is a random load
 * from a table far larger than the cache, and overlapping those loads is what makes the
 * loop fast on long words (measured on multi_25M: 8-16 hide most of the latency). */
#define PREFETCH_AHEAD 12

/* The neighbours seen in one merge, on one side: for each symbol s next to an occurrence,
 * the count change of the pair that loses (s, a) or (b, s) -- the pair that gains (s, z) or
 * (z, s) changes by the opposite -- and how many positions the gaining pair receives.
 * Counts are applied once per neighbour at the end of the merge instead of once per
 * occurrence, and the pair records are resolved there too, in one pass with prefetching:
 * on long words most neighbours are new pairs, and each lookup is a cache miss. */
typedef struct {
    uint32_t key, r_old, r_new, n_pos;
    uint32_t at; /* where its positions go in the gaining pair's list */
    int64_t delta; /* of the gaining pair */
} SideEntry;

typedef struct {
    uint32_t *slot_entry, *slot_gen;
    uint32_t mask, gen;
    SideEntry *entries;
    uint32_t n, cap;
} Side;

/* A position the gaining pair of a side entry receives: entry index, high bit = right side. */
typedef struct {
    uint32_t entry, pos;
} Pending;
#define RIGHT_SIDE 0x80000000u

typedef struct {
    /* positions */
    Node *nodes;
    uint64_t n_pos;
    int64_t *freq;
    /* pairs */
    PairRec *recs;
    uint32_t n_recs, cap_recs;
    uint64_t *table; /* open addressing, see pair_get */
    uint64_t table_mask;
    /* heap, and the cold pairs kept out of it (see offer) */
    HeapEntry *heap;
    uint64_t heap_len, heap_cap;
    uint32_t *cold;
    uint64_t n_cold, cap_cold;
    int64_t cold_below;
    /* tokens */
    Token *tokens;
    uint32_t n_tokens, cap_tokens;
    int tie_break;
    Side left, right;
    Pending *pend;
    uint64_t n_pend, cap_pend;
} State;

static inline uint32_t *occ_items(PairRec *p) {
    return p->n_occ <= INLINE_OCC ? p->occ.inl : p->occ.ext + 1;
}

static inline uint32_t occ_cap(const PairRec *p) {
    return p->n_occ <= INLINE_OCC ? INLINE_OCC : p->occ.ext[0];
}

/* Makes the list `len` items long (new items undefined), growing its room to at least
 * `room` items; -1 when out of memory. */
static int occ_resize(PairRec *p, uint32_t len, uint32_t room) {
    if (len <= INLINE_OCC && p->n_occ <= INLINE_OCC) { p->n_occ = len; return 0; }
    if (p->n_occ <= INLINE_OCC) { /* inline -> allocated */
        if (room < len) room = len;
        uint32_t *e = (uint32_t *)malloc(((size_t)room + 1) * sizeof(uint32_t));
        if (!e) return -1;
        e[0] = room;
        memcpy(e + 1, p->occ.inl, p->n_occ * sizeof(uint32_t));
        p->occ.ext = e;
    } else if (len > p->occ.ext[0]) {
        if (room < len) room = len;
        uint32_t *e = (uint32_t *)realloc(p->occ.ext, ((size_t)room + 1) * sizeof(uint32_t));
        if (!e) return -1;
        e[0] = room;
        p->occ.ext = e;
    }
    p->n_occ = len; /* an allocated list stays allocated, even when short */
    if (len <= INLINE_OCC) { /* ...except that a short length means inline: move back */
        uint32_t *e = p->occ.ext, keep[INLINE_OCC];
        memcpy(keep, e + 1, len * sizeof(uint32_t));
        free(e);
        memcpy(p->occ.inl, keep, len * sizeof(uint32_t));
    }
    return 0;
}

static int occ_push(PairRec *p, uint32_t v) {
    uint32_t n = p->n_occ;
    if (n >= occ_cap(p) || n == INLINE_OCC) { /* grow by half: millions of lists, slack adds up */
        if (occ_resize(p, n + 1, n + n / 2 + 2) < 0) return -1;
    } else {
        p->n_occ = n + 1;
    }
    occ_items(p)[n] = v;
    return 0;
}

static void occ_free(PairRec *p) {
    if (p->n_occ > INLINE_OCC) free(p->occ.ext);
    p->n_occ = 0;
}

/* Moves the record's list out (the record is left empty); free with occ_release. */
static void occ_take(PairRec *p, OccList *out) {
    out->len = p->n_occ;
    if (p->n_occ <= INLINE_OCC) {
        memcpy(out->inl, p->occ.inl, sizeof(out->inl));
        out->items = out->inl;
        out->owned = NULL;
    } else {
        out->owned = p->occ.ext;
        out->items = p->occ.ext + 1;
    }
    p->n_occ = 0;
}

static void occ_release(OccList *l) {
    free(l->owned);
    l->owned = NULL;
}

/* Makes room for one more item in a growable array (doubling from `first`); -1 when out of memory. */
static int grow_for_one(void **data, uint64_t len, uint64_t *cap, size_t item, uint64_t first) {
    if (len < *cap) return 0;
    uint64_t n = *cap ? *cap * 2 : first;
    void *d = realloc(*data, n * item);
    if (!d) return -1;
    *data = d;
    *cap = n;
    return 0;
}

static inline uint64_t hash64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Pair table slots hold a record index (low 32 bits) and the top half of the key's hash
 * (high 32 bits): a probe compares hashes before it loads a record, so looking up a pair
 * that does not exist yet (every pair with a new token) touches no record at all. */
#define SLOT_EMPTY 0xFFFFFFFFFFFFFFFFull

static int table_init(State *s) {
    s->table = (uint64_t *)malloc(1024 * sizeof(uint64_t));
    if (!s->table) return -1;
    memset(s->table, 0xFF, 1024 * sizeof(uint64_t));
    s->table_mask = 1023;
    return 0;
}

static int table_grow(State *s) {
    uint64_t new_size = (s->table_mask + 1) * 2;
    uint64_t *t = (uint64_t *)malloc(new_size * sizeof(uint64_t));
    if (!t) return -1;
    memset(t, 0xFF, new_size * sizeof(uint64_t));
    for (uint64_t old = 0; old <= s->table_mask; old++) {
        uint64_t slot = s->table[old];
        if (slot == SLOT_EMPTY) continue;
        uint64_t h = hash64(s->recs[(uint32_t)slot].key) & (new_size - 1);
        while (t[h] != SLOT_EMPTY) h = (h + 1) & (new_size - 1);
        t[h] = slot;
    }
    free(s->table);
    s->table = t;
    s->table_mask = new_size - 1;
    return 0;
}

/* The record of pair `key`, created with count 0 when `create`; NONE when absent or on error. */
static uint32_t pair_get(State *s, uint64_t key, int create) {
    uint64_t hv = hash64(key), tag = hv & 0xFFFFFFFF00000000ull;
    uint64_t h = hv & s->table_mask;
    for (;;) {
        uint64_t slot = s->table[h];
        if (slot == SLOT_EMPTY) break;
        if ((slot & 0xFFFFFFFF00000000ull) == tag && s->recs[(uint32_t)slot].key == key) return (uint32_t)slot;
        h = (h + 1) & s->table_mask;
    }
    if (!create) return NONE;
    if ((uint64_t)(s->n_recs + 1) * 4 > (s->table_mask + 1) * 3) { /* load 3/4: the hash tags keep probes cheap */
        if (table_grow(s) < 0) return NONE;
        h = hv & s->table_mask;
        while (s->table[h] != SLOT_EMPTY) h = (h + 1) & s->table_mask;
    }
    if (s->n_recs == s->cap_recs) {
        uint32_t cap = s->cap_recs ? s->cap_recs * 2 : 1024;
        PairRec *d = (PairRec *)realloc(s->recs, (size_t)cap * sizeof(PairRec));
        if (!d) return NONE;
        s->recs = d;
        s->cap_recs = cap;
    }
    uint32_t r = s->n_recs++;
    s->recs[r].key = key;
    s->recs[r].count = 0;
    s->recs[r].n_occ = 0;
    s->recs[r].pushed_at = 0;
    s->table[h] = tag | r;
    return r;
}

static inline int bytes_cmp(const Token *x, const Token *y) {
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->data, y->data, n) : 0;
    if (c) return c;
    return (x->len > y->len) - (x->len < y->len);
}

/* 1 when entry p must come out of the heap before entry q. */
static inline int better(const State *s, const HeapEntry *p, const HeapEntry *q) {
    if (p->count != q->count) return p->count > q->count;
    uint64_t kp = p->key, kq = q->key;
    if (s->tie_break == TB_MIN_IDS) return kp < kq;
    const Token *lp = &s->tokens[kp >> 32], *rp = &s->tokens[kp & 0xFFFFFFFFu];
    const Token *lq = &s->tokens[kq >> 32], *rq = &s->tokens[kq & 0xFFFFFFFFu];
    int c = bytes_cmp(lp, lq);
    if (!c) c = bytes_cmp(rp, rq);
    if (!c) return kp < kq; /* same bytes (a marker spelled like a byte): the smaller ids */
    return s->tie_break == TB_MAX_BYTES ? c > 0 : c < 0;
}

static void sift_down(State *s, uint64_t i) {
    HeapEntry *h = s->heap;
    uint64_t n = s->heap_len;
    HeapEntry e = h[i];
    for (;;) {
        uint64_t l = 2 * i + 1;
        if (l >= n) break;
        uint64_t best = l;
        if (l + 1 < n && better(s, &h[l + 1], &h[l])) best = l + 1;
        if (!better(s, &h[best], &e)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = e;
}

static void sift_up(State *s, uint64_t i) {
    HeapEntry *h = s->heap;
    HeapEntry e = h[i];
    while (i > 0) {
        uint64_t parent = (i - 1) / 2;
        if (!better(s, &e, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
}

static int heap_push(State *s, int64_t count, uint32_t rec) {
    if (grow_for_one((void **)&s->heap, s->heap_len, &s->heap_cap, sizeof(HeapEntry), 1024) < 0) return -1;
    s->heap[s->heap_len].count = count;
    s->heap[s->heap_len].key = s->recs[rec].key;
    s->heap[s->heap_len].rec = rec;
    sift_up(s, s->heap_len++);
    return 0;
}

static void heap_pop(State *s) {
    s->heap[0] = s->heap[--s->heap_len];
    if (s->heap_len) sift_down(s, 0);
}

/* Most pairs are rare (counts of a few units) and will never be merged, yet each would be
 * a heap entry that every pop sifts past.  A pair whose count is below `cold_below` is kept
 * in a plain list instead.  This is exact because a pair's count only rises in the merge
 * that creates its newer token, where it is offered with its final count: a cold pair stays
 * below the threshold.  So while the heap's best count is at least `cold_below` it beats
 * every cold pair; when it falls below (or the heap empties), thaw() lowers the threshold
 * and moves the cold pairs that reach it into the heap. */
static int offer(State *s, int64_t count, uint32_t rec) {
    if (count >= s->cold_below) return heap_push(s, count, rec);
    if (grow_for_one((void **)&s->cold, s->n_cold, &s->cap_cold, sizeof(uint32_t), 1024) < 0) return -1;
    s->cold[s->n_cold++] = rec;
    return 0;
}

/* The first threshold, from the best count before any merge: pairs under 1/65536 of it
 * are rarely merged by any usual vocabulary size, and a thaw is cheap when they are. */
static void set_cold_threshold(State *s) {
    int64_t best = 0;
    for (uint32_t r = 0; r < s->n_recs; r++)
        if (s->recs[r].count > best) best = s->recs[r].count;
    s->cold_below = best >> 16;
    if (s->cold_below < 2) s->cold_below = 0;
}

static int thaw(State *s) {
    s->cold_below /= 4;
    if (s->cold_below < 2) s->cold_below = 0;
    uint64_t kept = 0;
    for (uint64_t k = 0; k < s->n_cold; k++) {
        uint32_t r = s->cold[k];
        int64_t c = s->recs[r].count;
        if (c <= 0) continue;
        if (c < s->cold_below) s->cold[kept++] = r;
        else if (heap_push(s, c, r) < 0) return -1;
    }
    s->n_cold = kept;
    if (!kept) { free(s->cold); s->cold = NULL; s->cap_cold = 0; }
    return 0;
}

/* Pops the best pair whose count is at least max(min_count, 1): 1 and its record and
 * count, 0 when there is none, -1 when out of memory.  Lazy invalidation: an entry whose
 * count is stale (counts only fall) is offered again with the current count. */
static int pop_best(State *s, int64_t min_count, uint32_t *rec, int64_t *count) {
    for (;;) {
        if (s->n_cold && (!s->heap_len || s->heap[0].count < s->cold_below)) {
            if (thaw(s) < 0) return -1;
            continue;
        }
        if (!s->heap_len) return 0;
        HeapEntry top = s->heap[0];
        int64_t current = s->recs[top.rec].count;
        if (current != top.count) {
            heap_pop(s);
            if (current > 0 && offer(s, current, top.rec) < 0) return -1;
            continue;
        }
        if (current < min_count || current <= 0) return 0;
        heap_pop(s);
        *rec = top.rec;
        *count = current;
        return 1;
    }
}

static int add_token(State *s, const uint8_t *data, uint32_t len) {
    if (s->n_tokens == s->cap_tokens) {
        uint32_t cap = s->cap_tokens ? s->cap_tokens * 2 : 1024;
        Token *d = (Token *)realloc(s->tokens, (size_t)cap * sizeof(Token));
        if (!d) return -1;
        s->tokens = d;
        s->cap_tokens = cap;
    }
    uint8_t *copy = (uint8_t *)malloc(len ? len : 1);
    if (!copy) return -1;
    if (len) memcpy(copy, data, len);
    s->tokens[s->n_tokens].data = copy;
    s->tokens[s->n_tokens].len = len;
    s->n_tokens++;
    return 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void state_free(State *s) {
    free(s->nodes); free(s->freq);
    free(s->left.slot_entry); free(s->left.slot_gen); free(s->left.entries);
    free(s->right.slot_entry); free(s->right.slot_gen); free(s->right.entries); free(s->pend);
    if (s->recs)
        for (uint32_t r = 0; r < s->n_recs; r++) occ_free(&s->recs[r]);
    free(s->recs); free(s->table); free(s->heap); free(s->cold);
    if (s->tokens)
        for (uint32_t t = 0; t < s->n_tokens; t++) free(s->tokens[t].data);
    free(s->tokens);
}

/* Sorts positions ascending: qsort, or for long lists an LSD radix sort in two passes
 * of 16 bits (a run already in order is left alone).  Returns -1 when out of memory. */
static int sort_positions(uint32_t *v, uint32_t n) {
    uint32_t k;
    for (k = 1; k < n && v[k - 1] <= v[k]; k++) {}
    if (k >= n) return 0;
    if (n < (1u << 17)) { /* radix sort's counting tables cost more below this */
        qsort(v, n, sizeof(uint32_t), cmp_u32);
        return 0;
    }
    uint32_t *tmp = (uint32_t *)malloc((size_t)n * sizeof(uint32_t));
    if (!tmp) return -1;
    uint32_t *src = v, *dst = tmp;
    for (int shift = 0; shift < 32; shift += 16) {
        static uint32_t count[65536];
        memset(count, 0, sizeof(count));
        for (uint32_t i = 0; i < n; i++) count[(src[i] >> shift) & 0xFFFF]++;
        uint32_t sum = 0;
        for (uint32_t d = 0; d < 65536; d++) {
            uint32_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (uint32_t i = 0; i < n; i++) dst[count[(src[i] >> shift) & 0xFFFF]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    /* two passes: the result is back in v */
    free(tmp);
    return 0;
}

static uint64_t dbg_visits, dbg_valid;

static int side_reset(Side *sd) {
    if (!sd->slot_entry) {
        sd->mask = 255;
        sd->slot_entry = (uint32_t *)malloc(256 * sizeof(uint32_t));
        sd->slot_gen = (uint32_t *)calloc(256, sizeof(uint32_t));
        if (!sd->slot_entry || !sd->slot_gen) return -1;
    }
    sd->n = 0;
    if (++sd->gen == 0) { /* wrapped: forget every slot */
        memset(sd->slot_gen, 0, ((size_t)sd->mask + 1) * sizeof(uint32_t));
        sd->gen = 1;
    }
    return 0;
}

static int side_grow(Side *sd) {
    uint32_t size = (sd->mask + 1) * 2;
    uint32_t *se = (uint32_t *)malloc((size_t)size * sizeof(uint32_t));
    uint32_t *sg = (uint32_t *)calloc(size, sizeof(uint32_t));
    if (!se || !sg) { free(se); free(sg); return -1; }
    free(sd->slot_entry);
    free(sd->slot_gen);
    sd->slot_entry = se;
    sd->slot_gen = sg;
    sd->mask = size - 1;
    sd->gen = 1;
    for (uint32_t e = 0; e < sd->n; e++) {
        uint32_t h = (uint32_t)hash64(sd->entries[e].key) & sd->mask;
        while (sd->slot_gen[h] == sd->gen) h = (h + 1) & sd->mask;
        sd->slot_gen[h] = sd->gen;
        sd->slot_entry[h] = e;
    }
    return 0;
}

/* The index of neighbour `key`'s entry (created empty), or NONE when out of memory. */
static uint32_t side_entry(Side *sd, uint32_t key) {
    uint32_t h = (uint32_t)hash64(key) & sd->mask;
    while (sd->slot_gen[h] == sd->gen) {
        uint32_t e = sd->slot_entry[h];
        if (sd->entries[e].key == key) return e;
        h = (h + 1) & sd->mask;
    }
    if ((sd->n + 1) * 2 > sd->mask + 1) {
        if (side_grow(sd) < 0) return NONE;
        h = (uint32_t)hash64(key) & sd->mask;
        while (sd->slot_gen[h] == sd->gen) h = (h + 1) & sd->mask;
    }
    if (sd->n == sd->cap) {
        uint32_t cap = sd->cap ? sd->cap * 2 : 256;
        SideEntry *d = (SideEntry *)realloc(sd->entries, (size_t)cap * sizeof(SideEntry));
        if (!d) return NONE;
        sd->entries = d;
        sd->cap = cap;
    }
    SideEntry *e = &sd->entries[sd->n];
    e->key = key;
    e->r_old = e->r_new = NONE;
    e->n_pos = 0;
    e->delta = 0;
    sd->slot_gen[h] = sd->gen;
    sd->slot_entry[h] = sd->n;
    return sd->n++;
}

static int pend_push(State *s, uint32_t entry, uint32_t pos) {
    if (grow_for_one((void **)&s->pend, s->n_pend, &s->cap_pend, sizeof(Pending), 4096) < 0) return -1;
    s->pend[s->n_pend].entry = entry;
    s->pend[s->n_pend].pos = pos;
    s->n_pend++;
    return 0;
}

static inline uint64_t side_pair(uint32_t sym, uint32_t other, int right) {
    return right ? ((uint64_t)other << 32) | sym : ((uint64_t)sym << 32) | other;
}

/* Resolves the pair records of every side entry (prefetching the table slots a few
 * entries ahead), reserves room in the gaining pairs' position lists, then appends the
 * pending positions and applies the count changes. */
static int resolve_sides(State *s, uint32_t a, uint32_t b, uint32_t z) {
    Side *sides[2] = {&s->left, &s->right};
    for (int side = 0; side < 2; side++) {
        Side *sd = sides[side];
        uint32_t lost = side ? b : a; /* (s, a) on the left, (b, s) on the right */
        for (uint32_t e = 0; e < sd->n; e++) {
            if (e + 8 < sd->n) {
                uint32_t k = sd->entries[e + 8].key;
                __builtin_prefetch(&s->table[hash64(side_pair(k, lost, side)) & s->table_mask], 0, 1);
                __builtin_prefetch(&s->table[hash64(side_pair(k, z, side)) & s->table_mask], 0, 1);
            }
            SideEntry *en = &sd->entries[e];
            en->r_old = pair_get(s, side_pair(en->key, lost, side), 1);
            en->r_new = pair_get(s, side_pair(en->key, z, side), 1);
            if (en->r_old == NONE || en->r_new == NONE) return -1;
            /* Exact room: a pair with z gains positions only in this merge.  (One record can
             * be the gaining pair of two entries, (z, z) on both sides, hence len += n_pos.) */
            PairRec *p = &s->recs[en->r_new];
            uint64_t need = (uint64_t)p->n_occ + en->n_pos;
            if (need >= NONE) return -1;
            en->at = p->n_occ;
            if (occ_resize(p, (uint32_t)need, (uint32_t)need) < 0) return -1;
        }
    }
    for (uint64_t k = 0; k < s->n_pend; k++) {
        Pending p = s->pend[k];
        SideEntry *en = (p.entry & RIGHT_SIDE) ? &s->right.entries[p.entry & ~RIGHT_SIDE] : &s->left.entries[p.entry];
        occ_items(&s->recs[en->r_new])[en->at++] = p.pos;
    }
    s->n_pend = 0;
    return 0;
}

/* Applies the merge of record `r` = (a, b) as token z; returns 0 or -1 (no memory).
 * `born` receives the records of the pairs with z that gained occurrences. */
static int apply_merge(State *s, uint32_t r, uint32_t z, uint32_t **born, uint32_t *cap_born, uint32_t *n_born) {
    uint64_t key = s->recs[r].key;
    uint32_t a = (uint32_t)(key >> 32), b = (uint32_t)(key & 0xFFFFFFFFu);
    OccList occ;
    occ_take(&s->recs[r], &occ);
    /* Within a word, occurrences of (a, a) overlap and must go left to right; those of
     * (a, b) with a != b cannot overlap, and their order changes no count (sorting them
     * all was measured slower: the lists are mostly in order already). */
    if (occ.len > 1 && a == b && sort_positions(occ.items, occ.len) < 0) { occ_release(&occ); return -1; }
    if (side_reset(&s->left) < 0 || side_reset(&s->right) < 0) { occ_release(&occ); return -1; }
    Node *nd = s->nodes;
    dbg_visits += occ.len;
    for (uint32_t k = 0; k < occ.len; k++) {
        if (k + PREFETCH_AHEAD < occ.len) __builtin_prefetch(&nd[occ.items[k + PREFETCH_AHEAD]], 1, 1);
        uint32_t i = occ.items[k];
        if (nd[i].sym != a) continue; /* stale, or a duplicate already merged (z != a) */
        uint32_t j = nd[i].next;
        if (j == NONE || nd[j].sym != b) continue;
        dbg_valid++;
        uint32_t wf = nd[i].wfreq;
        int64_t f = (wf & BIG_FREQ) ? s->freq[wf & ~BIG_FREQ] : (int64_t)wf;
        uint32_t x = nd[i].prev, y = nd[j].next;
        if (x != NONE) {
            uint32_t e = side_entry(&s->left, nd[x].sym);
            if (e == NONE || pend_push(s, e, x) < 0) goto fail;
            s->left.entries[e].delta += f;
            s->left.entries[e].n_pos++;
        }
        if (y != NONE) {
            uint32_t e = side_entry(&s->right, nd[y].sym);
            if (e == NONE || pend_push(s, e | RIGHT_SIDE, i) < 0) goto fail;
            s->right.entries[e].delta += f;
            s->right.entries[e].n_pos++;
        }
        nd[i].sym = z;
        nd[j].sym = DEAD;
        nd[i].next = y;
        if (y != NONE) nd[y].prev = i;
    }
    occ_release(&occ);
    if (resolve_sides(s, a, b, z) < 0) goto fail;
    uint64_t need = (uint64_t)s->left.n + s->right.n + 1;
    if (need > *cap_born) {
        uint32_t *t = (uint32_t *)realloc(*born, need * sizeof(uint32_t));
        if (!t) return -1;
        *born = t;
        *cap_born = (uint32_t)need;
    }
    *n_born = 0;
    Side *sides[2] = {&s->left, &s->right};
    for (int side = 0; side < 2; side++) {
        for (uint32_t e = 0; e < sides[side]->n; e++) {
            SideEntry *en = &sides[side]->entries[e];
            s->recs[en->r_old].count -= en->delta;
            s->recs[en->r_new].count += en->delta;
            if (en->delta) (*born)[(*n_born)++] = en->r_new;
        }
    }
    s->recs[r].count = 0;
    return 0;
fail:
    occ_release(&occ);
    s->n_pend = 0;
    return -1;
}

static const char *TRAIN_DOC =
    "train(words, width, tokens, max_merges, min_count, tie_break, forced, callback, every)\n"
    "--\n\n"
    "words: a list [symbols, word_ends, freqs], emptied as soon as the loop holds its own copy\n"
    "(so that, given the only references, their memory is freed before the merges): symbols,\n"
    "all words' symbols, word after word, `width` bytes each (1: a bytearray of byte\n"
    "symbols, 4: array('I')); word_ends: array('Q') of each word's end offset; freqs:\n"
    "array('q') of word frequencies; tokens: list of bytes, the token bytes of ids\n"
    "0..len(tokens)-1 (new ids follow); forced: list of (left, right)\n"
    "merges to apply first, in order (resume); callback(list of (left, right, count)) is\n"
    "called every `every` merges and at the end.  Returns the number of merges done.";

#define IN_SYM(i) (width == 1 ? (uint32_t)in_sym8[i] : in_sym32[i])
static PyObject *train(PyObject *self, PyObject *args) {
    Py_buffer symbols = {0}, word_ends = {0}, freqs = {0};
    PyObject *words, *tokens, *forced, *callback;
    long long max_merges, min_count;
    int tie_break, width;
    Py_ssize_t every;
    if (!PyArg_ParseTuple(args, "O!iO!LLiO!On", &PyList_Type, &words, &width, &PyList_Type, &tokens,
                          &max_merges, &min_count, &tie_break, &PyList_Type, &forced, &callback, &every))
        return NULL;
    if (PyList_GET_SIZE(words) != 3) {
        PyErr_SetString(PyExc_ValueError, "words must be [symbols, word_ends, freqs]");
        return NULL;
    }
    if (PyObject_GetBuffer(PyList_GET_ITEM(words, 0), &symbols, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(PyList_GET_ITEM(words, 1), &word_ends, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&symbols);
        return NULL;
    }
    if (PyObject_GetBuffer(PyList_GET_ITEM(words, 2), &freqs, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&symbols);
        PyBuffer_Release(&word_ends);
        return NULL;
    }
    State s;
    memset(&s, 0, sizeof(s));
    s.tie_break = tie_break;
    PyObject *result = NULL, *chunk = NULL;
    uint32_t *touched = NULL, cap_touched = 0, n_touched = 0, *small = NULL;
    if (width != 1 && width != 4) {
        PyErr_SetString(PyExc_ValueError, "width must be 1 or 4");
        goto done;
    }
    uint64_t n_pos = (uint64_t)symbols.len / (uint64_t)width;
    uint64_t n_words = (uint64_t)word_ends.len / sizeof(uint64_t);
    const uint32_t *in_sym32 = (const uint32_t *)symbols.buf;
    const uint8_t *in_sym8 = (const uint8_t *)symbols.buf;
    const uint64_t *ends = (const uint64_t *)word_ends.buf;
    const int64_t *in_freq = (const int64_t *)freqs.buf;
    if ((uint64_t)symbols.len % (uint64_t)width || (uint64_t)freqs.len / sizeof(int64_t) != n_words || (n_words && ends[n_words - 1] != n_pos)) {
        PyErr_SetString(PyExc_ValueError, "symbols, word_ends and freqs disagree");
        goto done;
    }
    if (n_pos >= NONE || n_words >= BIG_FREQ) {
        PyErr_SetString(PyExc_OverflowError, "too many symbols for the in-memory trainer");
        goto done;
    }
    if (every < 1) every = 1;
    s.n_pos = n_pos;
    dbg_t0 = dbg_now();
    s.nodes = (Node *)malloc((size_t)(n_pos ? n_pos : 1) * sizeof(Node));
    s.freq = (int64_t *)malloc((n_words ? n_words : 1) * sizeof(int64_t));
    if (!s.nodes || !s.freq || table_init(&s) < 0) { PyErr_NoMemory(); goto done; }
    Py_ssize_t n_tok = PyList_GET_SIZE(tokens);
    for (Py_ssize_t t = 0; t < n_tok; t++) {
        PyObject *item = PyList_GET_ITEM(tokens, t);
        if (!PyBytes_Check(item)) { PyErr_SetString(PyExc_TypeError, "tokens must be bytes"); goto done; }
        if (add_token(&s, (const uint8_t *)PyBytes_AS_STRING(item), (uint32_t)PyBytes_GET_SIZE(item)) < 0) {
            PyErr_NoMemory(); goto done;
        }
    }
    memcpy(s.freq, in_freq, n_words * sizeof(int64_t));
    /* Before any merge every pair is of small ids (bytes, specials): a direct table of
     * their records saves a hash lookup per position. */
    small = (uint32_t *)malloc(SMALL * SMALL * sizeof(uint32_t));
    if (!small) { PyErr_NoMemory(); goto done; }
    memset(small, 0xFF, SMALL * SMALL * sizeof(uint32_t));
    uint64_t start = 0;
    for (uint64_t w = 0; w < n_words; w++) {
        uint64_t end = ends[w];
        if (end < start || end > n_pos) { PyErr_SetString(PyExc_ValueError, "word_ends must increase"); goto done; }
        for (uint64_t i = start; i < end; i++) {
            uint32_t sym = IN_SYM(i);
            if (sym >= s.n_tokens) { PyErr_SetString(PyExc_ValueError, "symbol id without a token"); goto done; }
            s.nodes[i].sym = sym;
            s.nodes[i].wfreq = s.freq[w] >= 0 && s.freq[w] < (int64_t)BIG_FREQ ? (uint32_t)s.freq[w] : BIG_FREQ | (uint32_t)w;
            s.nodes[i].prev = i > start ? (uint32_t)(i - 1) : NONE;
            s.nodes[i].next = i + 1 < end ? (uint32_t)(i + 1) : NONE;
            if (i + 1 < end && s.freq[w] > 0) {
                uint32_t x = sym, y = IN_SYM(i + 1), r;
                uint64_t key = ((uint64_t)x << 32) | y;
                if (x < SMALL && y < SMALL) {
                    r = small[x * SMALL + y];
                    if (r == NONE) r = small[x * SMALL + y] = pair_get(&s, key, 1);
                } else {
                    r = pair_get(&s, key, 1);
                }
                if (r == NONE || occ_push(&s.recs[r], (uint32_t)i) < 0) { PyErr_NoMemory(); goto done; }
                if (s.recs[r].count > INT64_MAX - s.freq[w]) { PyErr_SetString(PyExc_ValueError, COUNT_OVERFLOW); goto done; }
                s.recs[r].count += s.freq[w];
            }
        }
        start = end;
    }
    free(small);
    small = NULL;
    /* The input is copied into the nodes: let it go before the merges grow the tables. */
    PyBuffer_Release(&symbols);
    PyBuffer_Release(&word_ends);
    PyBuffer_Release(&freqs);
    if (PyList_SetSlice(words, 0, PyList_GET_SIZE(words), NULL) < 0) goto done;
    dbg_t1 = dbg_now();
    set_cold_threshold(&s);
    for (uint32_t r = 0; r < s.n_recs; r++)
        if (s.recs[r].count > 0 && offer(&s, s.recs[r].count, r) < 0) { PyErr_NoMemory(); goto done; }

    chunk = PyList_New(0);
    if (!chunk) goto done;
    long long done_merges = 0;
    Py_ssize_t n_forced = PyList_GET_SIZE(forced);
    while (done_merges < max_merges) {
        uint32_t r;
        int64_t count;
        if (done_merges < n_forced) {
            unsigned long long left, right;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(forced, done_merges), "KK", &left, &right)) goto done;
            if (left >= s.n_tokens || right >= s.n_tokens) {
                PyErr_SetString(PyExc_ValueError, "forced merge names an unknown token");
                goto done;
            }
            r = pair_get(&s, ((uint64_t)left << 32) | right, 1);
            if (r == NONE) { PyErr_NoMemory(); goto done; }
            count = s.recs[r].count;
        } else {
            int got = pop_best(&s, min_count, &r, &count);
            if (got < 0) { PyErr_NoMemory(); goto done; }
            if (!got) break;
        }
        uint64_t key = s.recs[r].key;
        uint32_t a = (uint32_t)(key >> 32), b = (uint32_t)(key & 0xFFFFFFFFu);
        uint32_t z = s.n_tokens;
        {
            Token ta = s.tokens[a], tb = s.tokens[b];
            uint8_t *buf = (uint8_t *)malloc(ta.len + tb.len + 1);
            if (!buf) { PyErr_NoMemory(); goto done; }
            memcpy(buf, ta.data, ta.len);
            memcpy(buf + ta.len, tb.data, tb.len);
            int rc = add_token(&s, buf, ta.len + tb.len);
            free(buf);
            if (rc < 0) { PyErr_NoMemory(); goto done; }
        }
        if (apply_merge(&s, r, z, &touched, &cap_touched, &n_touched) < 0) { PyErr_NoMemory(); goto done; }
        /* push each pair born in this merge once, with its final count */
        for (uint32_t k = 0; k < n_touched; k++) {
            uint32_t t = touched[k];
            if (s.recs[t].count > 0 && s.recs[t].pushed_at != (uint32_t)(done_merges + 1)) {
                s.recs[t].pushed_at = (uint32_t)(done_merges + 1);
                if (offer(&s, s.recs[t].count, t) < 0) { PyErr_NoMemory(); goto done; }
            }
        }
        PyObject *m = Py_BuildValue("(IIL)", a, b, (long long)count);
        if (!m || PyList_Append(chunk, m) < 0) { Py_XDECREF(m); goto done; }
        Py_DECREF(m);
        done_merges++;
        if (done_merges % every == 0) {
            PyObject *rv = PyObject_CallFunctionObjArgs(callback, chunk, NULL);
            if (!rv) goto done;
            Py_DECREF(rv);
            Py_DECREF(chunk);
            chunk = PyList_New(0);
            if (!chunk) goto done;
            if (PyErr_CheckSignals() < 0) goto done;
        }
    }
    if (PyList_GET_SIZE(chunk)) {
        PyObject *rv = PyObject_CallFunctionObjArgs(callback, chunk, NULL);
        if (!rv) goto done;
        Py_DECREF(rv);
    }
    result = PyLong_FromLongLong(done_merges);
    if (getenv("BPE_STREAM_DEBUG"))
        fprintf(stderr, "merge loop: init %.3f s, merges %.3f s, %llu occurrences visited, %llu merged, %u pairs, heap %llu\n",
                dbg_t1 - dbg_t0, dbg_now() - dbg_t1, (unsigned long long)dbg_visits, (unsigned long long)dbg_valid, s.n_recs, (unsigned long long)s.heap_len);
    dbg_visits = dbg_valid = 0;
done:
    Py_XDECREF(chunk);
    free(touched);
    free(small);
    state_free(&s);
    PyBuffer_Release(&symbols);
    PyBuffer_Release(&word_ends);
    PyBuffer_Release(&freqs);
    return result;
}
#undef IN_SYM


/* ------------------------------------------------------------------------------------
 * PairIndex: the in-memory half of the out-of-core trainer.
 *
 * The symbol sequences live elsewhere (an LMDB table, read and rewritten by Python);
 * this object holds only what must be in memory: each pair's 64-bit count, the ids of
 * the words that may hold it (packed uint32 arrays; an id may be stale and is then
 * skipped), the heap with the same order and lazy invalidation as train(), and the
 * token bytes for the tie-break.  Sequences travel as little-endian uint32 arrays.
 * ------------------------------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    State s;
    uint64_t merges; /* merges begun, for pushed_at */
    int merging;      /* between begin_merge and end_merge */
    uint32_t ma, mb, mz;
    uint32_t *born, n_born, cap_born; /* records of pairs born in the open merge */
    /* Per word, a 64-bit signature of the pairs it holds (one bit per pair, by hash),
     * recomputed whenever the word is rewritten: a pair appears in a word only when the
     * word is rewritten, so the signature always covers the word's pairs, and take_words
     * drops the ids whose signature lacks the pair -- stale entries that would otherwise
     * cost a read from disk each (about 40% of the reads on generated web text). */
    uint64_t *sig;
    uint32_t n_sig, cap_sig;
} PairIndexObject;

static inline uint64_t pair_bit(uint64_t key) {
    return 1ull << (hash64(key) >> 58);
}

static uint64_t signature(const uint32_t *sym, size_t n) {
    uint64_t sig = 0;
    for (size_t i = 0; i + 1 < n; i++) sig |= pair_bit(((uint64_t)sym[i] << 32) | sym[i + 1]);
    return sig;
}

static int set_signature(PairIndexObject *self, uint32_t wid, uint64_t sig) {
    if (wid >= self->cap_sig) {
        uint64_t cap = self->cap_sig ? self->cap_sig : 1024;
        while (cap <= wid) cap *= 2;
        if (cap > 0xFFFFFFFFull) cap = 0xFFFFFFFFull;
        uint64_t *d = (uint64_t *)realloc(self->sig, cap * sizeof(uint64_t));
        if (!d) return -1;
        self->sig = d;
        self->cap_sig = (uint32_t)cap;
    }
    while (self->n_sig <= wid) self->sig[self->n_sig++] = ~0ull; /* unknown words: keep */
    self->sig[wid] = sig;
    return 0;
}

static void PairIndex_dealloc(PairIndexObject *self) {
    state_free(&self->s);
    free(self->born);
    free(self->sig);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int PairIndex_init(PairIndexObject *self, PyObject *args, PyObject *kwds) {
    PyObject *tokens;
    int tie_break;
    static char *kwlist[] = {"tokens", "tie_break", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!i", kwlist, &PyList_Type, &tokens, &tie_break)) return -1;
    state_free(&self->s);
    memset(&self->s, 0, sizeof(State));
    self->s.tie_break = tie_break;
    self->merges = 0;
    self->merging = 0;
    free(self->born);
    self->born = NULL;
    self->n_born = self->cap_born = 0;
    free(self->sig);
    self->sig = NULL;
    self->n_sig = self->cap_sig = 0;
    if (table_init(&self->s) < 0) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(tokens); t++) {
        PyObject *item = PyList_GET_ITEM(tokens, t);
        if (!PyBytes_Check(item)) { PyErr_SetString(PyExc_TypeError, "tokens must be bytes"); return -1; }
        if (add_token(&self->s, (const uint8_t *)PyBytes_AS_STRING(item), (uint32_t)PyBytes_GET_SIZE(item)) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

static int push_wid(PairRec *p, uint32_t wid) {
    if (p->n_occ && occ_items(p)[p->n_occ - 1] == wid) return 0;
    return occ_push(p, wid);
}

static PyObject *PairIndex_add_word(PairIndexObject *self, PyObject *args) {
    unsigned int wid;
    long long freq;
    Py_buffer seq;
    if (!PyArg_ParseTuple(args, "ILy*", &wid, &freq, &seq)) return NULL;
    const uint32_t *sym = (const uint32_t *)seq.buf;
    Py_ssize_t n = seq.len / 4;
    for (Py_ssize_t i = 0; i + 1 < n; i++) {
        if (sym[i] >= self->s.n_tokens || sym[i + 1] >= self->s.n_tokens) {
            PyBuffer_Release(&seq);
            PyErr_SetString(PyExc_ValueError, "symbol id without a token");
            return NULL;
        }
        uint32_t r = pair_get(&self->s, ((uint64_t)sym[i] << 32) | sym[i + 1], 1);
        if (r == NONE || push_wid(&self->s.recs[r], wid) < 0) { PyBuffer_Release(&seq); return PyErr_NoMemory(); }
        if (freq < 0 || self->s.recs[r].count > INT64_MAX - freq) {
            PyBuffer_Release(&seq);
            PyErr_SetString(PyExc_ValueError, COUNT_OVERFLOW);
            return NULL;
        }
        self->s.recs[r].count += freq;
    }
    if (set_signature(self, wid, signature(sym, (size_t)n)) < 0) { PyBuffer_Release(&seq); return PyErr_NoMemory(); }
    PyBuffer_Release(&seq);
    Py_RETURN_NONE;
}

static PyObject *PairIndex_build_heap(PairIndexObject *self, PyObject *noargs) {
    State *s = &self->s;
    set_cold_threshold(s);
    for (uint32_t r = 0; r < s->n_recs; r++) {
        PairRec *p = &s->recs[r]; /* trim the growth slack */
        if (p->n_occ > INLINE_OCC && p->occ.ext[0] > p->n_occ) {
            uint32_t *d = (uint32_t *)realloc(p->occ.ext, ((size_t)p->n_occ + 1) * sizeof(uint32_t));
            if (d) { p->occ.ext = d; d[0] = p->n_occ; }
        }
        if (s->recs[r].count > 0 && offer(s, s->recs[r].count, r) < 0) return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

/* The best pair as (left, right, count), or None when no pair reaches min_count. */
static PyObject *PairIndex_pop_best(PairIndexObject *self, PyObject *args) {
    long long min_count;
    if (!PyArg_ParseTuple(args, "L", &min_count)) return NULL;
    State *s = &self->s;
    uint32_t r;
    int64_t count;
    int got = pop_best(s, min_count, &r, &count);
    if (got < 0) return PyErr_NoMemory();
    if (!got) Py_RETURN_NONE;
    uint64_t key = s->recs[r].key;
    return Py_BuildValue("(IIL)", (unsigned)(key >> 32), (unsigned)(key & 0xFFFFFFFFu), (long long)count);
}

static PyObject *PairIndex_count(PairIndexObject *self, PyObject *args) {
    unsigned int a, b;
    if (!PyArg_ParseTuple(args, "II", &a, &b)) return NULL;
    uint32_t r = pair_get(&self->s, ((uint64_t)a << 32) | b, 0);
    return PyLong_FromLongLong(r == NONE ? 0 : self->s.recs[r].count);
}

static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* Removes and returns the keys (word id, 4 bytes big-endian) of the words that may hold
 * (a, b), sorted and distinct, packed in one bytes object (4 bytes a key: a frequent pair
 * may name millions of words, and one object a key would cost ten times the memory). */
static PyObject *PairIndex_take_words(PairIndexObject *self, PyObject *args) {
    unsigned int a, b;
    if (!PyArg_ParseTuple(args, "II", &a, &b)) return NULL;
    uint32_t r = pair_get(&self->s, ((uint64_t)a << 32) | b, 0);
    if (r == NONE) return PyBytes_FromStringAndSize(NULL, 0);
    OccList l;
    occ_take(&self->s.recs[r], &l);
    uint32_t *items = l.items;
    if (l.len > 1) qsort(items, l.len, sizeof(uint32_t), cmp_u32);
    uint32_t n = 0;
    uint64_t bit = pair_bit(((uint64_t)a << 32) | b);
    for (uint32_t k = 0; k < l.len; k++) {
        uint32_t w = items[k];
        if (n && items[n - 1] == w) continue;
        if (w < self->n_sig && !(self->sig[w] & bit)) continue; /* certainly stale */
        items[n++] = w;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * 4);
    if (!out) { occ_release(&l); return NULL; }
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t w = items[k];
        o[4 * k] = (uint8_t)(w >> 24);
        o[4 * k + 1] = (uint8_t)(w >> 16);
        o[4 * k + 2] = (uint8_t)(w >> 8);
        o[4 * k + 3] = (uint8_t)w;
    }
    occ_release(&l);
    return out;
}

/* split_keys(packed, start, stop): the 4-byte keys start..stop-1 of a packed key string
 * (take_words' result) as a list of bytes, the form Cursor.getmulti takes. */
static PyObject *split_keys(PyObject *self, PyObject *args) {
    Py_buffer packed;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "y*nn", &packed, &start, &stop)) return NULL;
    Py_ssize_t n = packed.len / 4;
    if (start < 0) start = 0;
    if (stop > n) stop = n;
    PyObject *out = PyList_New(stop > start ? stop - start : 0);
    for (Py_ssize_t k = start; out && k < stop; k++) {
        PyObject *key = PyBytes_FromStringAndSize((const char *)packed.buf + 4 * k, 4);
        if (!key) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, k - start, key);
    }
    PyBuffer_Release(&packed);
    return out;
}

/* A merge of (a, b) into a new token z runs as begin_merge(a, b), then merge_rows(rows)
 * on the words of the pair in as many slices as the caller likes (so memory stays
 * bounded), then end_merge().  Rows are (key, value) rows of the sequence table (key: word
 * id, 4 bytes big-endian; value: count, 8 bytes little-endian, then the symbols).
 * merge_rows replaces the non-overlapping occurrences of (a, b) left to right, updates the
 * counts and word lists and returns the rows of the words that changed, ready for
 * Cursor.putmulti.  end_merge pushes the pairs born in the merge with their final counts:
 * pushing them earlier, with a count that a later slice raises, would break the heap's
 * rule that an entry's count is never below the pair's current count. */
static PyObject *PairIndex_begin_merge(PairIndexObject *self, PyObject *args) {
    unsigned int a, b;
    if (!PyArg_ParseTuple(args, "II", &a, &b)) return NULL;
    State *s = &self->s;
    if (self->merging) { PyErr_SetString(PyExc_RuntimeError, "a merge is already open"); return NULL; }
    if (a >= s->n_tokens || b >= s->n_tokens) { PyErr_SetString(PyExc_ValueError, "unknown token"); return NULL; }
    uint32_t z = s->n_tokens;
    Token ta = s->tokens[a], tb = s->tokens[b];
    uint8_t *buf = (uint8_t *)malloc(ta.len + tb.len + 1);
    if (!buf) return PyErr_NoMemory();
    memcpy(buf, ta.data, ta.len);
    memcpy(buf + ta.len, tb.data, tb.len);
    int rc = add_token(s, buf, ta.len + tb.len);
    free(buf);
    if (rc < 0) return PyErr_NoMemory();
    self->merges++;
    self->merging = 1;
    self->ma = a;
    self->mb = b;
    self->mz = z;
    self->n_born = 0;
    return PyLong_FromUnsignedLong(z);
}

static PyObject *PairIndex_merge_rows(PairIndexObject *self, PyObject *args) {
    PyObject *items;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &items)) return NULL;
    if (!self->merging) { PyErr_SetString(PyExc_RuntimeError, "call begin_merge first"); return NULL; }
    State *s = &self->s;
    uint32_t a = self->ma, b = self->mb, z = self->mz;
    PyObject *changed = PyList_New(0);
    if (!changed) return NULL;
    uint32_t *out = NULL;
    size_t cap_out = 0;
    Py_ssize_t n_items = PyList_GET_SIZE(items);
    for (Py_ssize_t k = 0; k < n_items; k++) {
        PyObject *row = PyList_GET_ITEM(items, k), *kobj, *vobj;
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 2) { PyErr_SetString(PyExc_TypeError, "rows are (key, value)"); goto fail; }
        kobj = PyTuple_GET_ITEM(row, 0);
        vobj = PyTuple_GET_ITEM(row, 1);
        if (!PyBytes_Check(kobj) || PyBytes_GET_SIZE(kobj) != 4 || !PyBytes_Check(vobj) || PyBytes_GET_SIZE(vobj) < 8 ||
            (PyBytes_GET_SIZE(vobj) - 8) % 4) {
            PyErr_SetString(PyExc_ValueError, "a sequence-table row is damaged");
            goto fail;
        }
        uint32_t wid = be32((const uint8_t *)PyBytes_AS_STRING(kobj));
        const uint8_t *val = (const uint8_t *)PyBytes_AS_STRING(vobj);
        int64_t f;
        memcpy(&f, val, 8);
        const uint32_t *w = (const uint32_t *)(val + 8);
        size_t n = (size_t)(PyBytes_GET_SIZE(vobj) - 8) / 4, m = 0;
        if (n + 2 > cap_out) {
            uint32_t *d = (uint32_t *)realloc(out, (n + 2) * sizeof(uint32_t));
            if (!d) { PyErr_NoMemory(); goto fail; }
            out = d;
            cap_out = n + 2;
        }
        /* at most two born-pair records per occurrence */
        if ((size_t)self->n_born + n + 2 > self->cap_born) {
            uint32_t cap = (uint32_t)(((size_t)self->n_born + n + 2) * 2);
            uint32_t *d = (uint32_t *)realloc(self->born, (size_t)cap * sizeof(uint32_t));
            if (!d) { PyErr_NoMemory(); goto fail; }
            self->born = d;
            self->cap_born = cap;
        }
        size_t i = 0;
        while (i < n) {
            if (i + 1 < n && w[i] == a && w[i + 1] == b) {
                if (m) {
                    uint32_t x = out[m - 1];
                    uint32_t r1 = pair_get(s, ((uint64_t)x << 32) | a, 1);
                    uint32_t r2 = pair_get(s, ((uint64_t)x << 32) | z, 1);
                    if (r1 == NONE || r2 == NONE) { PyErr_NoMemory(); goto fail; }
                    s->recs[r1].count -= f;
                    s->recs[r2].count += f;
                    if (push_wid(&s->recs[r2], wid) < 0) { PyErr_NoMemory(); goto fail; }
                    self->born[self->n_born++] = r2;
                }
                if (i + 2 < n) {
                    uint32_t y = w[i + 2];
                    uint32_t r1 = pair_get(s, ((uint64_t)b << 32) | y, 1);
                    uint32_t r2 = pair_get(s, ((uint64_t)z << 32) | y, 1);
                    if (r1 == NONE || r2 == NONE) { PyErr_NoMemory(); goto fail; }
                    s->recs[r1].count -= f;
                    s->recs[r2].count += f;
                    if (push_wid(&s->recs[r2], wid) < 0) { PyErr_NoMemory(); goto fail; }
                    self->born[self->n_born++] = r2;
                }
                out[m++] = z;
                i += 2;
            } else {
                out[m++] = w[i++];
            }
        }
        if (m != n) {
            if (set_signature(self, wid, signature(out, m)) < 0) { PyErr_NoMemory(); goto fail; }
            PyObject *nv = PyBytes_FromStringAndSize(NULL, 8 + (Py_ssize_t)m * 4);
            if (!nv) goto fail;
            memcpy(PyBytes_AS_STRING(nv), val, 8);
            memcpy(PyBytes_AS_STRING(nv) + 8, out, m * 4);
            PyObject *t = PyTuple_Pack(2, kobj, nv);
            Py_DECREF(nv);
            if (!t || PyList_Append(changed, t) < 0) { Py_XDECREF(t); goto fail; }
            Py_DECREF(t);
        }
    }
    free(out);
    return changed;
fail:
    free(out);
    Py_DECREF(changed);
    return NULL;
}

static PyObject *PairIndex_end_merge(PairIndexObject *self, PyObject *noargs) {
    if (!self->merging) { PyErr_SetString(PyExc_RuntimeError, "no merge is open"); return NULL; }
    State *s = &self->s;
    uint32_t r = pair_get(s, ((uint64_t)self->ma << 32) | self->mb, 1);
    if (r == NONE) return PyErr_NoMemory();
    s->recs[r].count = 0;
    for (uint32_t k = 0; k < self->n_born; k++) {
        uint32_t t = self->born[k];
        if (s->recs[t].count > 0 && s->recs[t].pushed_at != (uint32_t)self->merges) {
            s->recs[t].pushed_at = (uint32_t)self->merges;
            if (offer(s, s->recs[t].count, t) < 0) return PyErr_NoMemory();
        }
    }
    self->merging = 0;
    self->n_born = 0;
    Py_RETURN_NONE;
}

static PyObject *PairIndex_memory(PairIndexObject *self, PyObject *noargs) {
    State *s = &self->s;
    uint64_t lists = 0;
    for (uint32_t r = 0; r < s->n_recs; r++)
        if (s->recs[r].n_occ > INLINE_OCC) lists += ((uint64_t)s->recs[r].occ.ext[0] + 1) * 4;
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "pairs", (unsigned long long)s->n_recs,
                         "signatures", (unsigned long long)self->cap_sig * 8,
                         "cold", (unsigned long long)s->cap_cold * 4,
                         "records", (unsigned long long)s->cap_recs * sizeof(PairRec),
                         "table", (unsigned long long)(s->table_mask + 1) * 8,
                         "heap", (unsigned long long)s->heap_cap * sizeof(HeapEntry),
                         "heap_entries", (unsigned long long)s->heap_len, "word_lists", (unsigned long long)lists);
}

static PyMethodDef PairIndex_methods[] = {
    {"add_word", (PyCFunction)PairIndex_add_word, METH_VARARGS, "add_word(word_id, freq, seq): index one word."},
    {"build_heap", (PyCFunction)PairIndex_build_heap, METH_NOARGS, "Call once after the last add_word."},
    {"pop_best", (PyCFunction)PairIndex_pop_best, METH_VARARGS, "pop_best(min_count) -> (left, right, count) or None."},
    {"count", (PyCFunction)PairIndex_count, METH_VARARGS, "count(left, right) -> the pair's current count."},
    {"take_words", (PyCFunction)PairIndex_take_words, METH_VARARGS, "take_words(left, right) -> packed 4-byte word keys."},
    {"begin_merge", (PyCFunction)PairIndex_begin_merge, METH_VARARGS, "begin_merge(left, right) -> new token id."},
    {"merge_rows", (PyCFunction)PairIndex_merge_rows, METH_VARARGS, "merge_rows(rows) -> [(key, value)] changed."},
    {"end_merge", (PyCFunction)PairIndex_end_merge, METH_NOARGS, "Ends the merge: pushes the pairs it made."},
    {"memory", (PyCFunction)PairIndex_memory, METH_NOARGS, "Sizes of the index's parts in bytes (and counts of pairs and heap entries)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PairIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_stream._fastbpe.PairIndex",
    .tp_basicsize = sizeof(PairIndexObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PairIndex(tokens, tie_break): pair counts, word lists and heap of the out-of-core trainer.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PairIndex_init,
    .tp_dealloc = (destructor)PairIndex_dealloc,
    .tp_methods = PairIndex_methods,
};


/* ------------------------------------------------------------------------------------
 * Encoder: pretokens to ids by merge rank, with a cache pretoken -> ids.
 *
 * Each pretoken's bytes (UTF-8, lone surrogates back to their bytes) become byte ids,
 * then the adjacent pair of lowest merge rank is merged, leftmost first among equal
 * ranks, until no pair has a rank -- the same as replaying the merges in training order
 * (bpe.encode_by_rank is the reference).  A heap over positions keeps a long pretoken
 * (a CJK clause, a whole document) at O(n log n).
 * ------------------------------------------------------------------------------------ */
typedef struct {
    uint64_t key;
    uint32_t rank, id;
} RankSlot;

typedef struct {
    PyObject_HEAD
    RankSlot *ranks;
    uint64_t mask;
    uint32_t byte_ids[256];
    int64_t marker; /* -1: none */
    PyObject *cache; /* dict: str -> bytes (uint32 ids) */
    Py_ssize_t cache_limit;
    /* scratch */
    uint32_t *sym, *nxt, *prv;
    uint64_t *heap; /* (rank << 32) | pos */
    size_t cap;
} EncoderObject;

static void Encoder_dealloc(EncoderObject *self) {
    free(self->ranks); free(self->sym); free(self->nxt); free(self->prv); free(self->heap);
    Py_XDECREF(self->cache);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline const RankSlot *rank_find(const EncoderObject *e, uint64_t key) {
    uint64_t h = hash64(key) & e->mask;
    for (;;) {
        const RankSlot *slot = &e->ranks[h];
        if (slot->key == EMPTY_KEY) return NULL;
        if (slot->key == key) return slot;
        h = (h + 1) & e->mask;
    }
}

static int Encoder_init(EncoderObject *self, PyObject *args, PyObject *kwds) {
    PyObject *merges, *byte_ids;
    long long marker;
    Py_ssize_t cache_limit;
    static char *kwlist[] = {"merges", "byte_ids", "marker", "cache_limit", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!Ln", kwlist, &PyList_Type, &merges, &PyList_Type, &byte_ids,
                                     &marker, &cache_limit))
        return -1;
    if (PyList_GET_SIZE(byte_ids) != 256) { PyErr_SetString(PyExc_ValueError, "byte_ids must have 256 entries"); return -1; }
    for (int b = 0; b < 256; b++) {
        unsigned long v = PyLong_AsUnsignedLong(PyList_GET_ITEM(byte_ids, b));
        if (PyErr_Occurred()) return -1;
        self->byte_ids[b] = (uint32_t)v;
    }
    self->marker = marker;
    self->cache_limit = cache_limit;
    Py_ssize_t n = PyList_GET_SIZE(merges);
    uint64_t size = 16;
    while (size < (uint64_t)n * 2 + 16) size *= 2;
    free(self->ranks);
    self->ranks = (RankSlot *)malloc(size * sizeof(RankSlot));
    if (!self->ranks) { PyErr_NoMemory(); return -1; }
    for (uint64_t i = 0; i < size; i++) self->ranks[i].key = EMPTY_KEY;
    self->mask = size - 1;
    for (Py_ssize_t r = 0; r < n; r++) {
        unsigned int a, b, z;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(merges, r), "III", &a, &b, &z)) return -1;
        uint64_t key = ((uint64_t)a << 32) | b;
        uint64_t h = hash64(key) & self->mask;
        while (self->ranks[h].key != EMPTY_KEY && self->ranks[h].key != key) h = (h + 1) & self->mask;
        if (self->ranks[h].key == key) continue; /* the first merge of a pair wins */
        self->ranks[h].key = key;
        self->ranks[h].rank = (uint32_t)r;
        self->ranks[h].id = z;
    }
    Py_XDECREF(self->cache);
    self->cache = PyDict_New();
    return self->cache ? 0 : -1;
}

static int ensure_scratch(EncoderObject *e, size_t n) {
    if (n <= e->cap) return 0;
    size_t cap = e->cap ? e->cap : 64;
    while (cap < n) cap *= 2;
    uint32_t *a = (uint32_t *)realloc(e->sym, cap * 4);
    if (!a) return -1;
    e->sym = a;
    a = (uint32_t *)realloc(e->nxt, cap * 4);
    if (!a) return -1;
    e->nxt = a;
    a = (uint32_t *)realloc(e->prv, cap * 4);
    if (!a) return -1;
    e->prv = a;
    uint64_t *h = (uint64_t *)realloc(e->heap, (cap * 3 + 8) * 8); /* n initial pairs + 2 per merge */
    if (!h) return -1;
    e->heap = h;
    e->cap = cap;
    return 0;
}

static inline void mh_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static inline uint64_t mh_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= *n) break;
        size_t c = (l + 1 < *n && h[l + 1] < h[l]) ? l + 1 : l;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

/* The ids of one pretoken as bytes (uint32), new reference. */
static PyObject *encode_piece(EncoderObject *e, PyObject *piece) {
    PyObject *raw = PyUnicode_AsEncodedString(piece, "utf-8", "surrogateescape");
    if (!raw) return NULL;
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(raw);
    size_t n = (size_t)PyBytes_GET_SIZE(raw), len = n + (e->marker >= 0 ? 1 : 0);
    if (ensure_scratch(e, len + 1) < 0) { Py_DECREF(raw); return PyErr_NoMemory(); }
    uint32_t *sym = e->sym, *nxt = e->nxt, *prv = e->prv;
    for (size_t i = 0; i < n; i++) sym[i] = e->byte_ids[data[i]];
    Py_DECREF(raw);
    if (e->marker >= 0) sym[n] = (uint32_t)e->marker;
    size_t hn = 0;
    for (size_t i = 0; i < len; i++) {
        nxt[i] = i + 1 < len ? (uint32_t)(i + 1) : NONE;
        prv[i] = i ? (uint32_t)(i - 1) : NONE;
        if (i + 1 < len) {
            const RankSlot *r = rank_find(e, ((uint64_t)sym[i] << 32) | sym[i + 1]);
            if (r) mh_push(e->heap, &hn, ((uint64_t)r->rank << 32) | i);
        }
    }
    size_t alive = len;
    while (hn) {
        uint64_t top = mh_pop(e->heap, &hn);
        uint32_t rank = (uint32_t)(top >> 32), i = (uint32_t)(top & 0xFFFFFFFFu);
        if (sym[i] == DEAD) continue;
        uint32_t j = nxt[i];
        if (j == NONE) continue;
        const RankSlot *r = rank_find(e, ((uint64_t)sym[i] << 32) | sym[j]);
        if (!r || r->rank != rank) continue; /* stale: the pair here changed */
        sym[i] = r->id;
        sym[j] = DEAD;
        alive--;
        uint32_t k = nxt[j];
        nxt[i] = k;
        if (k != NONE) prv[k] = i;
        uint32_t p = prv[i];
        if (p != NONE) {
            const RankSlot *rp = rank_find(e, ((uint64_t)sym[p] << 32) | sym[i]);
            if (rp) mh_push(e->heap, &hn, ((uint64_t)rp->rank << 32) | p);
        }
        if (k != NONE) {
            const RankSlot *rk = rank_find(e, ((uint64_t)sym[i] << 32) | sym[k]);
            if (rk) mh_push(e->heap, &hn, ((uint64_t)rk->rank << 32) | i);
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)alive * 4);
    if (!out) return NULL;
    uint32_t *o = (uint32_t *)PyBytes_AS_STRING(out);
    for (size_t i = 0; i < len; i = nxt[i]) {
        *o++ = sym[i];
        if (nxt[i] == NONE) break;
    }
    return out;
}

/* encode(pieces) -> bytes: the ids (uint32, native order) of the pretokens, in order. */
static PyObject *Encoder_encode(EncoderObject *self, PyObject *args) {
    PyObject *pieces;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &pieces)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(pieces);
    size_t cap = (size_t)n * 2 + 16, len = 0;
    uint32_t *buf = (uint32_t *)malloc(cap * 4);
    if (!buf) return PyErr_NoMemory();
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *piece = PyList_GET_ITEM(pieces, k);
        PyObject *ids = PyDict_GetItemWithError(self->cache, piece); /* borrowed */
        if (!ids) {
            if (PyErr_Occurred()) { free(buf); return NULL; }
            if (!PyUnicode_Check(piece)) { free(buf); PyErr_SetString(PyExc_TypeError, "pretokens must be str"); return NULL; }
            ids = encode_piece(self, piece);
            if (!ids) { free(buf); return NULL; }
            if (PyDict_GET_SIZE(self->cache) >= self->cache_limit) PyDict_Clear(self->cache);
            if (PyDict_SetItem(self->cache, piece, ids) < 0) { Py_DECREF(ids); free(buf); return NULL; }
            Py_DECREF(ids); /* the cache holds it */
        }
        size_t m = (size_t)PyBytes_GET_SIZE(ids) / 4;
        if (len + m > cap) {
            while (len + m > cap) cap *= 2;
            uint32_t *d = (uint32_t *)realloc(buf, cap * 4);
            if (!d) { free(buf); return PyErr_NoMemory(); }
            buf = d;
        }
        memcpy(buf + len, PyBytes_AS_STRING(ids), m * 4);
        len += m;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)len * 4);
    free(buf);
    return out;
}

static PyMethodDef Encoder_methods[] = {
    {"encode", (PyCFunction)Encoder_encode, METH_VARARGS, "encode(pretokens) -> bytes of uint32 ids."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_stream._fastbpe.Encoder",
    .tp_basicsize = sizeof(EncoderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Encoder(merges, byte_ids, marker, cache_limit): pretokens to ids by merge rank.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Encoder_init,
    .tp_dealloc = (destructor)Encoder_dealloc,
    .tp_methods = Encoder_methods,
};

static PyMethodDef methods[] = {
    {"train", (PyCFunction)train, METH_VARARGS, NULL},
    {"split_keys", (PyCFunction)split_keys, METH_VARARGS, "split_keys(packed, start, stop) -> list of 4-byte keys."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastbpe", "The BPE merge loop in C.", -1, methods};

PyMODINIT_FUNC PyInit__fastbpe(void) {
    methods[0].ml_doc = TRAIN_DOC;
    if (PyType_Ready(&PairIndexType) < 0 || PyType_Ready(&EncoderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&PairIndexType);
    if (PyModule_AddObject(m, "PairIndex", (PyObject *)&PairIndexType) < 0) {
        Py_DECREF(&PairIndexType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&EncoderType);
    if (PyModule_AddObject(m, "Encoder", (PyObject *)&EncoderType) < 0) {
        Py_DECREF(&EncoderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

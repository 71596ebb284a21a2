/*
 * merge_loop.c: the in-memory merge loop (see merge_loop.h).
 *
 * Layout.  All symbols of all distinct words sit in one array, word after word.  Each
 * position has its symbol and links to the previous and next live position of its word
 * (see Node), and its word's frequency in a parallel array (wfreq).  Each pair's record
 * (pairs.h) lists the positions where it starts.
 *
 * A merge of (a, b) into z visits only the positions of (a, b), in increasing order, so
 * within a word it replaces non-overlapping occurrences left to right (aaa -> [aa, a]).
 * At an occurrence i (next j, previous x, after-next y) the counts of (x, a) and (b, y)
 * fall, those of (x, z) and (z, y) rise, i takes z and j is unlinked.  Work is therefore
 * proportional to the occurrences, not to the length of the words that hold them.
 *
 * Speed comes from memory access, not arithmetic: a merge prefetches the positions it will
 * visit, resolves the neighbours' pair records once per merge (see resolve_sides), and the
 * pair table compares hash tags before touching a record.
 *
 * Performance notes (measured on multi_25M, 2026-12): PREFETCH_AHEAD of 8 to 16 hides most
 * of the latency of the random loads; sorting the positions of every merged pair (not only
 * those of (a, a)) was slower, since the lists are mostly in order already.
 */
#include "merge_loop.h"

#include "pairs.h"

#include <errno.h>

/* A position: its symbol and the distances to the previous and next live positions of its
 * word (0 at the word's ends), 8 bytes.  The positions are the table every merge rewrites,
 * scattered over the whole array, so their size decides what fits in the memory budget on
 * the disk path (filearena.h: the hot table goes to anonymous memory first, and whatever of
 * it lies in the scratch file is re-dirtied by each merge) and how much memory traffic a
 * merge makes in memory; the word's frequency, read only when an occurrence merges, lives in
 * a separate cold array (wfreq).  A distance that does not fit 16 bits (a token longer than
 * 65,534 symbols, which only a store without --max-token-bytes can grow) is FAR, its link
 * kept in the far table (see far_get). */
typedef struct {
    uint32_t sym;
    uint16_t back, fwd;
} Node;
#define FAR 0xFFFFu
/* wfreq[i]: the frequency of position i's word when it fits in 31 bits (nearly always), else
 * BIG_FREQ | word id, the frequency then read from the per-word array. */
#define BIG_FREQ 0x80000000u
/* How many occurrences ahead a merge prefetches positions: each visit is a random load
 * from a table far larger than the cache, and overlapping those loads is what makes the
 * loop fast on long words (see the performance notes above). */
#define PREFETCH_AHEAD 12
/* Before any merge every pair is of small ids (bytes, specials): a direct table of their
 * records saves a hash lookup per position while loading. */
#define SMALL 512u

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

/* A rank map: which positions were live at a compaction, and how many live ones came before
 * each, one cache line per RANK_SPAN positions, so that renumbering an entry costs one load. */
typedef struct {
    uint64_t before;  /* live positions before this line's first */
    uint64_t bits[7]; /* bit k of word w: position line * RANK_SPAN + 64 * w + k was live */
} RankLine;
#define RANK_SPAN 448u
/* How many list entries ahead the renumbering prefetches its rank line. */
#define RANK_AHEAD 16

typedef struct {
    void *block;          /* the allocation; the lines start on a cache line inside it */
    const RankLine *lines;
    uint32_t recs_before; /* the records created before the compaction */
} RankMap;

struct MergeLoop {
    PairSet ps;
    /* positions */
    Node *nodes;
    uint32_t *wfreq;
    uint64_t n_pos;
    int64_t *freq;
    /* far links: (position << 1 | forward) -> position, open addressing, see far_get */
    uint64_t *far_keys;
    uint32_t *far_vals;
    uint64_t far_mask, n_far;
    /* one merge's neighbours, and the records of the pairs it gave occurrences */
    Side left, right;
    Pending *pend;
    uint64_t n_pend, cap_pend;
    uint32_t *born;
    uint32_t n_born, cap_born;
    uint64_t merges; /* done, for pushed_at */
    uint64_t visits, merged;
    uint64_t merged_before; /* `merged` at the last compaction: n_pos - (merged - merged_before) live */
    uint64_t compactions; /* times the positions were compacted */
    double compact_seconds; /* and the time they took */
    RankMap *maps; /* every compaction's rank map, oldest first (see compaction below; only a
                    * loop in an arena compacts, so they go with its file) */
    uint32_t n_maps, cap_maps;
    int started; /* merge_loop_start was called: no more loads, merges may run */
    FileArena *arena; /* where every table lives (owned), or NULL: the C library's heap */
};

static uint32_t renumber_list(const MergeLoop *m, uint32_t r, uint32_t *items, uint32_t len);

/* -- links between the live positions of a word ------------------------------------------ */
/* The far table: the links whose distance does not fit a Node (FAR).  An entry is rewritten
 * when the same link is set far again and left stale when it is set near (never read then). */
#define FAR_EMPTY UINT64_MAX
static int far_put(MergeLoop *m, uint64_t key, uint32_t target) {
    if ((m->n_far + 1) * 2 > m->far_mask + 1 || !m->far_keys) {
        uint64_t size = m->far_keys ? (m->far_mask + 1) * 2 : 64;
        uint64_t *keys = (uint64_t *)bs_realloc_n(NULL, size, sizeof(uint64_t));
        uint32_t *vals = (uint32_t *)bs_realloc_n(NULL, size, sizeof(uint32_t));
        if (!keys || !vals) { bs_free(keys); bs_free(vals); return BS_NO_MEMORY; }
        memset(keys, 0xFF, size * sizeof(uint64_t));
        for (uint64_t s = 0; m->far_keys && s <= m->far_mask; s++) {
            if (m->far_keys[s] == FAR_EMPTY) continue;
            uint64_t h = hash64(m->far_keys[s]) & (size - 1);
            while (keys[h] != FAR_EMPTY) h = (h + 1) & (size - 1);
            keys[h] = m->far_keys[s];
            vals[h] = m->far_vals[s];
        }
        bs_free(m->far_keys);
        bs_free(m->far_vals);
        m->far_keys = keys;
        m->far_vals = vals;
        m->far_mask = size - 1;
    }
    uint64_t h = hash64(key) & m->far_mask;
    while (m->far_keys[h] != FAR_EMPTY && m->far_keys[h] != key) h = (h + 1) & m->far_mask;
    if (m->far_keys[h] == FAR_EMPTY) m->n_far++;
    m->far_keys[h] = key;
    m->far_vals[h] = target;
    return BS_OK;
}

static uint32_t far_get(const MergeLoop *m, uint64_t key) {
    uint64_t h = hash64(key) & m->far_mask;
    while (m->far_keys[h] != key) h = (h + 1) & m->far_mask; /* present: the Node says FAR */
    return m->far_vals[h];
}

static inline uint32_t node_next(const MergeLoop *m, uint32_t i) {
    uint32_t d = m->nodes[i].fwd;
    return d == 0 ? BS_NONE : d != FAR ? i + d : far_get(m, (uint64_t)i << 1 | 1);
}

static inline uint32_t node_prev(const MergeLoop *m, uint32_t i) {
    uint32_t d = m->nodes[i].back;
    return d == 0 ? BS_NONE : d != FAR ? i - d : far_get(m, (uint64_t)i << 1);
}

/* Links i forward to `to` (BS_NONE: i ends its word); `to` > i. */
static inline int node_set_next(MergeLoop *m, uint32_t i, uint32_t to) {
    uint32_t d = to == BS_NONE ? 0 : to - i;
    m->nodes[i].fwd = (uint16_t)(d < FAR ? d : FAR);
    return d < FAR ? BS_OK : far_put(m, (uint64_t)i << 1 | 1, to);
}

/* Links i back to `from` < i. */
static inline int node_set_prev(MergeLoop *m, uint32_t i, uint32_t from) {
    uint32_t d = i - from;
    m->nodes[i].back = (uint16_t)(d < FAR ? d : FAR);
    return d < FAR ? BS_OK : far_put(m, (uint64_t)i << 1, from);
}

MergeLoop *merge_loop_new(int tie_break, FileArena *arena, int *status) {
    MergeLoop *m = (MergeLoop *)calloc(1, sizeof(MergeLoop));
    if (!m) { file_arena_close(arena); *status = BS_NO_MEMORY; return NULL; }
    m->arena = arena;
    BS_ARENA_SCOPE(arena);
    *status = pairs_init(&m->ps, tie_break);
    if (*status) {
        int err = *status == BS_NO_MEMORY ? merge_loop_disk_error(m) : 0;
        merge_loop_free(m);
        if (err) { errno = err; *status = BS_NO_DISK; }
        return NULL;
    }
    return m;
}

void merge_loop_free(MergeLoop *m) {
    if (!m) return;
    if (m->arena) { /* every table is in the arena's file: dropped with it */
        file_arena_close(m->arena);
        free(m);
        return;
    }
    bs_free(m->nodes);
    bs_free(m->wfreq);
    bs_free(m->freq);
    bs_free(m->far_keys);
    bs_free(m->far_vals);
    bs_free(m->left.slot_entry); bs_free(m->left.slot_gen); bs_free(m->left.entries);
    bs_free(m->right.slot_entry); bs_free(m->right.slot_gen); bs_free(m->right.entries);
    bs_free(m->pend);
    bs_free(m->born);
    pairs_free(&m->ps);
    free(m);
}

void merge_loop_set_quota(MergeLoop *m, uint64_t quota) {
    if (m->arena) file_arena_set_quota(m->arena, quota);
}

int merge_loop_disk_error(const MergeLoop *m) { return m->arena ? file_arena_error(m->arena) : 0; }

int merge_loop_add_token(MergeLoop *m, const uint8_t *data, size_t len) {
    BS_ARENA_SCOPE(m->arena);
    return pairs_add_token(&m->ps, data, len);
}

void merge_loop_stats(const MergeLoop *m, MergeLoopStats *out) {
    out->visits = m->visits;
    out->merged = m->merged;
    out->pairs = m->ps.n_recs;
    out->heap = m->ps.heap_len;
    FileArenaStats fs = {0};
    if (m->arena) file_arena_stats(m->arena, &fs);
    out->disk_bytes = fs.file;
    out->peak_disk_bytes = fs.peak_file;
    out->anon_bytes = fs.anon;
    out->peak_anon_bytes = fs.peak_anon;
    out->anon_quota = fs.anon_quota;
    out->moved_to_file = fs.moved_to_file;
    out->moved_to_anon = fs.moved_to_anon;
    out->compactions = m->compactions;
    out->compact_seconds = m->compact_seconds;
}

#define IN_SYM(i) (width == 1 ? (uint32_t)in_sym8[i] : in_sym32[i])
int merge_loop_load(MergeLoop *m, const void *symbols, int width, uint64_t n_pos, const uint64_t *ends,
                    const int64_t *freqs, uint64_t n_words) {
    PairSet *ps = &m->ps;
    BS_ARENA_SCOPE(m->arena);
    if (m->nodes || m->started) return BS_OUT_OF_ORDER; /* once, before the merges */
    if (width != 1 && width != 4) return BS_BAD_ARGUMENT;
    if (n_words && ends[n_words - 1] != n_pos) return BS_BAD_WORD_ENDS;
    /* positions are uint32 indices; word ids share 31 bits with frequencies in wfreq */
    if (n_pos > bs_limit32 || n_words >= BIG_FREQ || n_words > bs_limit32) return BS_TOO_LARGE;
    const uint32_t *in_sym32 = (const uint32_t *)symbols;
    const uint8_t *in_sym8 = (const uint8_t *)symbols;
    m->n_pos = n_pos;
    {
        /* In a file arena with an anonymous quota (filearena.h) the positions take it first,
         * split between memory and the file when they do not fit: each merge rewrites the
         * positions it merges, scattered over the array, so in the early merges nearly
         * every page of it -- the table that costs most writeback per byte in the file.  The
         * frequencies, written once and read for rare huge counts, go to the file. */
        BS_ARENA_HINT_SCOPE(BS_ARENA_SPLIT);
        m->nodes = (Node *)bs_realloc_n(NULL, n_pos ? n_pos : 1, sizeof(Node));
        bs_arena_hint = BS_ARENA_COLD;
        m->wfreq = (uint32_t *)bs_realloc_n(NULL, n_pos ? n_pos : 1, sizeof(uint32_t));
        m->freq = (int64_t *)bs_realloc_n(NULL, n_words ? n_words : 1, sizeof(int64_t));
    }
    uint32_t *small = (uint32_t *)bs_malloc(SMALL * SMALL * sizeof(uint32_t));
    if (!m->nodes || !m->wfreq || !m->freq || !small) { bs_free(small); return BS_NO_MEMORY; }
    if (n_words) memcpy(m->freq, freqs, n_words * sizeof(int64_t));
    memset(small, 0xFF, SMALL * SMALL * sizeof(uint32_t));
    int rc = BS_OK;
    uint64_t start = 0;
    for (uint64_t w = 0; w < n_words; w++) {
        uint64_t end = ends[w];
        if (end < start || end > n_pos) { rc = BS_BAD_WORD_ENDS; goto done; }
        int64_t f = m->freq[w];
        for (uint64_t i = start; i < end; i++) {
            uint32_t sym = IN_SYM(i);
            if (sym >= ps->n_tokens) { rc = BS_UNKNOWN_SYMBOL; goto done; }
            Node *nd = &m->nodes[i];
            nd->sym = sym;
            nd->back = i > start ? 1 : 0;
            nd->fwd = i + 1 < end ? 1 : 0;
            m->wfreq[i] = f >= 0 && f < (int64_t)BIG_FREQ ? (uint32_t)f : BIG_FREQ | (uint32_t)w;
            if (i + 1 < end && f > 0) {
                uint32_t x = sym, y = IN_SYM(i + 1), r;
                if (x < SMALL && y < SMALL) {
                    r = small[x * SMALL + y];
                    if (r == BS_NONE) {
                        if ((rc = pair_get(ps, pair_key(x, y), &r))) goto done;
                        small[x * SMALL + y] = r;
                    }
                } else if ((rc = pair_get(ps, pair_key(x, y), &r))) {
                    goto done;
                }
                if ((rc = occ_push(&ps->recs[r], (uint32_t)i))) goto done;
                /* A pair's count never exceeds the first count of the byte pair at the same
                 * places (every later (X, Y) sits where X's last byte met Y's first), so
                 * checking the counts as they are first summed keeps every later one in range. */
                if (ps->recs[r].count > INT64_MAX - f) { rc = BS_COUNT_OVERFLOW; goto done; }
                ps->recs[r].count += f;
            }
        }
        start = end;
    }
done:
    bs_free(small);
    return rc;
}
#undef IN_SYM

int merge_loop_start(MergeLoop *m) {
    BS_ARENA_SCOPE(m->arena);
    if (m->started) return BS_OUT_OF_ORDER;
    m->started = 1;
    return pairs_build_heap(&m->ps, 0);
}

/* Sorts positions ascending: qsort, or for long lists an LSD radix sort in two passes
 * of 16 bits (a run already in order is left alone). */
static int sort_positions(uint32_t *v, uint32_t n) {
    uint32_t k;
    for (k = 1; k < n && v[k - 1] <= v[k]; k++) {}
    if (k >= n) return BS_OK;
    if (n < (1u << 17)) { /* radix sort's counting tables cost more below this */
        bs_sort_u32(v, n);
        return BS_OK;
    }
    uint32_t *tmp = (uint32_t *)bs_realloc_n(NULL, n, sizeof(uint32_t));
    uint32_t *count = (uint32_t *)bs_malloc(65536 * sizeof(uint32_t));
    if (!tmp || !count) { bs_free(tmp); bs_free(count); return BS_NO_MEMORY; }
    uint32_t *src = v, *dst = tmp;
    for (int shift = 0; shift < 32; shift += 16) {
        memset(count, 0, 65536 * sizeof(uint32_t));
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
    bs_free(tmp);
    bs_free(count);
    return BS_OK;
}

/* -- one merge's neighbours -------------------------------------------------------------------- */
/* Side entries are numbered below RIGHT_SIDE (a Pending marks its side in the top bit). */
static uint32_t side_limit(void) { return bs_limit32 < RIGHT_SIDE - 1 ? bs_limit32 : RIGHT_SIDE - 1; }

static int side_reset(Side *sd) {
    if (!sd->slot_entry) {
        sd->mask = 255;
        sd->slot_entry = (uint32_t *)bs_malloc(256 * sizeof(uint32_t));
        sd->slot_gen = (uint32_t *)bs_calloc(256, sizeof(uint32_t));
        if (!sd->slot_entry || !sd->slot_gen) return BS_NO_MEMORY;
    }
    sd->n = 0;
    if (++sd->gen == 0) { /* wrapped: forget every slot */
        memset(sd->slot_gen, 0, ((size_t)sd->mask + 1) * sizeof(uint32_t));
        sd->gen = 1;
    }
    return BS_OK;
}

static int side_grow(Side *sd) {
    uint64_t size = ((uint64_t)sd->mask + 1) * 2;
    if (size > ((uint64_t)1 << 32)) return BS_TOO_LARGE; /* slots are found by a uint32 mask */
    uint32_t *se = (uint32_t *)bs_realloc_n(NULL, size, sizeof(uint32_t));
    uint32_t *sg = (uint32_t *)bs_calloc((size_t)size, sizeof(uint32_t));
    if (!se || !sg) { bs_free(se); bs_free(sg); return BS_NO_MEMORY; }
    bs_free(sd->slot_entry);
    bs_free(sd->slot_gen);
    sd->slot_entry = se;
    sd->slot_gen = sg;
    sd->mask = (uint32_t)(size - 1);
    sd->gen = 1;
    for (uint32_t e = 0; e < sd->n; e++) {
        uint32_t h = (uint32_t)hash64(sd->entries[e].key) & sd->mask;
        while (sd->slot_gen[h] == sd->gen) h = (h + 1) & sd->mask;
        sd->slot_gen[h] = sd->gen;
        sd->slot_entry[h] = e;
    }
    return BS_OK;
}

/* The index of neighbour `key`'s entry in *out (created empty). */
static inline int side_entry(Side *sd, uint32_t key, uint32_t *out) {
    uint32_t h = (uint32_t)hash64(key) & sd->mask;
    while (sd->slot_gen[h] == sd->gen) {
        uint32_t e = sd->slot_entry[h];
        if (sd->entries[e].key == key) { *out = e; return BS_OK; }
        h = (h + 1) & sd->mask;
    }
    if (((uint64_t)sd->n + 1) * 2 > (uint64_t)sd->mask + 1) {
        int rc = side_grow(sd);
        if (rc) return rc;
        h = (uint32_t)hash64(key) & sd->mask;
        while (sd->slot_gen[h] == sd->gen) h = (h + 1) & sd->mask;
    }
    BS_RESERVE_OR_RETURN(sd->entries, sd->cap, (uint64_t)sd->n + 1, 256, side_limit());
    SideEntry *e = &sd->entries[sd->n];
    e->key = key;
    e->r_old = e->r_new = BS_NONE;
    e->n_pos = 0;
    e->delta = 0;
    sd->slot_gen[h] = sd->gen;
    sd->slot_entry[h] = sd->n;
    *out = sd->n++;
    return BS_OK;
}

static inline int pend_push(MergeLoop *m, uint32_t entry, uint32_t pos) {
    BS_RESERVE_OR_RETURN(m->pend, m->cap_pend, m->n_pend + 1, 4096, BS_LIMIT64(m->pend));
    m->pend[m->n_pend].entry = entry;
    m->pend[m->n_pend].pos = pos;
    m->n_pend++;
    return BS_OK;
}

/* One neighbour occurrence: symbol `sym` next to the merged pair, whose gaining pair
 * receives position `pos` (`flag`: RIGHT_SIDE or 0). */
static inline int side_add(MergeLoop *m, Side *sd, uint32_t sym, uint32_t pos, uint32_t flag, int64_t f) {
    uint32_t e;
    int rc = side_entry(sd, sym, &e);
    if (!rc) rc = pend_push(m, e | flag, pos);
    if (rc) return rc;
    sd->entries[e].delta += f;
    sd->entries[e].n_pos++;
    return BS_OK;
}

static inline uint64_t side_pair(uint32_t sym, uint32_t other, int right) {
    return right ? pair_key(other, sym) : pair_key(sym, other);
}

/* Resolves the pair records of every side entry (prefetching the table slots a few
 * entries ahead), reserves room in the gaining pairs' position lists, then appends the
 * pending positions. */
static int resolve_sides(MergeLoop *m, uint32_t a, uint32_t b, uint32_t z) {
    PairSet *ps = &m->ps;
    Side *sides[2] = {&m->left, &m->right};
    for (int side = 0; side < 2; side++) {
        Side *sd = sides[side];
        uint32_t lost = side ? b : a; /* (s, a) on the left, (b, s) on the right */
        for (uint32_t e = 0; e < sd->n; e++) {
            if (e + 8 < sd->n) {
                uint32_t k = sd->entries[e + 8].key;
                __builtin_prefetch(&ps->table[hash64(side_pair(k, lost, side)) & ps->table_mask], 0, 1);
                __builtin_prefetch(&ps->table[hash64(side_pair(k, z, side)) & ps->table_mask], 0, 1);
            }
            SideEntry *en = &sd->entries[e];
            int rc = pair_get(ps, side_pair(en->key, lost, side), &en->r_old);
            if (!rc) rc = pair_get(ps, side_pair(en->key, z, side), &en->r_new);
            if (rc) return rc;
            /* Exact room: a pair with z gains positions only in this merge.  (One record can
             * be the gaining pair of two entries, (z, z) on both sides, hence len += n_pos.) */
            PairRec *p = &ps->recs[en->r_new];
            uint64_t need = (uint64_t)p->n_occ + en->n_pos;
            en->at = p->n_occ;
            if ((rc = occ_resize(p, need, need))) return rc;
        }
    }
    for (uint64_t k = 0; k < m->n_pend; k++) {
        Pending p = m->pend[k];
        SideEntry *en = (p.entry & RIGHT_SIDE) ? &m->right.entries[p.entry & ~RIGHT_SIDE] : &m->left.entries[p.entry];
        occ_items(&ps->recs[en->r_new])[en->at++] = p.pos;
    }
    m->n_pend = 0;
    return BS_OK;
}

/* Applies the count changes of the merge's neighbours; m->born receives the records of
 * the pairs with z that gained occurrences. */
static int apply_sides(MergeLoop *m) {
    PairSet *ps = &m->ps;
    BS_RESERVE_OR_RETURN(m->born, m->cap_born, (uint64_t)m->left.n + m->right.n + 1, 64, bs_limit32);
    m->n_born = 0;
    Side *sides[2] = {&m->left, &m->right};
    for (int side = 0; side < 2; side++) {
        for (uint32_t e = 0; e < sides[side]->n; e++) {
            SideEntry *en = &sides[side]->entries[e];
            ps->recs[en->r_old].count -= en->delta;
            ps->recs[en->r_new].count += en->delta;
            if (en->delta) m->born[m->n_born++] = en->r_new;
        }
    }
    return BS_OK;
}

/* Applies the merge of record `r` = (a, b) as token z. */
static int apply_merge(MergeLoop *m, uint32_t r, uint32_t z) {
    PairSet *ps = &m->ps;
    uint64_t key = ps->recs[r].key;
    uint32_t a = pair_left(key), b = pair_right(key);
    OccList occ;
    occ_take(&ps->recs[r], &occ);
    occ.len = renumber_list(m, r, occ.items, occ.len); /* (to the numbering since the last compaction) */
    int rc = BS_OK;
    /* Within a word, occurrences of (a, a) overlap and must go left to right; those of
     * (a, b) with a != b cannot overlap, and their order changes no count (and sorting
     * them all is slower: the performance notes above). */
    if (occ.len > 1 && a == b && (rc = sort_positions(occ.items, occ.len))) goto fail;
    if ((rc = side_reset(&m->left)) || (rc = side_reset(&m->right))) goto fail;
    Node *nd = m->nodes;
    m->visits += occ.len;
    for (uint32_t k = 0; k < occ.len; k++) {
        if (k + PREFETCH_AHEAD < occ.len) __builtin_prefetch(&nd[occ.items[k + PREFETCH_AHEAD]], 1, 1);
        uint32_t i = occ.items[k];
        if (nd[i].sym != a) continue; /* stale, or a duplicate already merged (z != a) */
        uint32_t j = node_next(m, i);
        if (j == BS_NONE || nd[j].sym != b) continue;
        m->merged++;
        uint32_t wf = m->wfreq[i];
        int64_t f = (wf & BIG_FREQ) ? m->freq[wf & ~BIG_FREQ] : (int64_t)wf;
        uint32_t x = node_prev(m, i), y = node_next(m, j);
        if (x != BS_NONE && (rc = side_add(m, &m->left, nd[x].sym, x, 0, f))) goto fail;
        if (y != BS_NONE && (rc = side_add(m, &m->right, nd[y].sym, i, RIGHT_SIDE, f))) goto fail;
        nd[i].sym = z;
        nd[j].sym = BS_DEAD;
        if ((rc = node_set_next(m, i, y))) goto fail;
        if (y != BS_NONE && (rc = node_set_prev(m, y, i))) goto fail;
    }
    occ_release(&occ);
    if ((rc = resolve_sides(m, a, b, z)) || (rc = apply_sides(m))) {
        m->n_pend = 0;
        return rc;
    }
    ps->recs[r].count = 0;
    return BS_OK;
fail:
    occ_release(&occ);
    m->n_pend = 0;
    return rc;
}

/* -- compaction ---------------------------------------------------------------------------------
 * Each merge kills the position on the right of every occurrence it merges; by the end of a run
 * most positions are dead (two thirds of them at vocab 65,536 on web text).  On the disk path the
 * live ones are spread over the whole array, and what of it lies in the scratch file (beyond the
 * quota's anonymous pages, which hold the array's first part) keeps being re-dirtied.  So a loop
 * in an arena compacts its positions once a third of them are dead, while part of them lies in
 * the file: the live ones move to the front, in order (a position's new index is its rank among
 * the live ones), so that they end up in the anonymous part and the file's part is left alone.
 * Within a word every position between two live ones is dead, so after the move each live
 * position's neighbours are at distance 1 and the far table is empty.
 *
 * The occurrence lists are renumbered lazily.  A list is written only in the merge that creates
 * its record (every pair that gains positions holds the new token) and read only when its pair
 * is merged, so a list is numbered as of its record's birth: the records created before a
 * compaction (a prefix of the append-only record array) hold lists of the old numbering.  The
 * compaction keeps its rank map, and a merge renumbers the list it takes through the maps of
 * every compaction since its record was created, dropping the entries of positions dead by then
 * (stale entries of live positions stay: a merge skips them as before).  The maps keep the order,
 * so the merges are those of the eager renumbering this replaces -- which rewrote every list at
 * every compaction, 300M entries on 2 GB of web text, most of them never read again, and was a
 * third of the disk path's merge time at --max-memory 1G. */
uint64_t bs_compact_min = (uint64_t)1 << 20;

static inline int rank_live(const RankLine *lines, uint32_t i) {
    uint32_t off = i % RANK_SPAN;
    return (int)(lines[i / RANK_SPAN].bits[off >> 6] >> (off & 63) & 1);
}

static inline uint32_t rank_of(const RankLine *lines, uint32_t i) {
    const RankLine *ln = &lines[i / RANK_SPAN];
    uint32_t off = i % RANK_SPAN, w = off >> 6;
    uint64_t r = ln->before + (uint64_t)__builtin_popcountll(ln->bits[w] & ((((uint64_t)1) << (off & 63)) - 1));
    for (uint32_t k = 0; k < w; k++) r += (uint64_t)__builtin_popcountll(ln->bits[k]);
    return (uint32_t)r;
}

/* Renumbers a list's entries (`items`, `len`), numbered before compaction `first`, through the
 * maps of that compaction and every later one: in place and in order, the entries of positions
 * that died before one of them dropped; returns how many are left. */
static inline __attribute__((always_inline)) uint32_t renumber_entries(const MergeLoop *m, uint32_t first,
                                                                        uint32_t *items, uint32_t len) {
    const RankLine *lines = m->maps[first].lines;
    uint32_t kept = 0;
    for (uint32_t k = 0; k < len; k++) {
        if (k + RANK_AHEAD < len) __builtin_prefetch(&lines[items[k + RANK_AHEAD] / RANK_SPAN], 0, 0);
        uint32_t v = items[k];
        uint32_t c = first;
        for (; c < m->n_maps; c++) {
            const RankLine *ln = m->maps[c].lines;
            if (!rank_live(ln, v)) break;
            v = rank_of(ln, v);
        }
        if (c == m->n_maps) items[kept++] = v;
    }
    return kept;
}

/* (the loop inlined into a copy built for the CPU's popcount instruction where there is one: the
 * generic popcount is a library call, a second of CPU in the run above) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__POPCNT__)
__attribute__((target("popcnt"))) static uint32_t renumber_popcnt(const MergeLoop *m, uint32_t first, uint32_t *items,
                                                                 uint32_t len) {
    return renumber_entries(m, first, items, len);
}
static uint32_t renumber_generic(const MergeLoop *m, uint32_t first, uint32_t *items, uint32_t len) {
    return renumber_entries(m, first, items, len);
}
#define RENUMBER(m, first, items, len) \
    (__builtin_cpu_supports("popcnt") ? renumber_popcnt(m, first, items, len) : renumber_generic(m, first, items, len))
#else
#define RENUMBER(m, first, items, len) renumber_entries(m, first, items, len)
#endif

/* The entries of record r's list (taken), renumbered from its record's birth to now (see above). */
static uint32_t renumber_list(const MergeLoop *m, uint32_t r, uint32_t *items, uint32_t len) {
    uint32_t first = m->n_maps;
    while (first > 0 && m->maps[first - 1].recs_before > r) first--;
    if (first == m->n_maps) return len; /* born since the last compaction */
    return RENUMBER(m, first, items, len);
}

static int compact_positions(MergeLoop *m) {
    double t0 = bs_seconds();
    uint64_t n = m->n_pos, n_lines = n / RANK_SPAN + 1;
    BS_RESERVE_OR_RETURN(m->maps, m->cap_maps, (uint64_t)m->n_maps + 1, 4, bs_limit32);
    /* (one line more, to start the lines on a cache line whatever the block's alignment) */
    void *block = bs_malloc((size_t)(n_lines + 1) * sizeof(RankLine));
    if (!block) return BS_NO_MEMORY;
    RankLine *lines = (RankLine *)(((uintptr_t)block + 63) & ~(uintptr_t)63);
    Node *nd = m->nodes;
    uint64_t count = 0;
    for (uint64_t l = 0; l < n_lines; l++) {
        RankLine *ln = &lines[l];
        ln->before = count;
        for (uint32_t w = 0; w < 7; w++) {
            uint64_t word = 0, from = l * RANK_SPAN + 64 * w, end = from + 64 < n ? from + 64 : n;
            for (uint64_t i = from; i < end; i++)
                if (nd[i].sym != BS_DEAD) word |= ((uint64_t)1) << (i - from);
            ln->bits[w] = word;
            count += (uint64_t)__builtin_popcountll(word);
        }
    }
    RankMap *map = &m->maps[m->n_maps++];
    map->block = block;
    map->lines = lines;
    map->recs_before = m->ps.n_recs;
    /* the positions and their frequencies, moved to the front */
    uint32_t j = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (nd[i].sym == BS_DEAD) continue;
        Node moved = {nd[i].sym, (uint16_t)(nd[i].back ? 1 : 0), (uint16_t)(nd[i].fwd ? 1 : 0)};
        nd[j] = moved;
        m->wfreq[j] = m->wfreq[i];
        j++;
    }
    bs_free(m->far_keys);
    bs_free(m->far_vals);
    m->far_keys = NULL;
    m->far_vals = NULL;
    m->far_mask = m->n_far = 0;
    m->n_pos = j;
    m->merged_before = m->merged;
    m->compactions++;
    m->compact_seconds += bs_seconds() - t0;
    return BS_OK;
}

int merge_loop_step(MergeLoop *m, int64_t min_count, const uint32_t *forced, uint32_t *left, uint32_t *right,
                    int64_t *count) {
    PairSet *ps = &m->ps;
    uint32_t r;
    int64_t c;
    int rc;
    BS_ARENA_SCOPE(m->arena);
    if (!m->started) return BS_OUT_OF_ORDER;
    if (forced) {
        if (forced[0] >= ps->n_tokens || forced[1] >= ps->n_tokens) return BS_UNKNOWN_SYMBOL;
        if ((rc = pair_get(ps, pair_key(forced[0], forced[1]), &r))) return rc;
        c = ps->recs[r].count;
    } else {
        rc = pairs_pop_best(ps, min_count, &r, &c);
        if (rc <= 0) return rc;
    }
    uint64_t key = ps->recs[r].key;
    uint32_t z = ps->n_tokens;
    if ((rc = pairs_add_merged_token(ps, pair_left(key), pair_right(key)))) return rc;
    if ((rc = apply_merge(m, r, z))) return rc;
    m->merges++;
    /* push each pair born in this merge once, with its final count */
    if ((rc = pairs_offer_born(ps, m->born, m->n_born, (uint32_t)m->merges))) return rc;
    /* (compacted only while part of the positions lies in the file: once they fit in the part
     * kept in memory, a pass more would cost time and spare no writeback) */
    if (m->arena && m->n_pos >= bs_compact_min && (m->n_pos - (m->merged - m->merged_before)) * 3 <= m->n_pos * 2 &&
        m->n_pos * sizeof(Node) > file_arena_in_memory(m->nodes) && (rc = compact_positions(m)))
        return rc;
    *left = pair_left(key);
    *right = pair_right(key);
    *count = c;
    return 1;
}

int merge_loop_merge_given(MergeLoop *m, const uint32_t *pairs, uint64_t n, int64_t *counts) {
    for (uint64_t k = 0; k < n; k++) {
        uint32_t a, b;
        int rc = merge_loop_step(m, 1, pairs + 2 * k, &a, &b, &counts[k]);
        if (rc < 0) return rc;
    }
    return BS_OK;
}

int merge_loop_merge_best(MergeLoop *m, uint64_t n, int64_t min_count, uint32_t *pairs, int64_t *counts,
                          uint64_t *done) {
    *done = 0;
    while (*done < n) {
        uint64_t k = *done;
        int rc = merge_loop_step(m, min_count, NULL, &pairs[2 * k], &pairs[2 * k + 1], &counts[k]);
        if (rc <= 0) return rc;
        (*done)++;
    }
    return BS_OK;
}

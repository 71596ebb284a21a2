/*
 * storecheck.c: checks the structure of an LMDB data file before LMDB walks it.
 *
 * LMDB keeps no checksums and trusts its file: a damaged page number, page type or node
 * size makes it read past the end of the file (SIGBUS) or fail one of its assertions
 * (SIGABRT), and the process dies with nothing said.  bs_store_check(base, len, txnid, ...) walks every tree
 * of the snapshot ``txnid`` -- the free-page tree, the main tree and each named tree in it --
 * through a read-only map of the file (every access bounds-checked against its length) and
 * checks what LMDB relies on: page numbers inside the file and below the snapshot's last
 * page, each page's own number and type (branch pages above the tree's depth, leaves at it,
 * overflow pages where a value says), the bounds of its node table and of every node and
 * value in it, keys in order within their parents' bounds, no page reached twice, and the
 * page and entry counts each tree records.  Values are LMDB's business only in the free
 * tree (page lists, whose page numbers are checked); bpe-stream decodes the others itself.
 *
 * The layout is LMDB 0.9's on-disk format for 64-bit builds (mdb.c): a 16-byte page header
 * (pgno u64, pad u16, flags u16, lower u16, upper u16 -- or u32 overflow page count), nodes
 * of an 8-byte header (lo u16, hi u16, flags u16, ksize u16) and the key, then the data.
 *
 * Returns 0 when the file is consistent, 1 when the meta page of ``txnid`` has been
 * rewritten meanwhile (a writer committed twice since: take a new snapshot and check again),
 * BS_NO_MEMORY, or BS_BAD_ROW with the first damage found written into ``error``.
 * (Bound as _fastbpe.store_check in module.c.)
 */
#include "storecheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define PAGEHDRSZ 16u
#define NODESIZE 8u
#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u
#define P_LEAF2 0x20u
#define P_SUBP 0x40u
#define P_TYPES (P_BRANCH | P_LEAF | P_OVERFLOW | P_META | P_LEAF2 | P_SUBP)
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define F_DUPDATA 0x04u
#define MDB_MAGIC 0xBEEFC0DEu
#define MDB_DATA_VERSION 1u
#define P_INVALID UINT64_MAX
#define DB_SIZE 48u
#define MAX_DEPTH 64u

typedef struct {
    const unsigned char *base;
    uint64_t len;       /* bytes of the file */
    uint64_t psize;
    uint64_t next_pgno; /* pages of the snapshot: 0 .. next_pgno - 1 */
    unsigned char *seen; /* one bit per page */
    char error[256];
} Check;

typedef struct {
    uint32_t pad;
    uint16_t flags, depth;
    uint64_t branch_pages, leaf_pages, overflow_pages, entries, root;
} Db;

typedef struct {
    uint64_t branch, leaf, overflow, entries;
} Tally;

typedef struct { /* a key as a pointer into the map; NULL: no bound */
    const unsigned char *data;
    uint64_t size;
} Key;

static uint16_t u16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static int fail(Check *c, const char *what, uint64_t pgno) {
    if (!c->error[0])
        snprintf(c->error, sizeof c->error, "%s (page %llu)", what, (unsigned long long)pgno);
    return -1;
}

static Db read_db(const unsigned char *p) {
    Db d;
    d.pad = u32(p); d.flags = u16(p + 4); d.depth = u16(p + 6);
    d.branch_pages = u64(p + 8); d.leaf_pages = u64(p + 16); d.overflow_pages = u64(p + 24);
    d.entries = u64(p + 32); d.root = u64(p + 40);
    return d;
}

/* memcmp order, then length: LMDB's default key order (mdb_cmp_memn). */
static int key_cmp(Key a, Key b) {
    uint64_t n = a.size < b.size ? a.size : b.size;
    int r = n ? memcmp(a.data, b.data, n) : 0;
    if (r) return r;
    return a.size < b.size ? -1 : a.size > b.size;
}

/* The page ``pgno`` (type ``type``), marked as seen; NULL on damage. */
static const unsigned char *page(Check *c, uint64_t pgno, unsigned type, int mark) {
    if (pgno < 2 || pgno >= c->next_pgno) { fail(c, "a page number beyond the snapshot's pages", pgno); return NULL; }
    if ((pgno + 1) * c->psize > c->len) { fail(c, "a page beyond the end of the file", pgno); return NULL; }
    const unsigned char *p = c->base + pgno * c->psize;
    if (u64(p) != pgno) { fail(c, "a page that holds another page number", pgno); return NULL; }
    if ((u16(p + 10) & P_TYPES) != type) { fail(c, "a page of the wrong type", pgno); return NULL; }
    if (mark) {
        if (c->seen[pgno >> 3] & (1u << (pgno & 7))) { fail(c, "a page reached twice", pgno); return NULL; }
        c->seen[pgno >> 3] |= (unsigned char)(1u << (pgno & 7));
    }
    return p;
}

/* The data of a leaf node (in place or on overflow pages): sets *data and *size. */
static int node_data(Check *c, uint64_t pgno, const unsigned char *node, uint64_t room, Tally *t,
                     const unsigned char **data, uint64_t *size) {
    unsigned flags = u16(node + 4), ksize = u16(node + 6);
    uint64_t dsize = (uint64_t)u16(node) | ((uint64_t)u16(node + 2) << 16);
    if (!(flags & F_BIGDATA)) {
        if (NODESIZE + ksize + dsize > room) return fail(c, "a value running past its page", pgno);
        *data = node + NODESIZE + ksize;
        *size = dsize;
        return 0;
    }
    if (NODESIZE + ksize + 8 > room) return fail(c, "a large value's page number running past its page", pgno);
    uint64_t first = u64(node + NODESIZE + ksize);
    const unsigned char *ov = page(c, first, P_OVERFLOW, 1);
    if (!ov) return -1;
    uint64_t pages = u32(ov + 12);
    if (pages < 1 || first + pages > c->next_pgno || (first + pages) * c->psize > c->len)
        return fail(c, "a large value's pages beyond the file", first);
    if (dsize > pages * c->psize - PAGEHDRSZ) return fail(c, "a large value longer than its pages", first);
    for (uint64_t i = 1; i < pages; i++) { /* the continuation pages are the value's too */
        uint64_t q = first + i;
        if (c->seen[q >> 3] & (1u << (q & 7))) return fail(c, "a page reached twice", q);
        c->seen[q >> 3] |= (unsigned char)(1u << (q & 7));
    }
    t->overflow += pages;
    *data = ov + PAGEHDRSZ;
    *size = dsize;
    return 0;
}

static int walk_tree(Check *c, Db db, int is_main, int is_free, const char *name);

/* One page of a tree at ``level`` (1 = root) and its subtree; keys within [lo, hi). */
static int walk(Check *c, uint64_t pgno, unsigned level, unsigned depth, Key lo, Key hi, Key *last,
                int is_main, int is_free, Tally *t) {
    unsigned type = level < depth ? P_BRANCH : P_LEAF;
    const unsigned char *p = page(c, pgno, type, 1);
    if (!p) return -1;
    unsigned lower = u16(p + 12), upper = u16(p + 14);
    if (lower < PAGEHDRSZ || lower > upper || upper > c->psize || (lower - PAGEHDRSZ) % 2)
        return fail(c, "a page with a damaged node table", pgno);
    unsigned nkeys = (lower - PAGEHDRSZ) / 2;
    if (nkeys == 0) return fail(c, "an empty page inside a tree", pgno);
    if (type == P_BRANCH) t->branch++; else t->leaf++;
    Key prev = {NULL, 0};
    for (unsigned i = 0; i < nkeys; i++) {
        unsigned off = u16(p + PAGEHDRSZ + 2 * i);
        if (off < upper || off + NODESIZE > c->psize) return fail(c, "a node outside its page", pgno);
        const unsigned char *node = p + off;
        uint64_t room = c->psize - off;
        unsigned flags = u16(node + 4), ksize = u16(node + 6);
        if (NODESIZE + ksize > room) return fail(c, "a key running past its page", pgno);
        Key key = {node + NODESIZE, ksize};
        if (type == P_BRANCH) {
            uint64_t child = (uint64_t)u16(node) | ((uint64_t)u16(node + 2) << 16) | ((uint64_t)flags << 32);
            /* A branch's first key is not used: its child's keys are bounded by the parent's. */
            Key child_lo = i == 0 ? lo : key;
            if (i > 0 && !is_free) {
                if ((lo.data && key_cmp(key, lo) < 0) || (hi.data && key_cmp(key, hi) >= 0) ||
                    (prev.data && key_cmp(key, prev) <= 0))
                    return fail(c, "branch keys out of order", pgno);
                prev = key;
            }
            Key child_hi = hi;
            if (i + 1 < nkeys) {
                unsigned noff = u16(p + PAGEHDRSZ + 2 * (i + 1));
                if (noff < upper || noff + NODESIZE > c->psize) return fail(c, "a node outside its page", pgno);
                unsigned nksize = u16(p + noff + 6);
                if (noff + NODESIZE + nksize > c->psize) return fail(c, "a key running past its page", pgno);
                child_hi.data = p + noff + NODESIZE;
                child_hi.size = nksize;
            }
            if (walk(c, child, level + 1, depth, child_lo, child_hi, last, is_main, is_free, t)) return -1;
            continue;
        }
        if (flags & ~(unsigned)(F_BIGDATA | F_SUBDATA)) return fail(c, "a node with unknown flags", pgno);
        if (!is_free) {
            if ((lo.data && key_cmp(key, lo) < 0) || (hi.data && key_cmp(key, hi) >= 0) ||
                (last->data && key_cmp(key, *last) <= 0))
                return fail(c, "keys out of order", pgno);
            *last = key;
        }
        const unsigned char *data;
        uint64_t size;
        if (node_data(c, pgno, node, room, t, &data, &size)) return -1;
        t->entries++;
        if (is_free) { /* a list of free pages: its length, then the page numbers */
            if (ksize != 8 || size < 8) return fail(c, "a damaged free-page record", pgno);
            uint64_t n = u64(data);
            if (n > (size - 8) / 8) return fail(c, "a damaged free-page record", pgno);
            for (uint64_t j = 1; j <= n; j++) {
                uint64_t free_pg = u64(data + 8 * j);
                if (free_pg < 2 || free_pg >= c->next_pgno) return fail(c, "a free page number beyond the file", pgno);
            }
        } else if (flags & F_SUBDATA) {
            if (!is_main || (flags & F_BIGDATA) || size != DB_SIZE) return fail(c, "a damaged table record", pgno);
            char name[64];
            snprintf(name, sizeof name, "%.*s", ksize < 40 ? (int)ksize : 40, (const char *)key.data);
            if (walk_tree(c, read_db(data), 0, 0, name)) return -1;
        }  /* (plain records in the main table: not a bpe-stream store, which opening says) */
    }
    return 0;
}

static int walk_tree(Check *c, Db db, int is_main, int is_free, const char *name) {
    Tally t = {0, 0, 0, 0};
    if (db.root == P_INVALID) {
        if (db.depth || db.entries || db.branch_pages || db.leaf_pages || db.overflow_pages)
            return fail(c, "an empty table with a non-empty header", 0);
        return 0;
    }
    if (db.depth < 1 || db.depth > MAX_DEPTH) return fail(c, "a table of impossible depth", db.root);
    if (!is_free && !is_main && db.flags) return fail(c, "a table with flags bpe-stream never sets", db.root);
    Key none = {NULL, 0}, last = {NULL, 0};
    if (walk(c, db.root, 1, db.depth, none, none, &last, is_main, is_free, &t)) return -1;
    if (t.branch != db.branch_pages || t.leaf != db.leaf_pages || t.overflow != db.overflow_pages ||
        t.entries != db.entries) {
        char what[128];
        snprintf(what, sizeof what, "table %s: its pages or entries differ from its header", name);
        return fail(c, what, db.root);
    }
    return 0;
}

int bs_store_check(const uint8_t *base, uint64_t len, uint64_t txnid, char *error, size_t error_size) {
    Check c;
    memset(&c, 0, sizeof c);
    c.base = base;
    c.len = len;
    int status = 0;
    const unsigned char *meta = NULL;
    uint64_t psize = 0;
    if (c.len < 2 * PAGEHDRSZ + 2 * 136) {
        fail(&c, "a file too short for its meta pages", 0);
        goto done;
    }
    psize = u32(c.base + PAGEHDRSZ + 24); /* md_pad of the free tree in meta page 0: the page size */
    if (psize < 256 || psize > 65536 || (psize & (psize - 1)) || 2 * psize > c.len) {
        fail(&c, "a meta page with an impossible page size", 0);
        goto done;
    }
    c.psize = psize;
    meta = c.base + (txnid & 1) * psize; /* LMDB writes commit n into meta page n % 2 */
    if ((u16(meta + 10) & P_TYPES) != P_META || u32(meta + PAGEHDRSZ) != MDB_MAGIC ||
        u32(meta + PAGEHDRSZ + 4) != MDB_DATA_VERSION) {
        fail(&c, "a damaged meta page", txnid & 1);
        goto done;
    }
    if (u64(meta + PAGEHDRSZ + 128) != txnid) {
        status = 1; /* rewritten by a later commit: the caller takes a new snapshot */
        goto done;
    }
    if (u32(meta + PAGEHDRSZ + 24) != psize) {
        fail(&c, "meta pages that disagree on the page size", txnid & 1);
        goto done;
    }
    c.next_pgno = u64(meta + PAGEHDRSZ + 120) + 1;
    if (c.next_pgno < 2 || c.next_pgno > c.len / psize) {
        fail(&c, "a file shorter than its pages (truncated)", c.next_pgno - 1);
        goto done;
    }
    c.seen = calloc((size_t)(c.next_pgno / 8 + 1), 1);
    if (!c.seen) return BS_NO_MEMORY;
    if (!walk_tree(&c, read_db(meta + PAGEHDRSZ + 24), 0, 1, "free"))
        walk_tree(&c, read_db(meta + PAGEHDRSZ + 24 + DB_SIZE), 1, 0, "main");
    free(c.seen);
done:
    if (c.error[0]) {
        snprintf(error, error_size, "%s", c.error);
        return BS_BAD_ROW;
    }
    return status;
}

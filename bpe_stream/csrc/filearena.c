/*
 * filearena.c: blocks of a file mapped into memory (see filearena.h).
 *
 * Layout.  Every block starts with a 16-byte header (its size and, once freed, the next
 * free block).  Small blocks (up to SMALL_MAX bytes with the header) come in power-of-two
 * classes with one free list each; they are never returned to the file.  Large blocks are
 * whole pages, sized to the request: the merge loop's arrays grow by doubling, so rounding
 * them up to a power of two would double the file.  A freed large block keeps its first page
 * (its header) and gives the rest back to the file system (a punched hole: no disk, no page
 * cache; only its whole large-folio runs, see punch_span); reusing it -- first fit, only if
 * it is at most twice the request -- reserves those pages again.  New blocks come from the top
 * of the file, which grows by whole extents of at least GROW_STEP bytes reserved with
 * posix_fallocate.
 *
 * Two spaces.  With a quota, blocks come first from an anonymous space: a private
 * anonymous mapping (reserved, MAP_NORESERVE) run by the same allocator, whose pages the
 * arena counts as it hands them out (`held`: a block from the top counts its size, a
 * reused large block its pages again, a freed large block gives all but its header page
 * back with MADV_DONTNEED).  A block goes there only while held stays within the quota;
 * otherwise -- or under the cold hint -- it comes from the file.  So the process's
 * anonymous memory from the arena never passes the quota, however the blocks come and go.
 * Each space keeps its own free lists, and a freed or grown block goes back to the space
 * it came from (bs_realloc may move a block from one space to the other).
 */
#define _GNU_SOURCE
#include "filearena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HEADER 16u
#define PAGE 4096u
#define SMALL_MIN_SHIFT 5u  /* 32 bytes */
#define SMALL_MAX_SHIFT 16u /* 64 KiB */
#define SMALL_MAX (1u << SMALL_MAX_SHIFT)
#define GROW_STEP (16ull << 20)
#define DEFAULT_RESERVE (1ull << 40)
#define MIN_RESERVE (1ull << 30)
#define BIG_FREE_MAX 4096u /* large free blocks remembered; beyond that the oldest is dropped */
/* The anonymous space reserves this many times its quota of address space (blocks that
 * grow by doubling leave freed, given-back ranges behind them), at least ANON_SLACK more. */
#define ANON_RESERVE_FACTOR 4u
#define ANON_SLACK (256ull << 20)
#define MAX_SPLITS 8u

typedef struct {
    uint64_t size; /* of the whole block, header included */
    uint64_t next; /* offset + 1 of the next free block of its list, 0 = none (when free) */
} Header;

/* One address range run by the allocator: the file's mapping or the anonymous one. */
typedef struct {
    uint8_t *base;
    uint64_t reserve, top;
    uint64_t small_free[SMALL_MAX_SHIFT + 1]; /* offset + 1 of the first free block, per class */
    uint64_t *big_free;                       /* offsets of free large blocks */
    uint32_t n_big_free;
    int is_file;
} Space;

struct FileArena {
    int fd;
    Space file, anon;
    uint64_t file_bytes, punched, peak_file; /* the file's extents, its punched holes, the most it held */
    uint64_t quota, held, peak_held;         /* the anonymous space: its limit, bytes counted, the most */
    uint64_t moved_to_file, moved_to_anon;   /* blocks bs_realloc moved from one space to the other */
    /* file blocks whose first pages are anonymous memory (BS_ARENA_SPLIT), see split_block */
    uint64_t split_off[MAX_SPLITS], split_len[MAX_SPLITS], split_punched[MAX_SPLITS];
    uint32_t n_splits;
    int error;
    FileArena *next_arena;
};

_Thread_local FileArena *bs_current_arena = NULL;
_Thread_local int bs_arena_hint = BS_ARENA_HOT;
static FileArena *arenas = NULL; /* every open arena, for bs_free and bs_realloc */

static int in_space(const Space *s, const uint8_t *q) { return s->base && q >= s->base && q < s->base + s->reserve; }

/* The arena and space a block belongs to, or NULL (the C library's). */
static FileArena *owner(const void *p, Space **space) {
    const uint8_t *q = (const uint8_t *)p;
    for (FileArena *a = arenas; a; a = a->next_arena) {
        if (in_space(&a->file, q)) { *space = &a->file; return a; }
        if (in_space(&a->anon, q)) { *space = &a->anon; return a; }
    }
    return NULL;
}

static int open_scratch(const char *dir) {
#ifdef O_TMPFILE
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return -1;
#endif
    /* no O_TMPFILE on this file system: a named file, unlinked at once */
    size_t n = strlen(dir);
    char *path = (char *)malloc(n + 32);
    if (!path) { errno = ENOMEM; return -1; }
    memcpy(path, dir, n);
    strcpy(path + n, "/.bpe-stream-arena-XXXXXX");
    int fd2 = mkstemp(path);
    if (fd2 >= 0) unlink(path);
    free(path);
    return fd2;
}

/* Maps `want` bytes (fd < 0: anonymous), halving down to `least` where a limit (ulimit -v)
 * refuses that much; the size in *got. */
static void *map_range(int fd, uint64_t want, uint64_t least, uint64_t *got) {
    for (;;) {
        void *m = fd >= 0 ? mmap(NULL, (size_t)want, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0)
                          : mmap(NULL, (size_t)want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                                 -1, 0);
        if (m != MAP_FAILED || errno != ENOMEM || want / 2 < least) {
            *got = want;
            return m;
        }
        want = (want / 2 + PAGE - 1) / PAGE * PAGE;
    }
}

/* Reserves the anonymous space for a quota of `q` bytes (none: the quota goes to split blocks only). */
static void map_anon(FileArena *a, uint64_t q) {
    uint64_t want = q * ANON_RESERVE_FACTOR;
    if (want / ANON_RESERVE_FACTOR != q || want < q + ANON_SLACK) want = q + ANON_SLACK;
    void *m = map_range(-1, want, q, &a->anon.reserve);
    if (m == MAP_FAILED) { a->anon.reserve = 0; return; }
    a->anon.base = (uint8_t *)m;
    a->anon.top = PAGE;
}

FileArena *file_arena_open(const char *dir, uint64_t reserve) {
    FileArena *a = (FileArena *)calloc(1, sizeof(FileArena));
    if (!a) { errno = ENOMEM; return NULL; }
    uint64_t want = reserve ? (reserve + PAGE - 1) / PAGE * PAGE : DEFAULT_RESERVE;
    a->fd = open_scratch(dir);
    if (a->fd < 0) { int e = errno; free(a); errno = e; return NULL; }
    void *m = map_range(a->fd, want, MIN_RESERVE, &a->file.reserve);
    if (m == MAP_FAILED) {
        int e = errno;
        close(a->fd);
        free(a);
        errno = e;
        return NULL;
    }
    a->file.base = (uint8_t *)m;
#ifdef MADV_HUGEPAGE
    /* Large folios for the scratch file's pages where the kernel and file system have them (a
     * hint, ignored elsewhere): one fault maps, dirties or re-dirties a whole folio, and the
     * merge loop's random loads miss the TLB far less.  The pages stay the file's page cache;
     * the kernel writes back a dirty folio whole, so more bytes reach the disk. */
    madvise(m, (size_t)a->file.reserve, MADV_HUGEPAGE);
#endif
    a->file.is_file = 1;
    a->file.top = PAGE; /* offset 0 is never a block: offsets + 1 stay non-zero in free lists */
    a->next_arena = arenas;
    arenas = a;
    return a;
}

void file_arena_close(FileArena *a) {
    if (!a) return;
    for (FileArena **p = &arenas; *p; p = &(*p)->next_arena)
        if (*p == a) { *p = a->next_arena; break; }
    if (bs_current_arena == a) bs_current_arena = NULL;
    munmap(a->file.base, (size_t)a->file.reserve);
    if (a->anon.base) munmap(a->anon.base, (size_t)a->anon.reserve);
    close(a->fd);
    free(a->file.big_free);
    free(a->anon.big_free);
    free(a);
}

void file_arena_stats(const FileArena *a, FileArenaStats *out) {
    out->file = a->file_bytes - a->punched;
    out->peak_file = a->peak_file;
    out->anon = a->held;
    out->peak_anon = a->peak_held;
    out->anon_quota = a->quota;
    out->moved_to_file = a->moved_to_file;
    out->moved_to_anon = a->moved_to_anon;
}

int file_arena_error(const FileArena *a) { return a->error; }

static int reserve_range(FileArena *a, uint64_t off, uint64_t len) {
    int rc = posix_fallocate(a->fd, (off_t)off, (off_t)len);
    if (rc) { a->error = rc; return -1; }
    return 0;
}

static void note_file(FileArena *a) {
    uint64_t now = a->file_bytes - a->punched;
    if (now > a->peak_file) a->peak_file = now;
}

/* Counts `n` more bytes of the anonymous space: 0, or -1 when they would pass the quota. */
static int hold(FileArena *a, uint64_t n) {
    if (n > a->quota - a->held) return -1;
    a->held += n;
    if (a->held > a->peak_held) a->peak_held = a->held;
    return 0;
}

/* `size` bytes (a multiple of 16) from the top of the space, aligned to `align`; 0 when
 * the space cannot (the file: a.error set; the anonymous space: its quota or range). */
static uint64_t take_top(FileArena *a, Space *s, uint64_t size, uint64_t align) {
    uint64_t off = (s->top + align - 1) / align * align;
    if (off > s->reserve || size > s->reserve - off) {
        if (s->is_file) a->error = ENOMEM;
        return 0;
    }
    uint64_t end = off + size;
    if (!s->is_file) {
        if (hold(a, size)) return 0;
    } else if (end > a->file_bytes) {
        uint64_t grow = end - a->file_bytes;
        if (grow < GROW_STEP) grow = GROW_STEP;
        if (grow > s->reserve - a->file_bytes) grow = s->reserve - a->file_bytes;
        if (reserve_range(a, a->file_bytes, grow)) return 0;
        a->file_bytes += grow;
        note_file(a);
    }
    s->top = end;
    return off;
}

/* The part of a freed file block [off, off + size) whose pages are punched out: its whole
 * FOLIO-aligned runs after the header page.  The scratch file's page cache comes in large
 * folios (file_arena_open), and a hole punched through part of one zero-fills that part in
 * place (the folio stays): on 2 GB of web text at --max-memory 1G that zeroing was a fifth of
 * the run's CPU.  The edges of a block stay; a block smaller than a folio is never punched. */
#define FOLIO (2ull << 20)
static void punch_span(uint64_t off, uint64_t size, uint64_t *from, uint64_t *len) {
    uint64_t a0 = (off + PAGE + FOLIO - 1) / FOLIO * FOLIO, a1 = (off + size) / FOLIO * FOLIO;
    *from = a0;
    *len = a1 > a0 ? a1 - a0 : 0;
}

static unsigned small_class(uint64_t need) {
    unsigned k = SMALL_MIN_SHIFT;
    while ((1ull << k) < need) k++;
    return k;
}

/* A block of `n` bytes from space `s`, or NULL (for the anonymous space: it has no room
 * within the quota -- the caller then tries the file). */
static void *space_alloc(FileArena *a, Space *s, size_t n) {
    if ((uint64_t)n > s->reserve) { if (s->is_file) a->error = ENOMEM; return NULL; }
    uint64_t need = (uint64_t)n + HEADER, off = 0;
    if (need <= SMALL_MAX) {
        unsigned k = small_class(need);
        if (s->small_free[k]) {
            off = s->small_free[k] - 1;
            s->small_free[k] = ((Header *)(s->base + off))->next;
        } else if (!(off = take_top(a, s, 1ull << k, HEADER))) {
            return NULL;
        }
        need = 1ull << k;
    } else {
        need = (need + PAGE - 1) / PAGE * PAGE;
        for (uint32_t i = 0; i < s->n_big_free; i++) {
            uint64_t o = s->big_free[i], size = ((Header *)(s->base + o))->size;
            if (size >= need && size / 2 <= need) {
                if (s->is_file) {
                    uint64_t from, len, holed = ((Header *)(s->base + o))->next; /* (see space_free) */
                    punch_span(o, size, &from, &len);
                    if (holed && reserve_range(a, from, len)) return NULL;
                    a->punched -= holed;
                    note_file(a);
                } else if (hold(a, size - PAGE)) {
                    break; /* over the quota: not from this space */
                }
                s->big_free[i] = s->big_free[--s->n_big_free];
                off = o;
                need = size;
                break;
            }
        }
        if (!off && !(off = take_top(a, s, need, PAGE))) return NULL;
    }
    Header *h = (Header *)(s->base + off);
    h->size = need;
    h->next = 0;
    return s->base + off + HEADER;
}

/* Makes the first pages of the file's large block at `off` (`size` bytes) anonymous memory,
 * as many as the quota leaves (a private anonymous mapping laid over that part of the file's
 * mapping): the block stays one range of addresses, partly in memory, partly in the file. */
static void split_block(FileArena *a, uint64_t off, uint64_t size) {
    uint64_t len = (a->quota - a->held) / PAGE * PAGE;
    if (len > size) len = size;
    if (!len || a->n_splits == MAX_SPLITS) return;
    Header keep = *(Header *)(a->file.base + off);
    if (mmap(a->file.base + off, (size_t)len, PROT_READ | PROT_WRITE,
             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) == MAP_FAILED)
        return; /* the file's pages are still mapped there (a failed MAP_FIXED leaves the range as it was) */
    *(Header *)(a->file.base + off) = keep;
    hold(a, len);
    a->split_off[a->n_splits] = off;
    a->split_punched[a->n_splits] = 0;
    a->split_len[a->n_splits++] = len;
}

/* Moves the next pages of split block i (its data copied through a small buffer) into
 * anonymous memory, as many as the quota leaves; their pages of the file are punched out
 * (no writeback of them, no disk). */
#define MOVE_CHUNK (8ull << 20)
static void grow_split(FileArena *a, uint32_t i) {
    uint64_t off = a->split_off[i], size = ((Header *)(a->file.base + off))->size;
    uint8_t *buf = NULL;
    while (a->split_len[i] < size && a->quota - a->held >= PAGE) {
        uint64_t at = off + a->split_len[i], n = (a->quota - a->held) / PAGE * PAGE;
        if (n > size - a->split_len[i]) n = size - a->split_len[i];
        if (n > MOVE_CHUNK) n = MOVE_CHUNK;
        if (!buf && !(buf = (uint8_t *)malloc(MOVE_CHUNK))) return;
        memcpy(buf, a->file.base + at, (size_t)n);
        if (mmap(a->file.base + at, (size_t)n, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0) == MAP_FAILED) {
            /* (address space exhausted) put the file's pages back if the range lost them */
            mmap(a->file.base + at, (size_t)n, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_SHARED | MAP_NORESERVE, a->fd,
                 (off_t)at);
            break;
        }
        memcpy(a->file.base + at, buf, (size_t)n);
        hold(a, n);
        a->split_len[i] += n;
        if (fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)n) == 0) {
            a->punched += n;
            a->split_punched[i] += n;
        }
    }
    free(buf);
}

void file_arena_set_quota(FileArena *a, uint64_t quota) {
    quota = quota / PAGE * PAGE;
    if (quota && !a->anon.base && !a->held) map_anon(a, quota); /* (no room for it: the file's blocks alone) */
    a->quota = quota > a->held ? quota : a->held;
    for (uint32_t i = 0; i < a->n_splits; i++) grow_split(a, i);
}

/* Gives a split block's anonymous pages back: the file's mapping again over them. */
static void unsplit_block(FileArena *a, uint64_t off) {
    for (uint32_t i = 0; i < a->n_splits; i++) {
        if (a->split_off[i] != off) continue;
        uint64_t len = a->split_len[i];
        Header keep = *(Header *)(a->file.base + off);
        if (mmap(a->file.base + off, (size_t)len, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_SHARED | MAP_NORESERVE, a->fd,
                 (off_t)off) != MAP_FAILED) {
            a->held -= len;
            a->punched -= a->split_punched[i]; /* punched again, and counted, as the block is freed */
            *(Header *)(a->file.base + off) = keep;
        } else { /* (address space exhausted) the pages stay anonymous: dropped, still counted */
            madvise(a->file.base + off + PAGE, (size_t)(len - PAGE), MADV_DONTNEED);
        }
        a->split_off[i] = a->split_off[--a->n_splits];
        a->split_len[i] = a->split_len[a->n_splits];
        a->split_punched[i] = a->split_punched[a->n_splits];
        return;
    }
}

static void *arena_alloc(FileArena *a, size_t n) {
    int hint = bs_arena_hint;
    if (a->quota && hint != BS_ARENA_COLD) {
        void *p = space_alloc(a, &a->anon, n);
        if (p) return p;
    }
    uint64_t top = a->file.top;
    uint8_t *p = (uint8_t *)space_alloc(a, &a->file, n);
    if (p && hint == BS_ARENA_SPLIT && a->quota && a->file.top != top) {
        uint64_t off = (uint64_t)(p - a->file.base) - HEADER;
        Header *h = (Header *)(a->file.base + off);
        if (h->size > SMALL_MAX) split_block(a, off, h->size);
    }
    return p;
}

static void space_free(FileArena *a, Space *s, void *p) {
    uint64_t off = (uint64_t)((uint8_t *)p - s->base) - HEADER;
    Header *h = (Header *)(s->base + off);
    if (h->size <= SMALL_MAX) {
        unsigned k = small_class(h->size);
        h->next = s->small_free[k];
        s->small_free[k] = off + 1;
        return;
    }
    if (s->is_file && a->n_splits) unsplit_block(a, off);
    if (h->size > PAGE) {
        /* give the pages back; if the file system cannot punch holes they stay (no harm) */
        if (s->is_file) {
            /* (a free large block's `next` is unused: it keeps the bytes punched, 0 where the
             * file system cannot punch, which its reuse reserves again) */
            uint64_t from, len;
            punch_span(off, h->size, &from, &len);
            h->next = len && fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)from, (off_t)len) == 0 ? len : 0;
            a->punched += h->next;
        } else if (madvise(s->base + off + PAGE, (size_t)(h->size - PAGE), MADV_DONTNEED) == 0) {
            a->held -= h->size - PAGE;
        } else { /* (cannot happen on Linux) the pages stay, counted: forget the block */
            return;
        }
    }
    /* forget one: its pages are already given back (in the anonymous space its header page
     * stays counted) */
    if (s->n_big_free == BIG_FREE_MAX) s->n_big_free--;
    if (!s->big_free) {
        s->big_free = (uint64_t *)malloc(BIG_FREE_MAX * sizeof(uint64_t));
        if (!s->big_free) return; /* forgotten: only the address space is lost */
    }
    s->big_free[s->n_big_free++] = off;
}

void *bs_malloc(size_t n) {
    FileArena *a = bs_current_arena;
    return a ? arena_alloc(a, n) : malloc(n ? n : 1);
}

void *bs_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    FileArena *a = bs_current_arena;
    if (!a) return calloc(n ? n : 1, size ? size : 1);
    void *p = arena_alloc(a, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

void *bs_realloc(void *p, size_t n) {
    if (!p) return bs_malloc(n);
    Space *s = NULL;
    FileArena *a = owner(p, &s);
    if (!a) return realloc(p, n ? n : 1);
    Header *h = (Header *)((uint8_t *)p - HEADER);
    uint64_t have = h->size - HEADER;
    if ((uint64_t)n <= have) return p;
    void *q = arena_alloc(a, n); /* either space: the anonymous one while the quota allows */
    if (!q) return NULL;
    memcpy(q, p, (size_t)have);
    if (s->is_file && in_space(&a->anon, (const uint8_t *)q)) a->moved_to_anon++;
    else if (!s->is_file && in_space(&a->file, (const uint8_t *)q)) a->moved_to_file++;
    space_free(a, s, p);
    return q;
}

uint64_t file_arena_in_memory(const void *p) {
    Space *s = NULL;
    FileArena *a = owner(p, &s);
    if (!a) return UINT64_MAX; /* the C library's: all in memory */
    Header *h = (Header *)((uint8_t *)p - HEADER);
    if (!s->is_file) return h->size - HEADER;
    uint64_t off = (uint64_t)((const uint8_t *)p - a->file.base) - HEADER;
    for (uint32_t i = 0; i < a->n_splits; i++)
        if (a->split_off[i] == off) return a->split_len[i] > HEADER ? a->split_len[i] - HEADER : 0;
    return 0;
}

void bs_free(void *p) {
    if (!p) return;
    Space *s = NULL;
    FileArena *a = owner(p, &s);
    if (a) space_free(a, s, p);
    else free(p);
}

/*
 * filearena.c: blocks of a file mapped into memory (see filearena.h).
 *
 * Layout.  Every block starts with a 16-byte header (its size and, once freed, the next
 * free block).  Small blocks (up to SMALL_MAX bytes with the header) come in power-of-two
 * classes with one free list each; they are never returned to the file.  Large blocks are
 * whole pages, sized to the request: the merge loop's arrays grow by doubling, so rounding
 * them up to a power of two would double the file.  A freed large block keeps its first page
 * (its header) and gives the rest back to the file system (a punched hole: no disk, no page
 * cache); reusing it -- first fit, only if it is at most twice the request -- reserves
 * those pages again.  New blocks come from the top of the file, which grows by whole
 * extents of at least GROW_STEP bytes reserved with posix_fallocate.
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

typedef struct {
    uint64_t size; /* of the whole block, header included */
    uint64_t next; /* offset + 1 of the next free block of its list, 0 = none (when free) */
} Header;

struct FileArena {
    int fd;
    uint8_t *base;
    uint64_t reserve, top, file_bytes, punched, peak_file;
    uint64_t small_free[SMALL_MAX_SHIFT + 1]; /* offset + 1 of the first free block, per class */
    uint64_t *big_free;                       /* offsets of free large blocks */
    uint32_t n_big_free;
    int error;
    FileArena *next_arena;
};

_Thread_local FileArena *bs_current_arena = NULL;
static FileArena *arenas = NULL; /* every open arena, for bs_free and bs_realloc */

static FileArena *owner(const void *p) {
    const uint8_t *q = (const uint8_t *)p;
    for (FileArena *a = arenas; a; a = a->next_arena)
        if (q >= a->base && q < a->base + a->reserve) return a;
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

FileArena *file_arena_open(const char *dir, uint64_t reserve) {
    FileArena *a = (FileArena *)calloc(1, sizeof(FileArena));
    if (!a) { errno = ENOMEM; return NULL; }
    a->reserve = reserve ? (reserve + PAGE - 1) / PAGE * PAGE : DEFAULT_RESERVE;
    a->fd = open_scratch(dir);
    if (a->fd < 0) { int e = errno; free(a); errno = e; return NULL; }
    void *m = MAP_FAILED;
    /* less address space where a limit (ulimit -v) refuses that much, down to MIN_RESERVE */
    for (;;) {
        m = mmap(NULL, (size_t)a->reserve, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, a->fd, 0);
        if (m != MAP_FAILED || errno != ENOMEM || a->reserve / 2 < MIN_RESERVE) break;
        a->reserve /= 2;
    }
    if (m == MAP_FAILED) { int e = errno; close(a->fd); free(a); errno = e; return NULL; }
    a->base = (uint8_t *)m;
    a->top = PAGE; /* offset 0 is never a block: offsets + 1 stay non-zero in free lists */
    a->next_arena = arenas;
    arenas = a;
    return a;
}

void file_arena_close(FileArena *a) {
    if (!a) return;
    for (FileArena **p = &arenas; *p; p = &(*p)->next_arena)
        if (*p == a) { *p = a->next_arena; break; }
    if (bs_current_arena == a) bs_current_arena = NULL;
    munmap(a->base, (size_t)a->reserve);
    close(a->fd);
    free(a->big_free);
    free(a);
}

void file_arena_stats(const FileArena *a, FileArenaStats *out) {
    out->file = a->file_bytes - a->punched;
    out->peak_file = a->peak_file;
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

/* `size` bytes (a multiple of 16) from the top of the file, aligned to `align`. */
static uint64_t take_top(FileArena *a, uint64_t size, uint64_t align) {
    uint64_t off = (a->top + align - 1) / align * align;
    if (off > a->reserve || size > a->reserve - off) { a->error = ENOMEM; return 0; }
    uint64_t end = off + size;
    if (end > a->file_bytes) {
        uint64_t grow = end - a->file_bytes;
        if (grow < GROW_STEP) grow = GROW_STEP;
        if (grow > a->reserve - a->file_bytes) grow = a->reserve - a->file_bytes;
        if (reserve_range(a, a->file_bytes, grow)) return 0;
        a->file_bytes += grow;
        note_file(a);
    }
    a->top = end;
    return off;
}

static unsigned small_class(uint64_t need) {
    unsigned k = SMALL_MIN_SHIFT;
    while ((1ull << k) < need) k++;
    return k;
}

static void *arena_alloc(FileArena *a, size_t n) {
    if ((uint64_t)n > a->reserve) { a->error = ENOMEM; return NULL; }
    uint64_t need = (uint64_t)n + HEADER, off = 0;
    if (need <= SMALL_MAX) {
        unsigned k = small_class(need);
        if (a->small_free[k]) {
            off = a->small_free[k] - 1;
            a->small_free[k] = ((Header *)(a->base + off))->next;
        } else if (!(off = take_top(a, 1ull << k, HEADER))) {
            return NULL;
        }
        need = 1ull << k;
    } else {
        need = (need + PAGE - 1) / PAGE * PAGE;
        for (uint32_t i = 0; i < a->n_big_free; i++) {
            uint64_t o = a->big_free[i], size = ((Header *)(a->base + o))->size;
            if (size >= need && size / 2 <= need) {
                if (size > PAGE && reserve_range(a, o + PAGE, size - PAGE)) return NULL;
                a->punched -= size - PAGE;
                note_file(a);
                a->big_free[i] = a->big_free[--a->n_big_free];
                off = o;
                need = size;
                break;
            }
        }
        if (!off && !(off = take_top(a, need, PAGE))) return NULL;
    }
    Header *h = (Header *)(a->base + off);
    h->size = need;
    h->next = 0;
    return a->base + off + HEADER;
}

static void arena_free(FileArena *a, void *p) {
    uint64_t off = (uint64_t)((uint8_t *)p - a->base) - HEADER;
    Header *h = (Header *)(a->base + off);
    if (h->size <= SMALL_MAX) {
        unsigned k = small_class(h->size);
        h->next = a->small_free[k];
        a->small_free[k] = off + 1;
        return;
    }
    if (h->size > PAGE) {
        /* give the pages back; if the file system cannot punch holes they stay (no harm) */
        if (fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(off + PAGE), (off_t)(h->size - PAGE)) == 0)
            a->punched += h->size - PAGE;
    }
    if (a->n_big_free == BIG_FREE_MAX) a->n_big_free--; /* forget one: its pages are already given back */
    if (!a->big_free) {
        a->big_free = (uint64_t *)malloc(BIG_FREE_MAX * sizeof(uint64_t));
        if (!a->big_free) return; /* forgotten: only the address space is lost */
    }
    a->big_free[a->n_big_free++] = off;
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
    FileArena *a = owner(p);
    if (!a) return realloc(p, n ? n : 1);
    Header *h = (Header *)((uint8_t *)p - HEADER);
    uint64_t have = h->size - HEADER;
    if ((uint64_t)n <= have) return p;
    void *q = arena_alloc(a, n);
    if (!q) return NULL;
    memcpy(q, p, (size_t)have);
    arena_free(a, p);
    return q;
}

void bs_free(void *p) {
    if (!p) return;
    FileArena *a = owner(p);
    if (a) arena_free(a, p);
    else free(p);
}

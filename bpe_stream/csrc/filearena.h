/*
 * filearena.h: memory that lives in a file on disk -- the out-of-core trainer's tables.
 *
 * A FileArena reserves one large range of address space mapped MAP_SHARED from an unnamed
 * scratch file (O_TMPFILE in a directory the caller names, so a killed process leaves
 * nothing behind) and hands out blocks of it.  Its pages are file-backed: the kernel writes
 * them back and may drop them like any page cache, so they are not the process's anonymous
 * memory.  The file only grows by whole extents reserved with posix_fallocate, so a full disk
 * is an error from an allocation (errno ENOSPC, see file_arena_error), never a SIGBUS on a
 * later write.
 *
 * The merge loop's code allocates through bs_malloc / bs_calloc / bs_realloc / bs_free
 * (below): they use the arena made current with BS_ARENA_SCOPE, else the C library; freeing
 * or growing a block goes back to whichever of the two it came from (an arena owns one
 * address range), so code that runs both in and out of an arena needs no flag.
 */
#ifndef BPE_STREAM_FILEARENA_H
#define BPE_STREAM_FILEARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct FileArena FileArena;

/* Opens an arena whose scratch file lives in `dir`, reserving `reserve` bytes of address
 * space (0: a default of 1 TiB; nothing is allocated on disk until used).  NULL with errno
 * set when the file or the mapping cannot be made. */
FileArena *file_arena_open(const char *dir, uint64_t reserve);
void file_arena_close(FileArena *a);

typedef struct {
    uint64_t file;      /* bytes the scratch file holds on disk (allocated extents) */
    uint64_t peak_file; /* the most it held */
} FileArenaStats;
void file_arena_stats(const FileArena *a, FileArenaStats *out);

/* The errno of the last allocation that failed for want of disk (ENOSPC, EDQUOT, ...), 0 if none. */
int file_arena_error(const FileArena *a);

/* The arena allocations go to on this thread (NULL: the C library). */
extern _Thread_local FileArena *bs_current_arena;

/* Sets the current arena for the rest of the enclosing block and restores the previous one
 * when the block is left (by any path, return included). */
#define BS_ARENA_SCOPE(arena)                                                              \
    FileArena *bs_arena_saved_ __attribute__((cleanup(bs_arena_restore))) = bs_current_arena; \
    bs_current_arena = (arena)
static inline void bs_arena_restore(FileArena **saved) { bs_current_arena = *saved; }

void *bs_malloc(size_t n);
void *bs_calloc(size_t n, size_t size);
void *bs_realloc(void *p, size_t n);
void bs_free(void *p);

#endif

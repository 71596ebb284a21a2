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
 *
 * The budget before the disk: an arena opened with an anonymous quota serves blocks from
 * anonymous memory while the bytes it holds there stay within the quota, and from the file
 * beyond it (see filearena.c).  Once the file's dirty pages pass the kernel's dirty limits,
 * every write fault on the mapping is throttled while the flusher rewrites pages the loop
 * dirties again, so the quota goes to the table dirtied most densely per byte: the merge
 * loop allocates its positions under BS_ARENA_SPLIT (in memory as far as the quota goes,
 * the rest in the file) and its frequencies, written once, under BS_ARENA_COLD (the file);
 * see BS_ARENA_HINT_SCOPE below.
 */
#ifndef BPE_STREAM_FILEARENA_H
#define BPE_STREAM_FILEARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct FileArena FileArena;

/* Opens an arena whose scratch file lives in `dir`, reserving `reserve` bytes of address
 * space (0: a default of 1 TiB; nothing is allocated on disk until used).  Its anonymous quota
 * is 0 (every block in the file) until file_arena_set_quota.  NULL with errno set when the
 * file or the mapping cannot be made. */
FileArena *file_arena_open(const char *dir, uint64_t reserve);
void file_arena_close(FileArena *a);

typedef struct {
    uint64_t file;      /* bytes the scratch file holds on disk (allocated extents) */
    uint64_t peak_file; /* the most it held */
    uint64_t anon;      /* bytes of anonymous memory the arena's blocks hold (their pages) */
    uint64_t peak_anon; /* the most they held: never above anon_quota */
    uint64_t anon_quota;
    uint64_t moved_to_file, moved_to_anon; /* blocks bs_realloc moved from one side to the other */
} FileArenaStats;
void file_arena_stats(const FileArena *a, FileArenaStats *out);

/* Sets the anonymous quota: up to that many bytes (rounded down to pages) of the blocks from
 * now on in anonymous memory, never less than the arena holds there now.  The first quota
 * reserves the anonymous space (4 times the quota of address space); a raised quota first
 * moves more of the split blocks' pages (BS_ARENA_SPLIT) from the file into memory. */
void file_arena_set_quota(FileArena *a, uint64_t quota);

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

/* Where an arena with a quota puts the blocks allocated on this thread: BS_ARENA_HOT (the
 * default) in anonymous memory while the quota allows, else in the file; BS_ARENA_COLD in the
 * file; BS_ARENA_SPLIT like HOT, except that a large block that does not fit the quota goes to
 * the file with as many of its first pages as the quota leaves in anonymous memory.  Set for a
 * block of code with BS_ARENA_HINT_SCOPE(hint). */
enum { BS_ARENA_HOT = 0, BS_ARENA_COLD = 1, BS_ARENA_SPLIT = 2 };
extern _Thread_local int bs_arena_hint;
#define BS_ARENA_HINT_SCOPE(hint)                                                           \
    int bs_arena_hint_saved_ __attribute__((cleanup(bs_arena_hint_restore))) = bs_arena_hint; \
    bs_arena_hint = (hint)
static inline void bs_arena_hint_restore(int *saved) { bs_arena_hint = *saved; }

/* How many bytes from the start of block `p` (from bs_malloc & co.) are anonymous memory: all
 * of it for a block of the anonymous space or of the C library, the split part of a file block
 * (BS_ARENA_SPLIT), else 0. */
uint64_t file_arena_in_memory(const void *p);

void *bs_malloc(size_t n);
void *bs_calloc(size_t n, size_t size);
void *bs_realloc(void *p, size_t n);
void bs_free(void *p);

#endif

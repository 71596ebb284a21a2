/*
 * hugepages.h -- large arrays on transparent huge pages, where the kernel offers them.
 *
 * The count table's slots, entries and keys, and its sort's items, are touched at random
 * across tens of MB.  On 4 KiB pages every first touch of a page is a fault -- of the
 * 38,600 faults of a 20 MB multilingual count, 45% were in these arrays -- and most probes
 * miss the TLB.  An array of at least BS_HUGE_MIN bytes is therefore mapped on its own,
 * aligned to 2 MiB and marked MADV_HUGEPAGE (Linux; glibc's `glibc.malloc.hugetlb=1`
 * tunable does the same for every allocation).  A smaller array, every array where the
 * system has no such mapping, and every array under AddressSanitizer (which checks the
 * bounds of malloc's) comes from malloc.  The kernel decides whether huge pages are given:
 * with THP set to `never` they are ordinary pages.  Nothing but speed depends on it.
 *
 * The caller hands the array's size back to every call, so no header is kept: the size,
 * not the pointer, says which allocator an array came from.
 */
#ifndef BS_HUGEPAGES_H
#define BS_HUGEPAGES_H
#include <stddef.h>

#define BS_HUGE_PAGE ((size_t)2 << 20)
#define BS_HUGE_MIN ((size_t)4 << 20)

/* n zero bytes (at least 1), or NULL. */
void *bs_huge_zeroed(size_t n);

/* An array of new_n bytes holding the first min(old_n, new_n) bytes of p (an array of old_n
 * bytes from these functions, or NULL with old_n 0); the bytes after those are undefined.
 * p is freed, or left as it was when NULL is returned. */
void *bs_huge_resize(void *p, size_t old_n, size_t new_n);

/* Frees an array of n bytes from these functions (NULL: nothing). */
void bs_huge_free(void *p, size_t n);

#endif

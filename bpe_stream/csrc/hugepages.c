/* hugepages.c -- large arrays on transparent huge pages (see hugepages.h). */
#include "hugepages.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

/* Under AddressSanitizer (make asan) every array is malloc's, whose bounds it checks. */
#if defined(__SANITIZE_ADDRESS__) /* gcc */
#define BS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) /* clang */
#define BS_ASAN 1
#endif
#endif

#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS) && !defined(BS_ASAN)
#define HAVE_HUGE 1
#else
#define HAVE_HUGE 0
#endif

/* Whether an array of n bytes is mapped on its own (else it is malloc's). */
static int mapped(size_t n) { return HAVE_HUGE && n >= BS_HUGE_MIN; }

/* n rounded up to whole huge pages: a mapping's length (n <= SIZE_MAX - BS_HUGE_PAGE). */
static size_t mapped_len(size_t n) { return (n + BS_HUGE_PAGE - 1) & ~(BS_HUGE_PAGE - 1); }

#if HAVE_HUGE
/* A fresh mapping of mapped_len(n) zero bytes starting on a 2 MiB boundary: mapped with one
 * huge page to spare, its unaligned head and tail unmapped again.  NULL on failure. */
static void *map_aligned(size_t n) {
    if (n > SIZE_MAX - 2 * BS_HUGE_PAGE) return NULL;
    size_t len = mapped_len(n), span = len + BS_HUGE_PAGE;
    uint8_t *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + BS_HUGE_PAGE - 1) & ~(uintptr_t)(BS_HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + span > p + len) munmap(p + len, (size_t)(raw + span - (p + len)));
    madvise(p, len, MADV_HUGEPAGE); /* a hint: without THP the pages are ordinary ones */
    return p;
}
#endif

void *bs_huge_zeroed(size_t n) {
#if HAVE_HUGE
    if (mapped(n)) return map_aligned(n);
#endif
    return calloc(n ? n : 1, 1);
}

void *bs_huge_resize(void *p, size_t old_n, size_t new_n) {
    if (!p) old_n = 0;
    if (!mapped(old_n) && !mapped(new_n)) return realloc(p, new_n ? new_n : 1);
#if HAVE_HUGE
    if (mapped(old_n) && mapped(new_n) && mapped_len(old_n) == mapped_len(new_n)) return p; /* the same mapping */
    void *q = bs_huge_zeroed(new_n);
    if (!q) return NULL;
    if (old_n) memcpy(q, p, old_n < new_n ? old_n : new_n);
    bs_huge_free(p, old_n);
    return q;
#else
    return NULL; /* unreachable: nothing is mapped */
#endif
}

void bs_huge_free(void *p, size_t n) {
    if (!p) return;
#if HAVE_HUGE
    if (mapped(n)) {
        munmap(p, mapped_len(n));
        return;
    }
#endif
    free(p);
}

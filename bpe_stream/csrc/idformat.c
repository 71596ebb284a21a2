/* idformat.c: ids to txt, u16, u32 or host-order bytes (see idformat.h). */
#include "idformat.h"

static const char *const FORMAT_NAMES[BS_FMT_COUNT] = {"ids", "u32", "u16", "txt"};

int bs_format_by_name(const char *name) {
    for (int f = 0; f < BS_FMT_COUNT; f++)
        if (!strcmp(name, FORMAT_NAMES[f])) return f;
    return -1;
}

const char *bs_format_name(int fmt) { return fmt >= 0 && fmt < BS_FMT_COUNT ? FORMAT_NAMES[fmt] : NULL; }

/* Branch-free (the sizes of neighbouring ids vary at random; the compiler vectorizes the sum). */
static inline size_t digits(uint32_t v) {
    return (size_t)1 + (v >= 10u) + (v >= 100u) + (v >= 1000u) + (v >= 10000u) + (v >= 100000u) + (v >= 1000000u) +
           (v >= 10000000u) + (v >= 100000000u) + (v >= 1000000000u);
}

int bs_format_size(const uint32_t *ids, size_t n, int fmt, size_t *size) {
    switch (fmt) {
    case BS_FMT_IDS:
    case BS_FMT_U32: *size = 4 * n; return BS_OK; /* n came from a buffer of n ids */
    case BS_FMT_U16:
        for (size_t k = 0; k < n; k++)
            if (ids[k] > 0xFFFFu) return BS_TOO_LARGE;
        *size = 2 * n;
        return BS_OK;
    case BS_FMT_TXT: {
        if (n > SIZE_MAX / 11) return BS_TOO_LARGE; /* ten digits and a space each */
        size_t total = n ? n - 1 : 0; /* the spaces */
        for (size_t k = 0; k < n; k++) total += digits(ids[k]);
        *size = total;
        return BS_OK;
    }
    default: return BS_BAD_ARGUMENT;
    }
}

/* "00" "01" ... "99": two digits at a time from the right. */
static const char PAIRS[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                               "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                               "8081828384858687888990919293949596979899";

/* v in decimal ending just before `end`; returns where it starts. */
static inline uint8_t *put_decimal(uint8_t *end, uint32_t v) {
    while (v >= 100) {
        const char *p = PAIRS + 2 * (v % 100);
        v /= 100;
        *--end = (uint8_t)p[1];
        *--end = (uint8_t)p[0];
    }
    if (v >= 10) {
        *--end = (uint8_t)PAIRS[2 * v + 1];
        *--end = (uint8_t)PAIRS[2 * v];
    } else {
        *--end = (uint8_t)('0' + v);
    }
    return end;
}

void bs_format(const uint32_t *ids, size_t n, int fmt, uint8_t *out) {
    switch (fmt) {
    case BS_FMT_IDS:
        if (n) memcpy(out, ids, 4 * n); /* (no ids: ids may be NULL) */
        return;
    case BS_FMT_U32:
        for (size_t k = 0; k < n; k++, out += 4)
            out[0] = (uint8_t)ids[k], out[1] = (uint8_t)(ids[k] >> 8), out[2] = (uint8_t)(ids[k] >> 16),
            out[3] = (uint8_t)(ids[k] >> 24);
        return;
    case BS_FMT_U16:
        for (size_t k = 0; k < n; k++, out += 2) out[0] = (uint8_t)ids[k], out[1] = (uint8_t)(ids[k] >> 8);
        return;
    case BS_FMT_TXT:
        for (size_t k = 0; k < n; k++) {
            if (k) *out++ = ' ';
            size_t d = digits(ids[k]);
            put_decimal(out + d, ids[k]);
            out += d;
        }
        return;
    default: return;
    }
}

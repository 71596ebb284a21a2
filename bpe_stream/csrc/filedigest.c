/* filedigest.c: the XXH3 file digest (filedigest.h), xxHash compiled in this one unit. */
#include "filedigest.h"

#include <stdlib.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t's size, for a state of our own */
#define XXH_IMPLEMENTATION
#include "xxhash/xxhash.h"

struct bs_filedigest {
    XXH3_state_t state;
};

bs_filedigest *bs_fd_new(void) {
    /* XXH3_state_t asks for 64-byte alignment (its accumulators) */
    bs_filedigest *d = aligned_alloc(64, (sizeof(bs_filedigest) + 63) / 64 * 64);
    if (d) XXH3_128bits_reset(&d->state);
    return d;
}

bs_filedigest *bs_fd_copy(const bs_filedigest *d) {
    bs_filedigest *twin = aligned_alloc(64, (sizeof(bs_filedigest) + 63) / 64 * 64);
    if (twin) XXH3_copyState(&twin->state, &d->state);
    return twin;
}

void bs_fd_free(bs_filedigest *d) { free(d); }

void bs_fd_update(bs_filedigest *d, const void *data, size_t len) {
    if (len) XXH3_128bits_update(&d->state, data, len);
}

void bs_fd_digest(const bs_filedigest *d, uint8_t out[BS_FD_DIGEST_SIZE]) {
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&d->state));
    for (int i = 0; i < BS_FD_DIGEST_SIZE; i++) out[i] = canon.digest[i];
}

/*
 * filedigest.h: the streaming 128-bit XXH3 digest that identifies the bytes of a counted file
 * (bpe_stream/count/seen_files.py's "xxh3" records).
 *
 * A file's record keeps a digest of exactly the bytes its counts cover, chained over 1 MiB
 * blocks so that a resumed count hashes on from the last block; every byte of every input
 * passes through it, once.  BLAKE2b, the digest of older records, hashes about 0.9 GB/s on one
 * core and cannot be split (each block's digest starts from the previous one), so on a
 * machine of many cores it was the ceiling of a count, and on 2 cores it took a third of
 * what the scanners left; XXH3 hashes at the speed of memory.  It is not a cryptographic
 * digest: it tells a file that grew or changed from the one counted, as a checksum does; no
 * one gains by forging one of their own input files.
 *
 * The digest is XXH3_128bits of all the bytes fed, written big-endian (XXH128_canonical_t),
 * the same bytes as the xxhash package's xxh3_128().digest() (the tests' oracle).
 */
#ifndef BPE_STREAM_FILEDIGEST_H
#define BPE_STREAM_FILEDIGEST_H

#include <stddef.h>
#include <stdint.h>

#define BS_FD_DIGEST_SIZE 16

typedef struct bs_filedigest bs_filedigest;

/* NULL when out of memory. */
bs_filedigest *bs_fd_new(void);
/* A copy of the state (NULL when out of memory): both go on independently. */
bs_filedigest *bs_fd_copy(const bs_filedigest *d);
void bs_fd_free(bs_filedigest *d);
void bs_fd_update(bs_filedigest *d, const void *data, size_t len);
/* The digest of the bytes fed so far (the state goes on). */
void bs_fd_digest(const bs_filedigest *d, uint8_t out[BS_FD_DIGEST_SIZE]);

#endif

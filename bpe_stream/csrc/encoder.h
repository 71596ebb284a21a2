/*
 * encoder.h: a pretoken's bytes to ids by merge rank.
 *
 * The bytes become byte ids, then the adjacent pair of lowest merge rank is merged,
 * leftmost first among equal ranks, until no pair has a rank -- the same as replaying the
 * merges in training order (bpe.encode_by_rank is the reference).  A heap over positions
 * keeps a long pretoken (a CJK clause, a whole document) at O(n log n); a short one (most
 * of them) is merged by scanning its few pairs.
 *
 * Use: encoder_new with the number of merges, encoder_add_merge for each in rank order,
 * then encoder_encode for each pretoken.  (The cache pretoken -> ids is the caller's.)
 */
#ifndef BPE_STREAM_ENCODER_H
#define BPE_STREAM_ENCODER_H

#include "common.h"

typedef struct Encoder Encoder;

/* byte_ids: the id of each byte; marker: the id appended to each pretoken, or -1. */
Encoder *encoder_new(const uint32_t byte_ids[256], int64_t marker, uint64_t n_merges, int *status);
void encoder_free(Encoder *e);
/* A copy with the same merges and scratch of its own: an encoder for another thread. */
Encoder *encoder_clone(const Encoder *e, int *status);
/* The next merge by rank: (left, right) -> new_id.  The first merge of a pair wins. */
int encoder_add_merge(Encoder *e, uint32_t left, uint32_t right, uint32_t new_id);
/* The ids of one pretoken in *ids (host-order uint32, the encoder's buffer, valid until
 * the next call), *n_ids of them. */
int encoder_encode(Encoder *e, const uint8_t *data, size_t n, const uint32_t **ids, size_t *n_ids);

#endif

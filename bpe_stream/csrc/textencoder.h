/*
 * textencoder.h: UTF-8 bytes to token ids in one pass -- what Tokenizer.encode does to a
 * document (or a piece of one cut at a safe point), without a Python object per pretoken.
 *
 * The bytes are split on special tokens (specials.h), each stretch between them is
 * scanned into pretokens with a named pattern (scan.h; a stretch is scanned as a text of
 * its own, as Pretokenizer.split sees it), and each pretoken's ids come from the cache
 * (idcache.h) or, the first time, from the rank-ordered BPE of the encoder (encoder.h),
 * which then go into the cache.  Bytes that are not UTF-8 are kept exactly, as the
 * scanner keeps them.  The encoder is borrowed: it must outlive the text encoder, and
 * neither may be used by two threads at once.
 */
#ifndef BPE_STREAM_TEXTENCODER_H
#define BPE_STREAM_TEXTENCODER_H

#include "common.h"
#include "encoder.h"

typedef struct bs_text_encoder bs_text_encoder;

/* pattern: a bs_scan_pattern (BS_BAD_ARGUMENT otherwise); max_bytes: pretokens longer
 * than this are encoded as their pieces (bs_scan_pieces; 0: no cap); cache_entries:
 * idcache.h's max_entries. */
bs_text_encoder *bs_te_new(Encoder *enc, int pattern, size_t max_bytes, uint32_t cache_entries, int *status);
void bs_te_free(bs_text_encoder *te);
/* A special token and its id (specials.h). */
int bs_te_add_special(bs_text_encoder *te, const uint8_t *token, size_t len, uint32_t id);
/* The number of pretokens cached now. */
size_t bs_te_cached(const bs_text_encoder *te);

/* The ids of data[0:len) in *ids (host-order uint32, the text encoder's buffer, valid
 * until the next call), *n_ids of them.  split_specials 0: the bytes hold no special token
 * (they were split off before) and are one stretch. */
int bs_te_encode(bs_text_encoder *te, const uint8_t *data, size_t len, int split_specials, const uint32_t **ids,
                 size_t *n_ids);

/* Lets go of the ids buffer when it holds more than BS_TE_KEEP_IDS ids (one huge text
 * must not keep its memory for the small ones after it); the ids of the last call are
 * then gone. */
#define BS_TE_KEEP_IDS (1u << 22)
void bs_te_trim(bs_text_encoder *te);

#endif

/*
 * specials.h: finding special tokens in UTF-8 bytes, as pretokenize.SpecialSplitter does
 * in text -- scanning left to right, the leftmost occurrence wins, and at one position the
 * longest token that starts there (a special token is never looked for inside another).
 *
 * Matching bytes gives the matches of matching the text decoded with surrogateescape: the
 * tokens are valid UTF-8, so a token starts with a byte that starts a character (ASCII or
 * a lead byte, never a continuation byte) and its bytes decode as its own characters
 * wherever they appear.
 */
#ifndef BPE_STREAM_SPECIALS_H
#define BPE_STREAM_SPECIALS_H

#include "common.h"

typedef struct bs_specials bs_specials;

bs_specials *bs_specials_new(void);
void bs_specials_free(bs_specials *s);
/* Adds a token (its bytes are copied) with the id it encodes to.  The first of equal
 * tokens is kept.  BS_BAD_ARGUMENT for an empty token. */
int bs_specials_add(bs_specials *s, const uint8_t *token, size_t len, uint32_t id);
size_t bs_specials_count(const bs_specials *s);
/* Where the first match in data[from:len) starts (len when there is none), with its
 * length in *match_len and its id in *id. */
size_t bs_specials_find(const bs_specials *s, const uint8_t *data, size_t len, size_t from, size_t *match_len,
                        uint32_t *id);

#endif

/*
 * scan.h -- the native pretokenizer scanner: UTF-8 bytes in, pretoken spans out.
 *
 * For the named pretokenizers of bpe_stream/pretok/pretokenize.py (gpt2, cl100k, o200k,
 * whitespace, words, none) it finds exactly the matches regex.findall finds in
 * data.decode("utf-8", "surrogateescape"), as byte offsets into data: a byte that is not
 * part of a well-formed UTF-8 sequence (as CPython's decoder decides) is one character of
 * its own, the lone surrogate U+DC00+byte.  No allocation, no Python: the caller hands an
 * array of spans and scans again from where a call stopped.
 */
#ifndef BS_SCAN_H
#define BS_SCAN_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
    BS_SCAN_GPT2 = 0,
    BS_SCAN_CL100K = 1,
    BS_SCAN_O200K = 2,
    BS_SCAN_WHITESPACE = 3,
    BS_SCAN_WORDS = 4,
    BS_SCAN_NONE = 5,
    BS_SCAN_N_PATTERNS = 6
} bs_scan_pattern;

/* One pretoken: data[start:end).  Only `words` leaves gaps (the spaces between them). */
typedef struct {
    size_t start, end;
} bs_span;

#define BS_SCAN_EPATTERN (-1) /* not a bs_scan_pattern */

/* The pattern named `name` ("gpt2", ...), or BS_SCAN_EPATTERN. */
int bs_scan_pattern_by_name(const char *name);
/* The name of a pattern, or NULL. */
const char *bs_scan_pattern_name(int pattern);

/*
 * Writes the spans of the next pretokens of data[0:len), from *pos on, into out[0:cap),
 * and advances *pos past the last one written (to len once none is left).  Returns how
 * many were written (0 only at the end), or BS_SCAN_EPATTERN.  *pos must be 0 or where an
 * earlier call on the same data left it: the patterns never look behind a match's start,
 * so scanning on from there gives the pretokens of the whole.  `$` and end-of-text
 * lookaheads see data[len], so a piece scanned alone is the whole text of that call.
 */
ptrdiff_t bs_scan(int pattern, const uint8_t *data, size_t len, size_t *pos, bs_span *out, size_t cap);

/*
 * The end of the first piece of the pretoken data[start:end) under a cap of max_bytes:
 * as many whole characters (as the scanner decodes them: a well-formed UTF-8 sequence, or
 * one byte of its own) as fit in max_bytes -- at least one -- or end when max_bytes is 0
 * or the rest fits.  The pieces of a pretoken longer than the cap are cut greedily from
 * its start, so cutting on from any piece's start gives the same pieces.  The Python
 * twin is pretokenize.cap_pieces.
 */
size_t bs_piece_end(const uint8_t *data, size_t start, size_t end, size_t max_bytes);

/*
 * bs_scan with each pretoken longer than max_bytes (0: no cap) cut into pieces by
 * bs_piece_end: the spans written are the pieces.  *rest is where the pretoken being cut
 * ends while its pieces are not all written (0 otherwise); start with *pos = *rest = 0 and
 * hand both back unchanged to go on.
 */
ptrdiff_t bs_scan_pieces(int pattern, size_t max_bytes, const uint8_t *data, size_t len, size_t *pos, size_t *rest,
                         bs_span *out, size_t cap);

/* The offset of the first byte of data[0:len) that is not part of well-formed UTF-8 --
 * where data.decode("utf-8") fails (its UnicodeDecodeError's start) -- or len. */
size_t bs_utf8_first_invalid(const uint8_t *data, size_t len);

/* The regex release and the Unicode version the character tables were generated from. */
const char *bs_scan_regex_version(void);
const char *bs_scan_unicode_version(void);

#endif

/*
 * scan.c -- the native pretokenizer scanner (see scan.h): regex.findall's matches of the
 * named patterns, found on UTF-8 bytes without a regex engine.
 *
 * Each pattern is a small hand-written matcher that answers, for a start position p, where
 * the pattern's match at p ends (p itself: no match there).  It follows regex's semantics
 * step by step: alternatives are tried left to right and the first that matches wins (not
 * the longest), greedy runs give characters back one at a time until the rest matches,
 * possessive ones never do.  The comments at each step name the alternative it decides.
 *
 * Characters.  At each position the text is decoded as CPython's UTF-8 decoder does it: a
 * well-formed sequence (Unicode Table 3-7: no overlong forms, no surrogates, nothing above
 * U+10FFFF) is one character, and any other byte is one character of its own, U+DC00+byte
 * -- what the surrogateescape handler makes of it (a maximal ill-formed prefix holds only
 * bytes that cannot start a sequence, so byte-by-byte and CPython's error ranges agree).
 * A character's classes come from the generated unicode_tables.h: bit masks of the classes
 * as the patterns spell them, asked of regex itself.  ASCII is one table lookup, and the
 * runs of the classes (letters, digits, spaces, other) step over up to 8 ASCII bytes at a
 * time (SWAR, on a little-endian GCC/Clang build): the ASCII members of each class are
 * spelled out as byte ranges there, which must agree with bs_ascii (they do for every
 * regex release: ASCII's classes are fixed).  The common 2- and 3-byte UTF-8 forms
 * decode inline, the rest out of line.
 */
#include "scan.h"

#include "unicode_tables.h"

#include <string.h>

#define NO_MATCH SIZE_MAX

/* The per-character steps must be inlined into the matchers (the ASCII path is a table
 * lookup); decoding a multi-byte character is the rare, out-of-line path. */
#if defined(__GNUC__) || defined(__clang__)
#define HOT static inline __attribute__((always_inline))
#define COLD static __attribute__((noinline))
#else
#define HOT static inline
#define COLD static
#endif

/* One character: its class mask, code point and length in bytes (len 0, cls 0 past the end). */
typedef struct {
    uint32_t cls, cp, len;
} chr_t;

static inline uint32_t class_of(uint32_t cp) {
    if (cp < 0x80) return bs_ascii[cp];
    return bs_stage2[((uint32_t)bs_stage1[cp >> BS_BLOCK_SHIFT] << BS_BLOCK_SHIFT) | (cp & BS_BLOCK_MASK)];
}

/* The code point of the character that starts with the non-ASCII byte s[i], and its length. */
COLD uint32_t decode_multibyte(const uint8_t *s, size_t n, size_t i, uint32_t *len) {
    uint32_t b0 = s[i], lo = 0x80, hi = 0xBF, need, cp;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1, cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2, cp = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;      /* below: overlong */
        else if (b0 == 0xED) hi = 0x9F; /* above: a surrogate */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3, cp = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;      /* below: overlong */
        else if (b0 == 0xF4) hi = 0x8F; /* above: beyond U+10FFFF */
    } else {
        goto invalid; /* a continuation byte, C0, C1 (overlong) or F5..FF */
    }
    if (n - i <= need) goto invalid; /* truncated by the end of the text */
    if (s[i + 1] < lo || s[i + 1] > hi) goto invalid;
    for (uint32_t k = 1; k <= need; k++) {
        uint32_t b = s[i + k];
        if ((b & 0xC0) != 0x80) goto invalid;
        cp = (cp << 6) | (b & 0x3F);
    }
    *len = need + 1;
    return cp;
invalid:
    *len = 1;
    return 0xDC00 + b0;
}

HOT chr_t at(const uint8_t *s, size_t n, size_t i) {
    chr_t c;
    if (i >= n) {
        c.cls = 0, c.cp = UINT32_MAX, c.len = 0;
        return c;
    }
    uint32_t b0 = s[i];
    if (b0 < 0x80) {
        c.cp = b0, c.len = 1, c.cls = bs_ascii[b0];
        return c;
    }
    /* the common well-formed 2- and 3-byte forms inline (no overlong form, no surrogate:
     * C2..DF, and E1..EC, EE, EF, whose second byte may be any continuation byte) */
    if (b0 >= 0xC2 && b0 <= 0xDF && n - i >= 2 && (s[i + 1] & 0xC0) == 0x80) {
        c.cp = ((b0 & 0x1F) << 6) | (s[i + 1] & 0x3Fu), c.len = 2;
    } else if (b0 >= 0xE1 && b0 <= 0xEF && b0 != 0xED && n - i >= 3 && (s[i + 1] & 0xC0) == 0x80 &&
               (s[i + 2] & 0xC0) == 0x80) {
        c.cp = ((b0 & 0x0F) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu), c.len = 3;
    } else {
        c.cp = decode_multibyte(s, n, i, &c.len);
    }
    c.cls = class_of(c.cp);
    return c;
}

#define NOT_SPACE (BS_L | BS_N | BS_OTHER) /* the generator checks these cover \S */

/* Eight ASCII bytes at a time (a little-endian machine with GCC or Clang builtins): which
 * bytes of a word are ASCII members of a class, as the high bit of each byte.  The ASCII
 * members of the classes (bs_ascii) are fixed: \p{L} is [A-Za-z], [\p{Lu}..] [A-Z],
 * [\p{Ll}..] [a-z], \p{N} [0-9], \s [\t\n\v\f\r ], [^\s\p{L}\p{N}] the rest. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SWAR 1
#define ONES 0x0101010101010101ull
#define HIGH 0x8080808080808080ull

/* Per byte of t (each below 0x80): the high bit where the byte is at least a (a <= 0x80);
 * no sum carries into the next byte. */
static inline uint64_t at_least(uint64_t t, uint64_t a) { return (t + (0x80 - a) * ONES) & HIGH; }
static inline uint64_t within(uint64_t t, uint64_t a, uint64_t b) { return at_least(t, a) & ~at_least(t, b + 1); }

/* Whether ascii_members knows the class `mask` (a constant where it is asked). */
static inline int swar_class(uint32_t mask) {
    return mask == BS_L || mask == BS_N || mask == BS_S || mask == BS_OTHER || mask == BS_UP || mask == BS_LO ||
           mask == NOT_SPACE;
}

static inline uint64_t space_members(uint64_t t) { return within(t, 0x09, 0x0D) | within(t, 0x20, 0x20); }
static inline uint64_t crlf_members(uint64_t t) { return within(t, 0x0A, 0x0A) | within(t, 0x0D, 0x0D); }

HOT uint64_t ascii_members(uint64_t w, uint32_t mask) {
    uint64_t t = w & ~HIGH, ascii = ~w & HIGH, m;
    if (mask == BS_L) m = within(t | 0x20 * ONES, 'a', 'z');
    else if (mask == BS_UP) m = within(t, 'A', 'Z');
    else if (mask == BS_LO) m = within(t, 'a', 'z');
    else if (mask == BS_N) m = within(t, '0', '9');
    else if (mask == BS_S) m = space_members(t);
    else if (mask == NOT_SPACE) m = ~space_members(t);
    else m = ~(within(t | 0x20 * ONES, 'a', 'z') | within(t, '0', '9') | space_members(t)); /* BS_OTHER */
    return m & ascii;
}

static inline uint64_t load_word(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}
#endif

/* The end of the run of characters in `mask` from i (i itself if there is none). */
HOT size_t run(const uint8_t *s, size_t n, size_t i, uint32_t mask) {
#ifdef SWAR
    if (swar_class(mask)) {
        while (n - i >= 8) {
            if (s[i] < 0x80) { /* (a run of non-ASCII letters is decoded without a word step each) */
                uint64_t out = ~ascii_members(load_word(s + i), mask) & HIGH;
                if (!out) {
                    i += 8;
                    continue;
                }
                i += (size_t)__builtin_ctzll(out) >> 3;
                if (s[i] < 0x80) return i; /* an ASCII non-member */
            }
            chr_t c = at(s, n, i);
            if (!(c.cls & mask)) return i;
            i += c.len;
        }
    }
#endif
    for (;;) {
        chr_t c = at(s, n, i);
        if (!(c.cls & mask)) return i;
        i += c.len;
    }
}

/* The same, at most `most` characters long. */
HOT size_t run_at_most(const uint8_t *s, size_t n, size_t i, uint32_t mask, int most) {
#ifdef SWAR
    if (swar_class(mask) && most < 8 && n - i >= 8) {
        uint64_t out = ~ascii_members(load_word(s + i), mask) & HIGH;
        int k = out ? __builtin_ctzll(out) >> 3 : 8;
        if (k >= most) return i + (size_t)most; /* `most` ASCII members */
        if (s[i + k] < 0x80) return i + (size_t)k;
        /* else a non-ASCII character within reach: character by character */
    }
#endif
    for (int k = 0; k < most; k++) {
        chr_t c = at(s, n, i);
        if (!(c.cls & mask)) break;
        i += c.len;
    }
    return i;
}

/* The end of the run of CR, LF and '/' from i (o200k's [\r\n/]*). */
HOT size_t run_crlf_slash(const uint8_t *s, size_t n, size_t i) {
    while (i < n && (s[i] == '\r' || s[i] == '\n' || s[i] == '/')) i++;
    return i;
}

/* A maximal run of \s from a space at p: where it ends, where its last character starts,
 * and where its last CR or LF ends (0 for none: that end is never at 0). */
typedef struct {
    size_t end, last, after_crlf;
} space_run;

HOT space_run spaces(const uint8_t *s, size_t n, size_t p) {
    space_run r = {p, p, 0};
#ifdef SWAR
    while (n - r.end >= 8) { /* up to 8 ASCII spaces a step, their last CR or LF found by its bit */
        uint64_t w = load_word(s + r.end), t = w & ~HIGH;
        uint64_t out = ~(space_members(t) & ~w) & HIGH;
        size_t k = out ? (size_t)__builtin_ctzll(out) >> 3 : 8;
        if (k) {
            uint64_t crlf = crlf_members(t) & (k == 8 ? HIGH : HIGH & ((1ull << (8 * k)) - 1));
            if (crlf) r.after_crlf = r.end + ((size_t)(63 - __builtin_clzll(crlf)) >> 3) + 1;
            r.last = r.end + k - 1;
            r.end += k;
        }
        if (k < 8) {
            if (s[r.end] < 0x80) return r; /* an ASCII non-space */
            break;                         /* a non-ASCII character: character by character */
        }
    }
#endif
    for (;;) {
        chr_t c = at(s, n, r.end);
        if (!(c.cls & BS_S)) return r;
        r.last = r.end;
        r.end += c.len;
        if (c.cls & BS_CRLF) r.after_crlf = r.end;
    }
}

static inline uint32_t fold(chr_t c) { return (c.cls & BS_FOLD_MASK) >> BS_FOLD_SHIFT; }

/* gpt2's '(?:[sdmt]|ll|ve|re) at an apostrophe at p: its end, or p. */
static size_t contraction(const uint8_t *s, size_t n, size_t p) {
    if (p + 1 >= n) return p;
    uint8_t a = s[p + 1];
    if (a == 's' || a == 'd' || a == 'm' || a == 't') return p + 2;
    if (p + 2 >= n) return p;
    uint8_t b = s[p + 2];
    if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) return p + 3;
    return p;
}

/* cl100k's '(?i:[sdmt]|ll|ve|re), and o200k's (?i:'s|'t|'re|'ve|'m|'ll|'d) (the same
 * set of strings), at an apostrophe at p: its end, or p.  Folding is per character
 * (regex's simple case folding; the generator checks that no single character matches a
 * two-letter piece). */
static size_t contraction_ci(const uint8_t *s, size_t n, size_t p) {
    chr_t a = at(s, n, p + 1);
    uint32_t fa = fold(a);
    if (fa == BS_FOLD_S || fa == BS_FOLD_D || fa == BS_FOLD_M || fa == BS_FOLD_T) return p + 1 + a.len;
    if (fa == BS_FOLD_L || fa == BS_FOLD_V || fa == BS_FOLD_R) {
        chr_t b = at(s, n, p + 1 + a.len);
        uint32_t fb = fold(b);
        if ((fa == BS_FOLD_L && fb == BS_FOLD_L) || (fa != BS_FOLD_L && fb == BS_FOLD_E)) return p + 1 + a.len + b.len;
    }
    return p;
}

/* ` ?X+` for the class X of c's successor when c is a space, else of c: the run's end, or p. */
HOT size_t space_then_run(const uint8_t *s, size_t n, size_t p, chr_t c, uint32_t mask) {
    size_t q = p;
    if (c.cp == ' ') {
        q = p + 1;
        c = at(s, n, q);
    }
    return (c.cls & mask) ? run(s, n, q, mask) : p;
}

/* '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
HOT size_t match_gpt2(const uint8_t *s, size_t n, size_t p) {
    chr_t c = at(s, n, p);
    size_t e;
    if (c.cp == '\'' && (e = contraction(s, n, p)) != p) return e;
    size_t q = p + (c.cp == ' ');
    chr_t d = at(s, n, q); /* what ` ?` leaves to the class: the run's first character (no branch on the space) */
    if (d.cls & BS_L) return run(s, n, q + d.len, BS_L);
    if (d.cls & BS_N) return run(s, n, q + d.len, BS_N);
    if (d.cls & BS_OTHER) return run(s, n, q + d.len, BS_OTHER);
    if (!(c.cls & BS_S)) return p; /* not reached: each character is in L, N, S or other */
    space_run r = spaces(s, n, p);
    if (r.end == n) return n;      /* \s+(?!\S): the run reaches the end */
    if (r.last > p) return r.last; /* \s+(?!\S): the run gives its last space back */
    return r.end;                  /* \s+: a single space before a non-space */
}

/* '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+
 * |\s++$|\s*[\r\n]|\s+(?!\S)|\s */
HOT size_t match_cl100k(const uint8_t *s, size_t n, size_t p) {
    chr_t c = at(s, n, p);
    size_t e;
    if (c.cp == '\'' && (e = contraction_ci(s, n, p)) != p) return e;
    if (c.cls & BS_PFX) { /* [^\r\n\p{L}\p{N}]?+ takes c and never gives it back */
        if (at(s, n, p + c.len).cls & BS_L) return run(s, n, p + c.len, BS_L);
    } else if (c.cls & BS_L) {
        return run(s, n, p, BS_L);
    }
    if (c.cls & BS_N) return run_at_most(s, n, p, BS_N, 3);
    if ((e = space_then_run(s, n, p, c, BS_OTHER)) != p) return run(s, n, e, BS_CRLF);
    if (!(c.cls & BS_S)) return p; /* not reached */
    space_run r = spaces(s, n, p);
    if (r.end == n) return n;                     /* \s++$ (a final \n would be in the run) */
    if (r.after_crlf) return r.after_crlf;         /* \s*[\r\n]: gives back to the last CR/LF */
    if (r.last > p) return r.last;                 /* \s+(?!\S) */
    return r.end;                                  /* \s */
}

/* o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ from i: the greedy first
 * run gives back characters until the second can take one.  Its end, or NO_MATCH. */
HOT size_t upper_star_lower_plus(const uint8_t *s, size_t n, size_t i) {
    size_t after_last_lower = NO_MATCH; /* the run given back to its last character in both */
    chr_t c;
    for (;;) {
        c = at(s, n, i);
        if (!(c.cls & BS_UP)) break;
#ifdef SWAR
        if (c.len == 1 && n - i >= 8) { /* ASCII capitals (none is lower case) up to 8 a step */
            uint64_t out = ~ascii_members(load_word(s + i), BS_UP) & HIGH;
            i += out ? (size_t)__builtin_ctzll(out) >> 3 : 8;
            continue;
        }
#endif
        i += c.len;
        if (c.cls & BS_LO) after_last_lower = i;
    }
    if (c.cls & BS_LO) return run(s, n, i, BS_LO); /* nothing given back */
    return after_last_lower;
}

/* o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]* from i: end, or NO_MATCH. */
HOT size_t upper_plus_lower_star(const uint8_t *s, size_t n, size_t i) {
    if (!(at(s, n, i).cls & BS_UP)) return NO_MATCH;
    return run(s, n, run(s, n, i, BS_UP), BS_LO);
}

/* The two letter alternatives of o200k, each [^\r\n\p{L}\p{N}]?(letters)(?i:'s|...)?: the
 * optional prefix is greedy, so each first tries with c as the prefix, then without. */
HOT size_t o200k_letters(const uint8_t *s, size_t n, size_t p, chr_t c) {
    size_t e = NO_MATCH;
    if (c.cls & BS_PFX) e = upper_star_lower_plus(s, n, p + c.len);
    if (e == NO_MATCH) e = upper_star_lower_plus(s, n, p);
    if (e == NO_MATCH && (c.cls & BS_PFX)) e = upper_plus_lower_star(s, n, p + c.len);
    if (e == NO_MATCH) e = upper_plus_lower_star(s, n, p);
    if (e == NO_MATCH) return p;
    return (e < n && s[e] == '\'') ? contraction_ci(s, n, e) : e;
}

/* [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 * |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 * |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
HOT size_t match_o200k(const uint8_t *s, size_t n, size_t p) {
    chr_t c = at(s, n, p);
    size_t e;
    if (c.cls & (BS_PFX | BS_UP | BS_LO) && (e = o200k_letters(s, n, p, c)) != p) return e;
    if (c.cls & BS_N) return run_at_most(s, n, p, BS_N, 3);
    if ((e = space_then_run(s, n, p, c, BS_OTHER)) != p) return run_crlf_slash(s, n, e);
    if (!(c.cls & BS_S)) return p; /* not reached */
    space_run r = spaces(s, n, p);
    if (r.after_crlf) return r.after_crlf; /* \s*[\r\n]+: gives back to the last CR/LF */
    if (r.end == n) return n;              /* \s+(?!\S) at the end */
    if (r.last > p) return r.last;         /* \s+(?!\S) */
    return r.end;                          /* \s+ */
}

/* \s+|\S+ */
HOT size_t match_whitespace(const uint8_t *s, size_t n, size_t p) {
    return run(s, n, p, (at(s, n, p).cls & BS_S) ? BS_S : NOT_SPACE);
}

/* \S+, from the first non-space at or after *p (where *p is left): the end, or *p at the end. */
HOT size_t match_words(const uint8_t *s, size_t n, size_t *p) {
    *p = run(s, n, *p, BS_S);
    return run(s, n, *p, NOT_SPACE);
}

/* 64 bytes at a time (SSE2, with GCC or Clang builtins; BS_SCAN_NO_SIMD turns it off): the
 * ASCII classes of a block of the text as bit masks, bit i for byte base+i, from which the
 * pretokens of gpt2 and cl100k over ASCII are found all at once, as the bits where they
 * start; what the masks do not decide (a contraction, non-ASCII, cl100k's CR and LF,
 * digits past three) is left to the matchers.  The ASCII members of the classes are
 * spelled out as byte ranges, as for SWAR above. */
#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__)) && !defined(BS_SCAN_NO_SIMD)
#define BLOCKS 1
#include <emmintrin.h>

typedef struct {
    size_t base;                        /* the block is data[base:base+64), or to the end */
    uint64_t ascii;                     /* ASCII bytes (none past the end) */
    uint64_t letter, digit, other, space; /* ASCII \p{L}, \p{N}, [^\s\p{L}\p{N}], \s */
    uint64_t blank, apos, crlf;         /* ' ', '\'', and CR or LF */
    uint64_t upper;                     /* [A-Z] (o200k's) */
} block_t;

/* Byte by byte where x - lo (wrapping) <= span: x in [lo, lo+span] (lo+span < 0x80). */
static inline __m128i in_range(__m128i x, int lo, int span) {
    __m128i t = _mm_sub_epi8(x, _mm_set1_epi8((char)lo));
    return _mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8((char)span)), t);
}

static inline uint64_t bits16(__m128i m, int j) { return (uint64_t)(uint16_t)_mm_movemask_epi8(m) << (16 * j); }

/* The block of data[base:], base < n (its CR and LF if with_crlf, its capitals if
 * with_upper, else none). */
HOT void block_masks(block_t *b, const uint8_t *s, size_t n, size_t base, int with_crlf, int with_upper) {
    uint8_t pad[64];
    const uint8_t *src = s + base;
    size_t lim = n - base < 64 ? n - base : 64;
    if (lim < 64) { /* the end of the text: the bytes past it count as non-ASCII */
        memset(pad, 0, sizeof pad);
        memcpy(pad, src, lim);
        src = pad;
    }
    uint64_t a = 0, l = 0, d = 0, sp = 0, bl = 0, ap = 0, nl = 0, up = 0;
    for (int j = 0; j < 4; j++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(src + 16 * j));
        __m128i lx = _mm_or_si128(x, _mm_set1_epi8(0x20));
        __m128i blank = _mm_cmpeq_epi8(x, _mm_set1_epi8(' '));
        a |= (uint64_t)(uint16_t)~_mm_movemask_epi8(x) << (16 * j);
        l |= bits16(in_range(lx, 'a', 'z' - 'a'), j);
        d |= bits16(in_range(x, '0', 9), j);
        sp |= bits16(_mm_or_si128(in_range(x, 0x09, 0x0D - 0x09), blank), j);
        bl |= bits16(blank, j);
        ap |= bits16(_mm_cmpeq_epi8(x, _mm_set1_epi8('\'')), j);
        if (with_upper) up |= bits16(in_range(x, 'A', 'Z' - 'A'), j);
        if (with_crlf)
            nl |= bits16(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\n'))), j);
    }
    if (lim < 64) a &= (1ull << lim) - 1; /* (the zeros past the end are in no class but other) */
    b->base = base, b->ascii = a;
    b->letter = l, b->digit = d, b->other = a & ~(l | d | sp), b->space = sp;
    b->blank = bl, b->apos = ap, b->crlf = nl, b->upper = up;
}

COLD void block_fill_gpt2(block_t *b, const uint8_t *s, size_t n, size_t base) { block_masks(b, s, n, base, 0, 0); }
COLD void block_fill_cl100k(block_t *b, const uint8_t *s, size_t n, size_t base) { block_masks(b, s, n, base, 1, 0); }
COLD void block_fill_o200k(block_t *b, const uint8_t *s, size_t n, size_t base) { block_masks(b, s, n, base, 1, 1); }

/* Writes the pretokens of a block that starts at one, from the bits where they start:
 * those before `hard` (the first byte the starts do not see right, 64 for none) are exact
 * but the last, a start at a space (the last of its run, whose end lies past it), and a
 * pretoken is written when the next start is exact.  A start in `stop` (an apostrophe:
 * maybe a contraction) is the last.  Writes up to cap spans into out from *k; returns
 * where the first pretoken not written starts (the block's start: none was). */
HOT size_t block_emit(const block_t *b, uint64_t starts, unsigned hard, uint64_t stop, bs_span *out, size_t *k,
                      size_t cap) {
    if (hard == 0) return b->base;
    uint64_t last = 1ull << (hard - 1);
    starts &= (last - 1) | (last & ~b->space); /* exact: bits 0..hard-2, and hard-1 unless a space */
    uint64_t cut = starts & stop;
    if (cut) starts &= cut ^ (cut - 1); /* up to the first stop, that one kept */
    starts &= starts - 1;               /* (bit 0: the block's start) */
    size_t x = b->base, i = *k;
    for (; starts && i < cap; starts &= starts - 1) {
        size_t y = b->base + (size_t)__builtin_ctzll(starts);
        out[i].start = x, out[i].end = y, i++;
        x = y;
    }
    *k = i;
    return x;
}

/* gpt2 over ASCII: a pretoken starts where a run of letters, digits or other characters
 * starts, unless a space is before it (then at that space), and at the first and the last
 * space of each run of spaces (\s+(?!\S) gives the last back, to the run after it or as a
 * pretoken of its own).  A start at bit i depends on the bytes i-1..i+1 (bit 0 is the
 * block's start, a pretoken's: no pattern looks behind), so the starts are exact before
 * the first non-ASCII byte but one. */
HOT size_t block_gpt2(const block_t *b, bs_span *out, size_t *k, size_t cap) {
    uint64_t l = b->letter, d = b->digit, o = b->other, sp = b->space;
    uint64_t runs = (l & ~(l << 1)) | (d & ~(d << 1)) | (o & ~(o << 1));
    uint64_t starts = (runs & ~(b->blank << 1)) | (sp & ~(sp << 1)) | (sp & ~(sp >> 1));
    unsigned hard = ~b->ascii ? (unsigned)__builtin_ctzll(~b->ascii) : 64;
    return block_emit(b, starts, hard, b->apos, out, k, cap);
}

/* cl100k over ASCII but CR and LF (\s*[\r\n], [\r\n]*+ and \s++$ are the matcher's): a
 * pretoken starts where a run of digits starts (each a run of at most three: a longer one
 * stops the block there), at the first and the last space of each run of spaces, where a
 * run of other characters starts unless a space is before it, and where a run of letters
 * starts unless [^\r\n\p{L}\p{N}]?+ took the character before it: a space (the last of its
 * run), or an other character that starts a pretoken (its run's first, no space before).
 * A start depends on the bytes i-2..i+1. */
HOT uint64_t cl100k_starts(const block_t *b) {
    uint64_t l = b->letter, d = b->digit, o = b->other, sp = b->space, after_blank = b->blank << 1;
    uint64_t other_starts = o & ~(o << 1) & ~after_blank;
    uint64_t prefixed = (sp | other_starts) << 1;
    return (l & ~(l << 1) & ~prefixed) | (d & ~(d << 1)) | other_starts | (sp & ~(sp << 1)) | (sp & ~(sp >> 1));
}

HOT size_t block_cl100k(const block_t *b, bs_span *out, size_t *k, size_t cap) {
    uint64_t d = b->digit, starts = cl100k_starts(b);
    uint64_t hard_bits = ~b->ascii | b->crlf;
    unsigned hard = hard_bits ? (unsigned)__builtin_ctzll(hard_bits) : 64;
    uint64_t four_digits = d & (d >> 1) & (d >> 2) & (d >> 3); /* (where a run of 4 or more starts) */
    return block_emit(b, starts, hard, b->apos | four_digits, out, k, cap);
}

/* o200k over ASCII but CR, LF and the apostrophe (\s*[\r\n]+, [\r\n/]*, the contraction
 * after the letters are the matcher's): cl100k's starts -- its optional prefix takes the
 * same characters before letters, its other runs end where cl100k's do -- and a capital
 * after a small letter (a run of letters is cut into [A-Z]*[a-z]+ and [A-Z]+[a-z]*). */
HOT size_t block_o200k(const block_t *b, bs_span *out, size_t *k, size_t cap) {
    uint64_t d = b->digit, lower = b->letter & ~b->upper;
    uint64_t starts = cl100k_starts(b) | (b->upper & (lower << 1));
    uint64_t hard_bits = ~b->ascii | b->crlf | b->apos;
    unsigned hard = hard_bits ? (unsigned)__builtin_ctzll(hard_bits) : 64;
    uint64_t four_digits = d & (d >> 1) & (d >> 2) & (d >> 3);
    return block_emit(b, starts, hard, four_digits, out, k, cap);
}

COLD size_t match_o200k_cold(const uint8_t *s, size_t n, size_t p) { return match_o200k(s, n, p); }
COLD size_t match_gpt2_cold(const uint8_t *s, size_t n, size_t p) { return match_gpt2(s, n, p); }
COLD size_t match_cl100k_cold(const uint8_t *s, size_t n, size_t p) { return match_cl100k(s, n, p); }

/* findall with blocks: a block from p when its first pretoken may be decided by the masks
 * (`ascii_start`), its pretokens written at once; else, or when the block decides none,
 * one pretoken from the matcher. */
#define SCAN_BLOCKS(fill, block_all, match, ascii_start)               \
    while (p < len && k < cap) {                                       \
        if (ascii_start) {                                             \
            block_t b;                                                 \
            fill(&b, data, len, p);                                    \
            size_t x = block_all(&b, out, &k, cap);                    \
            if (x != p) {                                              \
                p = x;                                                 \
                continue;                                              \
            }                                                          \
        }                                                              \
        if ((e = match(data, len, p)) == p) {                          \
            p += at(data, len, p).len;                                 \
            continue;                                                  \
        }                                                              \
        out[k].start = p, out[k].end = e, k++;                         \
        p = e;                                                         \
    }
/* Whether the 8 bytes from p are ASCII (or fewer are left): a block from p is worth its
 * masks (for an ASCII character between non-ASCII ones it is not). */
static inline int ascii_ahead(const uint8_t *data, size_t len, size_t p) {
    uint64_t w;
    if (len - p < 8) return 1;
    memcpy(&w, data + p, 8);
    return !(w & 0x8080808080808080ull);
}
/* gpt2, cl100k and o200k: the first byte (and the one after a space) is ASCII, not an
 * apostrophe (cl100k, o200k: nor CR or LF), and so are a few more */
#define GPT2_START                                                                                      \
    (data[p] != '\'' && p + (data[p] == ' ') < len && data[p + (data[p] == ' ')] < 0x80 && ascii_ahead(data, len, p))
#define CL100K_START (GPT2_START && data[p] != '\r' && data[p] != '\n')
#endif

/* findall: a match is recorded and scanning goes on at its end; where none starts, one
 * character further (all the patterns' matches are non-empty). */
#define SCAN_WITH(match)                                        \
    while (p < len && k < cap) {                                \
        e = match(data, len, p);                                \
        if (e == p) {                                           \
            p += at(data, len, p).len;                          \
            continue;                                           \
        }                                                       \
        out[k].start = p, out[k].end = e, k++;                  \
        p = e;                                                  \
    }

/* gpt2, cl100k and o200k: in blocks where they are built, else a match at a time. */
#ifdef BLOCKS
#define SCAN_FAST(fill, block_all, match, ascii_start) SCAN_BLOCKS(fill, block_all, match##_cold, ascii_start)
#else
#define SCAN_FAST(fill, block_all, match, ascii_start) SCAN_WITH(match)
#endif

ptrdiff_t bs_scan(int pattern, const uint8_t *data, size_t len, size_t *pos, bs_span *out, size_t cap) {
    size_t p = *pos, k = 0, e;
    switch (pattern) {
    case BS_SCAN_GPT2: SCAN_FAST(block_fill_gpt2, block_gpt2, match_gpt2, GPT2_START); break;
    case BS_SCAN_CL100K: SCAN_FAST(block_fill_cl100k, block_cl100k, match_cl100k, CL100K_START); break;
    case BS_SCAN_O200K: SCAN_FAST(block_fill_o200k, block_o200k, match_o200k, CL100K_START); break;
    case BS_SCAN_WHITESPACE: SCAN_WITH(match_whitespace); break;
    case BS_SCAN_WORDS: /* the spaces between matches are skipped in one run */
        while (k < cap && (e = match_words(data, len, &p)) != p) out[k].start = p, out[k].end = e, k++, p = e;
        break;
    case BS_SCAN_NONE: /* the whole text is one pretoken */
        if (p < len && cap > 0) out[k].start = p, out[k].end = len, k++, p = len;
        break;
    default: return BS_SCAN_EPATTERN;
    }
    *pos = p;
    return (ptrdiff_t)k;
}

size_t bs_piece_end(const uint8_t *data, size_t start, size_t end, size_t max_bytes) {
    if (!max_bytes || end - start <= max_bytes) return end;
    size_t limit = start + max_bytes, i = start;
    for (;;) {
        uint32_t n = 1;
        if (data[i] >= 0x80) decode_multibyte(data, end, i, &n);
        if (i + n > limit) return i > start ? i : i + n; /* (a cap below 4 bytes: one character) */
        i += n;
    }
}

ptrdiff_t bs_scan_pieces(int pattern, size_t max_bytes, const uint8_t *data, size_t len, size_t *pos, size_t *rest,
                         bs_span *out, size_t cap) {
    if (!max_bytes && !*rest) return bs_scan(pattern, data, len, pos, out, cap);
    size_t k = 0;
    while (k < cap) {
        if (*rest) { /* the next piece of a pretoken longer than the cap */
            size_t e = bs_piece_end(data, *pos, *rest, max_bytes);
            out[k].start = *pos, out[k].end = e, k++;
            *pos = e;
            if (e == *rest) *rest = 0;
            continue;
        }
        ptrdiff_t got = bs_scan(pattern, data, len, pos, out + k, cap - k);
        if (got <= 0) return k ? (ptrdiff_t)k : got;
        size_t i = k, stop = k + (size_t)got;
        while (i < stop && out[i].end - out[i].start <= max_bytes) i++;
        if (i == stop) {
            k = stop;
            continue;
        }
        /* A long one: scanning goes on after it (from its start, a match of the whole), its
         * pieces are written first. */
        *pos = out[i].start, *rest = out[i].end, k = i;
    }
    return (ptrdiff_t)k;
}

size_t bs_utf8_first_invalid(const uint8_t *data, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint64_t word;
        if (len - i >= 8 && (memcpy(&word, data + i, 8), !(word & 0x8080808080808080ull))) {
            i += 8; /* eight ASCII bytes */
            continue;
        }
        if (data[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t n;
        decode_multibyte(data, len, i, &n);
        if (n == 1) return i; /* a non-ASCII byte alone: not part of a well-formed sequence */
        i += n;
    }
    return len;
}

static const char *const PATTERN_NAMES[BS_SCAN_N_PATTERNS] = {"gpt2", "cl100k", "o200k", "whitespace", "words", "none"};

int bs_scan_pattern_by_name(const char *name) {
    for (int i = 0; i < BS_SCAN_N_PATTERNS; i++)
        if (strcmp(name, PATTERN_NAMES[i]) == 0) return i;
    return BS_SCAN_EPATTERN;
}

const char *bs_scan_pattern_name(int pattern) {
    return pattern >= 0 && pattern < BS_SCAN_N_PATTERNS ? PATTERN_NAMES[pattern] : NULL;
}

const char *bs_scan_regex_version(void) { return BS_TABLES_REGEX_VERSION; }
const char *bs_scan_unicode_version(void) { return BS_TABLES_UNICODE_VERSION; }

/*
 * specials.c: the special-token finder (see specials.h).
 *
 * The tokens are kept grouped by their first byte, longest first within a group, so a
 * position is tried against the few tokens that can start there, and the first that
 * matches is the longest.  Positions are skipped with memchr when every token starts with
 * the same byte (`<|...|>` tokens), else with a table of the bytes that start one.
 */
#include "specials.h"

typedef struct {
    uint8_t *bytes;
    size_t len;
    uint32_t id;
} token_t;

struct bs_specials {
    token_t *tokens; /* sorted by (first byte, length descending) */
    size_t n, cap;
    uint32_t first[256], count[256]; /* the group of each first byte: tokens[first .. first+count) */
    int n_first_bytes;
    uint8_t only_first; /* the first byte of every token, when n_first_bytes == 1 */
};

bs_specials *bs_specials_new(void) { return (bs_specials *)calloc(1, sizeof(bs_specials)); }

void bs_specials_free(bs_specials *s) {
    if (!s) return;
    for (size_t k = 0; k < s->n; k++) free(s->tokens[k].bytes);
    free(s->tokens);
    free(s);
}

size_t bs_specials_count(const bs_specials *s) { return s->n; }

static int token_before(const token_t *a, const token_t *b) {
    if (a->bytes[0] != b->bytes[0]) return a->bytes[0] < b->bytes[0];
    return a->len > b->len;
}

static void index_groups(bs_specials *s) {
    memset(s->count, 0, sizeof s->count);
    s->n_first_bytes = 0;
    for (size_t k = s->n; k-- > 0;) {
        uint8_t b = s->tokens[k].bytes[0];
        if (!s->count[b]++) s->n_first_bytes++;
        s->first[b] = (uint32_t)k;
    }
    s->only_first = s->n ? s->tokens[0].bytes[0] : 0;
}

int bs_specials_add(bs_specials *s, const uint8_t *token, size_t len, uint32_t id) {
    if (!len) return BS_BAD_ARGUMENT;
    for (size_t k = 0; k < s->n; k++)
        if (s->tokens[k].len == len && !memcmp(s->tokens[k].bytes, token, len)) return BS_OK;
    if (s->n >= bs_limit32) return BS_TOO_LARGE; /* the groups index tokens in 32 bits */
    BS_RESERVE_OR_RETURN(s->tokens, s->cap, s->n + 1, 8, bs_limit32);
    token_t t = {(uint8_t *)malloc(len), len, id};
    if (!t.bytes) return BS_NO_MEMORY;
    memcpy(t.bytes, token, len);
    size_t k = s->n++;
    for (; k > 0 && token_before(&t, &s->tokens[k - 1]); k--) s->tokens[k] = s->tokens[k - 1];
    s->tokens[k] = t;
    index_groups(s);
    return BS_OK;
}

/* The longest token at data[i:len), or NULL. */
static const token_t *token_at(const bs_specials *s, const uint8_t *data, size_t len, size_t i) {
    uint8_t b = data[i];
    const token_t *t = s->tokens + s->first[b], *end = t + s->count[b];
    for (; t < end; t++)
        if (t->len <= len - i && !memcmp(t->bytes, data + i, t->len)) return t;
    return NULL;
}

size_t bs_specials_find(const bs_specials *s, const uint8_t *data, size_t len, size_t from, size_t *match_len,
                        uint32_t *id) {
    for (size_t i = from; i < len; i++) {
        if (s->n_first_bytes == 1) {
            const uint8_t *at = (const uint8_t *)memchr(data + i, s->only_first, len - i);
            if (!at) break;
            i = (size_t)(at - data);
        } else if (!s->count[data[i]]) {
            continue;
        }
        const token_t *t = token_at(s, data, len, i);
        if (t) {
            *match_len = t->len;
            *id = t->id;
            return i;
        }
    }
    *match_len = 0;
    return len;
}

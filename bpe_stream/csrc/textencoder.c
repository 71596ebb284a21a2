/* textencoder.c: split on special tokens, scan, look up or merge (see textencoder.h). */
#include "textencoder.h"

#include "idcache.h"
#include "scan.h"
#include "specials.h"

#define SPAN_BATCH 256 /* pretokens per bs_scan_pieces call, on the stack */

struct bs_text_encoder {
    Encoder *enc; /* borrowed */
    int pattern;
    size_t max_bytes; /* the pretokens' cap (0: none) */
    bs_specials *specials;
    bs_idcache *cache;
    uint32_t *out; /* the ids of the last call */
    size_t n_out, cap_out;
};

bs_text_encoder *bs_te_new(Encoder *enc, int pattern, size_t max_bytes, uint32_t cache_entries, int *status) {
    if (!enc || !bs_scan_pattern_name(pattern)) {
        *status = BS_BAD_ARGUMENT;
        return NULL;
    }
    bs_text_encoder *te = (bs_text_encoder *)calloc(1, sizeof(bs_text_encoder));
    if (te) {
        te->enc = enc;
        te->pattern = pattern;
        te->max_bytes = max_bytes;
        te->specials = bs_specials_new();
        te->cache = bs_idcache_new(cache_entries);
    }
    if (!te || !te->specials || !te->cache) {
        bs_te_free(te);
        *status = BS_NO_MEMORY;
        return NULL;
    }
    *status = BS_OK;
    return te;
}

void bs_te_free(bs_text_encoder *te) {
    if (!te) return;
    bs_specials_free(te->specials);
    bs_idcache_free(te->cache);
    free(te->out);
    free(te);
}

int bs_te_add_special(bs_text_encoder *te, const uint8_t *token, size_t len, uint32_t id) {
    return bs_specials_add(te->specials, token, len, id);
}

size_t bs_te_cached(const bs_text_encoder *te) { return bs_idcache_len(te->cache); }

void bs_te_trim(bs_text_encoder *te) {
    if (te->cap_out <= BS_TE_KEEP_IDS) return;
    free(te->out);
    te->out = NULL;
    te->n_out = te->cap_out = 0;
}

/* Appends n ids to the output (most pretokens are one or two ids: no memcpy call). */
static inline int append(bs_text_encoder *te, const uint32_t *ids, size_t n) {
    BS_RESERVE_OR_RETURN(te->out, te->cap_out, te->n_out + n, 4096, BS_LIMIT64(te->out));
    uint32_t *out = te->out + te->n_out;
    for (size_t k = 0; k < n; k++) out[k] = ids[k];
    te->n_out += n;
    return BS_OK;
}

/* Appends the ids of the pretoken s[0:len): those the lookup found, unless the cache
 * changed since, or the merges' (which the cache then keeps). */
static inline int encode_pretoken(bs_text_encoder *te, const uint8_t *s, size_t len, const bs_idcache_found *found,
                                  uint64_t generation) {
    size_t n = found->n_ids;
    const uint32_t *ids = found->ids;
    if (!ids || generation != bs_idcache_generation(te->cache)) /* (a miss: an earlier one may have put it) */
        ids = bs_idcache_get(te->cache, s, len, found->hash, &n);
    if (ids) return append(te, ids, n);
    int rc = encoder_encode(te->enc, s, len, &ids, &n);
    if (rc || (rc = bs_idcache_put(te->cache, s, len, found->hash, ids, n))) return rc;
    return append(te, ids, n);
}

/* Appends the ids of data[0:len), a stretch without special tokens, scanned on its own;
 * the pretokens looked up in the cache a batch at a time. */
static int encode_stretch(bs_text_encoder *te, const uint8_t *data, size_t len) {
    bs_span spans[SPAN_BATCH];
    bs_idcache_found found[SPAN_BATCH];
    size_t pos = 0, rest = 0;
    ptrdiff_t got;
    while ((got = bs_scan_pieces(te->pattern, te->max_bytes, data, len, &pos, &rest, spans, SPAN_BATCH)) > 0) {
        bs_idcache_lookup(te->cache, data, len, spans, (size_t)got, found);
        uint64_t generation = bs_idcache_generation(te->cache);
        for (ptrdiff_t k = 0; k < got; k++) {
            int rc = encode_pretoken(te, data + spans[k].start, spans[k].end - spans[k].start, &found[k], generation);
            if (rc) return rc;
        }
    }
    return got < 0 ? BS_BAD_ARGUMENT : BS_OK;
}

int bs_te_encode(bs_text_encoder *te, const uint8_t *data, size_t len, int split_specials, const uint32_t **ids,
                 size_t *n_ids) {
    te->n_out = 0;
    int rc = BS_OK;
    if (!split_specials || !bs_specials_count(te->specials)) {
        rc = encode_stretch(te, data, len);
    } else {
        for (size_t pos = 0; pos < len && !rc;) {
            size_t match_len;
            uint32_t id;
            size_t at = bs_specials_find(te->specials, data, len, pos, &match_len, &id);
            rc = encode_stretch(te, data + pos, at - pos);
            if (!rc && at < len) rc = append(te, &id, 1);
            pos = at + match_len;
        }
    }
    *ids = te->out;
    *n_ids = rc ? 0 : te->n_out;
    return rc;
}

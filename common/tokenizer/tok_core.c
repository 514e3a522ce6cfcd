/* tok_core.c — the tokenizer's shared internals (see tok_internal.h): UTF-8
 * helpers and the open-addressing tables for the vocabulary (string → id)
 * and the merges ((left, right) → (rank, merged id)). The other tokenizer
 * files build on this one and it on none of them: tok_load.c fills the
 * tables, tok_encode.c and tokenizer.c read them. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* ---- UTF-8 -------------------------------------------------------------- */

/* Continuation bytes needed after lead byte c, with the allowed range of the
 * first one (Unicode table 3-7); -1 for bytes that cannot start a character. */
int tk_utf8_need(unsigned char c, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80, *hi = 0xBF;
    if (c < 0x80) return 0;
    if (c >= 0xC2 && c <= 0xDF) return 1;
    if (c == 0xE0) *lo = 0xA0;
    if (c == 0xED) *hi = 0x9F;
    if (c >= 0xE0 && c <= 0xEF) return 2;
    if (c == 0xF0) *lo = 0x90;
    if (c == 0xF4) *hi = 0x8F;
    if (c >= 0xF0 && c <= 0xF4) return 3;
    return -1;
}

bool tk_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char lo, hi;
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int need = tk_utf8_need(p[i], &lo, &hi);
        if (need < 0 || (size_t)need > n - i - 1) return false;
        if (p[i + 1] < lo || p[i + 1] > hi) return false;
        for (int k = 2; k <= need; k++)
            if ((p[i + k] & 0xC0) != 0x80) return false;
        i += (size_t)need + 1;
    }
    return true;
}

int tk_utf8_len(unsigned char c) { return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 1; }

int tk_utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- hash tables ------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

sd_status tk_smap_init(tk_smap *m, size_t n)
{
    m->cap = pow2_at_least(2 * n + 1);
    m->n = 0;
    m->e = malloc(m->cap * sizeof *m->e);
    if (!m->e) return SD_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++) m->e[i].id = -1;
    return SD_OK;
}

/* Inserts or overwrites; the table was sized for every key up front. */
void tk_smap_put(tk_smap *m, const char *s, size_t len, int32_t id)
{
    size_t mask = m->cap - 1, i = hash_bytes(s, len) & mask;
    while (m->e[i].id >= 0) {
        if (m->e[i].len == len && memcmp(m->e[i].s, s, len) == 0) {
            m->e[i].id = id;
            return;
        }
        i = (i + 1) & mask;
    }
    m->e[i] = (tk_sent){s, (uint32_t)len, id};
    m->n++;
}

int32_t tk_smap_get(const tk_smap *m, const char *s, size_t len)
{
    if (!m->e) return -1;
    size_t mask = m->cap - 1, i = hash_bytes(s, len) & mask;
    while (m->e[i].id >= 0) {
        if (m->e[i].len == len && memcmp(m->e[i].s, s, len) == 0) return m->e[i].id;
        i = (i + 1) & mask;
    }
    return -1;
}

sd_status tk_mmap_init(tk_mmap *m, size_t n)
{
    m->cap = pow2_at_least(2 * n + 1);
    m->n = 0;
    m->e = malloc(m->cap * sizeof *m->e);
    if (!m->e) return SD_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++) m->e[i].key = UINT64_MAX;
    return SD_OK;
}

/* A later duplicate overwrites an earlier one, as HF's HashMap collect does. */
void tk_mmap_put(tk_mmap *m, int32_t l, int32_t r, int32_t rank, int32_t id)
{
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    size_t mask = m->cap - 1, i = hash_u64(key) & mask;
    while (m->e[i].key != UINT64_MAX && m->e[i].key != key) i = (i + 1) & mask;
    if (m->e[i].key == UINT64_MAX) m->n++;
    m->e[i] = (tk_ment){key, rank, id};
}

bool tk_mmap_get(const tk_mmap *m, int32_t l, int32_t r, int32_t *rank, int32_t *id)
{
    if (!m->e) return false;
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    size_t mask = m->cap - 1, i = hash_u64(key) & mask;
    while (m->e[i].key != UINT64_MAX) {
        if (m->e[i].key == key) {
            *rank = m->e[i].rank;
            *id = m->e[i].id;
            return true;
        }
        i = (i + 1) & mask;
    }
    return false;
}

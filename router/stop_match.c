/* stop_match.c — see stop_match.h. The pending buffer holds the text not yet
 * emitted; every feed appends, searches the earliest match of any stop
 * string, else keeps only the longest suffix that could still grow into one.
 * Costs O(pending * stops * stoplen) per feed; pending stays shorter than the
 * longest stop string between feeds. */
#include "stop_match.h"

#include <stdlib.h>
#include <string.h>

#include "array.h"

struct sd_stop {
    char **stops;
    size_t *lens;
    size_t n;
    char *pend; /* text held back (plus the new piece during a feed) */
    size_t plen, pcap;
    char *out; /* what the last call emitted */
    size_t ocap;
    bool matched;
};

sd_status sd_stop_new(const char *const *stops, size_t n, sd_stop **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!stops && n > 0) return sd_seterr(err, errlen, SD_ERR_ARG, "stop strings: %zu of them but no list", n);
    sd_stop *s = calloc(1, sizeof *s);
    if (!s) return sd_seterr(err, errlen, SD_ERR_NOMEM, "stop strings: out of memory");
    s->stops = calloc(n ? n : 1, sizeof *s->stops);
    s->lens = calloc(n ? n : 1, sizeof *s->lens);
    if (!s->stops || !s->lens) goto fail;
    for (size_t i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        s->stops[s->n] = strdup(stops[i]);
        if (!s->stops[s->n]) goto fail;
        s->lens[s->n] = strlen(stops[i]);
        s->n++;
    }
    *out = s;
    return SD_OK;
fail:
    sd_stop_free(s);
    return sd_seterr(err, errlen, SD_ERR_NOMEM, "stop strings: out of memory for %zu of them", n);
}

void sd_stop_free(sd_stop *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->pend);
    free(s->out);
    free(s);
}

/* Moves the first n pending bytes to the out buffer. */
static void emit(sd_stop *s, size_t n, const char **out, size_t *outlen)
{
    if (sd_grow(&s->out, &s->ocap, n + 1, 1) != SD_OK) n = 0;
    if (n) memcpy(s->out, s->pend, n);
    if (s->plen > n) memmove(s->pend, s->pend + n, s->plen - n); /* pend is NULL before the first feed */
    s->plen -= n;
    *out = s->out;
    *outlen = n;
}

/* Earliest start of any stop string in pend, or (size_t)-1. */
static size_t find_match(const sd_stop *s)
{
    size_t best = (size_t)-1;
    for (size_t i = 0; i < s->n; i++) {
        if (s->lens[i] > s->plen) continue;
        for (size_t p = 0; p + s->lens[i] <= s->plen && p < best; p++)
            if (!memcmp(s->pend + p, s->stops[i], s->lens[i])) {
                best = p;
                break;
            }
    }
    return best;
}

/* Length of the longest suffix of pend that is a proper prefix of a stop. */
static size_t holdback(const sd_stop *s)
{
    size_t best = 0;
    for (size_t i = 0; i < s->n; i++) {
        size_t maxk = s->lens[i] - 1 < s->plen ? s->lens[i] - 1 : s->plen;
        for (size_t k = maxk; k > best; k--)
            if (!memcmp(s->pend + s->plen - k, s->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

bool sd_stop_feed(sd_stop *s, const char *text, size_t len, const char **out, size_t *outlen)
{
    *out = "";
    *outlen = 0;
    if (s->matched) return true;
    if (sd_grow(&s->pend, &s->pcap, s->plen + len + 1, 1) != SD_OK) return false;
    if (len) memcpy(s->pend + s->plen, text, len);
    s->plen += len;
    size_t m = find_match(s);
    if (m != (size_t)-1) {
        emit(s, m, out, outlen);
        s->plen = 0;
        s->matched = true;
        return true;
    }
    emit(s, s->plen - holdback(s), out, outlen);
    return false;
}

void sd_stop_flush(sd_stop *s, const char **out, size_t *outlen)
{
    if (s->matched) {
        *out = "";
        *outlen = 0;
        return;
    }
    emit(s, s->plen, out, outlen);
}

bool sd_stop_matched(const sd_stop *s) { return s->matched; }

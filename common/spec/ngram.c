/* ngram.c — see ngram.h.
 *
 * One backwards scan per item: for every candidate end position j (most
 * recent first) it measures how many tokens ending at j equal the context's
 * suffix (capped at n_max) and records, per n, the first (most recent) j that
 * matches at least n tokens. A match of n_max ends the scan at once. */
#include "ngram.h"

#include <stdlib.h>
#include <string.h>

#include "array.h"

typedef struct ngram_impl {
    int n_min;
    int n_max;
    sd_tokprob *q; /* [q_cap] one-hot q entries of the last call */
    size_t q_cap;
} ngram_impl;

/* Length (<= n_max) of the run of tokens ending at j that equals the run
 * ending at the context's last token. */
static int match_len(const int32_t *ctx, int last, int j, int n_max)
{
    int len = 0;
    while (len < n_max && j - len >= 0 && ctx[j - len] == ctx[last - len]) len++;
    return len;
}

int sd_ngram_lookup(const int32_t *context, int n_context, int n_min, int n_max, int k, int32_t *out, int *matched_n)
{
    if (matched_n) *matched_n = 0;
    if (k > SD_MAX_DRAFT) k = SD_MAX_DRAFT;
    if (!context || n_context < 2 || k <= 0 || n_min < 1 || n_max < n_min) return 0;
    if (n_max > SD_NGRAM_MAX_N) n_max = SD_NGRAM_MAX_N;
    int last = n_context - 1;
    int found[SD_NGRAM_MAX_N + 1]; /* found[n]: most recent end position matching n tokens */
    for (int n = 0; n <= n_max; n++) found[n] = -1;
    for (int j = last - 1; j >= 0; j--) {
        if (context[j] != context[last]) continue;
        int len = match_len(context, last, j, n_max);
        for (int n = len; n >= n_min && found[n] < 0; n--) found[n] = j;
        if (len == n_max) break;
    }
    for (int n = n_max; n >= n_min; n--) {
        if (found[n] < 0) continue;
        int start = found[n] + 1;
        int cnt = n_context - start < k ? n_context - start : k;
        memcpy(out, context + start, (size_t)cnt * sizeof *out);
        if (matched_n) *matched_n = n;
        return cnt;
    }
    return 0;
}

static sd_status ngram_propose(sd_proposer *p, const sd_propose_item *items, int n, sd_proposal *out, char *err,
                               size_t errlen)
{
    ngram_impl *g = p->impl;
    size_t need = (size_t)(n > 0 ? n : 0) * SD_MAX_DRAFT;
    if (sd_grow(&g->q, &g->q_cap, need, sizeof *g->q) != SD_OK) {
        for (int i = 0; i < n; i++) out[i].n = 0;
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "ngram: out of memory for %d items", n);
    }
    for (int i = 0; i < n; i++) {
        sd_proposal *o = &out[i];
        memset(o, 0, sizeof *o);
        o->n =
            sd_ngram_lookup(items[i].context, items[i].n_context, g->n_min, g->n_max, items[i].k, o->tokens, &o->match);
        for (int t = 0; t < o->n; t++) o->alt[t] = -1; /* a lookup has no second choice */
        if (!items[i].want_q) continue;
        for (int t = 0; t < o->n; t++) {
            sd_tokprob *e = &g->q[(size_t)i * SD_MAX_DRAFT + (size_t)t];
            e->token = o->tokens[t];
            e->prob = 1.0f;
            o->q[t] = e;
            o->nq[t] = 1;
        }
    }
    return SD_OK;
}

static void ngram_release(sd_proposer *p, uint64_t seq_id)
{
    (void)p;
    (void)seq_id; /* stateless */
}

static void ngram_destroy(sd_proposer *p)
{
    ngram_impl *g = p->impl;
    free(g->q);
    free(g);
    free(p);
}

static const sd_proposer_ops ngram_ops = {
    .name = "ngram",
    .propose = ngram_propose,
    .release = ngram_release,
    .destroy = ngram_destroy,
};

sd_status sd_ngram_new(int n_min, int n_max, sd_proposer **out, char *err, size_t errlen)
{
    *out = NULL;
    if (n_min < 1 || n_max < n_min || n_max > SD_NGRAM_MAX_N)
        return sd_seterr(err, errlen, SD_ERR_ARG, "ngram: need 1 <= n_min <= n_max <= %d, got %d..%d", SD_NGRAM_MAX_N,
                         n_min, n_max);
    sd_proposer *p = calloc(1, sizeof *p);
    ngram_impl *g = calloc(1, sizeof *g);
    if (!p || !g) {
        free(p);
        free(g);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "ngram: out of memory");
    }
    g->n_min = n_min;
    g->n_max = n_max;
    p->ops = &ngram_ops;
    p->impl = g;
    *out = p;
    return SD_OK;
}

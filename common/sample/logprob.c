/* logprob.c — log-softmax of a logits row, the chosen token and the top n
 * (see logprob.h). */
#include "logprob.h"

#include <math.h>

/* Inserts (id, x) into the descending list top[0..*n) of at most cap. */
static void top_insert(int32_t *ids, float *xs, int *n, int cap, int32_t id, float x)
{
    if (*n == cap && !(x > xs[cap - 1])) return; /* ties keep the lower id already there */
    int i = *n < cap ? (*n)++ : cap - 1;
    while (i > 0 && x > xs[i - 1]) {
        ids[i] = ids[i - 1];
        xs[i] = xs[i - 1];
        i--;
    }
    ids[i] = id;
    xs[i] = x;
}

void sd_logprob_row(const float *logits, int vocab, int32_t tok, int n_top, sd_token_lp *out)
{
    if (n_top < 0) n_top = 0;
    if (n_top > SD_MAX_LOGPROBS) n_top = SD_MAX_LOGPROBS;
    float mx = -INFINITY;
    for (int v = 0; v < vocab; v++)
        if (logits[v] > mx) mx = logits[v];
    double sum = 0.0;
    if (isfinite(mx))
        for (int v = 0; v < vocab; v++)
            if (logits[v] > -INFINITY) sum += exp((double)logits[v] - mx);
    float lse = isfinite(mx) && sum > 0.0 ? (float)(mx + log(sum)) : INFINITY;
    float x = tok >= 0 && tok < vocab && !isnan(logits[tok]) ? logits[tok] : -INFINITY;
    out->lp = x - lse;
    int n = 0;
    for (int v = 0; n_top > 0 && v < vocab; v++)
        if (!isnan(logits[v])) top_insert(out->top_id, out->top_lp, &n, n_top, v, logits[v]);
    for (int i = 0; i < n; i++) out->top_lp[i] -= lse;
    for (int i = n; i < n_top; i++) { /* a vocabulary smaller than n_top, or all NaN */
        out->top_id[i] = -1;
        out->top_lp[i] = -INFINITY;
    }
}

/* verify.c — the accept rules of the speculative transaction (see verify.h).
 *
 * Role: turns the target's K+1 logits rows of a verify span and the K draft
 * tokens into the 1..K+1 tokens to commit. Every rule is built from the one
 * sampler chain of sampler.c, so a speculative step decides exactly as plain
 * decoding would (greedy, match) or draws from exactly the same distribution
 * (rejection):
 *   - row i is penalised (and processed: logit bias, allowed tokens,
 *     min_tokens) with history = output + d_0..d_{i-1}, the tokens plain
 *     decoding would have generated before that position;
 *   - row i's random numbers are keyed by output position out_pos + i;
 *   - rows are examined lazily: once a draft is rejected the rows after it
 *     are neither penalised nor read.
 *
 * Ownership: an sd_verifier owns its scratch (a sampler and the
 * penalty-history buffer). Only the history buffer can grow (when output +
 * drafts exceed its capacity); no other call allocates. Callers own logits, drafts, q and out.
 * Threading: an sd_verifier is not thread-safe; use one per thread. */
#include "verify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "proposer.h"

struct sd_verifier {
    int vocab;
    sd_sampler *sp;
    int32_t *hist; /* (hist_cap) output + drafts: the penalty history */
    size_t hist_cap;
};

sd_status sd_verifier_new(int vocab, sd_verifier **out, char *err, size_t errlen)
{
    *out = NULL;
    if (vocab <= 0) return sd_seterr(err, errlen, SD_ERR_ARG, "verifier: vocabulary of %d entries", vocab);
    sd_verifier *v = calloc(1, sizeof *v);
    if (!v) return sd_seterr(err, errlen, SD_ERR_NOMEM, "verifier: out of memory");
    v->vocab = vocab;
    sd_status st = sd_sampler_new(vocab, &v->sp, err, errlen);
    v->hist_cap = 4096;
    v->hist = malloc(v->hist_cap * sizeof *v->hist);
    if (st == SD_OK && !v->hist) st = sd_seterr(err, errlen, SD_ERR_NOMEM, "verifier: out of memory for the history");
    if (st != SD_OK) {
        sd_verifier_free(v);
        return st;
    }
    *out = v;
    return SD_OK;
}

void sd_verifier_free(sd_verifier *v)
{
    if (!v) return;
    sd_sampler_free(v->sp);
    free(v->hist);
    free(v);
}

/* ---- input checks and history ------------------------------------------ */

/* Penalties or logits processors: rows need their history (its length at least). */
static int penalties_on(const sd_sampling *s) { return sd_sampling_processes(s); }

/* Temperature 0 (or NaN) is greedy whatever the requested mode. */
static int is_greedy(const sd_verify_in *in)
{
    return in->mode == SD_VERIFY_GREEDY || !(in->sampling->temperature > 0.0f);
}

/* SD_OK when the input is usable by the rule it selects. */
static sd_status check_input(const sd_verifier *v, const sd_verify_in *in, const int32_t *out)
{
    if (!v || !in || !out || !in->sampling || (!!in->logits + !!in->argmax + !!in->drawn) != 1) return SD_ERR_ARG;
    if (in->drawn && is_greedy(in)) return SD_ERR_ARG; /* sampled rows only */
    if (in->argmax && (!is_greedy(in) || penalties_on(in->sampling)))
        return SD_ERR_ARG; /* tokens alone serve greedy rows without penalties only */
    if (in->vocab <= 0 || in->vocab > v->vocab) return SD_ERR_ARG;
    if (in->k < 0 || in->k > SD_MAX_DRAFT || (in->k > 0 && !in->draft)) return SD_ERR_ARG;
    if (in->mode != SD_VERIFY_GREEDY && in->mode != SD_VERIFY_MATCH && in->mode != SD_VERIFY_REJECTION)
        return SD_ERR_ARG;
    if ((in->n_output > 0 && !in->output) || (in->n_prompt > 0 && !in->prompt)) return SD_ERR_ARG;
    if (in->mode == SD_VERIFY_REJECTION && !is_greedy(in) && in->k > 0) {
        if (!in->q || !in->nq) return SD_ERR_ARG;
        for (int i = 0; i < in->k; i++)
            if (!in->q[i] && in->nq[i] > 0) return SD_ERR_ARG;
    }
    return SD_OK;
}

/* Fills v->hist with output then the k drafts, so that row i's history is
 * hist[0 .. n_output + i). Grows the buffer when needed. When no penalty is
 * on, the history is never read and nothing is copied. */
static sd_status build_history(sd_verifier *v, const sd_verify_in *in)
{
    if (!penalties_on(in->sampling)) return SD_OK;
    size_t need = in->n_output + (size_t)in->k;
    if (sd_grow(&v->hist, &v->hist_cap, need, sizeof *v->hist) != SD_OK) return SD_ERR_NOMEM;
    if (in->n_output > 0) memcpy(v->hist, in->output, in->n_output * sizeof *v->hist);
    if (in->k > 0) memcpy(v->hist + in->n_output, in->draft, (size_t)in->k * sizeof *v->hist);
    return SD_OK;
}

static const int32_t *row_hist(const sd_verifier *v, const sd_verify_in *in)
{
    return penalties_on(in->sampling) ? v->hist : NULL;
}

static size_t row_nhist(const sd_verify_in *in, int i)
{
    return penalties_on(in->sampling) ? in->n_output + (size_t)i : 0;
}

/* ---- greedy and match ---------------------------------------------------- */

/* The token plain decoding would emit for row i (penalties applied in place):
 * the argmax when greedy, else the full chain with the stream-0 number of
 * position out_pos + i. -1 when the row has no token (every logit NaN). */
static int32_t plain_token(sd_verifier *v, const sd_verify_in *in, int i, int greedy)
{
    if (in->argmax) return in->argmax[i];
    float *row = in->logits + (size_t)i * (size_t)in->vocab;
    if (greedy) {
        sd_sampler_process_logits(v->sp, in->sampling, row, in->vocab, in->prompt, in->n_prompt, row_hist(v, in),
                                  row_nhist(in, i));
        return sd_argmax(row, in->vocab);
    }
    /* sd_sampler_sample applies the penalties itself. */
    return sd_sampler_sample(v->sp, in->sampling, row, in->vocab, in->prompt, in->n_prompt, row_hist(v, in),
                             row_nhist(in, i), in->out_pos + (uint64_t)i);
}

/* Greedy and match share one loop: keep d_i while it equals the token plain
 * decoding would emit at row i; commit that token at the first mismatch, or
 * as the bonus after k accepts. */
static int verify_plain(sd_verifier *v, const sd_verify_in *in, int32_t *out, int greedy)
{
    for (int i = 0; i <= in->k; i++) {
        int32_t x = plain_token(v, in, i, greedy);
        if (x < 0) return SD_ERR_ARG;
        out[i] = x;
        if (i == in->k || x != in->draft[i]) return i + 1;
    }
    return SD_ERR_ARG; /* unreachable: the loop returns at i == k */
}

/* ---- rejection ------------------------------------------------------------ */

/* Row i, penalised in place (once: the rules below read it after this). */
static float *penalised_row(sd_verifier *v, const sd_verify_in *in, int i)
{
    float *row = in->logits + (size_t)i * (size_t)in->vocab;
    sd_sampler_process_logits(v->sp, in->sampling, row, in->vocab, in->prompt, in->n_prompt, row_hist(v, in),
                              row_nhist(in, i));
    return row;
}

/* p(d) in a penalised row's filtered distribution, without building it
 * (sd_sampler_prob), with target_dist's fallback to the one-hot argmax;
 * -1 when the row has no token at all. */
static double target_prob(sd_verifier *v, const sd_verify_in *in, const float *row, int32_t d)
{
    if (d < 0 || d >= in->vocab) return sd_argmax(row, in->vocab) < 0 ? -1.0 : 0.0;
    float p = sd_sampler_prob(v->sp, in->sampling, row, in->vocab, d);
    if (p >= 0.0f) return p;
    int32_t a = sd_argmax(row, in->vocab);
    return a < 0 ? -1.0 : a == d ? 1.0 : 0.0;
}

/* Leviathan et al. / Chen et al. 2023: keep d_i with probability
 * min(1, p_i(d_i) / q_i(d_i)) (u < p/q with the ACCEPT stream; q(d) == 0 is
 * a malformed proposal and rejects); on a reject commit a draw from the
 * residual (RESIDUAL stream); after k accepts draw the bonus from p_k with
 * the SAMPLE stream, exactly as plain decoding draws. p(d), the residual and
 * the bonus come from the sampler without sorting the vocabulary where the
 * settings allow (sd_sampler_prob, sd_sampler_residual, sd_sampler_draw). */
static int verify_rejection(sd_verifier *v, const sd_verify_in *in, int32_t *out)
{
    uint64_t seed = in->sampling->seed;
    for (int i = 0; i <= in->k; i++) {
        uint64_t pos = in->out_pos + (uint64_t)i;
        float *row = penalised_row(v, in, i);
        if (i == in->k) { /* sd_sampler_draw: the token sd_sample_sparse draws from p, without sorting it */
            int32_t x =
                sd_sampler_draw(v->sp, in->sampling, row, in->vocab, sd_rng_uniform(seed, pos, SD_RNG_STREAM_SAMPLE));
            out[i] = x >= 0 ? x : sd_argmax(row, in->vocab);
            return out[i] >= 0 ? i + 1 : SD_ERR_ARG;
        }
        int32_t d = in->draft[i];
        const sd_tokprob *q = in->q[i];
        size_t nq = q ? in->nq[i] : 0;
        double pd = target_prob(v, in, row, d);
        if (pd < 0.0) return SD_ERR_ARG;
        double qd = sd_sparse_prob(q, nq, d);
        double u = sd_rng_uniform(seed, pos, SD_RNG_STREAM_ACCEPT);
        if (qd > 0.0 && u < pd / qd) {
            out[i] = d;
            continue;
        }
        out[i] = sd_sampler_residual(v->sp, in->sampling, row, in->vocab, q, nq,
                                     sd_rng_uniform(seed, pos, SD_RNG_STREAM_RESIDUAL));
        return out[i] >= 0 ? i + 1 : SD_ERR_ARG;
    }
    return SD_ERR_ARG; /* unreachable: the loop returns at i == k */
}

/* ---- drawn rows ------------------------------------------------------------ */

void sd_verify_draws(const sd_verify_in *in, sd_draw_row *draw)
{
    const sd_sampling *s = in->sampling;
    bool rej = in->mode == SD_VERIFY_REJECTION && in->k > 0;
    for (int i = 0; i <= in->k; i++) {
        uint64_t pos = in->out_pos + (uint64_t)i;
        bool res = rej && i < in->k;
        draw[i] = (sd_draw_row){.temperature = s->temperature,
                                .min_p = s->min_p,
                                .u = sd_rng_uniform(s->seed, pos, res ? SD_RNG_STREAM_RESIDUAL : SD_RNG_STREAM_SAMPLE),
                                .token = res ? in->draft[i] : -1,
                                .nq = res && in->q[i] ? (int32_t)in->nq[i] : 0,
                                .q = res ? in->q[i] : NULL,
                                .allow = NULL,
                                .edits = NULL,
                                .n_edits = 0,
                                .top_k = s->top_k,
                                .top_p = s->top_p};
    }
}

/* The rules of verify_plain (match) and verify_rejection over drawn rows:
 * the same tokens, since each row's draw is the sampler's (a row with no
 * token of positive probability is its one-hot argmax, as the host falls
 * back; a row of NaNs fails, as on the host). */
static int verify_drawn(const sd_verify_in *in, int32_t *out)
{
    const sd_draw_out *dr = in->drawn;
    bool rej = in->mode == SD_VERIFY_REJECTION;
    for (int i = 0; i <= in->k; i++) {
        if (dr[i].token < 0) return SD_ERR_ARG;
        out[i] = dr[i].token;
        if (i == in->k) return i + 1;
        int32_t d = in->draft[i];
        if (!rej) {
            if (out[i] != d) return i + 1;
            continue;
        }
        size_t nq = in->q[i] ? in->nq[i] : 0;
        double qd = sd_sparse_prob(in->q[i], nq, d);
        double u = sd_rng_uniform(in->sampling->seed, in->out_pos + (uint64_t)i, SD_RNG_STREAM_ACCEPT);
        if (qd > 0.0 && u < (double)dr[i].prob / qd) {
            out[i] = d;
            continue;
        }
        return i + 1;
    }
    return SD_ERR_ARG; /* unreachable: the loop returns at i == k */
}

/* ---- entry point ------------------------------------------------------------ */

/* Errors: SD_ERR_ARG for NULL pointers, vocab outside (0, verifier vocab],
 * k outside [0, SD_MAX_DRAFT], an unknown mode, rejection (temperature > 0)
 * with q or nq missing, or a row whose logits are all NaN; SD_ERR_NOMEM when
 * the history buffer cannot grow. Draft tokens outside the vocabulary are not
 * an error: they are simply never accepted. Only rows up to the first
 * rejected draft are penalised in place; later rows are left untouched. */
int sd_verify(sd_verifier *v, const sd_verify_in *in, int32_t *out)
{
    sd_status st = check_input(v, in, out);
    if (st != SD_OK) return st;
    st = build_history(v, in);
    if (st != SD_OK) return st;
    if (in->drawn) return verify_drawn(in, out);
    if (is_greedy(in)) return verify_plain(v, in, out, 1);
    if (in->mode == SD_VERIFY_MATCH) return verify_plain(v, in, out, 0);
    return verify_rejection(v, in, out);
}

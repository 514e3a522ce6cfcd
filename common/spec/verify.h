/* verify.h — the accept rules of the speculative transaction.
 *
 * Given the target's logits over a verify span [last, d1..dK] (K+1 rows) and
 * the draft tokens, decide which drafts to keep and which token to commit
 * after them. Every rule commits 1..K+1 tokens and is exact:
 *   greedy    — keep d_i while d_i == argmax p_i; then the target's argmax.
 *               Output identical to plain greedy decoding.
 *   match     — x_i = the request's full sampler chain on row i with the
 *               random number of output position out_pos+i (stream 0, as
 *               plain decoding uses); keep d_i while x_i == d_i; commit x_i at
 *               the first mismatch. Output identical to plain sampled decoding
 *               with the same seed.
 *   rejection — keep d_i with probability min(1, p_i(d_i) / q_i(d_i)); on a
 *               reject draw from normalise(max(0, p_i - q_i)); after a full
 *               accept draw the bonus from p_K. Distribution of the output
 *               equals the target's (Leviathan et al. 2023), for any q.
 * Penalties (repetition / presence / frequency) and min_tokens make p depend on the tokens
 * before it: row i is penalised with history = output so far + d1..d_i, as
 * plain decoding would at that position.
 *
 * Random streams (sd_rng_uniform(seed, position, stream)): 0 = plain / match
 * sampling and the rejection bonus, 1 = the drafter's own sampling,
 * 2 = the rejection accept test, 3 = the residual draw. */
#ifndef SD_VERIFY_H
#define SD_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "sampler.h"

typedef enum {
    SD_VERIFY_GREEDY = 0,
    SD_VERIFY_MATCH = 1,
    SD_VERIFY_REJECTION = 2,
} sd_verify_mode;

enum {
    SD_RNG_STREAM_SAMPLE = 0,
    SD_RNG_STREAM_DRAFT = 1,
    SD_RNG_STREAM_ACCEPT = 2,
    SD_RNG_STREAM_RESIDUAL = 3,
};

typedef struct sd_verify_in {
    float *logits;            /* [k+1, vocab]; penalties are applied in place */
    const int32_t *argmax;    /* instead of logits (NULL there): the rows' argmax [k+1], for greedy
                                 * rows without penalties (sd_model_forward's argmax rows) */
    const sd_draw_out *drawn; /* instead of logits and argmax: the rows' draws [k+1] (sd_model_forward's
                               * draw rows; sd_verify_draws says what each row's must be) */
    int vocab;
    int k;                      /* number of drafts (0 = plain step) */
    const int32_t *draft;       /* [k] */
    const sd_tokprob *const *q; /* [k] proposal distributions (rejection only) */
    const size_t *nq;           /* [k] */
    const sd_sampling *sampling;
    const int32_t *prompt; /* for the repetition penalty */
    size_t n_prompt;
    const int32_t *output; /* tokens generated before this step */
    size_t n_output;
    uint64_t out_pos; /* output position of row 0's token (== n_output) */
    sd_verify_mode mode;
} sd_verify_in;

typedef struct sd_verifier sd_verifier;

/* Scratch for vocabularies up to vocab entries in *out; the caller frees it
 * with sd_verifier_free. Returns SD_OK, or SD_ERR_ARG (vocab < 1) or
 * SD_ERR_NOMEM with a message in err; *out is NULL then. */
sd_status sd_verifier_new(int vocab, sd_verifier **out, char *err, size_t errlen);
void sd_verifier_free(sd_verifier *v);

/* The row draws (rowdraw.h) that serve in's rows instead of their logits:
 * in->sampling sampled (temperature > 0; its logits processors are the
 * caller's to add as the rows' allow and edits: sd_sampler_mask_bits,
 * sd_sampler_edits) and in->mode not greedy. In rejection mode with drafts,
 * row i < k reports p(draft i) and draws the residual of q_i with the
 * RESIDUAL stream's number of its position; every other row (the bonus
 * row, every row in match mode) draws from p with the SAMPLE stream's, as
 * plain decoding. Writes draw[0..k] (q borrowed from in). */
void sd_verify_draws(const sd_verify_in *in, sd_draw_row *draw);

/* Applies the rule; writes the committed tokens (accepted drafts, then the
 * final token) to out[0..ret) and returns ret in 1..k+1, or a negative
 * sd_status (SD_ERR_ARG: bad input, e.g. rejection without q). */
int sd_verify(sd_verifier *v, const sd_verify_in *in, int32_t *out);

#endif

/* sampler.h — logits → next token: logits processors (allowed tokens,
 * min_tokens, logit bias), penalties, temperature, top-k, top-p, min-p, and
 * a reproducible random stream.
 *
 * The random number used for output position i is a pure function of
 * (seed, i, stream), so a sampled run is reproducible whatever the batching
 * and whether or not speculation is on. An sd_sampler holds scratch buffers
 * only; it is not thread-safe, use one per thread. */
#ifndef SD_SAMPLER_H
#define SD_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rowdraw.h" /* sd_tokprob */
#include "status.h"

/* Per-request sampling settings. Neutral values switch a stage off. */
typedef struct sd_sampling {
    float temperature;        /* 0 = greedy (argmax; lowest id wins a tie) */
    int top_k;                /* 0 = off */
    float top_p;              /* 1 = off; (0, 1] */
    float min_p;              /* 0 = off; [0, 1] */
    float repetition_penalty; /* 1 = off; > 0. HF rule over prompt + output */
    float presence_penalty;   /* 0 = off; OpenAI rule over output tokens */
    float frequency_penalty;  /* 0 = off; OpenAI rule over output tokens */
    uint64_t seed;
    /* Logits processors (OpenAI logit_bias, vLLM min_tokens and
     * allowed_token_ids). The arrays are borrowed: whoever fills them keeps
     * them alive as long as the settings are used (sd_req_new copies them
     * into the request). Token ids outside the row's vocabulary are skipped
     * when applied; sd_req_new and the router refuse them. */
    const int32_t *bias_ids;  /* logit_bias: bias_values[i] added to token bias_ids[i]'s logit */
    const float *bias_values; /* each in [-100, 100] */
    uint32_t n_bias;          /* 0 = off; at most SD_MAX_LOGIT_BIAS */
    const int32_t *allowed;   /* allowed_token_ids: every other token's logit becomes -inf */
    uint32_t n_allowed;       /* 0 = off (every token allowed) */
    uint32_t min_tokens;      /* 0 = off: while fewer output tokens than this precede a position, */
    const int32_t *early_ban; /* ... these tokens' logits are -inf there (the request's stop tokens: */
    uint32_t n_early_ban;     /* EOS and stop ids, filled by sd_req_new) */
    bool json_object;         /* response_format json_object: the output is one JSON object (json_mask.h) */
    const char *json_schema;  /* response_format json_schema: the schema's JSON text (NUL-terminated, borrowed */
                              /* as the lists); the output is one value it accepts (json_schema.h) */
    const struct sd_json_schema *schema; /* ... compiled (sd_req_new compiles it; the request owns it) */
    bool json_compact;                   /* JSON output without whitespace outside strings (structured_outputs */
                                         /* disable_any_whitespace; the compiled schema's compact, json_object's too) */
    const char *regex;         /* structured_outputs regex / choice: the pattern (NUL-terminated, borrowed as */
                               /* the lists; not with JSON output); the output is a text it matches whole */
    const struct sd_regex *rx; /* ... compiled (regex_mask.h; sd_req_new compiles it; the request owns it) */
    const struct sd_json_vocab *json_vocab; /* JSON / regex output: the model's token table (sd_req_new sets it) */
} sd_sampling;

#define SD_MAX_LOGIT_BIAS 4096
#define SD_MAX_JSON_SCHEMA (256 * 1024) /* bytes of a schema's text */

/* Neutral settings: greedy, every filter off, seed 0. */
sd_sampling sd_sampling_default(void);

/* Checks ranges; SD_ERR_ARG with a message naming the field (logit_bias,
 * allowed_token_ids for the processors: counts, negative ids, biases
 * outside [-100, 100]; ids against a vocabulary are the caller's check). */
sd_status sd_sampling_validate(const sd_sampling *s, char *err, size_t errlen);

/* Uniform double in [0, 1) from (seed, position, stream); a pure function. */
double sd_rng_uniform(uint64_t seed, uint64_t position, uint32_t stream);

typedef struct sd_sampler sd_sampler;

/* Scratch for a vocabulary of `vocab` entries in *out; the caller frees it
 * with sd_sampler_free. Returns SD_OK, or SD_ERR_ARG (vocab < 1) or
 * SD_ERR_NOMEM with a message in err; *out is NULL then. */
sd_status sd_sampler_new(int vocab, sd_sampler **out, char *err, size_t errlen);
void sd_sampler_free(sd_sampler *sp);

/* Clears s's logits processors (lists, counts, min_tokens): the settings a
 * drafter drafts with, which do not borrow the request's lists. */
void sd_sampling_drop_processors(sd_sampling *s);

/* True when s changes logits before the distribution (a penalty or a logits
 * processor): rows then need their logits and their history, not just an
 * argmax. */
bool sd_sampling_processes(const sd_sampling *s);

/* Compiles the output constraints s names by their text — its regular
 * expression (s->regex) and its JSON schema (s->json_schema, compact as
 * s->json_compact) — each on its own: *rx and *schema get the compiled ones
 * (NULL where s names none or it does not compile; the caller frees them),
 * s points at those instead of the texts (regex and json_schema become NULL:
 * they were borrowed). SD_OK when everything named compiled, else the status
 * and message of the first that did not. */
sd_status sd_sampling_compile(sd_sampling *s, struct sd_regex **rx, struct sd_json_schema **schema, char *err,
                              size_t errlen);

/* True when s restricts the output's text (JSON or a regular expression,
 * compiled, with a token table). */
bool sd_sampling_constrained(const sd_sampling *s);

/* The restriction's mask for the position after output[0..n) (json_mask.h,
 * regex_mask.h): tokens that cannot come there get -inf. Nothing when s is
 * not constrained. */
void sd_sampling_constrain(const sd_sampling *s, const int32_t *output, size_t n, float *logits, int nv);

/* Processes logits in place for the position after output[0..n_output), in
 * vLLM's order: JSON or regex output (tokens that cannot continue it -inf,
 * sd_sampling_constrain; needs output), allowed_token_ids (others -inf), min_tokens (early_ban -inf
 * while n_output < min_tokens), logit_bias (added), then repetition (HF:
 * divide positive / multiply negative logits of every token seen in prompt
 * or output), then presence / frequency penalties (OpenAI: logit -=
 * presence*[count>0] + frequency*count over output tokens). output may be
 * NULL with n_output the count when no penalty is on. */
void sd_sampler_process_logits(sd_sampler *sp, const sd_sampling *s, float *logits, int vocab, const int32_t *prompt,
                               size_t n_prompt, const int32_t *output, size_t n_output);

/* sd_sampler_process_logits' work past the output restriction and
 * allowed_token_ids, as edits of single logits (rowdraw.h) for the position
 * after output[0..n_output): min_tokens' bans, logit_bias, the repetition
 * penalty, presence and frequency, in that order; *out points at them in
 * sp's scratch (valid until sp's next call). Returns their count. A device
 * applies them where the logits are (sd_draw_row). */
size_t sd_sampler_edits(sd_sampler *sp, const sd_sampling *s, int vocab, const int32_t *prompt, size_t n_prompt,
                        const int32_t *output, size_t n_output, const sd_logit_edit **out);

/* allowed_token_ids as a mask of (vocab + 31) / 32 words: bit t set for an
 * allowed token t < vocab. */
void sd_sampling_allow_bits(const sd_sampling *s, int vocab, uint32_t *bits);

/* The tokens the output restriction (JSON, a regular expression; needs
 * output) and allowed_token_ids leave at the position after
 * output[0..n_output), as a mask of (vocab + 31) / 32 words — bit t set
 * where sd_sampler_process_logits leaves logit t as it is. False (bits
 * untouched) when s restricts neither. */
bool sd_sampler_mask_bits(sd_sampler *sp, const sd_sampling *s, int vocab, const int32_t *output, size_t n_output,
                          uint32_t *bits);

/* The filtered distribution of already-penalised logits: softmax(logits/T),
 * then top-k, top-p, min-p (in that order, as HF's warpers), renormalised
 * (the normaliser an exact sum of the weights, exsum.h).
 * Writes up to cap entries sorted by probability descending (ties: lower id
 * first) and returns how many there are. Requires temperature > 0.
 * Details: the return value is the number written; when more than cap
 * tokens survive the filters, the cap most probable are written and
 * renormalised among themselves (pass cap >= vocab for the exact
 * distribution). Tokens whose probability is 0 (-inf logits) are left out;
 * temperature <= 0 gives the one-hot argmax; 0 means no token has positive
 * probability (all logits -inf/NaN) or vocab exceeds the sampler's vocab. */
size_t sd_sampler_distribution(sd_sampler *sp, const sd_sampling *s, const float *logits, int vocab, sd_tokprob *out,
                               size_t cap);

/* The token sd_sample_sparse(dist, n, u) draws, where dist, n is
 * sd_sampler_distribution(sp, s, logits, vocab, dist, cap >= vocab) — the
 * same token, computed without sorting the whole vocabulary when s has no
 * top-k and no top-p: only the most probable tokens, as far as the draw
 * reaches (specd-bench-sampler, 151,936 tokens: 4.3 ms a draw sorted, 0.5
 * banded). -1 when no token has positive probability (all logits -inf or
 * NaN) or on bad arguments; temperature <= 0 gives the argmax. Logits
 * already penalised. */
int32_t sd_sampler_draw(sd_sampler *sp, const sd_sampling *s, const float *logits, int vocab, double u);

/* p(token) in that same distribution (sd_sparse_prob of it), without a sort
 * when s has no top-k and no top-p. -1 when no token has positive
 * probability or on bad arguments; temperature <= 0: 1 for the argmax, else
 * 0. The verifier's acceptance test reads p(d) with it. */
float sd_sampler_prob(sd_sampler *sp, const sd_sampling *s, const float *logits, int vocab, int32_t token);

/* The residual draw of rejection sampling (Leviathan et al. / Chen et al.
 * 2023) after a rejected draft: from normalise(max(0, p - q)), p the
 * filtered distribution of the (penalised) logits as
 * sd_sampler_distribution(cap >= vocab) gives it — the one-hot argmax when
 * no token has positive probability — and q the draft's sparse distribution
 * (entries for one token are all subtracted; tokens outside the vocabulary
 * and entries <= 0 are ignored). The residual mass is an exact sum; the
 * draw walks p's order (probability descending, id ascending), summing the
 * positive residuals in double, and takes the first token whose cumulative
 * sum exceeds u times the mass (the last positive one when rounding leaves
 * none); with no residual mass (q covers p) it draws from p as
 * sd_sample_sparse. Without top-k and top-p, only the most probable tokens
 * are sorted, as far as the walk reaches. -1 when the row has no token at
 * all (every logit NaN) or on bad arguments. */
int32_t sd_sampler_residual(sd_sampler *sp, const sd_sampling *s, const float *logits, int vocab, const sd_tokprob *q,
                            size_t nq, double u);

/* Draws from a sparse distribution with uniform u in [0,1): the first entry
 * whose cumulative probability (summed in list order, in double) exceeds
 * u * total, total the exact sum of the positive entries rounded once
 * (exsum.h: the same in any order). Returns -1 when no entry has positive
 * probability. */
int32_t sd_sample_sparse(const sd_tokprob *dist, size_t n, double u);

/* Probability of token in a sparse distribution; 0 when absent. The
 * verifier's rejection rule reads p(d) and q(d) with it. */
float sd_sparse_prob(const sd_tokprob *dist, size_t n, int32_t token);

/* Argmax of logits; lowest id on ties; NaNs never win. -1 when vocab <= 0
 * or every logit is NaN. */
int32_t sd_argmax(const float *logits, int vocab);

/* Full chain for one output position: sd_sampler_process_logits (in place), then
 * argmax when temperature == 0, else a draw from the filtered distribution
 * with u = sd_rng_uniform(seed, position, 0). */
int32_t sd_sampler_sample(sd_sampler *sp, const sd_sampling *s, float *logits, int vocab, const int32_t *prompt,
                          size_t n_prompt, const int32_t *output, size_t n_output, uint64_t position);

#endif

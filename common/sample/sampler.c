/* sampler.c — logits → next token (see sampler.h).
 *
 * Role: the one sampler chain of specd, shared by plain decoding, by the
 * drafter (which reports its filtered distribution as a sparse list) and by
 * the verifier's match / rejection rules. Everything here is deterministic:
 * the softmax is summed exactly (exsum.h: in any order), every sort uses the total
 * order (probability descending, id ascending), and the random number of an
 * output position is a pure function of (seed, position, stream).
 *
 * Ownership: an sd_sampler owns its scratch buffers (sized for its vocab at
 * creation, so no call below allocates). Callers own logits and outputs.
 * Threading: an sd_sampler is not thread-safe; the free functions are. */
#include "sampler.h"

#include "exsum.h"
#include "json_mask.h"
#include "json_schema.h"
#include "regex_mask.h"
#include "vecmath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A candidate token during filtering: unnormalised weight exp((l-max)/T). */
typedef struct cand {
    double w;
    int32_t id;
} cand;

struct sd_sampler {
    int vocab;
    int *counts;          /* (vocab) zero between calls; only touched entries reset */
    cand *cands;          /* (vocab) candidates of the current distribution */
    cand *tmp;            /* (vocab) radix-sort buffer */
    sd_tokprob *dist;     /* (vocab) the filtered distribution sd_sampler_sample draws from */
    float *wf;            /* (vocab) softmax numerators, float */
    int *ids;             /* (vocab) a band's token ids (banded_walk) */
    double *rd;           /* (vocab) residuals p - q of q's tokens; zero between calls */
    sd_logit_edit *edits; /* (cap_edits) the logits processors' edits of a row (sd_sampler_edits) */
    size_t cap_edits;
    uint32_t *bits; /* ((vocab + 31) / 32) an allowed-token mask */
};

/* ---- settings --------------------------------------------------------- */

sd_sampling sd_sampling_default(void)
{
    sd_sampling s;
    memset(&s, 0, sizeof s);
    s.temperature = 0.0f;
    s.top_k = 0;
    s.top_p = 1.0f;
    s.min_p = 0.0f;
    s.repetition_penalty = 1.0f;
    s.presence_penalty = 0.0f;
    s.frequency_penalty = 0.0f;
    s.seed = 0;
    return s;
}

/* The logits processors' lists: bounded, present when counted, ids >= 0,
 * biases within OpenAI's [-100, 100]. */
static sd_status validate_processors(const sd_sampling *s, char *err, size_t errlen)
{
    if (s->n_bias > SD_MAX_LOGIT_BIAS)
        return sd_seterr(err, errlen, SD_ERR_ARG, "logit_bias has %u entries (at most %d)", s->n_bias,
                         SD_MAX_LOGIT_BIAS);
    if ((s->n_bias && (!s->bias_ids || !s->bias_values)) || (s->n_allowed && !s->allowed) ||
        (s->n_early_ban && !s->early_ban))
        return sd_seterr(err, errlen, SD_ERR_ARG, "logit_bias / allowed_token_ids list missing");
    for (uint32_t i = 0; i < s->n_bias; i++) {
        if (s->bias_ids[i] < 0)
            return sd_seterr(err, errlen, SD_ERR_ARG, "logit_bias token id %d is negative", (int)s->bias_ids[i]);
        if (!(s->bias_values[i] >= -100.0f && s->bias_values[i] <= 100.0f))
            return sd_seterr(err, errlen, SD_ERR_ARG, "logit_bias of token %d must be in [-100, 100], got %g",
                             (int)s->bias_ids[i], s->bias_values[i]);
    }
    for (uint32_t i = 0; i < s->n_allowed; i++)
        if (s->allowed[i] < 0)
            return sd_seterr(err, errlen, SD_ERR_ARG, "allowed_token_ids holds a negative id (%d)", (int)s->allowed[i]);
    if (s->json_object && (s->json_schema || s->schema))
        return sd_seterr(err, errlen, SD_ERR_ARG, "JSON output is by json_object or by a schema, not both");
    if (s->json_schema && strnlen(s->json_schema, SD_MAX_JSON_SCHEMA + 1) > SD_MAX_JSON_SCHEMA)
        return sd_seterr(err, errlen, SD_ERR_ARG, "the JSON schema's text exceeds %d bytes", SD_MAX_JSON_SCHEMA);
    if ((s->regex || s->rx) && (s->json_object || s->json_schema || s->schema))
        return sd_seterr(err, errlen, SD_ERR_ARG, "output is by JSON or by a regular expression, not both");
    if (s->regex && strnlen(s->regex, SD_MAX_REGEX + 1) > SD_MAX_REGEX)
        return sd_seterr(err, errlen, SD_ERR_ARG, "the regular expression exceeds %d bytes", SD_MAX_REGEX);
    return SD_OK;
}

sd_status sd_sampling_validate(const sd_sampling *s, char *err, size_t errlen)
{
    if (!s) return sd_seterr(err, errlen, SD_ERR_ARG, "sampling settings missing");
    /* Comparisons are written so that NaN fails every range check. */
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        return sd_seterr(err, errlen, SD_ERR_ARG, "temperature must be finite and >= 0");
    if (s->top_k < 0) return sd_seterr(err, errlen, SD_ERR_ARG, "top_k must be >= 0");
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f)) return sd_seterr(err, errlen, SD_ERR_ARG, "top_p must be in (0, 1]");
    if (!(s->min_p >= 0.0f && s->min_p <= 1.0f)) return sd_seterr(err, errlen, SD_ERR_ARG, "min_p must be in [0, 1]");
    if (!(s->repetition_penalty > 0.0f) || !isfinite(s->repetition_penalty))
        return sd_seterr(err, errlen, SD_ERR_ARG, "repetition_penalty must be finite and > 0");
    if (!(s->presence_penalty >= -2.0f && s->presence_penalty <= 2.0f))
        return sd_seterr(err, errlen, SD_ERR_ARG, "presence_penalty must be in [-2, 2]");
    if (!(s->frequency_penalty >= -2.0f && s->frequency_penalty <= 2.0f))
        return sd_seterr(err, errlen, SD_ERR_ARG, "frequency_penalty must be in [-2, 2]");
    return validate_processors(s, err, errlen);
}

void sd_sampling_drop_processors(sd_sampling *s)
{
    s->bias_ids = s->allowed = s->early_ban = NULL;
    s->bias_values = NULL;
    s->n_bias = s->n_allowed = s->n_early_ban = s->min_tokens = 0;
    s->json_object = false;
    s->json_compact = false;
    s->json_schema = NULL;
    s->schema = NULL;
    s->regex = NULL;
    s->rx = NULL;
    s->json_vocab = NULL;
}

bool sd_sampling_processes(const sd_sampling *s)
{
    return s->repetition_penalty != 1.0f || s->presence_penalty != 0.0f || s->frequency_penalty != 0.0f ||
           s->n_bias > 0 || s->n_allowed > 0 || (s->min_tokens > 0 && s->n_early_ban > 0) || s->json_object ||
           s->json_schema || s->schema || s->regex || s->rx;
}

sd_status sd_sampling_compile(sd_sampling *s, struct sd_regex **rx, struct sd_json_schema **schema, char *err,
                              size_t errlen)
{
    sd_status st = SD_OK;
    *rx = NULL;
    *schema = NULL;
    if (s->regex && sd_regex_compile(s->regex, rx, err, errlen) != SD_OK) st = SD_ERR_ARG;
    if (s->json_schema) {
        char e2[256];
        if (sd_json_schema_parse(s->json_schema, strlen(s->json_schema), schema, e2, sizeof e2) == SD_OK)
            (*schema)->compact = s->json_compact;
        else if (st == SD_OK) st = sd_seterr(err, errlen, SD_ERR_ARG, "%s", e2);
    }
    s->regex = NULL;
    s->json_schema = NULL;
    s->rx = *rx;
    s->schema = *schema;
    return st;
}

bool sd_sampling_constrained(const sd_sampling *s)
{
    return s && s->json_vocab && (s->json_object || s->schema || s->rx);
}

void sd_sampling_constrain(const sd_sampling *s, const int32_t *output, size_t n, float *logits, int nv)
{
    if (!sd_sampling_constrained(s)) return;
    if (s->rx) sd_regex_mask(s->json_vocab, s->rx, output, n, logits, nv);
    else if (s->schema) sd_json_mask(s->json_vocab, s->schema, output, n, logits, nv);
    else sd_json_mask(s->json_vocab, s->json_compact ? sd_json_schema_object_compact() : NULL, output, n, logits, nv);
}

/* ---- random stream ------------------------------------------------------ */

/* The splitmix64 finaliser (Stafford's "Mix13" constants): a bijection on
 * 64-bit words with full avalanche (every input bit flips each output bit
 * with probability ~1/2). */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Construction: a counter-based generator. Each input word is first mixed on
 * its own (offset by a distinct odd constant so that 0 is not a fixed point
 * and the three words live in different "lanes"), then absorbed into the
 * state with xor and mixed again:
 *   h = mix64(seed + C0)
 *   h = mix64(h ^ mix64(position + C1))
 *   h = mix64(h ^ mix64(stream + C2))
 * The top 53 bits of h scaled by 2^-53 give a double in [0, 1) with every
 * value a multiple of 2^-53. No state is kept, so any position can be drawn
 * in any order and a draw never depends on batching or speculation. */
double sd_rng_uniform(uint64_t seed, uint64_t position, uint32_t stream)
{
    uint64_t h = mix64(seed + 0x9E3779B97F4A7C15ULL);
    h = mix64(h ^ mix64(position + 0xD1B54A32D192ED03ULL));
    h = mix64(h ^ mix64((uint64_t)stream + 0x8CB92BA72F3D8DD7ULL));
    return (double)(h >> 11) * 0x1.0p-53;
}

/* ---- lifetime ----------------------------------------------------------- */

sd_status sd_sampler_new(int vocab, sd_sampler **out, char *err, size_t errlen)
{
    *out = NULL;
    if (vocab <= 0) return sd_seterr(err, errlen, SD_ERR_ARG, "sampler: vocabulary of %d entries", vocab);
    sd_sampler *sp = calloc(1, sizeof *sp);
    if (!sp) return sd_seterr(err, errlen, SD_ERR_NOMEM, "sampler: out of memory");
    sp->vocab = vocab;
    sp->counts = calloc((size_t)vocab, sizeof *sp->counts);
    sp->cands = malloc((size_t)vocab * sizeof *sp->cands);
    sp->tmp = malloc((size_t)vocab * sizeof *sp->tmp);
    sp->dist = malloc((size_t)vocab * sizeof *sp->dist);
    sp->wf = malloc((size_t)vocab * sizeof *sp->wf);
    sp->ids = malloc((size_t)vocab * sizeof *sp->ids);
    sp->rd = calloc((size_t)vocab, sizeof *sp->rd);
    sp->cap_edits = 3 * (size_t)vocab + SD_MAX_LOGIT_BIAS; /* bans, biases, repetition and penalties */
    sp->edits = malloc(sp->cap_edits * sizeof *sp->edits);
    sp->bits = malloc(((size_t)vocab + 31) / 32 * sizeof *sp->bits);
    if (!sp->counts || !sp->cands || !sp->tmp || !sp->dist || !sp->wf || !sp->ids || !sp->rd || !sp->edits ||
        !sp->bits) {
        sd_sampler_free(sp);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "sampler: out of memory for a vocabulary of %d", vocab);
    }
    *out = sp;
    return SD_OK;
}

void sd_sampler_free(sd_sampler *sp)
{
    if (!sp) return;
    free(sp->counts);
    free(sp->cands);
    free(sp->tmp);
    free(sp->dist);
    free(sp->wf);
    free(sp->ids);
    free(sp->rd);
    free(sp->edits);
    free(sp->bits);
    free(sp);
}

/* ---- logits processors ---------------------------------------------------- */

/* Marks in counts[] the tokens already edited (each is edited once); the
 * caller clears them. */
static void clear_marks(int *counts, int nv, const int32_t *toks, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (toks[i] >= 0 && toks[i] < nv) counts[toks[i]] = 0;
}

/* Appends an edit (op, v) of each distinct token of toks not yet marked. */
static size_t edit_distinct(int *counts, sd_logit_edit *e, size_t k, int nv, const int32_t *toks, size_t n, int32_t op,
                            float v)
{
    for (size_t i = 0; i < n; i++) {
        int32_t t = toks[i];
        if (t < 0 || t >= nv || counts[t]) continue;
        counts[t] = 1;
        e[k++] = (sd_logit_edit){t, op, v};
    }
    return k;
}

void sd_sampling_allow_bits(const sd_sampling *s, int vocab, uint32_t *bits)
{
    memset(bits, 0, ((size_t)vocab + 31) / 32 * sizeof *bits);
    for (uint32_t i = 0; i < s->n_allowed; i++)
        if (s->allowed[i] >= 0 && s->allowed[i] < vocab) bits[s->allowed[i] >> 5] |= 1u << (s->allowed[i] & 31);
}

size_t sd_sampler_edits(sd_sampler *sp, const sd_sampling *s, int vocab, const int32_t *prompt, size_t n_prompt,
                        const int32_t *output, size_t n_output, const sd_logit_edit **out)
{
    int nv = vocab < sp->vocab ? vocab : sp->vocab;
    int *counts = sp->counts;
    sd_logit_edit *e = sp->edits;
    size_t k = 0;
    *out = e;
    if (n_output < s->min_tokens && s->early_ban) { /* min_tokens: the stop tokens banned */
        k = edit_distinct(counts, e, k, nv, s->early_ban, s->n_early_ban, SD_EDIT_BAN, 0.0f);
        clear_marks(counts, nv, s->early_ban, s->n_early_ban);
    }
    if (s->bias_ids && s->bias_values) /* logit_bias, in its order */
        for (uint32_t i = 0; i < s->n_bias && i < SD_MAX_LOGIT_BIAS; i++)
            if (s->bias_ids[i] >= 0 && s->bias_ids[i] < nv)
                e[k++] = (sd_logit_edit){s->bias_ids[i], SD_EDIT_BIAS, s->bias_values[i]};
    if (!prompt) n_prompt = 0;
    if (!output) n_output = 0;
    float r = s->repetition_penalty; /* HF: every distinct token of prompt and output, once */
    if (r != 1.0f && r > 0.0f) {
        k = edit_distinct(counts, e, k, nv, prompt, n_prompt, SD_EDIT_REP, r);
        k = edit_distinct(counts, e, k, nv, output, n_output, SD_EDIT_REP, r);
        clear_marks(counts, nv, prompt, n_prompt);
        clear_marks(counts, nv, output, n_output);
    }
    float pres = s->presence_penalty, freq = s->frequency_penalty;
    if (pres == 0.0f && freq == 0.0f) return k;
    for (size_t i = 0; i < n_output; i++)
        if (output[i] >= 0 && output[i] < nv) counts[output[i]]++;
    /* OpenAI: logit -= frequency * count + presence, at a token's first
     * occurrence, which resets its count: the scratch ends clean. */
    for (size_t i = 0; i < n_output; i++) {
        int32_t t = output[i];
        if (t < 0 || t >= nv || counts[t] == 0) continue;
        e[k++] = (sd_logit_edit){t, SD_EDIT_SUB, freq * (float)counts[t] + pres};
        counts[t] = 0;
    }
    return k;
}

/* Tokens outside [0, min(vocab, sampler vocab)) are ignored. The scratch
 * count array is zero on entry and on exit; only touched entries are reset. */
/* The output restriction (JSON, a regular expression) and
 * allowed_token_ids on logits[0..nv): -inf where they refuse a token. */
static void mask_row(sd_sampler *sp, const sd_sampling *s, float *logits, int nv, const int32_t *output,
                     size_t n_output)
{
    sd_sampling_constrain(s, output, n_output, logits, nv);
    if (s->n_allowed > 0 && s->allowed) { /* allowed_token_ids: every other token -inf */
        sd_sampling_allow_bits(s, nv, sp->bits);
        for (int t = 0; t < nv; t++)
            if (!sd_rd_allowed(sp->bits, t)) logits[t] = -INFINITY;
    }
}

bool sd_sampler_mask_bits(sd_sampler *sp, const sd_sampling *s, int vocab, const int32_t *output, size_t n_output,
                          uint32_t *bits)
{
    if (!sd_sampling_constrained(s) && !(s->n_allowed > 0 && s->allowed)) return false;
    int nv = vocab < sp->vocab ? vocab : sp->vocab;
    float *row = sp->wf; /* a row of zeros, masked as a row of logits would be */
    memset(row, 0, (size_t)nv * sizeof *row);
    mask_row(sp, s, row, nv, output, n_output);
    memset(bits, 0, ((size_t)vocab + 31) / 32 * sizeof *bits);
    for (int t = 0; t < nv; t++)
        if (row[t] != -INFINITY) bits[t >> 5] |= 1u << (t & 31);
    return true;
}

void sd_sampler_process_logits(sd_sampler *sp, const sd_sampling *s, float *logits, int vocab, const int32_t *prompt,
                               size_t n_prompt, const int32_t *output, size_t n_output)
{
    if (!sp || !s || !logits || vocab <= 0) return;
    int nv = vocab < sp->vocab ? vocab : sp->vocab;
    mask_row(sp, s, logits, nv, output, n_output);
    const sd_logit_edit *e;
    size_t n = sd_sampler_edits(sp, s, vocab, prompt, n_prompt, output, n_output, &e);
    for (size_t i = 0; i < n; i++) logits[e[i].token] = sd_rd_edit(logits[e[i].token], e[i].op, e[i].v);
}

/* ---- ordering helpers ------------------------------------------------- */

/* The total order of every list here: weight descending, then id ascending. */
static int cand_before(const cand *a, const cand *b) { return a->w > b->w || (a->w == b->w && a->id < b->id); }

static int cand_cmp(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (cand_before(a, b)) return -1;
    if (cand_before(b, a)) return 1;
    return 0;
}

static void cand_swap(cand *a, cand *b)
{
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges c[0..n) so that c[0..k) holds the k first candidates of the
 * total order (in no particular order). Quickselect with a median-of-three
 * pivot; after a generous number of rounds it falls back to sorting the
 * remaining range, so the worst case stays O(n log n). Deterministic. */
static void cand_select(cand *c, size_t n, size_t k)
{
    size_t lo = 0, hi = n; /* the k-th boundary lies in [lo, hi) */
    int rounds = 0;
    while (hi - lo > 16 && k > lo && k < hi) {
        if (++rounds > 64) break;
        size_t mid = lo + (hi - lo) / 2;
        if (cand_before(&c[mid], &c[lo])) cand_swap(&c[mid], &c[lo]);
        if (cand_before(&c[hi - 1], &c[lo])) cand_swap(&c[hi - 1], &c[lo]);
        if (cand_before(&c[hi - 1], &c[mid])) cand_swap(&c[hi - 1], &c[mid]);
        cand pivot = c[mid];
        /* Lomuto-style: everything strictly before the pivot goes left. */
        cand_swap(&c[mid], &c[hi - 1]);
        size_t store = lo;
        for (size_t i = lo; i < hi - 1; i++)
            if (cand_before(&c[i], &pivot)) cand_swap(&c[i], &c[store++]);
        cand_swap(&c[store], &c[hi - 1]); /* pivot at its final place */
        if (store == k || store + 1 == k) return;
        if (k < store) hi = store;
        else lo = store + 1;
    }
    if (k > lo && k < hi) qsort(c + lo, hi - lo, sizeof *c, cand_cmp);
}

/* Large lists are sorted with a stable LSD radix sort (11-bit digits): first
 * by id (skipped when already in id order, as the softmax emits them), then
 * by the bits of w, which for w > 0 order like the values; ~bits makes the
 * order descending; digits where every key agrees are skipped. A 150k-entry
 * sort costs a few passes instead of the ~50 ms of qsort, which matters:
 * top_p = 1 with no top_k is OpenAI's default and needs the whole vocabulary
 * sorted every token. */
enum { RADIX_BITS = 11, RADIX = 1 << RADIX_BITS, RADIX_MIN = 2048 };

static uint64_t cand_key(const cand *c)
{
    uint64_t b;
    memcpy(&b, &c->w, sizeof b);
    return ~b;
}

/* One stable counting-sort pass on the digit at shift (of the id when
 * by_id, else of the key) from src into dst. Returns 0, without moving
 * anything, when every entry has the same digit. */
static int radix_pass(const cand *src, cand *dst, size_t n, int shift, int by_id)
{
    size_t cnt[RADIX] = {0};
    for (size_t i = 0; i < n; i++) {
        uint64_t k = by_id ? (uint64_t)(uint32_t)src[i].id : cand_key(&src[i]);
        cnt[(k >> shift) & (RADIX - 1)]++;
    }
    size_t sum = 0;
    for (int b = 0; b < RADIX; b++) {
        if (cnt[b] == n) return 0;
        size_t c = cnt[b];
        cnt[b] = sum;
        sum += c;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t k = by_id ? (uint64_t)(uint32_t)src[i].id : cand_key(&src[i]);
        dst[cnt[(k >> shift) & (RADIX - 1)]++] = src[i];
    }
    return 1;
}

/* Sorts c[0..n) in the total order; tmp has room for n entries. */
static void cand_sort(cand *c, cand *tmp, size_t n)
{
    if (n < RADIX_MIN) {
        qsort(c, n, sizeof *c, cand_cmp);
        return;
    }
    cand *a = c, *b = tmp;
    int32_t max_id = 0, in_order = 1;
    uint64_t key0 = cand_key(&c[0]), differ = 0; /* the key bits that differ somewhere */
    for (size_t i = 0; i < n; i++) {
        if (c[i].id > max_id) max_id = c[i].id;
        if (i > 0 && c[i].id < c[i - 1].id) in_order = 0;
        differ |= cand_key(&c[i]) ^ key0;
    }
    for (int sh = 0; !in_order && sh < 32 && ((uint32_t)max_id >> sh) != 0; sh += RADIX_BITS) {
        if (radix_pass(a, b, n, sh, 1)) {
            cand *t = a;
            a = b;
            b = t;
        }
    }
    /* only the bits that differ are sorted on: weights from a float softmax leave the low 29 bits
     * of the double zero, so 3 passes do instead of 6 */
    int lo = differ ? __builtin_ctzll(differ) : 64, hi = differ ? 64 - __builtin_clzll(differ) : 0;
    for (int sh = lo; sh < hi; sh += RADIX_BITS) {
        if (radix_pass(a, b, n, sh, 0)) {
            cand *t = a;
            a = b;
            b = t;
        }
    }
    if (a != c) memcpy(c, a, n * sizeof *c);
}

/* Moves the candidates of c[lo..n) with w >= t to c[lo..ret); returns ret. */
static size_t cand_partition_ge(cand *c, size_t lo, size_t n, double t)
{
    size_t store = lo;
    for (size_t i = lo; i < n; i++)
        if (c[i].w >= t) cand_swap(&c[i], &c[store++]);
    return store;
}

/* ---- distribution ------------------------------------------------------- */

/* The exact sum of c[0..n)'s weights (floats, or 1.0), rounded once. */
static double cand_sum(const cand *c, size_t n)
{
    sd_exsum e;
    sd_exsum_init(&e);
    for (size_t i = 0; i < n; i++) sd_exsum_add_float(&e, (float)c[i].w);
    return sd_exsum_value(&e);
}

/* Writes every token with exp((l - max)/T) > 0 into c in id order; sets
 * *wmax and *total (their exact sum). NaN logits are skipped; a +inf
 * logit takes all the mass (shared with other +inf logits). */
/* Softmax numerators exp((l - max) / temp) in float (as PyTorch computes a
 * float32 softmax; vectorised, sd_exp_weights), kept as candidates when
 * positive; NaN and -inf logits never are. The maximum gets exactly 1. */
static size_t softmax_cands(cand *c, float *wf, const float *logits, int vocab, double temp, double *wmax,
                            double *total)
{
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    *wmax = 0.0;
    *total = 0.0;
    if (mx == -INFINITY) return 0;
    sd_exp_weights(logits, vocab, mx, (float)temp, wf);
    size_t n = 0;
    for (int i = 0; i < vocab; i++) {
        float l = logits[i];
        if (isnan(l) || l == -INFINITY) continue;
        double w = l == mx ? 1.0 : (double)wf[i];
        if (w > 0.0) {
            c[n].w = w;
            c[n].id = i;
            n++;
        }
    }
    *wmax = 1.0;
    *total = cand_sum(c, n); /* exact: the same on a device that sums in parallel */
    return n;
}

/* Top-p without top-k: the smallest prefix of the sorted list whose
 * cumulative weight reaches target (at least 1 entry), capped at the
 * candidates with w >= floor_w (min-p removes the rest anyway). To avoid a
 * full sort it sorts in bands: candidates with w >= wmax*2^-10 first, then
 * the next band, and so on; each band lies wholly below the previous one,
 * so the concatenation is the sorted order and the cumulative sum is the
 * same as over a full sort. Returns the prefix length; c[0..ret) sorted. */
static size_t topp_banded(cand *c, cand *tmp, size_t n, double target, double wmax, double floor_w)
{
    size_t done = 0;
    double cum = 0.0;
    double t = wmax;
    for (int round = 0; done < n; round++) {
        t = round < 8 ? t * 0x1.0p-10 : 0.0;
        if (t < floor_w) t = floor_w;
        size_t m = t > 0.0 ? cand_partition_ge(c, done, n, t) : n;
        cand_sort(c + done, tmp, m - done);
        for (size_t i = done; i < m; i++) {
            if (i > 0 && cum >= target) return i;
            cum += c[i].w;
        }
        done = m;
        if (t == floor_w) break; /* everything left is below the min-p floor */
    }
    return done;
}

/* Rounding to float can make neighbours with different double weights
 * equal; restore "ties: lower id first" within each run of equal probs
 * (runs are short, so insertion sort). */
static void order_float_ties(sd_tokprob *d, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && d[j].prob == d[i].prob) j++;
        for (size_t a = i + 1; a < j; a++) {
            sd_tokprob x = d[a];
            size_t b = a;
            for (; b > i && d[b - 1].token > x.token; b--) d[b] = d[b - 1];
            d[b] = x;
        }
        i = j;
    }
}

/* A candidate's probability: its weight over sum, as a float. */
static float cand_prob(double w, double sum) { return (float)(w / sum); }

/* Writes c[0..n) (sorted) as probabilities renormalised over the entries
 * written (at most cap); stops at the first entry whose float prob is 0.
 * The normaliser is summed exactly (order-free, exsum.h). */
static size_t write_dist(const cand *c, size_t n, sd_tokprob *out, size_t cap)
{
    size_t m = n < cap ? n : cap;
    double sum = cand_sum(c, m);
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
        float p = cand_prob(c[i].w, sum);
        if (!(p > 0.0f)) break;
        out[k].token = c[i].id;
        out[k].prob = p;
        k++;
    }
    order_float_ties(out, k);
    return k;
}

/* Extensions beyond sampler.h's wording, relied on by callers:
 * - returns the number of entries written. When the filtered distribution
 *   has more than cap entries, the cap most probable are written and
 *   renormalised among themselves, so out[0..ret) is always a proper
 *   distribution (what the drafter samples from is what it reports).
 *   Pass cap >= vocab for the exact filtered distribution.
 * - temperature <= 0 (or NaN) gives the one-hot distribution of the argmax.
 * - returns 0 when no token has positive probability (all logits -inf or
 *   NaN), when vocab exceeds the sampler's vocab, or on NULL arguments. */
size_t sd_sampler_distribution(sd_sampler *sp, const sd_sampling *s, const float *logits, int vocab, sd_tokprob *out,
                               size_t cap)
{
    if (!sp || !s || !logits || !out || cap == 0 || vocab <= 0 || vocab > sp->vocab) return 0;
    if (!(s->temperature > 0.0f)) {
        int32_t a = sd_argmax(logits, vocab);
        if (a < 0) return 0;
        out[0].token = a;
        out[0].prob = 1.0f;
        return 1;
    }
    cand *c = sp->cands;
    double wmax, total;
    size_t n = softmax_cands(c, sp->wf, logits, vocab, s->temperature, &wmax, &total);
    if (n == 0) return 0;
    double floor_w = s->min_p > 0.0f ? (double)s->min_p * wmax : 0.0;
    size_t sorted = 0;
    if (s->top_k > 0 && (size_t)s->top_k < n) {
        cand_select(c, n, (size_t)s->top_k);
        n = (size_t)s->top_k;
        cand_sort(c, sp->tmp, n);
        sorted = n;
        total = cand_sum(c, n);
    }
    if (s->top_p < 1.0f) {
        double target = (double)s->top_p * total;
        if (sorted == n) {
            double cum = 0.0;
            size_t i = 0;
            for (; i < n; i++) {
                if (i > 0 && cum >= target) break;
                cum += c[i].w;
            }
            n = i;
        } else {
            n = topp_banded(c, sp->tmp, n, target, wmax, floor_w);
        }
    } else if (sorted < n) {
        if (floor_w > 0.0) n = cand_partition_ge(c, 0, n, floor_w);
        if (cap < n) { /* only the cap most probable are written: select, then sort those */
            cand_select(c, n, cap);
            n = cap;
        }
        cand_sort(c, sp->tmp, n);
    }
    while (n > 1 && c[n - 1].w < floor_w) /* min-p: a sorted suffix */
        n--;
    return write_dist(c, n, out, cap);
}

/* Whether s's filtered distribution needs no order to be defined: no top-k
 * (or one that keeps every token) and no top-p; min-p is a threshold. Then a
 * draw sorts only as far as it reaches and a probability needs no sort. */
static int order_free(const sd_sampling *s, int vocab)
{
    return (s->top_k <= 0 || s->top_k >= vocab) && !(s->top_p < 1.0f);
}

/* An order-free s's filtered distribution, dense: sp->wf[i] = token i's
 * weight (softmax_cands' w: 1 for the maximum, 0 for NaN, -inf and what
 * min-p removes), *sum their exact sum (write_dist's normaliser). Returns 0
 * when no token has positive probability, else 1. */
static int dense_weights(sd_sampler *sp, const sd_sampling *s, const float *logits, int vocab, double *sum)
{
    int32_t a = sd_argmax(logits, vocab); /* vectorised; NaNs never win */
    float mx = a < 0 ? -INFINITY : logits[a];
    if (mx == -INFINITY) return 0;
    float *wf = sp->wf;
    sd_exp_weights(logits, vocab, mx, s->temperature, wf);
    /* softmax_cands' w; min-p's floor is min_p times the maximum weight, 1 */
    sd_keep_weights(logits, vocab, mx, s->min_p > 0.0f ? s->min_p : 0.0f, wf);
    sd_exsum e;
    sd_exsum_init(&e);
    sd_exsum_add_floats(&e, wf, vocab);
    *sum = sd_exsum_value(&e);
    return *sum > 0.0;
}

/* sd_sample_sparse's walk over the probabilities pf[0..vocab) (those > 0)
 * in the total order, with target u * total, sorting only as far as the
 * walk reaches: bands of p >= pmax 2^-10, 2^-20, ... (as topp_banded), each
 * gathered into c, sorted and walked in turn. Each band lies wholly below
 * the previous one, so the walk adds the same terms in the same order as
 * over a full sort. With mark, a marked token weighs rd[id] instead of its
 * p (the residual draw; order still by p); weights <= 0 are skipped. */
typedef struct walk_in {
    const float *pf;
    int vocab;
    float pmax;
    const int *mark; /* NULL: every token weighs its p */
    const double *rd;
} walk_in;

static int32_t banded_walk(const walk_in *in, cand *c, cand *tmp, int *ids, double target)
{
    double cum = 0.0;
    float hi = INFINITY, t = in->pmax;
    int32_t last = -1;
    for (int round = 0; hi > 0.0f; round++) {
        t = round < 8 ? t * 0x1.0p-10f : 0.0f;
        size_t m = (size_t)sd_band_ids(in->pf, in->vocab, t, hi, ids);
        for (size_t i = 0; i < m; i++) c[i] = (cand){in->pf[ids[i]], ids[i]};
        cand_sort(c, tmp, m);
        for (size_t i = 0; i < m; i++) {
            double w = in->mark && in->mark[c[i].id] ? in->rd[c[i].id] : c[i].w;
            if (!(w > 0.0)) continue;
            cum += w;
            if (cum > target) return c[i].id;
            last = c[i].id;
        }
        hi = t;
    }
    return last; /* rounding left cum <= target: the last live entry */
}

/* An order-free s's filtered distribution as dense probabilities in sp->wf
 * (each as write_dist computes it, 0 for the tokens it leaves out); returns
 * the largest, 0 when no token has positive probability. */
static float dense_probs(sd_sampler *sp, const sd_sampling *s, const float *logits, int vocab)
{
    double sum;
    if (!dense_weights(sp, s, logits, vocab, &sum)) return 0.0f;
    return sd_div_to_f32(sp->wf, vocab, sum, sp->wf);
}

/* The draw of the dense distribution in sp->wf with u (sd_sample_sparse's). */
static int32_t dense_draw(sd_sampler *sp, int vocab, float pmax, double u)
{
    sd_exsum total;
    sd_exsum_init(&total);
    sd_exsum_add_floats(&total, sp->wf, vocab);
    walk_in in = {sp->wf, vocab, pmax, NULL, NULL};
    return banded_walk(&in, sp->cands, sp->tmp, sp->ids, u * sd_exsum_value(&total));
}

int32_t sd_sampler_draw(sd_sampler *sp, const sd_sampling *s, const float *logits, int vocab, double u)
{
    if (!sp || !s || !logits || vocab <= 0 || vocab > sp->vocab) return -1;
    if (!(s->temperature > 0.0f)) return sd_argmax(logits, vocab);
    if (!order_free(s, vocab)) {
        size_t n = sd_sampler_distribution(sp, s, logits, vocab, sp->dist, (size_t)sp->vocab);
        return n ? sd_sample_sparse(sp->dist, n, u) : -1;
    }
    float pmax = dense_probs(sp, s, logits, vocab);
    return pmax > 0.0f ? dense_draw(sp, vocab, pmax, u) : -1;
}

/* The residual draw over a sorted distribution p[0..np): r_t = p_t - (the
 * q entries of t), drawn in p's order with target u * (exact sum of the
 * positive r_t); from p itself when no r_t is positive. Leaves sp->rd zero. */
static int32_t residual_sorted(sd_sampler *sp, const sd_tokprob *p, size_t np, const sd_tokprob *q, size_t nq,
                               int vocab, double u)
{
    double *rd = sp->rd;
    for (size_t j = 0; j < np; j++) rd[p[j].token] = p[j].prob;
    for (size_t j = 0; j < nq; j++)
        if (q[j].token >= 0 && q[j].token < vocab && q[j].prob > 0.0f) rd[q[j].token] -= q[j].prob;
    sd_exsum mass;
    sd_exsum_init(&mass);
    for (size_t j = 0; j < np; j++)
        if (rd[p[j].token] > 0.0) sd_exsum_add_double(&mass, rd[p[j].token]);
    double total = sd_exsum_value(&mass), cum = 0.0;
    int32_t x = -1, last = -1;
    for (size_t j = 0; j < np && x < 0 && total > 0.0; j++) {
        double r = rd[p[j].token];
        if (r <= 0.0) continue;
        cum += r;
        x = cum > u * total ? p[j].token : -1;
        last = p[j].token;
    }
    if (total > 0.0 && x < 0) x = last; /* rounding left cum <= target: the last live entry */
    if (!(total > 0.0)) x = sd_sample_sparse(p, np, u);
    for (size_t j = 0; j < nq; j++)
        if (q[j].token >= 0 && q[j].token < vocab) rd[q[j].token] = 0.0;
    for (size_t j = 0; j < np; j++) rd[p[j].token] = 0.0;
    return x;
}

/* The residual draw over the dense probabilities in sp->wf (pmax > 0): q's
 * tokens weigh their residual (sp->rd, marked in sp->counts), the others
 * their p; the order is p's. */
static int32_t residual_dense(sd_sampler *sp, int vocab, float pmax, const sd_tokprob *q, size_t nq, double u)
{
    float *pf = sp->wf;
    int *mark = sp->counts;
    double *rd = sp->rd;
    sd_tokprob *saved = sp->dist; /* q's distinct tokens and their p */
    size_t ns = 0;
    for (size_t j = 0; j < nq; j++) {
        int32_t t = q[j].token;
        if (t < 0 || t >= vocab || !(q[j].prob > 0.0f)) continue;
        if (!mark[t]) {
            mark[t] = 1;
            rd[t] = pf[t];
            saved[ns++] = (sd_tokprob){t, pf[t]};
        }
        rd[t] -= q[j].prob;
    }
    sd_exsum mass; /* the others' p (q's tokens out of the float sum as -0), then q's positive residuals */
    sd_exsum_init(&mass);
    for (size_t k = 0; k < ns; k++) pf[saved[k].token] = -0.0f;
    sd_exsum_add_floats(&mass, pf, vocab);
    for (size_t k = 0; k < ns; k++) {
        pf[saved[k].token] = saved[k].prob;
        if (rd[saved[k].token] > 0.0) sd_exsum_add_double(&mass, rd[saved[k].token]);
    }
    double total = sd_exsum_value(&mass);
    int32_t x;
    if (total > 0.0) {
        walk_in in = {pf, vocab, pmax, mark, rd};
        x = banded_walk(&in, sp->cands, sp->tmp, sp->ids, u * total);
    } else {
        x = dense_draw(sp, vocab, pmax, u);
    }
    for (size_t k = 0; k < ns; k++) {
        mark[saved[k].token] = 0;
        rd[saved[k].token] = 0.0;
    }
    return x;
}

int32_t sd_sampler_residual(sd_sampler *sp, const sd_sampling *s, const float *logits, int vocab, const sd_tokprob *q,
                            size_t nq, double u)
{
    if (!sp || !s || !logits || vocab <= 0 || vocab > sp->vocab || (nq && !q)) return -1;
    float pmax = s->temperature > 0.0f && order_free(s, vocab) ? dense_probs(sp, s, logits, vocab) : 0.0f;
    if (pmax > 0.0f) return residual_dense(sp, vocab, pmax, q, nq, u);
    size_t np = sd_sampler_distribution(sp, s, logits, vocab, sp->dist, (size_t)sp->vocab);
    if (np == 0) { /* no positive probability: the one-hot argmax, as sd_sampler_sample falls back */
        int32_t a = sd_argmax(logits, vocab);
        if (a < 0) return -1;
        sp->dist[0] = (sd_tokprob){a, 1.0f};
        np = 1;
    }
    return residual_sorted(sp, sp->dist, np, q, nq, vocab, u);
}

float sd_sampler_prob(sd_sampler *sp, const sd_sampling *s, const float *logits, int vocab, int32_t token)
{
    if (!sp || !s || !logits || vocab <= 0 || vocab > sp->vocab) return -1.0f;
    if (!(s->temperature > 0.0f)) {
        int32_t a = sd_argmax(logits, vocab);
        return a < 0 ? -1.0f : a == token ? 1.0f : 0.0f;
    }
    if (!order_free(s, vocab)) {
        size_t n = sd_sampler_distribution(sp, s, logits, vocab, sp->dist, (size_t)sp->vocab);
        return n ? sd_sparse_prob(sp->dist, n, token) : -1.0f;
    }
    double sum;
    if (!dense_weights(sp, s, logits, vocab, &sum)) return -1.0f;
    return token >= 0 && token < vocab ? cand_prob(sp->wf[token], sum) : 0.0f;
}

/* ---- drawing ------------------------------------------------------------ */

/* Returns -1 when n == 0 or no entry has positive probability. Non-positive
 * and NaN probabilities count as 0. */
int32_t sd_sample_sparse(const sd_tokprob *dist, size_t n, double u)
{
    if (!dist || n == 0) return -1;
    sd_exsum e;
    sd_exsum_init(&e);
    int32_t last = -1;
    for (size_t i = 0; i < n; i++) {
        if (dist[i].prob > 0.0f) {
            sd_exsum_add_float(&e, dist[i].prob);
            last = dist[i].token;
        }
    }
    if (last < 0) return -1;
    double target = u * sd_exsum_value(&e);
    double cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!(dist[i].prob > 0.0f)) continue;
        cum += dist[i].prob;
        if (cum > target) return dist[i].token;
    }
    return last; /* rounding left cum <= target: take the last live entry */
}

float sd_sparse_prob(const sd_tokprob *dist, size_t n, int32_t token)
{
    if (!dist) return 0.0f;
    for (size_t i = 0; i < n; i++)
        if (dist[i].token == token) return dist[i].prob;
    return 0.0f;
}

/* NaNs never win; all -inf gives 0 (lowest id of the tie). Returns -1 when
 * vocab <= 0 or every logit is NaN. */
int32_t sd_argmax(const float *logits, int vocab)
{
    if (!logits || vocab <= 0) return -1;
    return sd_argmax_f32(logits, vocab);
}

/* Returns -1 on NULL arguments, vocab <= 0 or vocab > the sampler's vocab,
 * or when every logit is NaN. A sampled step whose logits leave no token
 * with positive probability (all -inf) falls back to sd_argmax. */
int32_t sd_sampler_sample(sd_sampler *sp, const sd_sampling *s, float *logits, int vocab, const int32_t *prompt,
                          size_t n_prompt, const int32_t *output, size_t n_output, uint64_t position)
{
    if (!sp || !s || !logits || vocab <= 0 || vocab > sp->vocab) return -1;
    sd_sampler_process_logits(sp, s, logits, vocab, prompt, n_prompt, output, n_output);
    if (!(s->temperature > 0.0f)) return sd_argmax(logits, vocab);
    int32_t x = sd_sampler_draw(sp, s, logits, vocab, sd_rng_uniform(s->seed, position, 0));
    return x >= 0 ? x : sd_argmax(logits, vocab);
}

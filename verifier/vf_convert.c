/* vf_convert.c — protobuf ↔ engine parameters (see vf_convert.h). */
#include "vf_convert.h"

#include "convert.h"

#include <stdlib.h>
#include <string.h>

/* Maps the proto verify mode; -2 for an unknown value. */
static int verify_from_proto(Specd__VerifyMode m)
{
    switch (m) {
    case SPECD__VERIFY_MODE__VERIFY_AUTO: return SD_VERIFY_AUTO;
    case SPECD__VERIFY_MODE__VERIFY_GREEDY: return SD_VERIFY_GREEDY;
    case SPECD__VERIFY_MODE__VERIFY_MATCH: return SD_VERIFY_MATCH;
    case SPECD__VERIFY_MODE__VERIFY_REJECTION: return SD_VERIFY_REJECTION;
    default: return -2;
    }
}

sd_status sd_vf_params_from_submit(const Specd__Submit *s, int default_k, bool have_drafter, sd_req_params *out,
                                   char *err, size_t errlen)
{
    sd_req_params p = sd_req_params_default();
    p.sampling = sd_pb_sampling_get(s->sampling);
    p.max_tokens = s->max_tokens == 0                     ? SD_VF_DEFAULT_MAX_TOKENS
                   : s->max_tokens > SD_VF_MAX_MAX_TOKENS ? SD_VF_MAX_MAX_TOKENS
                                                          : (int)s->max_tokens;
    if (s->n_stop_ids > SD_MAX_STOP_IDS)
        return sd_seterr(err, errlen, SD_ERR_ARG, "at most %d stop ids (got %zu)", SD_MAX_STOP_IDS, s->n_stop_ids);
    for (size_t i = 0; i < s->n_stop_ids; i++) p.stop_ids[i] = s->stop_ids[i];
    p.n_stop = (int)s->n_stop_ids;
    p.ignore_eos = s->ignore_eos;
    if (s->logprobs) {
        if (s->logprobs->top > SD_MAX_LOGPROBS)
            return sd_seterr(err, errlen, SD_ERR_ARG, "at most %d top logprobs (got %u)", SD_MAX_LOGPROBS,
                             s->logprobs->top);
        p.logprobs = true;
        p.top_logprobs = (int)s->logprobs->top;
        p.prompt_logprobs = s->logprobs->prompt;
    }
    if (default_k < 0) default_k = 0;
    if (default_k > SD_MAX_DRAFT) default_k = SD_MAX_DRAFT;
    p.num_draft = default_k;
    p.verify = SD_VERIFY_AUTO;
    if (s->spec) {
        int v = verify_from_proto(s->spec->verify);
        if (v == -2) return sd_seterr(err, errlen, SD_ERR_ARG, "unknown verify mode %d", (int)s->spec->verify);
        p.verify = v;
        if (s->spec->num_draft > 0)
            p.num_draft = s->spec->num_draft > SD_MAX_DRAFT ? SD_MAX_DRAFT : (int)s->spec->num_draft;
        p.speculate = s->spec->enabled && have_drafter && p.num_draft > 0;
    }
    *out = p;
    return SD_OK;
}

Specd__FinishReason sd_vf_finish_to_proto(sd_finish f)
{
    switch (f) {
    case SD_FINISH_STOP: return SPECD__FINISH_REASON__FINISH_STOP;
    case SD_FINISH_LENGTH: return SPECD__FINISH_REASON__FINISH_LENGTH;
    case SD_FINISH_CANCELLED: return SPECD__FINISH_REASON__FINISH_CANCELLED;
    case SD_FINISH_ERROR: return SPECD__FINISH_REASON__FINISH_ERROR;
    default: return SPECD__FINISH_REASON__FINISH_NONE;
    }
}

void sd_vf_stats_to_proto(const sd_spec_stats *st, int n, Specd__SpecStats *out)
{
    specd__spec_stats__init(out);
    out->steps = st->steps;
    out->draft_tokens = st->draft_tokens;
    out->accepted_tokens = st->accepted_tokens;
    if (n < 0) n = 0;
    if (n > SD_MAX_DRAFT) n = SD_MAX_DRAFT;
    out->accepted_at = (uint64_t *)st->accepted_at;
    out->n_accepted_at = (size_t)n;
}

const char *sd_vf_error_code(const char *msg)
{
    return msg && (strstr(msg, "KV") || strstr(msg, "kv")) ? "kv_exhausted" : "internal";
}

Specd__TokenLogprob **sd_vf_logprobs_to_proto(const sd_token_lp *lp, size_t n, int top)
{
    if (top < 0) top = 0;
    size_t nt = n * (size_t)top;
    char *block = malloc(n * (sizeof(Specd__TokenLogprob *) + sizeof(Specd__TokenLogprob)) +
                         nt * (sizeof(Specd__TopLogprob *) + sizeof(Specd__TopLogprob)) + 1);
    if (!block) return NULL;
    Specd__TokenLogprob **ptr = (Specd__TokenLogprob **)block;
    Specd__TokenLogprob *ents = (Specd__TokenLogprob *)(ptr + n);
    Specd__TopLogprob **tptr = (Specd__TopLogprob **)(ents + n);
    Specd__TopLogprob *tops = (Specd__TopLogprob *)(tptr + nt);
    for (size_t i = 0; i < n; i++) {
        specd__token_logprob__init(&ents[i]);
        ents[i].logprob = lp[i].lp;
        ents[i].top = tptr + i * (size_t)top;
        for (int j = 0; j < top && lp[i].top_id[j] >= 0; j++) {
            Specd__TopLogprob *t = &tops[i * (size_t)top + (size_t)j];
            specd__top_logprob__init(t);
            t->token = lp[i].top_id[j];
            t->logprob = lp[i].top_lp[j];
            ents[i].top[ents[i].n_top++] = t;
        }
        ptr[i] = &ents[i];
    }
    return ptr;
}

int sd_vf_accept_estimates(const sd_adapt *ad, Specd__AcceptEstimate *out, float (*bufs)[SD_MAX_DRAFT], int cap)
{
    static const char *const mode[3] = {"greedy", "match", "rejection"};
    static const char *const temp[SD_ADAPT_TEMP_BUCKETS] = {"0", "0..0.5", "0.5..1", "1..1.5", "1.5.."};
    int m = 0;
    for (int k = 0; k < SD_ADAPT_ACCEPT_KEYS && m < cap; k++) {
        const sd_accept *a = &ad->prior[k];
        if (a->steps == 0) continue;
        int np = 0;
        while (np < SD_MAX_DRAFT && a->n[np] > 1) np++; /* positions observed (beyond the seed) */
        for (int i = 0; i < np; i++) bufs[m][i] = (float)a->a[i];
        specd__accept_estimate__init(&out[m]);
        out[m].mode = (char *)mode[k / SD_ADAPT_TEMP_BUCKETS];
        out[m].temperature = (char *)temp[k % SD_ADAPT_TEMP_BUCKETS];
        out[m].accept = bufs[m];
        out[m].n_accept = (size_t)np;
        out[m].steps = a->steps;
        m++;
    }
    return m;
}

void sd_vf_adapt_stats_to_proto(const sd_areq *q, float acc[SD_MAX_DRAFT], Specd__AdaptStats *out)
{
    specd__adapt_stats__init(out);
    out->k_sum = q->st.k_sum;
    out->k_steps = q->st.k_steps;
    out->k_zero = q->st.k_zero;
    int np = 0;
    while (np < SD_MAX_DRAFT && q->acc.n[np] > 1) np++; /* positions observed (beyond the seed) */
    for (int i = 0; i < np; i++) acc[i] = (float)q->acc.a[i];
    out->accept = acc;
    out->n_accept = (size_t)np;
}

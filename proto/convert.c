/* convert.c — see convert.h. */
#include "convert.h"

sd_sampling sd_pb_sampling_get(const Specd__SamplingParams *sp)
{
    sd_sampling s = sd_sampling_default();
    if (!sp) return s;
    s.temperature = sp->temperature;
    s.top_k = sp->top_k > 0 ? sp->top_k : 0; /* -1 / 0: off */
    s.top_p = sp->top_p == 0.0f ? 1.0f : sp->top_p;
    s.min_p = sp->min_p;
    s.repetition_penalty = sp->repetition_penalty == 0.0f ? 1.0f : sp->repetition_penalty;
    s.presence_penalty = sp->presence_penalty;
    s.frequency_penalty = sp->frequency_penalty;
    s.seed = sp->seed;
    if (sp->n_bias_ids == sp->n_bias_values && sp->n_bias_ids <= UINT32_MAX) {
        s.bias_ids = sp->bias_ids;
        s.bias_values = sp->bias_values;
        s.n_bias = (uint32_t)sp->n_bias_ids;
    }
    if (sp->n_allowed_token_ids <= UINT32_MAX) {
        s.allowed = sp->allowed_token_ids;
        s.n_allowed = (uint32_t)sp->n_allowed_token_ids;
    }
    s.min_tokens = sp->min_tokens;
    s.json_object = sp->json_object;
    s.json_schema = sp->json_schema && sp->json_schema[0] ? sp->json_schema : NULL;
    s.regex = sp->regex && sp->regex[0] ? sp->regex : NULL;
    s.json_compact = sp->json_compact;
    return s;
}

void sd_pb_sampling_set(const sd_sampling *s, Specd__SamplingParams *out)
{
    specd__sampling_params__init(out);
    out->temperature = s->temperature;
    out->top_k = s->top_k;
    out->top_p = s->top_p;
    out->min_p = s->min_p;
    out->repetition_penalty = s->repetition_penalty;
    out->presence_penalty = s->presence_penalty;
    out->frequency_penalty = s->frequency_penalty;
    out->seed = s->seed;
    /* protobuf-c's lists are not const; packing only reads them */
    out->bias_ids = (int32_t *)s->bias_ids;
    out->bias_values = (float *)s->bias_values;
    out->n_bias_ids = out->n_bias_values = s->bias_ids && s->bias_values ? s->n_bias : 0;
    out->allowed_token_ids = (int32_t *)s->allowed;
    out->n_allowed_token_ids = s->allowed ? s->n_allowed : 0;
    out->min_tokens = s->min_tokens;
    out->json_object = s->json_object;
    if (s->json_schema) out->json_schema = (char *)s->json_schema; /* packing only reads it */
    if (s->regex) out->regex = (char *)s->regex;
    out->json_compact = s->json_compact;
}

double sd_pipe_stats_hidden(const sd_pipe_stats *ps)
{
    if (!ps->draft_us) return 0.0;
    double h = 1.0 - (double)ps->wait_us / (double)ps->draft_us;
    return h < 0.0 ? 0.0 : h > 1.0 ? 1.0 : h;
}

void sd_pipe_stats_add(sd_pipe_stats *a, const sd_pipe_stats *b, int sign)
{
    for (int i = 0; i < SD_PIPE_STATS_N; i++) a->v[i] += sign > 0 ? b->v[i] : -b->v[i];
}

void sd_pipe_stats_to_proto(const sd_pipe_stats *ps, Specd__PipeStats *out)
{
    specd__pipe_stats__init(out);
    out->spans_used = ps->spans_used;
    out->spans_stale = ps->spans_stale;
    out->spans_ready = ps->spans_ready;
    out->spec_steps = ps->spec_steps;
    out->wait_us = ps->wait_us;
    out->draft_us = ps->draft_us;
    out->step_us = ps->step_us;
    out->verify_us = ps->verify_us;
    out->fallback_used = ps->fallback_used;
    out->fallback_accepted = ps->fallback_accepted;
}

sd_pipe_stats sd_pipe_stats_from_proto(const Specd__PipeStats *p)
{
    sd_pipe_stats ps = {0};
    if (!p) return ps;
    ps.spans_used = p->spans_used;
    ps.spans_stale = p->spans_stale;
    ps.spans_ready = p->spans_ready;
    ps.spec_steps = p->spec_steps;
    ps.wait_us = p->wait_us;
    ps.draft_us = p->draft_us;
    ps.step_us = p->step_us;
    ps.verify_us = p->verify_us;
    ps.fallback_used = p->fallback_used;
    ps.fallback_accepted = p->fallback_accepted;
    return ps;
}

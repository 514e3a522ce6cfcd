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
}

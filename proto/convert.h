/* convert.h — specd.proto messages ↔ engine types, for every process that
 * sends or reads them (router, verifier, drafter): one mapping, so the
 * processes cannot drift apart.
 *
 * Proto3 leaves unset numbers at 0, and clients say "off" in more than one
 * way: the mapping turns both into the engine's neutral values (top_k -1 or
 * 0 → 0 = off; top_p 0 → 1; repetition_penalty 0 → 1). Pure functions. */
#ifndef SD_CONVERT_H
#define SD_CONVERT_H

#include "sampler.h"
#include "specd.pb-c.h"

/* Drafting as the verifier saw it (specd.PipeStats), per request or summed,
 * in the verifier and the router alike; v[] views the counters as one array
 * in the message's field order. */
#define SD_PIPE_STATS_N 10
typedef union sd_pipe_stats {
    struct {
        uint64_t spans_used;        /* steps that verified drafter tokens */
        uint64_t spans_stale;       /* pipelined spans dropped: wrong base */
        uint64_t spans_ready;       /* pipelined spec steps with a span at step start */
        uint64_t spec_steps;        /* decode steps of requests taking drafts */
        uint64_t wait_us;           /* time spent waiting for drafts */
        uint64_t draft_us;          /* drafter time behind the drafts used */
        uint64_t step_us;           /* wall time of the spec steps, end of the previous step to end */
        uint64_t verify_us;         /* engine time of the spec steps */
        uint64_t fallback_used;     /* steps that verified the fallback proposer's drafts instead */
        uint64_t fallback_accepted; /* ... and the drafts of those accepted */
    };
    uint64_t v[SD_PIPE_STATS_N];
} sd_pipe_stats;

/* draft_time_hidden: of the drafter's time behind the spans used, the
 * fraction the verifier did not spend waiting for drafts, 1 - wait / draft
 * clamped to [0, 1] (0 without drafter time): 1 when drafting is wholly
 * hidden behind verification, 0 when the verifier waited as long as the
 * drafter worked (serial speculation). */
double sd_pipe_stats_hidden(const sd_pipe_stats *ps);
/* a += sign * b, counter by counter (sign 1 or -1). */
void sd_pipe_stats_add(sd_pipe_stats *a, const sd_pipe_stats *b, int sign);
/* The proto form of ps (no allocation). */
void sd_pipe_stats_to_proto(const sd_pipe_stats *ps, Specd__PipeStats *out);
/* The counters of p (all zero for NULL). */
sd_pipe_stats sd_pipe_stats_from_proto(const Specd__PipeStats *p);

/* Sampling settings from a (possibly NULL: greedy defaults) SamplingParams.
 * Values are mapped, not validated: sd_sampling_validate says whether the
 * result is usable. The logits processors' lists point into *sp (valid
 * while it is; sd_req_new copies them); a bias list whose two halves differ
 * in length is read as empty (sd_msg_validate refuses such a message). */
sd_sampling sd_pb_sampling_get(const Specd__SamplingParams *sp);

/* Writes s into *out (initialised first; no allocation: the lists point to
 * s's, which must outlive the packing of *out). */
void sd_pb_sampling_set(const sd_sampling *s, Specd__SamplingParams *out);

#endif

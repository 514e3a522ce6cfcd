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

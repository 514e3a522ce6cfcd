/* span.h — the base hash of pipelined speculation (proto/specd.proto).
 *
 * A drafter span names the committed sequence it continues by its length and
 * a 64-bit hash of its tokens; the verifier keeps the same hash of every
 * prefix of its committed sequence and uses a span only when both agree. The
 * hash is a chain: hash(t[0..n)) = sd_span_hash(SD_SPAN_HASH_SEED, t, n), and
 * sd_span_hash(hash(a), b, m) = hash(a followed by b), so either side can
 * extend it token by token. Not cryptographic: a collision could only offer
 * the verifier drafts for another context, which it verifies like any other
 * drafts (speed, never output, depends on them). Pure functions. */
#ifndef SD_SPAN_H
#define SD_SPAN_H

#include <stddef.h>
#include <stdint.h>

#define SD_SPAN_HASH_SEED 0x9E3779B97F4A7C15ULL

/* The hash of the sequence hashed to h followed by tokens[0..n). */
uint64_t sd_span_hash(uint64_t h, const int32_t *tokens, size_t n);

#endif

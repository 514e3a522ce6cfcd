/* testutil.h — helpers shared by the Check suites: fixture paths and a
 * standard main(). Fixture locations come from the environment that CTest
 * sets (SD_FIXTURES, SD_FIXTURES_BIN, SD_MODELS). */
#ifndef SD_TESTUTIL_H
#define SD_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* Writes "<$SD_FIXTURES>/<rel>" into buf and returns buf. */
const char *tu_fixture(char *buf, size_t n, const char *rel);
/* Same for the unpacked fixtures in the build tree ($SD_FIXTURES_BIN). */
const char *tu_fixture_bin(char *buf, size_t n, const char *rel);
/* Same for the demo models ($SD_MODELS). */
const char *tu_model(char *buf, size_t n, const char *rel);

/* Reads a whole file into a malloc'd NUL-terminated buffer; NULL on error. */
char *tu_read_file(const char *path, size_t *len);

struct sd_backend;
struct sd_model;
struct sd_kv_seq;

/* Loads tests/fixtures/models/<name> on be with a KV pool for 3x `positions`
 * positions; fails the test on error. */
struct sd_model *tu_open_model(const char *name, struct sd_backend *be, int positions);

/* One forward pass of n tokens at pos0 on seq (reserve, forward with all n
 * logits into out, commit); fails the test on error. */
void tu_forward(struct sd_model *m, struct sd_kv_seq *seq, const int32_t *ids, int n, int pos0, float *out);

/* Batch invariance: the logits of ids[0..n) computed in one pass, token by
 * token, and in uneven spans (1, 2, 3, ...) batched with a second sequence
 * other[0..n), must be bit-identical; the model's KV pool is all free after.
 * Fails the test otherwise. */
void tu_check_batch_invariance(struct sd_model *m, const int32_t *ids, const int32_t *other, int n);

/* Pearson statistic of counts[0..n) against total * p[0..n). Bins with an
 * expected count below 5 are merged, smallest first, until each merged bin
 * reaches 5 (a leftover goes into the last bin). A count on a p == 0 cell
 * makes it +inf. *df = bins - 1. */
double tu_chi2_stat(const long *counts, const double *p, int n, long total, int *df);

/* The 0.999 quantile of the chi-square distribution with df degrees of
 * freedom (significance 0.001): a table up to 20 (NIST/SEMATECH
 * e-Handbook 1.3.6.7.4), the Wilson-Hilferty approximation above. */
double tu_chi2_crit(int df);

struct sd_tok;
struct sd_json_vocab;

/* The demo target's tokenizer (*tok) and token table (returned), its
 * vocabulary size and EOS id (<|endoftext|>); fails the test on error. */
struct sd_json_vocab *tu_demo_vocab(struct sd_tok **tok, int *vocab, int *eos);

/* Runs one suite with CK_NORMAL output; returns the process exit code. */
int tu_run_suite(Suite *s);

#endif

/* opt.h — numeric command-line values, parsed and range-checked one way in
 * every program: the whole string must be a number (no trailing junk, no
 * empty string, no overflow) inside [lo, hi]; otherwise the message in err
 * reads "NAME must be an integer in [lo, hi], got 'S'" (or "a number"). */
#ifndef SD_OPT_H
#define SD_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Decimal integer in [lo, hi] into *out. SD_ERR_ARG with a message otherwise. */
sd_status sd_opt_int(const char *s, const char *name, int lo, int hi, int *out, char *err, size_t errlen);

/* The same for a wider range (sizes, byte counts, seconds). */
sd_status sd_opt_i64(const char *s, const char *name, int64_t lo, int64_t hi, int64_t *out, char *err, size_t errlen);

/* A decimal unsigned 64-bit integer (seeds): every value 0 .. 2^64 - 1. */
sd_status sd_opt_u64(const char *s, const char *name, uint64_t *out, char *err, size_t errlen);

/* A finite decimal number in [lo, hi] into *out. */
sd_status sd_opt_double(const char *s, const char *name, double lo, double hi, double *out, char *err, size_t errlen);

/* "on" or "off" (also 1 / 0, true / false) into *out. */
sd_status sd_opt_on_off(const char *s, const char *name, bool *out, char *err, size_t errlen);

/* sd_opt_double stored as a float. */
sd_status sd_opt_float(const char *s, const char *name, double lo, double hi, float *out, char *err, size_t errlen);

/* A secret (an API key) from one of three sources: value (given on the
 * command line), the first line of the file at path (surrounding blanks
 * trimmed), or the environment variable env — the first two exclusive,
 * the environment only when neither is given. *out: a malloc'd copy, or
 * NULL when no source gives one (no secret: the caller runs without).
 * *from names the source. SD_ERR_IO for an unreadable file; SD_ERR_ARG for
 * both options, an empty secret (never silently no secret) or one with
 * blanks or control characters (it must fit an HTTP header). */
sd_status sd_opt_secret(const char *value, const char *path, const char *env, char **out, const char **from, char *err,
                        size_t errlen);

#endif

/* status.h — the one error convention of specd.
 *
 * Every fallible function returns sd_status: SD_OK (0) or a negative code.
 * Where a person will read the reason, the function also takes
 * (char *err, size_t errlen) and writes a one-line message there.
 * Library code never exits or aborts on bad input. */
#ifndef SD_STATUS_H
#define SD_STATUS_H

#include <stddef.h>

typedef int sd_status;

enum {
    SD_OK = 0,
    SD_ERR_IO = -1,          /* open/read/mmap failed */
    SD_ERR_FORMAT = -2,      /* malformed input (file, JSON, message) */
    SD_ERR_UNSUPPORTED = -3, /* well-formed but not something we handle */
    SD_ERR_NOMEM = -4,       /* allocation failed */
    SD_ERR_ARG = -5,         /* caller passed an invalid argument */
    SD_ERR_NOSPACE = -6,     /* a bounded resource (KV pool, queue) is full */
    SD_ERR_STATE = -7,       /* operation not valid in the current state */
    SD_ERR_NOTFOUND = -8,    /* named thing does not exist */
    SD_ERR_DEVICE = -9,      /* accelerator runtime error */
    SD_ERR_TIMEOUT = -10,
};

/* Returns a static, human-readable name for a status code. */
const char *sd_status_str(sd_status st);

/* Writes a printf-style message into err (if err != NULL and errlen > 0)
 * and returns st, so callers can write `return sd_seterr(e, n, SD_ERR_IO, ...)`. */
sd_status sd_seterr(char *err, size_t errlen, sd_status st, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif

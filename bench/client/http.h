/* http.h — small blocking HTTP helpers of specd-bench (libcurl easy API):
 * building endpoint URLs from the --url base and one-shot GETs for
 * /v1/models and /metrics. Redirects are never followed and only http/https
 * are allowed, so the tool only ever talks to the URL it was given.
 * Call curl_global_init before use. Not thread-safe per call site. */
#ifndef SD_BENCH_HTTP_H
#define SD_BENCH_HTTP_H

#include <stddef.h>

#include "status.h"

/* Writes base + path into out (outlen bytes); path is absolute from the
 * server root. Trailing "/" and a trailing "/v1" are removed from base
 * first, so "http://h:8000", "http://h:8000/" and "http://h:8000/v1" all
 * give "http://h:8000/v1/models" for "/v1/models" and "http://h:8000/metrics"
 * for "/metrics". Returns SD_OK or SD_ERR_NOSPACE. */
sd_status sd_http_url(char *out, size_t outlen, const char *base, const char *path);

/* GETs url with an optional Bearer api_key, waiting at most timeout_s.
 * On SD_OK, *body is a malloc'd NUL-terminated body (caller frees) and
 * *status the HTTP status (any status, including 4xx/5xx, is SD_OK).
 * Returns SD_ERR_IO (transport failure) or SD_ERR_NOMEM, message in err. */
sd_status sd_http_get(const char *url, const char *api_key, double timeout_s, char **body, long *status, char *err,
                      size_t errlen);

/* Returns the "id" of the first model in GET <base>/v1/models as a malloc'd
 * string (caller frees), or NULL with a message in err. */
char *sd_http_first_model(const char *base, const char *api_key, double timeout_s, char *err, size_t errlen);

#endif

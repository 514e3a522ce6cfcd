/* sse.h — incremental Server-Sent-Events line splitter for specd-bench.
 *
 * The transport hands bytes over in arbitrary pieces (a curl write callback
 * may end in the middle of a line, of "data:", or of "\r\n"). sd_sse buffers
 * the partial line and calls back once per complete "data:" line with its
 * payload (the text after "data:" and one optional space, without the line
 * terminator). Lines end in "\n" or "\r\n"; blank lines (event separators),
 * comments (":...") and other fields (event:, id:, retry:) are skipped.
 * Each data line is delivered on its own: OpenAI-style servers send one JSON
 * object per event, so multi-line events are not joined.
 *
 * Ownership: the splitter owns its buffer; payload pointers passed to the
 * callback are valid only during that call. One splitter per response; not
 * thread-safe. */
#ifndef SD_BENCH_SSE_H
#define SD_BENCH_SSE_H

#include <stddef.h>

#include "status.h"

typedef struct sd_sse sd_sse;

/* Called with one data payload (not NUL-terminated at len in general; a NUL
 * is present at data[len] for convenience). Return 0 to continue, non-zero
 * to stop: sd_sse_feed then returns SD_ERR_STATE. */
typedef int (*sd_sse_data_cb)(void *ud, const char *data, size_t len);

/* A new splitter that accepts lines up to max_line bytes (0 = 1 MiB) in
 * *out; the caller frees it with sd_sse_free. Returns SD_OK, or SD_ERR_NOMEM
 * with a message in err and *out NULL. */
sd_status sd_sse_new(size_t max_line, sd_sse **out, char *err, size_t errlen);

/* Frees s; NULL is a no-op. */
void sd_sse_free(sd_sse *s);

/* Feeds n bytes. Calls cb for each data line completed by these bytes.
 * Returns SD_OK, SD_ERR_NOSPACE (a line longer than max_line; the splitter
 * is then unusable), SD_ERR_NOMEM, or SD_ERR_STATE (cb asked to stop). */
sd_status sd_sse_feed(sd_sse *s, const char *buf, size_t n, sd_sse_data_cb cb, void *ud);

/* End of stream: delivers a trailing line that had no terminator.
 * Same returns as sd_sse_feed. */
sd_status sd_sse_finish(sd_sse *s, sd_sse_data_cb cb, void *ud);

/* Number of data lines delivered so far. */
size_t sd_sse_count(const sd_sse *s);

#endif

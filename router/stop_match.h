/* stop_match.h — stop strings matched on generated text across chunk
 * boundaries.
 *
 * Text arrives in pieces (one per decoded token). The matcher emits text as
 * soon as it cannot be the start of a stop string: it holds back the longest
 * suffix that is a prefix of some stop string, and when a stop string
 * appears, it cuts the output right before the match (the stop string itself
 * is never emitted, as in the OpenAI API). Pure, no I/O; one per request. */
#ifndef SD_STOP_MATCH_H
#define SD_STOP_MATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

typedef struct sd_stop sd_stop;

/* A matcher of copies of the n stop strings (empty or NULL ones are
 * ignored; stops may be NULL when n == 0, and then the matcher passes text
 * straight through) in *out; the caller frees it with sd_stop_free. Returns
 * SD_OK, or SD_ERR_ARG (no list for n > 0) or SD_ERR_NOMEM with a message in
 * err; *out is NULL then. */
sd_status sd_stop_new(const char *const *stops, size_t n, sd_stop **out, char *err, size_t errlen);

/* Frees the matcher; NULL is a no-op. */
void sd_stop_free(sd_stop *s);

/* Feeds len bytes of text. *out / *outlen receive the text that is now safe
 * to emit (a buffer owned by the matcher, valid until the next call).
 * Returns true when a stop string matched: *out then ends right before it,
 * and further feeds emit nothing. */
bool sd_stop_feed(sd_stop *s, const char *text, size_t len, const char **out, size_t *outlen);

/* End of generation without a match: emits the held-back text. */
void sd_stop_flush(sd_stop *s, const char **out, size_t *outlen);

/* True once a stop string has matched. */
bool sd_stop_matched(const sd_stop *s);

#endif

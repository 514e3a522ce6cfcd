/* strbuf.h — a growable byte string, the one string builder of specd.
 *
 * sd_buf {0} is an empty buffer. Once anything was appended (or room
 * reserved) p holds len bytes followed by a NUL, so it can be used as a C
 * string when the bytes contain none; before that p is NULL. A failed allocation leaves the contents as they were and sets
 * `failed`, which stays set (later appends do nothing) until sd_buf_free:
 * a builder may append a whole sequence and check once at the end. Not
 * thread-safe; the owner frees with sd_buf_free or takes p with sd_buf_take. */
#ifndef SD_STRBUF_H
#define SD_STRBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "status.h"

typedef struct sd_buf {
    char *p;     /* NULL until the first non-empty append or reserve */
    size_t len;  /* bytes, NUL not counted */
    size_t cap;  /* bytes allocated */
    bool failed; /* an allocation failed (sticky) */
} sd_buf;

/* Makes room for n more bytes (plus the NUL). SD_OK or SD_ERR_NOMEM. */
sd_status sd_buf_reserve(sd_buf *b, size_t n);

/* Appends n bytes of s. SD_OK or SD_ERR_NOMEM (then b->failed is set). */
sd_status sd_buf_add(sd_buf *b, const void *s, size_t n);

/* Appends the C string s. */
sd_status sd_buf_adds(sd_buf *b, const char *s);

/* Empties the buffer, keeping its memory (and its failed flag). */
void sd_buf_clear(sd_buf *b);

/* Returns the NUL-terminated contents (never NULL unless memory ran out:
 * an empty buffer gives "") and leaves b empty; the caller frees the
 * result. NULL when b->failed (b is freed then). */
char *sd_buf_take(sd_buf *b);

/* Appends everything f yields until EOF. SD_ERR_IO on a read error,
 * SD_ERR_NOSPACE when b would exceed max bytes, SD_ERR_NOMEM; b keeps what
 * was read either way. */
sd_status sd_buf_read(sd_buf *b, FILE *f, size_t max);

/* Reads the whole file at path (at most max bytes) into a new
 * NUL-terminated string *text of *len bytes (the caller frees it). Errors
 * (SD_ERR_IO, SD_ERR_NOSPACE, SD_ERR_NOMEM) name the path in err. */
sd_status sd_read_file(const char *path, size_t max, char **text, size_t *len, char *err, size_t errlen);

/* Frees the contents and resets b to {0}. */
void sd_buf_free(sd_buf *b);

#endif

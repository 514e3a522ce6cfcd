/* sse.c — SSE line splitter (see sse.h). */
#include "sse.h"

#include <stdlib.h>
#include <string.h>

struct sd_sse {
    char *buf;   /* partial line, NUL-terminated scratch of cap bytes */
    size_t len;  /* bytes of the partial line */
    size_t cap;
    size_t max_line;
    size_t count;
    int broken;  /* a line overflowed: refuse further input */
};

sd_sse *sd_sse_new(size_t max_line)
{
    sd_sse *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->max_line = max_line ? max_line : (size_t)1 << 20;
    s->cap = 256;
    s->buf = malloc(s->cap);
    if (!s->buf) {
        free(s);
        return NULL;
    }
    s->buf[0] = '\0';
    return s;
}

void sd_sse_free(sd_sse *s)
{
    if (!s)
        return;
    free(s->buf);
    free(s);
}

size_t sd_sse_count(const sd_sse *s)
{
    return s ? s->count : 0;
}

static sd_status append(sd_sse *s, const char *p, size_t n)
{
    if (s->len + n > s->max_line) {
        s->broken = 1;
        return SD_ERR_NOSPACE;
    }
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (!nb)
            return SD_ERR_NOMEM;
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = '\0';
    return SD_OK;
}

/* Dispatches the complete line held in s->buf (terminator already removed). */
static sd_status dispatch(sd_sse *s, sd_sse_data_cb cb, void *ud)
{
    size_t len = s->len;
    if (len > 0 && s->buf[len - 1] == '\r')
        s->buf[--len] = '\0';
    s->len = 0;
    if (len < 5 || memcmp(s->buf, "data:", 5) != 0)
        return SD_OK;
    const char *d = s->buf + 5;
    size_t dl = len - 5;
    if (dl > 0 && *d == ' ') {
        d++;
        dl--;
    }
    s->count++;
    if (cb && cb(ud, d, dl) != 0)
        return SD_ERR_STATE;
    return SD_OK;
}

sd_status sd_sse_feed(sd_sse *s, const char *buf, size_t n, sd_sse_data_cb cb, void *ud)
{
    if (!s || (!buf && n > 0))
        return SD_ERR_ARG;
    if (s->broken)
        return SD_ERR_NOSPACE;
    while (n > 0) {
        const char *nl = memchr(buf, '\n', n);
        size_t take = nl ? (size_t)(nl - buf) : n;
        sd_status st = append(s, buf, take);
        if (st != SD_OK)
            return st;
        if (!nl)
            break;
        st = dispatch(s, cb, ud);
        if (st != SD_OK)
            return st;
        buf += take + 1;
        n -= take + 1;
    }
    return SD_OK;
}

sd_status sd_sse_finish(sd_sse *s, sd_sse_data_cb cb, void *ud)
{
    if (!s)
        return SD_ERR_ARG;
    if (s->broken)
        return SD_ERR_NOSPACE;
    if (s->len == 0)
        return SD_OK;
    return dispatch(s, cb, ud);
}

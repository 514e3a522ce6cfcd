/* sse.c — SSE line splitter (see sse.h). */
#include "sse.h"

#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

struct sd_sse {
    sd_buf line; /* the partial line */
    size_t max_line;
    size_t count;
    int broken; /* a line overflowed: refuse further input */
};

sd_status sd_sse_new(size_t max_line, sd_sse **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_sse *s = calloc(1, sizeof *s);
    if (!s) return sd_seterr(err, errlen, SD_ERR_NOMEM, "SSE: out of memory");
    s->max_line = max_line ? max_line : (size_t)1 << 20;
    *out = s;
    return SD_OK;
}

void sd_sse_free(sd_sse *s)
{
    if (!s) return;
    sd_buf_free(&s->line);
    free(s);
}

size_t sd_sse_count(const sd_sse *s) { return s ? s->count : 0; }

static sd_status append(sd_sse *s, const char *p, size_t n)
{
    if (s->line.len + n > s->max_line) {
        s->broken = 1;
        return SD_ERR_NOSPACE;
    }
    return sd_buf_add(&s->line, p, n);
}

/* Dispatches the complete line held in s->line (terminator already removed). */
static sd_status dispatch(sd_sse *s, sd_sse_data_cb cb, void *ud)
{
    size_t len = s->line.len;
    if (len > 0 && s->line.p[len - 1] == '\r') s->line.p[--len] = '\0';
    s->line.len = 0;
    if (len < 5 || memcmp(s->line.p, "data:", 5) != 0) return SD_OK;
    const char *d = s->line.p + 5;
    size_t dl = len - 5;
    if (dl > 0 && *d == ' ') {
        d++;
        dl--;
    }
    s->count++;
    if (cb && cb(ud, d, dl) != 0) return SD_ERR_STATE;
    return SD_OK;
}

sd_status sd_sse_feed(sd_sse *s, const char *buf, size_t n, sd_sse_data_cb cb, void *ud)
{
    if (!s || (!buf && n > 0)) return SD_ERR_ARG;
    if (s->broken) return SD_ERR_NOSPACE;
    while (n > 0) {
        const char *nl = memchr(buf, '\n', n);
        size_t take = nl ? (size_t)(nl - buf) : n;
        sd_status st = append(s, buf, take);
        if (st != SD_OK) return st;
        if (!nl) break;
        st = dispatch(s, cb, ud);
        if (st != SD_OK) return st;
        buf += take + 1;
        n -= take + 1;
    }
    return SD_OK;
}

sd_status sd_sse_finish(sd_sse *s, sd_sse_data_cb cb, void *ud)
{
    if (!s) return SD_ERR_ARG;
    if (s->broken) return SD_ERR_NOSPACE;
    if (s->line.len == 0) return SD_OK;
    return dispatch(s, cb, ud);
}

/* strbuf.c — see strbuf.h. */
#include "strbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"

sd_status sd_buf_reserve(sd_buf *b, size_t n)
{
    if (b->failed) return SD_ERR_NOMEM;
    if (n > (size_t)-1 - b->len - 1 || sd_grow(&b->p, &b->cap, b->len + n + 1, 1) != SD_OK) {
        b->failed = true;
        return SD_ERR_NOMEM;
    }
    b->p[b->len] = '\0';
    return SD_OK;
}

sd_status sd_buf_add(sd_buf *b, const void *s, size_t n)
{
    if (n == 0) return b->failed ? SD_ERR_NOMEM : SD_OK;
    if (sd_buf_reserve(b, n) != SD_OK) return SD_ERR_NOMEM;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return SD_OK;
}

sd_status sd_buf_adds(sd_buf *b, const char *s) { return sd_buf_add(b, s, strlen(s)); }

void sd_buf_clear(sd_buf *b)
{
    b->len = 0;
    if (b->p) b->p[0] = '\0';
}

char *sd_buf_take(sd_buf *b)
{
    if (b->failed) {
        sd_buf_free(b);
        return NULL;
    }
    char *p = b->p ? b->p : calloc(1, 1);
    *b = (sd_buf){0};
    return p;
}

void sd_buf_free(sd_buf *b)
{
    free(b->p);
    *b = (sd_buf){0};
}

sd_status sd_buf_read(sd_buf *b, FILE *f, size_t max)
{
    char chunk[1 << 16];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (k > max || b->len > max - k) return SD_ERR_NOSPACE;
        if (sd_buf_add(b, chunk, k) != SD_OK) return SD_ERR_NOMEM;
    }
    return ferror(f) ? SD_ERR_IO : SD_OK;
}

sd_status sd_read_file(const char *path, size_t max, char **text, size_t *len, char *err, size_t errlen)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return sd_seterr(err, errlen, SD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    sd_buf b = {0};
    sd_status st = sd_buf_read(&b, f, max);
    fclose(f);
    if (st == SD_OK) {
        *len = b.len;
        if (!(*text = sd_buf_take(&b))) st = SD_ERR_NOMEM;
    }
    sd_buf_free(&b);
    if (st == SD_ERR_NOSPACE) return sd_seterr(err, errlen, st, "%s is larger than %zu bytes", path, max);
    if (st != SD_OK) return sd_seterr(err, errlen, st, "cannot read %s (%s)", path, sd_status_str(st));
    return SD_OK;
}

/* opt.c — see opt.h. */
#include "opt.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

sd_status sd_opt_i64(const char *s, const char *name, int64_t lo, int64_t hi, int64_t *out, char *err, size_t errlen)
{
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi)
        return sd_seterr(err, errlen, SD_ERR_ARG, "%s must be an integer in [%" PRId64 ", %" PRId64 "], got '%s'", name,
                         lo, hi, s ? s : "");
    *out = (int64_t)v;
    return SD_OK;
}

sd_status sd_opt_int(const char *s, const char *name, int lo, int hi, int *out, char *err, size_t errlen)
{
    int64_t v;
    sd_status st = sd_opt_i64(s, name, lo, hi, &v, err, errlen);
    if (st == SD_OK) *out = (int)v;
    return st;
}

sd_status sd_opt_u64(const char *s, const char *name, uint64_t *out, char *err, size_t errlen)
{
    char *end = NULL;
    errno = 0;
    /* strtoull accepts a sign ("-1" wraps): refuse it */
    const char *p = s;
    while (p && (*p == ' ' || *p == '\t')) p++;
    unsigned long long v = p && *p != '-' && *p != '+' ? strtoull(p, &end, 10) : 0;
    if (!p || *p == '-' || *p == '+' || errno || end == p || *end)
        return sd_seterr(err, errlen, SD_ERR_ARG, "%s must be an integer in [0, %" PRIu64 "], got '%s'", name,
                         UINT64_MAX, s ? s : "");
    *out = (uint64_t)v;
    return SD_OK;
}

sd_status sd_opt_double(const char *s, const char *name, double lo, double hi, double *out, char *err, size_t errlen)
{
    char *end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return sd_seterr(err, errlen, SD_ERR_ARG, "%s must be a number in [%g, %g], got '%s'", name, lo, hi,
                         s ? s : "");
    *out = v;
    return SD_OK;
}

sd_status sd_opt_float(const char *s, const char *name, double lo, double hi, float *out, char *err, size_t errlen)
{
    double v;
    sd_status st = sd_opt_double(s, name, lo, hi, &v, err, errlen);
    if (st == SD_OK) *out = (float)v;
    return st;
}

sd_status sd_opt_on_off(const char *s, const char *name, bool *out, char *err, size_t errlen)
{
    static const char *const on[] = {"on", "1", "true"}, *const off[] = {"off", "0", "false"};
    for (int i = 0; s && i < 3; i++) {
        if (!strcmp(s, on[i])) return (*out = true), SD_OK;
        if (!strcmp(s, off[i])) return (*out = false), SD_OK;
    }
    return sd_seterr(err, errlen, SD_ERR_ARG, "%s must be on or off, got '%s'", name, s ? s : "");
}

sd_status sd_opt_secret(const char *value, const char *path, const char *env, char **out, const char **from, char *err,
                        size_t errlen)
{
    *out = NULL;
    *from = NULL;
    if (value && path) return sd_seterr(err, errlen, SD_ERR_ARG, "give the key one way: a value or a file, not both");
    char *text = NULL;
    size_t len = 0;
    if (path) {
        sd_status st = sd_read_file(path, 4096, &text, &len, err, errlen);
        if (st != SD_OK) return st;
        *from = path;
    } else {
        const char *v = value ? value : env ? getenv(env) : NULL;
        if (!v) return SD_OK;
        *from = value ? "the command line" : env;
        text = strdup(v);
        if (!text) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
        len = strlen(text);
    }
    if (path) { /* the first line, blanks around it trimmed */
        len = strcspn(text, "\r\n");
        text[len] = '\0';
    }
    size_t a = 0;
    while (a < len && (text[a] == ' ' || text[a] == '\t')) a++;
    while (len > a && (text[len - 1] == ' ' || text[len - 1] == '\t')) len--;
    memmove(text, text + a, len - a);
    len -= a;
    text[len] = '\0';
    if (len == 0) {
        free(text);
        return sd_seterr(err, errlen, SD_ERR_ARG, "the API key from %s is empty (to run without a key, give none)",
                         *from);
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)text[i] <= ' ' || text[i] == 0x7f) {
            free(text);
            return sd_seterr(err, errlen, SD_ERR_ARG, "the API key from %s has a blank or control character", *from);
        }
    *out = text;
    return SD_OK;
}

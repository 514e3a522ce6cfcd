/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

const char *tu_fixture(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", env_or("SD_FIXTURES", "tests/fixtures"), rel);
    return buf;
}

const char *tu_fixture_bin(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", env_or("SD_FIXTURES_BIN", "build/fixtures"), rel);
    return buf;
}

const char *tu_model(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", env_or("SD_MODELS", "models"), rel);
    return buf;
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    if (buf && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[sz] = '\0';
    if (len) *len = (size_t)sz;
    return buf;
}

int tu_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

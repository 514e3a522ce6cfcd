/* jinja_render.c — TEST-ONLY: renders a chat template with router/jinja/jinja.h.
 *
 *   specd-test-jinja TEMPLATE_FILE VARS_JSON_FILE
 *
 * Prints the rendering to stdout (exit 0), or "error: MESSAGE" (exit 1);
 * tests/e2e/test_chat_templates.sh compares it with Python's jinja2. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "jinja.h"
#include "strbuf.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: specd-test-jinja TEMPLATE_FILE VARS_JSON_FILE\n");
        return 2;
    }
    char *src = NULL, err[512];
    size_t len = 0;
    if (sd_read_file(argv[1], 1 << 20, &src, &len, err, sizeof err) != SD_OK) {
        printf("error: %s\n", err);
        return 1;
    }
    json_error_t je;
    json_t *vars = json_load_file(argv[2], JSON_DECODE_ANY, &je);
    sd_jinja *t = NULL;
    char *out = NULL;
    int rc = 1;
    if (!vars) snprintf(err, sizeof err, "%s: %s", argv[2], je.text);
    else if (sd_jinja_parse(src, &t, err, sizeof err) == SD_OK &&
             sd_jinja_render(t, vars, &out, err, sizeof err) == SD_OK)
        rc = 0;
    if (rc == 0) fputs(out, stdout);
    else printf("error: %s\n", err);
    free(out);
    sd_jinja_free(t);
    json_decref(vars);
    free(src);
    return rc;
}

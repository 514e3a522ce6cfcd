/* tokenize.c — specd-tokenize: encode stdin to ids or decode ids to text with
 * a Hugging Face tokenizer.json.
 *
 *   specd-tokenize --tokenizer FILE [--add-special] < text
 *       prints the ids as one JSON array on one line;
 *   specd-tokenize --tokenizer FILE --decode [--skip-special] < ids.json
 *       reads a JSON array of ids and prints the text (no newline added).
 *
 * Errors go to stderr with exit status 1. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"
#include "tokenizer.h"

typedef struct {
    const char *path;
    bool add_special, decode, skip_special;
} opts;

static int usage(void)
{
    fprintf(stderr, "usage: specd-tokenize --tokenizer FILE [--add-special] < text\n"
                    "       specd-tokenize --tokenizer FILE --decode [--skip-special] < ids.json\n");
    return 1;
}

/* All of stdin as a NUL-terminated string (caller frees); NULL on failure. */
static char *read_stdin(size_t *len)
{
    sd_buf b = {0};
    if (sd_buf_read(&b, stdin, (size_t)1 << 31) != SD_OK) {
        sd_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return sd_buf_take(&b);
}

static int do_encode(const sd_tok *tok, const char *text, size_t len, bool add_special)
{
    char err[256];
    int32_t *ids = NULL;
    size_t n = 0;
    if (sd_tok_encode(tok, text, len, add_special, &ids, &n, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-tokenize: %s\n", err);
        return 1;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    char *s = arr ? json_dumps(arr, 0) : NULL;
    free(ids);
    json_decref(arr);
    if (!s) {
        fprintf(stderr, "specd-tokenize: out of memory\n");
        return 1;
    }
    printf("%s\n", s);
    free(s);
    return 0;
}

static int do_decode(const sd_tok *tok, const char *input, size_t len, bool skip_special)
{
    json_error_t je;
    json_t *arr = json_loadb(input, len, 0, &je);
    if (!json_is_array(arr)) {
        fprintf(stderr, "specd-tokenize: stdin is not a JSON array of ids (%s)\n", arr ? "not an array" : je.text);
        json_decref(arr);
        return 1;
    }
    size_t n = json_array_size(arr), i;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    json_t *v;
    int rc = ids ? 0 : 1;
    json_array_foreach(arr, i, v)
    {
        if (rc || !json_is_integer(v) || json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX) {
            fprintf(stderr, "specd-tokenize: element %zu is not an integer id\n", i);
            rc = 1;
            break;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(arr);
    char err[256], *text = NULL;
    size_t tl = 0;
    if (rc == 0 && sd_tok_decode(tok, ids, n, skip_special, &text, &tl, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-tokenize: %s\n", err);
        rc = 1;
    }
    if (rc == 0 && fwrite(text, 1, tl, stdout) != tl) rc = 1;
    free(text);
    free(ids);
    return rc;
}

static int parse_args(int argc, char **argv, opts *o)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) o->path = argv[++i];
        else if (!strcmp(argv[i], "--add-special")) o->add_special = true;
        else if (!strcmp(argv[i], "--decode")) o->decode = true;
        else if (!strcmp(argv[i], "--skip-special")) o->skip_special = true;
        else return -1;
    }
    return o->path ? 0 : -1;
}

int main(int argc, char **argv)
{
    opts o = {0};
    if (parse_args(argc, argv, &o) != 0) return usage();
    char err[512];
    sd_tok *tok = NULL;
    if (sd_tok_load(o.path, &tok, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-tokenize: %s\n", err);
        return 1;
    }
    size_t len = 0;
    char *input = read_stdin(&len);
    int rc = 1;
    if (!input) fprintf(stderr, "specd-tokenize: cannot read stdin\n");
    else rc = o.decode ? do_decode(tok, input, len, o.skip_special) : do_encode(tok, input, len, o.add_special);
    free(input);
    sd_tok_free(tok);
    return rc;
}

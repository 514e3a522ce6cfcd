/* bench_json_mask.c — specd-bench-json-mask: what JSON output (response_format
 * json_object and json_schema, json_mask.h) and output by a regular
 * expression (regex_mask.h) cost a sampled position:
 * building a tokenizer's token table once, then masking one row of the whole
 * vocabulary after a few outputs (the start, in a key, in a string value, in
 * a number, between array items), then the same under a schema (keys of
 * declared properties, a bounded string, an integer, an enum value, array
 * items of an enum), then under regular expressions (a date, choices, a
 * line of any characters — every token is tried —, an address).
 *
 *   specd-bench-json-mask TOKENIZER.json [--rounds R]
 *
 * Each output is encoded with the tokenizer; each round times R masks of it
 * (one thread). Prints the tokens a row keeps and microseconds a row (best
 * and median of 9 rounds). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "json_mask.h"
#include "opt.h"
#include "regex_mask.h"
#include "tokenizer.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The tokenizer's end-of-text token, if it has one of the usual names. */
static int find_eos(const sd_tok *tok)
{
    static const char *const names[] = {"<|endoftext|>", "<|im_end|>", "<|end_of_text|>", "</s>", "<|eot_id|>"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        int id = sd_tok_token_id(tok, names[i]);
        if (id >= 0) return id;
    }
    return -1;
}

/* Times the mask of one output: by the regular expression pattern when
 * given — cold (a fresh expression for every row: every PCRE2 step run) or
 * warm (one expression: the row remembered) —, else JSON (by schema, or
 * json_object's when NULL). */
static void bench_output(const sd_tok *tok, const sd_json_vocab *v, const sd_json_schema *schema, const char *pattern,
                         bool cold, int vocab, const char *text, int reps)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char err[256];
    if (sd_tok_encode(tok, text, strlen(text), false, &ids, &n, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench-json-mask: %s\n", err);
        return;
    }
    float *logits = malloc((size_t)vocab * sizeof *logits);
    double t[9];
    int kept = 0;
    sd_regex *rx = NULL;
    if (pattern) sd_regex_compile(pattern, &rx, err, sizeof err);
    for (int r = 0; r < 9; r++) {
        double spent = 0.0;
        for (int k = 0; k < reps; k++) {
            if (cold) {
                sd_regex_free(rx);
                sd_regex_compile(pattern, &rx, err, sizeof err);
            }
            memset(logits, 0, (size_t)vocab * sizeof *logits);
            double t0 = sd_now_s();
            if (pattern) sd_regex_mask(v, rx, ids, n, logits, vocab);
            else sd_json_mask(v, schema, ids, n, logits, vocab);
            spent += sd_now_s() - t0;
        }
        t[r] = spent / reps * 1e6;
    }
    sd_regex_free(rx);
    for (int i = 0; i < vocab; i++) kept += !isinf(logits[i]);
    qsort(t, 9, sizeof *t, cmp_double);
    printf("%-28s %3zu tokens  keeps %7d  us/row  best %8.1f  median %8.1f%s\n", text, n, kept, t[0], t[4],
           pattern ? (cold ? "  (cold)" : "  (remembered)") : "");
    free(logits);
    free(ids);
}

int main(int argc, char **argv)
{
    int reps = 20;
    char err[256];
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: specd-bench-json-mask TOKENIZER.json [--rounds R]\n");
        return 2;
    }
    if (argc >= 4 && !strcmp(argv[2], "--rounds") &&
        sd_opt_int(argv[3], "--rounds", 1, 1000000, &reps, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench-json-mask: %s\n", err);
        return 2;
    }
    sd_tok *tok = NULL;
    if (sd_tok_load(argv[1], &tok, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench-json-mask: %s\n", err);
        return 1;
    }
    int vocab = sd_tok_vocab_size(tok), eos = find_eos(tok);
    double t0 = sd_now_s();
    sd_json_vocab *v;
    if (sd_json_vocab_new(tok, vocab, &eos, eos >= 0, &v, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench-json-mask: %s\n", err);
        sd_tok_free(tok);
        return 1;
    }
    printf("%s: vocab %d, token table built in %.1f ms; %d masks a round, 9 rounds, one thread\n", argv[1], vocab,
           (sd_now_s() - t0) * 1e3, reps);
    static const char *const outputs[] = {"", "{", "{\"na", "{\"name\": \"va", "{\"n\": 12.5", "{\"a\": [1, 2, "};
    for (size_t i = 0; i < sizeof outputs / sizeof *outputs; i++)
        bench_output(tok, v, NULL, NULL, false, vocab, outputs[i], reps);
    static const char schema_text[] =
        "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 40}, \"age\": "
        "{\"type\": \"integer\"}, \"kind\": {\"enum\": [\"cat\", \"dog\", \"cow\"]}, \"nick\": {\"anyOf\": "
        "[{\"type\": \"string\"}, {\"type\": \"null\"}]}, \"tags\": {\"type\": \"array\", \"items\": {\"enum\": "
        "[\"red\", \"green\", \"blue\"]}}}, \"required\": [\"name\", \"kind\"]}";
    sd_json_schema *schema;
    sd_json_schema_parse(schema_text, strlen(schema_text), &schema, err, sizeof err);
    printf("under a schema: %s\n", schema ? schema_text : err);
    static const char *const under[] = {"",
                                        "{",
                                        "{\"na",
                                        "{\"name\": \"va",
                                        "{\"name\": \"x\", \"age\": 12",
                                        "{\"name\": \"x\", \"kind\": \"c",
                                        "{\"name\": \"x\", \"nick\": ",
                                        "{\"name\": \"x\", \"tags\": [\"red\", "};
    for (size_t i = 0; schema && i < sizeof under / sizeof *under; i++)
        bench_output(tok, v, schema, NULL, false, vocab, under[i], reps);
    sd_json_schema_free(schema);
    static const char *const regexes[][3] = {
        {"\\d{4}-\\d{2}-\\d{2}", "", "2024-1"},
        {"positive|negative|neutral|mixed|unknown", "", "neg"},
        {"[^\\n]{0,200}\\n", "", "hello wor"},
        {"[a-z0-9._]{1,32}@[a-z]{1,16}\\.(com|org|net)", "john.s", "john.smith@exam"},
        {"([a-z_]{1,12} = [0-9a-z_.()]{1,20}\\n){1,6}", "abc = x", "abc = np.zeros(3"},
    };
    for (size_t i = 0; i < sizeof regexes / sizeof *regexes; i++) {
        sd_regex *rx;
        sd_regex_compile(regexes[i][0], &rx, err, sizeof err);
        printf("by the regular expression %s%s\n", regexes[i][0], rx ? "" : err);
        for (int k = 1; rx && k < 3; k++)
            for (int cold = 1; cold >= 0; cold--)
                bench_output(tok, v, NULL, regexes[i][0], cold, vocab, regexes[i][k], reps);
        sd_regex_free(rx);
    }
    sd_json_vocab_free(v);
    sd_tok_free(tok);
    return 0;
}

/* bench_tokenizer.c — specd-bench-tokenizer: load time and encode / decode
 * throughput of one tokenizer.json.
 *
 *   specd-bench-tokenizer TOKENIZER_JSON [TEXT_KB (default 400)] [REPEATS (default 5)]
 *
 * The text is a built-in mix of code, English prose, punctuation and
 * non-Latin scripts repeated to TEXT_KB. It is encoded in chunks of about
 * 4 KB (a realistic prompt size; a Llama 2 style tokenizer without a
 * pre-tokeniser would otherwise BPE the whole text as one word). Figures are
 * the best of REPEATS runs, wall clock, one thread. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "tokenizer.h"

static const char SAMPLE[] =
    "def fibonacci(n: int) -> int:\n"
    "    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
    "    a, b = 0, 1\n"
    "    for _ in range(n):\n"
    "        a, b = b, a + b\n"
    "    return a\n\n"
    "#include <stdio.h>\n"
    "int main(int argc, char **argv) {\n"
    "\tfor (int i = 0; i < argc; ++i) printf(\"%d: %s\\n\", i, argv[i]);\n"
    "\treturn 0;\n}\n\n"
    "The quick brown fox jumps over the lazy dog. It's a sentence that uses every letter; "
    "we've all seen it, they'll see it again. Prices rose 3.5% to $1,234.56 on 2024-06-01.\n"
    "{\"id\": 42, \"tags\": [\"alpha\", \"beta\"], \"ok\": true, \"ratio\": -0.125e3}\n"
    "Ünïcödé façade naïve coöperate — “quoted” … ¿Qué tal? ¡Muy bien!\n"
    "中文测试：你好，世界！日本語のテキストです。한국어 문장입니다. Привет, мир! مرحبا بالعالم\n"
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ∀x∈ℝ: x² ≥ 0 → √(x²) = |x|\n"
    "SELECT name, COUNT(*) FROM users WHERE created_at > NOW() - INTERVAL '7 days' GROUP BY name;\n"
    "    indented line with trailing spaces   \n\n";

/* Builds about kb KB of text from SAMPLE, cut at sample boundaries. */
static char *make_text(size_t kb, size_t *len)
{
    size_t n = sizeof SAMPLE - 1, reps = kb * 1024 / n + 1;
    char *t = malloc(reps * n + 1);
    if (!t) return NULL;
    for (size_t i = 0; i < reps; i++) memcpy(t + i * n, SAMPLE, n);
    t[reps * n] = 0;
    *len = reps * n;
    return t;
}

/* Encodes text in SAMPLE-sized chunks; returns the ids (caller frees). */
static int32_t *encode_all(const sd_tok *tok, const char *text, size_t len, size_t *nids)
{
    size_t chunk = (sizeof SAMPLE - 1) * 2, cap = len, n = 0;
    int32_t *all = malloc(cap * sizeof *all);
    char err[256];
    for (size_t off = 0; all && off < len; off += chunk) {
        size_t k = len - off < chunk ? len - off : chunk, m;
        int32_t *ids;
        if (sd_tok_encode(tok, text + off, k, false, &ids, &m, err, sizeof err) != SD_OK) {
            fprintf(stderr, "encode failed: %s\n", err);
            free(all);
            return NULL;
        }
        if (n + m > cap) break; /* cannot happen: a token covers at least one byte */
        memcpy(all + n, ids, m * sizeof *ids);
        n += m;
        free(ids);
    }
    *nids = n;
    return all;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: specd-bench-tokenizer TOKENIZER_JSON [TEXT_KB] [REPEATS]\n");
        return 1;
    }
    size_t kb = argc > 2 ? (size_t)atoi(argv[2]) : 400, len = 0, nids = 0, dlen = 0;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (kb == 0 || reps <= 0) return 1;
    char err[512], *text = make_text(kb, &len), *dec = NULL;
    sd_tok *tok = NULL;
    double t0 = sd_now_ms(), best_load = 1e30, best_enc = 1e30, best_dec = 1e30;
    for (int r = 0; r < reps; r++) {
        sd_tok_free(tok);
        t0 = sd_now_ms();
        if (sd_tok_load(argv[1], &tok, err, sizeof err) != SD_OK) {
            fprintf(stderr, "specd-bench-tokenizer: %s\n", err);
            return 1;
        }
        double dt = sd_now_ms() - t0;
        best_load = dt < best_load ? dt : best_load;
    }
    int32_t *ids = NULL;
    for (int r = 0; r < reps && text; r++) {
        free(ids);
        t0 = sd_now_ms();
        if (!(ids = encode_all(tok, text, len, &nids))) return 1;
        double dt = sd_now_ms() - t0;
        best_enc = dt < best_enc ? dt : best_enc;
    }
    for (int r = 0; r < reps; r++) {
        free(dec);
        t0 = sd_now_ms();
        if (sd_tok_decode(tok, ids, nids, false, &dec, &dlen, err, sizeof err) != SD_OK) {
            fprintf(stderr, "decode failed: %s\n", err);
            return 1;
        }
        double dt = sd_now_ms() - t0;
        best_dec = dt < best_dec ? dt : best_dec;
    }
    double mb = (double)len / 1e6;
    printf("tokenizer      %s (vocab %d)\n", argv[1], sd_tok_vocab_size(tok));
    printf("load           %.1f ms\n", best_load);
    printf("text           %.1f KB, %zu tokens (%.2f bytes/token)\n", (double)len / 1024, nids,
           (double)len / (double)nids);
    printf("encode         %.2f MB/s, %.0f tokens/s\n", mb / (best_enc / 1e3), (double)nids / (best_enc / 1e3));
    printf("decode         %.2f MB/s, %.0f tokens/s\n", (double)dlen / 1e6 / (best_dec / 1e3),
           (double)nids / (best_dec / 1e3));
    /* per call: a normaliser like Llama 2's Prepend("▁") applies to each encode call */
    size_t ns = 0, sl = 0;
    char *sdec = NULL;
    int32_t *sids = encode_all(tok, SAMPLE, sizeof SAMPLE - 1, &ns);
    bool exact = sids && sd_tok_decode(tok, sids, ns, false, &sdec, &sl, err, sizeof err) == SD_OK &&
                 sl == sizeof SAMPLE - 1 && memcmp(sdec, SAMPLE, sl) == 0;
    printf("round trip     %s\n", exact ? "exact" : "DIFFERS");
    free(sids);
    free(sdec);
    free(dec);
    free(ids);
    free(text);
    sd_tok_free(tok);
    return 0;
}

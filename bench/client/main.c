/* main.c — specd-bench: load-test client for OpenAI-compatible servers
 * (specd, vLLM, llama.cpp server). Parses the command line into an
 * sd_bench_config, loads prompts, runs the load (runner.c), then reports
 * (report.c, plot.c). See README.md in this folder.
 *
 * Exit status: 0 at least one measured request succeeded; 1 none did (all
 * failed or cancelled) or the run could not proceed; 2 usage error (bad
 * option, no bound, unreadable dataset); 3 the --json file could not be
 * written. A failing --plot is only a warning. */
#include <curl/curl.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset.h"
#include "http.h"
#include "opt.h"
#include "plot.h"
#include "report.h"
#include "runner.h"

enum { EXIT_NONE_OK = 1, EXIT_USAGE = 2, EXIT_JSON = 3 };

typedef struct {
    sd_bench_config cfg;
    const char *dataset, *json_path, *plot_path;
    bool strict_dataset;
    long random_in, random_out; /* --random-input-len / --random-output-len (0: no random dataset) */
    double random_range;        /* --random-range-ratio */
    char *model_owned;          /* model found through /v1/models */
} options;

static void usage(FILE *f)
{
    fputs("usage: specd-bench --url URL (--num-prompts N | --duration S) [options]\n"
          "  --url URL             server base URL (default http://127.0.0.1:8000)\n"
          "  --api-key K           send Authorization: Bearer K\n"
          "  --model M             model name (default: first id of GET /v1/models)\n"
          "  --endpoint E          completions (default) or chat\n"
          "  --concurrency N       requests in flight (default 1; with a rate: a cap)\n"
          "  --request-rate R      Poisson arrivals, R requests/s\n"
          "  --num-prompts N       measured requests (a bound)\n"
          "  --duration S          stop issuing after S seconds (a bound)\n"
          "  --grace S             cancel in-flight requests at duration + S (default 5)\n"
          "  --warmup N            requests sent first, not measured (default 0)\n"
          "  --max-tokens N        max_tokens per request (default 128; 0: not sent)\n"
          "  --temperature T       sampling temperature (default: not sent)\n"
          "  --seed S              sent as \"seed\"; also seeds arrivals/prompt order\n"
          "  --stream|--no-stream  streaming responses (default on)\n"
          "  --ignore-eos          send \"ignore_eos\": true (vLLM/specd)\n"
          "  --dataset FILE        JSONL with \"prompt\" or \"messages\" per line\n"
          "  --strict-dataset      fail on the first bad dataset line (default: skip)\n"
          "  --in-order            send the prompts in the dataset's order (default: shuffled\n"
          "                        by --seed); for multi-turn datasets\n"
          "  --extra-body JSON     object merged into every request body\n"
          "  --timeout S           per-request timeout (default 300)\n"
          "  --json FILE           write config, per-request records and summary\n"
          "  --plot FILE.png       latency CDFs and tokens/s over time (gnuplot)\n"
          "  --random-input-len N  random prompts (as vLLM's random dataset; completions only):\n"
          "                        N token ids each, and with --random-output-len M a\n"
          "                        max_tokens of M each, both times (1 +- --random-range-ratio R)\n"
          "  --goodput SLO[,SLO]   SLO = ttft:MS, tpot:MS or e2el:MS (as vLLM): report the\n"
          "                        requests meeting all of them per second (request goodput)\n"
          "  --quiet               no progress output\n",
          f);
}

static const struct option long_opts[] = {
    {"url", 1, 0, 'u'},
    {"api-key", 1, 0, 'k'},
    {"model", 1, 0, 'm'},
    {"endpoint", 1, 0, 'e'},
    {"concurrency", 1, 0, 'c'},
    {"request-rate", 1, 0, 'r'},
    {"num-prompts", 1, 0, 'n'},
    {"max-tokens", 1, 0, 't'},
    {"temperature", 1, 0, 'T'},
    {"seed", 1, 0, 's'},
    {"stream", 0, 0, 'S'},
    {"no-stream", 0, 0, 'N'},
    {"ignore-eos", 0, 0, 'i'},
    {"dataset", 1, 0, 'd'},
    {"strict-dataset", 0, 0, 'X'},
    {"warmup", 1, 0, 'w'},
    {"duration", 1, 0, 'D'},
    {"grace", 1, 0, 'g'},
    {"timeout", 1, 0, 'o'},
    {"json", 1, 0, 'j'},
    {"plot", 1, 0, 'p'},
    {"extra-body", 1, 0, 'x'},
    {"quiet", 0, 0, 'q'},
    {"help", 0, 0, 'h'},
    {"goodput", 1, 0, 'G'},
    {"random-input-len", 1, 0, 'I'},
    {"random-output-len", 1, 0, 'O'},
    {"random-range-ratio", 1, 0, 'R'},
    {"in-order", 0, 0, 'Q'},
    {0, 0, 0, 0},
};

static int parse_extra_body(options *o, const char *s)
{
    json_error_t je;
    json_t *v = json_loads(s, 0, &je);
    if (!json_is_object(v)) {
        fprintf(stderr, "specd-bench: --extra-body: need a JSON object (%s)\n", v ? "got another JSON type" : je.text);
        json_decref(v);
        return -1;
    }
    json_decref(o->cfg.extra_body);
    o->cfg.extra_body = v;
    return 0;
}

/* A long option value in [lo, LONG_MAX]. */
static sd_status opt_long(const char *a, const char *name, long lo, long *out, char *err, size_t errlen)
{
    int64_t v;
    sd_status st = sd_opt_i64(a, name, lo, LONG_MAX, &v, err, errlen);
    if (st == SD_OK) *out = (long)v;
    return st;
}

/* --goodput KEY:MS[,KEY:MS...] into cfg->slo_ms. SD_ERR_ARG with a message. */
static sd_status parse_goodput(sd_bench_config *cfg, const char *a, char *err, size_t errlen)
{
    static const char *const keys[] = {"ttft", "tpot", "e2el"};
    const char *p = a;
    while (*p) {
        size_t n = strcspn(p, ":");
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (strlen(keys[i]) == n && !strncmp(p, keys[i], n)) k = i;
        char *end = NULL;
        double ms = p[n] == ':' ? strtod(p + n + 1, &end) : 0;
        if (k < 0 || !end || end == p + n + 1 || (*end && *end != ',') || !(ms > 0) || !isfinite(ms))
            return sd_seterr(err, errlen, SD_ERR_ARG,
                             "--goodput: '%s' is not KEY:MS[,KEY:MS...] with KEY ttft, "
                             "tpot or e2el and MS > 0",
                             a);
        cfg->slo_ms[k] = ms;
        p = *end ? end + 1 : end;
    }
    return SD_OK;
}

/* Applies one option; returns 0, -1 on a bad value (message printed), 1 for --help. */
static int apply_opt(options *o, int c, const char *a)
{
    sd_bench_config *cfg = &o->cfg;
    char err[256];
    sd_status st = SD_OK;
    long l;
    double d;
    switch (c) {
    case 'u': cfg->url = a; break;
    case 'k': cfg->api_key = a; break;
    case 'm': cfg->model = a; break;
    case 'e':
        if (strcmp(a, "completions") && strcmp(a, "chat"))
            st = sd_seterr(err, sizeof err, SD_ERR_ARG, "--endpoint: 'completions' or 'chat', not '%s'", a);
        cfg->endpoint = strcmp(a, "chat") == 0 ? SD_EP_CHAT : SD_EP_COMPLETIONS;
        break;
    case 'c':
        if ((st = opt_long(a, "--concurrency", 1, &l, err, sizeof err)) == SD_OK)
            cfg->concurrency = (int)(l > 4096 ? 4096 : l);
        break;
    case 'r': st = sd_opt_double(a, "--request-rate", 0, HUGE_VAL, &cfg->request_rate, err, sizeof err); break;
    case 'n': st = opt_long(a, "--num-prompts", 1, &cfg->num_prompts, err, sizeof err); break;
    case 't': st = opt_long(a, "--max-tokens", 0, &cfg->max_tokens, err, sizeof err); break;
    case 'T':
        cfg->has_temperature = true;
        st = sd_opt_double(a, "--temperature", 0, HUGE_VAL, &cfg->temperature, err, sizeof err);
        break;
    case 's':
        cfg->has_seed = true;
        st = sd_opt_u64(a, "--seed", &cfg->seed, err, sizeof err);
        break;
    case 'S': cfg->stream = true; break;
    case 'N': cfg->stream = false; break;
    case 'i': cfg->ignore_eos = true; break;
    case 'Q': cfg->in_order = true; break;
    case 'd': o->dataset = a; break;
    case 'X': o->strict_dataset = true; break;
    case 'w': st = opt_long(a, "--warmup", 0, &cfg->warmup, err, sizeof err); break;
    case 'D': st = sd_opt_double(a, "--duration", 0, HUGE_VAL, &cfg->duration, err, sizeof err); break;
    case 'g': st = sd_opt_double(a, "--grace", 0, HUGE_VAL, &cfg->grace, err, sizeof err); break;
    case 'o':
        if ((st = sd_opt_double(a, "--timeout", 0.001, HUGE_VAL, &d, err, sizeof err)) == SD_OK) cfg->timeout = d;
        break;
    case 'j': o->json_path = a; break;
    case 'p': o->plot_path = a; break;
    case 'x': return parse_extra_body(o, a);
    case 'q': cfg->quiet = true; break;
    case 'G': st = parse_goodput(cfg, a, err, sizeof err); break;
    case 'I': st = opt_long(a, "--random-input-len", 1, &o->random_in, err, sizeof err); break;
    case 'O': st = opt_long(a, "--random-output-len", 1, &o->random_out, err, sizeof err); break;
    case 'R': st = sd_opt_double(a, "--random-range-ratio", 0, 0.999, &o->random_range, err, sizeof err); break;
    case 'h': return 1;
    default: return -1;
    }
    if (st != SD_OK) {
        fprintf(stderr, "specd-bench: %s\n", err);
        return -1;
    }
    return 0;
}

/* Returns 0 to run, 1 for --help, -1 on a usage error (message printed). */
static int parse_args(options *o, int argc, char **argv)
{
    sd_bench_config *cfg = &o->cfg;
    cfg->url = "http://127.0.0.1:8000";
    cfg->max_tokens = 128;
    cfg->stream = true;
    cfg->grace = 5.0;
    cfg->timeout = 300.0;
    int c;
    while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        int rc = apply_opt(o, c, optarg);
        if (rc != 0) return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "specd-bench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (cfg->num_prompts <= 0 && cfg->duration <= 0) {
        fprintf(stderr, "specd-bench: refusing to run without a bound: give --num-prompts N "
                        "and/or --duration SECONDS\n");
        return -1;
    }
    if (o->random_in > 0 && (o->dataset || cfg->endpoint == SD_EP_CHAT)) {
        fprintf(stderr, "specd-bench: --random-input-len makes its own token-id prompts: not with --dataset, "
                        "and only for --endpoint completions\n");
        return -1;
    }
    if ((o->random_out > 0 || o->random_range > 0) && o->random_in <= 0) {
        fprintf(stderr, "specd-bench: --random-output-len / --random-range-ratio need --random-input-len\n");
        return -1;
    }
    if (strncmp(cfg->url, "http://", 7) && strncmp(cfg->url, "https://", 8)) {
        fprintf(stderr, "specd-bench: --url must start with http:// or https://\n");
        return -1;
    }
    if (cfg->concurrency == 0 && cfg->request_rate <= 0) cfg->concurrency = 1;
    cfg->progress_tty = isatty(STDERR_FILENO);
    return 0;
}

static void on_sigint(int sig)
{
    (void)sig;
    sd_runner_interrupt();
}

static void resolve_model(options *o)
{
    sd_bench_config *cfg = &o->cfg;
    if (cfg->model) return;
    char err[512] = "";
    double tmo = cfg->timeout < 10.0 ? cfg->timeout : 10.0;
    o->model_owned = sd_http_first_model(cfg->url, cfg->api_key, tmo, err, sizeof err);
    cfg->model = o->model_owned;
    if (!cfg->model)
        fprintf(stderr,
                "specd-bench: warning: could not list models (%s); requests are sent "
                "without \"model\"\n",
                err);
    else if (!cfg->quiet) fprintf(stderr, "specd-bench: model %s (from /v1/models)\n", cfg->model);
}

/* Returns the specd_spec_* lines of GET /metrics (malloc'd) or NULL. */
static char *fetch_spec_metrics(const sd_bench_config *cfg)
{
    char url[2048], err[256], *body = NULL;
    long status = 0;
    if (sd_http_url(url, sizeof url, cfg->url, "/metrics") != SD_OK) return NULL;
    if (sd_http_get(url, cfg->api_key, 5.0, &body, &status, err, sizeof err) != SD_OK) return NULL;
    char *lines = status == 200 ? sd_report_spec_metrics(body) : NULL;
    free(body);
    return lines;
}

/* Reports a finished run; returns the exit status. */
static int report(const options *o, const sd_bench_result *res)
{
    const sd_bench_config *cfg = &o->cfg;
    sd_report_summary s;
    char err[512] = "";
    if (sd_report_summarize(res, cfg->slo_ms, &s) != SD_OK) {
        fprintf(stderr, "specd-bench: out of memory summarizing\n");
        return EXIT_NONE_OK;
    }
    char *spec = fetch_spec_metrics(cfg);
    sd_report_print(stdout, cfg, res, &s, spec);
    fflush(stdout);
    int rc = s.completed > 0 ? 0 : EXIT_NONE_OK;
    if (o->json_path && sd_report_write_json(o->json_path, cfg, res, &s, spec, err, sizeof err)) {
        fprintf(stderr, "specd-bench: --json: %s\n", err);
        rc = EXIT_JSON;
    }
    if (o->plot_path) {
        if (sd_plot_write(o->plot_path, res, err, sizeof err) != SD_OK)
            fprintf(stderr, "specd-bench: warning: --plot: %s\n", err);
        else if (!cfg->quiet) fprintf(stderr, "specd-bench: plot written to %s\n", o->plot_path);
    }
    free(spec);
    return rc;
}

static sd_dataset *load_dataset(const options *o)
{
    sd_dataset *ds = NULL;
    char err[512] = "";
    if (o->random_in > 0) {
        size_t n = o->cfg.num_prompts > 0 ? (size_t)o->cfg.num_prompts : 1000;
        long out = o->random_out > 0 ? o->random_out : (o->cfg.max_tokens > 0 ? o->cfg.max_tokens : 128);
        if (sd_dataset_random(n, o->random_in, out, o->random_range, o->cfg.seed, &ds) != SD_OK)
            fprintf(stderr, "specd-bench: out of memory\n");
        return ds;
    }
    if (!o->dataset) {
        if (sd_dataset_builtin(&ds) != SD_OK) fprintf(stderr, "specd-bench: out of memory\n");
        return ds;
    }
    if (sd_dataset_load(o->dataset, o->strict_dataset, stderr, &ds, err, sizeof err) != SD_OK)
        fprintf(stderr, "specd-bench: --dataset: %s\n", err);
    return ds;
}

int main(int argc, char **argv)
{
    options o = {0};
    int prc = parse_args(&o, argc, argv);
    if (prc != 0) {
        if (prc > 0) usage(stdout);
        else fprintf(stderr, "specd-bench: see --help for the options\n");
        json_decref(o.cfg.extra_body);
        return prc > 0 ? 0 : EXIT_USAGE;
    }
    sd_dataset *ds = load_dataset(&o);
    if (!ds) {
        json_decref(o.cfg.extra_body);
        return EXIT_USAGE;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "specd-bench: curl_global_init failed\n");
        sd_dataset_free(ds);
        return EXIT_NONE_OK;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_sigint);
    resolve_model(&o);
    sd_bench_result res = {0};
    char err[512] = "";
    int rc;
    if (sd_runner_run(&o.cfg, ds, &res, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench: %s\n", err);
        rc = EXIT_NONE_OK;
    } else {
        rc = report(&o, &res);
    }
    sd_bench_result_clear(&res);
    sd_dataset_free(ds);
    free(o.model_owned);
    json_decref(o.cfg.extra_body);
    curl_global_cleanup();
    return rc;
}

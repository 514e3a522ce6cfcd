/* main.c — specd-router: command-line options → sd_server_opts → run.
 *
 *   specd-router --verifier tcp://127.0.0.1:5555 [--verifier ENDPOINT ...]
 *                [--verifier-dns HOST:PORT ...] [--dns-interval-s 10] [--dns-server IP[:PORT]]
 *                --tokenizer FILE [--tokenizer-config FILE] --model-name NAME[,ALIAS...]
 *                (or --served-model-name, as vLLM; repeatable: the first name is the model id)
 *                [--host 127.0.0.1] [--port 8000] [--api-key KEY | --api-key-file FILE]
 *                [--metrics-auth] [--max-headers 65536] [--header-timeout 30] [--drain-timeout 30]
 *                [--resume-wait 30] [--max-connections 1024]
 *                [--curve-keys DIR]
 *                [--max-queue 256] [--max-body 1048576] [--request-timeout 600]
 *                [--lane-capacity 64] [--health-interval-ms 1000]
 *                [--health-misses 3] [--chat-template FAMILY|FILE]
 *                [--tool-call-parser hermes|llama3_json|mistral]
 *                [--default-max-tokens 256] [--log-level info] */
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "opt.h"
#include "server.h"
#include "tool_calls.h"

#define MAX_LANES 64

static void usage(FILE *f)
{
    fprintf(f,
            "usage: specd-router (--verifier ENDPOINT | --verifier-dns HOST:PORT) ... --tokenizer FILE\n"
            "                    [--dns-interval-s S] [--dns-server IP[:PORT]]\n"
            "                    --model-name NAME[,ALIAS...] [--tokenizer-config FILE] [--host H] [--port P]\n"
            "                    [--api-key KEY | --api-key-file FILE] [--metrics-auth]\n"
            "                    [--max-queue N] [--max-body BYTES] [--max-headers BYTES] [--header-timeout S]\n"
            "                    [--drain-timeout S] [--resume-wait S] [--max-connections N]\n"
            "                    [--curve-keys DIR]\n"
            "                    [--request-timeout S] [--lane-capacity N] [--health-interval-ms MS]\n"
            "                    [--health-misses N] [--chat-template FAMILY|FILE]\n"
            "                    [--tool-call-parser hermes|llama3_json|mistral]\n"
            "                    [--default-max-tokens N] [--log-level debug|info|warn|error]\n");
}

/* A non-negative integer option (at most max); exits 2 with a message on junk. */
static long long num_arg(const char *name, const char *v, long long max)
{
    int64_t x;
    char err[256];
    if (sd_opt_i64(v, name, 0, max, &x, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-router: %s\n", err);
        exit(2);
    }
    return x;
}

#define MAX_NAMES 16

/* Appends the comma-separated names in v to names[*n] (at most MAX_NAMES in
 * all; empty names and overflow: a message, -1). */
static int add_names(const char *v, const char **names, size_t *n)
{
    char *copy = strdup(v), *save = NULL;
    if (!copy) return -1;
    size_t before = *n;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_NAMES) {
            fprintf(stderr, "specd-router: at most %d served model names\n", MAX_NAMES);
            return -1;
        }
        names[(*n)++] = t; /* copy stays allocated for the process's life */
    }
    if (*n == before) {
        fprintf(stderr, "specd-router: --served-model-name / --model-name needs a name\n");
        free(copy);
        return -1;
    }
    return 0;
}

/* What the command line says beyond sd_server_opts. */
typedef struct cli {
    const char *level, *key_arg, *key_file;
    const char *lanes[MAX_LANES], *names[MAX_NAMES], *dns[MAX_LANES];
    size_t n_names;
} cli;

/* Parses the command line into *o and *c. Returns -1 to go on, else the
 * exit status (0 after --help, 2 on a usage error, reported). */
static int parse_args(int argc, char **argv, sd_server_opts *o, cli *c)
{
    static const struct option longopts[] = {
        {"host", 1, 0, 'h'}, {"port", 1, 0, 'p'}, {"verifier", 1, 0, 'v'}, {"tokenizer", 1, 0, 't'},
        {"tokenizer-config", 1, 0, 'c'}, {"model-name", 1, 0, 'm'}, {"api-key", 1, 0, 'k'},
        {"max-queue", 1, 0, 'q'}, {"max-body", 1, 0, 'b'}, {"request-timeout", 1, 0, 'T'},
        {"lane-capacity", 1, 0, 'C'}, {"health-interval-ms", 1, 0, 'H'}, {"health-misses", 1, 0, 'M'},
        {"chat-template", 1, 0, 'x'}, {"default-max-tokens", 1, 0, 'D'}, {"log-level", 1, 0, 'l'},
        {"api-key-file", 1, 0, 'K'}, {"metrics-auth", 0, 0, 'A'}, {"max-headers", 1, 0, 'R'},
        {"header-timeout", 1, 0, 'W'}, {"drain-timeout", 1, 0, 'G'}, {"resume-wait", 1, 0, 'P'},
        {"max-connections", 1, 0, 'N'}, {"served-model-name", 1, 0, 'S'},
        {"curve-keys", 1, 0, 'Y'}, {"help", 0, 0, 'U'}, {"verifier-dns", 1, 0, 'n'},
        {"dns-interval-s", 1, 0, 'i'}, {"dns-server", 1, 0, 'd'}, {"tool-call-parser", 1, 0, 'E'}, {0, 0, 0, 0}};
    o->port = 8000;
    o->max_queue = 256;
    o->request_timeout_s = 600;
    o->drain_timeout_s = 30;
    o->resume_wait_s = 30;
    o->verifiers = c->lanes;
    o->verifier_dns = c->dns;
    c->level = "info";
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h': o->host = optarg; break;
        case 'p': o->port = (int)num_arg("--port", optarg, 65535); break;
        case 'v':
            if (o->n_verifiers == MAX_LANES) {
                fprintf(stderr, "specd-router: at most %d --verifier lanes\n", MAX_LANES);
                return 2;
            }
            c->lanes[o->n_verifiers++] = optarg;
            break;
        case 'n':
            if (o->n_verifier_dns == MAX_LANES) {
                fprintf(stderr, "specd-router: at most %d --verifier-dns names\n", MAX_LANES);
                return 2;
            }
            c->dns[o->n_verifier_dns++] = optarg;
            break;
        case 'i': {
            char err[256];
            if (sd_opt_double(optarg, "--dns-interval-s", 0.1, 86400, &o->dns_interval_s, err, sizeof err) != SD_OK) {
                fprintf(stderr, "specd-router: %s\n", err);
                return 2;
            }
            break;
        }
        case 'd': o->dns_server = optarg; break;
        case 't': o->tokenizer = optarg; break;
        case 'c': o->tokenizer_config = optarg; break;
        case 'm':
        case 'S':
            if (add_names(optarg, c->names, &c->n_names) != 0) return 2;
            break;
        case 'k': c->key_arg = optarg; break;
        case 'K': c->key_file = optarg; break;
        case 'A': o->metrics_auth = true; break;
        case 'R': o->max_headers = (size_t)num_arg("--max-headers", optarg, (long long)1 << 30); break;
        case 'W': o->header_timeout_s = (int)num_arg("--header-timeout", optarg, 86400); break;
        case 'Y': o->curve_keys = optarg; break;
        case 'G': o->drain_timeout_s = (int)num_arg("--drain-timeout", optarg, 86400); break;
        case 'N': o->max_connections = (int)num_arg("--max-connections", optarg, 1 << 20); break;
        case 'P': o->resume_wait_s = (int)num_arg("--resume-wait", optarg, 86400); break;
        case 'q': o->max_queue = (int)num_arg("--max-queue", optarg, INT_MAX); break;
        case 'b': o->max_body = (size_t)num_arg("--max-body", optarg, (long long)1 << 40); break;
        case 'T': o->request_timeout_s = (double)num_arg("--request-timeout", optarg, 1 << 30); break;
        case 'C': o->lane_capacity = (int)num_arg("--lane-capacity", optarg, INT_MAX); break;
        case 'H': o->health_interval_ms = (int)num_arg("--health-interval-ms", optarg, INT_MAX); break;
        case 'M': o->max_missed = (int)num_arg("--health-misses", optarg, INT_MAX); break;
        case 'x': o->chat_template = optarg; break;
        case 'E':
            if ((o->tool_parser = sd_tool_fmt_parse(optarg)) < 0) {
                fprintf(stderr, "specd-router: --tool-call-parser must be hermes, llama3_json or mistral\n");
                return 2;
            }
            break;
        case 'D': o->default_max_tokens = (int)num_arg("--default-max-tokens", optarg, INT_MAX); break;
        case 'l': c->level = optarg; break;
        case 'U': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (c->n_names) {
        o->model_name = c->names[0];
        o->aliases = c->names + 1;
        o->n_aliases = c->n_names - 1;
    }
    if (optind < argc || (!o->n_verifiers && !o->n_verifier_dns) || !o->tokenizer || !o->model_name) {
        usage(stderr);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv)
{
    sd_server_opts o = {0};
    static cli c;
    int rc = parse_args(argc, argv, &o, &c);
    if (rc >= 0) return rc;
    const char *level = c.level, *key_arg = c.key_arg, *key_file = c.key_file;
    sd_log_init("router", sd_log_parse_level(level));
    char err[512], *key = NULL;
    const char *from;
    if (sd_opt_secret(key_arg, key_file, "SPECD_API_KEY", &key, &from, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-router: %s\n", err);
        return 2;
    }
    o.api_key = key;
    if (key_arg)
        SD_WARN("--api-key: the key is visible in the process list; --api-key-file or SPECD_API_KEY keep it out");
    if (key) SD_INFO("API key from %s: /v1/*%s need it", from, o.metrics_auth ? " and /metrics" : "");
    else if (o.metrics_auth) SD_WARN("--metrics-auth without an API key: /metrics stays open");
    sd_server *s = NULL;
    if (sd_server_new(&o, &s, err, sizeof err) != SD_OK) {
        SD_ERROR("%s", err);
        return 1;
    }
    rc = sd_server_run(s);
    sd_server_free(s);
    free(key);
    return rc;
}

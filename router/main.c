/* main.c — specd-router: command-line options (the table g_flags, printed
 * by --help and in docs/FLAGS.md) → sd_server_opts → run. */
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"
#include "log.h"
#include "opt.h"
#include "server.h"
#include "tool_calls.h"

#define MAX_LANES 64

/* Every flag of specd-router, for getopt_long and --help (flags.h). */
static const sd_flag g_flags[] = {
    {"Lanes", "verifier", 'v', "ENDPOINT", NULL,
     "a lane: the verifier's ROUTER endpoint (tcp:// or ipc://); repeat for several lanes"},
    {"Lanes", "verifier-dns", 'n', "HOST:PORT", NULL,
     "lanes from a DNS name (a Kubernetes headless Service): every address HOST resolves to is a lane "
     "tcp://ADDRESS:PORT, resolved again every --dns-interval-s; repeatable"},
    {"Lanes", "dns-interval-s", 'i', "S", "10", "seconds between two resolutions of --verifier-dns names"},
    {"Lanes", "dns-server", 'd', "IP[:PORT]", "/etc/resolv.conf's", "the nameserver --verifier-dns asks"},
    {"Lanes", "lane-capacity", 'C', "N", "64", "requests in flight per lane; more wait in the router's queue"},
    {"Lanes", "health-interval-ms", 'H', "MS", "1000", "milliseconds between two health probes of a lane"},
    {"Lanes", "health-misses", 'M', "N", "3", "a lane that misses N health replies in a row is down"},
    {"Lanes", "resume-wait", 'P', "S", "30",
     "seconds the requests of a lane that died wait for a lane to resume on when none is up (0: they fail at "
     "once)"},
    {"Model", "tokenizer", 't', "FILE", NULL, "the target's tokenizer.json (required)"},
    {"Model", "tokenizer-config", 'c', "FILE", NULL,
     "the target's tokenizer_config.json: its chat_template renders chat requests"},
    {"Model", "model-name", 'm', "NAME[,ALIAS...]", NULL,
     "the served model id (the first name, required) and aliases requests may name; repeatable"},
    {"Model", "served-model-name", 'S', "NAME[,ALIAS...]", NULL, "the same as --model-name (vLLM's name)"},
    {"Model", "chat-template", 'x', "FAMILY|FILE", "the checkpoint's",
     "a Jinja file rendered instead of the checkpoint's chat template, or a built-in format: chatml, llama3, "
     "llama2, plain"},
    {"Model", "tool-call-parser", 'E', "hermes|llama3_json|mistral", "hermes",
     "how the answers to requests with tools are read for calls"},
    {"Model", "default-max-tokens", 'D', "N", "256", "max_tokens of a request that gives none"},
    {"Scheduling", "max-queue", 'q', "N", "256", "requests waiting for a lane slot; beyond it a 429"},
    {"Scheduling", "request-timeout", 'T', "S", "600",
     "seconds a request may take (0: no limit): a queued one gets a 503, a running one a 504 and is cancelled"},
    {"Network", "host", 'h', "H", "127.0.0.1", "the address the HTTP API listens on"},
    {"Network", "port", 'p', "P", "8000", "the HTTP API's port"},
    {"Network", "max-body", 'b', "BYTES", "1048576", "the largest request body; beyond it a 413"},
    {"Network", "max-headers", 'R', "BYTES", "65536",
     "bytes of request line and headers; beyond them the connection is refused before more is read"},
    {"Network", "header-timeout", 'W', "S", "30",
     "seconds a request may take to arrive, headers and body; past it a 408"},
    {"Network", "max-connections", 'N', "N", "1024",
     "open HTTP connections; at the cap the oldest idle one is closed for each new one (new ones wait in the "
     "kernel's backlog only while every one has a request in flight)"},
    {"Network", "max-connections-per-client", 'O', "N", "256 (at most --max-connections)",
     "open HTTP connections of one client address; beyond it its newest idle ones are closed"},
    {"Network", "first-byte-timeout", 'F', "S", "10", "seconds a connection may stay open without sending a byte"},
    {"Network", "keepalive-timeout", 'e', "S", "5", "seconds a keep-alive connection may idle after an answer"},
    {"Network", "body-timeout", 'B', "S", "10",
     "seconds a request may go without a byte arriving (headers or body) before it gets a 408"},
    {"Network", "drain-timeout", 'G', "S", "30",
     "on SIGTERM / SIGINT, seconds the requests in flight may take to finish (new ones get a 503)"},
    {"Security", "api-key", 'k', "KEY", NULL,
     "require Authorization: Bearer KEY on /v1/* (visible in the process list: prefer --api-key-file or "
     "SPECD_API_KEY)"},
    {"Security", "api-key-file", 'K', "FILE", "SPECD_API_KEY from the environment", "the API key: FILE's first line"},
    {"Security", "metrics-auth", 'A', NULL, NULL, "/metrics needs the API key too"},
    {"Security", "no-playground", 'g', NULL, NULL,
     "do not serve the browser playground at / and /playground (the API alone)"},
    {"Security", "curve-keys", 'Y', "DIR", NULL,
     "CURVE authentication and encryption of the lane sockets, with the keys of specd keygen DIR"},
    {"Other", "log-level", 'l', "debug|info|warn|error", "info", "the least severe messages logged"},
    {"Other", "help", 'U', NULL, NULL, "this help"},
};
#define N_FLAGS (sizeof g_flags / sizeof g_flags[0])

static const char g_usage[] =
    "usage: specd-router (--verifier ENDPOINT | --verifier-dns HOST:PORT)... --tokenizer FILE\n"
    "                    --model-name NAME [options]\n";

static void usage(FILE *f)
{
    sd_flags_help(f, g_usage,
                  "specd-router is the OpenAI-compatible HTTP gateway: it tokenises, renders chat templates, "
                  "streams and balances requests over verifier lanes (specd serve starts it for you).",
                  g_flags, N_FLAGS);
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

/* The defaults that differ from sd_server_new's (server.h). */
static void set_defaults(sd_server_opts *o, cli *c)
{
    o->port = 8000;
    o->max_queue = 256;
    o->request_timeout_s = 600;
    o->drain_timeout_s = 30;
    o->resume_wait_s = 30;
    o->verifiers = c->lanes;
    o->verifier_dns = c->dns;
    c->level = "info";
}

/* Parses the command line into *o and *c. Returns -1 to go on, else the
 * exit status (0 after --help, 2 on a usage error, reported). */
static int parse_args(int argc, char **argv, sd_server_opts *o, cli *c)
{
    struct option longopts[N_FLAGS + 1];
    sd_flags_options(g_flags, N_FLAGS, longopts);
    set_defaults(o, c);
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
        case 'g': o->no_playground = true; break;
        case 'R': o->max_headers = (size_t)num_arg("--max-headers", optarg, (long long)1 << 30); break;
        case 'W': o->header_timeout_s = (int)num_arg("--header-timeout", optarg, 86400); break;
        case 'Y': o->curve_keys = optarg; break;
        case 'G': o->drain_timeout_s = (int)num_arg("--drain-timeout", optarg, 86400); break;
        case 'N': o->max_connections = (int)num_arg("--max-connections", optarg, 1 << 20); break;
        case 'O': o->max_per_client = (int)num_arg("--max-connections-per-client", optarg, 1 << 20); break;
        case 'F': o->first_byte_s = (double)num_arg("--first-byte-timeout", optarg, 86400); break;
        case 'e': o->keepalive_s = (double)num_arg("--keepalive-timeout", optarg, 86400); break;
        case 'B': o->body_s = (double)num_arg("--body-timeout", optarg, 86400); break;
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
        default: sd_flags_usage_error(stderr, g_usage, "specd-router"); return 2;
        }
    }
    if (c->n_names) {
        o->model_name = c->names[0];
        o->aliases = c->names + 1;
        o->n_aliases = c->n_names - 1;
    }
    if (optind < argc || (!o->n_verifiers && !o->n_verifier_dns) || !o->tokenizer || !o->model_name) {
        sd_flags_usage_error(stderr, g_usage, "specd-router");
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

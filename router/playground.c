/* playground.c — serves the browser playground (see playground.h). */
#include "playground.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "assets.h"
#include "http_api.h"
#include "reply.h"

#define CSP                                                                                         \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

bool sd_playground_path(const char *path)
{
    return !strcmp(path, "/") || !strcmp(path, "/playground") || !strncmp(path, "/playground/", 12);
}

static const char *type_of(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot) return "application/octet-stream";
    if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (!strcmp(dot, ".svg")) return "image/svg+xml";
    return "application/octet-stream";
}

static const sd_asset *find(const char *path)
{
    const char *name = strncmp(path, "/playground/", 12) ? "index.html" : path + 12;
    if (!*name) name = "index.html";
    for (const sd_asset *a = sd_playground_assets; a->name; a++)
        if (!strcmp(a->name, name)) return a;
    return NULL;
}

/* A strong validator: FNV-1a of the bytes. */
static void etag_of(const sd_asset *a, char *out, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < a->len; i++) h = (h ^ a->data[i]) * 1099511628211ULL;
    snprintf(out, n, "\"%016llx\"", (unsigned long long)h);
}

static void security_headers(struct evkeyvalq *h)
{
    evhttp_add_header(h, "Content-Security-Policy", CSP);
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
    evhttp_add_header(h, "Cross-Origin-Opener-Policy", "same-origin");
    evhttp_add_header(h, "Cross-Origin-Resource-Policy", "same-origin");
    evhttp_add_header(h, "Permissions-Policy", "camera=(), microphone=(), geolocation=()");
}

void sd_playground_serve(struct evhttp_request *req, const char *path, sd_metrics *m)
{
    const sd_asset *a = find(path);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    security_headers(h);
    if (!a) {
        sd_api_err e;
        sd_api_fail(&e, 404, "invalid_request_error", NULL, "not_found", "The playground has no file %s", path);
        sd_reply_error(req, &e, m);
        return;
    }
    char etag[24];
    etag_of(a, etag, sizeof etag);
    evhttp_add_header(h, "ETag", etag);
    evhttp_add_header(h, "Cache-Control", "no-cache");
    const char *inm = evhttp_find_header(evhttp_request_get_input_headers(req), "If-None-Match");
    if (inm && strstr(inm, etag)) {
        evhttp_send_reply(req, 304, "Not Modified", NULL);
        sd_metrics_count_status(m, 304);
        return;
    }
    evhttp_add_header(h, "Content-Type", type_of(a->name));
    struct evbuffer *b = evbuffer_new();
    if (b) evbuffer_add_reference(b, a->data, a->len, NULL, NULL);
    evhttp_send_reply(req, 200, "OK", b);
    if (b) evbuffer_free(b);
    sd_metrics_count_status(m, 200);
}

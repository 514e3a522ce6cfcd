/* errpage.c — see errpage.h. */
#include "errpage.h"

#include <event2/buffer.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_api.h"

#define HEAD_MAX 2048 /* libevent's error headers are a few hundred bytes */

static bool g_busy; /* rewriting: the buffer changes under our own callback */

/* The value of header name in the header block h (NUL-terminated), or NULL. */
static const char *header(const char *h, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(h, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
        if (!strncasecmp(p + 2, name, n) && p[2 + n] == ':') {
            const char *v = p + 3 + n;
            while (*v == ' ') v++;
            return v;
        }
    }
    return NULL;
}

/* When buf starts with a complete text/html response, replaces it by JSON. */
static void rewrite(struct evbuffer *buf)
{
    size_t len = evbuffer_get_length(buf);
    char first[10];
    /* cheap test first: this runs on every write of every connection */
    if (len < 16 || evbuffer_copyout(buf, first, 10) != 10 || strncmp(first, "HTTP/1.", 7) ||
        (first[9] != '4' && first[9] != '5'))
        return;
    size_t peek = len < HEAD_MAX ? len : HEAD_MAX;
    char h[HEAD_MAX + 1];
    if (evbuffer_copyout(buf, h, peek) != (ev_ssize_t)peek) return;
    h[peek] = '\0';
    char *end = strstr(h, "\r\n\r\n");
    int status = 0;
    if (strncmp(h, "HTTP/1.", 7) || !end || sscanf(h + 9, "%3d", &status) != 1 || status < 400) return;
    end[2] = '\0'; /* the header block, with its last CRLF */
    const char *ct = header(h, "Content-Type"), *cl = header(h, "Content-Length");
    if (!ct || strncasecmp(ct, "text/html", 9) || !cl) return;
    size_t head = (size_t)(end - h) + 4, body = strtoul(cl, NULL, 10);
    if (len < head + body) return; /* not all there yet */
    char reason[64] = "";
    sscanf(h + 13, "%63[^\r]", reason);
    sd_api_err e;
    sd_api_fail(&e, status, status < 500 ? "invalid_request_error" : "server_error", NULL,
                status == 413   ? "request_too_large"
                : status == 400 ? "bad_request"
                                : NULL,
                "The HTTP request could not be processed: %d %s", status, reason);
    char *json = sd_api_error_json(&e);
    if (!json) return;
    char top[256];
    int n = snprintf(top, sizeof top,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, reason, strlen(json));
    g_busy = true;
    evbuffer_drain(buf, head + body);
    evbuffer_prepend(buf, json, strlen(json));
    evbuffer_prepend(buf, top, (size_t)n);
    g_busy = false;
    free(json);
}

static void on_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)arg;
    if (!g_busy && info->n_added > 0) rewrite(buf); /* headers and body may come in two adds */
}

void sd_errpage_watch(struct bufferevent *bev) { evbuffer_add_cb(bufferevent_get_output(bev), on_output, NULL); }

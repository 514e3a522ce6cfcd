/* reply.c — see reply.h. */
#include "reply.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdlib.h>
#include <string.h>

static const char *reason_of(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Error";
    }
}

void sd_reply_json(struct evhttp_request *req, int status, const char *body, sd_metrics *m)
{
    struct evbuffer *b = evbuffer_new();
    if (b && body) evbuffer_add(b, body, strlen(body));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, status, reason_of(status), b);
    if (b) evbuffer_free(b);
    sd_metrics_count_status(m, status);
}

void sd_reply_error(struct evhttp_request *req, const sd_api_err *e, sd_metrics *m)
{
    if (e->status == 429 || e->status == 503)
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
    char *body = sd_api_error_json(e);
    sd_reply_json(req, e->status, body ? body : "{}", m);
    free(body);
}

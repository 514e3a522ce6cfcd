/* discovery.c — see discovery.h. */
#include "discovery.h"

#include <arpa/inet.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "array.h"
#include "log.h"

typedef struct name {
    struct sd_disc *d;
    char *host, *port;
    int *lanes; /* the lanes this name resolved to last time */
    size_t n_lanes, cap_lanes;
    struct evdns_getaddrinfo_request *pending;
} name;

struct sd_disc {
    sd_lanes *lanes;
    struct evdns_base *dns;
    struct event *timer;
    name *names;
    size_t n;
    bool closing; /* sd_disc_free: lookups ending now change nothing */
};

/* "tcp://ADDRESS:PORT" of one result. */
static bool endpoint_of(const struct evutil_addrinfo *a, const char *port, char *out, size_t n)
{
    char ip[INET6_ADDRSTRLEN];
    if (a->ai_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)a->ai_addr;
        if (!evutil_inet_ntop(AF_INET, &s->sin_addr, ip, sizeof ip)) return false;
        snprintf(out, n, "tcp://%s:%s", ip, port);
        return true;
    }
    if (a->ai_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)a->ai_addr;
        if (!evutil_inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof ip)) return false;
        snprintf(out, n, "tcp://[%s]:%s", ip, port);
        return true;
    }
    return false;
}

static bool has(const int *v, size_t n, int x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x) return true;
    return false;
}

/* The name now resolves to res: add its lanes, retire those it lost. */
static void update(name *nm, struct evutil_addrinfo *res)
{
    int now[256];
    size_t n = 0;
    char ep[128], err[256];
    for (struct evutil_addrinfo *a = res; a && n < 256; a = a->ai_next) {
        if (!endpoint_of(a, nm->port, ep, sizeof ep)) continue;
        int i = sd_lanes_add(nm->d->lanes, ep, err, sizeof err);
        if (i < 0) SD_WARN("%s: lane %s not added: %s", nm->host, ep, err);
        else if (!has(now, n, i)) now[n++] = i;
    }
    for (size_t k = 0; k < nm->n_lanes; k++)
        if (!has(now, n, nm->lanes[k])) sd_lanes_retire(nm->d->lanes, nm->lanes[k]);
    if (sd_grow(&nm->lanes, &nm->cap_lanes, n ? n : 1, sizeof *nm->lanes) != SD_OK) return;
    memcpy(nm->lanes, now, n * sizeof *now);
    nm->n_lanes = n;
}

static void on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
    name *nm = arg;
    nm->pending = NULL;
    if (result == EVUTIL_EAI_CANCEL || nm->d->closing) {
        if (res) evutil_freeaddrinfo(res);
        return;
    }
    if (result != 0) {
        SD_WARN_LIMITED("--verifier-dns %s: %s (the lanes stay as they are)", nm->host, evutil_gai_strerror(result));
    } else {
        update(nm, res);
    }
    if (res) evutil_freeaddrinfo(res);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sd_disc *d = arg;
    struct evutil_addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    for (size_t i = 0; i < d->n; i++) {
        name *nm = &d->names[i];
        if (nm->pending) continue; /* still waiting for the last answer */
        nm->pending = evdns_getaddrinfo(d->dns, nm->host, nm->port, &hints, on_resolved, nm);
    }
}

/* Splits "HOST:PORT" (the last ':'; HOST may be [v6]). */
static bool split_name(const char *s, name *nm)
{
    const char *c = strrchr(s, ':');
    if (!c || c == s || !c[1] || strspn(c + 1, "0123456789") != strlen(c + 1) || atoi(c + 1) <= 0 ||
        atoi(c + 1) > 65535)
        return false;
    size_t hl = (size_t)(c - s);
    if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') {
        s++;
        hl -= 2;
    }
    nm->host = strndup(s, hl);
    nm->port = strdup(c + 1);
    return nm->host && nm->port;
}

sd_status sd_disc_new(struct event_base *base, sd_lanes *lanes, const char *const *names, size_t n, double interval_s,
                      const char *dns_server, sd_disc **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_disc *d = calloc(1, sizeof *d);
    if (!d || !(d->names = calloc(n ? n : 1, sizeof *d->names))) {
        free(d);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    }
    d->lanes = lanes;
    sd_status st = SD_OK;
    for (; d->n < n && st == SD_OK; d->n++) {
        d->names[d->n].d = d;
        if (!split_name(names[d->n], &d->names[d->n]))
            st = sd_seterr(err, errlen, SD_ERR_ARG, "--verifier-dns '%s': expected HOST:PORT", names[d->n]);
    }
    if (st == SD_OK) d->dns = evdns_base_new(base, dns_server ? 0 : EVDNS_BASE_INITIALIZE_NAMESERVERS);
    if (st == SD_OK && !d->dns) st = sd_seterr(err, errlen, SD_ERR_IO, "cannot set up DNS resolution (resolv.conf?)");
    if (st == SD_OK && dns_server && evdns_base_nameserver_ip_add(d->dns, dns_server) != 0)
        st = sd_seterr(err, errlen, SD_ERR_ARG, "--dns-server '%s': expected IP[:PORT]", dns_server);
    double iv = interval_s > 0 ? interval_s : 10;
    struct timeval tv = {(time_t)iv, (suseconds_t)((iv - (double)(time_t)iv) * 1e6)};
    if (st == SD_OK && (!(d->timer = event_new(base, -1, EV_PERSIST, on_tick, d)) || event_add(d->timer, &tv) != 0))
        st = sd_seterr(err, errlen, SD_ERR_IO, "cannot start the DNS timer");
    if (st != SD_OK) {
        sd_disc_free(d);
        return st;
    }
    on_tick(-1, 0, d);
    *out = d;
    return SD_OK;
}

void sd_disc_stop(sd_disc *d)
{
    if (!d || d->closing) return;
    d->closing = true;
    if (d->timer) evtimer_del(d->timer);
    /* a lookup still waiting on a nameserver that never answers is cancelled while the loop runs: its
     * callback is deferred to the loop, and evdns_base_free would leave it (and its reply, 1.5 KB a name)
     * allocated for ever — as it does, in libevent 2.1, with a lookup it fails itself */
    for (size_t i = 0; i < d->n; i++)
        if (d->names[i].pending) evdns_getaddrinfo_cancel(d->names[i].pending); /* its callback clears it */
}

void sd_disc_free(sd_disc *d)
{
    if (!d) return;
    sd_disc_stop(d);
    if (d->timer) event_free(d->timer);
    if (d->dns) evdns_base_free(d->dns, 1);
    for (size_t i = 0; i < d->n; i++) {
        free(d->names[i].host);
        free(d->names[i].port);
        free(d->names[i].lanes);
    }
    free(d->names);
    free(d);
}

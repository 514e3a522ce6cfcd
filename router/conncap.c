/* conncap.c — see conncap.h. */
#include "conncap.h"

#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <stdbool.h>
#include <stdlib.h>

#include "array.h"
#include "errpage.h"
#include "log.h"

struct sd_conncap {
    struct event_base *base;
    struct evhttp_bound_socket *const *bound;
    int max;
    struct bufferevent **bev; /* one reference each */
    size_t n, cap;
    struct event *sweep;
    bool paused;
    unsigned long reached;
};

static void listener_enable(sd_conncap *c, bool on)
{
    struct evconnlistener *l = *c->bound ? evhttp_bound_socket_get_listener(*c->bound) : NULL;
    if (!l || c->paused == !on) return;
    if (on) evconnlistener_enable(l);
    else evconnlistener_disable(l);
    c->paused = !on;
}

/* A bufferevent evhttp has freed: its callbacks are gone. */
static bool released(struct bufferevent *bev)
{
    bufferevent_data_cb r = NULL, w = NULL;
    bufferevent_event_cb e = NULL;
    void *arg = NULL;
    bufferevent_getcb(bev, &r, &w, &e, &arg);
    return !r && !w && !e;
}

static void arm(sd_conncap *c)
{
    struct timeval tv = {0, SD_CONNCAP_SWEEP_MS * 1000};
    evtimer_add(c->sweep, &tv);
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sd_conncap *c = arg;
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (released(c->bev[i])) bufferevent_decref(c->bev[i]); /* the last reference: the socket closes */
        else c->bev[k++] = c->bev[i];
    }
    c->n = k;
    if ((int)c->n < c->max) listener_enable(c, true);
    if (c->n) arm(c);
}

static struct bufferevent *on_new_connection(struct event_base *base, void *arg)
{
    sd_conncap *c = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) return NULL;
    sd_errpage_watch(bev);
    if (sd_grow(&c->bev, &c->cap, c->n + 1, sizeof *c->bev) != SD_OK) return bev; /* uncounted, still served */
    bufferevent_incref(bev);
    c->bev[c->n++] = bev;
    if (c->n == 1) arm(c);
    if ((int)c->n >= c->max && !c->paused) {
        c->reached++;
        SD_WARN_LIMITED("%d connections open (--max-connections): not accepting more until one closes", c->max);
        listener_enable(c, false);
    }
    return bev;
}

sd_status sd_conncap_new(struct event_base *base, struct evhttp *http, struct evhttp_bound_socket *const *bound,
                         int max, sd_conncap **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_conncap *c = calloc(1, sizeof *c);
    if (!c) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    c->base = base;
    c->bound = bound;
    c->max = max > 0 ? max : 1;
    c->sweep = evtimer_new(base, on_sweep, c);
    if (!c->sweep) {
        free(c);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "cannot create the connection sweep timer");
    }
    evhttp_set_bevcb(http, on_new_connection, c);
    *out = c;
    return SD_OK;
}

int sd_conncap_open(const sd_conncap *c)
{
    int n = 0;
    for (size_t i = 0; i < c->n; i++) n += !released(c->bev[i]);
    return n;
}

unsigned long sd_conncap_reached(const sd_conncap *c) { return c->reached; }

void sd_conncap_free(sd_conncap *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) bufferevent_decref(c->bev[i]);
    if (c->sweep) event_free(c->sweep);
    free(c->bev);
    free(c);
}

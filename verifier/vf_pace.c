/* vf_pace.c — see vf_pace.h. */
#include "vf_pace.h"

#include <string.h>

#define ALPHA 0.2        /* EMA weight of a new sample */
#define YIELD_ALPHA 0.05 /* tokens per step vary a lot from step to step: a slower EMA */

void sd_vf_pace_init(sd_vf_pace *p, const sd_cost *cost)
{
    memset(p, 0, sizeof *p);
    p->cost = cost;
}

void sd_vf_pace_span(sd_vf_pace *p, double draft_ms)
{
    p->draft_ms = sd_avg_update(p->draft_ms, draft_ms > 0 ? draft_ms : 0, &p->n_draft, ALPHA);
}

void sd_vf_pace_waited(sd_vf_pace *p, double latency_ms, double draft_ms)
{
    sd_vf_pace_span(p, draft_ms);
    p->lat_ms = sd_avg_update(p->lat_ms, latency_ms > 0 ? latency_ms : 0, &p->n_lat, ALPHA);
}

double sd_vf_pace_latency(const sd_vf_pace *p) { return p->n_lat ? p->lat_ms : p->draft_ms; }

void sd_vf_pace_timeout(sd_vf_pace *p, double budget_ms)
{
    /* a timeout says "longer than the budget": the estimate goes a quarter above it, never down */
    double lat = 1.25 * budget_ms;
    if (!p->n_lat || p->lat_ms < lat) p->lat_ms = lat;
    if (!p->n_lat) p->n_lat = 1;
}

void sd_vf_pace_yield(sd_vf_pace *p, int committed)
{
    if (committed >= 1) p->yield = sd_avg_update(p->yield, committed, &p->n_yield, YIELD_ALPHA);
}

void sd_vf_pace_fallback(sd_vf_pace *p, int rows, int committed)
{
    if (rows < 1 || committed < 1) return;
    unsigned n = p->n_fb;
    p->fb_yield = sd_avg_update(p->fb_yield, committed, &n, YIELD_ALPHA);
    p->fb_rows = sd_avg_update(p->fb_rows, rows, &p->n_fb, YIELD_ALPHA);
}

double sd_vf_pace_expected(const sd_vf_pace *p) { return p->n_yield && p->yield > 1 ? p->yield : 1; }

double sd_vf_pace_step_ms(const sd_vf_pace *p, int rows)
{
    if (!sd_cost_known(p->cost)) return 0;
    return sd_cost_forward_ms(p->cost, rows, 0) + sd_cost_accept_ms(p->cost, rows, 0);
}

double sd_vf_pace_wait_budget(const sd_vf_pace *p, int rows_ready, double e_ready, int n_waiting, int k, double e_span)
{
    if (n_waiting <= 0 || k <= 0) return 0;
    double e = p->n_yield ? sd_vf_pace_expected(p) : e_span > 1 ? e_span : 1;
    /* going on without the span: one row and one token each, or what such steps measured */
    double fb_e = p->n_fb ? p->fb_yield : 1, fb_rows = p->n_fb ? p->fb_rows : 1;
    double t_with = sd_vf_pace_step_ms(p, rows_ready + n_waiting * (k + 1));
    double t_without = sd_vf_pace_step_ms(p, rows_ready + (int)(n_waiting * fb_rows + 0.5));
    if (t_with <= 0 || t_without <= 0) return 0;
    double e_with = e_ready + n_waiting * e, e_without = e_ready + n_waiting * fb_e;
    /* a drafter quicker than a plain step delivers during it: not waiting costs the shorter step's rate
     * only; a slower one (its own time per span, not the latency, which a hiccup inflates) loses its
     * span unless waited for: wait while the step with drafts, the wait included, commits at a plain
     * step's rate or better */
    bool slow = p->n_draft && p->draft_ms > t_without;
    double budget = slow ? e_with * t_without / e_without - t_with : t_without - e_without * t_with / e_with;
    return budget > 0 ? budget : 0;
}

bool sd_vf_pace_should_wait(sd_vf_pace *p, double budget_ms)
{
    if (budget_ms <= 0) return false;
    if (sd_vf_pace_latency(p) < budget_ms || ++p->declined >= SD_VF_PACE_PROBE) {
        p->declined = 0;
        return true;
    }
    return false;
}

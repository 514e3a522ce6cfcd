/* vf_pace.c — see vf_pace.h. */
#include "vf_pace.h"

#include <string.h>

#define ALPHA 0.2       /* EMA weight of a new sample */
#define YIELD_ALPHA 0.05 /* tokens per step vary a lot from step to step: a slower EMA */
#define DECAY 0.995     /* per-step forgetting of the line's sums */
#define OVER_DECAY 0.9  /* per-step decay of the overhead estimate */

void sd_vf_pace_init(sd_vf_pace *p)
{
    memset(p, 0, sizeof *p);
}

/* The average of the samples so far (*n of them before x): their mean while
 * 1 / n > alpha, an EMA of weight alpha after. */
static double avg(double old, double x, unsigned *n, double alpha)
{
    (*n)++;
    double w = 1.0 / *n > alpha ? 1.0 / *n : alpha;
    return old + w * (x - old);
}

void sd_vf_pace_step(sd_vf_pace *p, int rows, double ms)
{
    if (rows < 1 || ms <= 0) return;
    if (rows <= SD_VF_PACE_ROWS) {
        unsigned *n = &p->n_row[rows];
        double *t = &p->t_row[rows];
        if (*n == 1 && ms < *t) { /* a size's first step is often cold (page faults): a faster second replaces it */
            *t = ms;
            (*n)++;
        } else {
            *t = avg(*t, ms, n, ALPHA);
        }
    }
    p->sn = p->sn * DECAY + 1;
    p->sx = p->sx * DECAY + rows;
    p->sy = p->sy * DECAY + ms;
    p->sxx = p->sxx * DECAY + (double)rows * rows;
    p->sxy = p->sxy * DECAY + (double)rows * ms;
    p->over_ms *= OVER_DECAY;
}

void sd_vf_pace_span(sd_vf_pace *p, double draft_ms)
{
    p->draft_ms = avg(p->draft_ms, draft_ms > 0 ? draft_ms : 0, &p->n_draft, ALPHA);
}

void sd_vf_pace_waited(sd_vf_pace *p, double latency_ms, double draft_ms)
{
    sd_vf_pace_span(p, draft_ms);
    double over = latency_ms - draft_ms;
    p->over_ms += ALPHA * ((over > 0 ? over : 0) - p->over_ms);
}

double sd_vf_pace_latency(const sd_vf_pace *p)
{
    return p->draft_ms + p->over_ms;
}

void sd_vf_pace_timeout(sd_vf_pace *p, double budget_ms)
{
    /* a timeout says "longer than the budget": the estimate goes a quarter above it, never down */
    double over = 1.25 * budget_ms - p->draft_ms;
    if (over > p->over_ms) p->over_ms = over;
}

void sd_vf_pace_yield(sd_vf_pace *p, int committed)
{
    if (committed >= 1) p->yield = avg(p->yield, committed, &p->n_yield, YIELD_ALPHA);
}

double sd_vf_pace_expected(const sd_vf_pace *p)
{
    return p->n_yield && p->yield > 1 ? p->yield : 1;
}

double sd_vf_pace_step_ms(const sd_vf_pace *p, int rows)
{
    if (rows < 1) rows = 1;
    if (rows <= SD_VF_PACE_ROWS && p->n_row[rows] > 0) return p->t_row[rows];
    if (p->sn <= 0) return 0;
    double den = p->sn * p->sxx - p->sx * p->sx;
    if (den <= 1e-9 * p->sn * p->sxx) return p->sy / p->sn; /* one row count only: its mean */
    double b = (p->sn * p->sxy - p->sx * p->sy) / den;
    double a = (p->sy - b * p->sx) / p->sn;
    if (b < 0) b = 0;
    double t = a + b * rows;
    return t > 0 ? t : p->sy / p->sn;
}

double sd_vf_pace_wait_budget(const sd_vf_pace *p, int rows_ready, double e_ready, int n_waiting, int k)
{
    if (n_waiting <= 0 || k <= 0 || !p->n_yield) return 0;
    double e = sd_vf_pace_expected(p);
    double t_with = sd_vf_pace_step_ms(p, rows_ready + n_waiting * (k + 1));
    double t_without = sd_vf_pace_step_ms(p, rows_ready + n_waiting);
    if (t_with <= 0 || t_without <= 0) return 0;
    double e_with = e_ready + n_waiting * e, e_without = e_ready + n_waiting;
    double budget = t_without - e_without * t_with / e_with;
    return budget > 0 ? budget : 0;
}

bool sd_vf_pace_should_wait(const sd_vf_pace *p, double budget_ms)
{
    return budget_ms > 0 && sd_vf_pace_latency(p) < budget_ms;
}

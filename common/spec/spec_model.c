/* spec_model.c — see spec_model.h. */
#include "spec_model.h"

#include <math.h>
#include <string.h>

#define ALPHA 0.05       /* EMA weight of a new forward-pass sample in a size's shape (many come: a steady figure) */
#define SPEED_ALPHA 0.2  /* EMA weight of a pass in the machine's speed (it drifts: follow it) */
#define DECAY 0.995      /* per-sample forgetting of the least-squares sums */
#define ACCEPT_CAP 1000u /* observation counts stop growing here */
#define SHRINK 2.0       /* pseudo-observations of the all-position average in each position's estimate */
#define COLD 1.5         /* a first pass this much slower than the second was cold: replaced */
#define NEAR_PSEUDO 8.0  /* pseudo-observations of the near row counts' line in a measured count's figure */
#define WARM 3           /* samples after which a count's figure bounds the larger counts' */
#define NEAR_NCAP 40u    /* samples a count weighs at most in its neighbours' line (about its EMA's memory) */

double sd_avg_update(double old, double x, unsigned *n, double alpha)
{
    if (*n < ACCEPT_CAP) (*n)++;
    double w = 1.0 / *n > alpha ? 1.0 / *n : alpha;
    return old + w * (x - old);
}

void sd_cost_init(sd_cost *c)
{
    memset(c, 0, sizeof *c);
    c->speed = 1;
}

/* The shape estimate (at speed 1) for rows over seqs: the table, the
 * neighbours, the per-sequence correction (sd_cost_forward_ms without the
 * speed). */
static double shape_ms(const sd_cost *c, int rows, int seqs);

/* Re-links the measured row counts after r got its first sample. */
static void link_rows(sd_cost *c)
{
    int last = 0;
    for (int r = 1; r <= SD_COST_ROWS; r++) {
        if (c->n_row[r] > 0) last = r;
        c->below[r] = (short)last;
    }
    last = 0;
    for (int r = SD_COST_ROWS; r >= 1; r--) {
        if (c->n_row[r] > 0) last = r;
        c->above[r] = (short)last;
    }
    c->top = c->top2 = 0;
    for (int r = SD_COST_ROWS; r >= 1 && !c->top2; r--)
        if (c->n_row[r] > 0) {
            if (!c->top) c->top = (short)r;
            else c->top2 = (short)r;
        }
}

/* Half the window of row counts whose figures inform r's. */
static int near_width(int r) { return 2 + r / 4; }

/* The weighted least-squares line through the measured row counts near r
 * (r itself left out), at r: weights their samples (at most NEAR_NCAP) times
 * 1 - distance / (h + 1); the line never falls with rows (then the weighted
 * mean). *s: their sequences' weighted mean. False when fewer than two
 * counts are near. */
static bool near_line(const sd_cost *c, int r, double *t, double *s)
{
    int h = near_width(r), lo = r - h < 1 ? 1 : r - h, hi = r + h > SD_COST_ROWS ? SD_COST_ROWS : r + h;
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, ss = 0;
    int k = 0;
    for (int i = lo; i <= hi; i++) {
        if (i == r || c->n_row[i] == 0) continue;
        int d = i > r ? i - r : r - i;
        double w = (c->n_row[i] < NEAR_NCAP ? c->n_row[i] : NEAR_NCAP) * (1.0 - (double)d / (h + 1)), x = i - r;
        sw += w, sx += w * x, sy += w * c->t_row[i], sxx += w * x * x, sxy += w * x * c->t_row[i];
        ss += w * c->s_row[i];
        k++;
    }
    if (k < 2) return false;
    double mx = sx / sw, my = sy / sw, vxx = sxx / sw - mx * mx, b = vxx > 1e-12 ? (sxy / sw - mx * my) / vxx : 0;
    *t = b > 0 ? my - b * mx : my; /* at x = 0, i.e. at r */
    *s = ss / sw;
    return *t > 0;
}

/* The figures predictions use, for the measured row counts whose near ones
 * include changed: a count's own average shrunk towards its neighbours'
 * line by NEAR_PSEUDO pseudo-observations — a count seldom measured borrows
 * from those around it, one measured often keeps its own figure, a tile's
 * jump included (unmeasured counts are interpolated between these); then
 * the caps. */
static void refit(sd_cost *c, int changed)
{
    int lo = (4 * (changed - 2)) / 5 - 1, hi = (4 * (changed + 2)) / 3 + 1;
    if (lo < 1) lo = 1;
    if (hi > SD_COST_ROWS) hi = SD_COST_ROWS;
    for (int r = lo; r <= hi; r++) {
        double t, s;
        unsigned n = c->n_row[r];
        if (n == 0) continue;
        if (near_line(c, r, &t, &s)) {
            c->t_fit[r] = (n * c->t_row[r] + NEAR_PSEUDO * t) / (n + NEAR_PSEUDO);
            c->s_fit[r] = (n * c->s_row[r] + NEAR_PSEUDO * s) / (n + NEAR_PSEUDO);
        } else {
            c->t_fit[r] = c->t_row[r], c->s_fit[r] = c->s_row[r];
        }
    }
    for (int r = SD_COST_ROWS; r >= 1; r--) { /* the caps: the least figure measured at or above */
        double up = c->t_min[r + 1], own = c->n_row[r] ? c->t_fit[r] : 0;
        c->t_min[r] = own > 0 && (up <= 0 || own < up) ? own : up;
    }
    /* the rows' bound: at or below each count, the warm one of the most sequences (of those, the least
     * cost a row) */
    int best = 0;
    for (int r = 1; r <= SD_COST_ROWS; r++) {
        if (c->n_row[r] >= WARM && c->t_fit[r] > 0 &&
            (!best || c->s_fit[r] > c->s_fit[best] + 0.5 ||
             (c->s_fit[r] > c->s_fit[best] - 0.5 && c->t_fit[r] / r < c->t_fit[best] / best)))
            best = r;
        c->ref[r] = (short)best;
    }
}

void sd_cost_forward(sd_cost *c, int rows, int seqs, double ms)
{
    if (rows < 1 || ms <= 0) return;
    if (seqs < 1) seqs = 1;
    /* the machine's speed now: how this pass compares with the shape so far (a hiccup counts at
     * most double; once the size is warm, at most 1.5 times, as in its own figure below); every
     * prediction scales with it, so sizes measured in a slower or faster spell compare fairly with
     * those measured now. Only sizes measured before say it: a new size's figure is a guess from
     * others, and a run of new sizes (the rows of steps with drafts spread wide) would drift it.
     * The speed and the size's figure both move by this pass's ratio q to the prediction, clipped
     * alike: each is multiplied by exp(rate * (q - 1)), so that their logs move in a fixed proportion
     * (one size alone cannot tell the two apart, and when they moved by differently clipped samples
     * they drifted apart — single-row passes with hiccups for minutes took the speed to 1.8 while
     * that row's figure fell, and every other size's prediction tripled: CPU, 2 cores;
     * `speed_stays_on_one_size`, 30x in 3000 passes), and their product settles where the mean q is 1:
     * the passes' mean, not their geometric mean (moved by log q, predictions fell 5-16% short of
     * passes with +-30-50% noise: `prediction_is_the_mean`) */
    double expect = rows <= SD_COST_ROWS && c->n_row[rows] > 0 ? shape_ms(c, rows, seqs) : 0;
    bool warm = rows <= SD_COST_ROWS && c->n_row[rows] >= 3;
    double x = ms / c->speed; /* the sample in shape units, at the speed before it (as the speed's) */
    if (expect > 0) {
        double q = ms / (expect * c->speed), hi = warm ? 1.5 : 2;
        q = q > hi ? hi : q < 0.5 ? 0.5 : q;
        c->speed *= exp(SPEED_ALPHA * (q - 1));
    }
    c->steps++;
    if (rows > SD_COST_ROWS) return; /* beyond the table: extended from its end */
    c->seen[rows] = c->steps;
    unsigned *n = &c->n_row[rows];
    double *t = &c->t_row[rows], *sq = &c->s_row[rows];
    if (*n >= 2) { /* the per-sequence cost: deviations from this size's averages */
        double dx = seqs - *sq, dy = ms / c->speed - *t; /* net of the speed this pass showed */
        if (dy > 0.5 * *t) dy = 0.5 * *t;                /* a hiccup says nothing about sequences */
        c->gxx = c->gxx * DECAY + dx * dx;
        c->gxy = c->gxy * DECAY + dx * dy;
        c->gyy = c->gyy * DECAY + dy * dy;
        c->gn = c->gn * DECAY + 1;
    }
    /* a size's first pass is often cold (page faults): a second much faster replaces it — only much
     * faster: the least of two noisy passes is a lucky one, and most sizes a step with drafts lands on
     * have a few samples (measured on a CPU, 16 requests: such steps ran 10-20% above their figures) */
    if (*n == 1 && x * COLD < *t) {
        *t = x;
        *sq = seqs;
        (*n)++;
    } else {
        /* a machine's hiccup (another process, a page fault) is not the cost of the size: once warm,
         * a sample counts at most 1.5 times the average (and at least half); it moves the figure as
         * the speed above */
        double v = *n >= 3 && x > 1.5 * *t ? 1.5 * *t : *n >= 3 && x < 0.5 * *t ? 0.5 * *t : x;
        unsigned n0 = *n;
        if (*n == 0) { /* the first sample */
            *t = v;
            (*n)++;
        } else {
            *t *= exp(sd_avg_update(0, v / *t - 1, n, ALPHA));
        }
        *sq = sd_avg_update(*sq, seqs, &n0, ALPHA);
        if (n0 == 1) link_rows(c);
    }
    refit(c, rows);
}

/* In shape units (speed 1): the fitted slope less twice its standard
 * error (none when that is not above 0). The passes' own noise (a shared
 * machine: +-30% from one pass to the next) makes a slope fitted to a few
 * deviations mostly noise, and a per-sequence cost too high prices the
 * plain step (the most sequences for its rows) dear: measured on a CPU, 16
 * requests, 16 rows predicted at 6.5 ms while they took 3.5, from a slope
 * of 0.36 ms a sequence where attention set-up costs microseconds. */
static double per_seq_shape(const sd_cost *c)
{
    if (c->gxx <= 0 || c->gn < 3) return 0;
    double g = c->gxy / c->gxx, res = c->gyy - g * c->gxy;
    double se = sqrt((res > 0 ? res : 0) / (c->gn - 2) / c->gxx), low = g - 2 * se;
    return low > 0 ? low : 0;
}

double sd_cost_per_seq(const sd_cost *c) { return c->speed * per_seq_shape(c); }

void sd_cost_accept(sd_cost *c, int greedy_rows, int sampled_pos, double ms)
{
    if (greedy_rows < 0 || sampled_pos < 0 || greedy_rows + sampled_pos == 0 || ms < 0) return;
    double g = greedy_rows, s = sampled_pos;
    c->agg = c->agg * DECAY + g * g;
    c->ass = c->ass * DECAY + s * s;
    c->ags = c->ags * DECAY + g * s;
    c->agy = c->agy * DECAY + g * ms;
    c->asy = c->asy * DECAY + s * ms;
    c->n_acc++;
}

unsigned sd_cost_samples(const sd_cost *c, int rows) { return rows >= 1 && rows <= SD_COST_ROWS ? c->n_row[rows] : 0; }

unsigned long long sd_cost_age(const sd_cost *c, int rows)
{
    return sd_cost_samples(c, rows) ? c->steps - c->seen[rows] : c->steps;
}

bool sd_cost_known(const sd_cost *c) { return c->top > 0; }

/* The shape for a row count not measured: between measured neighbours on
 * the line through them; beyond the largest, on the slope of the last two;
 * below the smallest, or with one count measured, proportional to rows. */
static double unmeasured_ms(const sd_cost *c, int rows)
{
    int lo = rows <= SD_COST_ROWS ? c->below[rows] : c->top;
    int hi = rows <= SD_COST_ROWS ? c->above[rows] : 0;
    if (lo && hi) return c->t_fit[lo] + (c->t_fit[hi] - c->t_fit[lo]) * (rows - lo) / (hi - lo);
    if (hi) return c->t_fit[hi] * rows / hi;
    if (!c->top2) return c->t_fit[c->top] * rows / c->top;
    double slope = (c->t_fit[c->top] - c->t_fit[c->top2]) / (c->top - c->top2), avg = c->t_fit[c->top] / c->top;
    if (slope < 0) slope = 0;
    if (slope > avg) slope = avg;
    return c->t_fit[c->top] + slope * (rows - c->top);
}

static double shape_ms(const sd_cost *c, int rows, int seqs)
{
    if (!c->top) return 0;
    if (rows < 1) rows = 1;
    if (rows > SD_COST_ROWS) return unmeasured_ms(c, rows);
    double t, cap = c->t_min[rows + 1];
    if (c->n_row[rows] == 0) {
        t = unmeasured_ms(c, rows);
    } else {
        t = c->t_fit[rows];
        double s_avg = c->s_fit[rows];
        /* more sequences than this size was measured with: dearer, but only near what was measured —
         * far from it the figure is a guess, and an optimistic one gets the size tried and measured */
        if (seqs > 0 && (seqs < s_avg || seqs <= 1.5 * s_avg + 1)) {
            t += per_seq_shape(c) * (seqs - s_avg);
            if (t < 0.5 * c->t_fit[rows]) t = 0.5 * c->t_fit[rows];
        }
    }
    if (cap > 0 && t > cap) t = cap; /* fewer rows never cost more */
    /* a count not yet warm: nor more than in proportion to a warm count below it of as many sequences
     * or more (a guess, and an optimistic one gets it tried; once warm its own figure holds, a tile's
     * jump included). Priced from a slow pass or two, or between such counts, 48 rows of 16 requests
     * cost 15 ms where 34 took 8 (CPU, 1 thread): as no plan chose it again, it was never measured
     * again */
    int m = c->ref[rows];
    if (c->n_row[rows] < WARM && m && m < rows && (seqs <= 0 || seqs <= c->s_fit[m] + 0.5) &&
        t > c->t_fit[m] * rows / m)
        t = c->t_fit[m] * rows / m;
    return t;
}

double sd_cost_forward_ms(const sd_cost *c, int rows, int seqs) { return c->speed * shape_ms(c, rows, seqs); }

double sd_cost_forward_at(const sd_cost *c, double rows, int seqs)
{
    int lo = (int)rows;
    double f = rows - lo;
    if (lo < 1) return sd_cost_forward_ms(c, 1, seqs);
    double t = sd_cost_forward_ms(c, lo, seqs);
    return f > 1e-9 ? t + f * (sd_cost_forward_ms(c, lo + 1, seqs) - t) : t;
}

double sd_cost_accept_ms(const sd_cost *c, double greedy_rows, double sampled_pos)
{
    if (c->n_acc == 0) return 0;
    /* least squares for (g, s) without intercept; one kind only when the other never occurred */
    double g = 0, s = 0, den = c->agg * c->ass - c->ags * c->ags;
    if (c->agg > 0 && c->ass > 0 && den > 1e-9 * c->agg * c->ass) {
        g = (c->agy * c->ass - c->asy * c->ags) / den;
        s = (c->asy * c->agg - c->agy * c->ags) / den;
    } else if (c->agg > 0 && c->ass <= 0) {
        g = c->agy / c->agg;
    } else if (c->ass > 0 && c->agg <= 0) {
        s = c->asy / c->ass;
    } else { /* the two always together in one ratio: one cost for both */
        g = s = (c->agy + c->asy) / (c->agg + c->ass + 2 * c->ags);
    }
    if (g < 0) g = 0;
    if (s < 0) s = 0;
    return g * greedy_rows + s * sampled_pos;
}

static double effective(const double *v, const unsigned *n, int i, double mean);
static double mean_of(const double *v, const unsigned *n, double dflt);

void sd_accept_init(sd_accept *a, const sd_accept *prior, unsigned prior_weight)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < SD_MAX_DRAFT; i++) {
        a->a[i] = prior ? prior->a[i] : SD_ACCEPT_START;
        a->n[i] = prior ? (prior->n[i] < prior_weight ? prior->n[i] : prior_weight) : 1;
        a->c[i] = prior ? prior->c[i] : 1.0;
        a->nc[i] = prior ? (prior->nc[i] < prior_weight ? prior->nc[i] : prior_weight) : 0;
        a->co[i] = prior ? prior->co[i] : 1.0;
        a->nco[i] = prior ? (prior->nco[i] < prior_weight ? prior->nco[i] : prior_weight) : 0;
    }
}

void sd_accept_observe(sd_accept *a, int asked, int offered, int accepted, double alpha, bool runs)
{
    if (asked <= 0 || offered < 0 || offered > asked || accepted < 0 || accepted > offered) return;
    if (asked > SD_MAX_DRAFT) asked = SD_MAX_DRAFT;
    if (offered > asked) offered = asked;
    /* supply: positions 1..offered came, position offered+1 (if asked for) did not */
    for (int i = 0; i < asked && i <= offered; i++) a->c[i] = sd_avg_update(a->c[i], i < offered, &a->nc[i], alpha);
    /* ... and where the drafts before it were accepted (accepted <= offered) */
    for (int i = 0; i < asked && i <= accepted; i++) a->co[i] = sd_avg_update(a->co[i], i < offered, &a->nco[i], alpha);
    if (offered == 0) return;
    a->steps++;
    /* drafts 1..accepted were accepted, draft accepted+1 (if offered) rejected; later ones were never judged */
    for (int i = 0; i < offered && i <= accepted; i++) {
        bool x = i < accepted;
        double to = x ? 1.0 : 0.0;
        if (a->last[i] == x && a->run[i] > 0) {
            if (a->run[i] < 60000) a->run[i]++;
        } else {
            a->run[i] = 1;
            a->fast[i] = false;
            a->a_run[i] = a->a[i];
        }
        double p_x = x ? a->a_run[i] : 1 - a->a_run[i];
        a->last[i] = x;
        if (runs && !a->fast[i] && a->run[i] >= 2 && pow(p_x, a->run[i]) < SD_ACCEPT_SURPRISE) a->fast[i] = true;
        if (a->fast[i]) {
            a->a[i] += 0.5 * (to - a->a[i]);
            if (a->n[i] < ACCEPT_CAP) a->n[i]++;
        } else {
            a->a[i] = sd_avg_update(a->a[i], to, &a->n[i], alpha);
        }
    }
}

void sd_accept_supply_known(sd_accept *a, int n)
{
    for (int i = 0; i < n && i < SD_MAX_DRAFT; i++) {
        a->c[i] = a->co[i] = 1.0;
        a->nc[i] = a->nco[i] = ACCEPT_CAP;
    }
}

void sd_accept_supply_scaled(sd_accept *a, double p)
{
    double first = sd_accept_offered(a, 1), first_o = effective(a->co, a->nco, 0, mean_of(a->co, a->nco, 1.0));
    p = p < 0 ? 0 : p > 1 ? 1 : p;
    a->c[0] = p * first;
    a->co[0] = p * first_o;
    a->nc[0] = a->nco[0] = ACCEPT_CAP;
}

void sd_accept_fade(sd_accept *a, const sd_accept *toward, double w, int from)
{
    for (int i = from < 0 ? 0 : from; i < SD_MAX_DRAFT; i++) {
        if (toward->n[i] > 1) a->a[i] += w * (toward->a[i] - a->a[i]); /* beyond the start's one */
        if (toward->nc[i] > 0) a->c[i] += w * (toward->c[i] - a->c[i]);
        if (toward->nco[i] > 0) a->co[i] += w * (toward->co[i] - a->co[i]);
    }
}

/* The figure used for position i of v (counts n): its own estimate shrunk
 * towards the average of the positions observed, by SHRINK
 * pseudo-observations. A position seldom judged (the last ones of a span)
 * then borrows from the others: one unlucky outcome cannot keep it from
 * ever being tried again. */
static double effective(const double *v, const unsigned *n, int i, double mean)
{
    return (n[i] * v[i] + SHRINK * mean) / (n[i] + SHRINK);
}

/* The average over the positions observed (more than one observation:
 * beyond a start of no evidence), or dflt. */
static double mean_of(const double *v, const unsigned *n, double dflt)
{
    double num = 0, den = 0;
    for (int i = 0; i < SD_MAX_DRAFT; i++) {
        if (n[i] < 2) continue;
        num += n[i] * v[i];
        den += n[i];
    }
    return den > 0 ? num / den : dflt;
}

double sd_accept_reach(const sd_accept *a, int j)
{
    double p = 1, mean = mean_of(a->a, a->n, SD_ACCEPT_START);
    for (int i = 0; i < j && i < SD_MAX_DRAFT; i++) p *= effective(a->a, a->n, i, mean);
    return p;
}

double sd_accept_offered(const sd_accept *a, int j)
{
    double p = 1, mean = mean_of(a->c, a->nc, 1.0);
    for (int i = 0; i < j && i < SD_MAX_DRAFT; i++) p *= effective(a->c, a->nc, i, mean);
    return p;
}

double sd_accept_yield(const sd_accept *a, int j)
{
    double p = 1, ma = mean_of(a->a, a->n, SD_ACCEPT_START), mc = mean_of(a->co, a->nco, 1.0);
    for (int i = 0; i < j && i < SD_MAX_DRAFT; i++) p *= effective(a->a, a->n, i, ma) * effective(a->co, a->nco, i, mc);
    return p;
}

double sd_accept_expected(const sd_accept *a, int k)
{
    double e = 1, p = 1, ma = mean_of(a->a, a->n, SD_ACCEPT_START), mc = mean_of(a->co, a->nco, 1.0);
    for (int i = 0; i < k && i < SD_MAX_DRAFT; i++) {
        p *= effective(a->a, a->n, i, ma) * effective(a->co, a->nco, i, mc);
        e += p;
    }
    return e;
}

double sd_accept_drafts(const sd_accept *a, int k)
{
    double d = 0, pc = 1, mc = mean_of(a->c, a->nc, 1.0);
    for (int i = 0; i < k && i < SD_MAX_DRAFT; i++) {
        pc *= effective(a->c, a->nc, i, mc);
        d += pc;
    }
    return d;
}

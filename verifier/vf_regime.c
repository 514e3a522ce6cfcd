/* vf_regime.c — see vf_regime.h. */
#include "vf_regime.h"

#include <string.h>

void sd_vf_regime_init(sd_vf_regime *g)
{
    memset(g, 0, sizeof *g);
    for (int k = 0; k < SD_VF_REGIME_KEYS; k++) {
        g->load[k].winner = -1;
        g->load[k].gap = SD_VF_REGIME_GAP_FIRST;
    }
    g->key = -1;
    g->now = SD_VF_DRAFTING;
}

int sd_vf_regime_key(int n, bool sampled)
{
    int b = n <= 1 ? 0 : n <= 5 ? 1 : n <= 11 ? 2 : 3;
    return 2 * b + sampled;
}

static double load_rate(const sd_vf_regime_load *l, int regime)
{
    return l->blocks[regime] && l->ms[regime] > 0 ? l->tok[regime] / l->ms[regime] : -1;
}

double sd_vf_regime_rate(const sd_vf_regime *g, int regime)
{
    return g->key < 0 ? -1 : load_rate(&g->load[g->key], regime);
}

/* The regime of a block starting under load l, of its first nreg (a
 * loser's rate taken as of now: times the winner's — the best's, before
 * there is one — now over the winner's when the loser's last block ended — the load drifts, e.g. every step
 * slower as the contexts grow, and a rate measured blocks ago would
 * otherwise beat the winner's of now): drafting
 * until it is measured (a block whose steps chose no drafts measures
 * nothing; with three regimes, after 2 * MIN such blocks drafting runs
 * only as a loser); plain none while a drafting regime makes SKIP times its
 * rate; each regime until it has MIN blocks measured (the one with fewest
 * first; after its first, only while its rate is ELIM times the best's or
 * more); then the best, and after gap of its blocks one of another (the
 * losers in turn). */
static int next_regime(sd_vf_regime_load *l, int nreg)
{
    double r[SD_VF_REGIMES];
    for (int x = 0; x < nreg; x++) r[x] = load_rate(l, x);
    int v = l->winner; /* the others' rates as of now: scaled by how the winner's (the best's) moved since */
    for (int x = 0; x < nreg && v < 0; x++)
        if (r[x] > 0 && (v < 0 || r[x] > r[v])) v = x;
    for (int x = 0; x < nreg && v >= 0; x++)
        if (x != v && r[x] > 0 && r[v] > 0 && l->ref[x][v] > 0) r[x] *= r[v] / l->ref[x][v];
    bool dry = nreg > SD_VF_EVERY && l->dry >= 2 * SD_VF_REGIME_MIN;
    if (r[SD_VF_DRAFTING] < 0 && !dry) return SD_VF_DRAFTING;
    double d = nreg > SD_VF_EVERY && r[SD_VF_EVERY] > r[SD_VF_DRAFTING] ? r[SD_VF_EVERY] : r[SD_VF_DRAFTING];
    bool run[SD_VF_REGIMES] = {false};
    int e = -1, w = -1, n = 0;
    double best = d > r[SD_VF_PLAIN] ? d : r[SD_VF_PLAIN];
    for (int x = 0; x < nreg; x++) {
        run[x] = x != SD_VF_PLAIN || r[x] <= 0 || d < SD_VF_REGIME_SKIP * r[x]; /* drafting pays by far: no test */
        if (!run[x]) continue;
        n++;
        bool explore = l->blocks[x] < SD_VF_REGIME_MIN && (x != SD_VF_DRAFTING || !dry) &&
                       (l->blocks[x] == 0 || r[x] >= SD_VF_REGIME_ELIM * best); /* a clear loser: at the gaps */
        if (explore && (e < 0 || l->blocks[x] < l->blocks[e])) e = x;
        if (r[x] >= 0 && (w < 0 || r[x] > r[w])) w = x;
    }
    if (e >= 0) return e;
    if (w < 0) return SD_VF_DRAFTING;
    if (w != l->winner) {
        l->winner = w;
        l->gap = SD_VF_REGIME_GAP_FIRST;
        l->since = 0;
    }
    if (n == 1 || ++l->since <= l->gap) return w;
    l->since = 0;
    l->gap = 2 * l->gap < SD_VF_REGIME_GAP_MAX ? 2 * l->gap : SD_VF_REGIME_GAP_MAX;
    for (int t = 1; t <= SD_VF_REGIMES; t++) { /* the losers in turn */
        int x = (l->turn + t) % SD_VF_REGIMES;
        if (x < nreg && run[x] && x != w) {
            l->turn = x;
            return x;
        }
    }
    return w;
}

int sd_vf_regime_step(sd_vf_regime *g, int key, bool every)
{
    if (!g->open && key >= 0 && key < SD_VF_REGIME_KEYS) { /* a block starts */
        g->open = true;
        g->key = key;
        g->now = next_regime(&g->load[key], every ? SD_VF_REGIMES : SD_VF_EVERY);
    }
    return g->now;
}

void sd_vf_regime_note(sd_vf_regime *g, double tokens, double cycle_ms, bool drafted)
{
    if (!g->open) return;
    g->plain_steps += g->now == SD_VF_PLAIN;
    g->every_steps += g->now == SD_VF_EVERY;
    if (++g->steps > SD_VF_REGIME_WARM && cycle_ms > 0 && tokens > 0) {
        g->blk_tok += tokens;
        g->blk_ms += cycle_ms;
        g->blk_drafted += drafted;
    }
    if (g->steps < SD_VF_REGIME_WARM + SD_VF_REGIME_STEPS) return;
    sd_vf_regime_load *l = &g->load[g->key];
    int r = g->now;
    if (g->blk_ms > 0 && (r == SD_VF_PLAIN || g->blk_drafted > 0)) {
        for (int x = 0; x < SD_VF_REGIMES; x++) { /* every regime's figures age with the load's blocks */
            l->tok[x] *= SD_VF_REGIME_DECAY;
            l->ms[x] *= SD_VF_REGIME_DECAY;
        }
        l->tok[r] += g->blk_tok;
        l->ms[r] += g->blk_ms;
        l->blocks[r]++;
        for (int y = 0; y < SD_VF_REGIMES; y++) /* fresh: the winner's (all, while they take turns) */
            l->ref[r][y] = y != r && (l->winner < 0 || y == l->winner) ? load_rate(l, y) : -1;
    } else if (g->blk_ms > 0 && r == SD_VF_DRAFTING) {
        l->dry++;
    }
    g->steps = 0;
    g->blk_tok = g->blk_ms = 0;
    g->blk_drafted = 0;
    g->open = false;
}

int sd_vf_regime_left(const sd_vf_regime *g)
{
    return g->open && g->now != SD_VF_PLAIN ? SD_VF_REGIME_WARM + SD_VF_REGIME_STEPS - g->steps : 0;
}

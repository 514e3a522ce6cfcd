/* vf_regime.c — see vf_regime.h. */
#include "vf_regime.h"

#include <string.h>

void sd_vf_regime_init(sd_vf_regime *g)
{
    memset(g, 0, sizeof *g);
    g->now = SD_VF_DRAFTING;
    g->winner = -1;
    g->gap = SD_VF_REGIME_GAP_FIRST;
}

bool sd_vf_regime_plain(const sd_vf_regime *g)
{
    return g->now == SD_VF_PLAIN;
}

double sd_vf_regime_rate(const sd_vf_regime *g, int regime)
{
    return g->blocks[regime] && g->ms[regime] > 0 ? g->eq[regime] / g->ms[regime] : -1;
}

/* The regime of the next block. */
static int next_regime(sd_vf_regime *g)
{
    double d = sd_vf_regime_rate(g, SD_VF_DRAFTING), p = sd_vf_regime_rate(g, SD_VF_PLAIN);
    if (d < 0) return SD_VF_DRAFTING;
    if (d >= SD_VF_REGIME_SKIP * (p > 0 ? p : 1)) { /* drafting pays by far: no test */
        g->winner = SD_VF_DRAFTING;
        g->since = 0;
        return SD_VF_DRAFTING;
    }
    if (g->blocks[SD_VF_DRAFTING] < SD_VF_REGIME_MIN || g->blocks[SD_VF_PLAIN] < SD_VF_REGIME_MIN)
        return g->blocks[SD_VF_PLAIN] < g->blocks[SD_VF_DRAFTING] ? SD_VF_PLAIN : SD_VF_DRAFTING;
    int w = p > d ? SD_VF_PLAIN : SD_VF_DRAFTING;
    if (w != g->winner) {
        g->winner = w;
        g->gap = SD_VF_REGIME_GAP_FIRST;
        g->since = 0;
    }
    if (++g->since <= g->gap) return w;
    g->since = 0;
    g->gap = 2 * g->gap < SD_VF_REGIME_GAP_MAX ? 2 * g->gap : SD_VF_REGIME_GAP_MAX;
    return 1 - w;
}

void sd_vf_regime_note(sd_vf_regime *g, double eq_ms, double cycle_ms)
{
    g->plain_steps += g->now == SD_VF_PLAIN;
    if (++g->steps > SD_VF_REGIME_WARM && cycle_ms > 0 && eq_ms > 0) {
        g->blk_eq += eq_ms;
        g->blk_ms += cycle_ms;
    }
    if (g->steps < SD_VF_REGIME_WARM + SD_VF_REGIME_STEPS) return;
    int r = g->now;
    if (g->blk_ms > 0) {
        g->eq[r] = g->eq[r] * SD_VF_REGIME_DECAY + g->blk_eq;
        g->ms[r] = g->ms[r] * SD_VF_REGIME_DECAY + g->blk_ms;
        g->blocks[r]++;
    }
    g->steps = 0;
    g->blk_eq = g->blk_ms = 0;
    g->now = next_regime(g);
}

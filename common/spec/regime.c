/* regime.c — see regime.h. */
#include "regime.h"

#include <string.h>

void sd_regime_init(sd_regime *g)
{
    memset(g, 0, sizeof *g);
    for (int k = 0; k < SD_REGIME_KEYS; k++) {
        g->load[k].winner = -1;
        g->load[k].gap = SD_REGIME_GAP_FIRST;
    }
    g->key = -1;
    g->now = SD_VF_DRAFTING;
}

int sd_regime_key(int n, bool sampled)
{
    int b = n <= 1 ? 0 : n <= 5 ? 1 : n <= 11 ? 2 : 3;
    return 2 * b + sampled;
}

static double load_rate(const sd_regime_load *l, int regime)
{
    return l->blocks[regime] && l->ms[regime] > 0 ? l->tok[regime] / l->ms[regime] : -1;
}

double sd_regime_rate(const sd_regime *g, int regime) { return g->key < 0 ? -1 : load_rate(&g->load[g->key], regime); }

/* The regime of a block starting under load l. */
static int next_regime(sd_regime_load *l)
{
    double d = load_rate(l, SD_VF_DRAFTING), p = load_rate(l, SD_VF_PLAIN);
    if (d < 0) return SD_VF_DRAFTING;
    if (p > 0 && d >= SD_REGIME_SKIP * p) { /* drafting pays by far: no test */
        l->winner = SD_VF_DRAFTING;
        l->since = 0;
        return SD_VF_DRAFTING;
    }
    if (l->blocks[SD_VF_DRAFTING] < SD_REGIME_MIN || l->blocks[SD_VF_PLAIN] < SD_REGIME_MIN)
        return l->blocks[SD_VF_PLAIN] < l->blocks[SD_VF_DRAFTING] ? SD_VF_PLAIN : SD_VF_DRAFTING;
    int w = p > d ? SD_VF_PLAIN : SD_VF_DRAFTING;
    if (w != l->winner) {
        l->winner = w;
        l->gap = SD_REGIME_GAP_FIRST;
        l->since = 0;
    }
    if (++l->since <= l->gap) return w;
    l->since = 0;
    l->gap = 2 * l->gap < SD_REGIME_GAP_MAX ? 2 * l->gap : SD_REGIME_GAP_MAX;
    return 1 - w;
}

bool sd_regime_plain(sd_regime *g, int key)
{
    if (!g->open && key >= 0 && key < SD_REGIME_KEYS) { /* a block starts */
        g->open = true;
        g->key = key;
        g->now = next_regime(&g->load[key]);
    }
    return g->now == SD_VF_PLAIN;
}

void sd_regime_note(sd_regime *g, double tokens, double cycle_ms, bool drafted)
{
    if (!g->open) return;
    g->plain_steps += g->now == SD_VF_PLAIN;
    if (++g->steps > SD_REGIME_WARM && cycle_ms > 0 && tokens > 0) {
        g->blk_tok += tokens;
        g->blk_ms += cycle_ms;
        g->blk_drafted += drafted;
    }
    if (g->steps < SD_REGIME_WARM + SD_REGIME_STEPS) return;
    sd_regime_load *l = &g->load[g->key];
    int r = g->now;
    if (g->blk_ms > 0 && (r == SD_VF_PLAIN || g->blk_drafted > 0)) {
        for (int x = 0; x < 2; x++) { /* both regimes' figures age with the load's blocks */
            l->tok[x] *= SD_REGIME_DECAY;
            l->ms[x] *= SD_REGIME_DECAY;
        }
        l->tok[r] += g->blk_tok;
        l->ms[r] += g->blk_ms;
        l->blocks[r]++;
    }
    g->steps = 0;
    g->blk_tok = g->blk_ms = 0;
    g->blk_drafted = 0;
    g->open = false;
}

void sd_regime_seed(sd_regime *g, int key, int regime, double tokens, double ms)
{
    if (key < 0 || key >= SD_REGIME_KEYS || (regime != SD_VF_DRAFTING && regime != SD_VF_PLAIN) || !(tokens > 0) ||
        !(ms > 0))
        return;
    sd_regime_load *l = &g->load[key];
    l->tok[regime] += tokens;
    l->ms[regime] += ms;
    l->blocks[regime]++;
}

int sd_regime_left(const sd_regime *g)
{
    return g->open && g->now == SD_VF_DRAFTING ? SD_REGIME_WARM + SD_REGIME_STEPS - g->steps : 0;
}

/* vf_span.c — see vf_span.h. */
#include "vf_span.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "span.h"

void sd_vf_spans_init(sd_vf_spans *sp) { memset(sp, 0, sizeof *sp); }

void sd_vf_spans_release(sd_vf_spans *sp)
{
    for (int i = 0; i < SD_VF_MAX_SPANS; i++) free(sp->s[i].qbuf);
    free(sp->hash);
    uint64_t stale = sp->stale;
    sd_vf_spans_init(sp);
    sp->stale = stale;
}

void sd_vf_spans_clear(sd_vf_spans *sp) { sp->n = 0; }

sd_status sd_vf_spans_sync(sd_vf_spans *sp, const int32_t *c, int L)
{
    if (L < 0) return SD_ERR_ARG;
    if (sd_grow(&sp->hash, &sp->hash_cap, (size_t)L + 1, sizeof *sp->hash) != SD_OK) return SD_ERR_NOMEM;
    if (sp->n_hash == 0) {
        sp->hash[0] = SD_SPAN_HASH_SEED;
        sp->n_hash = 1;
    }
    for (int i = sp->n_hash - 1; i < L; i++) sp->hash[i + 1] = sd_span_hash(sp->hash[i], &c[i], 1);
    if (sp->n_hash < L + 1) sp->n_hash = L + 1;
    return SD_OK;
}

uint64_t sd_vf_spans_hash(const sd_vf_spans *sp, int len) { return len >= 0 && len < sp->n_hash ? sp->hash[len] : 0; }

/* True when p is a usable q list for token d. */
static bool q_ok(const Specd__Proposal *p, int32_t d, int vocab)
{
    if (!p || p->n_q == 0) return false;
    bool has_d = false;
    for (size_t j = 0; j < p->n_q; j++) {
        const Specd__TokenProb *tp = p->q[j];
        if (!tp || tp->token < 0 || tp->token >= vocab || !isfinite(tp->prob) || tp->prob < 0.0f || tp->prob > 1.0f)
            return false;
        if (tp->token == d && tp->prob > 0.0f) has_d = true;
    }
    return has_d;
}

/* Copies res's q lists into span s; false when they are unusable (or memory
 * runs out). */
static bool copy_q(sd_vf_span *s, const Specd__DraftResult *res, int vocab)
{
    size_t total = 0;
    for (int i = 0; i < s->n; i++) {
        if (!q_ok(res->q[i], s->tokens[i], vocab)) return false;
        total += res->q[i]->n_q;
    }
    if (sd_grow(&s->qbuf, &s->qcap, total, sizeof *s->qbuf) != SD_OK) return false;
    size_t off = 0;
    for (int i = 0; i < s->n; i++) {
        const Specd__Proposal *p = res->q[i];
        s->qoff[i] = off;
        s->nq[i] = p->n_q;
        for (size_t j = 0; j < p->n_q; j++) s->qbuf[off + j] = (sd_tokprob){p->q[j]->token, p->q[j]->prob};
        off += p->n_q;
    }
    return true;
}

/* Removes span i, keeping its q buffer for reuse. */
static void drop(sd_vf_spans *sp, int i)
{
    sd_vf_span gone = sp->s[i];
    memmove(&sp->s[i], &sp->s[i + 1], (size_t)(sp->n - i - 1) * sizeof sp->s[0]);
    sp->s[sp->n - 1] = gone;
    sp->n--;
}

bool sd_vf_spans_add(sd_vf_spans *sp, const Specd__DraftResult *res, int vocab, double arrived_ms)
{
    if ((res->n_tokens == 0 && !res->dry) || res->n_tokens > SD_VF_SPAN_MAX_TOKENS) return false;
    for (size_t i = 0; i < res->n_tokens; i++)
        if (res->tokens[i] < 0 || res->tokens[i] >= vocab) return false;
    if (sp->n == SD_VF_MAX_SPANS) drop(sp, sp->s[0].in_use ? 1 : 0); /* full: the oldest unused goes */
    sd_vf_span *s = &sp->s[sp->n];
    s->in_use = false;
    s->base_len = res->base_len;
    s->base_hash = res->base_hash;
    s->n = (int)res->n_tokens;
    s->has_q = false;
    if (res->n_tokens) memcpy(s->tokens, res->tokens, res->n_tokens * sizeof *s->tokens);
    /* bad q: the tokens still serve (match / greedy) */
    s->has_q = res->n_tokens > 0 && res->n_q == res->n_tokens && copy_q(s, res, vocab);
    s->draft_us = res->draft_us;
    s->dry = res->dry;
    s->arrived_ms = arrived_ms;
    sp->n++;
    return true;
}

/* Drafts span s offers for c[0..L): -1 when stale, else how many tokens
 * remain past L (0: nothing left). */
static int remaining(const sd_vf_spans *sp, const sd_vf_span *s, const int32_t *c, int L)
{
    int b = (int)s->base_len;
    if (b > L || b >= sp->n_hash || sp->hash[b] != s->base_hash) return -1;
    int seen = L - b < s->n ? L - b : s->n;
    for (int i = 0; i < seen; i++)
        if (s->tokens[i] != c[b + i]) return -1;
    return s->n - seen;
}

int sd_vf_spans_pick(sd_vf_spans *sp, const int32_t *c, int L, int budget, bool want_q, sd_proposal *prop,
                     const sd_vf_span **used)
{
    memset(prop, 0, sizeof *prop);
    if (used) *used = NULL;
    int best = -1, best_left = 0;
    for (int i = 0; i < sp->n;) {
        int left = remaining(sp, &sp->s[i], c, L);
        if (left <= 0) {
            if (left < 0) sp->stale++;
            else if (sp->s[i].dry) sp->dry++;
            drop(sp, i);
            continue;
        }
        if (left >= best_left) {
            best = i;
            best_left = left;
        }
        i++;
    }
    for (int i = 0; i < sp->n; i++) sp->s[i].in_use = false;
    if (best < 0 || budget <= 0) return 0;
    sd_vf_span *s = &sp->s[best];
    s->in_use = true;
    int off = L - (int)s->base_len;
    int n = best_left < budget ? best_left : budget;
    if (n > SD_MAX_DRAFT) n = SD_MAX_DRAFT;
    for (int i = 0; i < n; i++) {
        prop->tokens[i] = s->tokens[off + i];
        if (s->has_q && want_q) {
            prop->q[i] = s->qbuf + s->qoff[off + i];
            prop->nq[i] = s->nq[off + i];
        }
    }
    prop->n = n;
    if (used) *used = s;
    return n;
}

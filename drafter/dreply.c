/* dreply.c — see dreply.h. */
#include "dreply.h"

#include <stdlib.h>
#include <string.h>

/* Token t of span s (assumed ones first). */
static int32_t token_at(const sd_dspan *s, int t)
{
    return t < s->n_assumed ? s->assumed[t] : s->p->tokens[t - s->n_assumed];
}

static int n_tokens(const sd_dspan *s) { return s->n_assumed + (s->p ? s->p->n : 0); }

/* Entries of token t's q list. */
static size_t q_len(const sd_dspan *s, int t)
{
    if (t < s->n_assumed) return 1;
    const sd_proposal *p = s->p;
    int i = t - s->n_assumed;
    return p->q[i] ? p->nq[i] : 1;
}

/* Fills q list t of span s into pb / tb starting at tb[*it]. */
static void fill_q(const sd_dspan *s, int t, Specd__Proposal *pb, Specd__TokenProb *tb, Specd__TokenProb **tp,
                   size_t *it)
{
    specd__proposal__init(pb);
    size_t nq = q_len(s, t);
    const sd_tokprob *q = t >= s->n_assumed ? s->p->q[t - s->n_assumed] : NULL;
    pb->n_q = nq;
    pb->q = &tp[*it];
    for (size_t j = 0; j < nq; j++, (*it)++) {
        specd__token_prob__init(&tb[*it]);
        tb[*it].token = q ? q[j].token : token_at(s, t);
        tb[*it].prob = q ? q[j].prob : 1.0f;
        tp[*it] = &tb[*it];
    }
}

sd_status sd_dreply_build(sd_dreply *r, uint64_t step, const sd_dspan *spans, size_t n)
{
    memset(r, 0, sizeof *r);
    size_t ntok = 0, nprop = 0, nprob = 0;
    for (size_t i = 0; i < n; i++) {
        const sd_dspan *s = &spans[i];
        int nt = n_tokens(s);
        ntok += (size_t)nt;
        if (!s->with_q || nt == 0) continue;
        nprop += (size_t)nt;
        for (int t = 0; t < nt; t++) nprob += q_len(s, t);
    }
    r->res = calloc(n ? n : 1, sizeof *r->res);
    r->resp = calloc(n ? n : 1, sizeof *r->resp);
    r->toks = calloc(ntok ? ntok : 1, sizeof *r->toks);
    r->pb = calloc(nprop ? nprop : 1, sizeof *r->pb);
    r->pp = calloc(nprop ? nprop : 1, sizeof *r->pp);
    r->tb = calloc(nprob ? nprob : 1, sizeof *r->tb);
    r->tp = calloc(nprob ? nprob : 1, sizeof *r->tp);
    if (!r->res || !r->resp || !r->toks || !r->pb || !r->pp || !r->tb || !r->tp) {
        sd_dreply_free(r);
        return SD_ERR_NOMEM;
    }
    size_t ik = 0, ip = 0, it = 0;
    for (size_t i = 0; i < n; i++) {
        const sd_dspan *s = &spans[i];
        Specd__DraftResult *res = &r->res[i];
        specd__draft_result__init(res);
        r->resp[i] = res;
        res->request_id = s->id;
        res->need_open = s->need_open;
        res->base_len = s->base_len;
        res->base_hash = s->base_hash;
        res->draft_us = s->draft_us;
        res->dry = s->dry;
        int nt = n_tokens(s);
        res->tokens = &r->toks[ik];
        res->n_tokens = (size_t)nt;
        for (int t = 0; t < nt; t++) r->toks[ik++] = token_at(s, t);
        if (!s->with_q || nt == 0) continue;
        res->n_q = (size_t)nt;
        res->q = &r->pp[ip];
        for (int t = 0; t < nt; t++, ip++) {
            fill_q(s, t, &r->pb[ip], r->tb, r->tp, &it);
            r->pp[ip] = &r->pb[ip];
        }
    }
    specd__draft_reply__init(&r->rep);
    r->rep.step = step;
    r->rep.n_results = n;
    r->rep.results = r->resp;
    return SD_OK;
}

void sd_dreply_free(sd_dreply *r)
{
    free(r->res);
    free(r->resp);
    free(r->toks);
    free(r->pb);
    free(r->pp);
    free(r->tb);
    free(r->tp);
    memset(r, 0, sizeof *r);
}

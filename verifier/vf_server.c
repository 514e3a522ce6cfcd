/* vf_server.c — router side of the verifier: requests, admission, steps,
 * token events, health (see vf_server.h). */
#include "vf_server.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "clock.h"
#include "log.h"
#include "curve.h"
#include "msg.h"
#include "ngram.h"
#include "vf_adapt.h"
#include "vf_convert.h"
#include "vf_draft.h"
#include "vf_front.h"
#include "vf_link.h"
#include "vf_pace.h"

#define IDLE_POLL_MS 100
#define PUBLISH_MS 20   /* health published to the front thread at most this often */
#define LINK_POLL_MS 20 /* while requests run, the drafter link is read between steps at most this often */
#define MAX_DRAIN 1024 /* router messages handled between two steps */
#define CALIBRATE_MS 2000.0 /* the most time the start-up measurement of the step cost may take */

/* One request: the engine request, its drafter state and its router. */
typedef struct vf_req {
    sd_vf_slot slot;        /* slot.r: the engine request; slot.id == slot.r->id */
    sd_msg_id peer;         /* router identity */
    uint64_t rid;           /* router's request id */
    sd_spec_stats seen;     /* part of slot.r->stats already in the totals */
    sd_vf_pipe_stats seen_pipe; /* likewise for the slot's drafting statistics */
    sd_vf_areq aq;          /* adaptive speculation: its acceptance, the drafts chosen */
} vf_req;

struct sd_vf_server {
    const sd_vf_config *cfg;
    sd_engine *e;
    sd_kv_pool *pool;
    int vocab;
    void *sock;                    /* the main thread's end of the front relay (vf_front.h) */
    sd_vf_front *front;
    double published_ms;           /* when health was last published to the front */
    double link_polled_ms;         /* when the drafter link was last read between steps */
    int published_active, published_queued; /* ... and the request counts it showed */
    uint64_t instance;             /* HealthReply.instance: random per process start */
    sd_curve *curve;               /* --curve-keys: CURVE on both sockets, NULL = plain */
    sd_vf_link *link;
    vf_req **active;
    int n_active;
    vf_req **queue;
    int n_queue;
    uint64_t next_id;
    sd_spec_stats total;    /* summed over requests */
    sd_vf_pipe_stats pipe_total;
    uint64_t tokens_generated;
    uint32_t step_rows_max;        /* the most rows one engine step had */
    uint64_t preemptions;          /* requests that gave their KV back (preempt_for_kv) */
    sd_req **reqs;          /* step scratch, [max_batch] */
    sd_vf_slot **slots;
    sd_proposal *props;
    int *budgets;           /* drafts each request may verify this step */
    int *tell;              /* pipelined: the budget the drafter is told (pre-drafts during prefill too) */
    bool *sampled;          /* per active request: temperature > 0 */
    bool *ready;            /* pipelined: had a span when the step began */
    sd_vf_areq **aqs;       /* step scratch for vf_adapt: the requests' adaptive states */
    int *avail, *offered, *accepted; /* drafts at hand; verified and accepted by the step */
    bool *had_q;            /* those drafts came with q */
    int *catchup;           /* tokens the drafter must first take in for the request (opened, or far behind) */
    int *chunk;             /* prompt tokens each request prefills this step (sd_engine_prefill_plan) */
    double *draft_ms;       /* the drafter's time behind them */
    sd_proposer *ngram;     /* the verifier's own n-gram lookup: --ngram's drafts, else --spec-fallback's for
                             * requests the drafter left without drafts, and serial steps' lookup first */
    sd_proposer *local;     /* --draft-model: the draft model in this process (sd_vf_server_use_proposer) */
    int *fb_avail;          /* the fallback's drafts at hand for each request (0: not a candidate) */
    int *fb_k;              /* the drafts each request verifies (the fallback's choice for the candidates) */
    sd_propose_item *fb_items;
    sd_proposal *fb_out;
    int *lk_match;          /* serial, the lookup asked before the drafter: the n-gram length that matched */
    uint32_t lk_us;         /* ... and its time per request (µs) */
    sd_vf_adapt ad;         /* adaptive speculation: measured cost and acceptance, the scheduler */
    sd_vf_pace pace;        /* pipelined: when waiting for drafts pays */
    char host[256];         /* gethostname */
    int threads, ncpu;      /* the CPU backend's threads (0: not on the CPU), CPUs of this process */
    int pipe_on;            /* the last pipelining decision, -1 before the first (for the log) */
    bool lost;              /* the device is lost (sd_backend_lost): the serving loop ends */
    double last_step_end_ms;/* 0 after an idle spell */
    double step_begin_ms;   /* when this step's planning began */
    char model_name[256];
};

/* Whether requests may verify drafts: a drafter's, or the verifier's own (--ngram's lookup, --draft-model's). */
static bool speculates(const sd_vf_server *s)
{
    return s->link || s->cfg->ngram || s->local;
}

/* ------------------------------------------------------------ messages */

static void send_to(sd_vf_server *s, const sd_msg_id *peer, const Specd__Envelope *env)
{
    char err[256];
    if (sd_msg_send(s->sock, peer, env, err, sizeof err) != SD_OK) SD_WARN_LIMITED("send to router failed: %s", err);
}

static void send_error(sd_vf_server *s, const sd_msg_id *peer, uint64_t rid, const char *code, const char *msg)
{
    Specd__ErrorEvent ev = SPECD__ERROR_EVENT__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    ev.request_id = rid;
    ev.code = (char *)code;
    ev.message = (char *)msg;
    env.body_case = SPECD__ENVELOPE__BODY_ERROR;
    env.error = &ev;
    send_to(s, peer, &env);
}

/* Sets ev's log-probabilities from r (which asked for them): those of its n
 * newest tokens, and with the first output tokens of a fresh request those of
 * its prompt. Returns the blocks to free after sending (NULL entries when
 * none, or out of memory: the event goes without). */
static void attach_logprobs(const sd_req *r, int n, Specd__TokenEvent *ev, void *blocks[2])
{
    blocks[0] = blocks[1] = NULL;
    if (!r || !r->lp || n <= 0) return;
    int top = r->p.top_logprobs;
    Specd__TokenLogprob **lp = sd_vf_logprobs_to_proto(r->lp, (size_t)n, top);
    if (lp) {
        ev->logprobs = lp;
        ev->n_logprobs = (size_t)n;
        blocks[0] = lp;
    }
    if (!r->prompt_lp || sd_req_n_output(r) != n || r->n_prompt < 2) return;
    Specd__TokenLogprob **pl = sd_vf_logprobs_to_proto(r->prompt_lp + 1, (size_t)r->n_prompt - 1, top);
    if (pl) {
        ev->prompt_logprobs = pl;
        ev->n_prompt_logprobs = (size_t)r->n_prompt - 1;
        blocks[1] = pl;
    }
}

/* A TokenEvent with tokens[0..n); stats always set (ps: drafting, as: the
 * adaptive figures; either may be NULL); lp: the request, when its
 * log-probabilities go with the tokens. */
static void send_tokens(sd_vf_server *s, const sd_msg_id *peer, uint64_t rid, const int32_t *tokens, int n,
                        sd_finish fin, int n_prompt, int n_output, const sd_spec_stats *st, int n_at,
                        const sd_vf_pipe_stats *ps, Specd__AdaptStats *as, const sd_req *r)
{
    void *blocks[2];
    static const sd_spec_stats zero;
    Specd__SpecStats ss;
    Specd__PipeStats pb;
    Specd__TokenEvent ev = SPECD__TOKEN_EVENT__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    sd_vf_stats_to_proto(st ? st : &zero, st ? n_at : 0, &ss);
    if (ps) {
        sd_vf_pipe_stats_to_proto(ps, &pb);
        ss.pipe = &pb;
    }
    ss.adapt = as;
    ev.request_id = rid;
    ev.tokens = (int32_t *)tokens;
    ev.n_tokens = (size_t)(n > 0 ? n : 0);
    ev.finish = sd_vf_finish_to_proto(fin);
    ev.prompt_tokens = (uint32_t)n_prompt;
    ev.completion_tokens = (uint32_t)n_output;
    ev.stats = &ss;
    if (r) ev.cached_tokens = (uint32_t)(r->shared < r->n_prompt ? r->shared : r->n_prompt);
    attach_logprobs(r, n, &ev, blocks);
    env.body_case = SPECD__ENVELOPE__BODY_TOKEN_EVENT;
    env.token_event = &ev;
    send_to(s, peer, &env);
    free(blocks[0]);
    free(blocks[1]);
}

/* Tokens committed by the last step (or none) for vr, with its finish. */
static void send_req_event(sd_vf_server *s, const vf_req *vr, bool with_new)
{
    const sd_req *r = vr->slot.r;
    int n = with_new ? r->n_new : 0;
    int n_at = r->p.speculate ? r->p.num_draft : 0;
    sd_vf_pipe_stats ps = sd_vf_slot_stats(&vr->slot);
    Specd__AdaptStats as;
    float acc[SD_MAX_DRAFT];
    sd_vf_adapt_stats_to_proto(&vr->aq, acc, &as);
    send_tokens(s, &vr->peer, vr->rid, r->tokens + r->n_tokens - n, n, r->finish, r->n_prompt, sd_req_n_output(r),
                &r->stats, n_at, r->p.speculate ? &ps : NULL, r->p.speculate ? &as : NULL, r);
}

/* A request that never got an engine request: ErrorEvent + final event. */
static void reject(sd_vf_server *s, const sd_msg_id *peer, uint64_t rid, int n_prompt, const char *code,
                   const char *msg)
{
    SD_INFO("request %llu rejected: %s: %s", (unsigned long long)rid, code, msg);
    send_error(s, peer, rid, code, msg);
    send_tokens(s, peer, rid, NULL, 0, SD_FINISH_ERROR, n_prompt, 0, NULL, 0, NULL, NULL, NULL);
}

/* ------------------------------------------------------------ requests */

static bool same_peer(const sd_msg_id *a, const sd_msg_id *b)
{
    return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

/* Index of (peer, rid) in list[0..n), or -1. */
static int find_req(vf_req *const *list, int n, const sd_msg_id *peer, uint64_t rid)
{
    for (int i = 0; i < n; i++)
        if (list[i]->rid == rid && same_peer(&list[i]->peer, peer)) return i;
    return -1;
}

/* Frees vr (releasing its KV) after telling the drafter. */
static void req_destroy(sd_vf_server *s, vf_req *vr)
{
    if (s->link) sd_vf_link_close(s->link, &vr->slot);
    if (s->local) s->local->ops->release(s->local, vr->slot.id);
    sd_req_free(s->e, vr->slot.r);
    sd_vf_slot_release(&vr->slot);
    free(vr);
}

static void remove_at(vf_req **list, int *n, int i)
{
    memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
    (*n)--;
}

static void on_submit(sd_vf_server *s, const sd_msg_id *peer, const Specd__Submit *sub)
{
    char err[256];
    sd_req_params p;
    int np = (int)sub->n_prompt_ids;
    if (find_req(s->active, s->n_active, peer, sub->request_id) >= 0 ||
        find_req(s->queue, s->n_queue, peer, sub->request_id) >= 0) {
        send_error(s, peer, sub->request_id, "bad_request", "duplicate request_id");
        return; /* no final event: it would end the live request on the router */
    }
    if (s->n_queue >= SD_VF_QUEUE_MAX) {
        reject(s, peer, sub->request_id, np, "overloaded", "the verifier's queue is full");
        return;
    }
    int k_default = s->cfg->spec_adaptive ? s->cfg->spec_max_draft : s->cfg->num_draft;
    if (sd_vf_params_from_submit(sub, k_default, speculates(s), &p, err, sizeof err) != SD_OK) {
        reject(s, peer, sub->request_id, np, "bad_request", err);
        return;
    }
    vf_req *vr = calloc(1, sizeof *vr);
    if (!vr) {
        reject(s, peer, sub->request_id, np, "internal", "out of memory");
        return;
    }
    sd_status st = sd_req_new(s->e, ++s->next_id, sub->prompt_ids, np, &p, &vr->slot.r, err, sizeof err);
    if (st != SD_OK) {
        free(vr);
        reject(s, peer, sub->request_id, np, st == SD_ERR_NOMEM ? "internal" : "bad_request", err);
        return;
    }
    if (sub->n_resume_ids > 0 &&
        sd_req_resume(s->e, vr->slot.r, sub->resume_ids, (int)sub->n_resume_ids, err, sizeof err) != SD_OK) {
        sd_req_free(s->e, vr->slot.r);
        free(vr);
        reject(s, peer, sub->request_id, np, "bad_request", err);
        return;
    }
    vr->slot.id = vr->slot.r->id;
    /* a request that set its own num_draft keeps it; otherwise the scheduler chooses */
    sd_vf_areq_init(&vr->aq, !s->cfg->spec_adaptive || (sub->spec && sub->spec->num_draft > 0));
    vr->peer = *peer;
    vr->rid = sub->request_id;
    s->queue[s->n_queue++] = vr;
    SD_DEBUG("request %llu queued (%d prompt tokens, max %d, spec %d)", (unsigned long long)vr->rid, np,
             p.max_tokens, (int)p.speculate);
}

static void on_cancel(sd_vf_server *s, const sd_msg_id *peer, const Specd__Cancel *c)
{
    vf_req **list = s->active;
    int *n = &s->n_active;
    int i = find_req(list, *n, peer, c->request_id);
    if (i < 0) {
        list = s->queue;
        n = &s->n_queue;
        i = find_req(list, *n, peer, c->request_id);
    }
    if (i < 0) {
        SD_DEBUG("cancel for unknown request %llu ignored", (unsigned long long)c->request_id);
        return;
    }
    vf_req *vr = list[i];
    remove_at(list, n, i);
    sd_req_cancel(s->e, vr->slot.r);
    send_req_event(s, vr, false);
    SD_DEBUG("request %llu cancelled", (unsigned long long)vr->rid);
    req_destroy(s, vr);
}

/* Builds the health reply for nonce and sends it to peer, or with peer NULL
 * publishes it to the front thread (which answers routers with it while a
 * step runs). */
static void health(sd_vf_server *s, const sd_msg_id *peer, uint64_t nonce)
{
    Specd__Stats st = SPECD__STATS__INIT;
    Specd__HealthReply rep = SPECD__HEALTH_REPLY__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    int n_at = s->cfg->num_draft;
    for (int i = 0; i < SD_MAX_DRAFT; i++)
        if (s->total.accepted_at[i] && i + 1 > n_at) n_at = i + 1;
    st.active_requests = (uint32_t)s->n_active;
    st.queued_requests = (uint32_t)s->n_queue;
    st.kv_blocks_total = (uint32_t)sd_kv_pool_total(s->pool);
    st.kv_blocks_free = (uint32_t)sd_kv_pool_free_count(s->pool);
    st.steps = s->total.steps;
    st.draft_tokens = s->total.draft_tokens;
    st.accepted_tokens = s->total.accepted_tokens;
    st.accepted_at = s->total.accepted_at;
    st.n_accepted_at = (size_t)n_at;
    st.tokens_generated = s->tokens_generated;
    st.step_rows_max = s->step_rows_max;
    st.preemptions = s->preemptions;
    sd_engine_prefix_stats(s->e, &st.prefix_queries, &st.prefix_hits);
    st.prefix_cached_blocks = (uint32_t)sd_kv_pool_cached_count(s->pool);
    st.prefix_evictions = sd_kv_pool_evictions(s->pool);
    st.drafter_up = s->link && sd_vf_link_up(s->link);
    if (s->link) {
        sd_vf_drafter_stats ds = sd_vf_link_drafter_stats(s->link);
        st.drafter_requests = ds.requests;
        st.drafter_kv_blocks_total = ds.kv_total;
        st.drafter_kv_blocks_free = ds.kv_free;
    }
    Specd__PipeStats pb;
    sd_vf_pipe_stats_to_proto(&s->pipe_total, &pb);
    st.pipe = &pb;
    st.k_chosen = s->ad.k_hist;
    st.n_k_chosen = SD_MAX_DRAFT + 1;
    while (st.n_k_chosen > 0 && s->ad.k_hist[st.n_k_chosen - 1] == 0) st.n_k_chosen--;
    st.step_predicted_us = s->ad.pred_us;
    st.step_measured_us = s->ad.meas_us;
    st.step_error_us = s->ad.err_us;
    st.regime_plain_steps = s->ad.rg.plain_steps;
    double rd = sd_vf_regime_rate(&s->ad.rg, SD_VF_DRAFTING), rp = sd_vf_regime_rate(&s->ad.rg, SD_VF_PLAIN);
    st.regime_rate_drafting = rd > 0 ? (float)rd : 0;
    st.regime_rate_plain = rp > 0 ? (float)rp : 0;
    Specd__AcceptEstimate est[SD_VF_ACCEPT_KEYS], *estp[SD_VF_ACCEPT_KEYS];
    float est_buf[SD_VF_ACCEPT_KEYS][SD_MAX_DRAFT];
    st.n_accept = (size_t)sd_vf_adapt_estimates(&s->ad, est, est_buf, SD_VF_ACCEPT_KEYS);
    for (size_t i = 0; i < st.n_accept; i++) estp[i] = &est[i];
    st.accept = estp;
    rep.nonce = nonce;
    rep.role = "verifier";
    rep.model = s->model_name;
    rep.stats = &st;
    rep.max_context = (uint32_t)sd_model_cfg(sd_engine_model(s->e))->max_position;
    rep.vocab_size = (uint32_t)s->vocab;
    rep.host = s->host;
    rep.device = (char *)s->cfg->device;
    rep.threads = (uint32_t)s->threads;
    rep.instance = s->instance;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REPLY;
    env.health_reply = &rep;
    if (peer) send_to(s, peer, &env);
    else if (sd_vf_front_publish(s->front, &env) != SD_OK) SD_WARN_LIMITED("out of memory publishing health");
}

/* Publishes health to the front thread, which answers with it during the
 * next computation: when requests came or went since the last publication,
 * else at most every PUBLISH_MS (called before each step). */
static void publish_health(sd_vf_server *s)
{
    double now = sd_now_ms();
    if (s->n_active == s->published_active && s->n_queue == s->published_queued && now - s->published_ms < PUBLISH_MS)
        return;
    s->published_ms = now;
    s->published_active = s->n_active;
    s->published_queued = s->n_queue;
    health(s, NULL, 0);
}

static void on_health(sd_vf_server *s, const sd_msg_id *peer, const Specd__HealthRequest *h)
{
    health(s, peer, h->nonce);
}

/* Handles everything waiting on the router socket (bounded). */
static sd_status drain_router(sd_vf_server *s)
{
    for (int k = 0; k < MAX_DRAIN; k++) {
        char err[256];
        sd_msg_id peer;
        Specd__Envelope *env = NULL;
        sd_status st = sd_msg_recv(s->sock, &peer, &env, SD_MSG_DONTWAIT, err, sizeof err);
        if (st == SD_ERR_TIMEOUT) return SD_OK;
        if (st == SD_ERR_FORMAT) {
            SD_WARN_LIMITED("dropped a malformed message from a router: %s", err);
            continue;
        }
        if (st != SD_OK) {
            SD_ERROR("router socket: %s", err);
            return SD_ERR_IO;
        }
        switch (env->body_case) {
        case SPECD__ENVELOPE__BODY_SUBMIT: on_submit(s, &peer, env->submit); break;
        case SPECD__ENVELOPE__BODY_CANCEL: on_cancel(s, &peer, env->cancel); break;
        case SPECD__ENVELOPE__BODY_HEALTH_REQUEST: on_health(s, &peer, env->health_request); break;
        default: SD_DEBUG("dropped unexpected %s from a router", sd_msg_kind(env)); break;
        }
        sd_msg_free(env);
    }
    return SD_OK;
}

/* ------------------------------------------------------------ scheduling */

/* Blocks still owed to admitted requests that are prefilling. */
static int promised_blocks(const sd_vf_server *s)
{
    int sum = 0;
    for (int i = 0; i < s->n_active; i++) {
        const sd_req *r = s->active[i]->slot.r;
        if (!sd_req_prefilling(r)) continue;
        int need = sd_kv_blocks_for(s->pool, r->n_tokens + 1) - r->kv.n_blocks;
        if (need > 0) sum += need;
    }
    return sum;
}

/* KV blocks the next step of r takes beyond those it owns: its next prompt
 * chunk, or one decode position (drafts are dropped first when KV is short). */
static int step_blocks(const sd_vf_server *s, const sd_req *r)
{
    if (r->finish != SD_FINISH_NONE) return 0;
    int len = r->kv.len;
    if (sd_req_prefilling(r)) {
        int chunk = r->prefill_to - r->n_prefilled;
        len += chunk < s->cfg->prefill_chunk ? chunk : s->cfg->prefill_chunk;
    } else {
        len += 1;
    }
    int need = sd_kv_blocks_for(s->pool, len) - r->kv.n_blocks;
    return need > 0 ? need : 0;
}

/* Before a step: when the KV pool cannot hold what the active requests'
 * next step takes, the requests admitted last give theirs back
 * (sd_req_preempt) and wait at the head of the queue, to prefill again and
 * go on when there is room — instead of a request failing mid-stream. The
 * oldest request is never preempted: it has the pool to itself at worst. */
static void preempt_for_kv(sd_vf_server *s)
{
    for (;;) {
        int need = 0;
        for (int i = 0; i < s->n_active; i++) need += step_blocks(s, s->active[i]->slot.r);
        if (need <= sd_kv_pool_free_count(s->pool) || s->n_active <= 1) return;
        vf_req *vr = s->active[--s->n_active];
        sd_req_preempt(s->e, vr->slot.r);
        memmove(s->queue + 1, s->queue, (size_t)s->n_queue * sizeof *s->queue);
        s->queue[0] = vr;
        s->n_queue++;
        s->preemptions++;
        SD_DEBUG("request %llu preempted: the KV pool is short (%d blocks needed, %d free)",
                 (unsigned long long)vr->rid, need, sd_kv_pool_free_count(s->pool));
    }
}

/* Moves queued requests into the active set, oldest first, while the KV pool
 * can hold their prompts (beyond what admitted prompts still need). */
static void admit(sd_vf_server *s)
{
    while (s->n_queue > 0 && s->n_active < s->cfg->max_batch) {
        vf_req *vr = s->queue[0];
        const sd_req *r = vr->slot.r;
        int need = sd_kv_blocks_for(s->pool, r->n_tokens + 1);
        if (need > sd_kv_pool_total(s->pool)) {
            remove_at(s->queue, &s->n_queue, 0);
            reject(s, &vr->peer, vr->rid, r->n_prompt, "kv_exhausted", "the prompt does not fit the KV pool");
            req_destroy(s, vr);
            continue;
        }
        /* room for it, for what admitted prompts still need, and for the running requests' next step */
        int growth = 0;
        for (int i = 0; i < s->n_active; i++)
            if (!sd_req_prefilling(s->active[i]->slot.r)) growth += step_blocks(s, s->active[i]->slot.r);
        if (!sd_engine_can_admit(s->e, r) || need + promised_blocks(s) + growth > sd_kv_pool_free_count(s->pool))
            break;
        remove_at(s->queue, &s->n_queue, 0);
        s->active[s->n_active++] = vr;
        SD_DEBUG("request %llu admitted (%d active)", (unsigned long long)vr->rid, s->n_active);
    }
}

/* Adds the stats the last step produced for vr to the totals. */
static void account(sd_vf_server *s, vf_req *vr)
{
    const sd_spec_stats *st = &vr->slot.r->stats;
    s->total.steps += st->steps - vr->seen.steps;
    s->total.draft_tokens += st->draft_tokens - vr->seen.draft_tokens;
    s->total.accepted_tokens += st->accepted_tokens - vr->seen.accepted_tokens;
    for (int i = 0; i < SD_MAX_DRAFT; i++) s->total.accepted_at[i] += st->accepted_at[i] - vr->seen.accepted_at[i];
    vr->seen = *st;
    s->tokens_generated += (uint64_t)(vr->slot.r->n_new > 0 ? vr->slot.r->n_new : 0);
    sd_vf_pipe_stats now = sd_vf_slot_stats(&vr->slot);
    sd_vf_pipe_stats_add(&s->pipe_total, &now, 1);
    sd_vf_pipe_stats_add(&s->pipe_total, &vr->seen_pipe, -1);
    vr->seen_pipe = now;
}

/* Streams what the last step committed; retires finished requests. */
static void emit(sd_vf_server *s)
{
    for (int i = 0; i < s->n_active;) {
        vf_req *vr = s->active[i];
        sd_req *r = vr->slot.r;
        account(s, vr);
        if (r->finish == SD_FINISH_ERROR) {
            SD_WARN("request %llu failed: %s", (unsigned long long)vr->rid, r->error);
            send_error(s, &vr->peer, vr->rid, sd_vf_error_code(r->error), r->error[0] ? r->error : "internal error");
        }
        if (r->n_new > 0 || r->finish != SD_FINISH_NONE) send_req_event(s, vr, true);
        if (r->finish == SD_FINISH_NONE) {
            i++;
            continue;
        }
        remove_at(s->active, &s->n_active, i);
        req_destroy(s, vr);
    }
}

/* Fills the step scratch for the active set: requests, slots, whether they
 * sample, and the most drafts each may verify (its num_draft or the
 * adaptive maximum, the room left, the --spec-max-batch* caps). */
static void plan_step(sd_vf_server *s)
{
    preempt_for_kv(s);
    int n = s->n_active;
    for (int i = 0; i < n; i++) {
        s->reqs[i] = s->active[i]->slot.r;
        s->slots[i] = &s->active[i]->slot;
        s->aqs[i] = &s->active[i]->aq;
        s->aqs[i]->match = 0;
        s->budgets[i] = speculates(s) ? sd_req_draft_budget(s->e, s->reqs[i]) : 0;
        s->sampled[i] = s->reqs[i]->p.sampling.temperature > 0.0f;
        s->ready[i] = false;
        /* drafting for a request the drafter must first catch up on costs more than its drafts (the
         * verifier's own lookup has nothing to catch up on) */
        const sd_vf_slot *sl = s->slots[i];
        int behind = s->reqs[i]->n_tokens - sl->drafter_known;
        s->catchup[i] = !s->link && !s->local     ? 0
                        : sl->drafter_known == 0 ? s->reqs[i]->n_tokens
                        : behind > SD_MAX_DRAFT + 1 ? behind
                                                    : 0;
    }
    sd_engine_share_prefixes(s->e, s->reqs, n);
    sd_engine_prefill_plan(s->e, s->reqs, n, s->chunk);
    if (speculates(s))
        sd_vf_limit_budgets(s->budgets, s->sampled, n, s->cfg->spec_max_batch, s->cfg->spec_max_batch_sampled);
}

/* Chooses the drafts each request verifies this step (vf_adapt.h): budgets
 * become the choice; avail (NULL: serial) the drafts at hand; tell (NULL:
 * serial) how far ahead the drafter drafts. Returns the requests with drafts. */
static int choose_drafts(sd_vf_server *s, const int *avail, int *tell, bool pipelined)
{
    int n = s->n_active, free = sd_kv_pool_free_count(s->pool) - promised_blocks(s), drafting = 0;
    if (sd_vf_adapt_plan(&s->ad, s->reqs, s->aqs, s->budgets, avail, s->catchup, tell, n, free,
                         sd_kv_pool_block_size(s->pool), s->chunk, pipelined) != SD_OK)
        SD_WARN("out of memory choosing draft lengths: drafting as many as allowed");
    for (int i = 0; i < n; i++) drafting += s->budgets[i] > 0;
    return drafting;
}

/* Batch rows request i puts into this step. */
static int rows_of(const sd_vf_server *s, int i)
{
    const sd_req *r = s->reqs[i];
    if (r->finish != SD_FINISH_NONE) return 0;
    if (sd_req_prefilling(r)) return s->chunk[i];
    return 1 + s->slots[i]->prop.n;
}

/* After the engine step: what each request verified and accepted, for the
 * adaptive model (before emit, which may retire requests). */
static void note_step(sd_vf_server *s, double wall_ms, double cycle_ms, bool pipelined)
{
    int n = s->n_active;
    for (int i = 0; i < n; i++) {
        const vf_req *vr = s->active[i];
        const sd_req *r = vr->slot.r;
        s->offered[i] = (int)(r->stats.draft_tokens - vr->seen.draft_tokens);
        s->accepted[i] = (int)(r->stats.accepted_tokens - vr->seen.accepted_tokens);
        s->had_q[i] = s->props[i].n > 0 && s->props[i].q[0] != NULL;
        s->draft_ms[i] = s->props[i].n > 0 ? vr->slot.prop_draft_us / 1e3 : 0;
    }
    const sd_step_timing *tm = sd_engine_last_timing(s->e);
    if ((uint32_t)tm->rows > s->step_rows_max) s->step_rows_max = (uint32_t)tm->rows;
    sd_vf_adapt_done(&s->ad, tm, wall_ms, cycle_ms, s->reqs, s->aqs, s->offered, s->accepted,
                     s->had_q, s->catchup, s->draft_ms, s->ready, n, pipelined);
}

/* Runs the engine step with the slots' proposals, then the bookkeeping of
 * the requests that took drafts (wait_ms: spent waiting for them) and the
 * token events. */
static void run_step(sd_vf_server *s, double wait_ms, bool pipelined)
{
    int n = s->n_active;
    for (int i = 0; i < n; i++) s->props[i] = s->slots[i]->prop;
    char err[256];
    double t0 = sd_now_ms();
    if (sd_engine_step(s->e, s->reqs, n, speculates(s) ? s->props : NULL, err, sizeof err) != SD_OK) {
        SD_ERROR("engine step failed: %s", err);
        if (sd_backend_lost(sd_model_backend(sd_engine_model(s->e)))) {
            /* no token events: the requests are not failed but left to the router, which resumes them
             * on a verifier that works (as after a crash) */
            SD_ERROR("the device is lost (a sticky error): exiting, so that a supervisor starts a new verifier");
            s->lost = true;
            return;
        }
    }
    double t1 = sd_now_ms();
    note_step(s, t1 - s->step_begin_ms, s->last_step_end_ms > 0 ? t1 - s->last_step_end_ms : 0, pipelined);
    for (int i = 0; i < n; i++) {
        sd_vf_slot *sl = s->slots[i];
        if (s->budgets[i] <= 0) continue; /* no drafts wanted this step */
        sd_vf_pipe_stats *ps = &sl->ps;
        ps->spec_steps++;
        ps->wait_us += (uint64_t)(wait_ms * 1e3);
        ps->verify_us += (uint64_t)((t1 - t0) * 1e3);
        if (s->last_step_end_ms > 0) ps->step_us += (uint64_t)((t1 - s->last_step_end_ms) * 1e3);
        int fb = s->fb_avail[i] > 0 ? s->fb_k[i] : 0; /* the fallback's drafts it verified */
        if (fb > 0) {
            ps->fallback_used++;
            ps->fallback_accepted += (uint64_t)s->accepted[i];
        } else if (sl->prop.n > 0) {
            ps->spans_used++;
            ps->draft_us += sl->prop_draft_us;
            sd_vf_pace_yield(&s->pace, s->reqs[i]->n_new);
        }
        if (pipelined && (fb > 0 || sl->prop.n == 0)) sd_vf_pace_fallback(&s->pace, 1 + fb, s->reqs[i]->n_new);
        ps->spans_ready += s->ready[i];
    }
    s->last_step_end_ms = t1;
    emit(s);
}

/* The item for request i of a proposer in this process (the n-gram lookup,
 * the draft model), at most k drafts. */
static sd_propose_item lookup_item(const sd_vf_server *s, int i, int k)
{
    const sd_req *r = s->reqs[i];
    return (sd_propose_item){.seq_id = s->slots[i]->id, .context = r->tokens, .n_context = r->n_tokens, .k = k,
                             .sampling = &r->p.sampling, .want_q = sd_vf_wants_q(r),
                             .out_pos = (uint64_t)sd_req_n_output(r)};
}

/* Runs the lookup over the m items in s->fb_items (request order) into
 * s->fb_out; s->lk_us its time per item. Returns m, or 0 on failure. */
static int run_lookup(sd_vf_server *s, int m)
{
    char err[128];
    double t0 = sd_now_ms();
    if (m == 0 || s->ngram->ops->propose(s->ngram, s->fb_items, m, s->fb_out, err, sizeof err) != SD_OK) return 0;
    s->lk_us = (uint32_t)((sd_now_ms() - t0) * 1e3 / m);
    return m;
}

/* Gives each request i of the m looked up with k[i] > 0 the lookup's drafts,
 * at most k[i] (drafter time: the lookup's, or none). */
static void lookup_props(sd_vf_server *s, int m, const int *k, bool timed)
{
    for (int i = 0, j = 0; i < s->n_active && j < m; i++) {
        if (s->fb_items[j].seq_id != s->slots[i]->id) continue;
        const sd_proposal *o = &s->fb_out[j++];
        if (k[i] <= 0 || o->n == 0) continue;
        sd_vf_slot *sl = s->slots[i];
        sl->prop = *o;
        sl->prop.n = k[i] < o->n ? k[i] : o->n;
        sl->prop_draft_us = timed ? s->lk_us : 0;
    }
}

/* The lookup for every decoding request that may verify drafts, as many as
 * its budget: s->avail[i] the drafts found (0: none), s->lk_match[i] the
 * length of the n-gram that matched. Returns the requests looked up. */
static int look_up(sd_vf_server *s)
{
    int n = s->n_active, m = 0;
    for (int i = 0; i < n; i++) {
        s->avail[i] = 0;
        s->lk_match[i] = 0;
        if (s->budgets[i] > 0 && !sd_req_prefilling(s->reqs[i])) s->fb_items[m++] = lookup_item(s, i, s->budgets[i]);
    }
    m = run_lookup(s, m);
    for (int i = 0, j = 0; i < n && j < m; i++) {
        if (s->fb_items[j].seq_id != s->slots[i]->id) continue;
        s->avail[i] = s->fb_out[j].n;
        s->lk_match[i] = s->fb_out[j++].match;
    }
    return m;
}

/* The fallback (--spec-fallback, vf_adapt.h): each decoding request that was
 * to verify drafts but has none from the drafter as the step runs gets the
 * n-gram lookup's over its committed tokens (one-hot q where it samples
 * with q), as many as sd_vf_adapt_fallback chooses. Exact as any drafts:
 * the engine verifies them. */
static void fallback_drafts(sd_vf_server *s)
{
    int n = s->n_active, m = 0;
    for (int i = 0; i < n; i++) {
        s->fb_avail[i] = 0;
        if (!s->ngram || s->budgets[i] <= 0 || s->slots[i]->prop.n > 0 || sd_req_prefilling(s->reqs[i])) continue;
        s->fb_items[m++] = lookup_item(s, i, s->budgets[i]);
    }
    if ((m = run_lookup(s, m)) == 0) return;
    for (int i = 0, j = 0; i < n && j < m; i++)
        if (s->fb_items[j].seq_id == s->slots[i]->id) s->fb_avail[i] = s->fb_out[j++].n;
    int *k = s->fb_k;
    for (int i = 0; i < n; i++) k[i] = s->fb_avail[i] > 0 ? s->budgets[i] : s->slots[i]->prop.n;
    sd_vf_adapt_fallback(&s->ad, s->reqs, s->aqs, k, s->fb_avail, n, s->chunk);
    for (int i = 0; i < n; i++) k[i] = s->fb_avail[i] > 0 ? k[i] : 0;
    lookup_props(s, m, k, false);
}

/* Serial, the lookup asked before the drafter (m requests, look_up): when
 * its drafts make a better step than the plan's (sd_vf_adapt_lookup), the
 * requests verify them and the drafter is not asked. Counted as the
 * fallback's drafts. Returns whether they do. */
static bool lookup_first(sd_vf_server *s, int m)
{
    int n = s->n_active, *k = s->fb_k;
    int free = sd_kv_pool_free_count(s->pool) - promised_blocks(s);
    memset(k, 0, (size_t)n * sizeof *k);
    if (!sd_vf_adapt_lookup(&s->ad, s->reqs, s->aqs, k, s->avail, s->lk_match, n, free,
                            sd_kv_pool_block_size(s->pool), s->chunk))
        return false;
    for (int i = 0; i < n; i++) {
        if (s->aqs[i]->k >= 0) s->budgets[i] = k[i];
        s->fb_avail[i] = k[i] > 0 ? s->avail[i] : 0;
    }
    lookup_props(s, m, k, false);
    return true;
}

/* Serial: choose the drafts — the lookup's instead where they pay more
 * (--spec-fallback ngram) — ask the drafter and wait for its reply
 * (vf_link.h), then verify. */
static void step_serial(sd_vf_server *s)
{
    int n = s->n_active;
    double t = sd_now_ms();
    plan_step(s);
    int looked = s->link && s->ngram && s->cfg->spec_lookup_first ? look_up(s) : 0;
    int drafting = s->link ? choose_drafts(s, NULL, NULL, false) : 0;
    for (int i = 0; i < n; i++) s->slots[i]->prop.n = 0;
    if (looked > 0 && lookup_first(s, looked)) {
        run_step(s, sd_now_ms() - t, false);
        return;
    }
    if (drafting > 0) sd_vf_link_draft(s->link, s->slots, s->budgets, n);
    fallback_drafts(s);
    run_step(s, sd_now_ms() - t, false);
}

/* --ngram: the verifier's own n-gram lookup drafts (no drafter: no messages, no waits, nothing to catch
 * up on). Each decoding request that may verify drafts looks up as many; the plan then chooses how many
 * of those at hand it verifies (vf_adapt.h), the lookup's time counting as the drafter's. */
static void step_local(sd_vf_server *s)
{
    int n = s->n_active;
    double t = sd_now_ms();
    plan_step(s);
    for (int i = 0; i < n; i++) {
        s->slots[i]->prop.n = 0;
        s->slots[i]->prop_draft_us = 0;
        s->fb_avail[i] = 0;
    }
    int m = look_up(s);
    for (int i = 0; i < n; i++) s->aqs[i]->match = s->lk_match[i]; /* priced by the n-gram length (vf_adapt.h) */
    choose_drafts(s, s->avail, NULL, false);
    lookup_props(s, m, s->budgets, true);
    run_step(s, sd_now_ms() - t, false);
}

/* --draft-model: as a serial step (the lookup asked first where
 * --spec-fallback ngram, its drafts verified instead where they pay more),
 * but the draft model in this process drafts, in one batched call on the
 * target's backend, as many as the plan allows each request that may verify
 * drafts (its time counting as the drafter's, its catching up on new tokens
 * priced as a drafter's); then the target verifies them. */
static void step_model(sd_vf_server *s)
{
    int n = s->n_active, m = 0;
    double t = sd_now_ms();
    plan_step(s);
    int looked = s->ngram && s->cfg->spec_lookup_first ? look_up(s) : 0;
    choose_drafts(s, NULL, NULL, false);
    for (int i = 0; i < n; i++) s->slots[i]->prop.n = 0;
    if (looked > 0 && lookup_first(s, looked)) {
        run_step(s, sd_now_ms() - t, false);
        return;
    }
    for (int i = 0; i < n; i++) {
        s->slots[i]->prop.n = 0;
        s->slots[i]->prop_draft_us = 0;
        if (s->budgets[i] > 0 && !sd_req_prefilling(s->reqs[i])) s->fb_items[m++] = lookup_item(s, i, s->budgets[i]);
    }
    char err[256] = "";
    double t0 = sd_now_ms();
    if (m > 0 && s->local->ops->propose(s->local, s->fb_items, m, s->fb_out, err, sizeof err) != SD_OK) {
        SD_WARN("the draft model failed (%s): verifying without drafts", err);
        m = 0;
    }
    uint32_t us = (uint32_t)((sd_now_ms() - t0) * 1e3);
    for (int i = 0, j = 0; i < n && j < m; i++) {
        sd_vf_slot *sl = s->slots[i];
        if (s->fb_items[j].seq_id != sl->id) continue;
        const sd_proposal *o = &s->fb_out[j++];
        sl->drafter_known = s->reqs[i]->n_tokens; /* it has caught up on the committed tokens */
        sl->prop = *o;
        if (sl->prop.n > s->budgets[i]) sl->prop.n = s->budgets[i];
        sl->prop_draft_us = us;
    }
    fallback_drafts(s);
    run_step(s, sd_now_ms() - t, false);
}

/* Pipelined: files the spans that came and picks each request's drafts
 * (vf_span.h), at most its budget; sets ready, and avail (the drafts at
 * hand, -1 for a request still without a span) and tell for a prefilling
 * request (told early, so the drafter's mirror fills while the target
 * prefills). */
static void pick_spans(sd_vf_server *s, double now)
{
    int n = s->n_active;
    double lat, draft;
    sd_vf_link_pipe_recv(s->link, s->slots, n, now, &lat, &draft);
    if (draft >= 0) sd_vf_pace_span(&s->pace, draft);
    for (int i = 0; i < n; i++) {
        sd_vf_slot *sl = s->slots[i];
        sd_req *r = s->reqs[i];
        bool allowed = sd_vf_spec_allowed(s->sampled[i], n, s->cfg->spec_max_batch, s->cfg->spec_max_batch_sampled);
        s->tell[i] = allowed && r->p.speculate && sd_req_prefilling(r) ? r->p.num_draft : 0;
        sl->prop.n = 0;
        sl->prop_draft_us = 0;
        s->avail[i] = 0;
        if (s->budgets[i] <= 0) continue;
        const sd_vf_span *used = NULL;
        if (sd_vf_spans_sync(&sl->spans, r->tokens, r->n_tokens) == SD_OK)
            sd_vf_spans_pick(&sl->spans, r->tokens, r->n_tokens, s->budgets[i], sd_vf_wants_q(r), &sl->prop, &used);
        if (sl->spans.dry) { /* the proposer had nothing (vf_adapt.h): its supply, not a late drafter */
            sd_vf_adapt_dry(&s->ad, r, s->aqs[i]);
            sl->spans.dry = 0;
        }
        if (used) sl->prop_draft_us = used->draft_us;
        s->ready[i] = sl->prop.n > 0;
        s->avail[i] = s->ready[i] ? sl->prop.n : -1;
    }
}

/* Pipelined, after the choice: trims each ready request's drafts to its
 * choice and sizes the step's rows and expected tokens of the requests that
 * do not wait. Returns how many wait for a span; *k_sum their budgets,
 * *e_span their mean expected tokens with the span (acceptance estimates). */
static int waiting_for_spans(sd_vf_server *s, int *rows, double *e_ready, int *k_sum, double *e_span)
{
    int n = s->n_active, waiting = 0;
    *rows = 0;
    *e_ready = 0;
    *k_sum = 0;
    *e_span = 0;
    for (int i = 0; i < n; i++) {
        sd_vf_slot *sl = s->slots[i];
        if (sl->prop.n > s->budgets[i]) sl->prop.n = s->budgets[i];
        if (s->budgets[i] > 0 && sl->prop.n == 0) {
            waiting++;
            *k_sum += s->budgets[i];
            *e_span += sd_accept_expected(&s->aqs[i]->acc, s->budgets[i]);
            continue;
        }
        *rows += rows_of(s, i);
        if (!sd_req_prefilling(s->reqs[i])) *e_ready += sl->prop.n > 0 ? sd_vf_pace_expected(&s->pace) : 1;
    }
    if (waiting > 0) *e_span /= waiting;
    return waiting;
}

/* Pipelined wait: until every waiting request has a span or budget_ms is
 * over, whichever is first. Returns the time waited (ms). */
static double wait_spans(sd_vf_server *s, double budget_ms)
{
    int n = s->n_active;
    double t0 = sd_now_ms(), deadline = t0 + budget_ms;
    int left = 1;
    while (left > 0) {
        double now = sd_now_ms();
        if (now >= deadline || !sd_vf_link_wait(s->link, deadline - now)) break;
        double lat, draft;
        sd_vf_link_pipe_recv(s->link, s->slots, n, sd_now_ms(), &lat, &draft);
        if (lat >= 0) sd_vf_pace_waited(&s->pace, lat, draft);
        left = 0;
        for (int i = 0; i < n; i++) {
            sd_vf_slot *sl = s->slots[i];
            const sd_req *r = s->reqs[i];
            if (s->budgets[i] <= 0 || s->ready[i] || sl->prop.n > 0) continue;
            const sd_vf_span *used = NULL;
            sd_vf_spans_pick(&sl->spans, r->tokens, r->n_tokens, s->budgets[i], sd_vf_wants_q(r), &sl->prop, &used);
            if (used) sl->prop_draft_us = used->draft_us;
            left += sl->prop.n == 0 && !sl->spans.dry; /* a dry answer ends the wait: nothing is coming */
        }
    }
    if (left > 0) sd_vf_pace_timeout(&s->pace, budget_ms);
    return sd_now_ms() - t0;
}

/* Pipelined step (proto/specd.proto): use the spans that are there, choose
 * how many of their drafts to verify, wait for missing ones only when the
 * measured pace says it pays (vf_pace.h), tell the drafter the outcome and
 * the drafts in flight, and verify while it drafts the next spans. */
static void step_pipe(sd_vf_server *s)
{
    int n = s->n_active, rows, k_sum;
    double e_ready, e_span, waited = 0, now = sd_now_ms();
    plan_step(s);
    pick_spans(s, now);
    choose_drafts(s, s->avail, s->tell, true);
    int waiting = waiting_for_spans(s, &rows, &e_ready, &k_sum, &e_span);
    uint32_t step_us = (uint32_t)(sd_vf_pace_step_ms(&s->pace, rows + waiting) * 1e3);
    /* tells the committed tokens (and the in-flight drafts of the ready requests) */
    sd_vf_link_pipe_send(s->link, s->slots, s->tell, n, true, step_us, now);
    if (waiting > 0 && sd_vf_link_up(s->link)) {
        int k = (k_sum + waiting - 1) / waiting;
        double budget = sd_vf_pace_wait_budget(&s->pace, rows, e_ready, waiting, k, e_span);
        SD_DEBUG("%d without a span: wait budget %.3f ms, expected latency %.3f ms", waiting, budget,
                 sd_vf_pace_latency(&s->pace));
        if (sd_vf_pace_should_wait(&s->pace, budget)) {
            /* a late span is mostly a scheduling hiccup away, and giving up adds a plain step to
             * the time already spent: the wait may run to twice the budget */
            waited = wait_spans(s, 2 * budget);
            /* the drafts now in flight for the requests whose span came during the wait */
            for (int i = 0; i < n; i++) s->tell[i] = !s->ready[i] && s->slots[i]->prop.n > 0 ? s->tell[i] : 0;
            sd_vf_link_pipe_send(s->link, s->slots, s->tell, n, true, step_us, sd_now_ms());
        }
    }
    fallback_drafts(s);
    run_step(s, waited, true);
}

/* Whether the drafter computes on this verifier's hardware, so that drafting
 * ahead cannot overlap verifying: the same host, and both on the CPU with more
 * threads than the cores this process may use, or both on the same GPU
 * (processes time-slice a GPU; measured on an H200 with the demo pair, both on
 * cuda:0, C = 1: pipelined 933 tok/s, serial 1561, plain about 1480). */
static bool shares_compute(const sd_vf_server *s, const sd_vf_drafter_stats *d)
{
    if (strcmp(d->host, s->host) != 0) return false;
    if (!strcmp(d->device, "cpu")) return s->threads > 0 && s->threads + (int)d->threads > s->ncpu;
    return !strcmp(d->device, s->cfg->device);
}

/* Whether this step runs the pipelined protocol (--spec-pipeline; in auto
 * mode not before the drafter said where it runs, nor when it shares this
 * verifier's cores). Logs each change of mind. */
static bool pipelined(sd_vf_server *s)
{
    if (!s->link || s->cfg->spec_pipeline == SD_VF_PIPE_OFF) return false;
    bool on = true;
    const char *why = "--spec-pipeline on";
    sd_vf_drafter_stats d = sd_vf_link_drafter_stats(s->link);
    if (s->cfg->spec_pipeline == SD_VF_PIPE_AUTO) {
        on = d.known && !shares_compute(s, &d);
        why = !d.known ? "the drafter has not said where it runs"
              : on     ? "the drafter has cores or a device of its own"
                       : "the drafter shares this verifier's cores or device";
    }
    if (on != s->pipe_on) {
        SD_INFO("pipelined speculation %s: %s (verifier %d threads on %s, drafter %u on %s %s, %d CPUs)",
                on ? "on" : "off", why, s->threads, s->cfg->device, d.threads, d.host, d.device, s->ncpu);
        s->pipe_on = on;
    }
    return on;
}

static void step(sd_vf_server *s)
{
    s->step_begin_ms = sd_now_ms();
    if (s->cfg->ngram) step_local(s);
    else if (s->local) step_model(s);
    else if (pipelined(s)) step_pipe(s);
    else step_serial(s);
}

/* Without requests: sleeps until a router or drafter message comes (at most
 * IDLE_POLL_MS). With requests it returns at once: the reads that follow
 * (drain_router, poll_link) do not wait, and each poll of a ZMQ socket is
 * system calls of its own (strace at C = 1: per step about 16 poll and 17
 * getpid calls over the process's threads) that a step would pay for nothing. */
static sd_status idle_wait(sd_vf_server *s)
{
    if (s->n_active > 0) return SD_OK;
    zmq_pollitem_t it[2] = {{s->sock, 0, ZMQ_POLLIN, 0}, {NULL, 0, ZMQ_POLLIN, 0}};
    int nit = 1;
    if (s->link) it[nit++].socket = sd_vf_link_socket(s->link);
    if (zmq_poll(it, nit, IDLE_POLL_MS) < 0 && zmq_errno() != EINTR) {
        SD_ERROR("zmq_poll: %s", zmq_strerror(zmq_errno()));
        return SD_ERR_IO;
    }
    return SD_OK;
}

/* Reads the drafter link between steps: health replies and stale draft
 * replies, the health probe sent when due. The pipelined step files the
 * drafter's spans itself; a serial exchange reads its own reply; so while
 * requests run it is read every LINK_POLL_MS only, not every step (on a
 * CPU, 2 cores, C = 1, T = 1.5, a server never drafting with a drafter
 * ran at 0.97x one without: each read is system calls). */
static void poll_link(sd_vf_server *s)
{
    if (!s->link || (s->pipe_on == 1 && s->n_active > 0)) return;
    double now = sd_now_ms();
    if (s->n_active > 0 && now - s->link_polled_ms < LINK_POLL_MS) return;
    s->link_polled_ms = now;
    sd_vf_link_poll(s->link);
}

sd_status sd_vf_server_run(sd_vf_server *s, volatile sig_atomic_t *stop)
{
    publish_health(s);
    sd_vf_front_busy(s->front, true); /* health answered during the calibration too */
    if (speculates(s)) { /* the cost model starts from this machine's measured curve (vf_adapt.h) */
        char err[256];
        double t0 = sd_now_ms();
        int kmax = s->cfg->spec_adaptive ? s->cfg->spec_max_draft : s->cfg->num_draft;
        if (sd_vf_adapt_calibrate(&s->ad, s->e, kmax, s->cfg->max_batch, CALIBRATE_MS, err, sizeof err) != SD_OK)
            SD_WARN("calibration stopped: %s", err);
        SD_INFO("step cost measured in %.0f ms: %.3f ms for 1 row, %.3f ms for %d", sd_now_ms() - t0,
                sd_cost_forward_ms(&s->ad.cost, 1, 1), sd_cost_forward_ms(&s->ad.cost, kmax + 1, 1), kmax + 1);
    }
    sd_vf_front_busy(s->front, false);
    SD_INFO("serving %s on %s (drafts: %s, max batch %d, %d KV blocks, n-gram fallback %s)", s->model_name,
            s->cfg->listen,
            s->cfg->drafter ? s->cfg->drafter
            : s->cfg->ngram ? "the verifier's own n-gram lookup"
            : s->local      ? "the draft model in this process"
                            : "none",
            s->cfg->max_batch, sd_kv_pool_total(s->pool), s->ngram && !s->cfg->ngram ? "on" : "off");
    while (!*stop && !s->lost) {
        if (idle_wait(s) != SD_OK) return SD_ERR_IO;
        if (*stop) break;
        if (drain_router(s) != SD_OK) return SD_ERR_IO;
        admit(s);
        poll_link(s);
        if (s->n_active > 0) {
            publish_health(s);
            sd_vf_front_busy(s->front, true);
            step(s);
            sd_vf_front_busy(s->front, false);
        } else {
            s->last_step_end_ms = 0; /* an idle spell is no step time */
        }
    }
    SD_INFO("shutting down (%d active, %d queued requests dropped)", s->n_active, s->n_queue);
    return s->lost ? SD_ERR_DEVICE : SD_OK;
}

/* ------------------------------------------------------------ lifetime */

static void set_model_name(sd_vf_server *s, const char *dir)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/') start--;
    size_t n = len - start;
    if (n >= sizeof s->model_name) n = sizeof s->model_name - 1;
    memcpy(s->model_name, dir + start, n);
    s->model_name[n] = '\0';
}

sd_status sd_vf_server_new(const sd_vf_config *cfg, sd_engine *e, void *zctx, sd_vf_server **out, char *err,
                           size_t errlen)
{
    *out = NULL;
    sd_vf_server *s = calloc(1, sizeof *s);
    if (!s) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    s->cfg = cfg;
    s->e = e;
    s->pool = sd_model_kv_pool(sd_engine_model(e));
    s->vocab = sd_model_cfg(sd_engine_model(e))->vocab_size;
    set_model_name(s, cfg->model_dir);
    size_t nb = (size_t)cfg->max_batch;
    s->active = calloc(nb, sizeof *s->active);
    s->queue = calloc(SD_VF_QUEUE_MAX + (size_t)nb, sizeof *s->queue); /* room for the preempted */
    s->reqs = calloc(nb, sizeof *s->reqs);
    s->slots = calloc(nb, sizeof *s->slots);
    s->props = calloc(nb, sizeof *s->props);
    s->budgets = calloc(nb, sizeof *s->budgets);
    s->tell = calloc(nb, sizeof *s->tell);
    s->sampled = calloc(nb, sizeof *s->sampled);
    s->ready = calloc(nb, sizeof *s->ready);
    s->aqs = calloc(nb, sizeof *s->aqs);
    s->avail = calloc(nb, sizeof *s->avail);
    s->offered = calloc(nb, sizeof *s->offered);
    s->accepted = calloc(nb, sizeof *s->accepted);
    s->had_q = calloc(nb, sizeof *s->had_q);
    s->catchup = calloc(nb, sizeof *s->catchup);
    s->chunk = calloc(nb, sizeof *s->chunk);
    s->draft_ms = calloc(nb, sizeof *s->draft_ms);
    s->fb_avail = calloc(nb, sizeof *s->fb_avail);
    s->fb_k = calloc(nb, sizeof *s->fb_k);
    s->fb_items = calloc(nb, sizeof *s->fb_items);
    s->fb_out = calloc(nb, sizeof *s->fb_out);
    s->lk_match = calloc(nb, sizeof *s->lk_match);
    sd_vf_adapt_init(&s->ad);
    sd_vf_pace_init(&s->pace, &s->ad.cost);
    gethostname(s->host, sizeof s->host - 1);
    if (getrandom(&s->instance, sizeof s->instance, 0) != (ssize_t)sizeof s->instance || !s->instance)
        s->instance = ((uint64_t)getpid() << 32) ^ (uint64_t)(sd_now_ms() * 1e3) ^ 1;
    s->threads = sd_backend_cpu_threads(sd_model_backend(sd_engine_model(e)));
    s->ncpu = sd_cpu_count();
    s->pipe_on = -1;
    if (!s->active || !s->queue || !s->reqs || !s->slots || !s->props || !s->budgets || !s->tell || !s->sampled ||
        !s->ready || !s->aqs || !s->avail || !s->offered || !s->accepted || !s->had_q || !s->catchup || !s->chunk ||
        !s->draft_ms || !s->fb_avail || !s->fb_k || !s->fb_items || !s->fb_out ||
        !s->lk_match) {
        sd_vf_server_free(s);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    }
    if (((cfg->drafter && cfg->spec_fallback) || (cfg->draft_model && cfg->spec_fallback) || cfg->ngram) &&
        sd_ngram_new(SD_NGRAM_DEFAULT_MIN, SD_NGRAM_DEFAULT_MAX, &s->ngram, err, errlen) != SD_OK) {
        sd_vf_server_free(s);
        return SD_ERR_NOMEM;
    }
    if (cfg->curve_keys && sd_curve_load(zctx, cfg->curve_keys, true, &s->curve, err, errlen) != SD_OK) {
        sd_vf_server_free(s);
        return SD_ERR_IO;
    }
    if (sd_vf_front_new(zctx, cfg->listen, s->curve, 10000, &s->front, &s->sock, err, errlen) != SD_OK) {
        sd_vf_server_free(s);
        return SD_ERR_IO;
    }
    if (cfg->drafter) {
        s->link = sd_vf_link_new(zctx, cfg->drafter, s->curve, cfg->draft_timeout_ms, s->vocab, err, errlen);
        if (!s->link) {
            sd_vf_server_free(s);
            return SD_ERR_IO;
        }
    }
    *out = s;
    return SD_OK;
}

void sd_vf_server_use_proposer(sd_vf_server *s, sd_proposer *p)
{
    sd_proposer_free(s->local);
    s->local = p;
}

void sd_vf_server_free(sd_vf_server *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_active; i++) req_destroy(s, s->active[i]);
    for (int i = 0; i < s->n_queue; i++) req_destroy(s, s->queue[i]);
    sd_vf_link_free(s->link);
    sd_proposer_free(s->ngram);
    sd_proposer_free(s->local);
    free(s->fb_avail);
    free(s->fb_k);
    free(s->fb_items);
    free(s->fb_out);
    free(s->lk_match);
    sd_vf_front_free(s->front); /* closes s->sock */
    sd_curve_free(s->curve);
    free(s->active);
    free(s->queue);
    free(s->reqs);
    free(s->slots);
    free(s->props);
    free(s->budgets);
    free(s->tell);
    free(s->sampled);
    free(s->ready);
    free(s->aqs);
    free(s->avail);
    free(s->offered);
    free(s->accepted);
    free(s->had_q);
    free(s->catchup);
    free(s->chunk);
    free(s->draft_ms);
    sd_vf_adapt_free(&s->ad);
    free(s);
}

/* vf_server.c — router side of the verifier: the routers' messages
 * (submit, cancel, health), the main loop and the server's lifetime (see
 * vf_server.h). Admission, the step, drafts and events live in the files
 * vf_server_impl.h lists. */
#include "vf_server_impl.h"

#include "backend_open.h"

#define IDLE_POLL_MS 100
#define PUBLISH_MS 20       /* health published to the front thread at most this often */
#define LINK_POLL_MS 20     /* while requests run, the drafter link is read between steps at most this often */
#define MAX_DRAIN 1024      /* router messages handled between two steps */
#define CALIBRATE_MS 2000.0 /* the most time the start-up measurement of the step cost may take */

static void on_submit(sd_vf_server *s, const sd_msg_id *peer, const Specd__Submit *sub)
{
    char err[256];
    sd_req_params p;
    int np = (int)sub->n_prompt_ids;
    if (sd_vfs_find_req(s->active, s->n_active, peer, sub->request_id) >= 0 ||
        sd_vfs_find_req(s->queue, s->n_queue, peer, sub->request_id) >= 0) {
        sd_vfs_send_error(s, peer, sub->request_id, "bad_request", "duplicate request_id");
        return; /* no final event: it would end the live request on the router */
    }
    if (s->n_queue >= SD_VF_QUEUE_MAX) {
        sd_vfs_reject(s, peer, sub->request_id, np, "overloaded", "the verifier's queue is full");
        return;
    }
    int k_default = s->cfg->spec_adaptive ? s->cfg->spec_max_draft : s->cfg->num_draft;
    if (sd_vf_params_from_submit(sub, k_default, sd_vfs_speculates(s), &p, err, sizeof err) != SD_OK) {
        sd_vfs_reject(s, peer, sub->request_id, np, "bad_request", err);
        return;
    }
    vf_req *vr = calloc(1, sizeof *vr);
    if (!vr) {
        sd_vfs_reject(s, peer, sub->request_id, np, "internal", "out of memory");
        return;
    }
    sd_status st = sd_req_new(s->e, ++s->next_id, sub->prompt_ids, np, &p, &vr->slot.r, err, sizeof err);
    if (st != SD_OK) {
        free(vr);
        sd_vfs_reject(s, peer, sub->request_id, np, st == SD_ERR_NOMEM ? "internal" : "bad_request", err);
        return;
    }
    if (sub->n_resume_ids > 0 &&
        sd_req_resume(s->e, vr->slot.r, sub->resume_ids, (int)sub->n_resume_ids, err, sizeof err) != SD_OK) {
        sd_req_free(s->e, vr->slot.r);
        free(vr);
        sd_vfs_reject(s, peer, sub->request_id, np, "bad_request", err);
        return;
    }
    vr->slot.id = vr->slot.r->id;
    /* a request that set its own num_draft keeps it; otherwise the scheduler chooses */
    sd_areq_init(&vr->aq, !s->cfg->spec_adaptive || (sub->spec && sub->spec->num_draft > 0));
    vr->peer = *peer;
    vr->rid = sub->request_id;
    s->queue[s->n_queue++] = vr;
    SD_DEBUG("request %llu queued (%d prompt tokens, max %d, spec %d)", (unsigned long long)vr->rid, np, p.max_tokens,
             (int)p.speculate);
}

static void on_cancel(sd_vf_server *s, const sd_msg_id *peer, const Specd__Cancel *c)
{
    vf_req **list = s->active;
    int *n = &s->n_active;
    int i = sd_vfs_find_req(list, *n, peer, c->request_id);
    if (i < 0) {
        list = s->queue;
        n = &s->n_queue;
        i = sd_vfs_find_req(list, *n, peer, c->request_id);
    }
    if (i < 0) {
        SD_DEBUG("cancel for unknown request %llu ignored", (unsigned long long)c->request_id);
        return;
    }
    vf_req *vr = list[i];
    sd_vfs_remove_at(list, n, i);
    sd_req_cancel(s->e, vr->slot.r);
    sd_vfs_send_req_event(s, vr, false);
    SD_DEBUG("request %llu cancelled", (unsigned long long)vr->rid);
    sd_vfs_req_destroy(s, vr);
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
    sd_pipe_stats_to_proto(&s->pipe_total, &pb);
    st.pipe = &pb;
    st.k_chosen = s->ad.k_hist;
    st.n_k_chosen = SD_MAX_DRAFT + 1;
    while (st.n_k_chosen > 0 && s->ad.k_hist[st.n_k_chosen - 1] == 0) st.n_k_chosen--;
    st.step_predicted_us = s->ad.pred_us;
    st.step_measured_us = s->ad.meas_us;
    st.step_error_us = s->ad.err_us;
    st.regime_plain_steps = s->ad.rg.plain_steps;
    double rd = sd_regime_rate(&s->ad.rg, SD_VF_DRAFTING), rp = sd_regime_rate(&s->ad.rg, SD_VF_PLAIN);
    st.regime_rate_drafting = rd > 0 ? (float)rd : 0;
    st.regime_rate_plain = rp > 0 ? (float)rp : 0;
    st.pipe_serial_steps = s->ad.pipe_rg.plain_steps;
    double pp = sd_regime_rate(&s->ad.pipe_rg, SD_PIPE_PIPELINED), ps = sd_regime_rate(&s->ad.pipe_rg, SD_PIPE_SERIAL);
    st.pipe_rate_pipelined = pp > 0 ? (float)pp : 0;
    st.pipe_rate_serial = ps > 0 ? (float)ps : 0;
    Specd__AcceptEstimate est[SD_ADAPT_ACCEPT_KEYS], *estp[SD_ADAPT_ACCEPT_KEYS];
    float est_buf[SD_ADAPT_ACCEPT_KEYS][SD_MAX_DRAFT];
    st.n_accept = (size_t)sd_vf_accept_estimates(&s->ad, est, est_buf, SD_ADAPT_ACCEPT_KEYS);
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
    char devs[SD_COMM_MAX_RANKS][64], *devp[SD_COMM_MAX_RANKS];
    int tp = sd_model_tp_size(sd_engine_model(s->e));
    for (int r = 0; tp > 1 && r < tp; r++) {
        devp[r] = sd_tp_device_name(s->cfg->device, r, devs[r], sizeof devs[r]) ? devs[r] : (char *)"?";
        rep.n_rank_devices = (size_t)r + 1;
    }
    rep.rank_devices = devp;
    rep.comm = (char *)sd_model_comm_name(sd_engine_model(s->e));
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REPLY;
    env.health_reply = &rep;
    if (peer) sd_vfs_send_to(s, peer, &env);
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
    if (sd_vfs_speculates(s)) {       /* the cost model starts from this machine's measured curve (adapt.h) */
        char err[256];
        double t0 = sd_now_ms();
        int kmax = s->cfg->spec_adaptive ? s->cfg->spec_max_draft : s->cfg->num_draft;
        if (sd_adapt_calibrate(&s->ad, s->e, kmax, s->cfg->max_batch, CALIBRATE_MS, err, sizeof err) != SD_OK)
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
        sd_vfs_admit(s);
        poll_link(s);
        if (s->n_active > 0) {
            publish_health(s);
            sd_vf_front_busy(s->front, true);
            sd_vfs_step(s);
            sd_vf_front_busy(s->front, false);
        } else {
            s->last_step_end_ms = 0; /* an idle spell is no step time */
        }
    }
    SD_INFO("shutting down (%d active, %d queued requests dropped)", s->n_active, s->n_queue);
    return s->lost ? SD_ERR_DEVICE : SD_OK;
}

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
    sd_adapt_init(&s->ad);
    sd_vf_pace_init(&s->pace, &s->ad.cost);
    gethostname(s->host, sizeof s->host - 1);
    if (getrandom(&s->instance, sizeof s->instance, 0) != (ssize_t)sizeof s->instance || !s->instance)
        s->instance = ((uint64_t)getpid() << 32) ^ (uint64_t)(sd_now_ms() * 1e3) ^ 1;
    const sd_model *m = sd_engine_model(e);
    for (int r = 0; r < sd_model_tp_size(m); r++)
        s->threads += sd_backend_cpu_threads(sd_model_backend(sd_model_rank(m, r)));
    s->ncpu = sd_cpu_count();
    s->pipe_on = -1;
    if (!s->active || !s->queue || !s->reqs || !s->slots || !s->props || !s->budgets || !s->tell || !s->sampled ||
        !s->ready || !s->aqs || !s->avail || !s->offered || !s->accepted || !s->had_q || !s->catchup || !s->chunk ||
        !s->draft_ms || !s->fb_avail || !s->fb_k || !s->fb_items || !s->fb_out || !s->lk_match) {
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
    if (cfg->drafter &&
        sd_vf_link_new(zctx, cfg->drafter, s->curve, cfg->draft_timeout_ms, s->vocab, &s->link, err, errlen) != SD_OK) {
        sd_vf_server_free(s);
        return SD_ERR_IO;
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
    for (int i = 0; i < s->n_active; i++) sd_vfs_req_destroy(s, s->active[i]);
    for (int i = 0; i < s->n_queue; i++) sd_vfs_req_destroy(s, s->queue[i]);
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
    sd_adapt_free(&s->ad);
    free(s);
}

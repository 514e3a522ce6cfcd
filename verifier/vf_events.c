/* vf_events.c — the verifier server's requests and the events it sends
 * their routers: token events (with stats and log-probabilities), errors,
 * rejections; finding and freeing requests; streaming what a step committed
 * (see vf_server_impl.h). */
#include "vf_server_impl.h"

/* Whether requests may verify drafts: a drafter's, or the verifier's own (--ngram's lookup, --draft-model's). */
bool sd_vfs_speculates(const sd_vf_server *s) { return s->link || s->cfg->ngram || s->local; }

void sd_vfs_send_to(sd_vf_server *s, const sd_msg_id *peer, const Specd__Envelope *env)
{
    char err[256];
    if (sd_msg_send(s->sock, peer, env, err, sizeof err) != SD_OK) SD_WARN_LIMITED("send to router failed: %s", err);
}

void sd_vfs_send_error(sd_vf_server *s, const sd_msg_id *peer, uint64_t rid, const char *code, const char *msg)
{
    Specd__ErrorEvent ev = SPECD__ERROR_EVENT__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    ev.request_id = rid;
    ev.code = (char *)code;
    ev.message = (char *)msg;
    env.body_case = SPECD__ENVELOPE__BODY_ERROR;
    env.error = &ev;
    sd_vfs_send_to(s, peer, &env);
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
                        const sd_pipe_stats *ps, Specd__AdaptStats *as, const sd_req *r, Specd__StepInfo *step)
{
    void *blocks[2];
    static const sd_spec_stats zero;
    Specd__SpecStats ss;
    Specd__PipeStats pb;
    Specd__TokenEvent ev = SPECD__TOKEN_EVENT__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    sd_vf_stats_to_proto(st ? st : &zero, st ? n_at : 0, &ss);
    if (ps) {
        sd_pipe_stats_to_proto(ps, &pb);
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
    if (n > 0) ev.step = step;
    if (r) ev.cached_tokens = (uint32_t)(r->shared < r->n_prompt ? r->shared : r->n_prompt);
    attach_logprobs(r, n, &ev, blocks);
    env.body_case = SPECD__ENVELOPE__BODY_TOKEN_EVENT;
    env.token_event = &ev;
    sd_vfs_send_to(s, peer, &env);
    free(blocks[0]);
    free(blocks[1]);
}

/* Tokens committed by the last step (or none) for vr, with its finish. */
void sd_vfs_send_req_event(sd_vf_server *s, const vf_req *vr, bool with_new)
{
    const sd_req *r = vr->slot.r;
    int n = with_new ? r->n_new : 0;
    int n_at = r->p.speculate ? r->p.num_draft : 0;
    sd_pipe_stats ps = sd_vf_slot_stats(&vr->slot);
    Specd__AdaptStats as;
    float acc[SD_MAX_DRAFT];
    sd_vf_adapt_stats_to_proto(&vr->aq, acc, &as);
    Specd__StepInfo step = SPECD__STEP_INFO__INIT;
    step.drafted = (uint32_t)(vr->step_drafted > 0 ? vr->step_drafted : 0);
    step.accepted = (uint32_t)(vr->step_accepted > 0 ? vr->step_accepted : 0);
    step.source = (Specd__DraftSource)vr->step_source;
    send_tokens(s, &vr->peer, vr->rid, r->tokens + r->n_tokens - n, n, r->finish, r->n_prompt, sd_req_n_output(r),
                &r->stats, n_at, r->p.speculate ? &ps : NULL, r->p.speculate ? &as : NULL, r, &step);
}

/* A request that never got an engine request: ErrorEvent + final event. */
void sd_vfs_reject(sd_vf_server *s, const sd_msg_id *peer, uint64_t rid, int n_prompt, const char *code,
                   const char *msg)
{
    SD_INFO("request %llu rejected: %s: %s", (unsigned long long)rid, code, msg);
    sd_vfs_send_error(s, peer, rid, code, msg);
    send_tokens(s, peer, rid, NULL, 0, SD_FINISH_ERROR, n_prompt, 0, NULL, 0, NULL, NULL, NULL, NULL);
}

static bool same_peer(const sd_msg_id *a, const sd_msg_id *b)
{
    return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

/* Index of (peer, rid) in list[0..n), or -1. */
int sd_vfs_find_req(vf_req *const *list, int n, const sd_msg_id *peer, uint64_t rid)
{
    for (int i = 0; i < n; i++)
        if (list[i]->rid == rid && same_peer(&list[i]->peer, peer)) return i;
    return -1;
}

/* Frees vr (releasing its KV) after telling the drafter. */
void sd_vfs_req_destroy(sd_vf_server *s, vf_req *vr)
{
    if (s->link) sd_vf_link_close(s->link, &vr->slot);
    if (s->local) s->local->ops->release(s->local, vr->slot.id);
    sd_req_free(s->e, vr->slot.r);
    sd_vf_slot_release(&vr->slot);
    free(vr);
}

void sd_vfs_remove_at(vf_req **list, int *n, int i)
{
    memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
    (*n)--;
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
    sd_pipe_stats now = sd_vf_slot_stats(&vr->slot);
    sd_pipe_stats_add(&s->pipe_total, &now, 1);
    sd_pipe_stats_add(&s->pipe_total, &vr->seen_pipe, -1);
    vr->seen_pipe = now;
}

/* Streams what the last step committed; retires finished requests. */
void sd_vfs_emit(sd_vf_server *s)
{
    for (int i = 0; i < s->n_active;) {
        vf_req *vr = s->active[i];
        sd_req *r = vr->slot.r;
        account(s, vr);
        if (r->finish == SD_FINISH_ERROR) {
            SD_WARN("request %llu failed: %s", (unsigned long long)vr->rid, r->error);
            sd_vfs_send_error(s, &vr->peer, vr->rid, sd_vf_error_code(r->error),
                              r->error[0] ? r->error : "internal error");
        }
        if (r->n_new > 0 || r->finish != SD_FINISH_NONE) sd_vfs_send_req_event(s, vr, true);
        if (r->finish == SD_FINISH_NONE) {
            i++;
            continue;
        }
        sd_vfs_remove_at(s->active, &s->n_active, i);
        sd_vfs_req_destroy(s, vr);
    }
}

/* msg.c — see msg.h. Envelopes are packed into a malloc'd buffer and sent as
 * one frame (after the identity frame on ROUTER sockets); received payloads
 * are unpacked by protobuf-c with the default allocator and then validated. */
#include "msg.h"

#include "regex_mask.h"
#include "sampler.h"

#include <errno.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static int sock_is_router(void *sock)
{
    int type = 0;
    size_t sz = sizeof type;
    if (zmq_getsockopt(sock, ZMQ_TYPE, &type, &sz) != 0) return 0;
    return type == ZMQ_ROUTER || type == ZMQ_PAIR; /* PAIR: the inside of a relay (msg.h) */
}

void *sd_msg_socket(void *zctx, int type, int hwm)
{
    void *sock = zmq_socket(zctx, type);
    if (!sock) return NULL;
    int zero = 0;
    int64_t max = SD_MSG_MAX_BYTES;
    if (zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max) != 0 ||
        (hwm > 0 && (zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0 ||
                     zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm) != 0))) {
        int e = errno;
        zmq_close(sock);
        errno = e;
        return NULL;
    }
    return sock;
}

sd_status sd_msg_send(void *sock, const sd_msg_id *id, const Specd__Envelope *env, char *err, size_t errlen)
{
    if (!sock || !env) return sd_seterr(err, errlen, SD_ERR_ARG, "msg: null socket or envelope");
    if (env->body_case == SPECD__ENVELOPE__BODY__NOT_SET)
        return sd_seterr(err, errlen, SD_ERR_ARG, "msg: envelope has no body");
    int router = sock_is_router(sock);
    if (router && (!id || id->len == 0))
        return sd_seterr(err, errlen, SD_ERR_ARG, "msg: ROUTER socket needs a peer identity");
    size_t n = specd__envelope__get_packed_size(env);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return sd_seterr(err, errlen, SD_ERR_NOMEM, "msg: out of memory (%zu bytes)", n);
    specd__envelope__pack(env, buf);
    if (router && zmq_send(sock, id->data, id->len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        int e = errno;
        free(buf);
        return sd_seterr(err, errlen, e == EAGAIN || e == EHOSTUNREACH ? SD_ERR_NOSPACE : SD_ERR_IO,
                         "msg: send identity: %s", zmq_strerror(e));
    }
    int rc = zmq_send(sock, buf, n, ZMQ_DONTWAIT);
    int e = errno;
    free(buf);
    if (rc < 0)
        return sd_seterr(err, errlen, e == EAGAIN || e == EHOSTUNREACH ? SD_ERR_NOSPACE : SD_ERR_IO, "msg: send %s: %s",
                         sd_msg_kind(env), zmq_strerror(e));
    return SD_OK;
}

/* Reads and discards the remaining frames of a multipart message. */
static void drain_frames(void *sock)
{
    int more = 1;
    size_t sz = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
        sz = sizeof more;
    }
}

static int has_more(void *sock)
{
    int more = 0;
    size_t sz = sizeof more;
    return zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more;
}

/* Receives the first frame; maps errno to a status. */
static sd_status recv_frame(void *sock, zmq_msg_t *m, int flags, char *err, size_t errlen)
{
    zmq_msg_init(m);
    if (zmq_msg_recv(m, sock, flags) >= 0) return SD_OK;
    int e = errno;
    zmq_msg_close(m);
    if (e == EAGAIN || e == EINTR) return SD_ERR_TIMEOUT;
    return sd_seterr(err, errlen, SD_ERR_IO, "msg: recv: %s", zmq_strerror(e));
}

sd_status sd_msg_recv(void *sock, sd_msg_id *id, Specd__Envelope **out, int flags, char *err, size_t errlen)
{
    *out = NULL;
    if (id) id->len = 0;
    int zflags = (flags & SD_MSG_DONTWAIT) ? ZMQ_DONTWAIT : 0;
    zmq_msg_t m;
    sd_status st = recv_frame(sock, &m, zflags, err, errlen);
    if (st != SD_OK) return st;
    if (sock_is_router(sock)) {
        size_t n = zmq_msg_size(&m);
        if (id && n <= sizeof id->data) {
            if (n) memcpy(id->data, zmq_msg_data(&m), n);
            id->len = n;
        }
        zmq_msg_close(&m);
        if (!has_more(sock)) return sd_seterr(err, errlen, SD_ERR_FORMAT, "msg: identity frame without payload");
        st = recv_frame(sock, &m, 0, err, errlen);
        if (st != SD_OK) return st == SD_ERR_TIMEOUT ? SD_ERR_IO : st;
    }
    if (has_more(sock)) {
        zmq_msg_close(&m);
        drain_frames(sock);
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "msg: unexpected extra frames");
    }
    st = sd_msg_decode(zmq_msg_data(&m), zmq_msg_size(&m), out, err, errlen);
    zmq_msg_close(&m);
    return st;
}

/* True when m or a message inside it kept an unknown field numbered 0: protobuf-c accepts the key
 * when it is written overlong (80 00) but refuses the canonical 00 it packs back, so such an
 * envelope would not survive being forwarded or re-sent. */
static int has_field_zero(const ProtobufCMessage *m)
{
    if (!m) return 0;
    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0) return 1;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned f = 0; f < d->n_fields; f++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[f];
        const char *base = (const char *)m;
        if (fd->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + fd->quantifier_offset);
            ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(base + fd->offset);
            for (size_t k = 0; k < n; k++)
                if (has_field_zero(v[k])) return 1;
        } else if (!(fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ||
                   *(const uint32_t *)(base + fd->quantifier_offset) == fd->id) {
            if (has_field_zero(*(ProtobufCMessage *const *)(base + fd->offset))) return 1;
        }
    }
    return 0;
}

sd_status sd_msg_decode(const uint8_t *buf, size_t len, Specd__Envelope **out, char *err, size_t errlen)
{
    *out = NULL;
    if (len == 0) return sd_seterr(err, errlen, SD_ERR_FORMAT, "msg: empty frame");
    if (len > SD_MSG_MAX_BYTES)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "msg: frame of %zu bytes exceeds %u", len, SD_MSG_MAX_BYTES);
    Specd__Envelope *env = specd__envelope__unpack(NULL, len, buf);
    if (!env) return sd_seterr(err, errlen, SD_ERR_FORMAT, "msg: %zu bytes do not unpack as an Envelope", len);
    sd_status st = has_field_zero(&env->base)
                       ? sd_seterr(err, errlen, SD_ERR_FORMAT, "msg: field number 0 in an envelope")
                       : sd_msg_validate(env, err, errlen);
    if (st != SD_OK) {
        specd__envelope__free_unpacked(env, NULL);
        return st;
    }
    *out = env;
    return SD_OK;
}

void sd_msg_free(Specd__Envelope *env)
{
    if (env) specd__envelope__free_unpacked(env, NULL);
}

/* ------------------------------------------------------------ validation */

#define BAD(...) sd_seterr(err, errlen, SD_ERR_FORMAT, __VA_ARGS__)

static sd_status check_ids(const char *what, const int32_t *ids, size_t n, size_t cap, char *err, size_t errlen)
{
    if (n > cap) return BAD("msg: %s has %zu entries (max %zu)", what, n, cap);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0) return BAD("msg: %s[%zu] = %d is negative", what, i, (int)ids[i]);
    return SD_OK;
}

static sd_status check_str(const char *what, const char *s, char *err, size_t errlen)
{
    if (s && strlen(s) > SD_MSG_MAX_STRING) return BAD("msg: %s longer than %u bytes", what, SD_MSG_MAX_STRING);
    return SD_OK;
}

/* A list of acceptance probabilities: bounded, each in [0, 1]. */
static sd_status check_probs(const char *what, const float *p, size_t n, char *err, size_t errlen)
{
    if (n > SD_MSG_MAX_POSITIONS) return BAD("msg: %s has %zu entries (max %u)", what, n, SD_MSG_MAX_POSITIONS);
    for (size_t i = 0; i < n; i++)
        if (!(p[i] >= 0.0f && p[i] <= 1.0f)) return BAD("msg: %s[%zu] = %g is not a probability", what, i, p[i]);
    return SD_OK;
}

static sd_status check_stats(const Specd__Stats *s, char *err, size_t errlen)
{
    if (!s) return SD_OK;
    if (s->n_accepted_at > SD_MSG_MAX_POSITIONS)
        return BAD("msg: stats.accepted_at has %zu entries (max %u)", s->n_accepted_at, SD_MSG_MAX_POSITIONS);
    if (s->n_k_chosen > SD_MSG_MAX_POSITIONS)
        return BAD("msg: stats.k_chosen has %zu entries (max %u)", s->n_k_chosen, SD_MSG_MAX_POSITIONS);
    if (s->n_accept > SD_MSG_MAX_POSITIONS) return BAD("msg: stats.accept has %zu entries", s->n_accept);
    for (size_t i = 0; i < s->n_accept; i++) {
        const Specd__AcceptEstimate *a = s->accept[i];
        if (!a) return BAD("msg: stats.accept[%zu] missing", i);
        sd_status st = check_str("stats.accept.mode", a->mode, err, errlen);
        if (st == SD_OK) st = check_str("stats.accept.temperature", a->temperature, err, errlen);
        if (st == SD_OK) st = check_probs("stats.accept.accept", a->accept, a->n_accept, err, errlen);
        if (st != SD_OK) return st;
    }
    return SD_OK;
}

/* Sampling settings' lists: the bias halves of one length, bounded, ids >= 0
 * (the values and the vocabulary are the verifier's check: sd_req_new). */
static sd_status check_sampling(const char *what, const Specd__SamplingParams *s, char *err, size_t errlen)
{
    if (!s) return SD_OK;
    if (s->n_bias_ids != s->n_bias_values)
        return BAD("msg: %s.bias_ids has %zu entries, bias_values %zu", what, s->n_bias_ids, s->n_bias_values);
    if (s->n_bias_ids > SD_MAX_LOGIT_BIAS)
        return BAD("msg: %s.bias_ids has %zu entries (max %d)", what, s->n_bias_ids, SD_MAX_LOGIT_BIAS);
    size_t schema = s->json_schema ? strnlen(s->json_schema, SD_MAX_JSON_SCHEMA + 1) : 0;
    if (schema > SD_MAX_JSON_SCHEMA) return BAD("msg: %s.json_schema exceeds %d bytes", what, SD_MAX_JSON_SCHEMA);
    if (schema && s->json_object) return BAD("msg: %s has both json_object and json_schema", what);
    size_t regex = s->regex ? strnlen(s->regex, SD_MAX_REGEX + 1) : 0;
    if (regex > SD_MAX_REGEX) return BAD("msg: %s.regex exceeds %d bytes", what, SD_MAX_REGEX);
    if (regex && (schema || s->json_object)) return BAD("msg: %s has both JSON output and a regex", what);
    char name[64];
    snprintf(name, sizeof name, "%s.bias_ids", what);
    sd_status st = check_ids(name, s->bias_ids, s->n_bias_ids, SD_MAX_LOGIT_BIAS, err, errlen);
    snprintf(name, sizeof name, "%s.allowed_token_ids", what);
    if (st == SD_OK) st = check_ids(name, s->allowed_token_ids, s->n_allowed_token_ids, SD_MSG_MAX_TOKENS, err, errlen);
    return st;
}

static sd_status check_submit(const Specd__Submit *m, char *err, size_t errlen)
{
    if (m->request_id == 0) return BAD("msg: submit.request_id is 0");
    if (m->request_id > SD_MSG_MAX_REQUEST_ID) return BAD("msg: submit.request_id is beyond 2^56");
    sd_status st = check_ids("submit.prompt_ids", m->prompt_ids, m->n_prompt_ids, SD_MSG_MAX_TOKENS, err, errlen);
    if (st == SD_OK) st = check_sampling("submit.sampling", m->sampling, err, errlen);
    if (st == SD_OK) st = check_ids("submit.stop_ids", m->stop_ids, m->n_stop_ids, SD_MSG_MAX_TOKENS, err, errlen);
    if (st == SD_OK)
        st = check_ids("submit.resume_ids", m->resume_ids, m->n_resume_ids, SD_MSG_MAX_TOKENS, err, errlen);
    if (st == SD_OK && m->spec && m->spec->num_draft > SD_MSG_MAX_POSITIONS)
        return BAD("msg: submit.spec.num_draft = %u (max %u)", m->spec->num_draft, SD_MSG_MAX_POSITIONS);
    if (st == SD_OK && m->logprobs && m->logprobs->top > SD_MSG_MAX_LOGPROBS)
        return BAD("msg: submit.logprobs.top = %u (max %u)", m->logprobs->top, SD_MSG_MAX_LOGPROBS);
    return st;
}

/* A list of per-position log-probabilities: entries present, at most
 * SD_MSG_MAX_LOGPROBS alternatives each, token ids >= 0, no NaN. */
static sd_status check_logprobs(const char *what, Specd__TokenLogprob *const *lp, size_t n, char *err, size_t errlen)
{
    if (n > SD_MSG_MAX_TOKENS) return BAD("msg: %s has %zu entries", what, n);
    for (size_t i = 0; i < n; i++) {
        if (!lp[i]) return BAD("msg: %s[%zu] missing", what, i);
        /* NaN and +inf: JSON has neither (json_real refuses them), and a log-probability is <= 0 */
        if (!(lp[i]->logprob <= FLT_MAX)) return BAD("msg: %s[%zu].logprob is NaN or +inf", what, i);
        if (lp[i]->n_top > SD_MSG_MAX_LOGPROBS) return BAD("msg: %s[%zu] has %zu alternatives", what, i, lp[i]->n_top);
        for (size_t j = 0; j < lp[i]->n_top; j++) {
            const Specd__TopLogprob *t = lp[i]->top[j];
            if (!t || t->token < 0 || !(t->logprob <= FLT_MAX))
                return BAD("msg: %s[%zu].top[%zu] is missing or invalid", what, i, j);
        }
    }
    return SD_OK;
}

static sd_status check_token_event(const Specd__TokenEvent *m, char *err, size_t errlen)
{
    sd_status st = check_ids("token_event.tokens", m->tokens, m->n_tokens, SD_MSG_MAX_TOKENS, err, errlen);
    if (st == SD_OK && m->stats && m->stats->n_accepted_at > SD_MSG_MAX_POSITIONS)
        return BAD("msg: token_event.stats.accepted_at too long (%zu)", m->stats->n_accepted_at);
    if (st == SD_OK && m->stats && m->stats->adapt)
        st = check_probs("token_event.stats.adapt.accept", m->stats->adapt->accept, m->stats->adapt->n_accept, err,
                         errlen);
    if (st == SD_OK && m->n_logprobs != 0 && m->n_logprobs != m->n_tokens)
        return BAD("msg: token_event has %zu logprobs for %zu tokens", m->n_logprobs, m->n_tokens);
    if (st == SD_OK) st = check_logprobs("token_event.logprobs", m->logprobs, m->n_logprobs, err, errlen);
    if (st == SD_OK)
        st = check_logprobs("token_event.prompt_logprobs", m->prompt_logprobs, m->n_prompt_logprobs, err, errlen);
    return st;
}

static sd_status check_draft_batch(const Specd__DraftBatch *m, char *err, size_t errlen)
{
    if (m->n_items > SD_MSG_MAX_ITEMS) return BAD("msg: draft_batch has %zu items", m->n_items);
    for (size_t i = 0; i < m->n_items; i++) {
        const Specd__DraftItem *it = m->items[i];
        if (!it) return BAD("msg: draft_batch.items[%zu] missing", i);
        if (it->num_draft > SD_MSG_MAX_POSITIONS)
            return BAD("msg: draft_batch.items[%zu].num_draft = %u", i, it->num_draft);
        if (it->request_id > SD_MSG_MAX_REQUEST_ID)
            return BAD("msg: draft_batch.items[%zu].request_id is beyond 2^56", i);
        sd_status st =
            check_ids("draft_batch.items.new_tokens", it->new_tokens, it->n_new_tokens, SD_MSG_MAX_TOKENS, err, errlen);
        if (st == SD_OK)
            st = check_ids("draft_batch.items.in_flight", it->in_flight, it->n_in_flight, SD_MSG_MAX_POSITIONS, err,
                           errlen);
        if (st != SD_OK) return st;
    }
    return SD_OK;
}

static sd_status check_draft_reply(const Specd__DraftReply *m, char *err, size_t errlen)
{
    if (m->n_results > SD_MSG_MAX_ITEMS) return BAD("msg: draft_reply has %zu results", m->n_results);
    for (size_t i = 0; i < m->n_results; i++) {
        const Specd__DraftResult *r = m->results[i];
        if (!r) return BAD("msg: draft_reply.results[%zu] missing", i);
        sd_status st =
            check_ids("draft_reply.results.tokens", r->tokens, r->n_tokens, SD_MSG_MAX_POSITIONS, err, errlen);
        if (st != SD_OK) return st;
        if (r->n_q > r->n_tokens) return BAD("msg: draft_reply.results[%zu] has more q than tokens", i);
        for (size_t j = 0; j < r->n_q; j++) {
            if (!r->q[j]) return BAD("msg: draft_reply.results[%zu].q[%zu] missing", i, j);
            if (r->q[j]->n_q > SD_MSG_MAX_PROBS) return BAD("msg: draft_reply q list too long (%zu)", r->q[j]->n_q);
            for (size_t k = 0; k < r->q[j]->n_q; k++)
                if (!r->q[j]->q[k] || r->q[j]->q[k]->token < 0) return BAD("msg: draft_reply q entry invalid");
        }
    }
    return SD_OK;
}

sd_status sd_msg_validate(const Specd__Envelope *env, char *err, size_t errlen)
{
    switch (env->body_case) {
    case SPECD__ENVELOPE__BODY_SUBMIT: return check_submit(env->submit, err, errlen);
    case SPECD__ENVELOPE__BODY_CANCEL: return SD_OK;
    case SPECD__ENVELOPE__BODY_TOKEN_EVENT: return check_token_event(env->token_event, err, errlen);
    case SPECD__ENVELOPE__BODY_ERROR: {
        sd_status st = check_str("error.code", env->error->code, err, errlen);
        return st == SD_OK ? check_str("error.message", env->error->message, err, errlen) : st;
    }
    case SPECD__ENVELOPE__BODY_DRAFT_OPEN:
        if (env->draft_open->request_id > SD_MSG_MAX_REQUEST_ID)
            return BAD("msg: draft_open.request_id is beyond 2^56");
        {
            sd_status st = check_ids("draft_open.context", env->draft_open->context, env->draft_open->n_context,
                                     SD_MSG_MAX_TOKENS, err, errlen);
            return st == SD_OK ? check_sampling("draft_open.sampling", env->draft_open->sampling, err, errlen) : st;
        }
    case SPECD__ENVELOPE__BODY_DRAFT_CLOSE:
        return env->draft_close->request_id > SD_MSG_MAX_REQUEST_ID ? BAD("msg: draft_close.request_id is beyond 2^56")
                                                                    : SD_OK;
    case SPECD__ENVELOPE__BODY_DRAFT_BATCH: return check_draft_batch(env->draft_batch, err, errlen);
    case SPECD__ENVELOPE__BODY_DRAFT_REPLY: return check_draft_reply(env->draft_reply, err, errlen);
    case SPECD__ENVELOPE__BODY_HEALTH_REQUEST: return SD_OK;
    case SPECD__ENVELOPE__BODY_HEALTH_REPLY: {
        const Specd__HealthReply *h = env->health_reply;
        sd_status st = check_str("health_reply.role", h->role, err, errlen);
        if (st == SD_OK) st = check_str("health_reply.model", h->model, err, errlen);
        if (st == SD_OK) st = check_str("health_reply.host", h->host, err, errlen);
        if (st == SD_OK) st = check_str("health_reply.device", h->device, err, errlen);
        return st == SD_OK ? check_stats(h->stats, err, errlen) : st;
    }
    default: return BAD("msg: envelope has no (known) body");
    }
}

const char *sd_msg_kind(const Specd__Envelope *env)
{
    if (!env) return "null";
    switch (env->body_case) {
    case SPECD__ENVELOPE__BODY_SUBMIT: return "submit";
    case SPECD__ENVELOPE__BODY_CANCEL: return "cancel";
    case SPECD__ENVELOPE__BODY_TOKEN_EVENT: return "token_event";
    case SPECD__ENVELOPE__BODY_ERROR: return "error";
    case SPECD__ENVELOPE__BODY_DRAFT_OPEN: return "draft_open";
    case SPECD__ENVELOPE__BODY_DRAFT_CLOSE: return "draft_close";
    case SPECD__ENVELOPE__BODY_DRAFT_BATCH: return "draft_batch";
    case SPECD__ENVELOPE__BODY_DRAFT_REPLY: return "draft_reply";
    case SPECD__ENVELOPE__BODY_HEALTH_REQUEST: return "health_request";
    case SPECD__ENVELOPE__BODY_HEALTH_REPLY: return "health_reply";
    default: return "unknown";
    }
}

int sd_msg_readable(void *sock)
{
    int events = 0;
    size_t sz = sizeof events;
    if (zmq_getsockopt(sock, ZMQ_EVENTS, &events, &sz) != 0) return 0;
    return (events & ZMQ_POLLIN) != 0;
}

/* vf_server_impl.h — PRIVATE to verifier/: the verifier server's state and
 * the functions its files share (each documented at its definition). The
 * server is split by concern, each file calling only those below it in this
 * list, never back up:
 *   vf_server.c  the routers' messages, health, the main loop, lifetime
 *   vf_step.c    the step: plan, choose the drafts, run it (serial,
 *                pipelined, --ngram, --draft-model)
 *   vf_drafts.c  drafts and spans: the n-gram lookup and fallback, the
 *                pipelined drafter's spans
 *   vf_admit.c   admission from the queue and preemption for KV
 *   vf_events.c  requests and the events sent to their routers
 * Threading: all of it runs on the thread of sd_vf_server_run. */
#ifndef SD_VF_SERVER_IMPL_H
#define SD_VF_SERVER_IMPL_H

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
#include "adapt.h"
#include "vf_convert.h"
#include "vf_draft.h"
#include "vf_front.h"
#include "vf_link.h"
#include "vf_pace.h"
#include "vf_server.h"

/* One request: the engine request, its drafter state and its router. */
typedef struct vf_req {
    sd_vf_slot slot;         /* slot.r: the engine request; slot.id == slot.r->id */
    sd_msg_id peer;          /* router identity */
    uint64_t rid;            /* router's request id */
    sd_spec_stats seen;      /* part of slot.r->stats already in the totals */
    sd_pipe_stats seen_pipe; /* likewise for the slot's drafting statistics */
    sd_areq aq;              /* adaptive speculation: its acceptance, the drafts chosen */
    int step_drafted;        /* the last step: the drafts it verified, */
    int step_accepted;       /* ... those it accepted */
    int step_source;         /* ... and where they came from (Specd__DraftSource) */
} vf_req;

struct sd_vf_server {
    const sd_vf_config *cfg;
    sd_engine *e;
    sd_kv_pool *pool;
    int vocab;
    void *sock; /* the main thread's end of the front relay (vf_front.h) */
    sd_vf_front *front;
    double published_ms;                    /* when health was last published to the front */
    double link_polled_ms;                  /* when the drafter link was last read between steps */
    int published_active, published_queued; /* ... and the request counts it showed */
    uint64_t instance;                      /* HealthReply.instance: random per process start */
    sd_curve *curve;                        /* --curve-keys: CURVE on both sockets, NULL = plain */
    sd_vf_link *link;
    vf_req **active;
    int n_active;
    vf_req **queue;
    int n_queue;
    uint64_t next_id;
    sd_spec_stats total; /* summed over requests */
    sd_pipe_stats pipe_total;
    uint64_t tokens_generated;
    uint32_t step_rows_max; /* the most rows one engine step had */
    uint64_t preemptions;   /* requests that gave their KV back (preempt_for_kv) */
    sd_req **reqs;          /* step scratch, [max_batch] */
    sd_vf_slot **slots;
    sd_proposal *props;
    int *budgets;                    /* drafts each request may verify this step */
    int *tell;                       /* pipelined: the budget the drafter is told (pre-drafts during prefill too) */
    bool *sampled;                   /* per active request: temperature > 0 */
    bool *ready;                     /* pipelined: had a span when the step began */
    sd_areq **aqs;                   /* step scratch for vf_adapt: the requests' adaptive states */
    int *avail, *offered, *accepted; /* drafts at hand; verified and accepted by the step */
    bool *had_q;                     /* those drafts came with q */
    int *catchup;                    /* tokens the drafter must first take in for the request (opened, or far behind) */
    int *chunk;                      /* prompt tokens each request prefills this step (sd_engine_prefill_plan) */
    double *draft_ms;                /* the drafter's time behind them */
    sd_proposer *ngram;              /* the verifier's own n-gram lookup: --ngram's drafts, else --spec-fallback's for
                             * requests the drafter left without drafts, and serial steps' lookup first */
    sd_proposer *local;              /* --draft-model: the draft model in this process (sd_vf_server_use_proposer) */
    int *fb_avail;                   /* the fallback's drafts at hand for each request (0: not a candidate) */
    int *fb_k;                       /* the drafts each request verifies (the fallback's choice for the candidates) */
    sd_propose_item *fb_items;
    sd_proposal *fb_out;
    int *lk_match;           /* serial, the lookup asked before the drafter: the n-gram length that matched */
    uint32_t lk_us;          /* ... and its time per request (µs) */
    sd_adapt ad;             /* adaptive speculation: measured cost and acceptance, the scheduler */
    sd_vf_pace pace;         /* pipelined: when waiting for drafts pays */
    char host[256];          /* gethostname */
    int threads, ncpu;       /* the CPU backend's threads (0: not on the CPU), CPUs of this process */
    int pipe_on;             /* the last pipelining decision, -1 before the first */
    const char *pipe_why;    /* ... and its reason (for the log) */
    bool lost;               /* the device is lost (sd_backend_lost): the serving loop ends */
    double last_step_end_ms; /* 0 after an idle spell */
    double step_begin_ms;    /* when this step's planning began */
    char model_name[256];
};

/* ---- requests and their events (vf_events.c) ------------------------- */
bool sd_vfs_speculates(const sd_vf_server *s);
void sd_vfs_send_to(sd_vf_server *s, const sd_msg_id *peer, const Specd__Envelope *env);
void sd_vfs_send_error(sd_vf_server *s, const sd_msg_id *peer, uint64_t rid, const char *code, const char *msg);
void sd_vfs_send_req_event(sd_vf_server *s, const vf_req *vr, bool with_new);
void sd_vfs_reject(sd_vf_server *s, const sd_msg_id *peer, uint64_t rid, int n_prompt, const char *code,
                   const char *msg);
int sd_vfs_find_req(vf_req *const *list, int n, const sd_msg_id *peer, uint64_t rid);
void sd_vfs_req_destroy(sd_vf_server *s, vf_req *vr);
void sd_vfs_remove_at(vf_req **list, int *n, int i);
void sd_vfs_emit(sd_vf_server *s);

/* ---- admission and preemption (vf_admit.c) --------------------------- */
int sd_vfs_promised_blocks(const sd_vf_server *s);
void sd_vfs_preempt_for_kv(sd_vf_server *s);
void sd_vfs_admit(sd_vf_server *s);

/* ---- drafts and spans (vf_drafts.c) ---------------------------------- */
sd_propose_item sd_vfs_lookup_item(const sd_vf_server *s, int i, int k);
void sd_vfs_lookup_props(sd_vf_server *s, int m, const int *k, bool timed);
int sd_vfs_look_up(sd_vf_server *s);
void sd_vfs_fallback_drafts(sd_vf_server *s);
bool sd_vfs_lookup_first(sd_vf_server *s, int m);
void sd_vfs_pick_spans(sd_vf_server *s, double now);
int sd_vfs_waiting_for_spans(sd_vf_server *s, int *rows, double *e_ready, int *k_sum, double *e_span);
double sd_vfs_wait_spans(sd_vf_server *s, double budget_ms);

/* ---- the step (vf_step.c) -------------------------------------------- */
void sd_vfs_step(sd_vf_server *s);

#endif

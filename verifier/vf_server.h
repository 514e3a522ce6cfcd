/* vf_server.h — the verifier's request handling and main loop.
 *
 * Binds a ROUTER socket for routers (through the front thread), keys requests by (router identity,
 * request_id), queues submitted requests (bounded, SD_VF_QUEUE_MAX), admits
 * them into the active set (<= --max-batch) when the KV pool can hold their
 * prompt, runs one engine step at a time (with drafts from the drafter link
 * when there is one) and streams TokenEvents back. Health requests are
 * answered by the front thread (vf_front.h) from the state published
 * between steps, so a long step never makes a lane look dead.
 *
 * Threading: everything here but the front thread runs on the thread that
 * calls sd_vf_server_run; it owns the engine, the model's KV pool, the
 * drafter link and its end of the front relay. */
#ifndef SD_VF_SERVER_H
#define SD_VF_SERVER_H

#include <signal.h>

#include "engine.h"
#include "proposer.h"
#include "status.h"
#include "vf_config.h"

typedef struct sd_vf_server sd_vf_server;

/* Creates the server over engine e (borrowed; its model's KV pool must be
 * initialised) with sockets from zctx: binds cfg->listen, connects
 * cfg->drafter when set. cfg is borrowed and must outlive the server.
 * Errors: SD_ERR_IO (bind / connect) or SD_ERR_NOMEM with a message. */
sd_status sd_vf_server_new(const sd_vf_config *cfg, sd_engine *e, void *zctx, sd_vf_server **out, char *err,
                           size_t errlen);

/* --draft-model: drafts from p (a draft model on the target's backend,
 * sd_draft_new), called in this process each step — serial speculation
 * without a drafter or messages. The server owns p from here on. */
void sd_vf_server_use_proposer(sd_vf_server *s, sd_proposer *p);

/* Serves until *stop becomes non-zero (set from a signal handler). Returns
 * SD_OK, SD_ERR_IO when the router socket fails, or SD_ERR_DEVICE when the
 * device is lost (sd_backend_lost after a failed step): the process should
 * exit so that its supervisor starts a new one. */
sd_status sd_vf_server_run(sd_vf_server *s, volatile sig_atomic_t *stop);

/* Frees every request (releasing its KV), closes the sockets, frees the
 * server; NULL is a no-op. */
void sd_vf_server_free(sd_vf_server *s);

#endif

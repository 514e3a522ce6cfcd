/* msg.h — the ZeroMQ transport every specd process uses.
 *
 * One ZeroMQ message = optional routing identity frame (ROUTER sockets only)
 * + exactly one frame holding a serialized specd.Envelope. This module packs
 * and sends envelopes, and receives, unpacks and validates them: an envelope
 * with no body set (or one this build does not know), lists above the bounds
 * below, negative token ids, oversize frames, extra frames or bytes that do
 * not unpack are rejected with a message, and the caller logs and drops them.
 * Nothing a peer sends can crash the receiver.
 *
 * Socket roles: the verifier binds ROUTER and routers connect DEALER; the
 * verifier connects DEALER to the drafter's ROUTER. sd_msg_* looks at the
 * socket type (ZMQ_TYPE) to decide whether an identity frame is expected:
 * ROUTER sockets, and PAIR sockets, which specd uses only for the inside of
 * a relay that carries a ROUTER's frames unchanged (verifier/vf_front.h).
 * Not thread-safe beyond what ZeroMQ sockets are (one thread per socket). */
#ifndef SD_MSG_H
#define SD_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "specd.pb-c.h"
#include "status.h"

/* Bounds enforced on every received envelope. */
#define SD_MSG_MAX_BYTES (64u << 20) /* one serialized envelope */
#define SD_MSG_MAX_TOKENS (1u << 20) /* any token-id list */
#define SD_MSG_MAX_ITEMS 4096u       /* draft items / results per batch */
#define SD_MSG_MAX_PROBS 65536u      /* sparse q entries per proposal */
#define SD_MSG_MAX_POSITIONS 256u    /* accepted_at entries, draft length */
#define SD_MSG_MAX_STRING 4096u      /* string fields */
#define SD_MSG_MAX_LOGPROBS 20u      /* alternatives per position (common/sample/logprob.h) */
#define SD_MSG_MAX_REQUEST_ID \
    ((UINT64_C(1) << 56) - 1) /* request ids: 56 bits (the drafter keys its state by
                                                          * peer in the 8 above, drafter/main.c) */

/* A ROUTER identity (ZeroMQ identities are at most 255 bytes). */
typedef struct sd_msg_id {
    uint8_t data[256];
    size_t len;
} sd_msg_id;

/* Receive flags. */
enum { SD_MSG_BLOCK = 0, SD_MSG_DONTWAIT = 1 };

/* A ZeroMQ socket of type (ZMQ_ROUTER, ZMQ_DEALER) with what every specd
 * socket has: ZMQ_LINGER 0, ZMQ_MAXMSGSIZE SD_MSG_MAX_BYTES (ZeroMQ drops the
 * connection of a peer that announces a larger frame, before buffering any
 * of it: no oversized frame costs memory), and send and receive high-water
 * marks of hwm messages (0: ZeroMQ's default). NULL on failure (errno). */
void *sd_msg_socket(void *zctx, int type, int hwm);

/* Serialises env and sends it on sock. id: the peer identity when sock is a
 * ROUTER socket (required then), ignored/NULL otherwise. Never blocks: a full
 * or unconnected socket gives SD_ERR_NOSPACE. Other failures SD_ERR_IO;
 * an envelope without a body SD_ERR_ARG. env stays owned by the caller. */
sd_status sd_msg_send(void *sock, const sd_msg_id *id, const Specd__Envelope *env, char *err, size_t errlen);

/* Receives one message. flags: SD_MSG_BLOCK or SD_MSG_DONTWAIT.
 * Returns SD_OK with *out set (free with sd_msg_free) and *id filled on ROUTER
 * sockets (id may be NULL when the caller does not care);
 * SD_ERR_TIMEOUT when DONTWAIT and nothing is waiting (or EINTR);
 * SD_ERR_FORMAT when a message arrived but was rejected (it is consumed; err
 * says why, the caller logs and drops it, id is filled when known);
 * SD_ERR_IO on a socket error. */
sd_status sd_msg_recv(void *sock, sd_msg_id *id, Specd__Envelope **out, int flags, char *err, size_t errlen);

/* Unpacks and validates one serialized envelope (what sd_msg_recv does with
 * the payload frame). SD_OK with *out owned by the caller, or SD_ERR_FORMAT. */
sd_status sd_msg_decode(const uint8_t *buf, size_t len, Specd__Envelope **out, char *err, size_t errlen);

/* Checks an unpacked envelope against the bounds above; SD_ERR_FORMAT naming
 * the offending field. */
sd_status sd_msg_validate(const Specd__Envelope *env, char *err, size_t errlen);

/* Frees an envelope returned by sd_msg_recv / sd_msg_decode; NULL is a no-op. */
void sd_msg_free(Specd__Envelope *env);

/* Short name of the envelope's body ("submit", "token_event", ...). */
const char *sd_msg_kind(const Specd__Envelope *env);

/* After a send or a receive on an edge-triggered ZMQ_FD: true when the socket
 * has a message waiting (ZMQ_EVENTS & ZMQ_POLLIN). */
int sd_msg_readable(void *sock);

#endif

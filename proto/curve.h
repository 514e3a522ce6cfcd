/* curve.h — the worker protocol's authentication and encryption (ZeroMQ
 * CURVE with a ZAP handler).
 *
 * A deployment's key directory, written once by `specd keygen DIR`, holds
 * two key pairs (Z85 text, one key per file):
 *   server.public, server.secret   the listening side of every worker
 *                                  socket (verifier, drafter)
 *   client.public, client.secret   every connecting side (the router's
 *                                  lanes, the verifier's drafter link)
 * Every process of the deployment gets the directory (--curve-keys DIR).
 * A listening socket then speaks CURVE as its server and admits only peers
 * that present client.public — checked by a ZAP handler this module runs
 * on the ZeroMQ context — so a peer without the client secret key cannot
 * even complete the handshake, let alone submit work; all traffic is
 * encrypted. Without --curve-keys sockets are plain (ipc:// in a 0700
 * directory, or a private network). */
#ifndef SD_CURVE_H
#define SD_CURVE_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

typedef struct sd_curve sd_curve;

/* Loads the key directory; serving: also starts the ZAP handler on zctx
 * (before any server socket binds). SD_ERR_IO / SD_ERR_FORMAT with a message
 * naming the file for a missing or malformed key. */
sd_status sd_curve_load(void *zctx, const char *dir, bool serving, sd_curve **out, char *err, size_t errlen);

/* Makes sock (before bind) a CURVE server that admits the client key only. */
sd_status sd_curve_server(const sd_curve *c, void *sock, char *err, size_t errlen);

/* Makes sock (before connect) a CURVE client of the deployment's servers. */
sd_status sd_curve_client(const sd_curve *c, void *sock, char *err, size_t errlen);

/* Stops the ZAP handler and frees c (before the context is terminated);
 * NULL is a no-op. */
void sd_curve_free(sd_curve *c);

/* Writes a fresh key directory (created 0700; secret files 0600). Refuses
 * to overwrite existing keys. */
sd_status sd_curve_keygen(const char *dir, char *err, size_t errlen);

#endif

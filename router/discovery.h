/* discovery.h — lanes from DNS names (--verifier-dns HOST:PORT): every
 * address HOST resolves to is a lane tcp://ADDRESS:PORT, as a Kubernetes
 * headless Service resolves to its pods. The names are resolved at start and
 * every interval (libevent's evdns, asynchronously on the router's loop): a
 * new address becomes a lane (sd_lanes_add), an address that is gone
 * retires its lane (its requests fail over), one that comes back returns. A
 * failed resolution changes nothing (a DNS hiccup must not empty the table).
 * Several routers resolving the same name each keep their own table. */
#ifndef SD_ROUTER_DISCOVERY_H
#define SD_ROUTER_DISCOVERY_H

#include <stddef.h>

#include "lanes.h"
#include "status.h"

struct event_base;

typedef struct sd_disc sd_disc;

/* names: "HOST:PORT" each (copied). dns_server: "IP[:PORT]" of the
 * nameserver to ask, or NULL for the system's (/etc/resolv.conf, with its
 * search domains, and /etc/hosts). lanes is borrowed. SD_ERR_ARG naming a
 * malformed name, SD_ERR_IO, SD_ERR_NOMEM. */
sd_status sd_disc_new(struct event_base *base, sd_lanes *lanes, const char *const *names, size_t n, double interval_s,
                      const char *dns_server, sd_disc **out, char *err, size_t errlen);

/* Stops resolving, and cancels the lookups still waiting for an answer (their
 * callbacks run later on the loop, which must run a little after: a drain's
 * flush). The lanes stay as they are. NULL or a second call: no-op. */
void sd_disc_stop(sd_disc *d);

void sd_disc_free(sd_disc *d);

#endif

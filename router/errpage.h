/* errpage.h — libevent's own error replies, rewritten as OpenAI-shaped JSON.
 *
 * evhttp answers some requests before they reach the router — an
 * unparsable request line, headers over --max-headers, a body over its
 * backstop limit — with a short HTML page, and libevent 2.1 has no hook to
 * change that. The router makes every connection's bufferevent itself
 * (conncap.h), so it watches the connection's output buffer: a complete
 * response there whose Content-Type is text/html is libevent's (the router
 * sends JSON and SSE only), and is replaced, before it is written, by the
 * same status with {"error": {"message", "type", "param", "code"}}.
 * Single-threaded: the router's event loop. */
#ifndef SD_ERRPAGE_H
#define SD_ERRPAGE_H

#include <event2/bufferevent.h>

/* Watches bev's output from now on. */
void sd_errpage_watch(struct bufferevent *bev);

#endif

/* curve.c — see curve.h. */
#include "curve.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "log.h"

#define KEY_Z85 40 /* a 32-byte key in Z85 */

struct sd_curve {
    char server_public[KEY_Z85 + 1], server_secret[KEY_Z85 + 1];
    char client_public[KEY_Z85 + 1], client_secret[KEY_Z85 + 1];
    uint8_t client_raw[32]; /* what the ZAP handler admits */
    void *zctx;
    pthread_t zap;
    bool zap_running;
    atomic_bool stop;
};

/* Reads DIR/NAME: one Z85 key (trailing blanks ignored). */
static sd_status read_key(const char *dir, const char *name, char out[KEY_Z85 + 1], char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return sd_seterr(err, errlen, SD_ERR_IO, "curve: cannot open %s: %s", path, strerror(errno));
    char line[128] = "";
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t n = got ? strcspn(line, " \t\r\n") : 0;
    uint8_t raw[32];
    if (n != KEY_Z85 || !zmq_z85_decode(raw, (line[n] = '\0', line)))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "curve: %s is not a key (40 Z85 characters; see specd keygen)",
                         path);
    memcpy(out, line, KEY_Z85 + 1);
    return SD_OK;
}

/* The ZAP handler: answers every handshake on the context; only CURVE
 * peers presenting the client key are admitted. */
static void *zap_main(void *arg)
{
    sd_curve *c = arg;
    void *rep = zmq_socket(c->zctx, ZMQ_REP);
    int zero = 0, tick = 100;
    zmq_setsockopt(rep, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(rep, ZMQ_RCVTIMEO, &tick, sizeof tick);
    if (zmq_bind(rep, "inproc://zeromq.zap.01") != 0) {
        SD_ERROR("curve: cannot start the ZAP handler: %s", zmq_strerror(zmq_errno()));
        zmq_close(rep);
        return NULL;
    }
    while (!atomic_load(&c->stop)) {
        /* version, request id, domain, address, identity, mechanism, credentials... */
        zmq_msg_t part[8];
        int n = 0, more = 1;
        bool ok = true;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, rep, 0) < 0) {
                zmq_msg_close(&m);
                ok = false;
                break;
            }
            more = zmq_msg_more(&m);
            if (n < 8) part[n++] = m;
            else zmq_msg_close(&m);
        }
        if (!ok && n == 0) continue; /* the receive timed out: check stop */
        bool admit = ok && n >= 7 && zmq_msg_size(&part[5]) == 5 && !memcmp(zmq_msg_data(&part[5]), "CURVE", 5) &&
                     zmq_msg_size(&part[6]) == 32 && !memcmp(zmq_msg_data(&part[6]), c->client_raw, 32);
        if (!admit) {
            SD_WARN_LIMITED("curve: refused a peer without the deployment's client key");
        }
        const char *code = admit ? "200" : "400", *text = admit ? "OK" : "not an authorized client key";
        zmq_send(rep, "1.0", 3, ZMQ_SNDMORE);
        if (n >= 2) zmq_send(rep, zmq_msg_data(&part[1]), zmq_msg_size(&part[1]), ZMQ_SNDMORE);
        else zmq_send(rep, "", 0, ZMQ_SNDMORE);
        zmq_send(rep, code, 3, ZMQ_SNDMORE);
        zmq_send(rep, text, strlen(text), ZMQ_SNDMORE);
        zmq_send(rep, "", 0, ZMQ_SNDMORE); /* user id */
        zmq_send(rep, "", 0, 0);           /* metadata */
        for (int i = 0; i < n; i++) zmq_msg_close(&part[i]);
    }
    zmq_close(rep);
    return NULL;
}

sd_status sd_curve_load(void *zctx, const char *dir, bool serving, sd_curve **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!zmq_has("curve")) return sd_seterr(err, errlen, SD_ERR_IO, "curve: this ZeroMQ has no CURVE support");
    sd_curve *c = calloc(1, sizeof *c);
    if (!c) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    sd_status st = read_key(dir, "server.public", c->server_public, err, errlen);
    if (st == SD_OK) st = read_key(dir, "client.public", c->client_public, err, errlen);
    if (st == SD_OK) st = read_key(dir, "client.secret", c->client_secret, err, errlen);
    if (st == SD_OK && serving) st = read_key(dir, "server.secret", c->server_secret, err, errlen);
    if (st == SD_OK) zmq_z85_decode(c->client_raw, c->client_public);
    c->zctx = zctx;
    if (st == SD_OK && serving) {
        if (pthread_create(&c->zap, NULL, zap_main, c) != 0)
            st = sd_seterr(err, errlen, SD_ERR_IO, "curve: cannot start the ZAP handler thread");
        else c->zap_running = true;
        usleep(20000); /* its socket binds before any server socket asks it */
    }
    if (st != SD_OK) {
        sd_curve_free(c);
        return st;
    }
    *out = c;
    return SD_OK;
}

static sd_status set(void *sock, int opt, const void *v, size_t n, const char *what, char *err, size_t errlen)
{
    if (zmq_setsockopt(sock, opt, v, n) == 0) return SD_OK;
    return sd_seterr(err, errlen, SD_ERR_IO, "curve: %s: %s", what, zmq_strerror(zmq_errno()));
}

sd_status sd_curve_server(const sd_curve *c, void *sock, char *err, size_t errlen)
{
    int one = 1;
    sd_status st = set(sock, ZMQ_CURVE_SERVER, &one, sizeof one, "CURVE_SERVER", err, errlen);
    if (st == SD_OK)
        st = set(sock, ZMQ_CURVE_SECRETKEY, c->server_secret, KEY_Z85 + 1, "server secret key", err, errlen);
    if (st == SD_OK) st = set(sock, ZMQ_ZAP_DOMAIN, "specd", 5, "ZAP domain", err, errlen);
    return st;
}

sd_status sd_curve_client(const sd_curve *c, void *sock, char *err, size_t errlen)
{
    sd_status st = set(sock, ZMQ_CURVE_SERVERKEY, c->server_public, KEY_Z85 + 1, "server key", err, errlen);
    if (st == SD_OK) st = set(sock, ZMQ_CURVE_PUBLICKEY, c->client_public, KEY_Z85 + 1, "client key", err, errlen);
    if (st == SD_OK)
        st = set(sock, ZMQ_CURVE_SECRETKEY, c->client_secret, KEY_Z85 + 1, "client secret key", err, errlen);
    return st;
}

void sd_curve_free(sd_curve *c)
{
    if (!c) return;
    if (c->zap_running) {
        atomic_store(&c->stop, true);
        pthread_join(c->zap, NULL);
    }
    memset(c->server_secret, 0, sizeof c->server_secret);
    memset(c->client_secret, 0, sizeof c->client_secret);
    free(c);
}

/* Writes one key file with mode. */
static sd_status write_key(const char *dir, const char *name, const char *key, mode_t mode, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0) return sd_seterr(err, errlen, SD_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    char line[KEY_Z85 + 2];
    snprintf(line, sizeof line, "%s\n", key);
    bool ok = write(fd, line, KEY_Z85 + 1) == KEY_Z85 + 1;
    close(fd);
    return ok ? SD_OK : sd_seterr(err, errlen, SD_ERR_IO, "cannot write %s", path);
}

sd_status sd_curve_keygen(const char *dir, char *err, size_t errlen)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return sd_seterr(err, errlen, SD_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    char sp[KEY_Z85 + 1], ss[KEY_Z85 + 1], cp[KEY_Z85 + 1], cs[KEY_Z85 + 1];
    if (zmq_curve_keypair(sp, ss) != 0 || zmq_curve_keypair(cp, cs) != 0)
        return sd_seterr(err, errlen, SD_ERR_IO, "cannot make keys: %s", zmq_strerror(zmq_errno()));
    sd_status st = write_key(dir, "server.secret", ss, 0600, err, errlen);
    if (st == SD_OK) st = write_key(dir, "server.public", sp, 0644, err, errlen);
    if (st == SD_OK) st = write_key(dir, "client.secret", cs, 0600, err, errlen);
    if (st == SD_OK) st = write_key(dir, "client.public", cp, 0644, err, errlen);
    memset(ss, 0, sizeof ss);
    memset(cs, 0, sizeof cs);
    return st;
}

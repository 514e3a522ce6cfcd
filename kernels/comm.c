/* comm.c — the host communicator (see comm.h): the ranks are threads of one
 * process meeting at an abortable barrier; an exchange copies each rank's
 * buffer into its slot of a shared host staging area, then every rank copies
 * all slots back, in rank order.
 *
 * A layer exchanges twice, so a decode step meets dozens of times: a waiting
 * rank spins a little before it sleeps (the others are usually microseconds
 * away), and the rank that completes a meeting wakes sleepers only when
 * there are some. */
#include "comm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPINS 4000 /* checks of a meeting's end before a waiting rank sleeps */

typedef struct host_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, refs;
    atomic_int arrived, sleepers;
    atomic_ulong generation; /* meetings completed */
    atomic_bool aborted;
    unsigned char *stage; /* [2][n][cap] bytes: exchanges alternate between the two halves */
    size_t cap;
    size_t grow_to; /* the largest exchange asked for since the last growth */
} host_group;

/* One rank's end: its group and the exchanges it made (which half is next). */
typedef struct host_rank {
    host_group *g;
    unsigned long exchanges;
} host_rank;

static host_group *grp(const sd_comm *c) { return ((host_rank *)c->impl)->g; }

/* Every rank meets here; SD_ERR_DEVICE once the group is aborted. The
 * orders are sequentially consistent: a sleeper's count and the meeting's
 * end are seen in one order by both sides, so no wake-up is lost. */
static sd_status meet(host_group *g)
{
    if (atomic_load(&g->aborted)) return SD_ERR_DEVICE;
    unsigned long gen = atomic_load(&g->generation);
    if (atomic_fetch_add(&g->arrived, 1) + 1 == g->n) {
        atomic_store(&g->arrived, 0);
        atomic_fetch_add(&g->generation, 1);
        if (atomic_load(&g->sleepers) > 0) {
            pthread_mutex_lock(&g->mu);
            pthread_cond_broadcast(&g->cv);
            pthread_mutex_unlock(&g->mu);
        }
        return atomic_load(&g->aborted) ? SD_ERR_DEVICE : SD_OK;
    }
    for (int i = 0; i < SPINS; i++) {
        if (atomic_load(&g->generation) != gen || atomic_load(&g->aborted)) goto done;
        cpu_relax();
    }
    pthread_mutex_lock(&g->mu);
    atomic_fetch_add(&g->sleepers, 1);
    while (atomic_load(&g->generation) == gen && !atomic_load(&g->aborted)) pthread_cond_wait(&g->cv, &g->mu);
    atomic_fetch_sub(&g->sleepers, 1);
    pthread_mutex_unlock(&g->mu);
done:
    return atomic_load(&g->aborted) ? SD_ERR_DEVICE : SD_OK;
}

/* Room for `bytes` a slot: the ranks agree on the size at a meeting, the
 * last to arrive grows the area while the others wait for the next one. */
static sd_status stage_room(host_group *g, size_t bytes)
{
    if (bytes <= g->cap) return SD_OK;
    pthread_mutex_lock(&g->mu);
    if (bytes > g->grow_to) g->grow_to = bytes;
    pthread_mutex_unlock(&g->mu);
    sd_status st = meet(g); /* everyone has stated its size and no one reads the area */
    if (st != SD_OK) return st;
    pthread_mutex_lock(&g->mu);
    if (g->grow_to > g->cap) {
        unsigned char *p = realloc(g->stage, 2 * g->grow_to * (size_t)g->n);
        if (p) {
            g->stage = p;
            g->cap = g->grow_to;
        }
    }
    bool ok = g->cap >= bytes;
    pthread_mutex_unlock(&g->mu);
    st = meet(g); /* the area is grown (or not) for everyone */
    return st != SD_OK ? st : ok ? SD_OK : SD_ERR_NOMEM;
}

/* One meeting an exchange: each writes its slot of this exchange's half,
 * meets, reads every slot. The next exchange writes the other half, and
 * this half again only after a meeting every rank reaches once it has read
 * (the next exchange's), so nothing is overwritten while read. */
static sd_status host_allgather(sd_comm *c, const float *send, float *recv, size_t n)
{
    host_rank *k = c->impl;
    host_group *g = k->g;
    size_t bytes = n * sizeof(float);
    sd_status st = stage_room(g, bytes);
    if (st != SD_OK) return st;
    sd_backend *be = c->be;
    unsigned char *half = g->stage + (k->exchanges++ & 1) * (size_t)g->n * g->cap;
    be->ops->to_host(be, half + (size_t)c->rank * g->cap, send, bytes);
    if ((st = meet(g)) != SD_OK) return st;
    for (int r = 0; r < g->n; r++) be->ops->to_backend(be, recv + (size_t)r * n, half + (size_t)r * g->cap, bytes);
    return SD_OK;
}

static sd_status host_broadcast(sd_comm *c, void *buf, size_t bytes, int root)
{
    host_group *g = grp(c);
    if (root < 0 || root >= g->n) return SD_ERR_ARG;
    sd_status st = stage_room(g, bytes);
    if (st != SD_OK) return st;
    if ((st = meet(g)) != SD_OK) return st; /* every rank has read the exchanges before */
    if (c->rank == root) memcpy(g->stage, buf, bytes);
    if ((st = meet(g)) != SD_OK) return st;
    if (c->rank != root) memcpy(buf, g->stage, bytes);
    return meet(g);
}

static sd_status host_barrier(sd_comm *c) { return meet(grp(c)); }

static void host_abort(sd_comm *c)
{
    host_group *g = grp(c);
    atomic_store(&g->aborted, true);
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static bool host_aborted(const sd_comm *c) { return atomic_load(&grp(c)->aborted); }

static void host_free(sd_comm *c)
{
    host_group *g = grp(c);
    free(c->impl);
    pthread_mutex_lock(&g->mu);
    bool last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g->stage);
        free(g);
    }
    free(c);
}

static const sd_comm_ops host_ops = {
    .name = "host",
    .allgather = host_allgather,
    .broadcast = host_broadcast,
    .barrier = host_barrier,
    .abort = host_abort,
    .aborted = host_aborted,
    .free = host_free,
    .capturable = false,
};

sd_status sd_comm_host_group(sd_backend *const *bes, int n, sd_comm **out, char *err, size_t errlen)
{
    if (n < 1 || n > SD_COMM_MAX_RANKS)
        return sd_seterr(err, errlen, SD_ERR_ARG, "a communicator group of %d ranks (1 to %d)", n, SD_COMM_MAX_RANKS);
    for (int r = 0; r < n; r++) out[r] = NULL;
    host_group *g = calloc(1, sizeof *g);
    if (!g) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory for a communicator group");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->n = n;
    for (int r = 0; r < n; r++) {
        sd_comm *c = calloc(1, sizeof *c);
        host_rank *k = c ? calloc(1, sizeof *k) : NULL;
        if (!k) {
            free(c);
            for (int q = 0; q < r; q++) sd_comm_free(out[q]);
            if (r == 0) free(g);
            for (int q = 0; q < n; q++) out[q] = NULL;
            return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory for a communicator group");
        }
        k->g = g;
        *c = (sd_comm){.ops = &host_ops, .rank = r, .size = n, .be = bes[r], .impl = k};
        g->refs++;
        out[r] = c;
    }
    return SD_OK;
}

void sd_comm_free(sd_comm *c)
{
    if (c && c->ops) c->ops->free(c);
}

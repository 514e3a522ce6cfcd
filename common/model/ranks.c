/* ranks.c — see ranks.h. */
#include "ranks.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct worker {
    struct sd_ranks *rk;
    int rank;
    pthread_t tid;
    bool started;
} worker;

struct sd_ranks {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long job; /* incremented for each sd_ranks_run */
    int pending;       /* workers still in the current job */
    bool stop;
    void (*fn)(void *ctx, int rank);
    void *ctx;
    worker *w; /* [n - 1]: ranks 1 .. n - 1 */
};

static void *worker_main(void *arg)
{
    worker *w = arg;
    sd_ranks *rk = w->rk;
    unsigned long seen = 0;
    pthread_mutex_lock(&rk->mu);
    for (;;) {
        while (!rk->stop && rk->job == seen) pthread_cond_wait(&rk->go, &rk->mu);
        if (rk->stop) break;
        seen = rk->job;
        void (*fn)(void *, int) = rk->fn;
        void *ctx = rk->ctx;
        pthread_mutex_unlock(&rk->mu);
        fn(ctx, w->rank);
        pthread_mutex_lock(&rk->mu);
        if (--rk->pending == 0) pthread_cond_signal(&rk->done);
    }
    pthread_mutex_unlock(&rk->mu);
    return NULL;
}

sd_status sd_ranks_new(int n, sd_ranks **out, char *err, size_t errlen)
{
    *out = NULL;
    if (n < 1) return sd_seterr(err, errlen, SD_ERR_ARG, "a group of %d ranks", n);
    sd_ranks *rk = calloc(1, sizeof *rk);
    if (!rk || !(rk->w = calloc((size_t)(n > 1 ? n - 1 : 1), sizeof *rk->w))) {
        free(rk);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory for %d rank threads", n - 1);
    }
    rk->n = n;
    pthread_mutex_init(&rk->mu, NULL);
    pthread_cond_init(&rk->go, NULL);
    pthread_cond_init(&rk->done, NULL);
    for (int r = 1; r < n; r++) {
        worker *w = &rk->w[r - 1];
        *w = (worker){.rk = rk, .rank = r};
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            sd_ranks_free(rk);
            return sd_seterr(err, errlen, SD_ERR_NOMEM, "cannot start the thread of rank %d", r);
        }
        w->started = true;
    }
    *out = rk;
    return SD_OK;
}

void sd_ranks_run(sd_ranks *rk, void (*fn)(void *ctx, int rank), void *ctx)
{
    pthread_mutex_lock(&rk->mu);
    rk->fn = fn;
    rk->ctx = ctx;
    rk->pending = rk->n - 1;
    rk->job++;
    pthread_cond_broadcast(&rk->go);
    pthread_mutex_unlock(&rk->mu);
    fn(ctx, 0);
    pthread_mutex_lock(&rk->mu);
    while (rk->pending > 0) pthread_cond_wait(&rk->done, &rk->mu);
    pthread_mutex_unlock(&rk->mu);
}

void sd_ranks_free(sd_ranks *rk)
{
    if (!rk) return;
    pthread_mutex_lock(&rk->mu);
    rk->stop = true;
    pthread_cond_broadcast(&rk->go);
    pthread_mutex_unlock(&rk->mu);
    for (int r = 1; r < rk->n; r++)
        if (rk->w[r - 1].started) pthread_join(rk->w[r - 1].tid, NULL);
    pthread_mutex_destroy(&rk->mu);
    pthread_cond_destroy(&rk->go);
    pthread_cond_destroy(&rk->done);
    free(rk->w);
    free(rk);
}

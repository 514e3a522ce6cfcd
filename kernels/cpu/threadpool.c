/* threadpool.c — see threadpool.h. */
#include "threadpool.h"

#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SD_SPIN_PAUSES 2000 /* pause-spins before yielding the core */
#define SD_SPIN_LIMIT 20000 /* then sleep on the condition variable */

struct sd_pool {
    int n;
    pthread_t *threads;
    atomic_uint gen;     /* bumped once per run */
    atomic_int done;     /* workers finished in this run */
    atomic_int sleeping; /* workers blocked on cv */
    atomic_bool stop;
    sd_pool_fn fn;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct worker_arg {
    sd_pool *pool;
    int index;
    unsigned gen0;
} worker_arg;

/* Spins briefly, then yields the core: when other processes compete for the
 * CPUs (verifier and drafter on one machine), a thread that only spins would
 * hold the core its peer needs to finish. */
static inline void backoff(int spin)
{
    if (spin < SD_SPIN_PAUSES) _mm_pause();
    else sched_yield();
}

static unsigned wait_for_gen(sd_pool *p, unsigned seen)
{
    for (int spin = 0; spin < SD_SPIN_LIMIT; spin++) {
        unsigned g = atomic_load(&p->gen);
        if (g != seen) return g;
        backoff(spin);
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleeping, 1);
    while (atomic_load(&p->gen) == seen) pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return atomic_load(&p->gen);
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    sd_pool *p = wa->pool;
    int index = wa->index;
    unsigned seen = wa->gen0; /* not gen now: a run may already have started */
    free(wa);
    for (;;) {
        seen = wait_for_gen(p, seen);
        if (atomic_load(&p->stop)) break;
        p->fn(p->ctx, index, p->n);
        atomic_fetch_add(&p->done, 1);
    }
    return NULL;
}

sd_status sd_pool_new(int n_threads, sd_pool **out, char *err, size_t errlen)
{
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    sd_pool *p = calloc(1, sizeof *p);
    if (!p) return sd_seterr(err, errlen, SD_ERR_NOMEM, "thread pool: out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "thread pool: out of memory for %d threads", n_threads);
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        int rc = ENOMEM;
        if (wa) *wa = (worker_arg){p, i, atomic_load(&p->gen)};
        if (!wa || (rc = pthread_create(&p->threads[i], NULL, worker_main, wa)) != 0) {
            free(wa);
            p->n = i; /* only i-1 workers exist */
            sd_pool_free(p);
            return sd_seterr(err, errlen, SD_ERR_NOMEM, "thread pool: cannot start worker %d of %d: %s", i, n_threads,
                             strerror(rc));
        }
    }
    *out = p;
    return SD_OK;
}

static void wake_sleepers(sd_pool *p)
{
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

void sd_pool_run(sd_pool *p, sd_pool_fn fn, void *ctx)
{
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->done, 0);
    atomic_fetch_add(&p->gen, 1);
    wake_sleepers(p);
    fn(ctx, 0, p->n);
    for (int spin = 0; atomic_load(&p->done) < p->n - 1; spin++) backoff(spin);
}

int sd_pool_size(const sd_pool *p) { return p->n; }

void sd_pool_free(sd_pool *p)
{
    if (!p) return;
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->gen, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

void sd_split_range(int total, int align, int i, int n, int *lo, int *hi)
{
    if (align < 1) align = 1;
    int units = (total + align - 1) / align;
    int base = units / n, extra = units % n;
    int u0 = i * base + (i < extra ? i : extra);
    int u1 = u0 + base + (i < extra ? 1 : 0);
    *lo = u0 * align < total ? u0 * align : total;
    *hi = u1 * align < total ? u1 * align : total;
}

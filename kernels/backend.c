/* backend.c — backend-independent helpers (see backend.h). */
#include "backend.h"

#include <sched.h>
#include <unistd.h>

void sd_backend_free(sd_backend *be)
{
    if (be && be->ops && be->ops->destroy) be->ops->destroy(be);
}

bool sd_backend_lost(sd_backend *be) { return be && be->ops && be->ops->lost && be->ops->lost(be); }

void sd_backend_host_parallel(sd_backend *be, void (*fn)(void *ctx, int i, int n), void *ctx)
{
    if (be && be->ops && be->ops->host_parallel) be->ops->host_parallel(be, fn, ctx);
    else fn(ctx, 0, 1);
}

static void count_threads(void *ctx, int i, int n)
{
    if (i == 0) *(int *)ctx = n;
}

int sd_backend_host_threads(sd_backend *be)
{
    int n = 1;
    sd_backend_host_parallel(be, count_threads, &n);
    return n > 0 ? n : 1;
}

int sd_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

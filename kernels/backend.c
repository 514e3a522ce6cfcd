/* backend.c — backend-independent helpers (see backend.h). */
#include "backend.h"

#include <sched.h>
#include <unistd.h>

void sd_backend_free(sd_backend *be)
{
    if (be && be->ops && be->ops->destroy) be->ops->destroy(be);
}

bool sd_backend_lost(sd_backend *be)
{
    return be && be->ops && be->ops->lost && be->ops->lost(be);
}

int sd_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

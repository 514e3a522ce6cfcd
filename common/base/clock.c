/* clock.c — see clock.h. */
#include "clock.h"

#include <time.h>

double sd_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double sd_now_ms(void) { return sd_now_s() * 1e3; }

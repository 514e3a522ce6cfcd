/* clock.h — the monotonic clock every program and worker reads for
 * durations, deadlines and rates (never wall time: see log.c for stamps). */
#ifndef SD_CLOCK_H
#define SD_CLOCK_H

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin: use differences). */
double sd_now_s(void);

/* The same clock in milliseconds. */
double sd_now_ms(void);

#endif

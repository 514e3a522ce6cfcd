/* log.c — see log.h. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static sd_log_level g_level = SD_LOG_INFO;
static char g_tag[32] = "specd";

void sd_log_init(const char *tag, sd_log_level level)
{
    g_level = level;
    if (tag) {
        strncpy(g_tag, tag, sizeof g_tag - 1);
        g_tag[sizeof g_tag - 1] = '\0';
    }
}

sd_log_level sd_log_parse_level(const char *s)
{
    if (!s) return SD_LOG_INFO;
    if (!strcmp(s, "debug")) return SD_LOG_DEBUG;
    if (!strcmp(s, "warn")) return SD_LOG_WARN;
    if (!strcmp(s, "error")) return SD_LOG_ERROR;
    return SD_LOG_INFO;
}

static void emit(sd_log_level level, const char *msg)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03ld %s %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, g_tag,
            names[level], msg);
}

void sd_log(sd_log_level level, const char *fmt, ...)
{
    if (level < g_level) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    emit(level, msg);
}

void sd_log_limited(sd_log_limit *lim, sd_log_level level, const char *fmt, ...)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    if (level < g_level) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned left_out = 0;
    bool print;
    pthread_mutex_lock(&mu);
    if (ts.tv_sec != lim->second) {
        left_out = lim->dropped;
        lim->second = ts.tv_sec;
        lim->printed = lim->dropped = 0;
    }
    print = lim->printed < SD_LOG_BURST;
    if (print) lim->printed++;
    else lim->dropped++;
    pthread_mutex_unlock(&mu);
    if (!print) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (left_out && n >= 0 && (size_t)n < sizeof msg)
        snprintf(msg + n, sizeof msg - (size_t)n, " (and %u more like it left out before)", left_out);
    emit(level, msg);
}

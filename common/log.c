/* log.c — see log.h. */
#include "log.h"

#include <stdarg.h>
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

void sd_log(sd_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < g_level) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03ld %s %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000, g_tag, names[level], msg);
}

/* log.h — process-wide logging to stderr with a level and a component tag.
 * Thread-safe (one fprintf per line). The level is set once at start-up. */
#ifndef SD_LOG_H
#define SD_LOG_H

typedef enum {
    SD_LOG_DEBUG = 0,
    SD_LOG_INFO = 1,
    SD_LOG_WARN = 2,
    SD_LOG_ERROR = 3,
} sd_log_level;

/* Sets the minimum level printed (default SD_LOG_INFO) and the process tag
 * printed on every line (e.g. "verifier"); tag is copied. */
void sd_log_init(const char *tag, sd_log_level level);

/* Parses "debug|info|warn|error"; returns SD_LOG_INFO for anything else. */
sd_log_level sd_log_parse_level(const char *s);

void sd_log(sd_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A call site's budget of lines: messages a peer can provoke (malformed
 * frames, failed sends, bad keys) are logged at most SD_LOG_BURST times per
 * second from one site; the first line after a quiet spell says how many
 * were left out. Zero-initialised; thread-safe. */
#define SD_LOG_BURST 5
typedef struct sd_log_limit {
    long long second; /* the second the count is for */
    unsigned printed, dropped;
} sd_log_limit;

void sd_log_limited(sd_log_limit *lim, sd_log_level level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define SD_WARN_LIMITED(...)                                \
    do {                                                    \
        static sd_log_limit sd_lim_;                        \
        sd_log_limited(&sd_lim_, SD_LOG_WARN, __VA_ARGS__); \
    } while (0)

#define SD_DEBUG(...) sd_log(SD_LOG_DEBUG, __VA_ARGS__)
#define SD_INFO(...) sd_log(SD_LOG_INFO, __VA_ARGS__)
#define SD_WARN(...) sd_log(SD_LOG_WARN, __VA_ARGS__)
#define SD_ERROR(...) sd_log(SD_LOG_ERROR, __VA_ARGS__)

#endif

#include "log.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static log_format_t g_format = LOG_FORMAT_PRETTY;
static log_level_t g_min = LOG_INFO;
static bool g_color;

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static const char *const level_tags[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
static const char *const level_colors[] = {"\033[2m", "\033[32m", "\033[33m", "\033[31m"};

void log_init(log_format_t format, log_level_t min_level)
{
    g_format = format;
    g_min = min_level;
    g_color = format == LOG_FORMAT_PRETTY && isatty(STDERR_FILENO);
}

bool log_enabled(log_level_t level)
{
    return level >= g_min;
}

void log_msg(log_level_t level, const char *module, const char *fmt, ...)
{
    if (level < g_min)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);

    if (g_format == LOG_FORMAT_JSON) {
        char ts[64];
        struct tm utc;
        gmtime_r(&tv.tv_sec, &utc);
        snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", utc.tm_year + 1900,
                 utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                 (long)(tv.tv_usec / 1000));
        json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "ts", ts, "level", level_names[level],
                              "module", module, "msg", msg);
        if (o) {
            char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
            if (line) {
                fprintf(stderr, "%s\n", line);
                free(line);
            }
            json_decref(o);
        }
    } else if (g_color) {
        fprintf(stderr, "\033[2m%02d:%02d:%02d.%03ld\033[0m %s%s\033[0m \033[1m%s\033[0m: %s\n",
                tm.tm_hour, tm.tm_min, tm.tm_sec, (long)(tv.tv_usec / 1000), level_colors[level],
                level_tags[level], module, msg);
    } else {
        fprintf(stderr, "%02d:%02d:%02d.%03ld %s %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                (long)(tv.tv_usec / 1000), level_tags[level], module, msg);
    }
    fflush(stderr);
}

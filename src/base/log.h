/* Levelled logging to stderr, human ("pretty") or one JSON object per line ("json"). */
#ifndef MESH_LOG_H
#define MESH_LOG_H

#include <stdbool.h>

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level_t;
typedef enum { LOG_FORMAT_PRETTY = 0, LOG_FORMAT_JSON } log_format_t;

void log_init(log_format_t format, log_level_t min_level);
bool log_enabled(log_level_t level);
void log_msg(log_level_t level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define LOGD(mod, ...) log_msg(LOG_DEBUG, mod, __VA_ARGS__)
#define LOGI(mod, ...) log_msg(LOG_INFO, mod, __VA_ARGS__)
#define LOGW(mod, ...) log_msg(LOG_WARN, mod, __VA_ARGS__)
#define LOGE(mod, ...) log_msg(LOG_ERROR, mod, __VA_ARGS__)

#endif

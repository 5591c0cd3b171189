#include "util.h"

#include <errno.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

void buf_init(buf_t *b, size_t limit)
{
    b->data = NULL;
    b->len = 0;
    b->cap_alloc = 0;
    b->limit = limit;
}

static int buf_reserve(buf_t *b, size_t extra)
{
    if (extra > b->limit || b->len > b->limit - extra) return -E2BIG;
    size_t need = b->len + extra + 1; /* keep room for a NUL terminator */
    if (need <= b->cap_alloc) return 0;
    if (need > SIZE_MAX / 4) return -ENOMEM;
    size_t n = b->cap_alloc ? b->cap_alloc : 256;
    while (n < need)
        n *= 2;
    char *p = realloc(b->data, n);
    if (!p) return -ENOMEM;
    b->data = p;
    b->cap_alloc = n;
    return 0;
}

int buf_append(buf_t *b, const void *data, size_t len)
{
    int rc = buf_reserve(b, len);
    if (rc) return rc;
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int buf_printf(buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return -EINVAL;
    int rc = buf_reserve(b, (size_t)n);
    if (rc) return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void buf_reset(buf_t *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

void buf_free(buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap_alloc = 0;
}

void buf_consume(buf_t *b, size_t n)
{
    if (n >= b->len) {
        buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

void argv_free(char **argv)
{
    if (!argv) return;
    for (char **p = argv; *p; p++)
        free(*p);
    free(argv);
}

int argv_split(const char *s, char ***out)
{
    size_t n = 0, cap = 8;
    char **v = calloc(cap, sizeof *v);
    char *cur = malloc(strlen(s) + 1);
    if (!v || !cur) goto nomem;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p) break;
        size_t len = 0;
        char quote = 0;
        while (*p && (quote || (*p != ' ' && *p != '\t' && *p != '\n'))) {
            if (quote) {
                if (*p == quote) {
                    quote = 0;
                } else if (*p == '\\' && quote == '"' && (p[1] == '"' || p[1] == '\\')) {
                    cur[len++] = *++p;
                } else {
                    cur[len++] = *p;
                }
            } else if (*p == '"' || *p == '\'') {
                quote = *p;
            } else if (*p == '\\' && p[1]) {
                cur[len++] = *++p;
            } else {
                cur[len++] = *p;
            }
            p++;
        }
        if (quote) {
            free(cur);
            v[n] = NULL;
            argv_free(v);
            return -EINVAL;
        }
        if (n + 2 > cap) {
            cap *= 2;
            char **nv = realloc(v, cap * sizeof *v);
            if (!nv) goto nomem;
            v = nv;
        }
        v[n] = strndup(cur, len);
        if (!v[n]) goto nomem;
        n++;
        v[n] = NULL;
    }
    free(cur);
    v[n] = NULL;
    *out = v;
    return (int)n;
nomem:
    free(cur);
    if (v) {
        v[n] = NULL;
        argv_free(v);
    }
    return -ENOMEM;
}

uint64_t backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t max_ms)
{
    uint64_t d = base_ms;
    for (unsigned i = 0; i < attempt && d < max_ms; i++) {
        if (d > UINT64_MAX / 2) return max_ms;
        d *= 2;
    }
    return d < max_ms ? d : max_ms;
}

int model_name_from_path(const char *path, char *out, size_t outlen)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    if (len > 5 && strcasecmp(base + len - 5, ".gguf") == 0) len -= 5;
    if (len == 0 || len >= outlen) return -EINVAL;
    memcpy(out, base, len);
    out[len] = '\0';
    return 0;
}

bool slice_ieq(const char *p, size_t n, const char *s)
{
    return strlen(s) == n && strncasecmp(p, s, n) == 0;
}

int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9') /* no sign, no whitespace */
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max) return -EINVAL;
    *out = v;
    return 0;
}

uint64_t env_ms(const char *name, uint64_t def)
{
    uint64_t v;
    const char *s = getenv(name);
    if (s && parse_u64(s, 1, 86400000ULL * 7, &v) == 0) return v;
    return def;
}

int mkdir_p(const char *path, unsigned mode)
{
    char p[4096];
    int n = snprintf(p, sizeof p, "%s", path);
    if (n < 0 || (size_t)n >= sizeof p) return -ENAMETOOLONG;
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = '\0';
        int rc = mkdir(p, (mode_t)mode) != 0 && errno != EEXIST ? -errno : 0;
        *c = '/';
        if (rc) return rc;
    }
    return mkdir(p, (mode_t)mode) != 0 && errno != EEXIST ? -errno : 0;
}

/* Small helpers: growable capped buffers, argument splitting, backoff, names, mkdir -p. */
#ifndef MESH_UTIL_H
#define MESH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer with a hard cap (curl style): appends beyond cap fail with -E2BIG. */
typedef struct {
    char *data;
    size_t len;
    size_t cap_alloc;
    size_t limit;
} buf_t;

void buf_init(buf_t *b, size_t limit);
int buf_append(buf_t *b, const void *data, size_t len);
int buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_reset(buf_t *b);
void buf_free(buf_t *b);
/* Remove the first n bytes. */
void buf_consume(buf_t *b, size_t n);

/* Split a shell-like argument string (spaces, single and double quotes, backslash escapes)
 * into a NULL-terminated argv. Returns count >= 0 or -EINVAL for unbalanced quotes. Free the
 * result with argv_free. */
int argv_split(const char *s, char ***out);
void argv_free(char **argv);

/* Restart backoff: base_ms * 2^attempt, capped at max_ms. */
uint64_t backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t max_ms);

/* Model name from a path: the file name without a trailing ".gguf". Writes into out. */
int model_name_from_path(const char *path, char *out, size_t outlen);

/* Case-insensitive comparison of a (ptr,len) slice with a C string. */
bool slice_ieq(const char *p, size_t n, const char *s);

/* Parse a decimal unsigned integer in [min,max]; 0 on success, -EINVAL otherwise. */
int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* mkdir -p: path and its missing parents (mode for each one created). 0 or -errno. */
int mkdir_p(const char *path, unsigned mode);

/* Milliseconds from the environment variable name, or def when unset/invalid. */
uint64_t env_ms(const char *name, uint64_t def);

#endif

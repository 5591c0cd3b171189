/* model_file — is a model file usable, and has it changed? Checked off the event loop (the
 * libuv thread pool) before a llama-server is started for it: a file that is not a regular,
 * readable GGUF fails its load at once, without the unload-everything retry, and is remembered
 * as unusable until it changes (device, inode, size, mtime or ctime). */
#ifndef MESH_MODEL_FILE_H
#define MESH_MODEL_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns; /* ctime: a chmod that makes it readable counts as a change */
} file_id_t;

int file_id_of(const char *path, file_id_t *out); /* 0 or -errno (stat) */
bool file_id_same(const file_id_t *a, const file_id_t *b);

/* Pure: the first n bytes of a model file. 0 when they start like a GGUF; -EINVAL with why. */
int model_file_check_header(const uint8_t *b, size_t n, char *why, size_t len);

/* Blocking: a regular, readable file that starts like a GGUF (never waits on a FIFO). 0;
 * -ENOENT when it does not exist; another -errno with why when it is unusable. id receives the
 * identity of what was checked. */
int model_file_check(const char *path, file_id_t *id, char *why, size_t len);

typedef void (*model_file_cb)(void *data, int rc, const file_id_t *id, const char *why);
/* model_file_check on the thread pool; cb runs on the loop thread (rc -ECANCELED if the work
 * was cancelled). path is copied. */
int model_file_check_async(uv_loop_t *loop, const char *path, model_file_cb cb, void *data);

#endif

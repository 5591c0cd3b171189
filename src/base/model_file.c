#include "model_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void id_from_stat(const struct stat *st, file_id_t *out)
{
    out->dev = (uint64_t)st->st_dev;
    out->ino = (uint64_t)st->st_ino;
    out->size = (uint64_t)st->st_size;
    out->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    out->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

int file_id_of(const char *path, file_id_t *out)
{
    struct stat st;
    if (stat(path, &st) != 0) return -errno;
    id_from_stat(&st, out);
    return 0;
}

bool file_id_same(const file_id_t *a, const file_id_t *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

int model_file_check_header(const uint8_t *b, size_t n, char *why, size_t len)
{
    if (n < 8) {
        snprintf(why, len, "not a GGUF file (only %zu bytes)", n);
        return -EINVAL;
    }
    if (memcmp(b, "GGUF", 4) != 0) {
        char shown[4 * 4 + 1];
        size_t at = 0;
        for (int i = 0; i < 4; i++)
            at += (size_t)snprintf(shown + at, sizeof shown - at,
                                   b[i] >= 0x20 && b[i] < 0x7f ? "%c" : "\\x%02x", b[i]);
        snprintf(why, len, "not a GGUF file (it starts with '%s', not 'GGUF')", shown);
        return -EINVAL;
    }
    uint32_t version =
        (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
    if (version < 2 || version > 3) {
        snprintf(why, len, "GGUF version %u is not supported (llama.cpp reads 2 and 3)", version);
        return -EINVAL;
    }
    return 0;
}

int model_file_check(const char *path, file_id_t *id, char *why, size_t len)
{
    why[0] = '\0';
    /* O_NONBLOCK: opening a FIFO must not wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (e != ENOENT) snprintf(why, len, "cannot open it: %s", strerror(e));
        return -e;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        snprintf(why, len, "cannot stat it: %s", strerror(-rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        snprintf(why, len, "not a regular file");
    } else {
        id_from_stat(&st, id);
        uint8_t head[8];
        size_t have = 0;
        while (have < sizeof head) {
            ssize_t r = read(fd, head + have, sizeof head - have);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                rc = -errno;
                snprintf(why, len, "cannot read it: %s", strerror(-rc));
                break;
            }
            if (r == 0) break;
            have += (size_t)r;
        }
        if (!rc) rc = model_file_check_header(head, have, why, len);
    }
    close(fd);
    return rc;
}

typedef struct {
    uv_work_t work;
    char *path;
    model_file_cb cb;
    void *data;
    int rc;
    file_id_t id;
    char why[256];
} check_job_t;

static void check_work(uv_work_t *w)
{
    check_job_t *j = w->data;
    j->rc = model_file_check(j->path, &j->id, j->why, sizeof j->why);
}

static void check_done(uv_work_t *w, int status)
{
    check_job_t *j = w->data;
    j->cb(j->data, status == UV_ECANCELED ? -ECANCELED : j->rc, &j->id, j->why);
    free(j->path);
    free(j);
}

int model_file_check_async(uv_loop_t *loop, const char *path, model_file_cb cb, void *data)
{
    check_job_t *j = calloc(1, sizeof *j);
    if (!j || !(j->path = strdup(path))) {
        free(j);
        return -ENOMEM;
    }
    j->cb = cb;
    j->data = data;
    j->work.data = j;
    int rc = uv_queue_work(loop, &j->work, check_work, check_done);
    if (rc) {
        free(j->path);
        free(j);
    }
    return rc;
}

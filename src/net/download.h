/* download — HTTP(S) downloads of model files on the libuv loop (libcurl multi driven by
 * uv_poll + uv_timer; nothing blocks the loop). Each file is written to FILE.part, resumed with
 * a Range request after any failure, hashed (SHA-256, on the thread pool, following the writes)
 * when a hash is expected (given, or the hub's X-Linked-ETag / an ETag that is a sha256),
 * checked against the expected size and hash and only then renamed into place (a file nobody
 * gives a hash for has only its size checked). HF_TOKEN is sent as a bearer token to the hub's host
 * only (redirects are followed here, not by curl, so a redirect to a CDN never carries it). One
 * download per file: a second asker waits for the first. */
#ifndef MESH_DOWNLOAD_H
#define MESH_DOWNLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct dl dl_t;

/* err is NULL on success; path is the file in place. */
typedef void (*dl_done_fn)(void *data, int rc, const char *err, const char *path);
/* A small in-memory GET (the hub's /api/models listing): body NUL-terminated, or err. */
typedef void (*dl_fetch_fn)(void *data, int rc, const char *err, long status, const char *body,
                            size_t len);

typedef struct {
    const char *url;    /* where to GET it */
    const char *dest;   /* the final path (its directory is created) */
    const char *sha256; /* expected hex sha256, or NULL/"" to take the server's */
    const char *label;  /* the reference the user gave, for messages */
    uint64_t max_bytes; /* refuse a larger file (-EFBIG, nothing written) before its body; 0 any */
    uint64_t *size_out; /* optional: set to the file's size as soon as the server tells it */
} dl_req_t;

typedef struct {
    char label[256];
    char dest[1024];
    uint64_t bytes, total; /* total 0: not known yet */
    double rate;           /* bytes/s over the last second or so */
} dl_progress_t;

/* Retries and stall detection (the node fills them from its tunables, MESH_LLM_DL_*). */
typedef struct {
    uint64_t min_rate;   /* bytes/s a transfer must keep over stall_ms (default 1024) */
    uint64_t stall_ms;   /* rounded up to seconds (default 60000) */
    uint64_t retries;    /* retries without progress before giving up; 0: none (default 5) */
    uint64_t backoff_ms; /* first wait before a retry, doubling, at most 8000 (default 500) */
} dl_opts_t;
void dl_opts_default(dl_opts_t *o);

/* HF_ENDPOINT (default https://huggingface.co) and HF_TOKEN are read here. opts NULL: the
 * defaults. */
int dl_init(dl_t **out, uv_loop_t *loop, const dl_opts_t *opts);
/* Cancel every download (their .part files stay for a resume), close the handles; the loop
 * then runs out. Waiters are told -ECANCELED. */
void dl_close(dl_t *d);
const char *dl_hub(const dl_t *d); /* the hub endpoint without a trailing '/' */

/* Start (or join) the download of req->dest. The callback runs later, on the loop. */
int dl_start(dl_t *d, const dl_req_t *req, dl_done_fn cb, void *data);
/* GET url into memory (at most max_bytes), redirects followed, HF_TOKEN to the hub only. */
int dl_fetch(dl_t *d, const char *url, size_t max_bytes, dl_fetch_fn cb, void *data);

/* The downloads running now. Returns how many were written to out (at most max). */
size_t dl_list(dl_t *d, dl_progress_t *out, size_t max);
/* "label  12.3 MB / 491.0 MB  2.5%  10.1 MB/s  ETA 48s" (bar for a terminal). */
void dl_format_progress(const dl_progress_t *p, bool bar, char *buf, size_t len);

#endif

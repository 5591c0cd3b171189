/* dl_int — what download.c (the per-file state machine) and dl_curl.c (libcurl's multi interface
 * driven by the libuv loop) share. Internal to src/net. */
#ifndef MESH_DL_INT_H
#define MESH_DL_INT_H

#include <curl/curl.h>
#include <nettle/sha2.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "download.h"
#include "model_ref.h"
#include "util.h"

#define DL_MAX_REDIRECTS 10
#define DL_MAX_WAITERS 16
#define DL_ERR_MAX 1024
#define HASH_STEP (8u << 20) /* bytes hashed per thread-pool step, and per writeback start */
#define HASH_BUF (64u << 10) /* read buffer of a hash step (the thread pool's memory) */

typedef struct {
    dl_done_fn cb;
    void *data;
} waiter_t;

typedef struct xfer xfer_t;

typedef struct job {
    struct job *next;
    dl_t *d;
    char url0[MODEL_REF_URL_MAX]; /* the first URL (retries start there again) */
    char url[MODEL_REF_URL_MAX];  /* the URL of the current request */
    char *dest, *part, *label;
    char want_sha[65];   /* expected, "" to take the server's */
    char linked_sha[65]; /* from X-Linked-ETag */
    char etag_sha[65];   /* from an ETag that is a sha256 */
    int fd;
    uint64_t bytes;       /* on disk in .part, all hashed */
    uint64_t total;       /* 0 unknown */
    struct sha256_ctx st; /* nettle: SHA-NI when the CPU has it (libsodium's is 5x slower) */
    unsigned redirects, attempts;
    bool answered;   /* a server answered this job at least once (any HTTP status) */
    bool token_sent; /* the current request carries HF_TOKEN (its origin is the hub's) */
    uint64_t bytes_at_attempt;
    CURL *easy;
    struct curl_slist *hdrs;
    long status;
    uint64_t range_start, range_total; /* from Content-Range */
    bool body_ok;                      /* the current response's body goes into the file */
    char fatal[DL_ERR_MAX];
    int fatal_rc; /* with fatal: the error (-EIO unless said) */
    uint64_t max_bytes;
    uint64_t *size_out;
    uv_timer_t retry;
    bool retry_inited;
    uv_work_t work;
    bool hashing;    /* a hash step runs on the thread pool: [hashed, hash_to) */
    uint64_t hashed; /* bytes of the part hashed: the thread pool follows the writes */
    uint64_t hash_to;
    uint64_t synced; /* bytes whose writeback was started (the final fsync is then short) */
    bool resuming;   /* hashing the part found at the start, then the transfer begins */
    bool finishing;  /* the transfer ended: complete once the hash has caught up */
    bool rehash;     /* the part was truncated while a step ran: hash again from 0 */
    int work_rc;
    uint64_t rate_t, rate_b;
    double rate;
    waiter_t waiters[DL_MAX_WAITERS];
    size_t n_waiters;
    /* an in-memory fetch instead of a file */
    bool mem;
    buf_t body;
    dl_fetch_fn fetch_cb;
    void *fetch_data;
} job_t;

struct dl {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    char hub[512];
    char hub_origin[512]; /* scheme://host:port of the hub */
    char *token;
    dl_opts_t opts;
    job_t *jobs;
    bool closing;
    unsigned handles; /* open uv handles + pending work */
};

/* dl_curl.c */
/* scheme://host:port of url, lowercase. 0 or -EINVAL. */
int dl_origin_of(const char *url, char *out, size_t len);
/* Free d once it is closing and nothing is left (handles, jobs). */
void dl_maybe_free(dl_t *d);
/* d's timer closed (dl_close). */
void dl_timer_closed(uv_handle_t *h);

/* download.c */
/* A transfer of j ended (curl's result): redirect, retry, fail or complete. */
void dl_transfer_done(job_t *j, CURLcode res);

#endif

/* download — see download.h. The per-file state machine: requests, redirects, resume, writes,
 * hashing on the thread pool, checks, retries; dl_curl.c drives curl on the loop. */
#include "dl_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"
#include "model_ref.h"
#include "util.h"

static void begin(job_t *j);

/* The minimum rate (bytes/s, dl_opts_t.min_rate) a transfer must keep over the stall window
 * (dl_opts_t.stall_ms, rounded up to seconds) before it counts as stalled and is retried from
 * where it was: far below any home link, far above a hub trickling to keep it busy. */
static uint64_t dl_min_rate(const dl_t *d)
{
    return d->opts.min_rate > 0 ? d->opts.min_rate : 1;
}

static uint64_t dl_stall_s(const dl_t *d)
{
    return (d->opts.stall_ms + 999) / 1000;
}

/* ---------------------------------------------------------------------------------------- */

static void job_free(job_t *j)
{
    if (j->fd >= 0) close(j->fd);
    if (j->hdrs) curl_slist_free_all(j->hdrs);
    buf_free(&j->body);
    free(j->dest);
    free(j->part);
    free(j->label);
    free(j);
}

static void unlink_job(job_t *j)
{
    for (job_t **pp = &j->d->jobs; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            break;
        }
}

static void retry_closed(uv_handle_t *h)
{
    job_t *j = h->data;
    dl_t *d = j->d;
    job_free(j);
    d->handles--;
    dl_maybe_free(d);
}

/* What becomes of the partial file when a job ends in failure (finish() deletes an empty one). */
static const char *part_fate(const job_t *j)
{
    return !j->mem && j->bytes > 0 ? "; the .part file is kept for a resume" : "";
}

static void finish(job_t *j, int rc, const char *err);

static void cancel(job_t *j)
{
    char err[DL_ERR_MAX];
    snprintf(err, sizeof err, "download cancelled%s", part_fate(j));
    finish(j, -ECANCELED, err);
}

/* The job ends: tell everyone, free it (after its timer closed). rc 0: success. */
static void finish(job_t *j, int rc, const char *err)
{
    dl_t *d = j->d;
    unlink_job(j);
    if (j->easy) {
        curl_multi_remove_handle(d->multi, j->easy);
        curl_easy_cleanup(j->easy);
        j->easy = NULL;
    }
    if (j->mem) {
        const char *b = j->body.data ? j->body.data : ""; /* buf_t keeps it NUL-terminated */
        j->fetch_cb(j->fetch_data, rc, err, j->status, b, j->body.len);
    } else {
        if (rc != 0 && j->fd >= 0) {
            struct stat st;
            if (fstat(j->fd, &st) == 0 && st.st_size == 0) unlink(j->part);
        }
        for (size_t i = 0; i < j->n_waiters; i++)
            j->waiters[i].cb(j->waiters[i].data, rc, err, rc == 0 ? j->dest : NULL);
    }
    if (j->retry_inited) {
        j->retry.data = j;
        d->handles++;
        uv_close((uv_handle_t *)&j->retry, retry_closed);
    } else {
        job_free(j);
        dl_maybe_free(d);
    }
}

void dl_close(dl_t *d)
{
    if (!d || d->closing) return;
    d->closing = true;
    while (d->jobs) {
        job_t *j = d->jobs;
        if (j->hashing) { /* the thread pool finishes first; after_hash ends it */
            if (j->easy) {
                curl_multi_remove_handle(d->multi, j->easy);
                curl_easy_cleanup(j->easy);
                j->easy = NULL;
            }
            unlink_job(j);
            continue;
        }
        cancel(j);
    }
    d->handles++;
    uv_close((uv_handle_t *)&d->timer, dl_timer_closed);
}

/* ---------------------------------------------------------------------------------------- */

static void set_fatal(job_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_fatal(job_t *j, const char *fmt, ...)
{
    if (j->fatal[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->fatal, sizeof j->fatal, fmt, ap);
    va_end(ap);
}

static void take_sha(const char *v, size_t n, char out[65])
{
    while (n > 0 && isspace((unsigned char)v[n - 1]))
        n--;
    if (n >= 2 && v[0] == 'W' && v[1] == '/') v += 2, n -= 2;
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') v++, n -= 2;
    char tmp[65];
    if (n != 64) return;
    memcpy(tmp, v, 64);
    tmp[64] = 0;
    if (!model_ref_is_sha256(tmp)) return;
    for (int i = 0; i < 64; i++)
        tmp[i] = (char)tolower((unsigned char)tmp[i]);
    memcpy(out, tmp, 65);
}

static bool header_is(const char *line, size_t n, const char *name, const char **val, size_t *vn)
{
    size_t k = strlen(name);
    if (n <= k || line[k] != ':' || strncasecmp(line, name, k) != 0) return false;
    const char *v = line + k + 1;
    size_t left = n - k - 1;
    while (left > 0 && (*v == ' ' || *v == '\t'))
        v++, left--;
    while (left > 0 && (v[left - 1] == '\r' || v[left - 1] == '\n'))
        left--;
    *val = v;
    *vn = left;
    return true;
}

/* The headers of a 2xx response are complete: decide where the body goes. */
static bool body_start(job_t *j)
{
    if (j->mem) return true;
    if (j->status == 206) {
        if (j->range_start != j->bytes) {
            set_fatal(j, "%s: the server resumed at byte %llu, not %llu", j->label,
                      (unsigned long long)j->range_start, (unsigned long long)j->bytes);
            return false;
        }
        j->total = j->range_total;
    } else {
        curl_off_t cl = -1;
        curl_easy_getinfo(j->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        if (j->bytes > 0) { /* the server ignored the Range: start again */
            if (ftruncate(j->fd, 0) != 0 || lseek(j->fd, 0, SEEK_SET) != 0) {
                set_fatal(j, "%s: cannot truncate %s: %s", j->label, j->part, strerror(errno));
                return false;
            }
            j->bytes = j->synced = 0;
            if (j->hashing) { /* the step in flight read the old bytes: after_hash restarts */
                j->rehash = true;
            } else {
                sha256_init(&j->st);
                j->hashed = 0;
            }
        }
        j->total = cl > 0 ? (uint64_t)cl : 0;
    }
    if (j->total > 0 && j->size_out) *j->size_out = j->total;
    if (j->total > 0 && j->max_bytes && j->total > j->max_bytes) {
        set_fatal(j, "%s: the file is %.1f MB, more than the %.1f MB allowed", j->label,
                  j->total / 1e6, j->max_bytes / 1e6);
        j->fatal_rc = -EFBIG;
        return false;
    }
    if (j->total > 0 && j->total > j->bytes) {
        struct statvfs vs;
        char *dir = strdup(j->part);
        if (!dir) return false;
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        int rc = statvfs(slash ? (*dir ? dir : "/") : ".", &vs);
        free(dir);
        uint64_t need = j->total - j->bytes;
        uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
        if (rc == 0 && avail < need) {
            set_fatal(j,
                      "not enough disk space for %s: it needs %.1f MB more, %.1f MB are free "
                      "where %s goes",
                      j->label, need / 1e6, avail / 1e6, j->dest);
            return false;
        }
    }
    return true;
}

static size_t header_cb(char *line, size_t size, size_t nitems, void *userp)
{
    job_t *j = userp;
    size_t n = size * nitems;
    if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        const char *sp = memchr(line, ' ', n);
        j->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        j->body_ok = false;
        j->range_start = j->range_total = 0;
        return n;
    }
    const char *v;
    size_t vn;
    if (header_is(line, n, "x-linked-etag", &v, &vn)) {
        take_sha(v, vn, j->linked_sha);
    } else if (header_is(line, n, "etag", &v, &vn)) {
        take_sha(v, vn, j->etag_sha);
    } else if (header_is(line, n, "content-range", &v, &vn)) {
        char tmp[128];
        snprintf(tmp, sizeof tmp, "%.*s", (int)(vn < 127 ? vn : 127), v);
        unsigned long long a, b, t;
        if (sscanf(tmp, "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
            j->range_start = a;
            j->range_total = t;
        } else if (sscanf(tmp, "bytes */%llu", &t) == 1) {
            j->range_total = t;
        }
    } else if (n <= 2 && (line[0] == '\r' || line[0] == '\n')) {
        if (j->status >= 200 && j->status < 300) {
            if (!body_start(j)) return 0;
            j->body_ok = true;
        }
    }
    return n;
}

static void queue_hash(job_t *j);
static void complete(job_t *j);

/* New bytes in the part: hashed on the thread pool in steps (the loop only writes), their
 * writeback started so the final fsync has little left to do. */
/* The sha256 the file must have ("" when neither the caller nor the server says: then nothing
 * is hashed, only the size is checked). */
static const char *want_sha(const job_t *j)
{
    return j->want_sha[0] ? j->want_sha : j->linked_sha[0] ? j->linked_sha : j->etag_sha;
}

static void written(job_t *j)
{
    if (want_sha(j)[0] && !j->hashing && j->bytes - j->hashed >= HASH_STEP) queue_hash(j);
    if (j->bytes - j->synced >= HASH_STEP) {
        sync_file_range(j->fd, (off_t)j->synced, (off_t)(j->bytes - j->synced),
                        SYNC_FILE_RANGE_WRITE);
        j->synced = j->bytes;
    }
}

static size_t write_cb(char *p, size_t size, size_t nmemb, void *userp)
{
    job_t *j = userp;
    size_t n = size * nmemb;
    if (!j->body_ok) return n; /* a redirect's or an error's body */
    if (j->mem) return buf_append(&j->body, p, n) == 0 ? n : 0;
    if (j->total > 0 && j->bytes + n > j->total) {
        set_fatal(j, "%s: the server sent more than the %llu bytes it announced", j->label,
                  (unsigned long long)j->total);
        return 0;
    }
    if (j->max_bytes && j->bytes + n > j->max_bytes) { /* no size announced */
        set_fatal(j, "%s: the file is more than the %.1f MB allowed", j->label, j->max_bytes / 1e6);
        j->fatal_rc = -EFBIG;
        return 0;
    }
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(j->fd, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            int e = errno;
            /* drop what was written of this chunk, so the part stays hashed exactly */
            if (off > 0 && ftruncate(j->fd, (off_t)j->bytes) == 0)
                lseek(j->fd, (off_t)j->bytes, SEEK_SET);
            set_fatal(j, "%s: writing %s: %s%s", j->label, j->part, strerror(e),
                      e == ENOSPC ? " (the disk is full; the partial file is kept: free space "
                                    "and run again to resume)"
                                  : "");
            return 0;
        }
        off += (size_t)w;
    }
    j->bytes += n;
    written(j);
    return n;
}

/* The transfer has every byte: complete once the thread pool has hashed them all. */
static void complete_when_hashed(job_t *j)
{
    j->finishing = true;
    if (j->hashing) return; /* after_hash comes back */
    if (want_sha(j)[0] && j->hashed < j->bytes) {
        queue_hash(j);
        return;
    }
    complete(j);
}

static void retry_cb(uv_timer_t *t)
{
    job_t *j = t->data;
    begin(j);
}

/* slow: the attempt ended below the minimum rate, which is no progress (a trickle would else
 * be retried for ever) */
static void schedule_retry(job_t *j, const char *why, bool slow)
{
    if (j->bytes > j->bytes_at_attempt && !slow) j->attempts = 0; /* progress was made */
    j->bytes_at_attempt = j->bytes;
    unsigned max = (unsigned)j->d->opts.retries;
    if (j->attempts >= max) {
        char err[DL_ERR_MAX];
        snprintf(err, sizeof err, "%s: %s (gave up after %u retries%s)", j->label, why, max,
                 part_fate(j));
        finish(j, -EIO, err);
        return;
    }
    uint64_t delay = backoff_ms(j->attempts, j->d->opts.backoff_ms, 8000);
    j->attempts++;
    LOGW("download", "%s: %s; retrying in %llu ms from byte %llu", j->label, why,
         (unsigned long long)delay, (unsigned long long)j->bytes);
    if (!j->retry_inited) {
        uv_timer_init(j->d->loop, &j->retry);
        j->retry_inited = true;
    }
    j->retry.data = j;
    snprintf(j->url, sizeof j->url, "%s", j->url0);
    j->redirects = 0;
    uv_timer_start(&j->retry, retry_cb, delay, 0);
}

/* A file saved as *.gguf must start with the GGUF magic: an HTML error page or any other body
 * served with a 200 is not a model. Other files (none today) are not checked. */
static bool is_gguf_part(const job_t *j)
{
    size_t n = strlen(j->dest);
    if (n < 5 || strcasecmp(j->dest + n - 5, ".gguf") != 0) return true;
    char m[4];
    return pread(j->fd, m, sizeof m, 0) == (ssize_t)sizeof m && memcmp(m, "GGUF", 4) == 0;
}

static void complete(job_t *j)
{
    const char *want = want_sha(j);
    char got[65] = "", err[DL_ERR_MAX];
    if (want[0]) {
        unsigned char h[SHA256_DIGEST_SIZE];
        sha256_digest(&j->st, sizeof h, h);
        sodium_bin2hex(got, sizeof got, h, sizeof h);
    }
    if (j->total > 0 && j->bytes != j->total) {
        unlink(j->part);
        snprintf(err, sizeof err, "%s: got %llu bytes, expected %llu; the partial file was deleted",
                 j->label, (unsigned long long)j->bytes, (unsigned long long)j->total);
        finish(j, -EIO, err);
        return;
    }
    if (want[0] && strcmp(want, got) != 0) {
        unlink(j->part);
        snprintf(err, sizeof err,
                 "%s: sha256 mismatch: expected %s, got %s; the downloaded file was deleted",
                 j->label, want, got);
        finish(j, -EBADMSG, err);
        return;
    }
    if (!is_gguf_part(j)) {
        unlink(j->part);
        snprintf(err, sizeof err,
                 "%s: the server sent something that is not a GGUF model (no GGUF magic at its "
                 "start); the downloaded file was deleted",
                 j->label);
        finish(j, -EBADMSG, err);
        return;
    }
    if (!want[0])
        LOGW("download", "%s: no sha256 known for it; only its size was checked", j->label);
    if (fsync(j->fd) != 0 || rename(j->part, j->dest) != 0) {
        snprintf(err, sizeof err, "%s: cannot move %s into place: %s", j->label, j->part,
                 strerror(errno));
        finish(j, -EIO, err);
        return;
    }
    LOGI("download", "%s: %llu bytes%s%s, saved as %s", j->label, (unsigned long long)j->bytes,
         got[0] ? ", sha256 " : "", got, j->dest);
    finish(j, 0, NULL);
}

void dl_transfer_done(job_t *j, CURLcode res)
{
    dl_t *d = j->d;
    char *redirect = NULL;
    curl_easy_getinfo(j->easy, CURLINFO_REDIRECT_URL, &redirect);
    char next[MODEL_REF_URL_MAX] = "";
    if (redirect) snprintf(next, sizeof next, "%s", redirect);
    long status = j->status;
    char cerr[CURL_ERROR_SIZE + 1];
    snprintf(cerr, sizeof cerr, "%s", curl_easy_strerror(res));
    curl_multi_remove_handle(d->multi, j->easy);
    curl_easy_cleanup(j->easy);
    j->easy = NULL;
    char err[DL_ERR_MAX];
    if (j->fatal[0]) {
        finish(j, j->fatal_rc ? j->fatal_rc : -EIO, j->fatal);
        return;
    }
    if (res == CURLE_OK && status >= 300 && status < 400 && next[0]) {
        if (++j->redirects > DL_MAX_REDIRECTS) {
            snprintf(err, sizeof err, "%s: too many redirects", j->label);
            finish(j, -ELOOP, err);
            return;
        }
        snprintf(j->url, sizeof j->url, "%s", next);
        begin(j);
        return;
    }
    if (res == CURLE_OK && status == 416 && !j->mem && j->bytes > 0 &&
        (j->range_total == 0 || j->range_total == j->bytes)) {
        j->total = j->bytes; /* the part was complete already */
        complete_when_hashed(j);
        return;
    }
    if (res == CURLE_OK && (status == 401 || status == 403)) {
        /* say HF_TOKEN was sent only when it was (to the hub's origin, nowhere else) */
        char origin[512];
        bool hub =
            dl_origin_of(j->url0, origin, sizeof origin) == 0 && strcmp(origin, d->hub_origin) == 0;
        const char *hint =
            j->token_sent ? "HF_TOKEN was sent but not accepted: check that it can read this "
                            "repository (gated models need their licence accepted on the hub)"
            : hub ? "The repository is gated or private: set HF_TOKEN to a Hugging Face access "
                    "token that can read it"
                  : "This server is not the hub: mesh-llm sends it no credentials (HF_TOKEN "
                    "goes to the hub only)";
        snprintf(err, sizeof err, "%.200s: access denied (HTTP %ld) by %.400s. %s", j->label,
                 status, j->url, hint);
        finish(j, -EACCES, err);
        return;
    }
    if (res == CURLE_OK && status == 404) {
        snprintf(err, sizeof err,
                 "%.200s: not found (HTTP 404) at %.400s: check the organisation, "
                 "repository and file name",
                 j->label, j->url);
        finish(j, -ENOENT, err);
        return;
    }
    if (res == CURLE_OK && status >= 200 && status < 300) {
        if (j->mem) {
            finish(j, 0, NULL);
            return;
        }
        if (j->total > 0 && j->bytes < j->total) {
            schedule_retry(j, "the connection ended early", false);
            return;
        }
        complete_when_hashed(j);
        return;
    }
    if (res == CURLE_OK && status >= 400 && status < 500 && status != 408 && status != 429) {
        snprintf(err, sizeof err, "%.200s: HTTP %ld from %.400s", j->label, status, j->url);
        finish(j, -EIO, err);
        return;
    }
    if (res == CURLE_OK) j->answered = true;
    if (!j->answered && (res == CURLE_COULDNT_RESOLVE_HOST || res == CURLE_COULDNT_RESOLVE_PROXY ||
                         res == CURLE_COULDNT_CONNECT)) {
        /* no server ever answered this job: offline or a wrong address, which retrying within
         * seconds does not mend; fail now and say so */
        bool same = strcmp(j->label, j->url0) == 0; /* a fetch's label is its URL */
        snprintf(err, sizeof err,
                 "%.200s: cannot reach %.300s: %s (offline, or a wrong HF_ENDPOINT / URL?)%s",
                 j->label, same ? "it" : j->url0, cerr, part_fate(j));
        finish(j, res == CURLE_COULDNT_CONNECT ? -ECONNREFUSED : -EHOSTUNREACH, err);
        return;
    }
    char why[512];
    bool slow = res == CURLE_OPERATION_TIMEDOUT && status != 0;
    if (res == CURLE_OK)
        snprintf(why, sizeof why, "HTTP %ld from %.400s", status, j->url);
    else if (slow)
        snprintf(why, sizeof why, "slower than %llu bytes/s for %llu s",
                 (unsigned long long)dl_min_rate(j->d), (unsigned long long)dl_stall_s(j->d));
    else
        snprintf(why, sizeof why, "%s", cerr);
    schedule_retry(j, why, slow);
}

static void begin(job_t *j)
{
    dl_t *d = j->d;
    char err[DL_ERR_MAX];
    j->easy = curl_easy_init();
    if (!j->easy) {
        snprintf(err, sizeof err, "%s: out of memory", j->label);
        finish(j, -ENOMEM, err);
        return;
    }
    j->status = 0;
    j->body_ok = false;
    if (j->hdrs) curl_slist_free_all(j->hdrs);
    j->hdrs = NULL;
    j->token_sent = false;
    char origin[512];
    if (d->token && dl_origin_of(j->url, origin, sizeof origin) == 0 &&
        strcmp(origin, d->hub_origin) == 0) {
        char auth[4200];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", d->token);
        j->hdrs = curl_slist_append(NULL, auth);
        sodium_memzero(auth, sizeof auth);
        j->token_sent = j->hdrs != NULL;
    }
    CURL *e = j->easy;
    curl_easy_setopt(e, CURLOPT_URL, j->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)j);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, j);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, j);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "mesh-llm/" MESH_VERSION);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 30L);
    /* slower than the minimum rate over the whole stall window counts as a stall: a trickle
     * cannot keep a download busy for ever (the retry then resumes where it was) */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, (long)dl_min_rate(j->d));
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)dl_stall_s(j->d));
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (j->hdrs) curl_easy_setopt(e, CURLOPT_HTTPHEADER, j->hdrs);
    /* CURLOPT_RANGE rather than RESUME_FROM: the hub answers a ranged request with a 302 (no
     * Content-Range), which curl's resume check would call an error; the 206 is checked in
     * body_start instead. */
    char range[32];
    snprintf(range, sizeof range, "%llu-", (unsigned long long)j->bytes);
    if (!j->mem && j->bytes > 0) curl_easy_setopt(e, CURLOPT_RANGE, range);
    if (curl_multi_add_handle(d->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        j->easy = NULL;
        snprintf(err, sizeof err, "%s: cannot start the transfer", j->label);
        finish(j, -EIO, err);
    }
}

/* ---------------------------------------------------------------------------------------- */

static void hash_work(uv_work_t *w)
{
    job_t *j = w->data;
    unsigned char buf[HASH_BUF]; /* on the worker's stack: no malloc arena for the thread */
    uint64_t off = j->hashed;
    while (off < j->hash_to) {
        size_t want = j->hash_to - off < HASH_BUF ? (size_t)(j->hash_to - off) : HASH_BUF;
        ssize_t r = pread(j->fd, buf, want, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            j->work_rc = r < 0 ? -errno : -EIO;
            break;
        }
        sha256_update(&j->st, (size_t)r, buf);
        off += (uint64_t)r;
    }
}

static void after_hash(uv_work_t *w, int status)
{
    job_t *j = w->data;
    dl_t *d = j->d;
    j->hashing = false;
    d->handles--;
    if (d->closing) {
        j->next = d->jobs; /* dl_close took it off the list */
        d->jobs = j;
        cancel(j);
        return;
    }
    if (j->rehash) { /* truncated meanwhile: what was read is stale */
        j->rehash = false;
        j->work_rc = 0;
        j->hashed = 0;
        sha256_init(&j->st);
    } else if (j->work_rc) {
        char err[DL_ERR_MAX];
        snprintf(err, sizeof err, "%s: reading %s: %s", j->label, j->part, strerror(-j->work_rc));
        finish(j, j->work_rc, err);
        return;
    } else {
        j->hashed = j->hash_to;
    }
    if (j->resuming) {
        j->resuming = false;
        LOGI("download", "%s: resuming at byte %llu", j->label, (unsigned long long)j->bytes);
        begin(j);
    } else if (j->finishing) {
        complete_when_hashed(j);
    } else {
        written(j);
    }
}

static void queue_hash(job_t *j)
{
    j->hash_to = j->bytes;
    j->work.data = j;
    j->hashing = true;
    j->d->handles++;
    uv_queue_work(j->d->loop, &j->work, hash_work, after_hash);
}

static int mkdir_parents(const char *path)
{
    char *p = strdup(path);
    if (!p) return -ENOMEM;
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int e = -errno;
            free(p);
            return e;
        }
        *s = '/';
    }
    free(p);
    return 0;
}

static job_t *job_new(dl_t *d, const char *url, const char *label)
{
    job_t *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->d = d;
    j->fd = -1;
    snprintf(j->url0, sizeof j->url0, "%s", url);
    snprintf(j->url, sizeof j->url, "%s", url);
    j->label = strdup(label ? label : url);
    buf_init(&j->body, 0);
    sha256_init(&j->st);
    j->rate_t = uv_now(d->loop);
    if (!j->label) {
        free(j);
        return NULL;
    }
    return j;
}

int dl_fetch(dl_t *d, const char *url, size_t max_bytes, dl_fetch_fn cb, void *data)
{
    if (d->closing) return -ECANCELED;
    if (strlen(url) >= MODEL_REF_URL_MAX) return -ENAMETOOLONG;
    job_t *j = job_new(d, url, url);
    if (!j) return -ENOMEM;
    j->mem = true;
    buf_init(&j->body, max_bytes + 1);
    j->fetch_cb = cb;
    j->fetch_data = data;
    j->next = d->jobs;
    d->jobs = j;
    begin(j);
    return 0;
}

int dl_start(dl_t *d, const dl_req_t *req, dl_done_fn cb, void *data)
{
    if (d->closing) return -ECANCELED;
    if (strlen(req->url) >= MODEL_REF_URL_MAX) return -ENAMETOOLONG;
    for (job_t *j = d->jobs; j; j = j->next) {
        if (!j->mem && strcmp(j->dest, req->dest) == 0) {
            if (j->n_waiters >= DL_MAX_WAITERS) return -EBUSY;
            j->waiters[j->n_waiters++] = (waiter_t){cb, data};
            return 0;
        }
    }
    job_t *j = job_new(d, req->url, req->label);
    if (!j) return -ENOMEM;
    j->dest = strdup(req->dest);
    size_t pl = strlen(req->dest) + 6;
    j->part = malloc(pl);
    if (!j->dest || !j->part) {
        job_free(j);
        return -ENOMEM;
    }
    snprintf(j->part, pl, "%s.part", req->dest);
    j->max_bytes = req->max_bytes;
    j->size_out = req->size_out;
    if (req->sha256 && *req->sha256) take_sha(req->sha256, strlen(req->sha256), j->want_sha);
    int rc = mkdir_parents(j->dest);
    if (rc == 0) {
        j->fd = open(j->part, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (j->fd < 0) rc = -errno;
    }
    if (rc == 0 && flock(j->fd, LOCK_EX | LOCK_NB) != 0)
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
    struct stat st;
    if (rc == 0 && fstat(j->fd, &st) != 0) rc = -errno;
    if (rc) {
        job_free(j);
        return rc;
    }
    j->bytes = (uint64_t)st.st_size;
    j->bytes_at_attempt = j->bytes;
    j->waiters[j->n_waiters++] = (waiter_t){cb, data};
    j->next = d->jobs;
    d->jobs = j;
    j->synced = j->bytes;
    if (j->bytes > 0) {
        j->resuming = true;
        queue_hash(j);
    } else {
        begin(j);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */

size_t dl_list(dl_t *d, dl_progress_t *out, size_t max)
{
    size_t n = 0;
    if (!d) return 0;
    uint64_t now = uv_now(d->loop);
    for (job_t *j = d->jobs; j && n < max; j = j->next) {
        if (j->mem) continue;
        if (now - j->rate_t >= 1000) {
            double dt = (double)(now - j->rate_t) / 1000.0;
            double r = j->bytes >= j->rate_b ? (double)(j->bytes - j->rate_b) / dt : 0;
            j->rate = j->rate > 0 ? 0.5 * j->rate + 0.5 * r : r;
            j->rate_t = now;
            j->rate_b = j->bytes;
        }
        dl_progress_t *p = &out[n++];
        snprintf(p->label, sizeof p->label, "%s", j->label);
        snprintf(p->dest, sizeof p->dest, "%s", j->dest);
        p->bytes = j->bytes;
        p->total = j->total;
        p->rate = j->rate;
    }
    return n;
}

void dl_format_progress(const dl_progress_t *p, bool bar, char *buf, size_t len)
{
    char pct[16] = "", eta[32] = "", bars[40] = "";
    if (p->total > 0) {
        double f = (double)p->bytes / (double)p->total;
        snprintf(pct, sizeof pct, " %5.1f%%", f * 100);
        if (bar) {
            int w = 24, k = (int)(f * w);
            bars[0] = ' ';
            bars[1] = '[';
            for (int i = 0; i < w; i++)
                bars[2 + i] = i < k ? '#' : '.';
            bars[2 + w] = ']';
            bars[3 + w] = 0;
        }
        if (p->rate > 1) {
            double s = (double)(p->total - p->bytes) / p->rate;
            if (s < 3600)
                snprintf(eta, sizeof eta, "  ETA %dm%02ds", (int)s / 60, (int)s % 60);
            else
                snprintf(eta, sizeof eta, "  ETA %dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
        }
    }
    snprintf(buf, len, "%s%s  %.1f / %.1f MB%s  %.1f MB/s%s", p->label, bars, p->bytes / 1e6,
             p->total / 1e6, pct, p->rate / 1e6, eta);
}

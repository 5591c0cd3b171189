/* dl_curl — libcurl's multi interface on the libuv loop: each socket curl wants watched is a
 * uv_poll, curl's timeout a uv_timer, and a finished transfer goes to download.c's state
 * machine (dl_transfer_done). Nothing here blocks the loop. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dl_int.h"
#include "log.h"

typedef struct {
    uv_poll_t poll;
    curl_socket_t fd;
    dl_t *d;
} sock_t;

static void check_done(dl_t *d);

int dl_origin_of(const char *url, char *out, size_t len)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL;
    int rc = -EINVAL;
    if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) goto out;
    if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK)
        goto out;
    snprintf(out, len, "%s://%s:%s", scheme, host, port);
    for (char *p = out; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    rc = 0;
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}

void dl_timer_closed(uv_handle_t *h)
{
    dl_t *d = h->data;
    d->handles--;
    dl_maybe_free(d);
}

static void poll_closed(uv_handle_t *h)
{
    sock_t *s = (sock_t *)h; /* poll is its first member */
    dl_t *d = s->d;
    free(s);
    d->handles--;
    dl_maybe_free(d);
}

static void poll_cb(uv_poll_t *h, int status, int events)
{
    sock_t *s = (sock_t *)h;
    dl_t *d = s->d;
    int flags = 0;
    if (status < 0) flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
    int running;
    curl_multi_socket_action(d->multi, s->fd, flags, &running);
    check_done(d);
}

static int socket_cb(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
    dl_t *d = userp;
    sock_t *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            uv_poll_stop(&s->poll);
            d->handles++;
            uv_close((uv_handle_t *)&s->poll, poll_closed);
            curl_multi_assign(d->multi, fd, NULL);
        }
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return -1;
        s->fd = fd;
        s->d = d;
        if (uv_poll_init_socket(d->loop, &s->poll, fd) != 0) {
            free(s);
            return -1;
        }
        curl_multi_assign(d->multi, fd, s);
    }
    int ev = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) ev |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) ev |= UV_WRITABLE;
    uv_poll_start(&s->poll, ev, poll_cb);
    return 0;
}

static void timer_cb(uv_timer_t *t)
{
    dl_t *d = t->data;
    int running;
    curl_multi_socket_action(d->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(d);
}

static int multi_timer_cb(CURLM *m, long timeout_ms, void *userp)
{
    dl_t *d = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&d->timer);
    else
        uv_timer_start(&d->timer, timer_cb, (uint64_t)timeout_ms, 0);
    return 0;
}

void dl_opts_default(dl_opts_t *o)
{
    *o = (dl_opts_t){.min_rate = 1024, .stall_ms = 60000, .retries = 5, .backoff_ms = 500};
}

int dl_init(dl_t **out, uv_loop_t *loop, const dl_opts_t *opts)
{
    static bool global;
    if (!global) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return -EIO;
        global = true;
    }
    dl_t *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    d->loop = loop;
    if (opts)
        d->opts = *opts;
    else
        dl_opts_default(&d->opts);
    const char *ep = getenv("HF_ENDPOINT");
    snprintf(d->hub, sizeof d->hub, "%s", ep && *ep ? ep : "https://huggingface.co");
    size_t n = strlen(d->hub);
    while (n > 0 && d->hub[n - 1] == '/')
        d->hub[--n] = 0;
    if (dl_origin_of(d->hub, d->hub_origin, sizeof d->hub_origin) != 0) {
        LOGW("download", "HF_ENDPOINT=%s is not a URL; using https://huggingface.co", d->hub);
        snprintf(d->hub, sizeof d->hub, "https://huggingface.co");
        dl_origin_of(d->hub, d->hub_origin, sizeof d->hub_origin);
    }
    const char *tok = getenv("HF_TOKEN");
    if (tok && *tok) d->token = strdup(tok);
    d->multi = curl_multi_init();
    if (!d->multi) {
        free(d->token);
        free(d);
        return -ENOMEM;
    }
    curl_multi_setopt(d->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(d->multi, CURLMOPT_SOCKETDATA, d);
    curl_multi_setopt(d->multi, CURLMOPT_TIMERFUNCTION, multi_timer_cb);
    curl_multi_setopt(d->multi, CURLMOPT_TIMERDATA, d);
    uv_timer_init(loop, &d->timer);
    d->timer.data = d;
    *out = d;
    return 0;
}

const char *dl_hub(const dl_t *d)
{
    return d->hub;
}

void dl_maybe_free(dl_t *d)
{
    if (!d->closing || d->handles > 0 || d->jobs) return;
    if (d->multi) {
        curl_multi_cleanup(d->multi);
        d->multi = NULL;
        if (d->handles > 0) return;
    }
    free(d->token);
    free(d);
}

static void check_done(dl_t *d)
{
    CURLMsg *m;
    int left;
    while (d->multi && (m = curl_multi_info_read(d->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        job_t *j = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&j);
        dl_transfer_done(j, m->data.result);
    }
}

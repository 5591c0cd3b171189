/* api_events — see api_events.h. */
#include "api_events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "options.h"
#include "status_doc.h"
#include "util.h"

typedef struct client {
    httpd_req_t *req;
    struct events *ev;
    bool secrets; /* may see the invite token (a loopback client) */
    struct client *next, *prev;
} client_t;

struct events {
    uv_loop_t *loop;
    changes_t *changes;         /* listened to (api_events.h) */
    json_t *(*doc)(void *data); /* the status document (api_events.h) */
    void *data;
    uv_timer_t timer;
    client_t *clients;
    unsigned n_clients;
    uint64_t dropped, snapshots;
    uint64_t last_sent_ms, last_keepalive_ms;
    bool dirty; /* a change is waiting for its snapshot (the timer is armed for it) */
    uint64_t period_ms;
    size_t max_queue;
};

static void unlink_client(struct events *ev, client_t *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        ev->clients = c->next;
    if (c->next) c->next->prev = c->prev;
    ev->n_clients--;
}

static void on_client_abort(httpd_req_t *req)
{
    client_t *c = req->data;
    unlink_client(c->ev, c);
    free(c);
}

static void drop(struct events *ev, client_t *c, const char *why)
{
    LOGW("events", "dropping an event-stream client: %s", why);
    unlink_client(ev, c);
    ev->dropped++;
    c->req->on_abort = NULL;
    c->req->data = NULL;
    httpd_abort(c->req);
    free(c);
}

/* Queue a frame for c, or drop c when that would pass its cap. */
static void send_frame(struct events *ev, client_t *c, const char *frame, size_t len)
{
    if (httpd_unsent(c->req) + len > ev->max_queue) {
        drop(ev, c, "it is not reading (its unsent events passed the cap)");
        return;
    }
    if (httpd_write(c->req, frame, len) != 0) drop(ev, c, "write failed");
}

/* "data: <json>\n\n" (after a keep-alive comment when one is due); NULL on failure. */
static char *frame_of(json_t *st, bool keepalive, size_t *len)
{
    char *js = json_dumps(st, JSON_COMPACT);
    if (!js) return NULL;
    buf_t b;
    buf_init(&b, SIZE_MAX / 2);
    int rc = buf_printf(&b, "%sdata: %s\n\n", keepalive ? ": keep-alive\n" : "", js);
    free(js);
    if (rc) {
        buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.data; /* NUL-terminated by buf_printf */
}

/* One snapshot to `only`, or to every client. */
static void snapshot(struct events *ev, client_t *only)
{
    json_t *st = ev->doc(ev->data);
    if (!st) return;
    uint64_t now = uv_now(ev->loop);
    bool ka = !only && now - ev->last_keepalive_ms >= EVENTS_KEEPALIVE_MS;
    if (ka) ev->last_keepalive_ms = now;
    bool want_secret = false, want_plain = false;
    for (client_t *c = only ? only : ev->clients; c; c = only ? NULL : c->next) {
        if (c->secrets)
            want_secret = true;
        else
            want_plain = true;
    }
    size_t len_s = 0, len_p = 0;
    char *with = want_secret ? frame_of(st, ka, &len_s) : NULL;
    char *without = NULL;
    if (want_plain) {
        status_doc_hide_secrets(st);
        without = frame_of(st, ka, &len_p);
    }
    json_decref(st);
    client_t *next;
    for (client_t *c = only ? only : ev->clients; c; c = next) {
        next = only ? NULL : c->next;
        if (c->secrets && with)
            send_frame(ev, c, with, len_s);
        else if (!c->secrets && without)
            send_frame(ev, c, without, len_p);
    }
    free(with);
    free(without);
    ev->snapshots++;
}

static void on_timer(uv_timer_t *t)
{
    struct events *ev = t->data;
    ev->dirty = false;
    snapshot(ev, NULL);
    ev->last_sent_ms = uv_now(t->loop);
    if (ev->clients) uv_timer_start(t, on_timer, ev->period_ms, 0);
}

/* The change bus: a snapshot soon, at most one per EVENTS_MIN_GAP_MS. */
static void on_change(void *data)
{
    struct events *ev = data;
    if (!ev->clients || ev->dirty) return;
    ev->dirty = true;
    uint64_t gap = uv_now(ev->timer.loop) - ev->last_sent_ms;
    uv_timer_start(&ev->timer, on_timer, gap >= EVENTS_MIN_GAP_MS ? 0 : EVENTS_MIN_GAP_MS - gap, 0);
}

int api_events_init(events_t **out, uv_loop_t *loop, changes_t *changes, json_t *(*doc)(void *data),
                    void *data, uint64_t period_ms, uint64_t max_queue)
{
    struct events *ev = calloc(1, sizeof *ev);
    if (!ev) return -ENOMEM;
    int rc = changes ? changes_listen(changes, on_change, ev) : 0;
    if (rc) {
        free(ev);
        return rc;
    }
    ev->changes = changes;
    ev->loop = loop;
    ev->doc = doc;
    ev->data = data;
    ev->period_ms = period_ms;
    if (ev->period_ms < EVENTS_MIN_GAP_MS) ev->period_ms = EVENTS_MIN_GAP_MS;
    ev->max_queue = (size_t)max_queue;
    uv_timer_init(loop, &ev->timer);
    ev->timer.data = ev;
    *out = ev;
    return 0;
}

bool api_events_handle(events_t *ev, httpd_req_t *req)
{
    if (strcmp(req->path, "/api/events") != 0) return false;
    if (strcmp(req->method_str, "GET") != 0) {
        httpd_respond_405(req, "GET");
        return true;
    }
    client_t *c = ev->n_clients < EVENTS_MAX_CLIENTS ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        httpd_respond_error(req, 503, "server_error", "too_many_event_streams",
                            "too many event streams are open on this node; retry later");
        return true;
    }
    c->req = req;
    c->ev = ev;
    c->secrets = mgmt_may_see_secrets(req->peer, httpd_header(req, "host"));
    if (httpd_stream_begin(req, 200, "text/event-stream", NULL) != 0) {
        free(c);
        httpd_abort(req);
        return true;
    }
    static const char hello[] = "retry: 2000\n: mesh-llm status events\n\n";
    httpd_write(req, hello, sizeof hello - 1);
    req->data = c;
    req->on_abort = on_client_abort;
    c->next = ev->clients;
    if (ev->clients) ev->clients->prev = c;
    ev->clients = c;
    ev->n_clients++;
    snapshot(ev, c);
    if (!uv_is_active((uv_handle_t *)&ev->timer)) {
        ev->last_sent_ms = uv_now(ev->timer.loop);
        uv_timer_start(&ev->timer, on_timer, ev->period_ms, 0);
    }
    return true;
}

json_t *api_events_status(const events_t *ev)
{
    return json_pack("{s:i,s:I,s:I}", "clients", ev ? (int)ev->n_clients : 0, "dropped",
                     (json_int_t)(ev ? ev->dropped : 0), "snapshots",
                     (json_int_t)(ev ? ev->snapshots : 0));
}

static void on_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

void api_events_stop(events_t *ev)
{
    if (!ev) return;
    if (ev->changes) changes_unlisten(ev->changes, on_change, ev);
    while (ev->clients) {
        client_t *c = ev->clients;
        unlink_client(ev, c);
        c->req->on_abort = NULL;
        c->req->data = NULL;
        httpd_end(c->req, false);
        free(c);
    }
    uv_timer_stop(&ev->timer);
    uv_close((uv_handle_t *)&ev->timer, on_timer_closed);
}

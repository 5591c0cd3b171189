/* Several Nostr relays on the loop: reconnects, one subscription, one published event. */
#include "nostr_pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "options.h"
#include "tunables.h"
#include "util.h"
#include "ws_client.h"

static const char *const DEFAULT_RELAYS[] = {"wss://relay.damus.io", "wss://nos.lol",
                                             "wss://relay.nostr.band"};

typedef enum { R_IDLE, R_CONNECTING, R_OPEN, R_WAITING } relay_state_t;

typedef struct {
    nostr_pool_t *pool;
    char url[WS_URL_MAX];
    ws_client_t *ws;
    relay_state_t st;
    unsigned attempt;
    uv_timer_t retry;
    bool settled;  /* EOSE or a failure since the subscription */
    bool answered; /* EOSE of our subscription at least once */
    bool accepted; /* OK true for the published event on this connection */
    char last_error[160];
    unsigned long events, bad, conns;
    unsigned conn_events, conn_bad;
} relay_t;

struct nostr_pool {
    uv_loop_t *loop;
    const tunables_t *tun;
    nostr_pool_cb_t cb;
    relay_t relays[NOSTR_POOL_MAX];
    size_t n;
    char sub_id[NOSTR_SUBID_MAX + 1];
    char *req;     /* the REQ text, sent on every connect */
    char *publish; /* the EVENT text, sent on every connect */
    char publish_id[NOSTR_HEX32];
    uint64_t retry_base_ms;
    int refs; /* open timers */
    bool stopped;
};

size_t nostr_pool_relays(const char *const *cli, size_t n_cli, const char *env, char *buf,
                         size_t buflen, const char **urls, size_t max)
{
    size_t n = 0;
    if (n_cli > 0) {
        for (size_t i = 0; i < n_cli && n < max; i++)
            urls[n++] = cli[i];
        return n;
    }
    if (env) {
        if (strcmp(env, "none") == 0 || !*env) return 0;
        snprintf(buf, buflen, "%s", env);
        char *save = NULL;
        for (char *t = strtok_r(buf, ", ", &save); t && n < max; t = strtok_r(NULL, ", ", &save))
            urls[n++] = t;
        return n;
    }
    for (size_t i = 0; i < sizeof DEFAULT_RELAYS / sizeof *DEFAULT_RELAYS && n < max; i++)
        urls[n++] = DEFAULT_RELAYS[i];
    return n;
}

static void relay_connect(relay_t *r);

static void progress(nostr_pool_t *p)
{
    if (p->cb.on_progress && !p->stopped) p->cb.on_progress(p->cb.data);
}

static void on_retry(uv_timer_t *t)
{
    relay_t *r = t->data;
    if (!r->pool->stopped) relay_connect(r);
}

/* The connection ended (the ws client frees itself): wait, then reconnect. */
static void relay_down(relay_t *r, const char *why)
{
    nostr_pool_t *p = r->pool;
    snprintf(r->last_error, sizeof r->last_error, "%s", why);
    r->ws = NULL;
    r->st = R_WAITING;
    r->accepted = false;
    uint64_t wait = backoff_ms(r->attempt < 16 ? r->attempt : 16, p->retry_base_ms, 60000);
    r->attempt++;
    LOGD("nostr", "%s: %s; retrying in %llu ms", r->url, why, (unsigned long long)wait);
    uv_timer_start(&r->retry, on_retry, wait, 0);
    bool was = r->settled;
    r->settled = true;
    if (!was) progress(p);
}

static void on_ws_close(ws_client_t *c, const char *why, void *data)
{
    relay_t *r = data;
    (void)c;
    if (r->pool->stopped) return;
    relay_down(r, why);
}

static void send_text(relay_t *r, const char *s)
{
    if (r->ws && s) ws_send_text(r->ws, s, strlen(s));
}

static void on_ws_open(ws_client_t *c, void *data)
{
    relay_t *r = data;
    (void)c;
    r->st = R_OPEN;
    r->conns++;
    r->conn_events = r->conn_bad = 0;
    r->last_error[0] = 0;
    LOGD("nostr", "%s: connected", r->url);
    send_text(r, r->pool->publish);
    send_text(r, r->pool->req);
}

/* Drop a misbehaving relay: close now, retry later. */
static void relay_drop(relay_t *r, const char *why)
{
    LOGW("nostr", "%s: %s; dropping the connection", r->url, why);
    ws_close(r->ws);
    relay_down(r, why);
}

static void on_ws_text(ws_client_t *c, const char *msg, size_t len, void *data)
{
    relay_t *r = data;
    nostr_pool_t *p = r->pool;
    (void)c;
    nostr_msg_t m;
    switch (nostr_msg_parse(msg, len, &m)) {
    case NOSTR_MSG_EVENT:
        if (strcmp(m.sub_id, p->sub_id) != 0) break; /* not ours (an old subscription) */
        if (++r->conn_events > NOSTR_POOL_MAX_EVENTS) {
            nostr_msg_free(&m);
            relay_drop(r, "too many events");
            return;
        }
        if (!nostr_event_verify(&m.event)) {
            r->bad++;
            LOGD("nostr", "%s: event %.16s has a bad id or signature: ignored", r->url, m.event.id);
            if (++r->conn_bad > NOSTR_POOL_MAX_BAD) {
                nostr_msg_free(&m);
                relay_drop(r, "too many invalid messages");
                return;
            }
            break;
        }
        r->events++;
        if (p->cb.on_event) p->cb.on_event(p->cb.data, &m.event);
        break;
    case NOSTR_MSG_EOSE:
        /* a relay that answers a subscription is healthy: the next failure retries soon (one
         * that opens, then misbehaves, keeps backing off) */
        if (strcmp(m.sub_id, p->sub_id) == 0) {
            r->attempt = 0;
            r->answered = true;
        }
        if (strcmp(m.sub_id, p->sub_id) == 0 && !r->settled) {
            r->settled = true;
            progress(p);
        }
        break;
    case NOSTR_MSG_OK:
        if (!m.ok) LOGW("nostr", "%s refused event %.16s: %s", r->url, m.event_id, m.message);
        if (p->publish && strcmp(m.event_id, p->publish_id) == 0) r->accepted = m.ok;
        break;
    case NOSTR_MSG_NOTICE:
        LOGD("nostr", "%s: notice: %s", r->url, m.message);
        break;
    case NOSTR_MSG_CLOSED:
        if (strcmp(m.sub_id, p->sub_id) == 0) {
            LOGW("nostr", "%s closed the subscription: %s", r->url, m.message);
            if (!r->settled) {
                r->settled = true;
                progress(p);
            }
        }
        break;
    case NOSTR_MSG_INVALID:
        r->bad++;
        LOGD("nostr", "%s: invalid message (%s)", r->url, m.message);
        if (++r->conn_bad > NOSTR_POOL_MAX_BAD) {
            relay_drop(r, "too many invalid messages");
            return;
        }
        break;
    }
    nostr_msg_free(&m);
}

static void relay_connect(relay_t *r)
{
    ws_opts_t o = {.on_open = on_ws_open,
                   .on_text = on_ws_text,
                   .on_close = on_ws_close,
                   .data = r,
                   .max_msg = NOSTR_MSG_MAX,
                   .open_timeout_ms = r->pool->tun->nostr_open_timeout_ms,
                   .ca_file = r->pool->tun->nostr_ca_file};
    char err[256];
    r->st = R_CONNECTING;
    if (ws_connect(&r->ws, r->pool->loop, r->url, &o, err, sizeof err) != 0) relay_down(r, err);
}

int nostr_pool_start(nostr_pool_t **out, uv_loop_t *loop, const char *const *urls, size_t n,
                     const tunables_t *tun, const nostr_pool_cb_t *cb)
{
    nostr_pool_t *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->loop = loop;
    p->cb = *cb;
    p->tun = tun;
    p->retry_base_ms = tun->nostr_retry_ms;
    for (size_t i = 0; i < n && p->n < NOSTR_POOL_MAX; i++) {
        int tls, port;
        char host[256], path[WS_URL_MAX];
        if (ws_parse_url(urls[i], &tls, host, sizeof host, &port, path, sizeof path) != 0) {
            LOGW("nostr", "'%s' is not a ws:// or wss:// relay URL: skipped", urls[i]);
            continue;
        }
        relay_t *r = &p->relays[p->n++];
        r->pool = p;
        snprintf(r->url, sizeof r->url, "%s", urls[i]);
        uv_timer_init(loop, &r->retry);
        r->retry.data = r;
        p->refs++;
    }
    for (size_t i = 0; i < p->n; i++)
        relay_connect(&p->relays[i]);
    *out = p;
    return 0;
}

int nostr_pool_subscribe(nostr_pool_t *p, const char *sub_id, const nostr_filter_t *f)
{
    char *req = nostr_msg_req(sub_id, f);
    if (!req) return -EINVAL;
    for (size_t i = 0; i < p->n; i++) {
        relay_t *r = &p->relays[i];
        if (p->req && r->st == R_OPEN) {
            char *close = nostr_msg_close(p->sub_id);
            send_text(r, close);
            free(close);
        }
        r->settled = r->st == R_WAITING && r->attempt > 0; /* a failing relay counts as settled */
        if (r->st == R_OPEN) send_text(r, req);
    }
    free(p->req);
    p->req = req;
    snprintf(p->sub_id, sizeof p->sub_id, "%s", sub_id);
    return 0;
}

int nostr_pool_refresh(nostr_pool_t *p, const nostr_filter_t *f)
{
    char *req = nostr_msg_req(p->sub_id, f);
    if (!req) return -EINVAL;
    free(p->req);
    p->req = req;
    for (size_t i = 0; i < p->n; i++) {
        relay_t *r = &p->relays[i];
        if (r->st != R_OPEN) continue; /* a relay that (re)connects sends the REQ anyway */
        r->settled = false;
        send_text(r, req);
    }
    return 0;
}

int nostr_pool_publish(nostr_pool_t *p, const nostr_event_t *ev)
{
    char *s = nostr_msg_event(ev);
    if (!s) return -ENOMEM;
    free(p->publish);
    p->publish = s;
    snprintf(p->publish_id, sizeof p->publish_id, "%s", ev->id);
    for (size_t i = 0; i < p->n; i++) {
        p->relays[i].accepted = false; /* until it accepts this one */
        if (p->relays[i].st == R_OPEN) send_text(&p->relays[i], s);
    }
    return 0;
}

void nostr_pool_unpublish(nostr_pool_t *p)
{
    free(p->publish);
    p->publish = NULL;
}

size_t nostr_pool_settled(const nostr_pool_t *p, size_t *total)
{
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++)
        k += p->relays[i].settled;
    if (total) *total = p->n;
    return k;
}

size_t nostr_pool_accepted(const nostr_pool_t *p, size_t *open)
{
    size_t k = 0, o = 0;
    for (size_t i = 0; i < p->n; i++) {
        k += p->relays[i].accepted;
        o += p->relays[i].st == R_OPEN;
    }
    if (open) *open = o;
    return k;
}

size_t nostr_pool_answered(const nostr_pool_t *p)
{
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++)
        k += p->relays[i].answered;
    return k;
}

json_t *nostr_pool_status(const nostr_pool_t *p)
{
    static const char *const st[] = {"idle", "connecting", "open", "waiting"};
    json_t *a = json_array();
    for (size_t i = 0; a && i < p->n; i++) {
        const relay_t *r = &p->relays[i];
        json_array_append_new(a, json_pack("{s:s,s:s,s:b,s:s?,s:I,s:I,s:I}", "url", r->url, "state",
                                           st[r->st], "answered", r->answered, "last_error",
                                           r->last_error[0] ? r->last_error : NULL, "events",
                                           (json_int_t)r->events, "invalid", (json_int_t)r->bad,
                                           "connections", (json_int_t)r->conns));
    }
    return a;
}

static void on_timer_closed(uv_handle_t *h)
{
    relay_t *r = h->data;
    nostr_pool_t *p = r->pool;
    if (--p->refs == 0) {
        free(p->req);
        free(p->publish);
        free(p);
    }
}

void nostr_pool_stop(nostr_pool_t *p)
{
    if (!p || p->stopped) return;
    p->stopped = true;
    for (size_t i = 0; i < p->n; i++) {
        ws_close(p->relays[i].ws);
        p->relays[i].ws = NULL;
        uv_close((uv_handle_t *)&p->relays[i].retry, on_timer_closed);
    }
    if (p->n == 0) {
        free(p->req);
        free(p->publish);
        free(p);
    }
}

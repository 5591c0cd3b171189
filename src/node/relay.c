/* relay — see relay.h. */
#include "relay.h"

#include <errno.h>
#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "affinity.h"
#include "api_routes.h"
#include "log.h"
#include "meshstat.h"
#include "options.h"
#include "proxy.h"
#include "resume.h"
#include "sse.h"
#include "tunables.h"
#include "tunnel.h"
#include "tunnel_call.h"
#include "util.h"

#define CLIENT_HIGH_WATER (1u << 20)
#define MAX_RESP_HEADER (64u * 1024)

typedef enum {
    MODE_WHOLE = 0, /* hold the response until complete; retry whole once */
    MODE_RAW,       /* streamed, not continuable: bytes pass through once they come */
    MODE_SSE,       /* streamed completion: parsed, continued on another replica */
} mode_t_;

typedef struct {
    relay_io_t io; /* how hosts are reached (the mesh's, or a test's) */
    uv_loop_t *loop;
    httpd_req_t *req; /* NULL once the client is answered or gone */
    char model[128];
    relay_host_t hosts[RELAY_MAX_HOSTS];
    size_t n_hosts;
    bool tried[RELAY_MAX_HOSTS];
    size_t cur;
    mode_t_ mode;
    int kind; /* resume_kind_t, for MODE_SSE */
    /* MODE_SSE of an API whose stream is not continued: ended in its own error shape */
    api_stream_t shape;
    tunnel_call_t *call;
    uint64_t first_byte_ms; /* the attempt's first-byte deadline; 0: none (host not ready) */
    uv_timer_t timer;
    bool timer_open;
    /* the attempt in progress */
    llhttp_t parser;
    llhttp_settings_t settings;
    size_t got; /* response bytes of this attempt */
    int status;
    bool sse_resp;   /* the response is a 200 text/event-stream */
    bool hdr_done;   /* its headers were parsed */
    bool msg_done;   /* the whole response was parsed */
    bool parse_fail; /* malformed response */
    buf_t hdr;       /* "name\0value\0" of the attempt's response headers */
    bool last_was_value;
    buf_t raw; /* MODE_WHOLE (and before the headers): the attempt's response bytes */
    size_t unconsumed;
    /* the client side */
    bool client_started;  /* a status line went to the client */
    bool retried;         /* the one whole retry was used */
    bool failed_over;     /* the one mid-stream continuation was used */
    bool dial_waited;     /* the one wait for a retry host's connection was used */
    size_t wait_idx;      /* the host whose connection the retry waits for */
    uint64_t wait_until;  /* ... until then (loop time, ms) */
    bool splicing;        /* the attempt is a continuation */
    size_t tokens_before; /* tokens of the first stream when it was cut */
    char *cont_body;      /* the continuation request */
    size_t cont_len;
    sse_parser_t sse;
    resume_track_t track;
    buf_t scratch;
    meshstat_t *stat; /* the stat of the server the request came to (/metrics) */
    relay_ctx_t *rc;  /* the node's relay counters and affinity memory */
} relay_t;

/* A relay event: in /api/status (rc->stats) and in /metrics, per model. */
static void count(const relay_t *r, metrics_relay_t what)
{
    relay_stats_t *st = &r->rc->stats;
    uint64_t *c[METRICS_N_RELAY] = {&st->retries, &st->first_byte_timeouts, &st->failovers,
                                    &st->failovers_resumed, &st->failovers_refused};
    if ((unsigned)what < METRICS_N_RELAY) (*c[what])++;
    metrics_relay(meshstat_metrics(r->stat), r->model, what);
}

static void attempt_next(relay_t *r, const char *why);
static bool try_other(relay_t *r);
static void sink_data(void *ud, const uint8_t *p, size_t n);
static void sink_end(void *ud, int err, bool fin);
static void sink_queued(void *ud);
static const tunnel_sink_t sink = {sink_data, sink_end, sink_queued};

/* ---------- lifetime ---------- */

static void on_timer_closed(uv_handle_t *h)
{
    relay_t *r = h->data;
    buf_free(&r->hdr);
    buf_free(&r->raw);
    buf_free(&r->scratch);
    sse_free(&r->sse);
    resume_track_free(&r->track);
    free(r->cont_body);
    free(r);
}

static void maybe_free(relay_t *r)
{
    if (r->req || r->call || !r->timer_open) return;
    r->timer_open = false;
    uv_close((uv_handle_t *)&r->timer, on_timer_closed);
}

static void detach_client(relay_t *r)
{
    if (!r->req) return;
    r->req->on_abort = NULL;
    r->req->on_drain = NULL;
    r->req->data = NULL;
    r->req = NULL;
}

static void cancel_call(relay_t *r)
{
    uv_timer_stop(&r->timer);
    if (r->call) {
        tunnel_call_t *c = r->call;
        r->call = NULL;
        tunnel_call_cancel(c);
    }
}

/* ---------- writing to the client ---------- */

static void write_cors_after_status(relay_t *r, const char *p, size_t n)
{
    /* After the status line: the route this node took and, for a web page of an allowed
     * origin, our CORS headers (the host's API saw no Origin) — tunnel_route_headers(). */
    const char *nl = memchr(p, '\n', n);
    if (!nl) {
        httpd_write(r->req, p, n);
        return;
    }
    size_t head = (size_t)(nl - p) + 1;
    httpd_write(r->req, p, head);
    char extra[768];
    if (tunnel_route_headers(r->req, extra, sizeof extra) > 0)
        httpd_write(r->req, extra, strlen(extra));
    httpd_write(r->req, p + head, n - head);
}

static void chunk(relay_t *r, const char *p, size_t n)
{
    if (!r->req || !n) return;
    char h[24];
    int hl = snprintf(h, sizeof h, "%zx\r\n", n);
    httpd_write(r->req, h, (size_t)hl);
    httpd_write(r->req, p, n);
    httpd_write(r->req, "\r\n", 2);
}

/* One SSE event as the client sees it (data lines split at newlines). */
static void emit_event(relay_t *r, const char *event, const char *data, size_t len)
{
    buf_t *b = &r->scratch;
    buf_reset(b);
    int rc = 0;
    if (event && event[0]) rc = buf_printf(b, "event: %s\n", event);
    const char *p = data, *end = data + len;
    do {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (rc == 0) rc = buf_append(b, "data: ", 6);
        if (rc == 0) rc = buf_append(b, p, (size_t)(le - p));
        if (rc == 0) rc = buf_append(b, "\n", 1);
        p = nl ? nl + 1 : end;
    } while (p < end);
    if (rc == 0) rc = buf_append(b, "\n", 1);
    if (rc == 0) chunk(r, b->data, b->len);
}

static void end_stream(relay_t *r)
{
    if (!r->req) return;
    httpd_write(r->req, "0\r\n\r\n", 5);
    httpd_req_t *req = r->req;
    detach_client(r);
    httpd_end(req, false);
}

/* The end of a stream that lost its host: its protocol's error event (OpenAI's error data and
 * "[DONE]", Anthropic "event: error", Responses "response.failed"), then the last chunk. */
static void stream_error(relay_t *r, const char *msg)
{
    if (!r->req) return;
    char *ev = api_stream_error((api_stream_t)r->shape, "host_failed", msg);
    if (ev) chunk(r, ev, strlen(ev));
    free(ev);
    end_stream(r);
}

/* The SSE response head for the client: the host's headers minus framing and hop-by-hop ones,
 * re-framed as chunked (the body is re-sent event by event). */
static int send_sse_head(relay_t *r)
{
    buf_t *b = &r->scratch;
    buf_reset(b);
    int rc = buf_printf(b, "HTTP/1.1 200 OK\r\n");
    /* the host's X-Mesh-Node and Server-Timing pass; the body is re-chunked here */
    if (rc == 0) rc = proxy_copy_headers(r->hdr.data, r->hdr.len, PROXY_HDR_REFRAME, b);
    char extra[768];
    if (rc == 0 && tunnel_route_headers(r->req, extra, sizeof extra) > 0)
        rc = buf_append(b, extra, strlen(extra));
    if (rc == 0) rc = buf_printf(b, "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    if (rc == 0) rc = httpd_write(r->req, b->data, b->len);
    r->client_started = true;
    return rc;
}

/* ---------- response parsing ---------- */

static int cb_header_field(llhttp_t *ps, const char *at, size_t len)
{
    relay_t *r = ps->data;
    if (r->last_was_value) {
        if (buf_append(&r->hdr, "", 1)) return HPE_USER;
        r->last_was_value = false;
    }
    return buf_append(&r->hdr, at, len) ? HPE_USER : 0;
}

static int cb_header_value(llhttp_t *ps, const char *at, size_t len)
{
    relay_t *r = ps->data;
    if (!r->last_was_value) {
        if (buf_append(&r->hdr, "", 1)) return HPE_USER;
        r->last_was_value = true;
    }
    return buf_append(&r->hdr, at, len) ? HPE_USER : 0;
}

static const char *hdr_get(relay_t *r, const char *want)
{
    const char *q = r->hdr.data, *end = r->hdr.data ? r->hdr.data + r->hdr.len : NULL;
    while (q && q < end) {
        const char *name = q;
        q += strlen(q) + 1;
        if (q >= end) break;
        if (strcasecmp(name, want) == 0) return q;
        q += strlen(q) + 1;
    }
    return NULL;
}

static int cb_headers_complete(llhttp_t *ps)
{
    relay_t *r = ps->data;
    if (r->last_was_value && buf_append(&r->hdr, "", 1)) return HPE_USER;
    r->status = ps->status_code;
    if (r->status < 200) { /* interim */
        buf_reset(&r->hdr);
        r->last_was_value = false;
        return 0;
    }
    r->hdr_done = true;
    const char *ct = hdr_get(r, "content-type");
    r->sse_resp = r->status == 200 && ct && strncasecmp(ct, "text/event-stream", 17) == 0;
    if (r->mode != MODE_SSE) return 0;
    if (r->splicing) {
        if (!r->sse_resp) return HPE_USER; /* the continuation was refused */
        count(r, METRICS_RELAY_RESUMED);
    } else if (!r->sse_resp) {
        r->mode = MODE_WHOLE; /* an error answer or not a stream: hold it (r->raw has it) */
    } else if (send_sse_head(r) != 0) {
        return HPE_USER;
    }
    return 0;
}

static int cb_message_complete(llhttp_t *ps)
{
    relay_t *r = ps->data;
    if (r->status >= 200) r->msg_done = true;
    return 0;
}

static void on_event(void *ud, const char *event, const char *data, size_t len)
{
    relay_t *r = ud;
    if (!r->req) return;
    if (r->shape != API_STREAM_OPENAI) { /* passed as they come; the last one ends the stream */
        emit_event(r, event, data, len);
        if (event &&
            (strcmp(event, "message_stop") == 0 || strncmp(event, "response.completed", 18) == 0 ||
             strcmp(event, "response.incomplete") == 0 || strcmp(event, "response.failed") == 0))
            end_stream(r);
        return;
    }
    if (!r->splicing) {
        resume_track_event(&r->track, data, len);
        emit_event(r, event, data, len);
    } else {
        buf_t out;
        buf_init(&out, SSE_DEFAULT_MAX_EVENT + 4096);
        int rc = resume_splice_event(&r->track, data, len, &out);
        if (rc == 1) {
            size_t before = r->track.n_tokens;
            resume_track_event(&r->track, out.data, out.len);
            r->rc->stats.tokens_resumed += r->track.n_tokens - before;
            emit_event(r, event, out.data, out.len);
        }
        buf_free(&out);
    }
    if (r->track.done) {
        if (r->splicing)
            LOGI("relay",
                 "model %s: stream %s completed on %.12s after the failover (%zu + %zu "
                 "tokens)",
                 r->model, r->track.id, r->hosts[r->cur].id, r->tokens_before,
                 r->track.n_tokens - r->tokens_before);
        end_stream(r);
    }
}

static int parse(relay_t *r, const uint8_t *p, size_t n)
{
    if (r->parse_fail || r->msg_done) return 0;
    llhttp_errno_t err = llhttp_execute(&r->parser, (const char *)p, n);
    if (err != HPE_OK) {
        r->parse_fail = true;
        return -EPROTO;
    }
    if (!r->hdr_done && r->hdr.len > MAX_RESP_HEADER) {
        r->parse_fail = true;
        return -E2BIG;
    }
    return 0;
}

static int cb_body(llhttp_t *ps, const char *at, size_t len)
{
    relay_t *r = ps->data;
    if (r->mode == MODE_SSE && r->sse_resp && sse_feed(&r->sse, at, len, on_event, r) != 0)
        return HPE_USER;
    return 0;
}

/* ---------- attempts ---------- */

static void on_first_byte_timeout(uv_timer_t *t)
{
    relay_t *r = t->data;
    count(r, METRICS_RELAY_FIRST_BYTE_TIMEOUT);
    LOGW("relay", "model %s: host %.12s sent no first byte in time; giving it up", r->model,
         r->hosts[r->cur].id);
    cancel_call(r);
    attempt_next(r, "no answer within the first-byte deadline");
}

static uint64_t connect_wait_ms(const relay_t *r)
{
    const tunables_t *t = r->rc->tun;
    return t ? t->connect_wait_ms : options_env_default("MESH_LLM_CONNECT_WAIT_MS");
}

static int attempt_start(relay_t *r, size_t idx)
{
    tp_conn_t *c = r->io.conn(r->io.data, r->hosts[idx].id);
    r->tried[idx] = true;
    if (!c) return -ENOTCONN;
    r->cur = idx;
    r->got = 0;
    r->status = 0;
    r->sse_resp = r->hdr_done = r->msg_done = r->parse_fail = r->last_was_value = false;
    r->unconsumed = 0;
    buf_reset(&r->hdr);
    buf_reset(&r->raw);
    sse_free(&r->sse);
    sse_init(&r->sse, 0);
    llhttp_init(&r->parser, HTTP_RESPONSE, &r->settings);
    r->parser.data = r;
    const char *body = r->splicing ? r->cont_body : r->req->body;
    size_t len = r->splicing ? r->cont_len : r->req->body_len;
    int rc = tunnel_call_open(c, r->model, r->req, body, len, &sink, r, &r->call);
    if (rc) return rc;
    /* a host still loading the model holds the request until it is ready: no deadline */
    r->first_byte_ms = 0;
    if (r->hosts[idx].ready) {
        const tunables_t *t = r->rc->tun;
        r->first_byte_ms = resume_first_byte_ms(
            t ? t->first_byte_ms : options_env_default("MESH_LLM_FIRST_BYTE_MS"),
            t ? t->first_byte_ms_per_kb : options_env_default("MESH_LLM_FIRST_BYTE_MS_PER_KB"),
            len);
        uv_timer_start(&r->timer, on_first_byte_timeout, r->first_byte_ms, 0);
    }
    return 0;
}

/* The host's admission queue holds the request (tunnel.h, the queued signal): it is waiting its
 * turn, not stuck, so the first-byte deadline starts again (it counts from the last signal, and
 * spans at least 3 signal intervals, so that a short MESH_LLM_FIRST_BYTE_MS does not outrun the
 * next signal; the connection's own liveness is watched by the transport, MESH_LLM_LIVE_MS). */
static void sink_queued(void *ud)
{
    relay_t *r = ud;
    if (!r->first_byte_ms || r->got || !uv_is_active((uv_handle_t *)&r->timer)) return;
    LOGD("relay", "model %s: queued on host %.12s; first-byte deadline restarted", r->model,
         r->hosts[r->cur].id);
    uint64_t ms = r->first_byte_ms, floor = 3 * (uint64_t)TUNNEL_QUEUED_EVERY_MS;
    uv_timer_start(&r->timer, on_first_byte_timeout, ms > floor ? ms : floor, 0);
}

/* The next untried host after cur (ring order), or n_hosts. */
static size_t next_host(relay_t *r)
{
    for (size_t k = 1; k <= r->n_hosts; k++) {
        size_t i = (r->cur + k) % r->n_hosts;
        if (!r->tried[i]) return i;
    }
    return r->n_hosts;
}

/* No host was connected when the request came (a member that just came up, a hole punch or a
 * relay under way: the mesh dials them): the first host connected takes it, in the decided
 * order; none by wait_until: 503, as when no dial is under way. */
static void on_connect_wait(uv_timer_t *t)
{
    relay_t *r = t->data;
    bool stopped = false;
    for (size_t i = 0; i < r->n_hosts; i++) {
        if (!r->io.conn(r->io.data, r->hosts[i].id)) continue;
        uv_timer_stop(&r->timer); /* the attempt may start its first-byte deadline on it */
        stopped = true;
        memset(r->tried, 0, sizeof r->tried);
        if (attempt_start(r, i) == 0) return; /* it took no stream: the next one, or on */
    }
    if (uv_now(r->loop) < r->wait_until) {
        if (stopped) uv_timer_start(&r->timer, on_connect_wait, 20, 20);
        return; /* the repeat timer polls on */
    }
    uv_timer_stop(&r->timer);
    httpd_req_t *req = r->req;
    detach_client(r);
    httpd_respond_error(req, 503, "unavailable", "host_unreachable",
                        "model '%s': its host%s cannot be reached right now (no connection within "
                        "%llu ms); retry shortly",
                        r->model, r->n_hosts > 1 ? "s" : "",
                        (unsigned long long)connect_wait_ms(r));
    maybe_free(r);
}

/* Waiting for the connection to a host the retry goes to (mesh_conn started a dial). */
static void on_dial_wait(uv_timer_t *t)
{
    relay_t *r = t->data;
    size_t i = r->wait_idx;
    bool connected = r->io.conn(r->io.data, r->hosts[i].id) != NULL;
    if (!connected && uv_now(r->loop) < r->wait_until) return; /* the repeat timer polls on */
    uv_timer_stop(&r->timer);
    if (connected && attempt_start(r, i) == 0) return;
    if (!try_other(r)) attempt_next(r, "no other host could be reached in time");
}

static bool try_other(relay_t *r)
{
    size_t dialling = r->n_hosts;
    for (size_t i = next_host(r); i < r->n_hosts; i = next_host(r)) {
        int rc = attempt_start(r, i);
        if (rc == 0) return true;
        if (rc == -ENOTCONN && dialling == r->n_hosts) dialling = i;
    }
    if (dialling == r->n_hosts || r->dial_waited) return false;
    /* no connection to any other host yet, but a dial is under way: wait for it, bounded */
    r->dial_waited = true;
    r->wait_idx = dialling;
    const tunables_t *t = r->rc->tun;
    r->wait_until =
        uv_now(r->loop) + (t ? t->retry_dial_ms : options_env_default("MESH_LLM_RETRY_DIAL_MS"));
    uv_timer_start(&r->timer, on_dial_wait, 20, 20);
    return true;
}

/* The attempt failed before anything reached the client: once more on another host. */
static void attempt_next(relay_t *r, const char *why)
{
    if (!r->req) {
        maybe_free(r);
        return;
    }
    const char *failed = r->hosts[r->cur].id;
    r->io.suspect(r->io.data, failed); /* check it now rather than at its monitors' next beat */
    if (r->client_started) {
        /* a stream is under way (a continuation failed): end it properly */
        if (r->splicing) count(r, METRICS_RELAY_FAILED);
        char msg[256];
        snprintf(msg, sizeof msg,
                 "the node serving model '%s' failed in the middle of the "
                 "stream and it could not be continued (%s)",
                 r->model, why);
        stream_error(r, msg);
        maybe_free(r);
        return;
    }
    if (!r->retried) {
        r->retried = true;
        size_t to = next_host(r);
        if (to < r->n_hosts) {
            LOGI("relay", "model %s: host %.12s failed (%s); retrying on %.12s", r->model, failed,
                 why, r->hosts[to].id);
            count(r, METRICS_RELAY_RETRY);
        }
        if (try_other(r)) return;
    }
    httpd_req_t *req = r->req;
    detach_client(r);
    httpd_respond_error(req, 503, "unavailable", "host_failed",
                        "the node serving model '%s' failed before answering (%s); retry shortly",
                        r->model, why);
    maybe_free(r);
}

/* A streamed completion lost its host before "[DONE]": continue it elsewhere or end it with an
 * error event. */
static void failover(relay_t *r, const char *why)
{
    if (r->shape != API_STREAM_OPENAI) { /* not continued: ended in its own protocol's error */
        if (r->msg_done) {               /* the host ended it itself */
            end_stream(r);
            return;
        }
        count(r, METRICS_RELAY_FAILED);
        r->io.suspect(r->io.data, r->hosts[r->cur].id);
        LOGW("relay", "model %s: host %.12s died mid-stream (%s): error event sent", r->model,
             r->hosts[r->cur].id, why);
        char msg[512];
        snprintf(msg, sizeof msg,
                 "the node serving model '%s' failed in the middle of the stream (%s); retry "
                 "the request",
                 r->model, why);
        stream_error(r, msg);
        return;
    }
    if (r->track.finished && !r->track.blocked) {
        /* everything was said but "[DONE]" */
        emit_event(r, NULL, "[DONE]", 6);
        end_stream(r);
        return;
    }
    count(r, METRICS_RELAY_FAILOVER);
    const char *dead = r->hosts[r->cur].id;
    r->io.suspect(r->io.data, dead);
    char reason[256] = "";
    int rc = -EINVAL;
    if (r->failed_over) {
        snprintf(reason, sizeof reason, "the stream already failed over once");
    } else if (next_host(r) >= r->n_hosts) {
        snprintf(reason, sizeof reason, "no other replica serves model '%s'", r->model);
    } else {
        free(r->cont_body);
        r->cont_body = NULL;
        rc = resume_build(&r->track, r->req->body, r->req->body_len, &r->cont_body, &r->cont_len,
                          reason, sizeof reason);
    }
    if (rc == RESUME_NOTHING_LEFT) {
        LOGI("relay",
             "model %s: host %.12s died (%s) when the token budget was spent; ending "
             "the stream",
             r->model, dead, why);
        count(r, METRICS_RELAY_RESUMED);
        buf_t last;
        buf_init(&last, 1 << 16);
        if (resume_length_chunk(&r->track, &last) == 0) emit_event(r, NULL, last.data, last.len);
        buf_free(&last);
        emit_event(r, NULL, "[DONE]", 6);
        end_stream(r);
        return;
    }
    if (rc == 0) {
        r->failed_over = r->splicing = true;
        r->tokens_before = r->track.n_tokens;
        size_t to = next_host(r);
        LOGW("relay",
             "model %s: host %.12s died mid-stream (%s) after %zu tokens; failover: "
             "continuing stream %s on %.12s",
             r->model, dead, why, r->track.n_tokens, r->track.id, r->hosts[to].id);
        if (try_other(r)) return;
        snprintf(reason, sizeof reason, "no other replica could be reached");
    }
    count(r, METRICS_RELAY_FAILED);
    LOGW("relay",
         "model %s: host %.12s died mid-stream (%s) after %zu tokens; failover "
         "impossible (%s): error event sent",
         r->model, dead, why, r->track.n_tokens, reason);
    char msg[512];
    snprintf(msg, sizeof msg,
             "the node serving model '%s' failed in the middle of the stream (%s) and it could "
             "not be continued: %s",
             r->model, why, reason);
    stream_error(r, msg);
}

static void deliver_whole(relay_t *r)
{
    httpd_req_t *req = r->req;
    write_cors_after_status(r, r->raw.data, r->raw.len);
    detach_client(r);
    httpd_end(req, false);
}

static void client_drain(httpd_req_t *req)
{
    relay_t *r = req->data;
    if (r->call && r->unconsumed) {
        tunnel_call_consumed(r->call, r->unconsumed);
        r->unconsumed = 0;
    }
}

static void client_abort(httpd_req_t *req)
{
    relay_t *r = req->data;
    r->req = NULL;
    cancel_call(r);
    maybe_free(r);
}

static void sink_data(void *ud, const uint8_t *p, size_t n)
{
    relay_t *r = ud;
    if (!r->got) uv_timer_stop(&r->timer);
    r->got += n;
    if (!r->req) { /* answered already (e.g. "[DONE]" seen): drain what is left */
        tunnel_call_consumed(r->call, n);
        return;
    }
    if (r->mode == MODE_RAW) {
        if (!r->client_started) {
            r->client_started = true;
            write_cors_after_status(r, (const char *)p, n);
        } else {
            httpd_write(r->req, p, n);
        }
    } else {
        bool hold = r->mode == MODE_WHOLE || !r->hdr_done;
        if (hold && buf_append(&r->raw, p, n) != 0) {
            /* too big to hold: pass it through from here on, without a retry */
            if (r->mode == MODE_WHOLE || !r->sse_resp) {
                r->mode = MODE_RAW;
                r->client_started = true;
                write_cors_after_status(r, r->raw.data, r->raw.len);
                httpd_write(r->req, p, n);
                buf_free(&r->raw);
                tunnel_call_consumed(r->call, n);
                return;
            }
        }
        if (parse(r, p, n) != 0) {
            LOGW("relay", "model %s: %s from %.12s (HTTP %d)", r->model,
                 r->splicing && r->hdr_done ? "the continuation was refused" : "malformed response",
                 r->hosts[r->cur].id, r->status);
            cancel_call(r);
            attempt_next(r, r->splicing && r->hdr_done ? "the continuation was refused"
                                                       : "malformed response");
            return;
        }
        if (r->mode == MODE_SSE && r->sse_resp) buf_free(&r->raw);
        if (r->mode == MODE_WHOLE && r->msg_done) {
            cancel_call(r);
            /* the host could not serve it (its llama-server died, hangs or restarts): that is
             * a failure before the answer, so another replica gets the request, once */
            if ((r->status == 502 || r->status == 503) && !r->retried && !r->client_started &&
                next_host(r) < r->n_hosts) {
                char why[64];
                snprintf(why, sizeof why, "it answered HTTP %d", r->status);
                attempt_next(r, why);
                return;
            }
            deliver_whole(r);
            maybe_free(r);
            return;
        }
    }
    if (r->req && httpd_write_queue(r->req) > CLIENT_HIGH_WATER)
        r->unconsumed += n; /* reopened by client_drain */
    else if (r->call)
        tunnel_call_consumed(r->call, n);
}

static void sink_end(void *ud, int err, bool fin)
{
    relay_t *r = ud;
    r->call = NULL;
    uv_timer_stop(&r->timer);
    if (!r->req) {
        maybe_free(r);
        return;
    }
    const char *why = err ? "the tunnel was reset or the host went away"
                          : (fin ? "the host ended its answer early" : "the stream closed");
    if (r->got == 0 && !r->client_started) {
        attempt_next(r, err ? "the host closed the tunnel" : "empty answer");
        return;
    }
    switch (r->mode) {
    case MODE_RAW: {
        httpd_req_t *req = r->req;
        detach_client(r);
        if (fin && !err)
            httpd_end(req, false);
        else
            httpd_abort(req); /* cut mid-response: the client must see it */
        break;
    }
    case MODE_WHOLE:
        if (!r->msg_done && fin && !err && r->hdr_done && llhttp_finish(&r->parser) == HPE_OK)
            r->msg_done = true; /* a response delimited by the end of the stream */
        if (r->msg_done) {
            deliver_whole(r);
        } else if (r->client_started) {
            httpd_req_t *req = r->req;
            detach_client(r);
            httpd_abort(req);
        } else {
            attempt_next(r, why);
            return;
        }
        break;
    case MODE_SSE:
        if (!r->hdr_done || !r->sse_resp) {
            attempt_next(r, why); /* a started stream ends with an error event there */
            return;
        }
        failover(r, why);
        break; /* ended there (error event, [DONE]) or continued elsewhere (a call, a dial) */
    }
    maybe_free(r);
}

static tp_conn_t *mesh_io_conn(void *data, const char *id)
{
    return data ? mesh_conn(data, id) : NULL;
}

static void mesh_io_suspect(void *data, const char *id)
{
    mesh_suspect(data, id);
}

int relay_start(relay_ctx_t *ctx, mesh_t *mesh, const char *model, httpd_req_t *req,
                const relay_host_t *hosts, size_t n, bool no_wait)
{
    const relay_io_t io = {
        .conn = mesh_io_conn, .suspect = mesh_io_suspect, .data = mesh, .no_wait = no_wait};
    return relay_start_io(ctx, &io, model, req, hosts, n);
}

int relay_start_io(relay_ctx_t *ctx, const relay_io_t *io, const char *model, httpd_req_t *req,
                   const relay_host_t *hosts, size_t n)
{
    if (n == 0) return -ENOENT;
    relay_t *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->io = *io;
    r->rc = ctx;
    r->loop = req->server->loop;
    r->req = req;
    r->stat = meshstat_of(req);
    snprintf(r->model, sizeof r->model, "%s", model);
    r->n_hosts = n < RELAY_MAX_HOSTS ? n : RELAY_MAX_HOSTS;
    memcpy(r->hosts, hosts, r->n_hosts * sizeof *hosts);
    buf_init(&r->hdr, MAX_RESP_HEADER + 1024);
    buf_init(&r->raw, RELAY_WHOLE_MAX);
    buf_init(&r->scratch, SSE_DEFAULT_MAX_EVENT + 4096);
    sse_init(&r->sse, 0);
    llhttp_settings_init(&r->settings);
    r->settings.on_header_field = cb_header_field;
    r->settings.on_header_value = cb_header_value;
    r->settings.on_headers_complete = cb_headers_complete;
    r->settings.on_body = cb_body;
    r->settings.on_message_complete = cb_message_complete;
    int kind = resume_kind_for_path(req->path);
    const request_t *rq = meshstat_parse_body(req); /* parsed once already (api_openai.c) */
    bool streamed = rq->stream;
    r->kind = kind;
    r->shape = streamed ? api_stream_kind(req->path) : API_STREAM_OPENAI;
    r->mode = !streamed                        ? MODE_WHOLE
              : r->shape != API_STREAM_OPENAI  ? MODE_SSE
              : request_resumable(rq, NULL, 0) ? MODE_SSE
                                               : MODE_RAW;
    resume_track_init(&r->track, kind == RESUME_COMPLETION ? RESUME_COMPLETION : RESUME_CHAT);
    uv_timer_init(r->loop, &r->timer);
    r->timer.data = r;
    r->timer_open = true;
    ctx->stats.requests++;
    int rc = -ENOTCONN;
    bool dialling = false;
    for (size_t i = 0; i < r->n_hosts; i++) {
        rc = attempt_start(r, i);
        if (rc == 0) break;
        dialling |= rc == -ENOTCONN;
    }
    if (rc && dialling && !r->io.no_wait && connect_wait_ms(r) > 0) {
        /* no connection yet: the mesh is dialling; wait, bounded */
        r->wait_until = uv_now(r->loop) + connect_wait_ms(r);
        uv_timer_start(&r->timer, on_connect_wait, 20, 20);
        rc = 0;
    }
    if (rc) {
        r->req = NULL; /* the caller answers */
        maybe_free(r);
        return rc;
    }
    req->data = r;
    req->on_abort = client_abort;
    req->on_drain = client_drain;
    return 0;
}

typedef struct {
    relay_flight_t *f;
    void (*prev)(httpd_req_t *req);
    void *prev_data;
} flight_t;

/* The request's life ended (answered, failed, client gone): one fewer in flight there; then
 * whoever watched it before (admission control) is told. */
static void flight_done(httpd_req_t *req);

/* No longer in flight there: req's watcher of before is back. */
static void flight_end(httpd_req_t *req)
{
    flight_t *t = req->finish_data;
    if (t->f->n > 0) t->f->n--;
    req->on_finish = t->prev;
    req->finish_data = t->prev_data;
    free(t);
}

static void flight_done(httpd_req_t *req)
{
    flight_end(req);
    if (req->on_finish) {
        void (*fn)(httpd_req_t *) = req->on_finish;
        req->on_finish = NULL;
        fn(req);
    }
}

void relay_track(relay_ctx_t *rc, httpd_req_t *req, const char *id)
{
    relay_flight_t *f = NULL, *free_one = NULL;
    for (size_t i = 0; i < RELAY_FLIGHT_HOSTS && !f; i++) {
        relay_flight_t *e = &rc->flight[i];
        if (e->n && strcmp(e->id, id) == 0) f = e;
        if (!e->n && !free_one) free_one = e;
    }
    if (!f && free_one) {
        f = free_one;
        snprintf(f->id, sizeof f->id, "%s", id);
    }
    flight_t *t = f ? calloc(1, sizeof *t) : NULL;
    if (!t) return; /* not counted: the spill-over sees one request fewer */
    *t = (flight_t){.f = f, .prev = req->on_finish, .prev_data = req->finish_data};
    req->on_finish = flight_done;
    req->finish_data = t;
    f->n++;
}

void relay_untrack(httpd_req_t *req)
{
    if (req->on_finish == flight_done) flight_end(req);
}

void relay_each_inflight(const relay_ctx_t *rc, void (*f)(const char *id, uint32_t n, void *data),
                         void *data)
{
    for (size_t i = 0; i < RELAY_FLIGHT_HOSTS; i++)
        if (rc->flight[i].n) f(rc->flight[i].id, rc->flight[i].n, data);
}

uint32_t relay_inflight(const relay_ctx_t *rc, const char *id)
{
    for (size_t i = 0; i < RELAY_FLIGHT_HOSTS; i++)
        if (rc->flight[i].n && strcmp(rc->flight[i].id, id) == 0) return rc->flight[i].n;
    return 0;
}

bool relay_prefix_affinity(const relay_ctx_t *rc)
{
    return rc->tun ? rc->tun->prefix_affinity
                   : options_env_default("MESH_LLM_PREFIX_AFFINITY") != 0;
}

void relay_affinity_input(relay_ctx_t *rc, rd_input_t *in)
{
    in->no_affinity = !rc || !relay_prefix_affinity(rc);
    in->affinity_host = NULL;
    if (in->rq && in->rq->prefix && !in->no_affinity && in->n_hosts >= 2)
        in->affinity_host = affinity_get(&rc->affinity, in->rq->prefix);
}

void relay_affinity_note(relay_ctx_t *rc, const rd_input_t *in, const rd_decision_t *d)
{
    if (!rc) return;
    if (d->spilled) rc->stats.spilled++;
    if (d->affinity) {
        if (d->affinity_hit)
            rc->affinity.hits++;
        else
            rc->affinity.misses++;
    }
    if (d->remember) affinity_put(&rc->affinity, in->rq->prefix, in->hosts[d->order[0]].id);
}

void relay_stats(const relay_ctx_t *rc, relay_stats_t *out)
{
    *out = rc->stats;
}

json_t *relay_status_json(const relay_ctx_t *rc)
{
    relay_stats_t s = rc ? rc->stats : (relay_stats_t){0};
    uint64_t hits = rc ? rc->affinity.hits : 0, misses = rc ? rc->affinity.misses : 0;
    return json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "prefix_affinity_hits", (json_int_t)hits,
        "prefix_affinity_misses", (json_int_t)misses, "routed_requests", (json_int_t)s.requests,
        "first_byte_timeouts", (json_int_t)s.first_byte_timeouts, "retries", (json_int_t)s.retries,
        "failovers", (json_int_t)s.failovers, "failovers_resumed", (json_int_t)s.failovers_resumed,
        "failovers_refused", (json_int_t)s.failovers_refused, "tokens_resumed",
        (json_int_t)s.tokens_resumed, "spilled", (json_int_t)s.spilled);
}

#include "tunnel_rpc.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rpc_frame.h"
#include "rpc_turns.h"
#include "util.h"
#include "wire.h"

#define STAGE_CAP (8u << 20) /* stream bytes waiting for the TCP side (a window is 1 MiB) */
#define READ_CHUNK 65536
#define HOLD_CAP (RPC_FRAME_HOLD_MAX + READ_CHUNK)

typedef struct relay relay_t;

struct rpc_fwd {
    uv_loop_t *loop;
    uv_tcp_t srv;
    bool closing;
    int port;
    char *peer_id, *model;
    tp_conn_t *(*get_conn)(void *data, const char *peer_id);
    void *data;
    tunnel_rpc_opts_t opts;
    tunnel_rpc_suspect_cb suspect;
    tunnel_rpc_stage_cb stage; /* tunnel_rpc_on_stage; NULL: no samples */
    void *stage_data;
    uint64_t quiet_ms; /* a reply overdue this long makes the worker suspected */
    relay_t *links;
    size_t n_links;
    tunnel_rpc_stats_t *stats; /* tunnel_rpc_set_stats; NULL: not counted */
};

/* One TCP connection <-> one stream. Host side: accepted from llama-server; worker side:
 * connected to rpc-server. */
struct relay {
    uv_loop_t *loop;
    tunnel_rpc_stats_t *st; /* the caller's counters, or own_st (not counted) */
    tunnel_rpc_stats_t own_st;
    rpc_fwd_t *fwd; /* host side, while the listener lives */
    relay_t *prev, *next;
    bool host;
    tp_stream_t *s; /* NULL before it is opened (host) and after on_close */
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    uv_timer_t timer; /* host: get_conn retries */
    uv_timer_t quiet; /* host: runs while a reply is awaited (tunnel_rpc_on_suspect) */
    bool quiet_open;
    uv_check_t chk; /* stream bytes staged this loop turn go to the socket after the poll */
    bool tcp_open, tcp_closing, timer_open, chk_open;
    bool connected; /* the TCP side can be written to */
    bool reading, tcp_eof, stream_fin, writing, failed;
    int shut;         /* TCP shutdown: 0 not yet, 1 under way, 2 done */
    buf_t stage;      /* stream bytes not yet handed to the TCP socket */
    buf_t inflight;   /* the bytes of the uv_write under way */
    size_t stage_ack; /* of stage: bytes to acknowledge once written (`rest` is not) */
    size_t inflight_ack;
    size_t inflight_off;    /* of inflight: bytes the socket took before the uv_write */
    uint64_t deadline;      /* host: give up on get_conn (loop time) */
    rpc_turns_t turns;      /* host: request/response turns of this stream */
    uint64_t computes_seen; /* host: frame.computes as last looked at */
    uint64_t compute_t0;    /* host: uv_hrtime when a GRAPH_COMPUTE was read, 0 none pending */
    /* TCP -> stream coalescing (rpc_frame.h): bytes read and not yet written to the stream
     * wait for the rest of their burst, at most TUNNEL_RPC_HOLD_MS after the last read */
    bool coalesce, hold_open;
    rpc_frame_t frame;
    buf_t hold;
    uv_timer_t hold_timer;
};

static void relay_start_reading(relay_t *r);
static void relay_flush(relay_t *r);

/* ---------------- lifetime ---------------- */

static void relay_unlink(relay_t *r)
{
    rpc_fwd_t *f = r->fwd;
    if (!f) return;
    if (r->prev)
        r->prev->next = r->next;
    else
        f->links = r->next;
    if (r->next) r->next->prev = r->prev;
    r->prev = r->next = NULL;
    r->fwd = NULL;
    f->n_links--;
}

static void relay_try_free(relay_t *r)
{
    if (r->s || r->tcp_open || r->timer_open || r->chk_open || r->hold_open || r->quiet_open)
        return;
    relay_unlink(r);
    buf_free(&r->hold);
    buf_free(&r->stage);
    buf_free(&r->inflight);
    r->st->links_active--;
    free(r);
}

static void on_tcp_closed(uv_handle_t *h)
{
    relay_t *r = h->data;
    r->tcp_open = false;
    relay_try_free(r);
}

static void on_timer_closed(uv_handle_t *h)
{
    relay_t *r = h->data;
    r->timer_open = false;
    relay_try_free(r);
}

static void on_chk_closed(uv_handle_t *h)
{
    relay_t *r = h->data;
    r->chk_open = false;
    relay_try_free(r);
}

static void on_hold_closed(uv_handle_t *h)
{
    relay_t *r = h->data;
    r->hold_open = false;
    relay_try_free(r);
}

static void on_quiet_closed(uv_handle_t *h)
{
    relay_t *r = h->data;
    r->quiet_open = false;
    relay_try_free(r);
}

/* Host side: the worker this link goes to may be dead (tunnel_rpc_on_suspect). */
static void relay_suspect(relay_t *r, const char *why)
{
    rpc_fwd_t *f = r->fwd;
    if (!f || f->closing || !f->suspect) return;
    r->st->suspects++;
    f->suspect(f->data, f->peer_id, why);
}

static void relay_close_tcp(relay_t *r)
{
    if (!r->tcp_open || r->tcp_closing) return;
    r->tcp_closing = true;
    r->reading = false;
    uv_close((uv_handle_t *)&r->tcp, on_tcp_closed);
    uv_close((uv_handle_t *)&r->chk, on_chk_closed); /* nothing more to write */
    uv_close((uv_handle_t *)&r->hold_timer, on_hold_closed);
    if (r->quiet_open) uv_close((uv_handle_t *)&r->quiet, on_quiet_closed);
}

static void relay_close_timer(relay_t *r)
{
    if (r->timer_open && !uv_is_closing((uv_handle_t *)&r->timer))
        uv_close((uv_handle_t *)&r->timer, on_timer_closed);
}

/* Tear down both sides. The stream reset comes last: r may be gone after it. */
static void relay_fail(relay_t *r)
{
    r->failed = true;
    relay_close_timer(r);
    relay_close_tcp(r);
    if (r->s) tp_stream_reset(r->s, 1);
}

/* Both TCP directions are done (or the stream is gone and everything was written). */
static void relay_check_done(relay_t *r)
{
    if (r->shut == 2 && (r->tcp_eof || !r->s)) relay_close_tcp(r);
}

/* ---------------- stream -> TCP ---------------- */

static void on_shutdown(uv_shutdown_t *req, int status)
{
    relay_t *r = req->data;
    r->shut = 2;
    if (status < 0) {
        if (status != UV_ECANCELED) relay_fail(r);
        return;
    }
    relay_check_done(r);
}

static void count_rx(relay_t *r, size_t n)
{
    if (r->host)
        r->st->host_rx += n;
    else
        r->st->worker_rx += n;
}

static void on_written(uv_write_t *w, int status)
{
    relay_t *r = w->data;
    r->writing = false;
    if (status < 0) {
        if (status != UV_ECANCELED)
            LOGD("tunnel_rpc", "write to the %s side failed: %s",
                 r->host ? "llama-server" : "rpc-server", uv_strerror(status));
        relay_fail(r);
        return;
    }
    count_rx(r, r->inflight.len - r->inflight_off);
    buf_reset(&r->inflight);
    r->inflight_off = 0;
    if (r->s && r->inflight_ack) tp_stream_consumed(r->s, r->inflight_ack);
    r->inflight_ack = 0;
    relay_flush(r);
}

/* Staged bytes go to the socket at once when it takes them (uv_try_write: no write request, no
 * callback a loop turn later, no poll-set change); what it does not take goes in one uv_write,
 * and what arrives meanwhile is staged for the next. Bytes are acknowledged to the stream as
 * the socket takes them, except the stage's first stage.len - stage_ack (the worker's `rest`,
 * which the caller acknowledged). */
static void relay_flush(relay_t *r)
{
    if (!r->connected || r->tcp_closing || r->writing || r->failed) return;
    if (r->stage.len) {
        uv_buf_t b = uv_buf_init(r->stage.data, (unsigned)r->stage.len);
        int w = uv_try_write((uv_stream_t *)&r->tcp, &b, 1);
        size_t done = w > 0 ? (size_t)w : 0; /* errors surface from the uv_write below */
        size_t noack = r->stage.len - r->stage_ack;
        size_t ack = done > noack ? done - noack : 0;
        r->stage_ack -= ack;
        count_rx(r, done);
        if (done < r->stage.len) {
            buf_t t = r->inflight;
            r->inflight = r->stage;
            r->stage = t;
            buf_reset(&r->stage);
            r->inflight_off = done;
            r->inflight_ack = r->stage_ack;
            r->stage_ack = 0;
            b = uv_buf_init(r->inflight.data + done, (unsigned)(r->inflight.len - done));
            r->wreq.data = r;
            if (uv_write(&r->wreq, (uv_stream_t *)&r->tcp, &b, 1, on_written) != 0) {
                relay_fail(r);
                return;
            }
            r->writing = true;
            if (ack && r->s) tp_stream_consumed(r->s, ack);
            return;
        }
        buf_reset(&r->stage);
        if (ack && r->s) tp_stream_consumed(r->s, ack);
    }
    if (r->stream_fin && r->shut == 0) {
        r->sreq.data = r;
        int rc = uv_shutdown(&r->sreq, (uv_stream_t *)&r->tcp, on_shutdown);
        if (rc) {
            relay_fail(r);
            return;
        }
        r->shut = 1;
    }
}

static void on_chk(uv_check_t *h)
{
    relay_t *r = h->data;
    uv_check_stop(h);
    relay_flush(r);
}

/* Stream bytes arrive one packet at a time while the transport reads a batch of datagrams:
 * they are staged and written in one go right after the poll phase (the loop's check phase),
 * so a batch costs one write, and the transport's flush (acknowledgements, window updates)
 * comes after. Also keeps relay_fail out of the transport's callbacks. */
static void relay_schedule(relay_t *r)
{
    if (!r->connected || r->tcp_closing || r->writing || r->failed) return;
    if (!uv_is_active((uv_handle_t *)&r->chk)) uv_check_start(&r->chk, on_chk);
}

static void st_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    relay_t *r = tp_stream_data(s);
    if (r->host && rpc_turns_note(&r->turns, RPC_DIR_TO_HOST, n)) {
        r->st->host_turns++;
        /* the first reply after a graph computation: the worker's stage of the token is done */
        if (r->compute_t0 && r->fwd && r->fwd->stage) {
            double ms = (double)(uv_hrtime() - r->compute_t0) / 1e6;
            r->compute_t0 = 0;
            r->fwd->stage(r->fwd->stage_data, r->fwd, ms);
        }
        r->compute_t0 = 0;
    }
    if (r->quiet_open && n) uv_timer_stop(&r->quiet);
    if (r->failed || r->tcp_closing) {
        tp_stream_consumed(s, n);
        return;
    }
    if (buf_append(&r->stage, p, n) != 0) {
        LOGD("tunnel_rpc", "peer sent beyond its window: relay reset");
        relay_fail(r);
        return;
    }
    r->stage_ack += n;
    relay_schedule(r);
}

static void st_fin(tp_stream_t *s)
{
    relay_t *r = tp_stream_data(s);
    r->stream_fin = true;
    relay_schedule(r);
}

static void st_drain(tp_stream_t *s)
{
    relay_start_reading(tp_stream_data(s));
}

static void st_close(tp_stream_t *s, int err)
{
    relay_t *r = tp_stream_data(s);
    r->s = NULL;
    if (r->host && !r->failed && (err || !r->stream_fin))
        relay_suspect(r, err ? "its rpc tunnel was reset or its connection lost"
                             : "its rpc tunnel closed");
    if (err || !r->stream_fin || r->failed) {
        /* reset, or the connection went away: the TCP side goes too */
        relay_close_tcp(r);
    } else {
        relay_check_done(r); /* clean: close once the last bytes and the shutdown are out */
    }
    relay_try_free(r);
}

static const tp_stream_cb_t relay_cb = {st_data, st_fin, st_drain, st_close};

/* ---------------- TCP -> stream ---------------- */

static void tcp_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    static char buf[READ_CHUNK]; /* copied into the stream's queue before the next read */
    b->base = buf;
    b->len = sizeof buf;
}

/* Write the first n held bytes to the stream. */
static int relay_release(relay_t *r, size_t n)
{
    if (!n) return 0;
    int rc = tp_stream_write(r->s, r->hold.data, n);
    buf_consume(&r->hold, n);
    if (r->hold.len == 0) {
        r->st->bursts++;
        uv_timer_stop(&r->hold_timer);
    }
    return rc;
}

static void on_hold_expired(uv_timer_t *h)
{
    relay_t *r = h->data;
    r->st->hold_expired++;
    if (r->s && !r->failed && relay_release(r, rpc_frame_release_all(&r->frame)) != 0)
        relay_fail(r);
}

/* Bytes read from the TCP side go to the stream where rpc_frame cuts the stream; the rest wait
 * for the rest of their burst. */
static int relay_forward(relay_t *r, const char *p, size_t n)
{
    if (!r->coalesce) return tp_stream_write(r->s, p, n);
    size_t rel = rpc_frame_feed(&r->frame, (const uint8_t *)p, n);
    int rc = 0;
    if (r->hold.len == 0) { /* nothing held: what goes, goes from the read buffer (no copy) */
        rc = rel ? tp_stream_write(r->s, p, rel) : 0;
        if (rc == 0 && rel == n) {
            r->st->bursts++;
            return 0;
        }
        if (rc == 0 && buf_append(&r->hold, p + rel, n - rel) != 0) rc = -ENOBUFS;
    } else {                                                  /* the held bytes go first */
        if (buf_append(&r->hold, p, n) != 0) return -ENOBUFS; /* cannot happen: cap */
        rc = relay_release(r, rel);
    }
    if (rc == 0 && r->hold.len)
        uv_timer_start(&r->hold_timer, on_hold_expired, TUNNEL_RPC_HOLD_MS, 0);
    return rc;
}

/* Bytes went to the worker and nothing came back for quiet_ms: a reply may simply take long (a
 * long prompt on a slow worker), or the worker died without closing anything. Suspecting it
 * costs one probe, which a live worker answers; while the silence lasts it is suspected again
 * at doubling intervals (at most 8 x quiet_ms apart). Only when the last command sent needs a
 * reply (the coalescer's framing; without coalescing any bytes sent count). */
static void on_quiet(uv_timer_t *h)
{
    relay_t *r = h->data;
    uint64_t every = uv_timer_get_repeat(h);
    if (!r->fwd || r->turns.last != RPC_DIR_TO_WORKER || (r->coalesce && !r->frame.reply)) {
        uv_timer_stop(h);
        return;
    }
    LOGD("tunnel_rpc", "worker %.12s: no reply for %.1f s", r->fwd->peer_id,
         (double)every / 1000.0);
    relay_suspect(r, "a reply through its rpc tunnel is overdue");
    if (every < 8 * r->fwd->quiet_ms) uv_timer_set_repeat(h, every * 2);
}

static void tcp_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    relay_t *r = st->data;
    if (n == 0) return;
    if (n < 0) {
        uv_read_stop(st);
        r->reading = false;
        if (n != UV_EOF) {
            LOGD("tunnel_rpc", "read from the %s side failed: %s",
                 r->host ? "llama-server" : "rpc-server", uv_strerror((int)n));
            relay_fail(r);
            return;
        }
        r->tcp_eof = true;
        if (r->s && relay_release(r, rpc_frame_release_all(&r->frame)) != 0) {
            relay_fail(r);
            return;
        }
        if (r->s) tp_stream_shutdown(r->s);
        relay_check_done(r);
        return;
    }
    if (!r->s || r->failed) return;
    if (relay_forward(r, b->base, (size_t)n) != 0) {
        relay_fail(r);
        return;
    }
    if (r->host) {
        r->st->host_tx += (uint64_t)n;
        if (r->frame.computes != r->computes_seen) {
            r->computes_seen = r->frame.computes;
            if (!r->compute_t0) r->compute_t0 = uv_hrtime();
        }
        rpc_turns_note(&r->turns, RPC_DIR_TO_WORKER, (size_t)n);
        if (r->quiet_open && r->fwd && !uv_is_active((uv_handle_t *)&r->quiet))
            uv_timer_start(&r->quiet, on_quiet, r->fwd->quiet_ms, r->fwd->quiet_ms);
    } else
        r->st->worker_tx += (uint64_t)n;
    if (tp_stream_over_high_water(r->s)) {
        uv_read_stop(st); /* resumed by st_drain */
        r->reading = false;
        r->st->read_pauses++;
    }
}

static void relay_start_reading(relay_t *r)
{
    if (r->reading || r->tcp_eof || r->tcp_closing || !r->connected || !r->s || r->failed) return;
    if (tp_stream_over_high_water(r->s)) return;
    if (uv_read_start((uv_stream_t *)&r->tcp, tcp_alloc, tcp_read) != 0) {
        relay_fail(r);
        return;
    }
    r->reading = true;
}

void tunnel_rpc_opts_default(tunnel_rpc_opts_t *o)
{
    *o = (tunnel_rpc_opts_t){.connect_ms = 5000, .quiet_ms = TUNNEL_RPC_QUIET_MS, .coalesce = true};
}

static relay_t *relay_new(uv_loop_t *loop, bool host, bool coalesce, tunnel_rpc_stats_t *stats)
{
    relay_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->loop = loop;
    r->st = stats ? stats : &r->own_st;
    r->host = host;
    buf_init(&r->stage, STAGE_CAP);
    buf_init(&r->inflight, STAGE_CAP);
    uv_tcp_init(loop, &r->tcp); /* cannot fail for AF_UNSPEC */
    r->tcp.data = r;
    r->tcp_open = true;
    uv_check_init(loop, &r->chk);
    r->chk.data = r;
    r->chk_open = true;
    uv_timer_init(loop, &r->hold_timer);
    r->hold_timer.data = r;
    r->hold_open = true;
    buf_init(&r->hold, HOLD_CAP);
    r->coalesce = coalesce;
    rpc_frame_init(&r->frame, host ? RPC_FRAME_REQUESTS : RPC_FRAME_RESPONSES);
    r->st->links_active++;
    return r;
}

/* ---------------- host side ---------------- */

static void host_try_open(relay_t *r);

static void on_retry(uv_timer_t *t)
{
    host_try_open(t->data);
}

static int host_open_stream(relay_t *r, tp_conn_t *c)
{
    buf_t b;
    buf_init(&b, WIRE_MAX_FRAME + 5);
    json_t *fr = json_pack("{s:i,s:s}", "v", 1, "model", r->fwd->model);
    int rc = fr ? wire_write(&b, WIRE_TUNNEL_RPC, fr) : -ENOMEM;
    json_decref(fr);
    tp_stream_t *s = NULL;
    if (rc == 0) rc = tp_stream_open(c, &relay_cb, r, &s);
    if (rc == 0) {
        r->s = s;
        rc = tp_stream_write(s, b.data, b.len);
    }
    buf_free(&b);
    return rc;
}

static void host_try_open(relay_t *r)
{
    rpc_fwd_t *f = r->fwd;
    if (!f || r->failed || r->s) return;
    tp_conn_t *c = f->get_conn(f->data, f->peer_id);
    if (!r->fwd || r->failed) return; /* get_conn closed the listener */
    if (c) {
        int rc = host_open_stream(r, c);
        if (rc == 0) {
            r->st->links_opened++;
            relay_close_timer(r);
            relay_start_reading(r);
            return;
        }
        if (r->s) { /* opened, then the frame could not be queued */
            r->st->links_failed++;
            relay_fail(r);
            return;
        }
        LOGD("tunnel_rpc", "cannot open a stream to %.12s: %s", f->peer_id, strerror(-rc));
    }
    if (uv_now(r->loop) >= r->deadline) {
        LOGW("tunnel_rpc", "no connection to worker %.12s for %s: rpc link closed", f->peer_id,
             f->model);
        relay_suspect(r, "no connection for its rpc tunnel");
        r->st->links_failed++;
        relay_fail(r);
        return;
    }
    if (!r->timer_open) {
        uv_timer_init(r->loop, &r->timer);
        r->timer.data = r;
        r->timer_open = true;
    }
    uv_timer_start(&r->timer, on_retry, TUNNEL_RPC_RETRY_MS, 0);
}

static void on_connection(uv_stream_t *srv, int status)
{
    rpc_fwd_t *f = srv->data;
    if (status < 0 || f->closing) return;
    relay_t *r = relay_new(f->loop, true, f->opts.coalesce, f->stats);
    if (!r) return; /* stays in the backlog; the next connection retries */
    r->fwd = f;
    r->next = f->links;
    if (f->links) f->links->prev = r;
    f->links = r;
    f->n_links++;
    if (uv_accept(srv, (uv_stream_t *)&r->tcp) != 0) {
        relay_fail(r);
        return;
    }
    if (f->n_links > TUNNEL_RPC_MAX_LINKS) {
        LOGW("tunnel_rpc", "too many rpc links to %.12s: connection closed", f->peer_id);
        r->st->links_failed++;
        relay_fail(r);
        return;
    }
    uv_tcp_nodelay(&r->tcp, 1);
    r->connected = true;
    r->deadline = uv_now(f->loop) + f->opts.connect_ms;
    if (f->suspect && f->quiet_ms) {
        uv_timer_init(f->loop, &r->quiet);
        r->quiet.data = r;
        r->quiet_open = true;
    }
    host_try_open(r);
}

static void on_srv_closed(uv_handle_t *h)
{
    rpc_fwd_t *f = h->data;
    free(f->peer_id);
    free(f->model);
    free(f);
}

int tunnel_rpc_listen(uv_loop_t *loop, const char *peer_id, const char *model,
                      tp_conn_t *(*get_conn)(void *data, const char *peer_id), void *data,
                      const tunnel_rpc_opts_t *opts, rpc_fwd_t **out)
{
    if (!loop || !peer_id || !model || !*model || !get_conn || !out) return -EINVAL;
    rpc_fwd_t *f = calloc(1, sizeof *f);
    if (!f) return -ENOMEM;
    f->loop = loop;
    f->get_conn = get_conn;
    f->data = data;
    if (opts)
        f->opts = *opts;
    else
        tunnel_rpc_opts_default(&f->opts);
    f->peer_id = strdup(peer_id);
    f->model = strdup(model);
    if (!f->peer_id || !f->model) {
        free(f->peer_id);
        free(f->model);
        free(f);
        return -ENOMEM;
    }
    int rc = uv_tcp_init(loop, &f->srv);
    if (rc) {
        free(f->peer_id);
        free(f->model);
        free(f);
        return rc;
    }
    f->srv.data = f;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    rc = uv_tcp_bind(&f->srv, (const struct sockaddr *)&sa, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&f->srv, 128, on_connection);
    if (rc == 0) {
        struct sockaddr_storage ss;
        int len = sizeof ss;
        rc = uv_tcp_getsockname(&f->srv, (struct sockaddr *)&ss, &len);
        if (rc == 0) f->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    if (rc) {
        f->closing = true;
        uv_close((uv_handle_t *)&f->srv, on_srv_closed);
        return rc;
    }
    *out = f;
    return 0;
}

void tunnel_rpc_on_stage(rpc_fwd_t *f, tunnel_rpc_stage_cb cb, void *data)
{
    if (!f) return;
    f->stage = cb;
    f->stage_data = data;
}

void tunnel_rpc_on_suspect(rpc_fwd_t *f, tunnel_rpc_suspect_cb cb)
{
    if (!f) return;
    f->suspect = cb;
    f->quiet_ms = f->opts.quiet_ms;
}

void tunnel_rpc_set_stats(rpc_fwd_t *f, tunnel_rpc_stats_t *stats)
{
    f->stats = stats;
}

int tunnel_rpc_port(const rpc_fwd_t *f)
{
    return f ? f->port : -EINVAL;
}

void tunnel_rpc_close(rpc_fwd_t *f)
{
    if (!f || f->closing) return;
    f->closing = true;
    uv_close((uv_handle_t *)&f->srv, on_srv_closed);
    while (f->links) {
        relay_t *r = f->links;
        relay_unlink(r);
        relay_fail(r); /* r may be freed here */
    }
}

/* ---------------- worker side ---------------- */

static void dead_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    tp_stream_consumed(s, n);
}

static const tp_stream_cb_t dead_cb = {dead_data, NULL, NULL, NULL};

static void refuse(tp_stream_t *s, tunnel_rpc_stats_t *stats)
{
    if (stats) stats->worker_failed++;
    tp_stream_set_cb(s, &dead_cb, NULL); /* the caller's callbacks no longer apply */
    tp_stream_reset(s, 1);
}

static void on_connected(uv_connect_t *req, int status)
{
    relay_t *r = req->data;
    if (status < 0) {
        if (status != UV_ECANCELED) {
            LOGW("tunnel_rpc", "cannot connect to the local rpc-server: %s", uv_strerror(status));
            r->st->worker_failed++;
        }
        relay_fail(r);
        return;
    }
    if (r->failed || r->tcp_closing) return;
    if (!r->s && r->stage.len == 0 && !r->stream_fin) {
        relay_close_tcp(r);
        return;
    }
    r->st->worker_opened++;
    uv_tcp_nodelay(&r->tcp, 1);
    r->connected = true;
    relay_start_reading(r);
    relay_flush(r);
}

void tunnel_rpc_serve(uv_loop_t *loop, tp_stream_t *s, json_t *frame, const uint8_t *rest,
                      size_t rest_len, int rpc_port, const tunnel_rpc_opts_t *opts,
                      tunnel_rpc_stats_t *stats)
{
    json_t *m = json_is_object(frame) ? json_object_get(frame, "model") : NULL;
    if (!json_is_string(m) || json_string_length(m) == 0) {
        LOGD("tunnel_rpc", "TUNNEL_RPC frame without a model: stream reset");
        refuse(s, stats);
        return;
    }
    if (rpc_port <= 0 || rpc_port > 65535) {
        LOGD("tunnel_rpc", "no rpc-server here for %s: stream reset", json_string_value(m));
        refuse(s, stats);
        return;
    }
    relay_t *r = relay_new(loop, false, opts ? opts->coalesce : true, stats);
    if (!r) {
        refuse(s, stats);
        return;
    }
    r->s = s;
    tp_stream_set_cb(s, &relay_cb, r);
    /* already acknowledged by the caller: not counted in stage_ack */
    if (rest_len && buf_append(&r->stage, rest, rest_len) != 0) {
        r->st->worker_failed++;
        relay_fail(r);
        return;
    }
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", rpc_port, &sa);
    r->creq.data = r;
    int rc = uv_tcp_connect(&r->creq, &r->tcp, (const struct sockaddr *)&sa, on_connected);
    if (rc) {
        LOGW("tunnel_rpc", "cannot connect to the local rpc-server: %s", uv_strerror(rc));
        r->st->worker_failed++;
        relay_fail(r);
    }
}

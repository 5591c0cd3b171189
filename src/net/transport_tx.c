/* transport_tx — when a connection writes and what: the flush list, ACK deferral, packet
 * writing, timers, deferred close requests. The connections themselves are in transport.c. */
#include <errno.h>
#include <ngtcp2/ngtcp2.h>
#include <stdio.h>
#include <string.h>

#include "transport_int.h"

/* ---- scheduling ----
 *
 * A connection is flushed (ngtcp2 writes everything it has: stream data, ACKs, credit,
 * retransmissions) in the loop's idle phase after something happened to it, once per loop turn
 * however many events there were. Stream work (data, FIN, reset, opening, closing) goes at
 * once. Datagrams read and bytes consumed only leave acknowledgement-type frames owed; sending
 * those alone right away costs a datagram and, worse, wakes the peer, and in request/response
 * traffic (llama.cpp RPC) the answer follows shortly and can carry them. So, on an admitted
 * connection, they wait for the next stream data, ACK_DEFER_MS at the latest (inside the
 * 25 ms max_ack_delay we advertise, which the peer's loss timers allow for) — unless the peer
 * may be waiting for them: its last datagram was full-sized (it had more to send, so it may
 * be congestion-window limited), DEFER_MAX_BYTES arrived since the last flush, or much of a
 * stream window was consumed — and never while our own stream data waits for the congestion
 * window (what was read may be the ACK that opens it). (ngtcp2 0.12 also answers every
 * ack-eliciting packet that follows one of the peer's ACK-only packets with an immediate ACK, so
 * one ACK-only packet per direction per exchange would otherwise keep itself going.) Datagrams
 * without stream frames (the peer's ACKs) are answered in the same loop turn instead: they
 * rarely leave anything owed, and waking ACK_DEFER_MS later to send nothing costs a wake-up. */

static void idle_cb(uv_idle_t *h);
static void timer_cb(uv_timer_t *t);

void tpi_conn_enqueue(tp_conn_t *c)
{
    if (c->dirty || c->freed) return;
    c->dirty = true;
    c->dirty_next = c->ep->dirty;
    c->ep->dirty = c;
    if (!uv_is_active((uv_handle_t *)&c->ep->idle)) uv_idle_start(&c->ep->idle, idle_cb);
}

void tpi_mark_dirty(tp_conn_t *c)
{
    c->urgent = true;
    tpi_conn_enqueue(c);
}

/* Flush at ACK_DEFER_MS unless something flushes it sooner. */
static void conn_defer(tp_conn_t *c)
{
    if (c->lazy || c->freed || c->closing) return;
    c->lazy = true;
    c->lazy_until = uv_now(c->ep->loop) + ACK_DEFER_MS;
    uv_timer_start(&c->timer, timer_cb, ACK_DEFER_MS, 0);
}

static bool conn_may_defer(const tp_conn_t *c)
{
    /* sendq_head: stream data waits for the congestion window, which what we read may open */
    return c->ready && !c->close_requested && !c->closing && !c->sendq_head && !c->rx_last_full &&
           c->rx_unflushed < DEFER_MAX_BYTES;
}

void tpi_mark_lazy(tp_conn_t *c)
{
    if (c->dirty || c->freed || c->closing) return; /* a flush is coming anyway */
    if (!conn_may_defer(c))
        tpi_mark_dirty(c);
    else
        conn_defer(c);
}

void tpi_dirty_unlink(tp_conn_t *c)
{
    if (!c->dirty) return;
    for (tp_conn_t **pp = &c->ep->dirty; *pp; pp = &(*pp)->dirty_next)
        if (*pp == c) {
            *pp = c->dirty_next;
            break;
        }
    c->dirty = false;
}

static void conn_flush(tp_conn_t *c)
{
    tp_endpoint_t *ep = c->ep;
    c->urgent = false;
    c->lazy = false; /* whatever was owed goes now */
    c->rx_unflushed = 0;
    c->rx_data = false;
    c->credit_unflushed = 0;
    if (c->freed || c->closing || !c->q) return;
    if (ngtcp2_conn_is_in_closing_period(c->q) || ngtcp2_conn_is_in_draining_period(c->q)) return;
    tpi_drain_waiters(c);
    if (c->freed || c->closing || c->close_requested) return;
    tpi_open_pending_streams(c);
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    uint64_t ts = tpi_now_ns();
    size_t npk = 0, budget = 256, spins = 0;
    size_t maxsz = ngtcp2_conn_get_max_tx_udp_payload_size(c->q);
    if (maxsz > MAX_PKT) maxsz = MAX_PKT;
    tp_stream_t *s = NULL;
    while (budget > 0 && spins++ < 4096) {
        if (!s) s = tpi_sendq_pop(c);
        ngtcp2_vec vec[16];
        size_t nv = 0;
        int64_t sid = -1;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
        if (s) {
            sid = s->id;
            sendbuf_vec_t sv[16];
            nv = sendbuf_peek(&s->out, sv, 16);
            size_t left = s->out.unsent;
            for (size_t k = 0; k < nv; k++) {
                vec[k].base = (uint8_t *)sv[k].base;
                vec[k].len = sv[k].len;
                left -= sv[k].len;
            }
            if (s->fin_queued && !s->fin_sent && left == 0) flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
        }
        ngtcp2_ssize ndatalen = -1;
        ngtcp2_ssize nw = ngtcp2_conn_writev_stream(c->q, &ps.path, &pi, ep->sbuf[npk], maxsz,
                                                    &ndatalen, flags, sid, vec, nv, ts);
        if (s && ndatalen >= 0) {
            sendbuf_sent(&s->out, (size_t)ndatalen);
            if ((flags & NGTCP2_WRITE_STREAM_FLAG_FIN) && s->out.unsent == 0) s->fin_sent = true;
        }
        if (nw < 0) {
            if (nw == NGTCP2_ERR_WRITE_MORE) {
                if (s && (s->out.unsent > 0 || (s->fin_queued && !s->fin_sent))) tpi_sendq_push(s);
                s = NULL;
                continue;
            }
            if (nw == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
                if (s) s->blocked = true;
                s = NULL;
                continue;
            }
            if (nw == NGTCP2_ERR_STREAM_SHUT_WR || nw == NGTCP2_ERR_STREAM_NOT_FOUND) {
                s = NULL;
                continue;
            }
            ngtcp2_connection_close_error_set_transport_error_liberr(&c->ccerr, (int)nw, NULL, 0);
            tpi_conn_request_close(c, -EIO, ngtcp2_strerror((int)nw));
            break;
        }
        if (s) {
            if (s->out.unsent > 0 || (s->fin_queued && !s->fin_sent)) tpi_sendq_push(s);
            s = NULL;
        }
        if (nw == 0) break;
        if (ps.path.remote.addrlen &&
            !tpi_same_addr(&c->remote, (const struct sockaddr *)ps.path.remote.addr)) {
            /* a probe of another path (ngtcp2 validating where the peer moved, or the old path):
             * this packet alone, there */
            tpi_send_batch(ep, c, npk);
            if (!tp_addr_virtual(ps.path.remote.addr) &&
                tpi_send_one(ep, ep->sbuf[npk], (size_t)nw, ps.path.remote.addr))
                ep->stats.datagrams_out++;
            npk = 0;
            budget--;
            continue;
        }
        ep->slen[npk++] = (size_t)nw;
        budget--;
        if (npk == BATCH) {
            tpi_send_batch(ep, c, npk);
            npk = 0;
        }
    }
    tpi_send_batch(ep, c, npk);
    if (budget == 0) tpi_mark_dirty(c); /* more to send: continue next loop turn, after reads */
}

/* ---- liveness (transport.h "Liveness") ---- */

static bool conn_has_streams(const tp_conn_t *c)
{
    for (const tp_stream_t *s = c->streams; s; s = s->next)
        if (!s->internal && !s->closed) return true;
    return false;
}

/* Streams opened on an idle connection or the last one closed: switch the keep-alive. */
static void conn_live_update(tp_conn_t *c, uint64_t now)
{
    bool busy = c->ready && c->ep->cfg.live_ms && conn_has_streams(c);
    if (busy == c->busy) return;
    c->busy = busy;
    if (busy) c->busy_since = now; /* silence counts from now: it was idle before */
    uint64_t ka = busy ? c->ep->cfg.live_ms / 4 : c->ep->cfg.keepalive_ms;
    ngtcp2_conn_set_keep_alive_timeout(c->q, ka * NGTCP2_MILLISECONDS);
}

static uint64_t conn_live_deadline(const tp_conn_t *c)
{
    return (c->last_rx_ms > c->busy_since ? c->last_rx_ms : c->busy_since) + c->ep->cfg.live_ms;
}

/* In the timer: true when the connection was closed for the peer's silence. */
static bool conn_live_expired(tp_conn_t *c)
{
    uint64_t now = uv_now(c->ep->loop), live = c->ep->cfg.live_ms;
    conn_live_update(c, now);
    if (!c->busy || now < conn_live_deadline(c)) return false;
    if (now > c->timer_due + live / 4) {
        /* this process stalled, not (only) the peer: its packets may wait in the socket */
        c->busy_since = now - live / 2;
        return false;
    }
    c->close_err = -ETIMEDOUT;
    snprintf(
        c->close_why, sizeof c->close_why,
        "peer silent for %llu ms with streams open (liveness bound %llu ms)",
        (unsigned long long)(now - (c->last_rx_ms > c->busy_since ? c->last_rx_ms : c->busy_since)),
        (unsigned long long)live);
    tpi_conn_close_now(c);
    return true;
}

static void conn_arm_timer(tp_conn_t *c)
{
    if (c->freed || c->closing) return;
    uint64_t n = uv_now(c->ep->loop);
    if (c->lazy) {
        /* ngtcp2's own earlier deadlines (its ACK delay, a time-threshold loss check) wait
         * for the deferred flush too: at most ACK_DEFER_MS */
        c->timer_due = c->lazy_until > n ? c->lazy_until : n;
        uv_timer_start(&c->timer, timer_cb, c->timer_due - n, 0);
        return;
    }
    conn_live_update(c, n); /* before the expiry: the keep-alive is part of it */
    uint64_t exp = ngtcp2_conn_get_expiry(c->q), now = tpi_now_ns();
    uint64_t ms = exp == UINT64_MAX ? 3600000 : exp <= now ? 0 : (exp - now + 999999) / 1000000;
    if (!c->ready) {
        uint64_t dl = c->created_ms + c->ep->cfg.handshake_timeout_ms;
        uint64_t left = dl > n ? dl - n : 0;
        if (left < ms) ms = left;
    }
    if (c->busy) {
        uint64_t dl = conn_live_deadline(c), left = dl > n ? dl - n : 0;
        if (left < ms) ms = left;
    }
    c->timer_due = n + ms;
    uv_timer_start(&c->timer, timer_cb, ms, 0);
}

void tpi_conn_request_close(tp_conn_t *c, int err, const char *why)
{
    if (c->close_requested || c->closing) return;
    c->close_requested = true;
    c->close_err = err;
    snprintf(c->close_why, sizeof c->close_why, "%s", why);
    tpi_mark_dirty(c);
}

/* Work after any event on a connection (never from inside ngtcp2 callbacks). */
static void conn_after(tp_conn_t *c)
{
    if (c->freed) return;
    if (c->close_requested) {
        tpi_conn_close_now(c);
        return;
    }
    conn_flush(c);
    if (c->close_requested) {
        tpi_conn_close_now(c);
        return;
    }
    conn_arm_timer(c);
}

static void idle_cb(uv_idle_t *h)
{
    tp_endpoint_t *ep = h->data;
    uv_idle_stop(h);
    while (ep->dirty) {
        tp_conn_t *c = ep->dirty;
        ep->dirty = c->dirty_next;
        c->dirty = false;
        if (c->urgent || !conn_may_defer(c))
            conn_after(c);
        else if (c->rx_data || c->lazy)
            conn_defer(c); /* only datagrams were read: see "scheduling" */
        else
            conn_after(c); /* no stream frames (the peer's ACKs): whatever they made due
                            * (retransmissions) goes now, an ACK only if ngtcp2 owes one */
    }
}

static void timer_cb(uv_timer_t *t)
{
    tp_conn_t *c = t->data;
    if (c->freed || c->closing) return;
    if (!c->ready && uv_now(c->ep->loop) >= c->created_ms + c->ep->cfg.handshake_timeout_ms) {
        c->close_err = -ETIMEDOUT;
        snprintf(c->close_why, sizeof c->close_why, "%s",
                 c->handshake_done ? "admission timed out" : "handshake timed out");
        tpi_conn_close_now(c);
        return;
    }
    if (conn_live_expired(c)) return;
    int rv = ngtcp2_conn_handle_expiry(c->q, tpi_now_ns());
    if (rv != 0) {
        c->close_err = rv == NGTCP2_ERR_IDLE_CLOSE ? -ETIMEDOUT : -EIO;
        snprintf(c->close_why, sizeof c->close_why, "%s",
                 rv == NGTCP2_ERR_IDLE_CLOSE ? "idle timeout (peer unreachable)"
                                             : ngtcp2_strerror(rv));
        if (rv != NGTCP2_ERR_IDLE_CLOSE)
            ngtcp2_connection_close_error_set_transport_error_liberr(&c->ccerr, rv, NULL, 0);
        tpi_conn_close_now(c);
        return;
    }
    conn_after(c);
}

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport_int.h"

void tpi_sendq_push(tp_stream_t *s)
{
    tp_conn_t *c = s->conn;
    if (s->in_sendq || s->blocked || s->id < 0 || s->closed) return;
    if (s->out.unsent == 0 && !(s->fin_queued && !s->fin_sent)) return;
    s->in_sendq = true;
    s->sq_next = NULL;
    if (c->sendq_tail)
        c->sendq_tail->sq_next = s;
    else
        c->sendq_head = s;
    c->sendq_tail = s;
}

tp_stream_t *tpi_sendq_pop(tp_conn_t *c)
{
    tp_stream_t *s = c->sendq_head;
    if (!s) return NULL;
    c->sendq_head = s->sq_next;
    if (!c->sendq_head) c->sendq_tail = NULL;
    s->in_sendq = false;
    s->sq_next = NULL;
    return s;
}

static void sendq_remove(tp_stream_t *s)
{
    if (!s->in_sendq) return;
    tp_conn_t *c = s->conn;
    tp_stream_t *prev = NULL;
    for (tp_stream_t *x = c->sendq_head; x; prev = x, x = x->sq_next) {
        if (x != s) continue;
        if (prev)
            prev->sq_next = x->sq_next;
        else
            c->sendq_head = x->sq_next;
        if (c->sendq_tail == x) c->sendq_tail = prev;
        break;
    }
    s->in_sendq = false;
}

/* ---- streams ---- */

tp_stream_t *tpi_stream_new(tp_conn_t *c, int64_t id)
{
    tp_stream_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->conn = c;
    s->id = id;
    buf_init(&s->held_data, c->ep->cfg.stream_window + 4096);
    s->next = c->streams;
    if (c->streams) c->streams->prev = s;
    c->streams = s;
    return s;
}

void tpi_stream_free(tp_stream_t *s)
{
    tp_conn_t *c = s->conn;
    sendq_remove(s);
    if (s->prev)
        s->prev->next = s->next;
    else
        c->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    c->queued -= s->out.unacked;
    if (s->pending) c->n_pending--;
    if (c->drain_wait && !c->closing) tpi_mark_dirty(c); /* the bytes freed may end the wait */
    sendbuf_free(&s->out);
    buf_free(&s->held_data);
    if (c->admit == s) c->admit = NULL;
    free(s);
}

/* Close callbacks run once; the struct goes right after. */
void tpi_stream_finish(tp_stream_t *s, int err)
{
    if (!s->closed) {
        s->closed = true;
        if (s->cb && s->cb->on_close && !s->internal && !s->held) s->cb->on_close(s, err);
    }
    tpi_stream_free(s);
}

/* Over the stream's or the connection's high-water mark: the stream then waits for on_drain. */
static bool over_hw(tp_stream_t *s)
{
    tp_conn_t *c = s->conn;
    const tp_config_t *cfg = &c->ep->cfg;
    if (s->out.unacked <= cfg->high_water && c->queued <= cfg->conn_high_water) return false;
    s->above_hw = true;
    return true;
}

int tp_stream_write(tp_stream_t *s, const void *p, size_t n)
{
    tp_conn_t *c = s->conn;
    const tp_config_t *cfg = &c->ep->cfg;
    if (s->closed || s->fin_queued || c->closing) return -EPIPE;
    if (s->out.unacked > cfg->stream_max_buffer || n > cfg->conn_max_buffer - c->queued) {
        c->ep->stats.writes_refused++;
        over_hw(s); /* the writer is told when to try again */
        return s->out.unacked > cfg->stream_max_buffer ? -EAGAIN : -ENOBUFS;
    }
    size_t before = s->out.unacked;
    int rc = sendbuf_append(&s->out, p, n);
    c->queued += s->out.unacked - before;
    if (rc) return rc;
    over_hw(s);
    tpi_sendq_push(s);
    tpi_mark_dirty(c);
    return 0;
}

size_t tp_stream_buffered(const tp_stream_t *s)
{
    return s->out.unacked;
}

bool tp_stream_over_high_water(tp_stream_t *s)
{
    return over_hw(s);
}

size_t tp_conn_buffered(const tp_conn_t *c)
{
    return c->queued;
}

void tpi_stream_check_drain(tp_stream_t *s)
{
    tp_conn_t *c = s->conn;
    const tp_config_t *cfg = &c->ep->cfg;
    if (!s->above_hw || s->closed || s->out.unacked > cfg->high_water / 2) return;
    if (c->queued > cfg->conn_high_water / 2) {
        c->drain_wait = true; /* tpi_drain_waiters, once the connection's queues shrank */
        return;
    }
    s->above_hw = false;
    if (s->cb && s->cb->on_drain && !s->internal) s->cb->on_drain(s);
}

/* From conn_flush (outside ngtcp2's callbacks): the streams held back by the connection's
 * queues, once those fell to half the connection's high-water mark. */
void tpi_drain_waiters(tp_conn_t *c)
{
    if (!c->drain_wait || c->queued > c->ep->cfg.conn_high_water / 2) return;
    c->drain_wait = false;
    for (tp_stream_t *s = c->streams, *n; s; s = n) {
        n = s->next; /* on_drain may write, reset or open (at the head): none frees s or n */
        tpi_stream_check_drain(s);
    }
}

void tp_stream_shutdown(tp_stream_t *s)
{
    if (s->closed || s->fin_queued) return;
    s->fin_queued = true;
    tpi_sendq_push(s);
    tpi_mark_dirty(s->conn);
}

void tp_stream_reset(tp_stream_t *s, uint64_t app_error)
{
    if (s->closed) return;
    if (s->id >= 0 && s->conn->q) {
        ngtcp2_conn_shutdown_stream(s->conn->q, s->id, app_error);
        sendq_remove(s);
        tpi_mark_dirty(s->conn);
    } else {
        s->reset_pending = true; /* never opened: nothing to tell the peer */
        s->conn->open_pending = true;
        tpi_mark_dirty(s->conn);
    }
}

void tp_stream_consumed(tp_stream_t *s, size_t n)
{
    if (s->closed || s->id < 0 || n == 0) return;
    tp_conn_t *c = s->conn;
    ngtcp2_conn_extend_max_stream_offset(c->q, s->id, n);
    ngtcp2_conn_extend_max_offset(c->q, n);
    /* the credit goes with the next packet; at once when enough piled up that the peer may
     * be waiting for it (ngtcp2 sends MAX_STREAM_DATA once half a window is consumed) */
    c->credit_unflushed += n;
    if (c->credit_unflushed >= c->ep->cfg.stream_window / CREDIT_EAGER_DIV)
        tpi_mark_dirty(c);
    else
        tpi_mark_lazy(c);
}

void tp_stream_set_cb(tp_stream_t *s, const tp_stream_cb_t *cb, void *data)
{
    s->cb = cb;
    s->data = data;
}

void *tp_stream_data(const tp_stream_t *s)
{
    return s->data;
}

tp_conn_t *tp_stream_conn(const tp_stream_t *s)
{
    return s->conn;
}

static int stream_open_now(tp_stream_t *s)
{
    int64_t id;
    int rv = ngtcp2_conn_open_bidi_stream(s->conn->q, &id, s);
    if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED) return -EAGAIN;
    if (rv != 0) return -EIO;
    s->id = id;
    if (s->pending) {
        s->pending = false;
        s->conn->n_pending--;
    }
    tpi_sendq_push(s);
    return 0;
}

int tp_stream_open(tp_conn_t *c, const tp_stream_cb_t *cb, void *data, tp_stream_t **out)
{
    if (!c->ready || c->closing || c->close_requested) return -ENOTCONN;
    if (c->n_pending >= c->ep->cfg.max_pending_opens) {
        c->ep->stats.writes_refused++;
        return -EAGAIN; /* the peer's stream limit is reached and enough wait for it */
    }
    tp_stream_t *s = tpi_stream_new(c, -1);
    if (!s) return -ENOMEM;
    s->cb = cb;
    s->data = data;
    int rc = stream_open_now(s);
    if (rc == -EAGAIN) {
        s->pending = true;
        c->n_pending++;
        c->open_pending = true;
    } else if (rc) {
        tpi_stream_free(s);
        return rc;
    }
    tpi_mark_dirty(c);
    *out = s;
    return 0;
}

void tpi_open_pending_streams(tp_conn_t *c)
{
    if (!c->open_pending) return;
    c->open_pending = false;
    for (tp_stream_t *s = c->streams, *n; s; s = n) {
        n = s->next;
        if (s->reset_pending && s->id < 0) {
            tpi_stream_finish(s, -ECONNRESET);
            continue;
        }
        if (s->id >= 0 || s->closed) continue;
        if (stream_open_now(s) == -EAGAIN) {
            c->open_pending = true;
            break;
        }
    }
}

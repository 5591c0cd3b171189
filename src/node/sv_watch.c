/* sv_watch — is a child alive? Health checks while it starts (with a load deadline), then
 * liveness while it is ready: a /health probe every health_interval_ms, answered within
 * health_timeout_ms. A ready child is wedged (killed, then restarted with backoff) when
 *  - idle: /health went unanswered for hang_ms;
 *  - busy (requests in flight): /health went unanswered and its CPU time did not advance for
 *    hang_ms. The progress check spares a child whose HTTP threads are merely slow while it
 *    computes; a child blocked on a slow client still answers /health and is spared too.
 * A /health 200 counts only from the process that holds the port: another process may have
 * taken a port the node picked before the child could bind it.
 *
 * The watch decides (sv_child.c's pure verdicts) and reports READY, TIMED_OUT and WEDGED to
 * supervisor_t.on_verdict: supervisor.c logs them, changes the child's state, kills it. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "platform.h"
#include "supervisor_int.h"

#define HEALTH_POLL_MS 100

struct sv_probe {
    uv_tcp_t tcp;
    uv_timer_t tm;
    uv_connect_t conn;
    uv_write_t w;
    sv_child_t *c;
    unsigned gen;
    bool liveness; /* a ready child's probe (else: waiting for a starting child) */
    char buf[64];
    size_t len;
    bool done;
    int open; /* handles still to close */
    sv_probe_t *next;
};

static void schedule_health(sv_child_t *c);

void svw_init(sv_child_t *c)
{
    uv_timer_init(c->sv->loop, &c->watch);
    c->watch.data = c;
}

static void probe_unlink(sv_probe_t *h)
{
    for (sv_probe_t **pp = &h->c->sv->probes; *pp; pp = &(*pp)->next) {
        if (*pp == h) {
            *pp = h->next;
            return;
        }
    }
}

static void on_probe_closed(uv_handle_t *hd)
{
    sv_probe_t *h = hd->data;
    if (--h->open == 0) free(h);
}

static void report(sv_child_t *c, svw_verdict_t v)
{
    c->sv->on_verdict(c->sv->verdict_data, c, v);
}

static void probe_finish(sv_probe_t *h, bool ok)
{
    if (h->done) return;
    h->done = true;
    probe_unlink(h);
    sv_child_t *c = h->c;
    uv_timer_stop(&h->tm);
    uv_close((uv_handle_t *)&h->tcp, on_probe_closed);
    uv_close((uv_handle_t *)&h->tm, on_probe_closed);
    if (c->generation != h->gen || !sv_running(c)) return;
    if (h->liveness) {
        c->probing = false;
        if (ok && c->state == CHILD_READY) c->last_alive_ms = uv_now(c->sv->loop);
        return;
    }
    /* a check that ends after the process exited must not re-arm c->timer: it now holds the
     * post-mortem, which reports the failed load */
    if (c->state != CHILD_STARTING) return;
    svw_verdict_t v = svw_probe_verdict(ok, ok ? plat_port_held_by(c->pid, c->port) : 1);
    if (v == SVW_PORT_TAKEN) {
        if (!c->port_warned)
            LOGW("supervisor",
                 "port %u answers but is not held by %s (pid %d): another "
                 "process took it; waiting for the child",
                 c->port, sv_prog_name(c), c->pid);
        c->port_warned = true;
    }
    if (v == SVW_READY)
        report(c, SVW_READY);
    else
        schedule_health(c);
}

static void on_probe_timeout(uv_timer_t *t)
{
    probe_finish(t->data, false);
}

static void on_probe_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b)
{
    sv_probe_t *h = hd->data;
    (void)suggested;
    *b = uv_buf_init(h->buf + h->len, (unsigned)(sizeof h->buf - 1 - h->len));
}

static void on_probe_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    sv_probe_t *h = s->data;
    (void)b;
    if (nread < 0) {
        probe_finish(h, false);
        return;
    }
    h->len += (size_t)nread;
    h->buf[h->len] = '\0';
    if (h->len >= 12 || strchr(h->buf, '\n')) {
        bool ok =
            strncmp(h->buf, "HTTP/1.1 200", 12) == 0 || strncmp(h->buf, "HTTP/1.0 200", 12) == 0;
        probe_finish(h, ok);
    }
}

static void on_probe_written(uv_write_t *w, int status)
{
    if (status < 0) probe_finish(w->data, false);
}

static void on_probe_connect(uv_connect_t *cr, int status)
{
    sv_probe_t *h = cr->data;
    if (status < 0 || h->done) {
        probe_finish(h, false);
        return;
    }
    if (h->c->kind == SV_KIND_RPC) { /* it accepts connections: ready */
        probe_finish(h, true);
        return;
    }
    static char req[] = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    uv_buf_t b = uv_buf_init(req, sizeof req - 1);
    h->w.data = h;
    if (uv_write(&h->w, (uv_stream_t *)&h->tcp, &b, 1, on_probe_written) < 0 ||
        uv_read_start((uv_stream_t *)&h->tcp, on_probe_alloc, on_probe_read) < 0)
        probe_finish(h, false);
}

/* One GET /health, failed after health_timeout_ms. */
static void probe(sv_child_t *c, bool liveness)
{
    sv_probe_t *h = calloc(1, sizeof *h);
    if (!h) {
        if (!liveness) schedule_health(c);
        return;
    }
    h->c = c;
    h->gen = c->generation;
    h->liveness = liveness;
    h->open = 2;
    uv_tcp_init(c->sv->loop, &h->tcp);
    uv_timer_init(c->sv->loop, &h->tm);
    h->tcp.data = h->tm.data = h->conn.data = h;
    h->next = c->sv->probes;
    c->sv->probes = h;
    if (liveness) c->probing = true;
    uv_timer_start(&h->tm, on_probe_timeout, c->sv->health_timeout_ms, 0);
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", c->port, &sa);
    if (uv_tcp_connect(&h->conn, &h->tcp, (struct sockaddr *)&sa, on_probe_connect) < 0)
        probe_finish(h, false);
}

void svw_check_now(sv_child_t *c)
{
    if (c->state == CHILD_STARTING && sv_running(c)) probe(c, false);
}

static void on_health_timer(uv_timer_t *t)
{
    svw_check_now(t->data);
}

static void schedule_health(sv_child_t *c)
{
    uv_timer_start(&c->timer, on_health_timer, HEALTH_POLL_MS, 0);
}

/* ---- load deadline ---- */

static void on_load_deadline(uv_timer_t *t)
{
    sv_child_t *c = t->data;
    if (c->state != CHILD_STARTING || !sv_running(c) || c->timed_out) return;
    report(c, SVW_TIMED_OUT); /* killed: the exit reports the failed load */
}

void svw_spawned(sv_child_t *c)
{
    c->timed_out = c->wedged = c->probing = c->port_warned = false;
    uv_timer_start(&c->watch, on_load_deadline, svw_load_limit(c), 0);
    schedule_health(c);
}

/* ---- liveness ---- */

static void on_watch_tick(uv_timer_t *t)
{
    sv_child_t *c = t->data;
    supervisor_t *sv = c->sv;
    if (c->state != CHILD_READY || !sv_running(c) || c->wedged) {
        uv_timer_stop(t);
        return;
    }
    uint64_t ticks;
    svw_tick_t k = {.now_ms = uv_now(sv->loop),
                    .last_alive_ms = c->last_alive_ms,
                    .progress_ms = c->progress_ms,
                    .hang_ms = sv->hang_ms,
                    .busy = c->in_flight > 0};
    k.cpu_advanced =
        k.busy && plat_proc_cpu_ticks(c->pid, &ticks, NULL) == 0 && ticks != c->cpu_ticks;
    if (k.cpu_advanced) c->cpu_ticks = ticks;
    svw_verdict_t v = svw_tick(&k);
    c->progress_ms = k.progress_ms;
    if (v == SVW_WEDGED) {
        uv_timer_stop(t);
        report(c, SVW_WEDGED); /* killed: the exit restarts it with backoff */
        return;
    }
    if (!c->probing) probe(c, true);
}

void svw_ready(sv_child_t *c)
{
    if (c->kind != SV_KIND_LLAMA) {
        uv_timer_stop(&c->watch);
        return; /* an rpc-server is only checked by accepting connections */
    }
    uint64_t now = uv_now(c->sv->loop);
    c->last_alive_ms = c->progress_ms = now;
    if (plat_proc_cpu_ticks(c->pid, &c->cpu_ticks, NULL) != 0) c->cpu_ticks = 0;
    uv_timer_start(&c->watch, on_watch_tick, c->sv->health_interval_ms, c->sv->health_interval_ms);
}

void svw_stop(sv_child_t *c)
{
    uv_timer_stop(&c->watch);
    c->probing = false;
}

void svw_cancel_all(supervisor_t *sv)
{
    while (sv->probes)
        probe_finish(sv->probes, false); /* unlinks it */
}

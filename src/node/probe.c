/* A QUIC handshake + admission with a listed token. */
#include "probe.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport.h"
#include "tunables.h"

typedef struct {
    uv_loop_t *loop;
    tp_endpoint_t *ep;
    identity_t id;
    char peer[ID_HEX_LEN + 1];
    int dials;
    uv_timer_t timer;
    probe_cb_t cb;
    void *data;
    bool answered;
    int rc;
    double rtt;
    char why[160];
} probe_t;

static void on_timer_closed(uv_handle_t *h)
{
    probe_t *p = h->data;
    sodium_memzero(&p->id, sizeof p->id);
    free(p);
}

static void on_ep_closed(void *data)
{
    probe_t *p = data;
    p->cb(p->data, p->rc, p->rtt, p->why);
    uv_close((uv_handle_t *)&p->timer, on_timer_closed);
}

static void close_ep(uv_timer_t *t)
{
    probe_t *p = t->data;
    tp_endpoint_close(p->ep, on_ep_closed, p);
}

/* Record the answer; the callback runs once the endpoint is closed (outside transport
 * callbacks). */
static void answer(probe_t *p, int rc, double rtt, const char *why)
{
    if (p->answered) return;
    p->answered = true;
    p->rc = rc;
    p->rtt = rtt;
    snprintf(p->why, sizeof p->why, "%s", why);
    uv_timer_start(&p->timer, close_ep, 0, 0); /* not inside a transport callback */
}

static void on_ready(tp_endpoint_t *ep, tp_conn_t *c)
{
    probe_t *p = tp_endpoint_data(ep);
    answer(p, 0, tp_conn_rtt_ms(c), "admitted");
}

static void on_closed(tp_endpoint_t *ep, tp_conn_t *c, bool was_ready, int err, const char *why)
{
    probe_t *p = tp_endpoint_data(ep);
    (void)c;
    if (was_ready || p->answered) return;
    if (--p->dials > 0) return; /* another address may still answer */
    char msg[160];
    snprintf(msg, sizeof msg, "%s",
             err == TP_ERR_ADMISSION ? "admission refused (the token's secret is not the "
                                       "mesh's)"
                                     : (why && *why ? why : "no answer"));
    answer(p, err ? err : -ECONNREFUSED, 0, msg);
}

static void on_stream(tp_endpoint_t *ep, tp_conn_t *c, tp_stream_t *s)
{
    (void)ep;
    (void)c;
    tp_stream_reset(s, 0); /* a probe serves nothing */
}

static void on_timeout(uv_timer_t *t)
{
    probe_t *p = t->data;
    answer(p, -ETIMEDOUT, 0, "no admitted connection in time");
}

int probe_start(uv_loop_t *loop, const token_t *t, const tunables_t *tun, uint64_t timeout_ms,
                probe_cb_t cb, void *data)
{
    probe_t *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->loop = loop;
    p->cb = cb;
    p->data = data;
    snprintf(p->peer, sizeof p->peer, "%s", t->id);
    identity_ephemeral(&p->id, (uint64_t)time(NULL) * 1000);
    tp_config_t cfg;
    tunables_tp_config(tun, &cfg);
    cfg.handshake_timeout_ms = timeout_ms;
    cfg.max_conns = TOKEN_MAX_ADDRS;
    tp_callbacks_t tcb = {p, on_ready, on_closed, on_stream};
    int rc = tp_endpoint_new(&p->ep, loop, &p->id, t->secret, NULL, 0, &cfg, &tcb);
    if (rc) {
        sodium_memzero(&p->id, sizeof p->id);
        free(p);
        return rc;
    }
    uv_timer_init(loop, &p->timer);
    p->timer.data = p;
    for (size_t i = 0; i < t->n_addrs; i++) {
        struct sockaddr_storage sa;
        if (addr_parse(t->addrs[i], &sa) != 0) continue;
        if (tp_dial(p->ep, p->peer, (struct sockaddr *)&sa, NULL) == 0) p->dials++;
    }
    if (p->dials == 0) {
        /* answered from the loop, never inside probe_start */
        answer(p, -EHOSTUNREACH, 0, "no dialable address in the token");
        return 0;
    }
    uv_timer_start(&p->timer, on_timeout, timeout_ms + 500, 0);
    return 0;
}

/* mesh_peers — the bottom of the mesh driver (mesh_int.h): the per-peer table and message
 * queues, sending one gossip message per stream, the gossip timer, the clock and randomness.
 * Calls no other mesh file. */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mesh_int.h"

uint64_t mesh_now(mesh_t *m)
{
    return uv_now(m->loop);
}

uint64_t mesh_random(void)
{
    uint64_t r;
    randombytes_buf(&r, sizeof r);
    return r;
}

mpeer_t *mesh_peer_get(mesh_t *m, const char *id, bool create)
{
    for (mpeer_t *p = m->peers; p; p = p->next)
        if (strcmp(p->id, id) == 0) return p;
    if (!create) return NULL;
    mpeer_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    snprintf(p->id, sizeof p->id, "%s", id);
    p->next = m->peers;
    m->peers = p;
    return p;
}

void mesh_queue_drop(mpeer_t *p)
{
    for (size_t i = 0; i < p->nq; i++)
        free(p->q[i].p);
    p->nq = 0;
}

void mesh_peer_forget(mesh_t *m, mpeer_t *p)
{
    if (p->nq || p->dials || p->n_addrs || (m->g && gossip_find(m->g, p->id))) return;
    for (mpeer_t **pp = &m->peers; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            free(p);
            return;
        }
}

static void gossip_timer_cb(uv_timer_t *t);

/* min_ms: 1 when re-armed from the timer's own callback. libuv 1.44 runs a timer started at
 * 0 ms from its callback again in the same timer phase, with the loop time unchanged: a
 * deadline that stayed due would spin the loop without I/O. */
static void gossip_arm_after(mesh_t *m, uint64_t min_ms)
{
    if (!m->g || m->stopping) return;
    uint64_t dl = gossip_next_deadline(m->g), now = mesh_now(m);
    uint64_t ms = dl > now ? dl - now : 0;
    uv_timer_start(&m->gtimer, gossip_timer_cb, ms < min_ms ? min_ms : ms, 0);
}

void mesh_gossip_arm(mesh_t *m)
{
    gossip_arm_after(m, 0);
}

/* ---- outgoing messages: one stream each ---- */

static void out_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    tp_stream_consumed(s, n);
}

static void out_close(tp_stream_t *s, int err)
{
    mesh_t *m = tp_stream_data(s);
    if (m && m->leave_streams > 0) m->leave_streams--;
}

static const tp_stream_cb_t out_cb = {out_data, NULL, NULL, NULL};
static const tp_stream_cb_t leave_cb = {out_data, NULL, NULL, out_close};

/* One message, one stream. When the connection pushes back (too many streams waiting to
 * open, its send queues full) the message is dropped and counted: gossip repeats itself. */
int mesh_send_on(mesh_t *m, tp_conn_t *c, const uint8_t *p, size_t n, bool leaving)
{
    tp_stream_t *s;
    int rc = tp_stream_open(c, leaving ? &leave_cb : &out_cb, leaving ? m : NULL, &s);
    if (rc == 0) {
        if (leaving) m->leave_streams++;
        rc = tp_stream_write(s, p, n);
        if (rc == 0)
            tp_stream_shutdown(s);
        else
            tp_stream_reset(s, 1);
    }
    if (rc) {
        m->msgs_dropped++;
        LOGD("mesh", "gossip message to %.12s dropped: %s", tp_conn_peer_id(c), strerror(-rc));
    }
    return rc;
}

void mesh_flush_queue(mesh_t *m, mpeer_t *p)
{
    tp_conn_t *c = tp_find(m->ep, p->id);
    if (!c) return;
    for (size_t i = 0; i < p->nq; i++) {
        mesh_send_on(m, c, p->q[i].p, p->q[i].n, false);
        free(p->q[i].p);
    }
    p->nq = 0;
}

static void gossip_timer_cb(uv_timer_t *t)
{
    mesh_t *m = t->data;
    if (!m->g || m->stopping) return;
    gossip_tick(m->g, mesh_now(m));
    if (m->after_tick) m->after_tick(m);
    gossip_arm_after(m, 1);
}

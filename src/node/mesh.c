/* mesh — gossip I/O (incoming message streams, the gossip state machine's callbacks), the
 * status document and the life cycle (start, stop); see mesh_int.h for the other files. */
#include "mesh.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gossip.h"
#include "log.h"
#include "portmap.h"
#include "mesh_int.h"
#include "util.h"
#include "tunables.h"
#include "wire.h"

#define LEAVE_WAIT_MS 1500 /* how long PEER_LEAVING may take on shutdown */
#define EAGER_CONNS 32     /* peers dialled as soon as they are up (the rest on demand) */

void mesh_suspect(mesh_t *m, const char *peer_id)
{
    if (!m || !m->g || m->stopping) return;
    gossip_suspect(m->g, peer_id, mesh_now(m));
    mesh_gossip_arm(m);
}

void mesh_on_silent(mesh_t *m, void (*cb)(void *data, const char *peer_id), void *data)
{
    m->on_silent = cb;
    m->silent_data = data;
}

static int msg_stream_type(json_t *msg)
{
    const char *t = json_string_value(json_object_get(msg, "type"));
    if (t && strcmp(t, "peer_down") == 0) return WIRE_PEER_DOWN;
    if (t && strcmp(t, "leaving") == 0) return WIRE_PEER_LEAVING;
    return WIRE_GOSSIP;
}

static void g_send(void *data, const char *to, json_t *msg)
{
    mesh_t *m = data;
    buf_t b;
    buf_init(&b, WIRE_MAX_FRAME + 8);
    json_t *copy = json_copy(msg);
    int type = msg_stream_type(msg);
    int rc = copy ? wire_write(&b, type, copy) : -ENOMEM;
    json_decref(copy);
    if (rc) {
        LOGW("mesh", "cannot encode a gossip message: %s", strerror(-rc));
        buf_free(&b);
        return;
    }
    tp_conn_t *c = tp_find(m->ep, to);
    if (c) {
        mesh_send_on(m, c, (uint8_t *)b.data, b.len, type == WIRE_PEER_LEAVING);
        buf_free(&b);
        return;
    }
    mpeer_t *p = mesh_peer_get(m, to, true);
    if (!p) {
        buf_free(&b);
        return;
    }
    if (p->nq == MAX_QUEUE) { /* drop the oldest: gossip repeats itself */
        free(p->q[0].p);
        memmove(p->q, p->q + 1, sizeof p->q[0] * (MAX_QUEUE - 1));
        p->nq--;
    }
    p->q[p->nq].p = (uint8_t *)b.data; /* ownership moves to the queue */
    p->q[p->nq].n = b.len;
    p->nq++;
    mesh_dial(m, p);
}

void mesh_views_sync(mesh_t *m)
{
    size_t n = m->g ? gossip_peer_count(m->g) : 0, k = 0;
    view_set_in_t *in = n ? calloc(n, sizeof *in) : NULL;
    if (n && !in) return; /* no memory: the views stay as they were until the next event */
    for (size_t i = 0; i < n; i++) {
        const gossip_peer_t *p = gossip_peer_at(m->g, i);
        if (p->state == GOSSIP_ALIVE && p->ann)
            in[k++] = (view_set_in_t){p->id, p->ann, p->inc, p->seq};
    }
    view_set_sync(&m->views, in, k);
    free(in);
}

size_t mesh_peers(mesh_t *m, const view_node_t **out)
{
    *out = m->views.v;
    return m->views.n;
}

uint64_t mesh_peers_gen(const mesh_t *m)
{
    return m->views.gen;
}

uint64_t mesh_view_decodes(const mesh_t *m)
{
    return m->views.decodes;
}

static void g_event(void *data, gossip_event_t ev, const gossip_peer_t *peer)
{
    mesh_t *m = data;
    const char *addr = "";
    json_t *addrs = peer->ann ? json_object_get(peer->ann, "addrs") : NULL;
    if (json_is_array(addrs) && json_array_size(addrs) > 0)
        addr = json_string_value(json_array_get(addrs, 0));
    switch (ev) {
    case GOSSIP_EV_UP: {
        LOGI("mesh", "peer %.12s is up (%s, incarnation %llu)", peer->id, addr ? addr : "",
             (unsigned long long)peer->inc);
        /* connect now, not when gossip or a request first needs it: behind NATs a connection
         * takes a punch or a relay (seconds), which a request should not wait for. Bounded: a
         * large mesh connects to the rest on demand. */
        mpeer_t *p =
            m->n_ready < EAGER_CONNS && !m->passive && !m->stopping && !tp_find(m->ep, peer->id)
                ? mesh_peer_get(m, peer->id, true)
                : NULL;
        if (p) mesh_dial(m, p);
        break;
    }
    case GOSSIP_EV_UPDATED: {
        LOGD("mesh", "peer %.12s updated its announcement (seq %llu)", peer->id,
             (unsigned long long)peer->seq);
        /* new addresses (a port mapping, a reflexive address): an unreachable peer is dialled
         * again now rather than after its backoff */
        char *js = addrs ? json_dumps(addrs, JSON_COMPACT) : NULL;
        uint64_t sig = 0;
        if (js)
            crypto_generichash((uint8_t *)&sig, sizeof sig, (const uint8_t *)js, strlen(js), NULL,
                               0);
        free(js);
        mpeer_t *p = mesh_peer_get(m, peer->id, false);
        if (p && sig != p->addrs_sig) {
            bool first = p->addrs_sig == 0;
            p->addrs_sig = sig;
            if (!first && !m->passive && !m->stopping && !tp_find(m->ep, peer->id) &&
                p->dials == 0) {
                p->next_dial = 0;
                mesh_dial(m, p);
            }
        }
        break;
    }
    case GOSSIP_EV_DEAD: {
        LOGW("mesh", "peer %.12s is dead (no heartbeat, probe failed)", peer->id);
        tp_conn_t *c = tp_find(m->ep, peer->id);
        if (c) tp_conn_close(c, 0, "declared dead");
        break;
    }
    case GOSSIP_EV_LEFT:
        LOGI("mesh", "peer %.12s left the mesh", peer->id);
        break;
    case GOSSIP_EV_FORGOTTEN: { /* its entry goes too, unless it is connected (a passive) */
        LOGD("mesh", "departed peer %.12s forgotten", peer->id);
        mpeer_t *p = mesh_peer_get(m, peer->id, false);
        if (p && !tp_find(m->ep, peer->id) && p->dials == 0) mesh_peer_forget(m, p);
        break;
    }
    }
    if (ev == GOSSIP_EV_UP || ev == GOSSIP_EV_UPDATED) mesh_turn_permit_ann(m, peer->ann);
    mesh_views_sync(m); /* the one decode of a changed announcement */
    if (!m->stopping && m->o.on_peers_changed) m->o.on_peers_changed(m->o.data);
    if (ev == GOSSIP_EV_DEAD || ev == GOSSIP_EV_LEFT) mesh_peer_gone(m);
}

static uint64_t g_random(void *data)
{
    return mesh_random();
}

static void g_sign(void *data, const uint8_t *msg, size_t len, uint8_t sig[64])
{
    identity_sign(((mesh_t *)data)->id.sk, msg, len, sig);
}

static uint64_t g_wall(void *data)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A peer speaking with a higher incarnation than before has restarted: the connections of its
 * former process are dead, yet look alive until the QUIC idle timeout (a restart on the same
 * port ends with a Stateless Reset only those we dialled: a dialler's first connection id has
 * no reset token) and tp_find may prefer them, so answers and probes would go
 * nowhere and the new incarnation would be declared dead. Close them before the message is
 * handled, so that its answers take the connection it came on. */
static void peer_heard(mesh_t *m, const char *id, json_t *f, tp_conn_t *on)
{
    json_t *j = json_object_get(f, "inc");
    mpeer_t *p;
    tp_conn_t *c;
    if (!json_is_integer(j) || json_integer_value(j) <= 0 || !(p = mesh_peer_get(m, id, true)))
        return;
    if ((uint64_t)json_integer_value(j) <= p->heard_inc) return;
    p->heard_inc = (uint64_t)json_integer_value(j);
    while ((c = tp_find(m->ep, id)) && c != on)
        tp_conn_close(c, 0, "the peer restarted");
}

typedef struct {
    mesh_t *m;
    wire_reader_t rd;
    char from[ID_HEX_LEN + 1];
    bool done;
} in_ctx_t;

static void in_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    in_ctx_t *x = tp_stream_data(s);
    mesh_t *m = x->m;
    tp_stream_consumed(s, n);
    while (n > 0 && !x->done) {
        json_t *f = NULL;
        ssize_t used = wire_read(&x->rd, p, n, &f);
        if (used < 0) {
            m->msgs_bad++;
            LOGD("mesh", "malformed frame from %.12s (%s): stream closed", x->from,
                 strerror((int)-used));
            x->done = true;
            tp_stream_reset(s, 1);
            return;
        }
        p += used;
        n -= (size_t)used;
        if (!f) continue;
        int type = x->rd.type;
        if ((type == WIRE_GOSSIP || type == WIRE_PEER_DOWN || type == WIRE_PEER_LEAVING) &&
            m->passive) {
            m->msgs_bad++; /* a passive node takes no part in gossip */
            LOGD("mesh", "gossip from %.12s ignored: this node is passive", x->from);
        } else if (type == WIRE_GOSSIP || type == WIRE_PEER_DOWN || type == WIRE_PEER_LEAVING) {
            m->msgs_in++;
            if (m->g && !m->stopping) peer_heard(m, x->from, f, tp_stream_conn(s));
            if (m->g && !m->stopping && gossip_receive(m->g, x->from, f, mesh_now(m)) != 0) {
                m->msgs_bad++;
                LOGD("mesh", "invalid gossip message from %.12s ignored", x->from);
            }
            mesh_gossip_arm(m);
        } else if (type == WIRE_NAT) {
            m->msgs_in++;
            if (!m->stopping) mesh_nat_receive(m, tp_stream_conn(s), x->from, f);
        } else if (!m->stopping && m->o.on_stream &&
                   m->o.on_stream(m->o.stream_data, s, type, x->from, f, p, n)) {
            if (tp_stream_data(s) != x) { /* taken over: the handler's callbacks from now on */
                wire_reader_free(&x->rd);
                free(x);
                json_decref(f);
                return;
            }
        } else {
            LOGD("mesh", "%s stream from %.12s not supported here: reset", wire_type_name(type),
                 x->from);
            x->done = true;
            json_decref(f);
            tp_stream_reset(s, 2);
            return;
        }
        json_decref(f);
        x->done = true; /* one message per stream */
    }
}

static void in_fin(tp_stream_t *s)
{
    tp_stream_shutdown(s);
}

static void in_close(tp_stream_t *s, int err)
{
    in_ctx_t *x = tp_stream_data(s);
    wire_reader_free(&x->rd);
    free(x);
}

static const tp_stream_cb_t in_cb = {in_data, in_fin, NULL, in_close};

static void on_stream(tp_endpoint_t *ep, tp_conn_t *c, tp_stream_t *s)
{
    mesh_t *m = tp_endpoint_data(ep);
    in_ctx_t *x = calloc(1, sizeof *x);
    if (!x) return; /* no callbacks set: the transport resets it */
    x->m = m;
    wire_reader_init(&x->rd, 1);
    snprintf(x->from, sizeof x->from, "%s", tp_conn_peer_id(c));
    tp_stream_set_cb(s, &in_cb, x);
}

gossip_t *mesh_gossip_new(mesh_t *m, uint64_t incarnation)
{
    gossip_cfg_t gcfg;
    gossip_cfg_default(&gcfg, m->o.heartbeat_ms);
    /* gossip's own probe time (from the heartbeat) unless MESH_LLM_PROBE_MS is given */
    if (m->o.tun && tunables_given(m->o.tun, &m->o.tun->probe_ms))
        gcfg.probe_ms = m->o.tun->probe_ms;
    gossip_io_t io = {m, g_send, g_event, g_random, g_sign, g_wall};
    json_t *ann = mesh_announcement(m);
    return ann ? gossip_new(m->id.id, incarnation, ann, &gcfg, &io, mesh_now(m)) : NULL;
}

/* The router mapped the QUIC port (or the mapping went): a candidate address. A mapping whose
 * external address is private (the router is behind another NAT) is not announced. */
static void portmap_changed(void *data, const char *external, const char *via, bool private_ext)
{
    mesh_t *m = data;
    if (m->stopping) return;
    if (external && private_ext)
        LOGI("mesh",
             "the router mapped the QUIC port to %s (%s), a private address: it is behind "
             "another NAT, so the mapping is not announced",
             external, via);
    mesh_set_mapped_addr(m, external && !private_ext ? external : NULL);
}

static void handle_closed(uv_handle_t *h);

static void portmap_stopped(void *data)
{
    mesh_t *m = data;
    m->pm = NULL;
    handle_closed((uv_handle_t *)&m->gtimer);
}

static void nat_timer_cb(uv_timer_t *t)
{
    mesh_t *m = t->data;
    if (!m->stopping) mesh_nat_tick(m);
}

/* After each gossip tick: re-announce for RTTs, try relayed peers for a direct path. */
static void after_tick(mesh_t *m)
{
    mesh_rtt_check(m);
    mesh_nat_tick(m);
}

/* The mesh this joiner created in an earlier run (or names with --mesh-name): the merge rule's
 * candidate when its join target turns out to be in another mesh. Never creates one. */
static bool load_own_mesh(mesh_t *m, const char *mesh_name)
{
    char path[4200], err[160];
    snprintf(path, sizeof path, "%s/mesh-id", m->home);
    if (!(mesh_name && *mesh_name) && access(path, F_OK) != 0) return false;
    if (mesh_name && *mesh_name && m->o.name_key) {
        identity_named_mesh(&m->id, m->o.name_key, mesh_name, &m->own);
        return true;
    }
    return identity_own_mesh(&m->id, m->home, mesh_name, &m->own, err, sizeof err) == 0;
}

int mesh_start(mesh_t **out, uv_loop_t *loop, const mesh_opts_t *opts, char *err, size_t errlen)
{
    mesh_t *m = calloc(1, sizeof *m);
    if (!m) return -ENOMEM;
    m->loop = loop;
    m->o = *opts;
    m->after_tick = after_tick;
    int rc;
    snprintf(m->home, sizeof m->home, "%s", opts->home);
    uv_update_time(loop);
    rc = 0;
    if (opts->ephemeral)
        identity_ephemeral(&m->id, (uint64_t)time(NULL) * 1000);
    else
        rc = identity_load(&m->id, m->home, (uint64_t)time(NULL) * 1000, err, errlen);
    if (rc) goto fail;
    m->passive = opts->passive;
    if (opts->n_joins > 0) {
        m->n_joins = opts->n_joins < MESH_MAX_JOIN ? opts->n_joins : MESH_MAX_JOIN;
        memcpy(m->joins, opts->joins, sizeof m->joins[0] * m->n_joins);
        snprintf(m->cred.mesh_id, sizeof m->cred.mesh_id, "%s", m->joins[0].mesh_id);
        memcpy(m->cred.secret, m->joins[0].secret, 32);
        for (size_t i = 0; i < m->n_joins; i++)
            if (strcmp(m->joins[i].id, m->id.id) == 0) {
                snprintf(err, errlen, "--join #%zu is this node's own token", i + 1);
                rc = -EINVAL;
                goto fail;
            }
        m->has_own = !opts->ephemeral && load_own_mesh(m, opts->mesh_name);
    } else {
        if (opts->mesh_name && *opts->mesh_name && opts->name_key)
            identity_named_mesh(&m->id, opts->name_key, opts->mesh_name, &m->cred);
        else
            rc = identity_own_mesh(&m->id, m->home, opts->mesh_name, &m->cred, err, errlen);
        if (rc) goto fail;
    }
    tp_callbacks_t cb = {m, mesh_on_conn_ready, mesh_on_conn_closed, on_stream};
    tp_config_t tcfg;
    tunables_tp_config(opts->tun, &tcfg);
    mesh_timing_init(&m->tm, opts->heartbeat_ms ? opts->heartbeat_ms : 60000,
                     tcfg.handshake_timeout_ms);
    tcfg.handshake_timeout_ms = m->tm.dial_timeout;
    rc = tp_endpoint_new(&m->ep, loop, &m->id, m->cred.secret, opts->bind_host, opts->bind_port,
                         &tcfg, &cb);
    if (rc) {
        if (rc == UV_EADDRINUSE)
            snprintf(err, errlen,
                     "UDP port %d is already in use; choose another with --bind-port N "
                     "(0 = any free)",
                     opts->bind_port);
        else
            snprintf(err, errlen, "cannot open the QUIC endpoint on UDP port %d: %s",
                     opts->bind_port, rc < 0 && rc > -4096 ? uv_strerror(rc) : "TLS setup failed");
        m->ep = NULL;
        goto fail;
    }
    tp_endpoint_set_mesh_id(m->ep, m->cred.mesh_id);
    mesh_nat_addrs(m);
    rc = mesh_token_encode(m);
    if (rc) {
        snprintf(err, errlen, "cannot encode the invite token");
        goto fail_ep;
    }
    m->g = mesh_gossip_new(m, m->id.incarnation);
    if (!m->g) {
        snprintf(err, errlen, "cannot start gossip (out of memory)");
        rc = -ENOMEM;
        goto fail_ep;
    }
    uv_timer_init(loop, &m->gtimer);
    uv_timer_init(loop, &m->jtimer);
    uv_timer_init(loop, &m->stimer);
    uv_timer_init(loop, &m->ntimer);
    m->gtimer.data = m->jtimer.data = m->stimer.data = m->ntimer.data = m;
    m->handles_open = 4;
    mesh_gossip_arm(m);
    /* NAT steps are due on their own clock: a failed punch becomes a relay request after
     * PUNCH_WAIT_MS even when nothing else is sent to that peer; interfaces are rescanned */
    uv_timer_start(&m->ntimer, nat_timer_cb, NAT_TICK_MS, NAT_TICK_MS);
    LOGI("mesh", "node %.16s… in mesh %s, QUIC on UDP %d (incarnation %llu)", m->id.id,
         m->cred.mesh_id, tp_endpoint_port(m->ep), (unsigned long long)m->id.incarnation);
    if (m->n_joins && !m->passive) mesh_join_start(m);
    if (m->o.portmap && !m->passive) {
        portmap_opts_t po = {
            .port = (uint16_t)tp_endpoint_port(m->ep), .on_change = portmap_changed, .data = m};
        if (portmap_start(&m->pm, loop, &po) != 0) m->pm = NULL;
    }
    *out = m;
    return 0;
fail_ep:
    tp_endpoint_close(m->ep, (void (*)(void *))free, m);
    return rc;
fail:
    free(m);
    return rc;
}

tp_conn_t *mesh_conn(mesh_t *m, const char *peer_id)
{
    tp_conn_t *c = tp_find(m->ep, peer_id);
    if (c || m->stopping) return c;
    mpeer_t *p = mesh_peer_get(m, peer_id, true);
    if (p) mesh_dial(m, p);
    return NULL;
}

static const char *state_name(gossip_state_t s);

size_t mesh_peer_states(mesh_t *m, mesh_peer_state_t *out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < gossip_peer_count(m->g) && n < max; i++) {
        const gossip_peer_t *p = gossip_peer_at(m->g, i);
        tp_conn_t *c = tp_find(m->ep, p->id);
        snprintf(out[n].id, sizeof out[n].id, "%s", p->id);
        out[n].state = state_name(p->state);
        out[n].rtt_ms = c ? tp_conn_rtt_ms(c) : -1.0;
        json_t *path = c ? mesh_nat_peer_json(m, p->id) : NULL;
        const char *ps = json_string_value(json_object_get(path, "path"));
        snprintf(out[n].path, sizeof out[n].path, "%s", ps ? ps : "");
        json_decref(path);
        n++;
    }
    return n;
}

const char *mesh_node_id(const mesh_t *m)
{
    return m->id.id;
}
const char *mesh_id(const mesh_t *m)
{
    return m->cred.mesh_id;
}
const char *mesh_token(const mesh_t *m)
{
    return m->token;
}
int mesh_quic_port(const mesh_t *m)
{
    return tp_endpoint_port(m->ep);
}

static const char *state_name(gossip_state_t s)
{
    return s == GOSSIP_ALIVE ? "alive" : s == GOSSIP_DEAD ? "dead" : "left";
}

static json_t *ann_get(const gossip_peer_t *p, const char *k, json_t *def)
{
    json_t *v = p->ann ? json_object_get(p->ann, k) : NULL;
    if (v) {
        json_decref(def);
        return json_incref(v);
    }
    return def;
}

/* What gossip refused of what members said (gossip.h, Trust). */
static void gossip_trust_stats(json_t *o, const gossip_stats_t *gs)
{
    json_object_set_new(o, "gossip_bad_sig", json_integer((json_int_t)gs->bad_sig));
    json_object_set_new(o, "gossip_unproven", json_integer((json_int_t)gs->unproven));
    json_object_set_new(o, "gossip_future", json_integer((json_int_t)gs->future));
}

/* rtt_ms entries as {"<id>": ms} (view.h). */
static json_t *rtt_json(const rtt_entry_t *e, size_t n)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < n; i++)
        json_object_set_new(o, e[i].id, json_integer(e[i].ms));
    return o;
}

json_t *mesh_status(mesh_t *m)
{
    json_t *peers = json_array();
    uint64_t now = mesh_now(m);
    double wall = (double)time(NULL);
    for (size_t i = 0; i < gossip_peer_count(m->g); i++) {
        const gossip_peer_t *p = gossip_peer_at(m->g, i);
        tp_conn_t *c = tp_find(m->ep, p->id);
        json_t *last_seen =
            p->last_direct
                ? json_integer((json_int_t)(wall - (double)(now - p->last_direct) / 1000.0))
                : json_null();
        json_t *o = json_pack("{s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:I,s:o,s:b}", "id", p->id, "state",
                              state_name(p->state), "role", ann_get(p, "role", json_null()),
                              "addrs", ann_get(p, "addrs", json_array()), "vram_bytes",
                              ann_get(p, "vram_bytes", json_integer(0)), "serving",
                              ann_get(p, "serving", json_array()), "available_models",
                              ann_get(p, "available_models", json_array()), "rtt_ms",
                              c ? json_real(tp_conn_rtt_ms(c)) : json_null(), "incarnation",
                              (json_int_t)p->inc, "last_seen", last_seen, "connected", c != NULL);
        if (o) { /* where its models come from, what it downloads (view.h decodes them) */
            json_object_set_new(o, "model_source", ann_get(p, "model_source", json_object()));
            json_object_set_new(o, "downloading", ann_get(p, "downloading", json_array()));
            const view_node_t *v = view_set_find(&m->views, p->id); /* its rtt_ms, decoded */
            json_object_set_new(o, "peer_rtt_ms", v ? rtt_json(v->rtt, v->n_rtt) : json_object());
            /* its accelerators, as decoded (bounded, checked) */
            json_object_set_new(o, "devices",
                                v ? view_devices_json(v->devices, v->n_devices) : json_array());
            /* how it is reached: direct, mapped, punched, relayed (via) */
            json_t *path = mesh_nat_peer_json(m, p->id);
            if (path) json_object_update(o, path);
            json_decref(path);
        }
        if (o) json_array_append_new(peers, o);
    }
    const gossip_stats_t *gs = gossip_stats(m->g);
    const tp_stats_t *ts = tp_stats(m->ep);
    json_t *out = json_pack(
        "{s:{s:s,s:s,s:s,s:i,s:i,s:i,s:s,s:s,s:I,s:I,s:b},s:o,s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I,"
        "s:I,s:I}}",
        "node", "id", m->id.id, "mesh_id", m->cred.mesh_id, "role",
        m->o.role ? m->o.role : "worker", "api_port", m->o.api_port, "console_port",
        m->o.console_port, "quic_port", tp_endpoint_port(m->ep), "token", m->token, "version",
        MESH_VERSION, "incarnation", (json_int_t)m->id.incarnation, "vram_bytes",
        (json_int_t)m->o.vram_bytes, "joined", m->n_joins == 0 || m->joined, "peers", peers,
        "stats", "gossip_sent", (json_int_t)gs->sent, "gossip_received", (json_int_t)gs->received,
        "gossip_rejected", (json_int_t)(gs->rejected + m->msgs_bad), "datagrams_in",
        (json_int_t)ts->datagrams_in, "datagrams_dropped", (json_int_t)ts->dropped, "conns_refused",
        (json_int_t)ts->conns_refused, "quic_retries", (json_int_t)ts->retries_sent,
        "quic_bad_tokens", (json_int_t)ts->bad_tokens, "gossip_dropped",
        (json_int_t)m->msgs_dropped);
    json_object_set_new(json_object_get(out, "node"), "passive", json_boolean(m->passive));
    json_object_set_new(json_object_get(out, "node"), "nat", mesh_nat_status(m));
    mesh_turn_status(m, json_object_get(json_object_get(out, "node"), "nat"));
    json_object_set_new(json_object_get(out, "node"), "peer_rtt_ms",
                        rtt_json(m->rtt_ann, m->n_rtt_ann)); /* as last announced */
    size_t entries = 0; /* per-peer state held (gossip members, dial targets, open passives) */
    for (mpeer_t *p = m->peers; p; p = p->next)
        entries++;
    json_object_set_new(json_object_get(out, "stats"), "quic_migrations",
                        json_integer((json_int_t)ts->migrations)); /* peers followed elsewhere */
    json_object_set_new(json_object_get(out, "stats"), "peer_entries",
                        json_integer((json_int_t)entries));
    json_object_set_new(json_object_get(out, "stats"), "view_decodes",
                        json_integer((json_int_t)m->views.decodes));
    gossip_trust_stats(json_object_get(out, "stats"), gs);
    return out;
}

/* ---- shutdown ---- */

static void handle_closed(uv_handle_t *h)
{
    mesh_t *m = h->data;
    if (--m->handles_open > 0) return;
    void (*cb)(void *) = m->stop_cb;
    void *d = m->stop_data;
    for (mpeer_t *p = m->peers, *n; p; p = n) {
        n = p->next;
        mesh_queue_drop(p);
        free(p);
    }
    gossip_free(m->g);
    view_set_free(&m->views);
    sodium_memzero(&m->id, sizeof m->id);
    sodium_memzero(&m->cred, sizeof m->cred);
    sodium_memzero(&m->own, sizeof m->own);
    sodium_memzero(m->joins, sizeof m->joins);
    free(m);
    if (cb) cb(d);
}

static void ep_closed(void *data)
{
    handle_closed((uv_handle_t *)&((mesh_t *)data)->gtimer);
}

static void finish_stop(mesh_t *m)
{
    uv_timer_stop(&m->stimer);
    m->handles_open++;                      /* the endpoint */
    tp_endpoint_close(m->ep, ep_closed, m); /* CONNECTION_CLOSEs go out, over TURN too */
    mesh_servers_stop(m); /* then the TURN allocation's deletion, the socket still open */
    if (m->pm) {          /* the mapping is deleted (bounded: about 2 s) */
        m->handles_open++;
        portmap_stop(m->pm, portmap_stopped, m);
    }
    uv_close((uv_handle_t *)&m->gtimer, handle_closed);
    uv_close((uv_handle_t *)&m->jtimer, handle_closed);
    uv_close((uv_handle_t *)&m->stimer, handle_closed);
    uv_close((uv_handle_t *)&m->ntimer, handle_closed);
}

static void stop_poll_cb(uv_timer_t *t)
{
    mesh_t *m = t->data;
    if (m->leave_streams == 0 || mesh_now(m) >= m->leave_deadline) finish_stop(m);
}

void mesh_stop(mesh_t *m, void (*cb)(void *data), void *data)
{
    if (m->stopping) return;
    m->stop_cb = cb;
    m->stop_data = data;
    gossip_leave(m->g, mesh_now(m));
    m->stopping = true;
    uv_timer_stop(&m->gtimer);
    uv_timer_stop(&m->jtimer);
    if (m->leave_streams == 0) {
        finish_stop(m);
        return;
    }
    LOGI("mesh", "telling %d peer(s) we are leaving", m->leave_streams);
    m->leave_deadline = mesh_now(m) + LEAVE_WAIT_MS;
    uv_timer_start(&m->stimer, stop_poll_cb, 20, 20);
}

/* mesh_join — dialling peers, joining through invite tokens, the merge rule for two meshes that
 * join each other, and the retry policy (the bounds are listed in mesh_int.h).
 *
 * Join state changes happen in timer callbacks (jtimer), never inside gossip's send callback,
 * so a dial that fails at once cannot re-enter the gossip state machine.
 *
 * Merge rule. A node whose join target refuses its admission proof (the target uses another
 * mesh secret) and which is alone (no ready connection, no live peer) tries the next larger
 * mesh it holds credentials for — the mesh it created itself (an earlier run's, or the one
 * --mesh-name names) or another token's — and dials the target again with it; it never tries a
 * smaller one. So when P (creator of mesh Mp) joins Q's token and Q (creator of Mq) joins P's
 * at the same time, each is first refused by the other; the one in the smaller mesh moves to
 * the larger one it created itself, the other stays: both end in max(Mp, Mq). A merge rewrites
 * the token's mesh, so later rounds go straight to the winner.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "mesh_int.h"
#include "util.h"

/* ---- pure decisions ---- */

static uint64_t clamp_u64(uint64_t v, uint64_t lo, uint64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void mesh_timing_init(mesh_timing_t *t, uint64_t heartbeat_ms, uint64_t handshake_ms)
{
    uint64_t d = heartbeat_ms * 2 > 1000 ? heartbeat_ms * 2 : 1000;
    t->dial_timeout = handshake_ms && handshake_ms < d ? handshake_ms : d;
    t->dial_base = clamp_u64(heartbeat_ms / 8, 100, 1000);
    t->dial_cap = clamp_u64(heartbeat_ms / 2, 500, 30000);
    t->join_timeout = 2 * t->dial_timeout + 1000;
}

uint64_t mesh_retry_delay(unsigned attempt, uint64_t base, uint64_t cap, uint64_t rnd)
{
    uint64_t d = backoff_ms(attempt, base, cap);
    return d - rnd % (d / 2 + 1);
}

int mesh_id_cmp(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}

int mesh_merge_next(const char *cur, const char *const *ids, size_t n)
{
    int best = -1;
    for (size_t i = 0; i < n; i++)
        if (mesh_id_cmp(ids[i], cur) > 0 && (best < 0 || mesh_id_cmp(ids[i], ids[best]) < 0))
            best = (int)i;
    return best;
}

/* ---- state helpers ---- */

static bool is_join_target(const mesh_t *m, const char *id)
{
    return m->joining && m->join_idx < m->n_joins && strcmp(m->joins[m->join_idx].id, id) == 0;
}

static bool alone(mesh_t *m)
{
    return m->n_ready == 0 && gossip_alive_count(m->g) == 0;
}

/* Repeated failures are logged at rounds 0, 1, 2, 4, 8…: a node waiting for a peer that is
 * gone for good does not fill its log. */
static bool loud(unsigned round)
{
    return (round & (round - 1)) == 0;
}

static void join_try(mesh_t *m);
static void join_failed_cb(uv_timer_t *t);

/* ---- dialling ---- */

static size_t peer_addrs(mesh_t *m, mpeer_t *p, char out[][TOKEN_ADDR_MAX], size_t max)
{
    size_t n = 0;
    const gossip_peer_t *gp = gossip_find(m->g, p->id);
    json_t *arr = gp && gp->ann ? json_object_get(gp->ann, "addrs") : NULL;
    size_t i;
    json_t *v;
    if (json_is_array(arr)) {
        json_array_foreach(arr, i, v)
        {
            const char *s = json_string_value(v);
            if (s && strlen(s) < TOKEN_ADDR_MAX && n < max)
                snprintf(out[n++], TOKEN_ADDR_MAX, "%s", s);
        }
    }
    for (i = 0; i < p->n_addrs && n < max; i++) {
        bool dup = false;
        for (size_t k = 0; k < n; k++)
            dup |= strcmp(out[k], p->addrs[i]) == 0;
        if (!dup) snprintf(out[n++], TOKEN_ADDR_MAX, "%s", p->addrs[i]);
    }
    return n;
}

static void dial_failed(mesh_t *m, mpeer_t *p, int err, const char *why)
{
    uint64_t now = mesh_now(m);
    p->fails++;
    p->next_dial =
        now + mesh_retry_delay(p->fails - 1, m->tm.dial_base, m->tm.dial_cap, mesh_random());
    snprintf(p->last_err, sizeof p->last_err, "%s", why);
    mesh_queue_drop(p);
    LOGD("mesh", "cannot reach %.12s: %s (retry in %llu ms)", p->id, why,
         (unsigned long long)(p->next_dial - now));
    if (m->g) gossip_unreachable(m->g, p->id, now);
    mesh_nat_unreachable(m, p); /* behind a NAT: a hole punch, then a relay */
    if (is_join_target(m, p->id) && !m->stopping) {
        /* decided in the join timer: we may be inside gossip's send callback here */
        m->join_refused = err == TP_ERR_ADMISSION;
        snprintf(m->join_err, sizeof m->join_err, "%s", why);
        uv_timer_start(&m->jtimer, join_failed_cb, 0, 0);
    }
    mesh_gossip_arm(m);
}

void mesh_dial(mesh_t *m, mpeer_t *p)
{
    if (m->stopping) return;
    if (tp_find(m->ep, p->id)) {
        mesh_flush_queue(m, p);
        return;
    }
    uint64_t now = mesh_now(m);
    if (p->dials > 0) {
        if (now < p->dial_deadline) return; /* its end (ready or closed) is on the way */
        LOGW("mesh", "dial to %.12s not over after %llu ms: forgotten", p->id,
             (unsigned long long)m->tm.dial_timeout);
        p->dials = 0;
    }
    if (now < p->next_dial) {
        mesh_queue_drop(p); /* backing off: gossip retries by itself */
        return;
    }
    char addrs[MAX_ADDRS][TOKEN_ADDR_MAX];
    size_t n = peer_addrs(m, p, addrs, MAX_ADDRS);
    int started = 0;
    for (size_t i = 0; i < n; i++) {
        struct sockaddr_storage sa;
        if (addr_parse(addrs[i], &sa) != 0) continue; /* names are not dialled */
        /* -EAFNOSUPPORT: an IPv6 address and an IPv4-only socket */
        if (tp_dial(m->ep, p->id, (struct sockaddr *)&sa, NULL) == 0) started++;
    }
    p->dials = started;
    p->dial_deadline = now + m->tm.dial_timeout + 1000;
    if (started) mesh_nat_dialing(m, p);
    if (started == 0)
        dial_failed(m, p, -EHOSTUNREACH, n ? "no dialable address" : "no known address");
}

/* ---- joining ---- */

static void join_done(mesh_t *m)
{
    token_t *t = &m->joins[m->join_idx];
    if (strcmp(t->mesh_id, m->cred.mesh_id) != 0) {
        LOGI("mesh",
             "meshes merged: %.12s is in mesh %s (token #%zu said %s); the token leads "
             "there from now on",
             t->id, m->cred.mesh_id, m->join_idx + 1, t->mesh_id);
        snprintf(t->mesh_id, sizeof t->mesh_id, "%s", m->cred.mesh_id);
        memcpy(t->secret, m->cred.secret, 32);
    }
    m->joining = false;
    m->joined = true;
    m->join_rounds = 0;
    m->join_err[0] = '\0';
    uv_timer_stop(&m->jtimer);
    LOGI("mesh", "joined mesh %s through %.12s", m->cred.mesh_id, t->id);
    identity_save_last_mesh(m->loop, m->home, m->cred.mesh_id);
}

static void join_round_cb(uv_timer_t *t)
{
    mesh_t *m = t->data;
    m->join_idx = 0;
    join_try(m);
}

static void join_timeout_cb(uv_timer_t *t)
{
    mesh_t *m = t->data;
    if (!m->joining) return;
    m->join_refused = false;
    snprintf(m->join_err, sizeof m->join_err, "no answer within %llu ms",
             (unsigned long long)m->tm.join_timeout);
    join_failed_cb(t);
}

/* Send the join (hello) to the current token's node, with the join watchdog armed. */
static void join_send(mesh_t *m)
{
    const token_t *t = &m->joins[m->join_idx];
    mpeer_t *p = mesh_peer_get(m, t->id, true);
    if (p) {
        p->n_addrs = t->n_addrs < MAX_ADDRS ? t->n_addrs : MAX_ADDRS;
        for (size_t i = 0; i < p->n_addrs; i++)
            snprintf(p->addrs[i], TOKEN_ADDR_MAX, "%s", t->addrs[i]);
        p->next_dial = 0;
    }
    uv_timer_start(&m->jtimer, join_timeout_cb, m->tm.join_timeout, 0);
    gossip_join(m->g, t->id, mesh_now(m)); /* dials; a failure comes back through jtimer */
    mesh_gossip_arm(m);
    if (m->joining && tp_find(m->ep, t->id)) join_done(m); /* already connected */
}

static void take_token_mesh(mesh_t *m, const token_t *t)
{
    mesh_cred_t c;
    snprintf(c.mesh_id, sizeof c.mesh_id, "%s", t->mesh_id);
    memcpy(c.secret, t->secret, 32);
    mesh_set_cred(m, &c);
    sodium_memzero(&c, sizeof c);
}

static void join_try(mesh_t *m)
{
    if (m->stopping || m->joined || m->passive || m->join_idx >= m->n_joins) return;
    const token_t *t = &m->joins[m->join_idx];
    if (alone(m)) take_token_mesh(m, t); /* nothing to lose */
    m->joining = true;
    if (loud(m->join_rounds))
        LOGI("mesh", "joining mesh %s through %.12s (%s%s)", m->cred.mesh_id, t->id, t->addrs[0],
             t->n_addrs > 1 ? ", …" : "");
    join_send(m);
}

/* The merge rule's step (see the top of this file): true when a larger mesh is being tried. */
static bool merge_step(mesh_t *m)
{
    if (!alone(m)) return false;
    mesh_cred_t cand[MESH_MAX_JOIN + 1];
    const char *ids[MESH_MAX_JOIN + 1];
    size_t n = 0;
    if (m->has_own) cand[n++] = m->own;
    for (size_t i = 0; i < m->n_joins; i++) {
        snprintf(cand[n].mesh_id, sizeof cand[n].mesh_id, "%s", m->joins[i].mesh_id);
        memcpy(cand[n++].secret, m->joins[i].secret, 32);
    }
    for (size_t i = 0; i < n; i++)
        ids[i] = cand[i].mesh_id;
    int k = mesh_merge_next(m->cred.mesh_id, ids, n);
    if (k >= 0) {
        LOGI("mesh",
             "%.12s is in another mesh than %s; trying mesh %s, the next larger one this "
             "node holds (merge rule: the larger mesh wins)",
             m->joins[m->join_idx].id, m->cred.mesh_id, cand[k].mesh_id);
        mesh_set_cred(m, &cand[k]);
    }
    sodium_memzero(cand, sizeof cand);
    if (k < 0) return false;
    join_send(m);
    return true;
}

static void join_failed_cb(uv_timer_t *t)
{
    mesh_t *m = t->data;
    if (!m->joining || m->stopping) return;
    if (m->join_refused && merge_step(m)) return;
    if (loud(m->join_rounds))
        LOGW("mesh", "could not join through token #%zu (%.12s): %s", m->join_idx + 1,
             m->joins[m->join_idx].id, m->join_err);
    m->join_idx++;
    if (m->join_idx < m->n_joins) {
        join_try(m);
        return;
    }
    m->joining = false;
    uint64_t wait =
        mesh_retry_delay(m->join_rounds, m->tm.dial_base, m->tm.dial_cap, mesh_random());
    char why[320];
    snprintf(why, sizeof why, "%.319s", m->join_err);
    snprintf(m->join_err, sizeof m->join_err,
             "could not join through %.12s: %s (attempt %u; trying again, or POST /api/join with "
             "another token)",
             m->joins[m->n_joins - 1].id, why, m->join_rounds + 1);
    if (loud(m->join_rounds))
        LOGW("mesh", "no --join token worked; serving alone, trying again in %.1f s: %s",
             (double)wait / 1000, m->join_err);
    m->join_rounds++;
    uv_timer_start(&m->jtimer, join_round_cb, wait, 0);
}

bool mesh_joined(const mesh_t *m)
{
    return m->n_joins == 0 || m->joined;
}

const char *mesh_join_error(const mesh_t *m)
{
    return m->joined ? "" : m->join_err;
}

/* Stuck: no gossip peer (a connection being closed after a refusal does not count). */
bool mesh_join_stuck(const mesh_t *m)
{
    return m->n_joins > 0 && !m->joined && !m->passive && gossip_alive_count(m->g) == 0;
}

int mesh_join_replace(mesh_t *m, const token_t *t)
{
    if (!mesh_join_stuck(m) || m->stopping) return -EBUSY;
    LOGI("mesh", "joining through %.12s (mesh %s) instead of the %zu token(s) that reached no one",
         t->id, t->mesh_id, m->n_joins);
    sodium_memzero(m->joins, sizeof m->joins);
    m->joins[0] = *t;
    m->n_joins = 1;
    /* nothing to lose: at once (join_try may not see the node alone while a refused
     * connection closes) */
    take_token_mesh(m, t);
    m->join_rounds = 0;
    m->join_err[0] = '\0';
    m->joining = false;
    uv_timer_stop(&m->jtimer);
    mpeer_t *p = mesh_peer_get(m, t->id, false);
    if (p) { /* the same node at a corrected address: dial it now, not after the old dial */
        p->dials = 0;
        p->fails = 0;
    }
    mesh_join_start(m);
    return 0;
}

void mesh_join_start(mesh_t *m)
{
    m->join_idx = 0;
    join_try(m);
}

/* Alone again (every peer dead or gone): back to the invite tokens, so that the mesh heals
 * when the peers come back (restarted on their address, or after a partition). */
void mesh_peer_gone(mesh_t *m)
{
    if (!m->n_joins || m->stopping || m->passive || gossip_alive_count(m->g) > 0 || m->joining ||
        uv_is_active((uv_handle_t *)&m->jtimer))
        return;
    uint64_t wait =
        mesh_retry_delay(m->join_rounds++, m->tm.dial_base, m->tm.dial_cap, mesh_random());
    m->joined = false;
    LOGW("mesh", "no live peer left; trying the --join tokens again in %.1f s",
         (double)wait / 1000);
    uv_timer_start(&m->jtimer, join_round_cb, wait, 0);
}

/* ---- transport callbacks ---- */

/* A peer that proved it holds our secret says which mesh it is in (with its admission proof).
 * Another id than ours means a token whose mesh id was altered (issue 33 item 8): the dialler
 * closes the connection before any gossip goes over it (any dial, not only the join's: the
 * gossip layer retries its hello by itself; the acceptor leaves it to the dialler, whose join
 * error then names both ids), so this node never reports, saves or hands out
 * the wrong id, and the join target's refusal is the join's error. A peer of an older version
 * says nothing. */
static bool mesh_id_forged(mesh_t *m, tp_conn_t *c, mpeer_t *p)
{
    const char *theirs = tp_conn_peer_mesh(c);
    if (!tp_conn_outbound(c) || !theirs[0] || strcmp(theirs, m->cred.mesh_id) == 0) return false;
    mesh_queue_drop(p); /* nothing is sent to it: no gossip with a mesh under a wrong id */
    tp_conn_close(c, 0, "mesh id mismatch");
    if (!is_join_target(m, tp_conn_peer_id(c))) {
        LOGW("mesh",
             "refused %.12s: it holds this mesh's secret but says mesh %s, not %s (a "
             "token with an altered mesh id)",
             tp_conn_peer_id(c), theirs, m->cred.mesh_id);
        return true;
    }
    char why[320];
    snprintf(why, sizeof why,
             "the token says mesh %.64s, but %.12s (holding its secret) is in mesh %.64s: the "
             "token was altered; ask a member for its token",
             m->cred.mesh_id, tp_conn_peer_id(c), theirs);
    LOGE("mesh", "join refused: %s", why);
    if (!m->stopping) {
        m->join_refused = false;
        snprintf(m->join_err, sizeof m->join_err, "%s", why);
        uv_timer_start(&m->jtimer, join_failed_cb, 0, 0);
    }
    return true;
}

void mesh_on_conn_ready(tp_endpoint_t *ep, tp_conn_t *c)
{
    mesh_t *m = tp_endpoint_data(ep);
    const char *id = tp_conn_peer_id(c);
    m->n_ready++;
    mpeer_t *p = mesh_peer_get(m, id, true);
    if (!p) return;
    if (tp_conn_outbound(c) && p->dials > 0) p->dials--; /* this dial is over */
    if (mesh_id_forged(m, c, p)) return;
    mesh_nat_conn_ready(m, c, p);
    p->fails = 0;
    p->next_dial = 0;
    mesh_flush_queue(m, p);
    if (is_join_target(m, id)) {
        join_done(m);
    } else if (p->lost && !m->joining && !m->stopping) {
        /* back after a lost connection: if it restarted, its answer (sync) tells us now */
        gossip_join(m->g, id, mesh_now(m));
        mesh_gossip_arm(m);
    }
    p->lost = false;
}

void mesh_on_conn_closed(tp_endpoint_t *ep, tp_conn_t *c, bool was_ready, int err, const char *why)
{
    mesh_t *m = tp_endpoint_data(ep);
    const char *id = tp_conn_peer_id(c);
    if (was_ready && m->n_ready > 0) m->n_ready--;
    if (!id[0]) {
        if (err == -EACCES) LOGW("mesh", "refused an inbound connection: %s", why);
        return;
    }
    mpeer_t *p = mesh_peer_get(m, id, false);
    mesh_nat_conn_closed(m, c, p);
    if (!was_ready && tp_conn_outbound(c) && p) {
        if (p->dials > 0) p->dials--;
        if (err == -EACCES || err == TP_ERR_ADMISSION)
            LOGW("mesh", "connection to %.12s refused: %s", id, why);
        if (p->dials == 0 && !tp_find(ep, id)) dial_failed(m, p, err, why);
        return;
    }
    if (!was_ready) return;
    LOGD("mesh", "connection with %.12s closed: %s", id, why);
    if (err == -ETIMEDOUT && !m->stopping) {
        /* silent while we waited on it (or idle past the QUIC idle timeout): a failed probe;
         * the other members confirm with their own (gossip_silent) */
        LOGI("mesh", "peer %.12s unreachable: %s", id, why);
        if (m->g) {
            gossip_silent(m->g, id, mesh_now(m));
            mesh_gossip_arm(m);
        }
        if (m->on_silent) m->on_silent(m->silent_data, id);
    }
    const gossip_peer_t *gp = m->g ? gossip_find(m->g, id) : NULL;
    if (p && !m->stopping && gp && gp->state == GOSSIP_ALIVE && !tp_find(ep, id)) {
        /* e.g. a Stateless Reset: the peer restarted on its address. Dial it again now. */
        LOGI("mesh", "connection with %.12s lost (%s); dialling it again", id, why);
        p->lost = true;
        mesh_dial(m, p);
    }
    /* an admitted passive node (client, standby) is no gossip member: its entry goes with its
     * connection, so thousands of check-ins leave nothing behind */
    if (p && !gp && !tp_find(ep, id)) mesh_peer_forget(m, p);
}

/* gossip — mesh membership state machine (see gossip.h for the model and the message set). */
#include "gossip_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* --- Peer table --- */

size_t gsp_lower_bound(const gossip_t *g, const char *id)
{
    size_t lo = 0, hi = g->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(g->v[mid]->pub.id, id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct peer *gsp_find(const gossip_t *g, const char *id)
{
    size_t i = gsp_lower_bound(g, id);
    return i < g->n && !strcmp(g->v[i]->pub.id, id) ? g->v[i] : NULL;
}

void gsp_remove_at(gossip_t *g, size_t i)
{
    json_decref(g->v[i]->pub.ann);
    free(g->v[i]);
    memmove(&g->v[i], &g->v[i + 1], (g->n - i - 1) * sizeof g->v[0]);
    g->n--;
}

/* A new record (state ALIVE, no announcement yet): NULL when full of live peers or out of
 * memory. When the table is full, the oldest dead record goes. */
struct peer *gsp_insert(gossip_t *g, const char *id, uint64_t now)
{
    struct peer *p;
    size_t i;
    if (g->n >= GOSSIP_MAX_PEERS) {
        size_t old = g->n;
        for (i = 0; i < g->n; i++)
            if (g->v[i]->pub.state != GOSSIP_ALIVE &&
                (old == g->n || g->v[i]->pub.changed_at < g->v[old]->pub.changed_at))
                old = i;
        if (old == g->n) return NULL;
        gsp_remove_at(g, old);
    }
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct peer **v = realloc(g->v, cap * sizeof *v);
        if (!v) return NULL;
        g->v = v;
        g->cap = cap;
    }
    if (!(p = calloc(1, sizeof *p))) return NULL;
    memcpy(p->pub.id, id, GOSSIP_ID_LEN + 1);
    p->pub.changed_at = now;
    p->watch_since = now;
    i = gsp_lower_bound(g, id);
    memmove(&g->v[i + 1], &g->v[i], (g->n - i) * sizeof g->v[0]);
    g->v[i] = p;
    g->n++;
    return p;
}

bool gsp_newer(uint64_t inc, uint64_t seq, uint64_t inc2, uint64_t seq2)
{
    return inc > inc2 || (inc == inc2 && seq > seq2);
}

static bool recent_record(const gossip_t *g, const struct peer *p, uint64_t now)
{
    return p->pub.state != GOSSIP_ALIVE && p->pub.ann &&
           now - p->pub.changed_at < (uint64_t)g->cfg.dead_retry_beats * g->cfg.heartbeat_ms;
}

/* Alive peers next to self on the ring (ids sorted, wrapping): dir > 0 successors, dir < 0
 * predecessors; `skip` (optional) is left out. */
static size_t ring(const gossip_t *g, int dir, const char *skip, struct peer **out, size_t want)
{
    size_t k = 0, s, pos = gsp_lower_bound(g, g->id);
    for (s = 0; s < g->n && k < want; s++) {
        struct peer *p = g->v[dir > 0 ? (pos + s) % g->n : (pos + g->n - 1 - s) % g->n];
        if (p->pub.state == GOSSIP_ALIVE && !(skip && !strcmp(p->pub.id, skip))) out[k++] = p;
    }
    return k;
}

void gsp_emit(gossip_t *g, gossip_event_t ev, struct peer *p)
{
    if (g->io.event) g->io.event(g->io.data, ev, &p->pub);
}

/* --- Sending --- */

json_t *gsp_new_msg(const gossip_t *g, int type)
{
    return json_pack("{s:i, s:s, s:I}", "v", 1, "type", gmsg_type_names[type], "inc",
                     (json_int_t)g->inc);
}

static void send_to(gossip_t *g, const char *to, json_t *m)
{
    const char *type = json_string_value(json_object_get(m, "type"));
    g->st.sent++;
    if (!strcmp(type, "hb") || !strcmp(type, "ack") || !strcmp(type, "update")) g->st.sent_hb++;
    g->io.send(g->io.data, to, m);
}

static void send_live(gossip_t *g, json_t *m)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->v[i]->pub.state == GOSSIP_ALIVE) send_to(g, g->v[i]->pub.id, m);
}

void gsp_send_free(gossip_t *g, const char *to, json_t *m)
{
    if (m) send_to(g, to, m);
    json_decref(m);
}

json_t *gsp_dead_rec(const char *id, uint64_t inc, gossip_state_t st)
{
    return json_pack("[s, I, s]", id, (json_int_t)inc, st == GOSSIP_LEFT ? "left" : "dead");
}

/* Our record of a peer that is not alive; a leave keeps the leaver's signature. */
json_t *gsp_peer_rec(const struct peer *p)
{
    if (p->pub.state == GOSSIP_LEFT && p->leave_sig[0])
        return json_pack("[s, I, s, s]", p->pub.id, (json_int_t)p->pub.inc, "left", p->leave_sig);
    return gsp_dead_rec(p->pub.id, p->pub.inc, p->pub.state);
}

json_t *gsp_recent_dead(const gossip_t *g, uint64_t now)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < g->n; i++)
        if (recent_record(g, g->v[i], now)) json_array_append_new(a, gsp_peer_rec(g->v[i]));
    return a;
}

void gsp_send_hello(gossip_t *g, const char *to, bool join)
{
    json_t *m = gsp_new_msg(g, M_HELLO);
    if (m) json_object_set(m, "ann", g->ann);
    if (m && join) json_object_set_new(m, "join", json_true());
    gsp_send_free(g, to, m);
}

static void send_ping(gossip_t *g, struct peer *p)
{
    json_t *m = gsp_new_msg(g, M_PING);
    /* a probe caused by a third party's claim shows the claim, so the peer refutes it at once */
    if (m && p->probe_reason == PR_CLAIM)
        json_object_set_new(m, "dead",
                            json_pack("[o]", gsp_dead_rec(p->pub.id, p->pub.inc, GOSSIP_DEAD)));
    gsp_send_free(g, p->pub.id, m);
}

/* A claim about p (dead at its incarnation, or its signed leave) to our two ring successors, for
 * delivery redundancy. */
void gsp_forward_claim(gossip_t *g, struct peer *p, const char *informer)
{
    struct peer *succ[2];
    size_t k = ring(g, 1, p->pub.id, succ, 2);
    json_t *m = gsp_new_msg(g, M_PEER_DOWN);
    if (m)
        json_object_set_new(
            m, "dead",
            json_pack("[o]", p->pub.state == GOSSIP_LEFT
                                 ? gsp_peer_rec(p)
                                 : gsp_dead_rec(p->pub.id, p->pub.inc, GOSSIP_DEAD)));
    for (size_t i = 0; m && i < k; i++)
        if (!informer || strcmp(succ[i]->pub.id, informer)) send_to(g, succ[i]->pub.id, m);
    json_decref(m);
}

/* --- State changes --- */

/* Install a new own announcement (a shallow copy of base with id/incarnation/seq), signed. */
static int set_self(gossip_t *g, json_t *base)
{
    json_t *a = json_copy(base);
    if (!a || json_object_set_new(a, "id", json_string(g->id)) < 0 ||
        json_object_set_new(a, "incarnation", json_integer((json_int_t)g->inc)) < 0 ||
        json_object_set_new(a, "seq", json_integer((json_int_t)g->seq)) < 0 ||
        gmsg_ann_sign(a, g->io.sign, g->io.data) < 0) {
        json_decref(a);
        return -ENOMEM;
    }
    json_decref(g->ann);
    g->ann = a;
    return 0;
}

/* We are considered dead (or superseded): bump the incarnation, tell every live peer and the
 * informer. The update carries our recent dead records so that an informer we hold dead learns
 * it and refutes in turn (partition healing). */
void gsp_refute(gossip_t *g, const char *informer, uint64_t min_inc, uint64_t now)
{
    json_t *m;
    struct peer *p;
    if (g->inc >= INT64_MAX - 1) return;
    g->inc = g->inc + 1 > min_inc ? g->inc + 1 : min_inc;
    g->seq = 0;
    set_self(g, g->ann);
    g->st.refutations++;
    m = gsp_new_msg(g, M_UPDATE);
    if (!m) return;
    json_object_set_new(m, "anns", json_pack("[O]", g->ann));
    json_object_set_new(m, "dead", gsp_recent_dead(g, now));
    send_live(g, m);
    if (informer && (!(p = gsp_find(g, informer)) || p->pub.state != GOSSIP_ALIVE))
        send_to(g, informer, m);
    json_decref(m);
}

void gsp_start_probe(gossip_t *g, struct peer *p, int reason, uint64_t now)
{
    p->pub.probing = true;
    p->probe_start = now;
    p->ping2_sent = p->unreachable = false;
    p->probe_reason = reason;
    g->st.probes++;
    send_ping(g, p);
}

void gsp_mark(gossip_t *g, struct peer *p, gossip_state_t st, uint64_t inc, uint64_t now)
{
    bool was_alive = p->pub.state == GOSSIP_ALIVE;
    p->pub.state = st;
    p->pub.inc = inc;
    p->pub.probing = false;
    p->pub.changed_at = now;
    if (was_alive) gsp_emit(g, st == GOSSIP_LEFT ? GOSSIP_EV_LEFT : GOSSIP_EV_DEAD, p);
}

int gsp_set_alive(gossip_t *g, struct peer *p, json_t *ann, uint64_t inc, uint64_t seq,
                  uint64_t now)
{
    json_t *copy = json_deep_copy(ann);
    if (!copy) return -ENOMEM;
    if (p->pub.state != GOSSIP_ALIVE || inc != p->pub.inc) {
        /* (re)born: failure detection starts afresh; nothing of the old incarnation counts */
        p->watch_since = now;
        p->ping2_sent = p->unreachable = false;
        p->probe_reason = 0;
        p->leave_sig[0] = '\0';
    }
    json_decref(p->pub.ann);
    p->pub.ann = copy;
    p->pub.inc = inc;
    p->pub.seq = seq;
    p->pub.state = GOSSIP_ALIVE;
    p->pub.probing = false;
    p->pub.changed_at = now;
    return 0;
}

/* Dead after a failed probe; a monitor (ring successor) tells every live peer. */
static void probe_failed(gossip_t *g, struct peer *p, uint64_t now)
{
    json_t *m = p->probe_reason == PR_SUSPECT ? gsp_new_msg(g, M_PEER_DOWN) : NULL;
    gsp_mark(g, p, GOSSIP_DEAD, p->pub.inc, now);
    if (!m) return;
    json_object_set_new(m, "dead",
                        json_pack("[o]", gsp_dead_rec(p->pub.id, p->pub.inc, GOSSIP_DEAD)));
    send_live(g, m);
    json_decref(m);
}

uint64_t gsp_inc_limit(const gossip_t *g)
{
    uint64_t w = g->io.wall_ms(g->io.data);
    return w > (uint64_t)INT64_MAX - GOSSIP_MAX_AHEAD_MS ? (uint64_t)INT64_MAX
                                                         : w + GOSSIP_MAX_AHEAD_MS;
}

static uint64_t suspect_at(const gossip_t *g, const struct peer *p)
{
    uint64_t base = p->pub.last_direct > p->watch_since ? p->pub.last_direct : p->watch_since;
    return base + g->cfg.heartbeat_ms * 9 / 4;
}

/* Adjacent failures: when a monitored predecessor goes silent, the ones just beyond our two may
 * have gone with it, and their own monitors may be the ones that died — so they are pinged now
 * too, unless we heard from them lately (a failed probe declares them dead as a monitor would).
 * Costs nothing in steady state: it happens only when a predecessor is suspected. */
static void probe_beyond(gossip_t *g, uint64_t now)
{
    struct peer *pp[4];
    size_t k = ring(g, -1, NULL, pp, 4);
    for (size_t i = 2; i < k; i++)
        if (!pp[i]->pub.probing && now >= suspect_at(g, pp[i]))
            gsp_start_probe(g, pp[i], PR_SUSPECT, now);
}

static void update_preds(gossip_t *g, uint64_t now)
{
    struct peer *pp[2];
    size_t k = ring(g, -1, NULL, pp, 2), i;
    bool lost = false; /* a former predecessor is no longer alive: it died or left */
    for (i = 0; i < 2; i++) {
        const struct peer *o = g->pred[i][0] ? gsp_find(g, g->pred[i]) : NULL;
        lost |= o && o->pub.state != GOSSIP_ALIVE;
    }
    for (i = 0; i < k; i++)
        if (strcmp(pp[i]->pub.id, g->pred[0]) && strcmp(pp[i]->pub.id, g->pred[1])) {
            /* a newcomer is watched from now on; one that moves up because a predecessor died
             * is probed at once if we have not heard from it lately (its monitors may have
             * died in the same failure) */
            if (lost && !pp[i]->pub.probing && now >= suspect_at(g, pp[i]))
                gsp_start_probe(g, pp[i], PR_SUSPECT, now);
            else
                pp[i]->watch_since = now;
        }
    for (i = 0; i < 2; i++)
        memcpy(g->pred[i], i < k ? pp[i]->pub.id : "", i < k ? GOSSIP_ID_LEN + 1 : 1);
}

static void heartbeat(gossip_t *g, uint64_t now)
{
    struct peer *targets[MAX_FANOUT], **cand = malloc((g->n + 1) * sizeof *cand);
    size_t k, nc = 0, i, fanout = g->cfg.fanout < MAX_FANOUT ? g->cfg.fanout : MAX_FANOUT;
    json_t *hb = gsp_new_msg(g, M_HB), *digest = json_array();

    if (!cand || !hb || !digest) goto out;
    k = ring(g, 1, NULL, targets, fanout < 2 ? fanout : 2);
    for (i = 0; i < g->n; i++) {
        struct peer *p = g->v[i];
        if (p->pub.state == GOSSIP_ALIVE && !(k > 0 && p == targets[0]) &&
            !(k > 1 && p == targets[1]))
            cand[nc++] = p;
    }
    for (; k < fanout && nc; k++) { /* random others, without repetition */
        size_t j = (size_t)(g->io.random(g->io.data) % nc);
        targets[k] = cand[j];
        cand[j] = cand[--nc];
    }
    json_array_append_new(digest,
                          json_pack("[s, I, I]", g->id, (json_int_t)g->inc, (json_int_t)g->seq));
    for (i = 0; i < g->n; i++)
        if (g->v[i]->pub.state == GOSSIP_ALIVE)
            json_array_append_new(digest, json_pack("[s, I, I]", g->v[i]->pub.id,
                                                    (json_int_t)g->v[i]->pub.inc,
                                                    (json_int_t)g->v[i]->pub.seq));
    json_object_set(hb, "digest", digest);
    json_object_set_new(hb, "dead", gsp_recent_dead(g, now));
    for (i = 0; i < k; i++)
        send_to(g, targets[i]->pub.id, hb);
    /* and one peer declared dead recently: this heals partitions */
    for (i = nc = 0; i < g->n; i++)
        if (g->v[i]->pub.state == GOSSIP_DEAD && recent_record(g, g->v[i], now))
            cand[nc++] = g->v[i];
    if (nc) send_to(g, cand[g->io.random(g->io.data) % nc]->pub.id, hb);
    if (g->join_id[0]) { /* until the join target is known alive: the join may have got lost */
        struct peer *j = gsp_find(g, g->join_id);
        if (j && j->pub.state == GOSSIP_ALIVE)
            g->join_id[0] = '\0';
        else
            gsp_send_hello(g, g->join_id, true);
    }
out:
    free(cand);
    json_decref(digest);
    json_decref(hb);
}

/* Remove a record, then tell the I/O layer (the record is gone when it hears it). */
static void forget_at(gossip_t *g, size_t i)
{
    gossip_peer_t pub = g->v[i]->pub;
    pub.ann = NULL;
    gsp_remove_at(g, i);
    if (g->io.event) g->io.event(g->io.data, GOSSIP_EV_FORGOTTEN, &pub);
}

/* Forget departed records older than twice their gossip window (2 x dead_retry_beats
 * heartbeats: stale gossip about them has long stopped, so forgetting cannot resurrect them),
 * then the oldest ones beyond GOSSIP_MAX_DEPARTED. Called at the end of the entry points only (no
 * caller holds a record pointer then). */
void gsp_prune_departed(gossip_t *g, uint64_t now)
{
    uint64_t ttl = 2 * (uint64_t)g->cfg.dead_retry_beats * g->cfg.heartbeat_ms;
    size_t departed = 0, i;
    for (i = g->n; i-- > 0;) {
        struct peer *p = g->v[i];
        if (p->pub.state == GOSSIP_ALIVE) continue;
        if (now - p->pub.changed_at >= ttl && now >= p->pub.changed_at) {
            forget_at(g, i);
        } else {
            departed++;
        }
    }
    while (departed > GOSSIP_MAX_DEPARTED) {
        size_t old = g->n;
        for (i = 0; i < g->n; i++)
            if (g->v[i]->pub.state != GOSSIP_ALIVE &&
                (old == g->n || g->v[i]->pub.changed_at < g->v[old]->pub.changed_at))
                old = i;
        forget_at(g, old);
        departed--;
    }
}

void gossip_tick(gossip_t *g, uint64_t now)
{
    struct peer *pp[2];
    size_t i, k;
    uint64_t probe = g->cfg.probe_ms;

    if (g->left) return;
    for (i = 0; i < g->n; i++) {
        struct peer *p = g->v[i];
        if (p->suspect_req) {
            bool silent = p->silent_req;
            p->suspect_req = p->silent_req = false;
            if (p->pub.state == GOSSIP_ALIVE && !p->pub.probing)
                gsp_start_probe(g, p, PR_SUSPECT, now);
            if (!silent || !p->pub.probing) continue;
            p->unreachable = true; /* the transport's probe failed: this one fails now */
        }
        if (!p->pub.probing) continue;
        if (p->unreachable || now >= p->probe_start + probe) {
            probe_failed(g, p, now);
        } else if (!p->ping2_sent && now >= p->probe_start + probe / 2) {
            p->ping2_sent = true;
            send_ping(g, p);
        }
    }
    update_preds(g, now);
    k = ring(g, -1, NULL, pp, 2);
    for (i = 0; i < k; i++)
        if (!pp[i]->pub.probing && now >= suspect_at(g, pp[i])) {
            gsp_start_probe(g, pp[i], PR_SUSPECT, now);
            probe_beyond(g, now);
        }
    if (now >= g->next_hb) {
        heartbeat(g, now);
        g->next_hb += g->cfg.heartbeat_ms;
        if (g->next_hb <= now) g->next_hb = now + g->cfg.heartbeat_ms;
    }
    gsp_prune_departed(g, now);
}

uint64_t gossip_next_deadline(const gossip_t *g)
{
    struct peer *pp[2];
    uint64_t d = g->next_hb, probe = g->cfg.probe_ms, t;
    size_t i, k;
    if (g->left) return UINT64_MAX;
    for (i = 0; i < g->n; i++) {
        const struct peer *p = g->v[i];
        if (p->suspect_req) return 0;
        if (!p->pub.probing) continue;
        if (p->unreachable) return 0;
        t = p->probe_start + (p->ping2_sent ? probe : probe / 2);
        if (t < d) d = t;
    }
    k = ring(g, -1, NULL, pp, 2);
    for (i = 0; i < k; i++)
        if (!pp[i]->pub.probing && (t = suspect_at(g, pp[i])) < d) d = t;
    return d;
}

/* Deferred to the next tick (due at once): the transport may call this from inside send(). */
void gossip_suspect(gossip_t *g, const char *id, uint64_t now)
{
    struct peer *p = gmsg_valid_id(id) ? gsp_find(g, id) : NULL;
    (void)now; /* deferred to the next tick (due at once): we may be inside send() */
    if (p && !g->left && p->pub.state == GOSSIP_ALIVE && !p->pub.probing) p->suspect_req = true;
}

void gossip_unreachable(gossip_t *g, const char *id, uint64_t now)
{
    struct peer *p = gmsg_valid_id(id) ? gsp_find(g, id) : NULL;
    if (p && p->pub.probing) p->unreachable = true;
}

void gossip_silent(gossip_t *g, const char *id, uint64_t now)
{
    struct peer *p = gmsg_valid_id(id) ? gsp_find(g, id) : NULL;
    if (!p || g->left || p->pub.state != GOSSIP_ALIVE) return;
    if (p->pub.probing)
        p->unreachable = true;
    else
        p->suspect_req = p->silent_req = true;
    (void)now;
}

/* --- Life cycle and local changes --- */

void gossip_cfg_default(gossip_cfg_t *cfg, uint64_t heartbeat_ms)
{
    cfg->heartbeat_ms = heartbeat_ms ? heartbeat_ms : 60000;
    cfg->probe_ms =
        cfg->heartbeat_ms / 4 < GOSSIP_PROBE_MAX_MS ? cfg->heartbeat_ms / 4 : GOSSIP_PROBE_MAX_MS;
    if (cfg->probe_ms < 50) cfg->probe_ms = 50;
    cfg->fanout = 5;
    cfg->dead_retry_beats = 30;
}

gossip_t *gossip_new(const char *self_id, uint64_t incarnation, json_t *self_ann,
                     const gossip_cfg_t *cfg, const gossip_io_t *io, uint64_t now)
{
    gossip_t *g = NULL;
    json_t *ann = self_ann ? self_ann : json_object();

    if (!gmsg_valid_id(self_id) || !io || !io->send || !io->random || !io->sign || !io->wall_ms ||
        !json_is_object(ann) || incarnation >= INT64_MAX - 1 || !(g = calloc(1, sizeof *g)))
        goto fail;
    memcpy(g->id, self_id, GOSSIP_ID_LEN + 1);
    g->inc = incarnation;
    g->io = *io;
    gossip_cfg_default(&g->cfg, cfg ? cfg->heartbeat_ms : 0);
    if (cfg && cfg->probe_ms) g->cfg.probe_ms = cfg->probe_ms;
    if (cfg && cfg->fanout) g->cfg.fanout = cfg->fanout;
    if (cfg && cfg->dead_retry_beats) g->cfg.dead_retry_beats = cfg->dead_retry_beats;
    g->max_inc = gsp_inc_limit(g);
    if (set_self(g, ann) < 0) goto fail;
    json_decref(ann);
    g->next_hb = now + 1 + g->io.random(g->io.data) % g->cfg.heartbeat_ms; /* spread the beats */
    return g;
fail:
    free(g);
    json_decref(ann);
    return NULL;
}

void gossip_free(gossip_t *g)
{
    if (!g) return;
    while (g->n)
        gsp_remove_at(g, g->n - 1);
    free(g->v);
    json_decref(g->ann);
    free(g);
}

void gossip_set_announcement(gossip_t *g, json_t *ann, uint64_t now)
{
    json_t *m;
    if (!json_is_object(ann) || g->left) goto out;
    g->seq++;
    if (set_self(g, ann) < 0 || !(m = gsp_new_msg(g, M_UPDATE))) goto out;
    json_object_set_new(m, "anns", json_pack("[O]", g->ann));
    send_live(g, m);
    json_decref(m);
out:
    json_decref(ann);
}

json_t *gossip_self(gossip_t *g)
{
    return g->ann;
}

uint64_t gossip_incarnation(const gossip_t *g)
{
    return g->inc;
}

void gossip_join(gossip_t *g, const char *peer_id, uint64_t now)
{
    if (g->left || !gmsg_valid_id(peer_id) || !strcmp(peer_id, g->id)) return;
    memcpy(g->join_id, peer_id, GOSSIP_ID_LEN + 1);
    gsp_send_hello(g, peer_id, true);
}

void gossip_leave(gossip_t *g, uint64_t now)
{
    json_t *m;
    char sig[GMSG_SIG_HEX + 1];
    size_t len = 0;
    char *b;
    if (g->left) return;
    if ((b = gmsg_leave_bytes(g->id, g->inc, &len)) && (m = gsp_new_msg(g, M_LEAVING))) {
        gmsg_sign_hex(g->io.sign, g->io.data, b, len, sig);
        json_object_set_new(m, "sig", json_string(sig));
        send_live(g, m);
        json_decref(m);
    }
    free(b);
    g->left = true;
}

size_t gossip_peer_count(const gossip_t *g)
{
    return g->n;
}

const gossip_peer_t *gossip_peer_at(const gossip_t *g, size_t i)
{
    return i < g->n ? &g->v[i]->pub : NULL;
}

const gossip_peer_t *gossip_find(const gossip_t *g, const char *id)
{
    struct peer *p = gmsg_valid_id(id) ? gsp_find(g, id) : NULL;
    return p ? &p->pub : NULL;
}

size_t gossip_alive_count(const gossip_t *g)
{
    size_t k = 0;
    for (size_t i = 0; i < g->n; i++)
        k += g->v[i]->pub.state == GOSSIP_ALIVE;
    return k;
}

const gossip_stats_t *gossip_stats(const gossip_t *g)
{
    return &g->st;
}

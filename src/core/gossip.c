/* gossip — mesh membership state machine (see gossip.h for the model and the message set). */
#include "gossip.h"
#include "gossip_msg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FANOUT 64

/* why a peer is probed: silence (a failure declares it dead to all), a third party's claim at
 * its incarnation (the ping shows the claim, so a live peer refutes it), or a claim beyond what
 * it signed (a plain ping) */
enum { PR_SUSPECT = 1, PR_CLAIM, PR_CHECK };

struct peer {
    gossip_peer_t pub;
    uint64_t watch_since; /* monitoring baseline: when it became a predecessor or came alive */
    uint64_t probe_start;
    bool ping2_sent, unreachable;
    int probe_reason;
    uint64_t dg_gen, dg_inc, dg_seq;  /* scratch: its entry in the digest being answered */
    char leave_sig[GMSG_SIG_HEX + 1]; /* LEFT: its signature of its leave at pub.inc */
};

struct gossip {
    char id[GOSSIP_ID_LEN + 1];
    uint64_t inc, seq;
    json_t *ann; /* immutable once published: changes make a new copy */
    gossip_cfg_t cfg;
    gossip_io_t io;
    struct peer **v; /* sorted by id */
    size_t n, cap;
    uint64_t next_hb;
    char pred[2][GOSSIP_ID_LEN + 1];
    char join_id[GOSSIP_ID_LEN + 1];
    bool left;
    uint64_t gen;
    uint64_t max_inc; /* incarnations above it are refused (wall clock + GOSSIP_MAX_AHEAD_MS) */
    gossip_stats_t st;
};

/* --- Peer table --- */

static size_t lower_bound(const gossip_t *g, const char *id)
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

static struct peer *find(const gossip_t *g, const char *id)
{
    size_t i = lower_bound(g, id);
    return i < g->n && !strcmp(g->v[i]->pub.id, id) ? g->v[i] : NULL;
}

static void remove_at(gossip_t *g, size_t i)
{
    json_decref(g->v[i]->pub.ann);
    free(g->v[i]);
    memmove(&g->v[i], &g->v[i + 1], (g->n - i - 1) * sizeof g->v[0]);
    g->n--;
}

/* A new record (state ALIVE, no announcement yet): NULL when full of live peers or out of
 * memory. When the table is full, the oldest dead record goes. */
static struct peer *insert(gossip_t *g, const char *id, uint64_t now)
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
        remove_at(g, old);
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
    i = lower_bound(g, id);
    memmove(&g->v[i + 1], &g->v[i], (g->n - i) * sizeof g->v[0]);
    g->v[i] = p;
    g->n++;
    return p;
}

static bool newer(uint64_t inc, uint64_t seq, uint64_t inc2, uint64_t seq2)
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
    size_t k = 0, s, pos = lower_bound(g, g->id);
    for (s = 0; s < g->n && k < want; s++) {
        struct peer *p = g->v[dir > 0 ? (pos + s) % g->n : (pos + g->n - 1 - s) % g->n];
        if (p->pub.state == GOSSIP_ALIVE && !(skip && !strcmp(p->pub.id, skip))) out[k++] = p;
    }
    return k;
}

static void emit(gossip_t *g, gossip_event_t ev, struct peer *p)
{
    if (g->io.event) g->io.event(g->io.data, ev, &p->pub);
}

/* --- Sending --- */

static json_t *new_msg(const gossip_t *g, int type)
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

static void send_free(gossip_t *g, const char *to, json_t *m)
{
    if (m) send_to(g, to, m);
    json_decref(m);
}

static json_t *dead_rec(const char *id, uint64_t inc, gossip_state_t st)
{
    return json_pack("[s, I, s]", id, (json_int_t)inc, st == GOSSIP_LEFT ? "left" : "dead");
}

/* Our record of a peer that is not alive; a leave keeps the leaver's signature. */
static json_t *peer_rec(const struct peer *p)
{
    if (p->pub.state == GOSSIP_LEFT && p->leave_sig[0])
        return json_pack("[s, I, s, s]", p->pub.id, (json_int_t)p->pub.inc, "left", p->leave_sig);
    return dead_rec(p->pub.id, p->pub.inc, p->pub.state);
}

static json_t *recent_dead(const gossip_t *g, uint64_t now)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < g->n; i++)
        if (recent_record(g, g->v[i], now)) json_array_append_new(a, peer_rec(g->v[i]));
    return a;
}

static void send_hello(gossip_t *g, const char *to, bool join)
{
    json_t *m = new_msg(g, M_HELLO);
    if (m) json_object_set(m, "ann", g->ann);
    if (m && join) json_object_set_new(m, "join", json_true());
    send_free(g, to, m);
}

static void send_ping(gossip_t *g, struct peer *p)
{
    json_t *m = new_msg(g, M_PING);
    /* a probe caused by a third party's claim shows the claim, so the peer refutes it at once */
    if (m && p->probe_reason == PR_CLAIM)
        json_object_set_new(m, "dead",
                            json_pack("[o]", dead_rec(p->pub.id, p->pub.inc, GOSSIP_DEAD)));
    send_free(g, p->pub.id, m);
}

/* A claim about p (dead at its incarnation, or its signed leave) to our two ring successors, for
 * delivery redundancy. */
static void forward_claim(gossip_t *g, struct peer *p, const char *informer)
{
    struct peer *succ[2];
    size_t k = ring(g, 1, p->pub.id, succ, 2);
    json_t *m = new_msg(g, M_PEER_DOWN);
    if (m)
        json_object_set_new(m, "dead",
                            json_pack("[o]", p->pub.state == GOSSIP_LEFT
                                                 ? peer_rec(p)
                                                 : dead_rec(p->pub.id, p->pub.inc, GOSSIP_DEAD)));
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
static void refute(gossip_t *g, const char *informer, uint64_t min_inc, uint64_t now)
{
    json_t *m;
    struct peer *p;
    if (g->inc >= INT64_MAX - 1) return;
    g->inc = g->inc + 1 > min_inc ? g->inc + 1 : min_inc;
    g->seq = 0;
    set_self(g, g->ann);
    g->st.refutations++;
    m = new_msg(g, M_UPDATE);
    if (!m) return;
    json_object_set_new(m, "anns", json_pack("[O]", g->ann));
    json_object_set_new(m, "dead", recent_dead(g, now));
    send_live(g, m);
    if (informer && (!(p = find(g, informer)) || p->pub.state != GOSSIP_ALIVE))
        send_to(g, informer, m);
    json_decref(m);
}

static void start_probe(gossip_t *g, struct peer *p, int reason, uint64_t now)
{
    p->pub.probing = true;
    p->probe_start = now;
    p->ping2_sent = p->unreachable = false;
    p->probe_reason = reason;
    g->st.probes++;
    send_ping(g, p);
}

static void mark(gossip_t *g, struct peer *p, gossip_state_t st, uint64_t inc, uint64_t now)
{
    bool was_alive = p->pub.state == GOSSIP_ALIVE;
    p->pub.state = st;
    p->pub.inc = inc;
    p->pub.probing = false;
    p->pub.changed_at = now;
    if (was_alive) emit(g, st == GOSSIP_LEFT ? GOSSIP_EV_LEFT : GOSSIP_EV_DEAD, p);
}

static int set_alive(gossip_t *g, struct peer *p, json_t *ann, uint64_t inc, uint64_t seq,
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

enum { ANN_IGNORED, ANN_CHANGED, ANN_BLOCKED, ANN_BAD };

/* Checked only when it would be used: an announcement is verified once, when it is news. */
static bool verified(gossip_t *g, const json_t *ann)
{
    if (gmsg_ann_verify(ann, GOSSIP_MAX_ANN_BYTES)) return true;
    g->st.bad_sig++;
    return false;
}

/* checked: the signature was verified already */
static int merge_ann(gossip_t *g, json_t *ann, const char *from, bool checked, uint64_t now)
{
    const char *id = NULL;
    uint64_t inc = 0, seq = 0;
    struct peer *p;
    bool direct, fresh;

    gmsg_ann_fields(ann, &id, &inc, &seq); /* validated by gmsg_parse() */
    direct = !strcmp(id, from);
    if (inc > g->max_inc) {
        g->st.future++;
        return ANN_BAD;
    }
    if (!strcmp(id, g->id)) {
        /* someone holds a newer version of us (we restarted with a stale incarnation) */
        if (!newer(inc, seq, g->inc, g->seq)) return ANN_IGNORED;
        if (!checked && !verified(g, ann)) return ANN_BAD;
        refute(g, from, inc + 1, now);
        return ANN_IGNORED;
    }
    p = find(g, id);
    if (p && p->pub.state != GOSSIP_ALIVE && inc <= p->pub.inc) return ANN_BLOCKED;
    if (p && p->pub.state == GOSSIP_ALIVE && !newer(inc, seq, p->pub.inc, p->pub.seq))
        return ANN_IGNORED;
    if (!checked && !verified(g, ann)) return ANN_BAD;
    if (p && p->pub.state == GOSSIP_ALIVE) {
        bool restarted = inc > p->pub.inc;
        if (set_alive(g, p, ann, inc, seq, now) < 0) return ANN_IGNORED;
        emit(g, restarted ? GOSSIP_EV_UP : GOSSIP_EV_UPDATED, p);
        return ANN_CHANGED;
    }
    fresh = !p;
    if (fresh && !(p = insert(g, id, now))) return ANN_IGNORED;
    if (set_alive(g, p, ann, inc, seq, now) < 0) {
        if (fresh) remove_at(g, lower_bound(g, id));
        return ANN_IGNORED;
    }
    emit(g, GOSSIP_EV_UP, p);
    /* newly learned (or back) through a third party: say hello directly */
    if (!direct) send_hello(g, id, false);
    return ANN_CHANGED;
}

static bool leave_proven(gossip_t *g, const struct gmsg_rec *r)
{
    if (!r->left || !r->sig) return false;
    if (gmsg_leave_verify(r->id, r->inc, r->sig)) return true;
    g->st.bad_sig++;
    return false;
}

/* A dead or left record from `from` (NULL: the leaver itself). Only the node's own signed leave
 * is a fact; anything else is a hint that makes us probe it (gossip.h, Trust). */
static void merge_dead(gossip_t *g, const struct gmsg_rec *r, const char *from, uint64_t now)
{
    struct peer *p;
    bool proven;

    if (r->inc > g->max_inc) {
        g->st.future++;
        return;
    }
    proven = leave_proven(g, r);
    if (!strcmp(r->id, g->id)) {
        /* above our incarnation only our own signature counts (a leave of a former process) */
        if (r->inc == g->inc || (proven && r->inc > g->inc))
            refute(g, from, r->inc + 1, now);
        else if (r->inc > g->inc)
            g->st.unproven++;
        return;
    }
    if (!(p = find(g, r->id))) {
        /* a signed leave is kept as a tombstone (stale gossip about it stays harmless) */
        if (!proven) {
            g->st.unproven++;
        } else if ((p = insert(g, r->id, now))) {
            p->pub.state = GOSSIP_LEFT;
            p->pub.inc = r->inc;
            memcpy(p->leave_sig, r->sig, GMSG_SIG_HEX + 1);
        }
        return;
    }
    if (r->inc < p->pub.inc) return;
    if (proven) {
        bool was_alive = p->pub.state == GOSSIP_ALIVE;
        if (p->pub.state == GOSSIP_LEFT && r->inc == p->pub.inc) return;
        mark(g, p, GOSSIP_LEFT, r->inc, now);
        memcpy(p->leave_sig, r->sig, GMSG_SIG_HEX + 1);
        if (was_alive) forward_claim(g, p, from);
        return;
    }
    if (r->inc > p->pub.inc) {
        /* beyond anything it signed: not recorded, not passed on; a plain check at most */
        g->st.unproven++;
        if (p->pub.state == GOSSIP_ALIVE && !p->pub.probing) start_probe(g, p, PR_CHECK, now);
        return;
    }
    if (r->left) g->st.unproven++; /* a leave without the leaver's signature: a dead hint */
    if (p->pub.state == GOSSIP_ALIVE && !p->pub.probing) {
        start_probe(g, p, PR_CLAIM, now);
        forward_claim(g, p, from);
    }
}

/* Dead after a failed probe; a monitor (ring successor) tells every live peer. */
static void probe_failed(gossip_t *g, struct peer *p, uint64_t now)
{
    json_t *m = p->probe_reason == PR_SUSPECT ? new_msg(g, M_PEER_DOWN) : NULL;
    mark(g, p, GOSSIP_DEAD, p->pub.inc, now);
    if (!m) return;
    json_object_set_new(m, "dead", json_pack("[o]", dead_rec(p->pub.id, p->pub.inc, GOSSIP_DEAD)));
    send_live(g, m);
    json_decref(m);
}

/* --- Message handlers --- */

static void on_hb(gossip_t *g, const char *from, const struct gmsg *m)
{
    uint64_t gen = ++g->gen, s_inc = 0, s_seq = 0;
    json_t *want = json_array(), *anns = json_array(), *dead = json_array(), *e, *ack;
    bool self_seen = false;
    size_t i;

    json_array_foreach(m->digest, i, e)
    {
        const char *id = NULL;
        uint64_t inc = 0, seq = 0;
        struct peer *p;
        gmsg_digest_entry(e, &id, &inc, &seq);
        if (inc > g->max_inc) {
            g->st.future++;
        } else if (!strcmp(id, g->id)) {
            self_seen = true;
            s_inc = inc;
            s_seq = seq;
        } else if (!(p = find(g, id))) {
            json_array_append_new(want, json_string(id));
        } else {
            p->dg_gen = gen;
            p->dg_inc = inc;
            p->dg_seq = seq;
            if (p->pub.state == GOSSIP_ALIVE ? newer(inc, seq, p->pub.inc, p->pub.seq)
                                             : inc > p->pub.inc)
                json_array_append_new(want, json_string(id));
            else if (p->pub.state != GOSSIP_ALIVE)
                json_array_append_new(dead, peer_rec(p));
        }
    }
    if (!self_seen || newer(g->inc, g->seq, s_inc, s_seq)) json_array_append(anns, g->ann);
    for (i = 0; i < g->n; i++) {
        struct peer *p = g->v[i];
        if (p->pub.state != GOSSIP_ALIVE || p->pub.probing || !strcmp(p->pub.id, from)) continue;
        if (p->dg_gen != gen || newer(p->pub.inc, p->pub.seq, p->dg_inc, p->dg_seq))
            json_array_append(anns, p->pub.ann);
    }
    if (json_array_size(want) || json_array_size(anns) || json_array_size(dead)) {
        if ((ack = new_msg(g, M_ACK))) {
            json_object_set(ack, "want", want);
            json_object_set(ack, "anns", anns);
            json_object_set(ack, "dead", dead);
        }
        send_free(g, from, ack);
    }
    json_decref(want);
    json_decref(anns);
    json_decref(dead);
}

/* ack/update/sync: merge; answer wanted ids and tell about announcements we hold dead. */
static void on_anns(gossip_t *g, const char *from, const struct gmsg *m, uint64_t now)
{
    json_t *anns = json_array(), *dead = json_array(), *e, *up;
    size_t i;
    const char *id = NULL;
    uint64_t inc = 0, seq = 0;
    struct peer *p;

    json_array_foreach(m->anns, i, e)
    {
        if (merge_ann(g, e, from, false, now) != ANN_BLOCKED) continue;
        gmsg_ann_fields(e, &id, &inc, &seq);
        if ((p = find(g, id))) json_array_append_new(dead, peer_rec(p));
    }
    json_array_foreach(m->want, i, e)
    {
        p = find(g, (id = json_string_value(e)));
        if (!strcmp(id, g->id))
            json_array_append(anns, g->ann);
        else if (p && p->pub.state == GOSSIP_ALIVE)
            json_array_append(anns, p->pub.ann);
        else if (p)
            json_array_append_new(dead, peer_rec(p));
    }
    if (json_array_size(anns) || json_array_size(dead)) {
        if ((up = new_msg(g, M_UPDATE))) {
            json_object_set(up, "anns", anns);
            json_object_set(up, "dead", dead);
        }
        send_free(g, from, up);
    }
    json_decref(anns);
    json_decref(dead);
}

static void on_hello(gossip_t *g, const char *from, const struct gmsg *m, uint64_t now)
{
    json_t *sync, *anns;
    merge_ann(g, m->ann, from, true, now); /* verified by gossip_receive */
    if (!m->join || !(sync = new_msg(g, M_SYNC))) return;
    anns = json_array();
    json_array_append(anns, g->ann);
    for (size_t i = 0; i < g->n; i++)
        if (g->v[i]->pub.state == GOSSIP_ALIVE && strcmp(g->v[i]->pub.id, from))
            json_array_append(anns, g->v[i]->pub.ann);
    json_object_set_new(sync, "anns", anns);
    json_object_set_new(sync, "dead", recent_dead(g, now));
    send_free(g, from, sync);
}

static void apply_dead(gossip_t *g, const struct gmsg *m, const char *from, uint64_t now)
{
    size_t i;
    json_t *e;
    json_array_foreach(m->dead, i, e)
    {
        struct gmsg_rec r;
        gmsg_dead_entry(e, &r);
        /* a notice is about us only; ignore anything else it might say */
        if (m->type != M_NOTICE || !strcmp(r.id, g->id)) merge_dead(g, &r, from, now);
    }
}

/* A message from an incarnation older than the one we hold (a late one, or a process restarted
 * with a stale incarnation): show it the newer incarnation it signed, so that a live process
 * bumps past it. */
static void answer_former(gossip_t *g, const struct peer *s)
{
    json_t *up = new_msg(g, M_UPDATE);
    if (!up) return;
    json_object_set_new(up, "anns", s->pub.ann ? json_pack("[O]", s->pub.ann) : json_array());
    if (s->pub.state != GOSSIP_ALIVE)
        json_object_set_new(up, "dead", json_pack("[o]", peer_rec(s)));
    send_free(g, s->pub.id, up);
}

static uint64_t inc_limit(const gossip_t *g)
{
    uint64_t w = g->io.wall_ms(g->io.data);
    return w > (uint64_t)INT64_MAX - GOSSIP_MAX_AHEAD_MS ? (uint64_t)INT64_MAX
                                                         : w + GOSSIP_MAX_AHEAD_MS;
}

/* The sender's statements about itself that a hello or leaving carries: checked before anything
 * changes (a wrong signature rejects the message). */
static bool own_statement_ok(gossip_t *g, const char *from, const struct gmsg *m)
{
    const struct peer *s = find(g, from);
    uint64_t inc = 0, seq = 0;
    const char *id = NULL;
    bool ok = true;
    if (m->type == M_LEAVING) {
        ok = gmsg_leave_verify(from, m->inc, m->sig);
    } else if (m->type == M_HELLO) {
        gmsg_ann_fields(m->ann, &id, &inc, &seq);
        /* verified only when it is news */
        if (!s || (s->pub.state == GOSSIP_ALIVE ? newer(inc, seq, s->pub.inc, s->pub.seq)
                                                : inc > s->pub.inc))
            ok = gmsg_ann_verify(m->ann, GOSSIP_MAX_ANN_BYTES);
    }
    if (!ok) g->st.bad_sig++;
    return ok;
}

int gossip_receive(gossip_t *g, const char *from, json_t *msg, uint64_t now)
{
    struct gmsg m;
    struct peer *s;

    g->st.received++;
    g->max_inc = inc_limit(g);
    if (!gmsg_valid_id(from) || !strcmp(from, g->id) || gmsg_parse(msg, from, g->max_inc, &m) < 0) {
        g->st.rejected++;
        return -EINVAL;
    }
    if (g->left) return 0;
    if (!own_statement_ok(g, from, &m)) return -EINVAL;
    s = find(g, from);
    if (s && m.inc < s->pub.inc) {
        if (m.type != M_LEAVING) answer_former(g, s);
        return 0;
    }
    if (s && m.inc == s->pub.inc && s->pub.state != GOSSIP_ALIVE) {
        /* a peer we hold dead talks to us: tell it (never in answer to a notice: no loops) */
        if (m.type == M_NOTICE)
            apply_dead(g, &m, from, now);
        else if (s->pub.state == GOSSIP_DEAD) {
            json_t *n = new_msg(g, M_NOTICE);
            if (n)
                json_object_set_new(n, "dead",
                                    json_pack("[o]", dead_rec(from, m.inc, GOSSIP_DEAD)));
            send_free(g, from, n);
        }
        return 0;
    }
    if (s && s->pub.state == GOSSIP_ALIVE) {
        s->pub.last_direct = now;
        s->pub.probing = false;
    }
    apply_dead(g, &m, from, now);
    switch (m.type) {
    case M_HB:
        on_hb(g, from, &m);
        break;
    case M_ACK:
    case M_UPDATE:
    case M_SYNC:
        on_anns(g, from, &m, now);
        break;
    case M_HELLO:
        on_hello(g, from, &m, now);
        break;
    case M_PING:
        send_free(g, from, new_msg(g, M_PONG));
        break;
    case M_LEAVING: {
        struct gmsg_rec r = {.id = from, .inc = m.inc, .left = true, .sig = m.sig};
        merge_dead(g, &r, NULL, now);
        break;
    }
    default:
        break;
    }
    /* the sender is alive (it may have been created by this very message) */
    if ((s = find(g, from)) && s->pub.state == GOSSIP_ALIVE && s->pub.inc == m.inc) {
        s->pub.last_direct = now;
        s->pub.probing = false;
    }
    return 0;
}

/* --- Timers --- */

static uint64_t suspect_at(const gossip_t *g, const struct peer *p)
{
    uint64_t base = p->pub.last_direct > p->watch_since ? p->pub.last_direct : p->watch_since;
    return base + g->cfg.heartbeat_ms * 9 / 4;
}

static void update_preds(gossip_t *g, uint64_t now)
{
    struct peer *pp[2];
    size_t k = ring(g, -1, NULL, pp, 2), i;
    for (i = 0; i < k; i++)
        if (strcmp(pp[i]->pub.id, g->pred[0]) && strcmp(pp[i]->pub.id, g->pred[1]))
            pp[i]->watch_since = now;
    for (i = 0; i < 2; i++)
        memcpy(g->pred[i], i < k ? pp[i]->pub.id : "", i < k ? GOSSIP_ID_LEN + 1 : 1);
}

static void heartbeat(gossip_t *g, uint64_t now)
{
    struct peer *targets[MAX_FANOUT], **cand = malloc((g->n + 1) * sizeof *cand);
    size_t k, nc = 0, i, fanout = g->cfg.fanout < MAX_FANOUT ? g->cfg.fanout : MAX_FANOUT;
    json_t *hb = new_msg(g, M_HB), *digest = json_array();

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
    json_object_set_new(hb, "dead", recent_dead(g, now));
    for (i = 0; i < k; i++)
        send_to(g, targets[i]->pub.id, hb);
    /* and one peer declared dead recently: this heals partitions */
    for (i = nc = 0; i < g->n; i++)
        if (g->v[i]->pub.state == GOSSIP_DEAD && recent_record(g, g->v[i], now))
            cand[nc++] = g->v[i];
    if (nc) send_to(g, cand[g->io.random(g->io.data) % nc]->pub.id, hb);
    if (g->join_id[0]) { /* until the join target is known alive: the join may have got lost */
        struct peer *j = find(g, g->join_id);
        if (j && j->pub.state == GOSSIP_ALIVE)
            g->join_id[0] = '\0';
        else
            send_hello(g, g->join_id, true);
    }
out:
    free(cand);
    json_decref(digest);
    json_decref(hb);
}

void gossip_tick(gossip_t *g, uint64_t now)
{
    struct peer *pp[2];
    size_t i, k;
    uint64_t probe = g->cfg.probe_ms;

    if (g->left) return;
    for (i = 0; i < g->n; i++) {
        struct peer *p = g->v[i];
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
        if (!pp[i]->pub.probing && now >= suspect_at(g, pp[i]))
            start_probe(g, pp[i], PR_SUSPECT, now);
    if (now >= g->next_hb) {
        heartbeat(g, now);
        g->next_hb += g->cfg.heartbeat_ms;
        if (g->next_hb <= now) g->next_hb = now + g->cfg.heartbeat_ms;
    }
}

uint64_t gossip_next_deadline(const gossip_t *g)
{
    struct peer *pp[2];
    uint64_t d = g->next_hb, probe = g->cfg.probe_ms, t;
    size_t i, k;
    if (g->left) return UINT64_MAX;
    for (i = 0; i < g->n; i++) {
        const struct peer *p = g->v[i];
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
void gossip_unreachable(gossip_t *g, const char *id, uint64_t now)
{
    struct peer *p = gmsg_valid_id(id) ? find(g, id) : NULL;
    if (p && p->pub.probing) p->unreachable = true;
}

/* --- Life cycle and local changes --- */

void gossip_cfg_default(gossip_cfg_t *cfg, uint64_t heartbeat_ms)
{
    cfg->heartbeat_ms = heartbeat_ms ? heartbeat_ms : 60000;
    cfg->probe_ms = cfg->heartbeat_ms / 4 < 5000 ? cfg->heartbeat_ms / 4 : 5000;
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
    g->max_inc = inc_limit(g);
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
        remove_at(g, g->n - 1);
    free(g->v);
    json_decref(g->ann);
    free(g);
}

void gossip_set_announcement(gossip_t *g, json_t *ann, uint64_t now)
{
    json_t *m;
    if (!json_is_object(ann) || g->left) goto out;
    g->seq++;
    if (set_self(g, ann) < 0 || !(m = new_msg(g, M_UPDATE))) goto out;
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
    send_hello(g, peer_id, true);
}

void gossip_leave(gossip_t *g, uint64_t now)
{
    json_t *m;
    char sig[GMSG_SIG_HEX + 1];
    size_t len = 0;
    char *b;
    if (g->left) return;
    if ((b = gmsg_leave_bytes(g->id, g->inc, &len)) && (m = new_msg(g, M_LEAVING))) {
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
    struct peer *p = gmsg_valid_id(id) ? find(g, id) : NULL;
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

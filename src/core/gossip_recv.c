/* gossip_recv — see gossip_int.h: what gossip_receive does with a message. */
#include "gossip_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* what merging an announcement did */
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
        if (!gsp_newer(inc, seq, g->inc, g->seq)) return ANN_IGNORED;
        if (!checked && !verified(g, ann)) return ANN_BAD;
        gsp_refute(g, from, inc + 1, now);
        return ANN_IGNORED;
    }
    p = gsp_find(g, id);
    if (p && p->pub.state != GOSSIP_ALIVE && inc <= p->pub.inc) return ANN_BLOCKED;
    if (p && p->pub.state == GOSSIP_ALIVE && !gsp_newer(inc, seq, p->pub.inc, p->pub.seq))
        return ANN_IGNORED;
    if (!checked && !verified(g, ann)) return ANN_BAD;
    if (p && p->pub.state == GOSSIP_ALIVE) {
        bool restarted = inc > p->pub.inc;
        if (gsp_set_alive(g, p, ann, inc, seq, now) < 0) return ANN_IGNORED;
        gsp_emit(g, restarted ? GOSSIP_EV_UP : GOSSIP_EV_UPDATED, p);
        return ANN_CHANGED;
    }
    fresh = !p;
    if (fresh && !(p = gsp_insert(g, id, now))) return ANN_IGNORED;
    if (gsp_set_alive(g, p, ann, inc, seq, now) < 0) {
        if (fresh) gsp_remove_at(g, gsp_lower_bound(g, id));
        return ANN_IGNORED;
    }
    gsp_emit(g, GOSSIP_EV_UP, p);
    /* newly learned (or back) through a third party: say hello directly */
    if (!direct) gsp_send_hello(g, id, false);
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
            gsp_refute(g, from, r->inc + 1, now);
        else if (r->inc > g->inc)
            g->st.unproven++;
        return;
    }
    if (!(p = gsp_find(g, r->id))) {
        /* a signed leave is kept as a tombstone (stale gossip about it stays harmless) */
        if (!proven) {
            g->st.unproven++;
        } else if ((p = gsp_insert(g, r->id, now))) {
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
        gsp_mark(g, p, GOSSIP_LEFT, r->inc, now);
        memcpy(p->leave_sig, r->sig, GMSG_SIG_HEX + 1);
        if (was_alive) gsp_forward_claim(g, p, from);
        return;
    }
    if (r->inc > p->pub.inc) {
        /* beyond anything it signed: not recorded, not passed on; a plain check at most */
        g->st.unproven++;
        if (p->pub.state == GOSSIP_ALIVE && !p->pub.probing) gsp_start_probe(g, p, PR_CHECK, now);
        return;
    }
    if (r->left) g->st.unproven++; /* a leave without the leaver's signature: a dead hint */
    if (p->pub.state == GOSSIP_ALIVE && !p->pub.probing) {
        gsp_start_probe(g, p, PR_CLAIM, now);
        gsp_forward_claim(g, p, from);
    }
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
        } else if (!(p = gsp_find(g, id))) {
            json_array_append_new(want, json_string(id));
        } else {
            p->dg_gen = gen;
            p->dg_inc = inc;
            p->dg_seq = seq;
            if (p->pub.state == GOSSIP_ALIVE ? gsp_newer(inc, seq, p->pub.inc, p->pub.seq)
                                             : inc > p->pub.inc)
                json_array_append_new(want, json_string(id));
            else if (p->pub.state != GOSSIP_ALIVE)
                json_array_append_new(dead, gsp_peer_rec(p));
        }
    }
    if (!self_seen || gsp_newer(g->inc, g->seq, s_inc, s_seq)) json_array_append(anns, g->ann);
    for (i = 0; i < g->n; i++) {
        struct peer *p = g->v[i];
        if (p->pub.state != GOSSIP_ALIVE || p->pub.probing || !strcmp(p->pub.id, from)) continue;
        if (p->dg_gen != gen || gsp_newer(p->pub.inc, p->pub.seq, p->dg_inc, p->dg_seq))
            json_array_append(anns, p->pub.ann);
    }
    if (json_array_size(want) || json_array_size(anns) || json_array_size(dead)) {
        if ((ack = gsp_new_msg(g, M_ACK))) {
            json_object_set(ack, "want", want);
            json_object_set(ack, "anns", anns);
            json_object_set(ack, "dead", dead);
        }
        gsp_send_free(g, from, ack);
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
        if ((p = gsp_find(g, id))) json_array_append_new(dead, gsp_peer_rec(p));
    }
    json_array_foreach(m->want, i, e)
    {
        p = gsp_find(g, (id = json_string_value(e)));
        if (!strcmp(id, g->id))
            json_array_append(anns, g->ann);
        else if (p && p->pub.state == GOSSIP_ALIVE)
            json_array_append(anns, p->pub.ann);
        else if (p)
            json_array_append_new(dead, gsp_peer_rec(p));
    }
    if (json_array_size(anns) || json_array_size(dead)) {
        if ((up = gsp_new_msg(g, M_UPDATE))) {
            json_object_set(up, "anns", anns);
            json_object_set(up, "dead", dead);
        }
        gsp_send_free(g, from, up);
    }
    json_decref(anns);
    json_decref(dead);
}

static void on_hello(gossip_t *g, const char *from, const struct gmsg *m, uint64_t now)
{
    json_t *sync, *anns;
    merge_ann(g, m->ann, from, true, now); /* verified by gossip_receive */
    if (!m->join || !(sync = gsp_new_msg(g, M_SYNC))) return;
    anns = json_array();
    json_array_append(anns, g->ann);
    for (size_t i = 0; i < g->n; i++)
        if (g->v[i]->pub.state == GOSSIP_ALIVE && strcmp(g->v[i]->pub.id, from))
            json_array_append(anns, g->v[i]->pub.ann);
    json_object_set_new(sync, "anns", anns);
    json_object_set_new(sync, "dead", gsp_recent_dead(g, now));
    gsp_send_free(g, from, sync);
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
    json_t *up = gsp_new_msg(g, M_UPDATE);
    if (!up) return;
    json_object_set_new(up, "anns", s->pub.ann ? json_pack("[O]", s->pub.ann) : json_array());
    if (s->pub.state != GOSSIP_ALIVE)
        json_object_set_new(up, "dead", json_pack("[o]", gsp_peer_rec(s)));
    gsp_send_free(g, s->pub.id, up);
}

/* The sender's statements about itself that a hello or leaving carries: checked before anything
 * changes (a wrong signature rejects the message). */
static bool own_statement_ok(gossip_t *g, const char *from, const struct gmsg *m)
{
    const struct peer *s = gsp_find(g, from);
    uint64_t inc = 0, seq = 0;
    const char *id = NULL;
    bool ok = true;
    if (m->type == M_LEAVING) {
        ok = gmsg_leave_verify(from, m->inc, m->sig);
    } else if (m->type == M_HELLO) {
        gmsg_ann_fields(m->ann, &id, &inc, &seq);
        /* verified only when it is news */
        if (!s || (s->pub.state == GOSSIP_ALIVE ? gsp_newer(inc, seq, s->pub.inc, s->pub.seq)
                                                : inc > s->pub.inc))
            ok = gmsg_ann_verify(m->ann, GOSSIP_MAX_ANN_BYTES);
    }
    if (!ok) g->st.bad_sig++;
    return ok;
}

static int receive(gossip_t *g, const char *from, json_t *msg, uint64_t now);

int gossip_receive(gossip_t *g, const char *from, json_t *msg, uint64_t now)
{
    int rc = receive(g, from, msg, now);
    gsp_prune_departed(g, now);
    return rc;
}

static int receive(gossip_t *g, const char *from, json_t *msg, uint64_t now)
{
    struct gmsg m;
    struct peer *s;

    g->st.received++;
    g->max_inc = gsp_inc_limit(g);
    if (!gmsg_valid_id(from) || !strcmp(from, g->id) || gmsg_parse(msg, from, g->max_inc, &m) < 0) {
        g->st.rejected++;
        return -EINVAL;
    }
    if (g->left) return 0;
    if (!own_statement_ok(g, from, &m)) return -EINVAL;
    s = gsp_find(g, from);
    if (s && m.inc < s->pub.inc) {
        if (m.type != M_LEAVING) answer_former(g, s);
        return 0;
    }
    if (s && m.inc == s->pub.inc && s->pub.state != GOSSIP_ALIVE) {
        /* a peer we hold dead talks to us: tell it (never in answer to a notice: no loops) */
        if (m.type == M_NOTICE)
            apply_dead(g, &m, from, now);
        else if (s->pub.state == GOSSIP_DEAD) {
            json_t *n = gsp_new_msg(g, M_NOTICE);
            if (n)
                json_object_set_new(n, "dead",
                                    json_pack("[o]", gsp_dead_rec(from, m.inc, GOSSIP_DEAD)));
            gsp_send_free(g, from, n);
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
        gsp_send_free(g, from, gsp_new_msg(g, M_PONG));
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
    if ((s = gsp_find(g, from)) && s->pub.state == GOSSIP_ALIVE && s->pub.inc == m.inc) {
        s->pub.last_direct = now;
        s->pub.probing = false;
    }
    return 0;
}

/* --- Timers --- */

/* mesh_nat — reaching peers behind NATs (mesh_int.h; docs/nat.md): this node's candidate
 * addresses beyond its interfaces (reflexive: what peers say they see it come from; mapped: the
 * router's port mapping), hole punching coordinated by a member both peers are connected to,
 * and the relay fallback (a member started with --relay forwards the two peers' QUIC packets,
 * which it cannot read: transport.h "Punching and relays").
 *
 * When dialling a gossip peer fails (mesh_join.c's dial_failed), mesh_nat_unreachable escalates:
 *  1. punch: ask up to two coordinators (peers connected to both, by their rtt_ms, else any) for
 *     a simultaneous open: the coordinator tells each side the other's address as it sees it;
 *     both send punch datagrams there and dial at once;
 *  2. relay, PUNCH_WAIT_MS later if no connection came: ask a relay connected to both for a
 *     session; the asking side dials the peer over it.
 * A relayed peer is punched again every UPGRADE_MS: a direct connection, once ready, is preferred
 * (tp_find) and the relayed one closes when idle. Messages: one WIRE_NAT stream each, sent only
 * to peers that announce "nat" (older nodes reset unknown stream types). */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>

#include "log.h"
#include "mesh_int.h"
#include "util.h"
#include "wire.h"

#define PUNCH_WAIT_MS 4000   /* a punch that brought no connection by then: relay */
#define NAT_RETRY_MS 30000   /* a peer given up on (no relay either): punch again after */
#define UPGRADE_MS 30000     /* a relayed peer: punch again for a direct path */
#define PUNCH_ROUNDS 3       /* punch datagrams per candidate address */
#define MAX_PUNCH_ADDRS 8    /* addresses in a punch message */
#define COORD_PER_S 50       /* punch coordinations this node does a second */
#define RELAY_IDLE_MS 120000 /* a relay session without a frame this long is removed */
#define RELAY_MAX_PER_PEER 8 /* sessions one member may hold through this relay */
#define ADDR_SCAN_MS 5000    /* the interfaces' addresses read again */

/* ---- candidates ---- */

static bool own_addr(const mesh_t *m, const char *a)
{
    return mesh_own_addr(m, a);
}

void mesh_nat_addrs(mesh_t *m)
{
    mesh_addrs_init(m);
    /* the extra candidates go before the loopback address, which stays last */
    if (m->n_addrs == 0) return;
    char lo[TOKEN_ADDR_MAX];
    snprintf(lo, sizeof lo, "%s", m->addrs[m->n_addrs - 1]);
    bool has_lo = strncmp(lo, "127.", 4) == 0;
    if (has_lo) m->n_addrs--;
    for (size_t i = 0; i < m->n_extra && m->n_addrs < MAX_ADDRS - 1; i++)
        if (!own_addr(m, m->extra[i].addr))
            snprintf(m->addrs[m->n_addrs++], TOKEN_ADDR_MAX, "%s", m->extra[i].addr);
    if (has_lo) snprintf(m->addrs[m->n_addrs++], TOKEN_ADDR_MAX, "%s", lo);
}

/* The candidates changed: the announcement and the invite token follow. */
static void addrs_changed(mesh_t *m)
{
    mesh_nat_addrs(m);
    mesh_token_encode(m);
    if (!m->stopping) mesh_announce_changed(m);
}

/* Add or refresh an extra candidate; the oldest of its kind goes when full. */
static bool extra_set(mesh_t *m, const char *addr, int kind)
{
    uint64_t now = mesh_now(m);
    for (size_t i = 0; i < m->n_extra; i++)
        if (strcmp(m->extra[i].addr, addr) == 0) {
            bool changed = m->extra[i].kind != kind;
            m->extra[i].kind = kind;
            m->extra[i].at = now;
            return changed;
        }
    size_t slot = m->n_extra;
    if (m->n_extra == MESH_MAX_EXTRA) { /* replace the oldest, a reflexive one if any */
        slot = 0;
        for (size_t i = 1; i < m->n_extra; i++) {
            bool refl = m->extra[i].kind == MESH_CAND_REFLEXIVE,
                 slot_refl = m->extra[slot].kind == MESH_CAND_REFLEXIVE;
            if ((refl && !slot_refl) || (refl == slot_refl && m->extra[i].at < m->extra[slot].at))
                slot = i;
        }
    } else {
        m->n_extra++;
    }
    snprintf(m->extra[slot].addr, sizeof m->extra[slot].addr, "%s", addr);
    m->extra[slot].kind = kind;
    m->extra[slot].at = now;
    return true;
}

/* The one candidate of a kind that a driver owns (the router's mapping, the TURN allocation):
 * addr replaces the previous one; NULL removes it. */
static void set_owned(mesh_t *m, const char *addr, int kind)
{
    bool changed = false;
    for (size_t i = 0; i < m->n_extra;)
        if (m->extra[i].kind == kind && (!addr || strcmp(m->extra[i].addr, addr))) {
            m->extra[i] = m->extra[--m->n_extra];
            changed = true;
        } else {
            i++;
        }
    char host[TOKEN_ADDR_MAX];
    int port;
    if (addr && strlen(addr) < TOKEN_ADDR_MAX && addr_split(addr, host, sizeof host, &port) == 0)
        changed |= extra_set(m, addr, kind);
    if (changed) addrs_changed(m);
}

void mesh_set_mapped_addr(mesh_t *m, const char *addr)
{
    set_owned(m, addr, MESH_CAND_MAPPED);
}

/* A STUN server's answer (--stun): a reflexive candidate, replacing the previous STUN one (not
 * the ones peers reported). NULL: none. */
void mesh_set_stun_addr(mesh_t *m, const char *addr)
{
    char host[TOKEN_ADDR_MAX];
    int port;
    if (addr && (strlen(addr) >= TOKEN_ADDR_MAX || addr_split(addr, host, sizeof host, &port)))
        return;
    if (addr && !strcmp(addr, m->nat.stun_addr)) return;
    bool changed = false;
    for (size_t i = 0; m->nat.stun_addr[0] && i < m->n_extra; i++)
        if (m->extra[i].kind == MESH_CAND_REFLEXIVE &&
            !strcmp(m->extra[i].addr, m->nat.stun_addr)) {
            m->extra[i] = m->extra[--m->n_extra];
            changed = true;
            break;
        }
    snprintf(m->nat.stun_addr, sizeof m->nat.stun_addr, "%s", addr ? addr : "");
    /* behind a symmetric NAT the STUN server's port is its own: it would lead nowhere */
    if (addr && !own_addr(m, addr) && !m->nat.symmetric)
        changed |= extra_set(m, addr, MESH_CAND_REFLEXIVE);
    if (changed) addrs_changed(m);
}

/* This node's TURN allocation's relayed address (--turn): a "relay" candidate. NULL: none. */
void mesh_set_turn_addr(mesh_t *m, const char *addr)
{
    set_owned(m, addr, MESH_CAND_RELAY);
}

/* What kind of candidate an announced address of peer p is ("local" when not said). */
static const char *peer_addr_kind(const gossip_peer_t *gp, const char *addr)
{
    json_t *k =
        gp && gp->ann ? json_object_get(json_object_get(gp->ann, "addr_kinds"), addr) : NULL;
    const char *s = json_string_value(k);
    return s ? s : "local";
}

/* ---- messages ---- */

static bool peer_speaks_nat(mesh_t *m, const char *id)
{
    const gossip_peer_t *gp = m->g ? gossip_find(m->g, id) : NULL;
    return gp && gp->ann && json_integer_value(json_object_get(gp->ann, "nat")) >= 1;
}

static void nat_send(mesh_t *m, tp_conn_t *c, json_t *msg)
{
    buf_t b;
    buf_init(&b, 8192);
    if (msg && wire_write(&b, WIRE_NAT, msg) == 0)
        mesh_send_on(m, c, (uint8_t *)b.data, b.len, false);
    json_decref(msg);
    buf_free(&b);
}

static void remote_str(tp_conn_t *c, char *out, size_t len)
{
    struct sockaddr_storage ss;
    tp_conn_remote(c, &ss);
    if (tp_addr_virtual((struct sockaddr *)&ss) ||
        addr_format((struct sockaddr *)&ss, out, len) != 0)
        out[0] = '\0';
}

static bool has_rtt_to(mesh_t *m, const char *who, const char *to)
{
    const gossip_peer_t *gp = m->g ? gossip_find(m->g, who) : NULL;
    json_t *rtt = gp && gp->ann ? json_object_get(gp->ann, "rtt_ms") : NULL;
    return json_object_get(rtt, to) != NULL;
}

/* Up to max members with a ready connection here that are connected to target (by their or its
 * rtt_ms), nearest first in gossip's order; want_relay: only those offering to relay. */
static size_t pick_helpers(mesh_t *m, const char *target, bool want_relay, const char **out,
                           size_t max)
{
    size_t n = 0;
    for (int pass = 0; pass < 2 && n < max; pass++)
        for (size_t i = 0; m->g && i < gossip_peer_count(m->g) && n < max; i++) {
            const gossip_peer_t *gp = gossip_peer_at(m->g, i);
            if (gp->state != GOSSIP_ALIVE || strcmp(gp->id, target) == 0) continue;
            if (!peer_speaks_nat(m, gp->id)) continue;
            if (want_relay && !json_is_true(json_object_get(gp->ann, "relay"))) continue;
            tp_conn_t *c = tp_find(m->ep, gp->id);
            struct sockaddr_storage ss;
            if (!c) continue;
            tp_conn_remote(c, &ss);
            if (tp_addr_virtual((struct sockaddr *)&ss)) continue; /* helpers on direct paths */
            bool linked = has_rtt_to(m, gp->id, target) || has_rtt_to(m, target, gp->id);
            if (pass == 0 ? !linked : linked) continue; /* linked ones first, then the rest */
            bool dup = false;
            for (size_t k = 0; k < n; k++)
                dup |= strcmp(out[k], gp->id) == 0;
            if (!dup) out[n++] = gp->id;
        }
    return n;
}

void mesh_nat_dialing(mesh_t *m, mpeer_t *p)
{
    const gossip_peer_t *gp = m->g ? gossip_find(m->g, p->id) : NULL;
    if (!gp || !gp->ann || !json_is_true(json_object_get(gp->ann, "behind_nat"))) return;
    bool natted = m->nat.symmetric;
    for (size_t i = 0; i < m->n_extra; i++)
        natted |= m->extra[i].kind == MESH_CAND_REFLEXIVE;
    if (natted && p->nat_stage == MESH_NAT_NONE) mesh_nat_unreachable(m, p);
}

void mesh_nat_unreachable(mesh_t *m, mpeer_t *p)
{
    if (m->stopping || m->passive || !m->g) return;
    const gossip_peer_t *gp = gossip_find(m->g, p->id);
    if (!gp || gp->state != GOSSIP_ALIVE || !peer_speaks_nat(m, p->id)) return;
    uint64_t now = mesh_now(m);
    const char *helpers[2];
    if (p->nat_stage == MESH_NAT_NONE || now - p->nat_at >= NAT_RETRY_MS) {
        size_t n = pick_helpers(m, p->id, false, helpers, 2);
        if (n == 0) return;
        p->nat_stage = MESH_NAT_PUNCH;
        p->nat_at = now;
        m->nat.punch_asked++;
        LOGI("mesh", "cannot reach %.12s directly: asking %.12s%s to coordinate a hole punch",
             p->id, helpers[0], n > 1 ? " (and another member)" : "");
        for (size_t i = 0; i < n; i++)
            nat_send(m, tp_find(m->ep, helpers[i]),
                     json_pack("{s:s,s:s}", "type", "punch_req", "to", p->id));
        return;
    }
    if (p->nat_stage == MESH_NAT_PUNCH && now - p->nat_at >= PUNCH_WAIT_MS) {
        size_t n = pick_helpers(m, p->id, true, helpers, 1);
        p->nat_stage = MESH_NAT_RELAY;
        p->nat_at = now;
        if (n == 0) {
            LOGW("mesh",
                 "cannot reach %.12s: no direct path, the hole punch failed, and no member "
                 "offers to relay (--relay); trying again in %d s",
                 p->id, NAT_RETRY_MS / 1000);
            return;
        }
        m->nat.relay_asked++;
        LOGI("mesh", "hole punch to %.12s failed: asking %.12s to relay", p->id, helpers[0]);
        nat_send(m, tp_find(m->ep, helpers[0]),
                 json_pack("{s:s,s:s}", "type", "relay_req", "to", p->id));
    }
}

/* punch_req from `from` (connected here) about `to`: tell both the other's address. */
static void on_punch_req(mesh_t *m, tp_conn_t *cf, const char *from, json_t *f)
{
    const char *to = json_string_value(json_object_get(f, "to"));
    tp_conn_t *ct = to ? tp_find(m->ep, to) : NULL;
    uint64_t now = mesh_now(m);
    if (now - m->nat.coord_window >= 1000) {
        m->nat.coord_window = now;
        m->nat.coord_count = 0;
    }
    if (!ct || m->nat.coord_count >= COORD_PER_S || strcmp(to, from) == 0 ||
        !peer_speaks_nat(m, to))
        return; /* an older node would not understand the punch */
    m->nat.coord_count++;
    char a_addr[64], b_addr[64];
    remote_str(cf, a_addr, sizeof a_addr);
    remote_str(ct, b_addr, sizeof b_addr);
    if (!a_addr[0] || !b_addr[0]) return; /* one of them reaches us only over a relay */
    m->nat.coordinated++;
    LOGD("mesh", "coordinating a hole punch between %.12s (%s) and %.12s (%s)", from, a_addr, to,
         b_addr);
    nat_send(m, cf, json_pack("{s:s,s:s,s:[s]}", "type", "punch", "peer", to, "addrs", b_addr));
    nat_send(m, ct, json_pack("{s:s,s:s,s:[s]}", "type", "punch", "peer", from, "addrs", a_addr));
}

/* A numeric candidate this node's socket can send to (IPv6 ones only on an IPv6 socket). */
static int parse_cand(mesh_t *m, const char *s, struct sockaddr_storage *sa)
{
    if (!s || strlen(s) >= TOKEN_ADDR_MAX || addr_parse(s, sa) != 0) return -EINVAL;
    if (sa->ss_family == AF_INET6 && !tp_endpoint_ipv6(m->ep)) return -EAFNOSUPPORT;
    return tp_addr_virtual((struct sockaddr *)sa) ? -EINVAL : 0;
}

/* punch from a coordinator: send punches to the peer's addresses (the coordinator's view of it
 * and its announced ones), then dial them all. */
static void on_punch(mesh_t *m, const char *from, json_t *f)
{
    const char *peer = json_string_value(json_object_get(f, "peer"));
    const gossip_peer_t *gp = peer && m->g ? gossip_find(m->g, peer) : NULL;
    if (!gp || gp->state != GOSSIP_ALIVE || strcmp(peer, m->id.id) == 0) return;
    mpeer_t *p = mesh_peer_get(m, peer, true);
    if (!p) return;
    uint64_t now = mesh_now(m);
    if (p->punched_until > now + 8000) return; /* one punch at a time per peer */
    struct sockaddr_storage to[MAX_PUNCH_ADDRS + MAX_ADDRS];
    size_t n = 0;
    json_t *arr = json_object_get(f, "addrs"), *v;
    size_t i;
    json_array_foreach(arr, i, v)
    {
        if (i >= MAX_PUNCH_ADDRS) break;
        if (parse_cand(m, json_string_value(v), &to[n]) == 0) n++;
    }
    json_t *ann = json_object_get(gp->ann, "addrs");
    json_array_foreach(ann, i, v)
    {
        if (n >= sizeof to / sizeof *to) break;
        if (parse_cand(m, json_string_value(v), &to[n]) == 0) n++;
    }
    if (n == 0) return;
    if (m->punch_hook) m->punch_hook(m, to, n); /* our TURN allocation lets the peer in too */
    p->punched_until = now + 10000;
    m->nat.punches++;
    LOGD("mesh", "hole punch to %.12s (coordinated by %.12s): %zu address(es)", peer, from, n);
    for (int r = 0; r < PUNCH_ROUNDS; r++)
        for (size_t k = 0; k < n; k++)
            tp_punch(m->ep, (struct sockaddr *)&to[k]);
    if (tp_find(m->ep, peer)) return;
    for (size_t k = 0; k < n; k++)
        if (tp_dial(m->ep, peer, (struct sockaddr *)&to[k], NULL) == 0) p->dials++;
    p->dial_deadline = now + m->tm.dial_timeout + 1000;
}

/* relay_req from `from` about `to`: a session between their addresses here. */
static void on_relay_req(mesh_t *m, tp_conn_t *cf, const char *from, json_t *f)
{
    const char *to = json_string_value(json_object_get(f, "to"));
    tp_conn_t *ct = to ? tp_find(m->ep, to) : NULL;
    if (!m->o.relay || !ct || strcmp(to, from) == 0) return;
    struct sockaddr_storage a, b;
    tp_conn_remote(cf, &a);
    tp_conn_remote(ct, &b);
    if (tp_addr_virtual((struct sockaddr *)&a) || tp_addr_virtual((struct sockaddr *)&b)) return;
    /* caps: sessions per member; stale sessions go first */
    size_t held = 0;
    uint64_t now = mesh_now(m);
    for (size_t i = 0; i < m->nat.n_sessions;) {
        mesh_rsess_t *s = &m->nat.sessions[i];
        tp_relay_info_t info;
        bool gone = tp_relay_session_info(m->ep, s->sid, &info) != 0 ||
                    (now - (info.last_ms > s->at ? info.last_ms : s->at) >= RELAY_IDLE_MS) ||
                    !tp_find(m->ep, s->a) || !tp_find(m->ep, s->b);
        bool same = (!strcmp(s->a, from) && !strcmp(s->b, to)) ||
                    (!strcmp(s->a, to) && !strcmp(s->b, from));
        if (gone) {
            tp_relay_session_del(m->ep, s->sid);
            *s = m->nat.sessions[--m->nat.n_sessions];
            continue;
        }
        if (same) { /* both asked (or one again): the session they may already use, unchanged */
            char hex[2 * TP_SID_LEN + 1];
            hex_encode(s->sid, TP_SID_LEN, hex);
            tp_conn_t *ca = tp_find(m->ep, s->a), *cb = tp_find(m->ep, s->b);
            nat_send(m, ca,
                     json_pack("{s:s,s:s,s:s,s:i}", "type", "relay", "peer", s->b, "sid", hex,
                               "side", 0));
            nat_send(m, cb,
                     json_pack("{s:s,s:s,s:s,s:i}", "type", "relay", "peer", s->a, "sid", hex,
                               "side", 1));
            return;
        }
        held += !strcmp(s->a, from) || !strcmp(s->b, from);
        i++;
    }
    if (held >= RELAY_MAX_PER_PEER || m->nat.n_sessions >= MESH_MAX_RSESS) {
        LOGW("mesh", "relay for %.12s refused: %zu session(s) already", from, held);
        return;
    }
    mesh_rsess_t *s = &m->nat.sessions[m->nat.n_sessions];
    randombytes_buf(s->sid, sizeof s->sid);
    if (tp_relay_session_add(m->ep, s->sid, (struct sockaddr *)&a, (struct sockaddr *)&b,
                             m->o.relay_rate) != 0)
        return;
    snprintf(s->a, sizeof s->a, "%s", from);
    snprintf(s->b, sizeof s->b, "%s", to);
    s->at = now;
    m->nat.n_sessions++;
    m->nat.relayed++;
    char hex[2 * TP_SID_LEN + 1];
    hex_encode(s->sid, TP_SID_LEN, hex);
    LOGI("mesh", "relaying between %.12s and %.12s (they cannot reach each other)", from, to);
    nat_send(m, cf,
             json_pack("{s:s,s:s,s:s,s:i}", "type", "relay", "peer", to, "sid", hex, "side", 0));
    nat_send(m, ct,
             json_pack("{s:s,s:s,s:s,s:i}", "type", "relay", "peer", from, "sid", hex, "side", 1));
}

/* relay from the relay `from`: this node's end of the session; side 0 (it asked) dials. */
static void on_relay(mesh_t *m, tp_conn_t *cf, const char *from, json_t *f)
{
    const char *peer = json_string_value(json_object_get(f, "peer"));
    const char *sidx = json_string_value(json_object_get(f, "sid"));
    json_int_t side = json_integer_value(json_object_get(f, "side"));
    uint8_t sid[TP_SID_LEN];
    const gossip_peer_t *gp = peer && m->g ? gossip_find(m->g, peer) : NULL;
    if (!gp || gp->state != GOSSIP_ALIVE || !sidx || strlen(sidx) != 2 * TP_SID_LEN ||
        hex_decode(sidx, strlen(sidx), sid, sizeof sid) != 0 || (side != 0 && side != 1))
        return;
    struct sockaddr_storage rs;
    tp_conn_remote(cf, &rs);
    if (tp_addr_virtual((struct sockaddr *)&rs) ||
        !json_is_true(json_object_get(gossip_find(m->g, from)->ann, "relay")))
        return; /* only a relay on a direct path, which says it relays */
    mpeer_t *p = mesh_peer_get(m, peer, true);
    if (!p) return;
    struct sockaddr_storage relay, virt;
    tp_conn_remote(cf, &relay);
    tp_conn_t *cur = tp_find(m->ep, peer);
    struct sockaddr_storage cs;
    if (cur) tp_conn_remote(cur, &cs);
    if (p->has_route && memcmp(p->sid, sid, sizeof sid) != 0 && cur &&
        tp_addr_virtual((struct sockaddr *)&cs))
        return; /* a relayed connection is up on the route it has: keep it */
    if (p->has_route && memcmp(p->sid, sid, sizeof sid) != 0) tp_route_del(m->ep, p->sid);
    if (tp_route_add(m->ep, sid, (int)side, (struct sockaddr *)&relay, &virt) != 0) {
        p->has_route = false;
        return;
    }
    p->has_route = true;
    memcpy(p->sid, sid, sizeof sid);
    snprintf(p->relay_id, sizeof p->relay_id, "%s", from);
    if (side == 0 && !tp_find(m->ep, peer) &&
        tp_dial(m->ep, peer, (struct sockaddr *)&virt, NULL) == 0) {
        p->dials++;
        p->dial_deadline = mesh_now(m) + m->tm.dial_timeout + 1000;
    }
}

void mesh_nat_receive(mesh_t *m, tp_conn_t *c, const char *from, json_t *f)
{
    const char *type = json_string_value(json_object_get(f, "type"));
    const gossip_peer_t *gp = m->g ? gossip_find(m->g, from) : NULL;
    if (!type || !gp || gp->state != GOSSIP_ALIVE || m->passive || m->stopping) {
        m->msgs_bad++;
        return;
    }
    if (!strcmp(type, "punch_req"))
        on_punch_req(m, c, from, f);
    else if (!strcmp(type, "punch"))
        on_punch(m, from, f);
    else if (!strcmp(type, "relay_req"))
        on_relay_req(m, c, from, f);
    else if (!strcmp(type, "relay"))
        on_relay(m, c, from, f);
    else
        m->msgs_bad++;
}

/* ---- connections ---- */

/* Whether addr is one of the peer's announced addresses of kind "local" (its interfaces). */
static bool peer_local_addr(const gossip_peer_t *gp, const char *addr)
{
    json_t *arr = gp && gp->ann ? json_object_get(gp->ann, "addrs") : NULL, *v;
    size_t i;
    json_array_foreach(arr, i, v)
    {
        const char *a = json_string_value(v);
        if (a && !strcmp(a, addr)) return !strcmp(peer_addr_kind(gp, addr), "local");
    }
    return false;
}

/* How a connection's path was made, the same on both ends: relayed (a virtual address), mapped
 * (one end reached the other's router mapping: the remote address is the peer's mapped candidate,
 * or the address the peer sees us at is ours), punched (both ends behind NATs: each reaches the
 * other at an address that is not the other's own), else direct. */
static const char *path_of(mesh_t *m, tp_conn_t *c, const char *id)
{
    struct sockaddr_storage ss;
    char ra[64] = "";
    tp_conn_remote(c, &ss);
    if (tp_turn_peer(m->ep, (struct sockaddr *)&ss, NULL)) return "turn"; /* our TURN allocation */
    if (tp_addr_virtual((struct sockaddr *)&ss)) return "relayed";
    addr_format((struct sockaddr *)&ss, ra, sizeof ra);
    const gossip_peer_t *gp = m->g ? gossip_find(m->g, id) : NULL;
    const char *seen = tp_conn_seen(c);
    if (!strcmp(peer_addr_kind(gp, ra), "relay")) return "turn"; /* the peer's TURN allocation */
    if (!strcmp(peer_addr_kind(gp, ra), "mapped")) return "mapped";
    bool we_natted = false;
    for (size_t i = 0; i < m->n_extra; i++)
        if (seen[0] && !strcmp(m->extra[i].addr, seen)) {
            if (m->extra[i].kind == MESH_CAND_MAPPED) return "mapped";
            we_natted = true; /* the peer sees us at a reflexive address */
        }
    bool peer_natted = ra[0] && !peer_local_addr(gp, ra);
    return peer_natted && we_natted ? "punched" : "direct";
}

void mesh_nat_conn_ready(mesh_t *m, tp_conn_t *c, mpeer_t *p)
{
    /* a reflexive candidate: the address this peer sees us at, when not one of ours */
    const char *seen = tp_conn_seen(c);
    if (seen[0] && strncmp(seen, "127.", 4) != 0 && !own_addr(m, seen)) {
        bool mapped = false; /* or our TURN relayed address, which a peer over TURN sees */
        for (size_t i = 0; i < m->n_extra; i++)
            mapped |=
                (m->extra[i].kind == MESH_CAND_MAPPED || m->extra[i].kind == MESH_CAND_RELAY) &&
                !strcmp(m->extra[i].addr, seen);
        /* the same public address with another port: a symmetric NAT (a port per destination),
         * whose reflexive addresses lead nowhere: none is announced */
        char ip[TOKEN_ADDR_MAX], ip2[TOKEN_ADDR_MAX];
        int port, port2;
        bool symmetric = m->nat.symmetric;
        for (size_t i = 0; !mapped && i < m->n_extra; i++)
            if (m->extra[i].kind == MESH_CAND_REFLEXIVE &&
                addr_split(seen, ip, sizeof ip, &port) == 0 &&
                addr_split(m->extra[i].addr, ip2, sizeof ip2, &port2) == 0 && !strcmp(ip, ip2) &&
                port != port2)
                symmetric = true;
        if (symmetric && !m->nat.symmetric) {
            m->nat.symmetric = true;
            LOGI("mesh",
                 "peers see this node at %s and at other ports of that address: its NAT maps "
                 "every destination to its own port (symmetric), so no reflexive address is "
                 "announced; peers that cannot reach it are relayed",
                 seen);
            for (size_t i = 0; i < m->n_extra;)
                if (m->extra[i].kind == MESH_CAND_REFLEXIVE)
                    m->extra[i] = m->extra[--m->n_extra];
                else
                    i++;
            addrs_changed(m);
        }
        if (!mapped && !m->nat.symmetric && extra_set(m, seen, MESH_CAND_REFLEXIVE)) {
            LOGI("mesh", "peer %.12s sees this node at %s (a NAT's public address): announced",
                 tp_conn_peer_id(c), seen);
            addrs_changed(m);
        }
    }
    if (!p) return;
    const char *path = path_of(m, c, p->id);
    snprintf(p->path, sizeof p->path, "%s", path);
    if (!strcmp(path, "relayed")) m->nat.relayed_conns++;
    if (!strcmp(path, "punched")) m->nat.punched_conns++;
    if (!strcmp(path, "turn")) m->nat.turn_conns++;
    if (tp_find(m->ep, p->id) == c) { /* its preferred connection now */
        p->nat_stage = !strcmp(path, "relayed") ? MESH_NAT_RELAYED : MESH_NAT_NONE;
        p->nat_at = mesh_now(m);
    }
}

void mesh_nat_conn_closed(mesh_t *m, tp_conn_t *c, mpeer_t *p)
{
    struct sockaddr_storage ss;
    tp_conn_remote(c, &ss);
    if (!p || !p->has_route || !tp_addr_virtual((struct sockaddr *)&ss)) return;
    /* a duplicate over the same route (both ends dialled) closed: the one kept still uses it */
    tp_conn_t *other = tp_find(m->ep, p->id);
    struct sockaddr_storage os;
    if (other && other != c) {
        tp_conn_remote(other, &os);
        if (tp_addr_virtual((struct sockaddr *)&os)) return;
    }
    tp_route_del(m->ep, p->sid);
    p->has_route = false;
    if (p->nat_stage == MESH_NAT_RELAYED) p->nat_stage = MESH_NAT_NONE;
}

/* Every ADDR_SCAN_MS: the interfaces' addresses again. A node that moved (a laptop on another
 * network) announces its new addresses at once; its reflexive candidates belonged to the old
 * network and go (peers report the new ones as they reconnect). */
static void addr_scan(mesh_t *m, uint64_t now)
{
    if (now - m->nat.scan_at < ADDR_SCAN_MS || m->stopping) return;
    m->nat.scan_at = now;
    char before[MAX_ADDRS][TOKEN_ADDR_MAX];
    size_t nb = m->n_addrs;
    memcpy(before, m->addrs, sizeof before);
    mesh_nat_addrs(m);
    bool same = nb == m->n_addrs;
    for (size_t i = 0; same && i < nb; i++)
        same = strcmp(before[i], m->addrs[i]) == 0;
    if (same) return;
    LOGI("mesh", "this node's addresses changed (%s%s): announcing them", m->addrs[0],
         m->n_addrs > 1 ? ", …" : "");
    for (size_t i = 0; i < m->n_extra;)
        if (m->extra[i].kind == MESH_CAND_REFLEXIVE)
            m->extra[i] = m->extra[--m->n_extra];
        else
            i++;
    m->nat.symmetric = false;
    addrs_changed(m);
}

/* From the gossip tick and every NAT_TICK_MS: the interfaces rescanned; a punch that brought no
 * connection in PUNCH_WAIT_MS goes on to a relay (and a peer still unreached NAT_RETRY_MS after
 * the relay request is punched again), whether or not anything else is sent to the peer;
 * relayed peers try for a direct path again every UPGRADE_MS. */
void mesh_nat_tick(mesh_t *m)
{
    uint64_t now = mesh_now(m);
    addr_scan(m, now);
    for (mpeer_t *p = m->peers; p && !m->stopping; p = p->next) {
        bool due = (p->nat_stage == MESH_NAT_PUNCH && now - p->nat_at >= PUNCH_WAIT_MS) ||
                   (p->nat_stage == MESH_NAT_RELAY && now - p->nat_at >= NAT_RETRY_MS);
        if (due && !tp_find(m->ep, p->id)) mesh_nat_unreachable(m, p);
    }
    for (mpeer_t *p = m->peers; p; p = p->next) {
        if (p->nat_stage != MESH_NAT_RELAYED || now - p->nat_at < UPGRADE_MS) continue;
        tp_conn_t *c = tp_find(m->ep, p->id);
        struct sockaddr_storage ss;
        if (!c) continue;
        tp_conn_remote(c, &ss);
        if (!tp_addr_virtual((struct sockaddr *)&ss)) continue;
        const char *helpers[1];
        p->nat_at = now;
        if (pick_helpers(m, p->id, false, helpers, 1) == 1) {
            m->nat.upgrades++;
            nat_send(m, tp_find(m->ep, helpers[0]),
                     json_pack("{s:s,s:s}", "type", "punch_req", "to", p->id));
        }
    }
}

json_t *mesh_nat_peer_json(mesh_t *m, const char *id)
{
    mpeer_t *p = mesh_peer_get(m, id, false);
    tp_conn_t *c = tp_find(m->ep, id);
    if (!c || !p || !p->path[0]) return json_pack("{s:n}", "path");
    char ra[64] = "";
    struct sockaddr_storage ss;
    tp_conn_remote(c, &ss);
    struct sockaddr_storage tpeer;
    if (tp_turn_peer(m->ep, (struct sockaddr *)&ss, &tpeer)) { /* over our TURN allocation */
        addr_format((struct sockaddr *)&tpeer, ra, sizeof ra);
        return json_pack("{s:s,s:s,s:s}", "path", "turn", "via", "turn", "addr", ra);
    }
    bool relayed = tp_addr_virtual((struct sockaddr *)&ss);
    if (!relayed) addr_format((struct sockaddr *)&ss, ra, sizeof ra);
    json_t *o = json_pack("{s:s}", "path", path_of(m, c, id)); /* announcements may be newer */
    if (o && relayed) json_object_set_new(o, "via", json_string(p->relay_id));
    if (o && ra[0]) json_object_set_new(o, "addr", json_string(ra));
    return o;
}

json_t *mesh_nat_status(mesh_t *m)
{
    json_t *cands = json_array();
    for (size_t i = 0; cands && i < m->n_extra; i++)
        json_array_append_new(cands, json_pack("{s:s,s:s}", "addr", m->extra[i].addr, "kind",
                                               mesh_cand_kind_name(m->extra[i].kind)));
    const tp_stats_t *ts = tp_stats(m->ep);
    bool refl = false;
    for (size_t i = 0; i < m->n_extra; i++)
        refl |= m->extra[i].kind == MESH_CAND_REFLEXIVE;
    json_t *o = json_pack(
        "{s:o,s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "candidates", cands, "relay",
        m->o.relay, "punch_asked", (json_int_t)m->nat.punch_asked, "punched_conns",
        (json_int_t)m->nat.punched_conns, "relay_asked", (json_int_t)m->nat.relay_asked,
        "relayed_conns", (json_int_t)m->nat.relayed_conns, "coordinated",
        (json_int_t)m->nat.coordinated, "relay_sessions", (json_int_t)tp_relay_session_count(m->ep),
        "relay_forwarded", (json_int_t)ts->relay_forwarded, "relay_dropped",
        (json_int_t)ts->relay_dropped, "punches_in", (json_int_t)ts->punches_in, "upgrades",
        (json_int_t)m->nat.upgrades);
    /* what peers' views say of this node's NAT: none seen, one public ip:port for all
     * (endpoint-independent), or a port per destination (symmetric) */
    if (o)
        json_object_set_new(o, "mapping",
                            json_string(m->nat.symmetric ? "symmetric"
                                        : refl           ? "endpoint-independent"
                                                         : "none seen"));
    return o;
}

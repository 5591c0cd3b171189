/* mesh_turn — STUN and TURN servers for the mesh (--stun, --turn; mesh.h mesh_servers_start,
 * docs/nat.md). Everything goes through the QUIC endpoint's own UDP socket (transport.h "STUN and
 * TURN servers"), so the mappings the servers see are the QUIC port's:
 *  - STUN: a Binding request to each server at start and every STUN_INTERVAL_MS (RFC 8489
 *    retransmissions, core/turn_client.h stun_bind_*); the XOR-MAPPED-ADDRESS becomes this
 *    node's reflexive candidate (mesh_set_stun_addr).
 *  - TURN: one allocation (core/turn_client.h turn_*), refreshed by the client; its relayed
 *    address is announced as a "relay" candidate (mesh_set_turn_addr). A peer that cannot reach
 *    this node otherwise dials that address; the server passes its packets only once this node
 *    holds a permission for the peer's IP, so the addresses of every peer gossip tells about
 *    (and of every peer a hole punch is coordinated with) get one (at most TURN_MAX_PEERS). The
 *    peer's packets arrive as Data indications / ChannelData, unwrapped here and handed to QUIC
 *    from a virtual address (tp_turn_deliver); QUIC's packets to it come back here
 *    (tp_turn_set_sender) and go to the server wrapped (ChannelData once the channel is bound).
 *    A failed allocation (a wrong password, no answer) is logged, the relay candidate goes, and
 *    it is tried again after TURN_RETRY_MIN_MS doubling to TURN_RETRY_MAX_MS.
 * One uv timer drives both clients (their next_timeout). The password lives only in the TURN
 * client's copy (wiped at stop); it is never logged or put in the status. */
#include <errno.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mesh_int.h"
#include "stun.h"
#include "turn_client.h"
#include "util.h"

#define MT_MAX_STUN 4
#define STUN_INTERVAL_MS 300000
#define TURN_RETRY_MIN_MS 30000
#define TURN_RETRY_MAX_MS 900000
#define TURN_LIFETIME_S 600
#define MT_BUF 2048
#define MT_DEFAULT_PORT 3478

typedef struct {
    char spec[TOKEN_ADDR_MAX];
    char host[TOKEN_ADDR_MAX];
    int port;
    struct sockaddr_storage addr;
    bool resolved, unresolvable, failed_logged;
    stun_bind_t b;
    uint64_t next_round;
    char mapped[64];
} mt_server_t;

typedef struct mesh_turn {
    mesh_t *m;
    uv_loop_t *loop;
    uv_timer_t timer;
    bool stopped, timer_closed;
    int pending_resolves;
    mt_server_t stun[MT_MAX_STUN];
    size_t n_stun;
    bool has_turn, tc_on;
    mt_server_t turn;
    turn_client_t tc;
    char user[TURN_MAX_CRED + 1], pass[TURN_MAX_CRED + 1];
    uint64_t retry_at, backoff;
    char relayed[64], error[TURN_REASON_LEN];
    uint64_t allocations, failures;
    uint8_t buf[MT_BUF];
} mesh_turn_t;

typedef struct {
    uv_getaddrinfo_t req;
    mesh_turn_t *mt;
    mt_server_t *srv;
} mt_resolve_t;

static void mt_arm(mesh_turn_t *mt);
static void mt_kick(mesh_turn_t *mt);

static bool same_sa(const struct sockaddr_storage *a, const struct sockaddr *b)
{
    const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
    return a->ss_family == AF_INET && b->sa_family == AF_INET && x->sin_port == y->sin_port &&
           x->sin_addr.s_addr == y->sin_addr.s_addr;
}

/* Addresses a TURN server on the internet cannot (or should not) reach: RFC 1918, carrier NAT,
 * link-local, loopback, 0/8. */
static bool private_v4(uint32_t ip)
{
    return (ip >> 24) == 10 || (ip >> 20) == 0xAC1 || (ip >> 16) == 0xC0A8 ||
           (ip >> 22) == (100u << 2 | 1) || (ip >> 16) == 0xA9FE || (ip >> 24) == 127 ||
           (ip >> 24) == 0;
}

static void maybe_free(mesh_turn_t *mt)
{
    if (mt->stopped && mt->timer_closed && mt->pending_resolves == 0) {
        sodium_memzero(mt, sizeof *mt);
        free(mt);
    }
}

static int parse_server(mt_server_t *s, const char *spec, const char *scheme)
{
    const char *p = spec;
    size_t sl = strlen(scheme);
    if (strncmp(p, scheme, sl) == 0) p += sl;
    if (strlen(spec) >= sizeof s->spec || !*p) return -EINVAL;
    snprintf(s->spec, sizeof s->spec, "%s", spec);
    if (addr_split(p, s->host, sizeof s->host, &s->port) != 0) {
        /* no port: the default */
        if (strlen(p) >= sizeof s->host || strchr(p, ':') || strchr(p, '/')) return -EINVAL;
        snprintf(s->host, sizeof s->host, "%s", p);
        s->port = MT_DEFAULT_PORT;
    }
    return 0;
}

/* ---- datagrams out ---- */

static void send_to(mesh_turn_t *mt, const mt_server_t *s, const uint8_t *p, size_t n)
{
    if (!mt->stopped && s->resolved)
        tp_send_raw(mt->m->ep, (const struct sockaddr *)&s->addr, p, n);
}

static void flush_stun(mesh_turn_t *mt, mt_server_t *s, uint64_t now)
{
    int n;
    while ((n = stun_bind_poll_send(&s->b, mt->buf, sizeof mt->buf, now)) > 0)
        send_to(mt, s, mt->buf, (size_t)n);
}

static void flush_turn(mesh_turn_t *mt, uint64_t now)
{
    int n;
    while (mt->tc_on && (n = turn_poll_send(&mt->tc, mt->buf, sizeof mt->buf, now)) > 0)
        send_to(mt, &mt->turn, mt->buf, (size_t)n);
}

/* ---- permissions ---- */

static bool ip_known(const turn_client_t *tc, const stun_addr_t *a, bool need_ready)
{
    for (size_t i = 0; i < TURN_MAX_PEERS; i++) {
        const turn_peer_t *p = &tc->peers[i];
        if (p->used && p->addr.family == a->family && !memcmp(p->addr.ip, a->ip, 4) &&
            (!need_ready || p->perm == TURN_P_READY))
            return true;
    }
    return false;
}

void mesh_turn_permit_sa(mesh_t *m, const struct sockaddr_storage *a, size_t n)
{
    mesh_turn_t *mt = m->turn;
    if (!mt || !mt->tc_on || mt->stopped) return;
    turn_state_t st = turn_state(&mt->tc);
    if (st != TURN_ALLOCATING && st != TURN_ALLOCATED) return;
    uint32_t server_ip = ntohl(((struct sockaddr_in *)&mt->turn.addr)->sin_addr.s_addr);
    bool allow_private = private_v4(server_ip); /* a server on a private network */
    uint64_t now = uv_now(mt->loop);
    bool added = false;
    for (size_t i = 0; i < n; i++) {
        if (a[i].ss_family != AF_INET) continue; /* the allocation is IPv4 */
        uint32_t ip = ntohl(((const struct sockaddr_in *)&a[i])->sin_addr.s_addr);
        if ((ip >> 24) == 0 || (ip >> 24) == 127 || (!allow_private && private_v4(ip))) continue;
        stun_addr_t sa;
        if (stun_addr_from_sockaddr((const struct sockaddr *)&a[i], &sa) != 0) continue;
        if (ip_known(&mt->tc, &sa, false)) continue; /* a permission is per IP */
        int rc = turn_add_peer(&mt->tc, &sa, now);
        if (rc >= 0) {
            added = true;
            char s[64];
            LOGD("mesh", "TURN: permission asked for %s", stun_addr_str(&sa, s, sizeof s));
        }
    }
    if (added) mt_kick(mt);
}

void mesh_turn_permit_ann(mesh_t *m, json_t *ann)
{
    if (!m->turn || !ann) return;
    struct sockaddr_storage to[MAX_ADDRS];
    size_t n = 0, i;
    json_t *v;
    json_array_foreach(json_object_get(ann, "addrs"), i, v)
    {
        const char *s = json_string_value(v);
        if (n < MAX_ADDRS && s && strlen(s) < TOKEN_ADDR_MAX && addr_parse(s, &to[n]) == 0) n++;
    }
    mesh_turn_permit_sa(m, to, n);
}

/* permissions for every live peer gossip knows (after a fresh allocation) */
static void permit_all_known(mesh_turn_t *mt)
{
    mesh_t *m = mt->m;
    for (size_t i = 0; m->g && i < gossip_peer_count(m->g); i++) {
        const gossip_peer_t *gp = gossip_peer_at(m->g, i);
        if (gp->state == GOSSIP_ALIVE) mesh_turn_permit_ann(m, gp->ann);
    }
}

/* ---- TURN ---- */

static void turn_begin(mesh_turn_t *mt, uint64_t now)
{
    turn_config_t cfg = {.username = mt->user, .password = mt->pass, .lifetime_s = TURN_LIFETIME_S};
    if (turn_init(&mt->tc, &cfg) != 0 || turn_start(&mt->tc, now) != 0) {
        snprintf(mt->error, sizeof mt->error, "the TURN client cannot start");
        mt->tc_on = false;
        mt->retry_at = UINT64_MAX;
        return;
    }
    mt->tc_on = true;
    LOGD("mesh", "TURN server %s: allocating", mt->turn.spec);
}

static void turn_events(mesh_turn_t *mt, uint64_t now)
{
    turn_event_t ev;
    char a[64];
    while (mt->tc_on && turn_next_event(&mt->tc, &ev)) {
        switch (ev.type) {
        case TURN_EV_ALLOCATED:
            stun_addr_str(&ev.relayed, mt->relayed, sizeof mt->relayed);
            mt->error[0] = '\0';
            mt->allocations++;
            mt->backoff = TURN_RETRY_MIN_MS;
            LOGI("mesh",
                 "TURN server %s: relayed address %s (lifetime %u s), announced as a relay "
                 "candidate",
                 mt->turn.spec, mt->relayed, (unsigned)ev.lifetime);
            mesh_set_turn_addr(mt->m, mt->relayed);
            permit_all_known(mt);
            break;
        case TURN_EV_FAILED:
            mt->failures++;
            snprintf(mt->error, sizeof mt->error, "%s", ev.reason ? ev.reason : "failed");
            LOGE("mesh", "TURN server %s: %s; no relay candidate, trying again in %llu s",
                 mt->turn.spec, mt->error, (unsigned long long)(mt->backoff / 1000));
            mt->relayed[0] = '\0';
            mesh_set_turn_addr(mt->m, NULL);
            tp_turn_routes_clear(mt->m->ep);
            mt->tc_on = false;
            mt->retry_at = now + mt->backoff;
            mt->backoff = mt->backoff * 2 > TURN_RETRY_MAX_MS ? TURN_RETRY_MAX_MS : mt->backoff * 2;
            break;
        case TURN_EV_PERMISSION:
            LOGD("mesh", "TURN: permission for %s", stun_addr_str(&ev.peer, a, sizeof a));
            break;
        case TURN_EV_CHANNEL:
            LOGD("mesh", "TURN: channel %#x for %s", ev.channel,
                 stun_addr_str(&ev.peer, a, sizeof a));
            break;
        case TURN_EV_PEER_FAILED:
            LOGD("mesh", "TURN: %s refused: %s", stun_addr_str(&ev.peer, a, sizeof a),
                 ev.reason ? ev.reason : "");
            break;
        case TURN_EV_REFRESHED:
            LOGD("mesh", "TURN: allocation refreshed (%u s)", (unsigned)ev.lifetime);
            break;
        case TURN_EV_CLOSED:
            mt->tc_on = false;
            break;
        }
    }
}

static void turn_pump(mesh_turn_t *mt, uint64_t now)
{
    flush_turn(mt, now);
    turn_events(mt, now);
    flush_turn(mt, now);
}

/* QUIC's packet for a peer over our allocation (transport: a TURN path's virtual address). Runs
 * inside the transport's send: no events handled here (the timer does that at once). */
static void send_to_peer(void *data, const struct sockaddr *peer, const uint8_t *p, size_t n)
{
    mesh_turn_t *mt = data;
    stun_addr_t sa;
    if (mt->stopped || !mt->tc_on || turn_state(&mt->tc) != TURN_ALLOCATED ||
        stun_addr_from_sockaddr(peer, &sa) != 0)
        return;
    uint64_t now = uv_now(mt->loop);
    int r = turn_wrap(&mt->tc, &sa, p, n, mt->buf, sizeof mt->buf);
    if (r == -ENOENT && turn_add_peer(&mt->tc, &sa, now) >= 0) {
        mt_kick(mt); /* its CreatePermission and ChannelBind go out from the timer */
        r = -EAGAIN;
    }
    if (r == -EAGAIN && ip_known(&mt->tc, &sa, true)) { /* the IP's permission is there */
        uint8_t tid[STUN_TID_LEN];
        randombytes_buf(tid, sizeof tid);
        r = stun_encode_send(mt->buf, sizeof mt->buf, tid, &sa, p, n);
    }
    if (r > 0) send_to(mt, &mt->turn, mt->buf, (size_t)r);
}

/* ---- datagrams in ---- */

static void on_raw(void *data, const struct sockaddr *from, const uint8_t *p, size_t n)
{
    mesh_turn_t *mt = data;
    if (mt->stopped) return;
    uint64_t now = uv_now(mt->loop);
    if (mt->tc_on && mt->turn.resolved && same_sa(&mt->turn.addr, from)) {
        turn_data_t in;
        int r = turn_recv(&mt->tc, p, n, now, &in);
        if (r == 1) {
            struct sockaddr_storage peer;
            if (stun_addr_to_sockaddr(&in.peer, AF_INET, &peer) == 0) {
                if (turn_peer_state(&mt->tc, &in.peer, NULL, NULL) == -ENOENT)
                    turn_add_peer(&mt->tc, &in.peer, now); /* its own channel */
                tp_turn_deliver(mt->m->ep, (const struct sockaddr *)&peer, in.data, in.n);
                if (mt->stopped) return;
            }
        }
        turn_pump(mt, now);
        if (r == 1 || r == -ENOENT) {
            mt_arm(mt);
            return;
        }
    }
    for (size_t i = 0; i < mt->n_stun; i++) {
        mt_server_t *s = &mt->stun[i];
        if (!s->resolved || !same_sa(&s->addr, from)) continue;
        int r = stun_bind_recv(&s->b, p, n);
        if (r != 1 && s->b.state == STUN_BIND_FAILED && !s->failed_logged) {
            LOGW("mesh", "STUN server %s: %s", s->spec, s->b.reason);
            s->failed_logged = true;
        }
        if (r != 1) continue;
        char a[64];
        stun_addr_str(&s->b.mapped, a, sizeof a);
        s->failed_logged = false;
        if (strcmp(a, s->mapped) != 0) {
            snprintf(s->mapped, sizeof s->mapped, "%s", a);
            LOGI("mesh", "STUN server %s sees this node at %s: announced as a reflexive candidate",
                 s->spec, a);
        }
        if (s->b.mapped.family == 4) mesh_set_stun_addr(mt->m, a);
    }
    mt_arm(mt);
}

/* ---- the timer ---- */

static void on_timer(uv_timer_t *t)
{
    mesh_turn_t *mt = t->data;
    if (mt->stopped) return;
    uint64_t now = uv_now(mt->loop);
    for (size_t i = 0; i < mt->n_stun; i++) {
        mt_server_t *s = &mt->stun[i];
        if (!s->resolved) continue;
        if (s->b.state == STUN_BIND_WAITING) {
            stun_bind_tick(&s->b, now);
            if (s->b.state == STUN_BIND_FAILED && !s->failed_logged) {
                LOGW("mesh", "STUN server %s: %s; asking again in %d s", s->spec, s->b.reason,
                     STUN_INTERVAL_MS / 1000);
                s->failed_logged = true;
            }
        } else if (now >= s->next_round) {
            stun_bind_init(&s->b, NULL);
            stun_bind_start(&s->b, now);
            s->next_round = now + STUN_INTERVAL_MS;
        }
        flush_stun(mt, s, now);
    }
    if (mt->has_turn && mt->turn.resolved) {
        if (mt->tc_on)
            turn_tick(&mt->tc, now);
        else if (now >= mt->retry_at)
            turn_begin(mt, now);
        turn_pump(mt, now);
    }
    mt_arm(mt);
}

static void mt_kick(mesh_turn_t *mt)
{
    if (!mt->stopped) uv_timer_start(&mt->timer, on_timer, 0, 0);
}

static void mt_arm(mesh_turn_t *mt)
{
    if (mt->stopped) return;
    uint64_t now = uv_now(mt->loop), next = UINT64_MAX;
    for (size_t i = 0; i < mt->n_stun; i++) {
        const mt_server_t *s = &mt->stun[i];
        if (!s->resolved) continue;
        uint64_t t =
            s->b.state == STUN_BIND_WAITING ? stun_bind_next_timeout(&s->b) : s->next_round;
        if (t < next) next = t;
    }
    if (mt->has_turn && mt->turn.resolved) {
        uint64_t t = mt->tc_on ? turn_next_timeout(&mt->tc) : mt->retry_at;
        if (t < next) next = t;
    }
    if (next == UINT64_MAX)
        uv_timer_stop(&mt->timer);
    else
        uv_timer_start(&mt->timer, on_timer, next > now ? next - now : 0, 0);
}

/* ---- resolving ---- */

static void resolved(mesh_turn_t *mt, mt_server_t *s, const struct sockaddr_in *sa)
{
    memset(&s->addr, 0, sizeof s->addr);
    memcpy(&s->addr, sa, sizeof *sa);
    int rc = tp_set_raw_handler(mt->m->ep, (const struct sockaddr *)&s->addr, on_raw, mt);
    if (rc) {
        LOGW("mesh", "%s: not used (%s)", s->spec, strerror(-rc));
        return;
    }
    s->resolved = true;
    s->next_round = uv_now(mt->loop);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    mt_resolve_t *r = req->data;
    mesh_turn_t *mt = r->mt;
    mt->pending_resolves--;
    if (!mt->stopped) {
        const struct addrinfo *ai = res;
        while (ai && ai->ai_family != AF_INET)
            ai = ai->ai_next;
        if (status == 0 && ai) {
            struct sockaddr_in sa;
            memcpy(&sa, ai->ai_addr, sizeof sa);
            sa.sin_port = htons((uint16_t)r->srv->port);
            resolved(mt, r->srv, &sa);
            mt_arm(mt);
        } else {
            r->srv->unresolvable = true;
            LOGE("mesh", "%s: cannot resolve %s: %s", r->srv->spec, r->srv->host,
                 status ? uv_strerror(status) : "no IPv4 address");
        }
    }
    uv_freeaddrinfo(res);
    free(r);
    maybe_free(mt);
}

static void resolve(mesh_turn_t *mt, mt_server_t *s)
{
    struct sockaddr_in sa;
    if (uv_ip4_addr(s->host, s->port, &sa) == 0) {
        resolved(mt, s, &sa);
        return;
    }
    mt_resolve_t *r = calloc(1, sizeof *r);
    if (!r) return;
    r->mt = mt;
    r->srv = s;
    r->req.data = r;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM};
    if (uv_getaddrinfo(mt->loop, &r->req, on_resolved, s->host, NULL, &hints) != 0) {
        LOGE("mesh", "%s: cannot resolve %s", s->spec, s->host);
        s->unresolvable = true;
        free(r);
        return;
    }
    mt->pending_resolves++;
}

/* ---- life cycle ---- */

int mesh_servers_start(mesh_t *m, const mesh_servers_t *o, char *err, size_t errlen)
{
    if (m->turn) {
        snprintf(err, errlen, "STUN/TURN servers already started");
        return -EALREADY;
    }
    if (o->n_stun == 0 && !o->turn) return 0;
    if (o->n_stun > MT_MAX_STUN) {
        snprintf(err, errlen, "at most %d --stun servers", MT_MAX_STUN);
        return -EINVAL;
    }
    mesh_turn_t *mt = calloc(1, sizeof *mt);
    if (!mt) return -ENOMEM;
    mt->m = m;
    mt->loop = m->loop;
    mt->backoff = TURN_RETRY_MIN_MS;
    for (size_t i = 0; i < o->n_stun; i++)
        if (parse_server(&mt->stun[mt->n_stun++], o->stun[i], "stun:") != 0) {
            snprintf(err, errlen, "--stun needs HOST:PORT (or HOST), got '%s'", o->stun[i]);
            free(mt);
            return -EINVAL;
        }
    if (o->turn) {
        const char *why = NULL;
        if (parse_server(&mt->turn, o->turn, "turn:") != 0)
            why = "--turn needs turn:HOST:PORT";
        else if (!o->turn_user || !*o->turn_user || strlen(o->turn_user) > TURN_MAX_CRED)
            why = "--turn needs --turn-user NAME";
        else if (!o->turn_password || !*o->turn_password ||
                 strlen(o->turn_password) > TURN_MAX_CRED)
            why = "--turn needs a password: --turn-password-file FILE, $MESH_LLM_TURN_PASSWORD "
                  "or the config file's mesh.turn_password";
        if (why) {
            snprintf(err, errlen, "%s", why);
            sodium_memzero(mt, sizeof *mt);
            free(mt);
            return -EINVAL;
        }
        mt->has_turn = true;
        snprintf(mt->user, sizeof mt->user, "%s", o->turn_user);
        snprintf(mt->pass, sizeof mt->pass, "%s", o->turn_password);
    }
    uv_timer_init(m->loop, &mt->timer);
    mt->timer.data = mt;
    m->turn = mt;
    m->punch_hook = mesh_turn_permit_sa;
    tp_turn_set_sender(m->ep, send_to_peer, mt);
    for (size_t i = 0; i < mt->n_stun; i++)
        resolve(mt, &mt->stun[i]);
    if (mt->has_turn) resolve(mt, &mt->turn);
    mt_kick(mt);
    return 0;
}

static void timer_closed(uv_handle_t *h)
{
    mesh_turn_t *mt = h->data;
    mt->timer_closed = true;
    maybe_free(mt);
}

void mesh_servers_stop(mesh_t *m)
{
    mesh_turn_t *mt = m->turn;
    if (!mt) return;
    uint64_t now = uv_now(mt->loop);
    if (mt->tc_on && turn_state(&mt->tc) == TURN_ALLOCATED) {
        turn_close(&mt->tc, now); /* Refresh LIFETIME 0: sent now, not waited for */
        flush_turn(mt, now);
        LOGD("mesh", "TURN server %s: allocation deleted", mt->turn.spec);
    }
    /* the relay candidate stays in the last announcement: the node is leaving anyway */
    tp_turn_set_sender(m->ep, NULL, NULL);
    tp_turn_routes_clear(m->ep);
    for (size_t i = 0; i < mt->n_stun; i++)
        if (mt->stun[i].resolved)
            tp_set_raw_handler(m->ep, (const struct sockaddr *)&mt->stun[i].addr, NULL, NULL);
    if (mt->turn.resolved)
        tp_set_raw_handler(m->ep, (const struct sockaddr *)&mt->turn.addr, NULL, NULL);
    sodium_memzero(mt->pass, sizeof mt->pass);
    sodium_memzero(&mt->tc, sizeof mt->tc);
    mt->stopped = true;
    m->turn = NULL;
    m->punch_hook = NULL;
    uv_close((uv_handle_t *)&mt->timer, timer_closed);
}

/* ---- status ---- */

static const char *turn_state_name(const mesh_turn_t *mt)
{
    if (!mt->turn.resolved) return mt->turn.unresolvable ? "unresolvable" : "resolving";
    if (!mt->tc_on) return mt->error[0] ? "failed" : "idle";
    switch (turn_state(&mt->tc)) {
    case TURN_ALLOCATING:
        return "allocating";
    case TURN_ALLOCATED:
        return "allocated";
    case TURN_CLOSING:
        return "closing";
    case TURN_FAILED:
        return "failed";
    default:
        return "idle";
    }
}

void mesh_turn_status(mesh_t *m, json_t *nat)
{
    json_object_set_new(nat, "turn_conns", json_integer((json_int_t)m->nat.turn_conns));
    mesh_turn_t *mt = m->turn;
    if (!mt) return;
    static const char *const BIND[] = {"idle", "waiting", "done", "failed"};
    json_t *stun = json_array();
    for (size_t i = 0; stun && i < mt->n_stun; i++) {
        const mt_server_t *s = &mt->stun[i];
        const char *st = !s->resolved ? (s->unresolvable ? "unresolvable" : "resolving")
                                      : BIND[s->b.state <= STUN_BIND_FAILED ? s->b.state : 0];
        json_array_append_new(
            stun, json_pack("{s:s,s:s,s:s}", "server", s->spec, "state", st, "mapped", s->mapped));
    }
    json_object_set_new(nat, "stun", stun);
    if (!mt->has_turn) return;
    size_t peers = 0;
    for (size_t i = 0; mt->tc_on && i < TURN_MAX_PEERS; i++)
        peers += mt->tc.peers[i].used;
    const tp_stats_t *ts = tp_stats(m->ep);
    json_object_set_new(nat, "turn",
                        json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "server", mt->turn.spec,
                                  "state", turn_state_name(mt), "relayed", mt->relayed, "error",
                                  mt->error, "peers", (json_int_t)peers, "allocations",
                                  (json_int_t)mt->allocations, "failures", (json_int_t)mt->failures,
                                  "packets_in", (json_int_t)ts->turn_in, "packets_out",
                                  (json_int_t)ts->turn_out));
}

/* mesh_self — what this node says of itself (mesh_int.h): its addresses, its announcement,
 * its invite token and the mesh credentials they carry. Calls only mesh_peers.c. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "log.h"
#include "mesh_int.h"

/* An interface address worth announcing: IPv4, or an IPv6 one that a peer elsewhere can reach
 * (not link-local, whose scope means nothing to the peer, nor an IPv4-mapped one). */
static bool announceable(const uv_interface_address_t *ifa, bool v6)
{
    if (ifa->is_internal) return false;
    if (ifa->address.address4.sin_family == AF_INET) return true;
    const struct in6_addr *a = &ifa->address.address6.sin6_addr;
    return v6 && ifa->address.address6.sin6_family == AF_INET6 && !IN6_IS_ADDR_LINKLOCAL(a) &&
           !IN6_IS_ADDR_V4MAPPED(a) && !IN6_IS_ADDR_UNSPECIFIED(a);
}

static void add_addr(mesh_t *m, const struct sockaddr *sa, int port)
{
    struct sockaddr_storage ss;
    memcpy(&ss, sa,
           sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    if (ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    char a[TOKEN_ADDR_MAX];
    if (m->n_addrs >= MAX_ADDRS - 1 || addr_format((struct sockaddr *)&ss, a, sizeof a) != 0)
        return;
    if (!mesh_own_addr(m, a)) memcpy(m->addrs[m->n_addrs++], a, strlen(a) + 1);
}

/* The interfaces' addresses: IPv4 first, then IPv6 where the socket speaks it; the loopback
 * address last. A bind address other than a wildcard is the one address. */
void mesh_addrs_init(mesh_t *m)
{
    int port = tp_endpoint_port(m->ep);
    m->n_addrs = 0;
    const char *bh = m->o.bind_host;
    if (bh && strcmp(bh, "0.0.0.0") != 0 && strcmp(bh, "::") != 0) {
        snprintf(m->addrs[m->n_addrs++], TOKEN_ADDR_MAX, strchr(bh, ':') ? "[%s]:%d" : "%s:%d", bh,
                 port);
        return;
    }
    bool v6 = tp_endpoint_ipv6(m->ep);
    uv_interface_address_t *ifs = NULL;
    int n = 0;
    if (uv_interface_addresses(&ifs, &n) == 0) {
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < n; i++)
                if (announceable(&ifs[i], v6) &&
                    (ifs[i].address.address4.sin_family == AF_INET) == (pass == 0))
                    add_addr(m, (const struct sockaddr *)&ifs[i].address, port);
        uv_free_interface_addresses(ifs, n);
    }
    snprintf(m->addrs[m->n_addrs++], TOKEN_ADDR_MAX, "127.0.0.1:%d", port);
}

/* What rtt_ms says now: the least RTT of the connection to every live gossip peer (the least,
 * not the smoothed one: a busy event loop or loss recovery inflates the smoothed RTT, and the
 * planner reads the least too), in rtt_round's steps, the nearest RTT_MAX_ENTRIES. */
static size_t rtt_now(mesh_t *m, rtt_entry_t *out)
{
    static rtt_entry_t all[GOSSIP_MAX_PEERS];
    size_t n = 0;
    for (size_t i = 0; m->g && i < gossip_peer_count(m->g) && n < GOSSIP_MAX_PEERS; i++) {
        const gossip_peer_t *p = gossip_peer_at(m->g, i);
        tp_conn_t *c = p->state == GOSSIP_ALIVE ? tp_find(m->ep, p->id) : NULL;
        int32_t ms = c ? rtt_round(tp_conn_min_rtt_ms(c)) : -1;
        if (ms < 0 || strlen(p->id) != CATALOG_ID_LEN) continue;
        memcpy(all[n].id, p->id, CATALOG_ID_LEN + 1);
        all[n++].ms = ms;
    }
    n = rtt_pick(all, n, RTT_MAX_ENTRIES);
    memcpy(out, all, n * sizeof *out);
    return n;
}

/* At most one re-announcement for RTTs per half heartbeat (0.5..30 s). */
static uint64_t rtt_announce_ms(const mesh_t *m)
{
    uint64_t hb = m->o.heartbeat_ms ? m->o.heartbeat_ms : 60000;
    return hb / 2 < 500 ? 500 : hb / 2 > 30000 ? 30000 : hb / 2;
}

void mesh_rtt_check(mesh_t *m)
{
    rtt_entry_t now[RTT_MAX_ENTRIES];
    if (!m->g || m->stopping || m->passive) return;
    if (mesh_now(m) - m->rtt_ann_at < rtt_announce_ms(m)) return;
    size_t n = rtt_now(m, now);
    if (!rtt_equal(now, n, m->rtt_ann, m->n_rtt_ann)) mesh_announce_changed(m);
}

const char *mesh_cand_kind_name(int kind)
{
    static const char *const KIND[] = {"local", "reflexive", "mapped", "relay"};
    return kind >= 0 && kind <= MESH_CAND_RELAY ? KIND[kind] : "local";
}

bool mesh_own_addr(const mesh_t *m, const char *a)
{
    for (size_t i = 0; i < m->n_addrs; i++)
        if (strcmp(m->addrs[i], a) == 0) return true;
    return false;
}

/* "addr_kinds" (the candidates that are not the interfaces' addresses), "nat" (this node takes
 * punch and relay messages) and "relay" (--relay): additive fields. */
static void announce_nat(mesh_t *m, json_t *ann)
{
    json_t *kinds = json_object();
    for (size_t i = 0; kinds && i < m->n_extra; i++)
        if (mesh_own_addr(m, m->extra[i].addr))
            json_object_set_new(kinds, m->extra[i].addr,
                                json_string(mesh_cand_kind_name(m->extra[i].kind)));
    if (kinds) json_object_set_new(ann, "addr_kinds", kinds);
    /* peers see it at an address not its own: a dialler behind a NAT too punches at once */
    bool natted = m->nat.symmetric;
    for (size_t i = 0; i < m->n_extra; i++)
        natted |= m->extra[i].kind == MESH_CAND_REFLEXIVE;
    if (natted) json_object_set_new(ann, "behind_nat", json_true());
    json_object_set_new(ann, "nat", json_integer(1));
    if (m->o.relay) json_object_set_new(ann, "relay", json_true());
}

json_t *mesh_announcement(mesh_t *m)
{
    json_t *addrs = json_array();
    for (size_t i = 0; i < m->n_addrs; i++)
        json_array_append_new(addrs, json_string(m->addrs[i]));
    json_t *a = json_pack(
        "{s:s,s:s,s:s,s:o,s:I,s:[],s:[],s:[],s:{},s:{},s:{},s:i,s:i,s:i}", "version", MESH_VERSION,
        "mesh_id", m->cred.mesh_id, "role", m->o.role ? m->o.role : "worker", "addrs", addrs,
        "vram_bytes", (json_int_t)m->o.vram_bytes, "available_models", "serving",
        "requested_models", "request_rates", "last_request", "rtt_ms", "api_port", m->o.api_port,
        "console_port", m->o.console_port, "quic_port", tp_endpoint_port(m->ep));
    if (a) announce_nat(m, a);
    if (a && m->o.fill_announcement) m->o.fill_announcement(m->o.data, a);
    json_t *rtt = a ? json_object_get(a, "rtt_ms") : NULL;
    if (rtt) {
        m->n_rtt_ann = rtt_now(m, m->rtt_ann);
        m->rtt_ann_at = mesh_now(m);
        for (size_t i = 0; i < m->n_rtt_ann; i++)
            json_object_set_new(rtt, m->rtt_ann[i].id, json_integer(m->rtt_ann[i].ms));
    }
    return a;
}

int mesh_token_encode(mesh_t *m)
{
    token_t t;
    memset(&t, 0, sizeof t);
    snprintf(t.id, sizeof t.id, "%s", m->id.id);
    snprintf(t.mesh_id, sizeof t.mesh_id, "%s", m->cred.mesh_id);
    memcpy(t.secret, m->cred.secret, 32);
    t.n_addrs = m->n_addrs < TOKEN_MAX_ADDRS ? m->n_addrs : TOKEN_MAX_ADDRS;
    for (size_t i = 0; i < t.n_addrs; i++)
        snprintf(t.addrs[i], TOKEN_ADDR_MAX, "%s", m->addrs[i]);
    int rc = token_encode(&t, m->token, sizeof m->token);
    sodium_memzero(t.secret, sizeof t.secret);
    return rc;
}

void mesh_set_cred(mesh_t *m, const mesh_cred_t *cred)
{
    if (strcmp(m->cred.mesh_id, cred->mesh_id) == 0 &&
        sodium_memcmp(m->cred.secret, cred->secret, 32) == 0)
        return;
    m->cred = *cred;
    tp_endpoint_set_secret(m->ep, m->cred.secret);
    tp_endpoint_set_mesh_id(m->ep, m->cred.mesh_id);
    if (mesh_token_encode(m) != 0)
        LOGW("mesh", "cannot encode the invite token of mesh %s", cred->mesh_id);
    mesh_announce_changed(m);
}

void mesh_set_role(mesh_t *m, const char *role)
{
    snprintf(m->role, sizeof m->role, "%s", role);
    m->o.role = m->role;
}

void mesh_announce_changed(mesh_t *m)
{
    if (!m->g || m->stopping) return;
    json_t *a = mesh_announcement(m);
    if (!a) return;
    gossip_set_announcement(m->g, a, mesh_now(m));
    mesh_gossip_arm(m);
    changes_notify(m->o.changes); /* this node's announcement is in the status document */
}

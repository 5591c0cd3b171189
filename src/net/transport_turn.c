/* transport_turn — the endpoint's side of STUN and TURN (transport.h "STUN and TURN servers"):
 * datagrams from registered servers go to their handlers, raw datagrams go out of the QUIC
 * socket, and TURN paths are virtual addresses 0.0.1.x (one per peer address behind this node's
 * TURN allocation), next to the relayed paths' 0.0.0.x (transport_relay.c). The TURN protocol
 * itself is the driver's (node/mesh_turn.c, over core/turn_client.h); this file only moves
 * datagrams and maps addresses. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "platform.h"
#include "stun.h"
#include "transport_int.h"

#define VIRT_PORT 9
#define VIRT_BASE 0x100u /* 0.0.1.1 … 0.0.1.64 */

static tpi_turn_t *turn_of(tp_endpoint_t *ep)
{
    if (!ep->turn) ep->turn = calloc(1, sizeof *ep->turn);
    return ep->turn;
}

int tp_set_raw_handler(tp_endpoint_t *ep, const struct sockaddr *server, tp_raw_cb cb, void *data)
{
    if (!server || (server->sa_family != AF_INET && server->sa_family != AF_INET6) ||
        tp_addr_virtual(server))
        return -EINVAL;
    tpi_turn_t *t = turn_of(ep);
    if (!t) return -ENOMEM;
    tpi_raw_t *slot = NULL;
    for (size_t i = 0; i < TP_MAX_RAW; i++)
        if (t->raw[i].used && tpi_same_addr(&t->raw[i].addr, server)) slot = &t->raw[i];
    if (!cb) {
        if (slot) memset(slot, 0, sizeof *slot);
        return 0;
    }
    for (size_t i = 0; i < TP_MAX_RAW && !slot; i++)
        if (!t->raw[i].used) slot = &t->raw[i];
    if (!slot) return -ENOSPC;
    slot->used = true;
    memset(&slot->addr, 0, sizeof slot->addr);
    memcpy(&slot->addr, server, tpi_addr_len(server));
    slot->cb = cb;
    slot->data = data;
    return 0;
}

int tp_send_raw(tp_endpoint_t *ep, const struct sockaddr *to, const void *p, size_t n)
{
    if (ep->fd < 0 || !to || tp_addr_virtual(to) || n == 0) return -EINVAL;
    struct iovec iov = {(void *)p, n};
    plat_udp_out_t m = {.to = to, .to_len = tpi_addr_len(to), .iov = &iov, .n_iov = 1, .seg = 0};
    if (plat_udp_send(ep->fd, ep->local.ss_family, &m, 1) != 1) {
        ep->stats.dropped++;
        return -EIO;
    }
    ep->stats.datagrams_out++;
    ep->stats.raw_out++;
    return 0;
}

bool tpi_turn_datagram(tp_endpoint_t *ep, const struct sockaddr *from, const uint8_t *d, size_t n)
{
    tpi_turn_t *t = ep->turn;
    if (!t) return false;
    for (size_t i = 0; i < TP_MAX_RAW; i++) {
        tpi_raw_t *r = &t->raw[i];
        if (!r->used || !tpi_same_addr(&r->addr, from)) continue;
        if (!stun_is_stun(d, n) && !stun_is_channel_data(d, n)) return false;
        ep->stats.raw_in++;
        r->cb(r->data, from, d, n);
        return true;
    }
    return false;
}

void tp_turn_set_sender(tp_endpoint_t *ep, tp_turn_send_cb cb, void *data)
{
    tpi_turn_t *t = turn_of(ep);
    if (!t) return;
    t->send = cb;
    t->send_data = data;
}

static void virt_addr(size_t idx, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof *out);
    struct sockaddr_in *s = (struct sockaddr_in *)out;
    s->sin_family = AF_INET;
    s->sin_port = htons(VIRT_PORT);
    s->sin_addr.s_addr = htonl((uint32_t)(VIRT_BASE + idx + 1));
}

static tpi_turn_route_t *route_of_virt(const tp_endpoint_t *ep, const struct sockaddr *a)
{
    if (!ep->turn || !tp_addr_virtual(a)) return NULL;
    uint32_t v = ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr);
    if (v <= VIRT_BASE || v > VIRT_BASE + TP_MAX_TURN_ROUTES) return NULL;
    tpi_turn_route_t *r = &ep->turn->routes[v - VIRT_BASE - 1];
    return r->used ? r : NULL;
}

static bool route_in_use(tp_endpoint_t *ep, size_t idx)
{
    struct sockaddr_storage v;
    virt_addr(idx, &v);
    for (tp_conn_t *c = ep->conns; c; c = c->next)
        if (tpi_same_addr(&c->remote, (const struct sockaddr *)&v)) return true;
    return false;
}

int tp_turn_deliver(tp_endpoint_t *ep, const struct sockaddr *peer, const uint8_t *p, size_t n)
{
    /* a QUIC packet has the fixed bit (ngtcp2 may grease it: then its connection id is ours);
     * anything else (a punch sent to our relayed address) ends here */
    if (!peer || tp_addr_virtual(peer) || n == 0 ||
        ((p[0] & 0xc0) == 0 && !(n > SCID_LEN && tpi_cid_find(ep, p + 1, SCID_LEN))))
        return -EINVAL;
    tpi_turn_t *t = turn_of(ep);
    if (!t) return -ENOMEM;
    uint64_t now = uv_now(ep->loop);
    tpi_turn_route_t *r = NULL, *free_slot = NULL, *lru = NULL;
    for (size_t i = 0; i < TP_MAX_TURN_ROUTES && !r; i++) {
        tpi_turn_route_t *x = &t->routes[i];
        if (x->used && tpi_same_addr(&x->peer, peer))
            r = x;
        else if (!x->used && !free_slot)
            free_slot = x;
    }
    if (!r && !free_slot) /* full: the least recent route without a connection */
        for (size_t i = 0; i < TP_MAX_TURN_ROUTES; i++)
            if ((!lru || t->routes[i].last_ms < lru->last_ms) && !route_in_use(ep, i))
                lru = &t->routes[i];
    if (!r) {
        r = free_slot ? free_slot : lru;
        if (!r) {
            ep->stats.dropped++;
            return -ENOSPC;
        }
        memset(r, 0, sizeof *r);
        r->used = true;
        memcpy(&r->peer, peer, tpi_addr_len(peer));
    }
    r->last_ms = now;
    struct sockaddr_storage v;
    virt_addr((size_t)(r - t->routes), &v);
    ep->stats.turn_in++;
    tpi_quic_datagram(ep, (const struct sockaddr *)&v, p, n);
    return 0;
}

bool tp_turn_peer(const tp_endpoint_t *ep, const struct sockaddr *virt,
                  struct sockaddr_storage *peer)
{
    const tpi_turn_route_t *r = virt ? route_of_virt(ep, virt) : NULL;
    if (r && peer) *peer = r->peer;
    return r != NULL;
}

void tp_turn_routes_clear(tp_endpoint_t *ep)
{
    if (ep->turn) memset(ep->turn->routes, 0, sizeof ep->turn->routes);
}

bool tpi_turn_wrap(tp_endpoint_t *ep, const struct sockaddr *to, const uint8_t *p, size_t n)
{
    if (!ep->turn || !tp_addr_virtual(to)) return false;
    uint32_t v = ntohl(((const struct sockaddr_in *)to)->sin_addr.s_addr);
    if (v <= VIRT_BASE || v > VIRT_BASE + TP_MAX_TURN_ROUTES) return false; /* a relay's */
    tpi_turn_route_t *r = route_of_virt(ep, to);
    if (!r || !ep->turn->send) {
        ep->stats.dropped++;
        return true;
    }
    r->last_ms = uv_now(ep->loop);
    ep->stats.turn_out++;
    ep->turn->send(ep->turn->send_data, (const struct sockaddr *)&r->peer, p, n);
    return true;
}

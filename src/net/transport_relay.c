/* transport_relay — what the endpoint's socket carries besides QUIC (transport.h "Punching and
 * relays"): punch datagrams, relay frames forwarded between two members (the relay's side), and
 * relayed paths (this node's end of a connection through a relay, seen by ngtcp2 as a virtual
 * address 0.0.X.Y).
 *
 * A datagram whose first byte has both high bits clear is not QUIC (RFC 9000 sets the fixed bit
 * 0x40 in every packet, and the long-header bit 0x80 in Initials): 0x3b is a punch (dropped,
 * counted), 0x3a a relay frame [0x3a][side][session id: 16][QUIC packet]. The relay forwards a
 * frame of session S only when it comes from the address it knows for that side (the member's
 * own QUIC connection to the relay), to the other side's address, within the session's rate.
 * The QUIC packets inside stay encrypted end to end: the relay cannot read or change them. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "platform.h"
#include "transport_int.h"

#define VIRT_PORT 9 /* the virtual addresses' port (any fixed value: only the address counts) */

bool tp_addr_virtual(const struct sockaddr *a)
{
    if (!a || a->sa_family != AF_INET) return false;
    const struct sockaddr_in *s = (const void *)a;
    return (ntohl(s->sin_addr.s_addr) >> 24) == 0; /* 0.0.0.0/8: never a real peer */
}

static void virt_addr(size_t idx, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof *out);
    struct sockaddr_in *s = (struct sockaddr_in *)out;
    s->sin_family = AF_INET;
    s->sin_port = htons(VIRT_PORT);
    s->sin_addr.s_addr = htonl((uint32_t)(idx + 1));
}

static tp_route_t *route_of_virt(tp_endpoint_t *ep, const struct sockaddr *a)
{
    if (!tp_addr_virtual(a)) return NULL;
    uint32_t v = ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr);
    if (v == 0 || v > TP_MAX_ROUTES) return NULL;
    tp_route_t *r = &ep->routes[v - 1];
    return r->used ? r : NULL;
}

static tp_route_t *route_of_sid(tp_endpoint_t *ep, const uint8_t *sid)
{
    for (size_t i = 0; i < TP_MAX_ROUTES; i++)
        if (ep->routes[i].used && memcmp(ep->routes[i].sid, sid, TP_SID_LEN) == 0)
            return &ep->routes[i];
    return NULL;
}

static tp_rsession_t *session_of_sid(tp_endpoint_t *ep, const uint8_t *sid)
{
    for (size_t i = 0; ep->sessions && i < TP_MAX_SESSIONS; i++)
        if (ep->sessions[i].used && memcmp(ep->sessions[i].sid, sid, TP_SID_LEN) == 0)
            return &ep->sessions[i];
    return NULL;
}

int tp_route_add(tp_endpoint_t *ep, const uint8_t sid[TP_SID_LEN], int side,
                 const struct sockaddr *relay, struct sockaddr_storage *virt)
{
    if ((side != 0 && side != 1) || !relay || tp_addr_virtual(relay)) return -EINVAL;
    tp_route_t *r = route_of_sid(ep, sid);
    if (!r)
        for (size_t i = 0; i < TP_MAX_ROUTES && !r; i++)
            if (!ep->routes[i].used) r = &ep->routes[i];
    if (!r) return -ENOSPC;
    r->used = true;
    memcpy(r->sid, sid, TP_SID_LEN);
    r->side = (uint8_t)side;
    memset(&r->relay, 0, sizeof r->relay);
    memcpy(&r->relay, relay, tpi_addr_len(relay));
    virt_addr((size_t)(r - ep->routes), virt);
    return 0;
}

void tp_route_del(tp_endpoint_t *ep, const uint8_t sid[TP_SID_LEN])
{
    tp_route_t *r = route_of_sid(ep, sid);
    if (r) memset(r, 0, sizeof *r);
}

int tp_route_relay(tp_endpoint_t *ep, const struct sockaddr *virt, struct sockaddr_storage *relay)
{
    tp_route_t *r = route_of_virt(ep, virt);
    if (!r) return -ENOENT;
    *relay = r->relay;
    return 0;
}

int tp_relay_session_add(tp_endpoint_t *ep, const uint8_t sid[TP_SID_LEN], const struct sockaddr *a,
                         const struct sockaddr *b, uint64_t rate_bytes_s)
{
    if (!a || !b || tp_addr_virtual(a) || tp_addr_virtual(b)) return -EINVAL;
    if (!ep->sessions) {
        ep->sessions = calloc(TP_MAX_SESSIONS, sizeof *ep->sessions);
        if (!ep->sessions) return -ENOMEM;
    }
    tp_rsession_t *s = session_of_sid(ep, sid);
    for (size_t i = 0; i < TP_MAX_SESSIONS && !s; i++)
        if (!ep->sessions[i].used) s = &ep->sessions[i];
    if (!s) return -ENOSPC;
    memset(s, 0, sizeof *s);
    s->used = true;
    memcpy(s->sid, sid, TP_SID_LEN);
    memcpy(&s->addr[0], a, tpi_addr_len(a));
    memcpy(&s->addr[1], b, tpi_addr_len(b));
    s->rate = rate_bytes_s;
    s->tokens = rate_bytes_s; /* one second's worth to start */
    s->refill_ms = s->last_ms = uv_now(ep->loop);
    return 0;
}

void tp_relay_session_del(tp_endpoint_t *ep, const uint8_t sid[TP_SID_LEN])
{
    tp_rsession_t *s = session_of_sid(ep, sid);
    if (s) memset(s, 0, sizeof *s);
}

int tp_relay_session_info(tp_endpoint_t *ep, const uint8_t sid[TP_SID_LEN], tp_relay_info_t *out)
{
    tp_rsession_t *s = session_of_sid(ep, sid);
    if (!s) return -ENOENT;
    *out = (tp_relay_info_t){
        .packets = s->packets, .bytes = s->bytes, .dropped = s->dropped, .last_ms = s->last_ms};
    return 0;
}

size_t tp_relay_session_count(const tp_endpoint_t *ep)
{
    size_t n = 0;
    for (size_t i = 0; ep->sessions && i < TP_MAX_SESSIONS; i++)
        n += ep->sessions[i].used;
    return n;
}

static void send_one(tp_endpoint_t *ep, const struct sockaddr *to, const uint8_t *hdr, size_t hn,
                     const uint8_t *p, size_t n)
{
    if (ep->fd < 0) return;
    struct iovec iov[2] = {{(void *)hdr, hn}, {(void *)p, n}};
    plat_udp_out_t m = {.to = to, .to_len = tpi_addr_len(to), .iov = iov, .n_iov = 2, .seg = 0};
    if (plat_udp_send(ep->fd, ep->local.ss_family, &m, 1) == 1)
        ep->stats.datagrams_out++;
    else
        ep->stats.dropped++;
}

static const uint8_t PUNCH[8] = {TPI_PUNCH_TYPE, 'm', 'e', 's', 'h', 'l', 'l', 'm'};

int tp_punch(tp_endpoint_t *ep, const struct sockaddr *to)
{
    if (!to || tp_addr_virtual(to) || ep->fd < 0) return -EINVAL;
    send_one(ep, to, PUNCH, sizeof PUNCH, NULL, 0);
    ep->stats.punches_out++;
    return 0;
}

void tpi_relay_send(tp_endpoint_t *ep, const struct sockaddr *to, size_t n)
{
    tp_route_t *r = route_of_virt(ep, to);
    if (!r || ep->fd < 0) return; /* the route is gone: QUIC's loss recovery, then its timeout */
    uint8_t hdr[TPI_RELAY_HDR];
    hdr[0] = TPI_RELAY_TYPE;
    hdr[1] = r->side;
    memcpy(hdr + 2, r->sid, TP_SID_LEN);
    plat_udp_out_t msgs[BATCH];
    struct iovec iov[BATCH][2];
    const struct sockaddr *relay = (const struct sockaddr *)&r->relay;
    for (size_t i = 0; i < n && i < BATCH; i++) {
        iov[i][0] = (struct iovec){hdr, sizeof hdr};
        iov[i][1] = (struct iovec){ep->sbuf[i], ep->slen[i]};
        msgs[i] = (plat_udp_out_t){
            .to = relay, .to_len = tpi_addr_len(relay), .iov = iov[i], .n_iov = 2, .seg = 0};
    }
    size_t done = 0;
    while (done < n) {
        int k = plat_udp_send(ep->fd, ep->local.ss_family, msgs + done, n - done);
        if (k <= 0) {
            ep->stats.dropped += n - done; /* EAGAIN/ENOBUFS: QUIC recovers from the loss */
            break;
        }
        ep->stats.datagrams_out += (uint64_t)k;
        ep->stats.relayed_out += (uint64_t)k;
        done += (size_t)k;
    }
}

/* A relay frame from `from`: forwarded (this node is the session's relay), delivered as a QUIC
 * packet from the route's virtual address (this node is an end), or dropped. */
static void relay_frame(tp_endpoint_t *ep, const struct sockaddr *from, const uint8_t *d, size_t n)
{
    if (n <= TPI_RELAY_HDR || d[1] > 1) {
        ep->stats.dropped++;
        return;
    }
    const uint8_t *sid = d + 2;
    tp_rsession_t *s = session_of_sid(ep, sid);
    if (s && tpi_same_addr(&s->addr[d[1]], from)) {
        uint64_t now = uv_now(ep->loop);
        if (s->rate) { /* token bucket: rate bytes a second, at most a second's worth saved */
            s->tokens += (now - s->refill_ms) * s->rate / 1000;
            if (s->tokens > s->rate) s->tokens = s->rate;
            s->refill_ms = now;
            if (s->tokens < n) {
                s->dropped++;
                ep->stats.relay_dropped++;
                return;
            }
            s->tokens -= n;
        }
        s->last_ms = now;
        s->packets++;
        s->bytes += n;
        ep->stats.relay_forwarded++;
        send_one(ep, (const struct sockaddr *)&s->addr[1 - d[1]], d, n, NULL, 0);
        return;
    }
    tp_route_t *r = route_of_sid(ep, sid);
    if (r && tpi_same_addr(&r->relay, from) && d[1] != r->side) {
        struct sockaddr_storage v;
        virt_addr((size_t)(r - ep->routes), &v);
        ep->stats.relayed_in++;
        tpi_quic_datagram(ep, (const struct sockaddr *)&v, d + TPI_RELAY_HDR, n - TPI_RELAY_HDR);
        return;
    }
    ep->stats.relay_dropped++; /* an unknown session, or from an address not its member's */
}

void tpi_special_datagram(tp_endpoint_t *ep, const struct sockaddr *from, const uint8_t *d,
                          size_t n)
{
    if (n == sizeof PUNCH && memcmp(d, PUNCH, sizeof PUNCH) == 0) {
        ep->stats.punches_in++;
        return;
    }
    if (d[0] == TPI_RELAY_TYPE && n > TPI_RELAY_HDR && d[1] <= 1 &&
        (session_of_sid(ep, d + 2) || route_of_sid(ep, d + 2))) {
        relay_frame(ep, from, d, n);
        return;
    }
    /* a greased short-header packet of a connection we no longer have (a Stateless Reset's
     * case), or garbage: QUIC's own path decides */
    tpi_quic_datagram(ep, from, d, n);
}

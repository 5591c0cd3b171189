/* transport, endpoint side: the UDP socket (batches in and out: platform.h), the
 * connection-id table that routes datagrams to connections, and the endpoint's lifecycle.
 *
 * The socket is ours, watched by a uv_poll handle: one readiness event, one batch receive
 * (libuv's UDP reader calls again until EAGAIN: one wasted syscall per wake-up, and it has no
 * GRO). */
#include <errno.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "platform.h"
#include "tlsid.h"
#include "transport_int.h"

static void ep_handle_closed(uv_handle_t *h);
static void ep_poll_closed(uv_handle_t *h);

static const struct {
    const char *name;
    int algo;
} CCS[] = {{"reno", NGTCP2_CC_ALGO_RENO},
           {"cubic", NGTCP2_CC_ALGO_CUBIC},
           {"bbr", NGTCP2_CC_ALGO_BBR},
           {"bbr2", NGTCP2_CC_ALGO_BBR2}};

int tp_cc_algo(const char *name, int def)
{
    for (size_t i = 0; name && i < sizeof CCS / sizeof CCS[0]; i++)
        if (strcmp(name, CCS[i].name) == 0) return CCS[i].algo;
    return def;
}

void tp_config_default(tp_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->handshake_timeout_ms = 5000;
    cfg->idle_timeout_ms = 30000;
    cfg->keepalive_ms = cfg->idle_timeout_ms / 3;
    cfg->live_ms = 2000;
    cfg->max_conns = 1024;
    cfg->stream_window = 1 << 20;
    cfg->high_water = 1 << 20;
    cfg->stream_max_buffer = 8 * cfg->high_water;
    cfg->conn_high_water = (size_t)32 << 20;
    cfg->conn_max_buffer = (size_t)128 << 20; /* above a forwarded request (64 MiB body cap) */
    cfg->max_pending_opens = 256;
    cfg->retry_after = 16;
    /* BBRv2 by default: on a lossy link (Wi-Fi, a long path) loss-based Cubic collapses to
     * ~MSS/(RTT sqrt(loss)) — 4.8 Mbit/s at 20 ms and 3 % loss through mesh-netimp, against
     * 97 Mbit/s with BBRv2 (bench/tunnel-impaired) — and on clean links they are alike */
    cfg->cc_algo = NGTCP2_CC_ALGO_BBR2;
}

/* ---- connection-id table ---- */

static size_t cid_hash(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return (size_t)(h % CID_BUCKETS);
}

tp_conn_t *tpi_cid_find(tp_endpoint_t *ep, const uint8_t *p, size_t n)
{
    for (cid_ent_t *e = ep->buckets[cid_hash(p, n)]; e; e = e->next)
        if (e->cid.datalen == n && memcmp(e->cid.data, p, n) == 0) return e->c;
    return NULL;
}

int tpi_cid_add(tp_conn_t *c, const ngtcp2_cid *cid)
{
    if (c->n_cids == MAX_CIDS) return -ENOSPC;
    cid_ent_t *e = calloc(1, sizeof *e);
    if (!e) return -ENOMEM;
    e->cid = *cid;
    e->c = c;
    size_t b = cid_hash(cid->data, cid->datalen);
    e->next = c->ep->buckets[b];
    c->ep->buckets[b] = e;
    c->cids[c->n_cids++] = *cid;
    return 0;
}

void tpi_cid_remove(tp_conn_t *c, const ngtcp2_cid *cid)
{
    size_t b = cid_hash(cid->data, cid->datalen);
    for (cid_ent_t **pp = &c->ep->buckets[b]; *pp; pp = &(*pp)->next) {
        cid_ent_t *e = *pp;
        if (e->c == c && ngtcp2_cid_eq(&e->cid, cid)) {
            *pp = e->next;
            free(e);
            break;
        }
    }
    for (size_t i = 0; i < c->n_cids; i++)
        if (ngtcp2_cid_eq(&c->cids[i], cid)) {
            c->cids[i] = c->cids[--c->n_cids];
            break;
        }
}

/* ---- packets out ---- */

/* Send packets sbuf[0..n) to c's peer. Runs of equal-sized packets (plus one shorter tail) go
 * out as one UDP GSO message (the kernel cuts it into datagrams); the groups of a batch go in
 * one sendmmsg. Without kernel GSO support, one datagram per message. */
void tpi_send_batch(tp_endpoint_t *ep, tp_conn_t *c, size_t n)
{
    if (n == 0) return;
    int fd = ep->fd;
    if (fd < 0) return;
    if (tp_addr_virtual((const struct sockaddr *)&c->remote)) { /* a relayed path */
        if (tpi_turn_wrap(ep, (const struct sockaddr *)&c->remote, ep->sbuf[0], ep->slen[0])) {
            for (size_t i = 1; i < n; i++) /* a TURN path: each through the TURN client */
                tpi_turn_wrap(ep, (const struct sockaddr *)&c->remote, ep->sbuf[i], ep->slen[i]);
            return;
        }
        tpi_relay_send(ep, (const struct sockaddr *)&c->remote, n);
        return;
    }
    plat_udp_out_t msgs[BATCH];
    struct iovec iov[BATCH];
    size_t nm = 0, counts[BATCH];
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        if (!ep->no_gso) {
            while (j < n && ep->slen[j] == ep->slen[i])
                j++;
            if (j < n && ep->slen[j] < ep->slen[i]) j++;
        }
        for (size_t k = i; k < j; k++) {
            iov[k].iov_base = ep->sbuf[k];
            iov[k].iov_len = ep->slen[k];
        }
        msgs[nm] = (plat_udp_out_t){.to = (const struct sockaddr *)&c->remote,
                                    .to_len = c->remote_len,
                                    .iov = &iov[i],
                                    .n_iov = j - i,
                                    .seg = j - i > 1 ? (uint16_t)ep->slen[i] : 0};
        counts[nm++] = j - i;
        i = j;
    }
    size_t done = 0;
    while (done < nm) {
        int r = plat_udp_send(fd, ep->local.ss_family, msgs + done, nm - done);
        if (r < 0) {
            if ((r == -EIO || r == -EINVAL || r == -ENOPROTOOPT) && !ep->no_gso) {
                ep->no_gso = true; /* no UDP GSO here: resend one datagram per message */
                size_t skip = 0;
                for (size_t k = 0; k < done; k++)
                    skip += counts[k];
                for (size_t k = skip; k < n; k++) {
                    memmove(ep->sbuf[k - skip], ep->sbuf[k], ep->slen[k]);
                    ep->slen[k - skip] = ep->slen[k];
                }
                tpi_send_batch(ep, c, n - skip);
                return;
            }
            for (size_t k = done; k < nm; k++)
                ep->stats.dropped += counts[k];
            break; /* EAGAIN/ENOBUFS: QUIC recovers from the loss */
        }
        for (int k = 0; k < r; k++)
            ep->stats.datagrams_out += counts[done + (size_t)k];
        done += (size_t)r;
    }
}

void tpi_reset_token(const tp_endpoint_t *ep, const ngtcp2_cid *cid, uint8_t *token)
{
    if (ngtcp2_crypto_generate_stateless_reset_token(token, ep->reset_key, sizeof ep->reset_key,
                                                     cid) != 0)
        randombytes_buf(token, NGTCP2_STATELESS_RESET_TOKENLEN); /* no restart detection */
}

socklen_t tpi_addr_len(const struct sockaddr *a)
{
    return a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

bool tpi_send_one(tp_endpoint_t *ep, const uint8_t *pkt, size_t n, const struct sockaddr *addr)
{
    struct iovec iov = {(void *)pkt, n};
    plat_udp_out_t m = {.to = addr, .to_len = tpi_addr_len(addr), .iov = &iov, .n_iov = 1};
    return plat_udp_send(ep->fd, ep->local.ss_family, &m, 1) == 1;
}

#define RESETS_PER_SECOND 100
/* like a short packet; always shorter than the packet answered, so resets never loop */
#define RESET_MAX_LEN 43

/* A short-header packet for a connection we do not have: most likely one our former process
 * (same key) had. Answer with a Stateless Reset so that the peer drops it now. */
static void send_stateless_reset(tp_endpoint_t *ep, const struct sockaddr *addr,
                                 const ngtcp2_version_cid *vc, size_t n)
{
    uint64_t now = uv_now(ep->loop);
    if (tp_addr_virtual(addr)) return; /* not over a relay: the relayed peer has its own path */
    if (vc->dcidlen != SCID_LEN ||
        n < 1 + NGTCP2_MIN_STATELESS_RESET_RANDLEN + NGTCP2_STATELESS_RESET_TOKENLEN + 1)
        return;
    if (now - ep->reset_window >= 1000) {
        ep->reset_window = now;
        ep->resets_sent = 0;
    }
    if (ep->resets_sent >= RESETS_PER_SECOND) return;
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, vc->dcid, vc->dcidlen);
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN], rnd[RESET_MAX_LEN], pkt[RESET_MAX_LEN];
    size_t len = n - 1 < RESET_MAX_LEN ? n - 1 : RESET_MAX_LEN;
    size_t rlen = len - 1 - NGTCP2_STATELESS_RESET_TOKENLEN;
    tpi_reset_token(ep, &cid, token);
    randombytes_buf(rnd, rlen);
    ngtcp2_ssize w = ngtcp2_pkt_write_stateless_reset(pkt, sizeof pkt, token, rnd, rlen);
    if (w > 0 && tpi_send_one(ep, pkt, (size_t)w, addr)) {
        LOGD("quic", "stateless reset sent (%zd bytes, answering %zu)", w, n);
        ep->resets_sent++;
        ep->stats.datagrams_out++;
    }
}

/* Answer a token-less Initial with a Retry: the client comes back with the token, which binds
 * its address and the ids; no state is kept here meanwhile. The Retry is far smaller than the
 * Initial (at least 1200 bytes), so it amplifies nothing. */
static void send_retry(tp_endpoint_t *ep, const struct sockaddr *addr, const ngtcp2_pkt_hd *hd)
{
    uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], pkt[MAX_PKT];
    ngtcp2_cid scid;
    scid.datalen = SCID_LEN;
    randombytes_buf(scid.data, scid.datalen);
    ngtcp2_ssize tl = ngtcp2_crypto_generate_retry_token(
        token, ep->retry_secret, sizeof ep->retry_secret, hd->version, addr, tpi_addr_len(addr),
        &scid, &hd->dcid, tpi_now_ns());
    if (tl < 0) return;
    ngtcp2_ssize w = ngtcp2_crypto_write_retry(pkt, sizeof pkt, hd->version, &hd->scid, &scid,
                                               &hd->dcid, token, (size_t)tl);
    if (w > 0 && tpi_send_one(ep, pkt, (size_t)w, addr)) {
        ep->stats.retries_sent++;
        ep->stats.datagrams_out++;
    }
}

/* An Initial for a new connection: the original destination id in *odcid and true when it
 * may create a connection (*odcid set only if it came through a Retry). */
static bool initial_admissible(tp_endpoint_t *ep, const struct sockaddr *addr,
                               const ngtcp2_pkt_hd *hd, ngtcp2_cid *odcid, bool *retried)
{
    *retried = false;
    if (hd->type != NGTCP2_PKT_INITIAL) return true;
    if (tp_addr_virtual(addr)) return true; /* through a relay: its session checked the member */
    if (hd->token.len > 0) {
        /* we hand out no NEW_TOKEN tokens: any token must be one of our Retry tokens */
        if (hd->token.base[0] != NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY ||
            ngtcp2_crypto_verify_retry_token(
                odcid, hd->token.base, hd->token.len, ep->retry_secret, sizeof ep->retry_secret,
                hd->version, addr, tpi_addr_len(addr), &hd->dcid,
                (ngtcp2_duration)RETRY_TOKEN_SECS * NGTCP2_SECONDS, tpi_now_ns()) != 0) {
            ep->stats.bad_tokens++;
            return false;
        }
        *retried = true;
        return true;
    }
    if (tpi_unadmitted(ep) < ep->cfg.retry_after) return true;
    send_retry(ep, addr, hd);
    return false;
}

bool tpi_same_addr(const struct sockaddr_storage *a, const struct sockaddr *b)
{
    if (a->ss_family != b->sa_family) return false;
    if (b->sa_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
    return b->sa_family == AF_INET6 && x->sin6_port == y->sin6_port &&
           memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
}

/* A short-header packet that matches none of our connection ids: either the peer's Stateless
 * Reset for a connection we have with its address (its process restarted; the reset's ids are
 * random, and ngtcp2 recognizes the token when that connection reads the datagram), or a packet
 * of a connection our former process had (answered with a Stateless Reset). */
static void unknown_short_packet(tp_endpoint_t *ep, const struct sockaddr *addr,
                                 const ngtcp2_version_cid *vc, const uint8_t *data, size_t n)
{
    tp_conn_t *to[8];
    size_t k = 0;
    for (tp_conn_t *c = ep->conns; c && k < 8; c = c->next)
        if (c->ready && !c->closing && tpi_same_addr(&c->remote, addr)) to[k++] = c;
    /* a connection that ends here is freed later in the loop: the pointers stay valid */
    for (size_t i = 0; i < k; i++)
        tpi_conn_read(to[i], addr, data, n);
    if (k == 0) send_stateless_reset(ep, addr, vc, n);
}

static void ep_datagram(tp_endpoint_t *ep, const struct sockaddr *addr, const uint8_t *data,
                        size_t n)
{
    /* a STUN/TURN server's answer or ChannelData (which looks like a QUIC short header) */
    if (ep->turn && tpi_turn_datagram(ep, addr, data, n)) return;
    /* Both high bits clear: a punch or a relay frame, unless it is a short-header packet of one
     * of our connections whose peer greased the fixed bit (RFC 9287; ngtcp2 always allows it) */
    if (n > 0 && (data[0] & 0xc0) == 0 && !(n > SCID_LEN && tpi_cid_find(ep, data + 1, SCID_LEN))) {
        tpi_special_datagram(ep, addr, data, n);
        return;
    }
    tpi_quic_datagram(ep, addr, data, n);
}

void tpi_quic_datagram(tp_endpoint_t *ep, const struct sockaddr *addr, const uint8_t *data,
                       size_t n)
{
    ngtcp2_version_cid vc;
    if (ngtcp2_pkt_decode_version_cid(&vc, data, n, SCID_LEN) != 0) {
        ep->stats.dropped++;
        return;
    }
    tp_conn_t *c = tpi_cid_find(ep, vc.dcid, vc.dcidlen);
    if (c) {
        tpi_conn_read(c, addr, data, n);
        return;
    }
    ngtcp2_pkt_hd hd;
    if (ngtcp2_accept(&hd, data, n) != 0) {
        ep->stats.dropped++;
        if (!(data[0] & 0x80)) unknown_short_packet(ep, addr, &vc, data, n);
        return;
    }
    ngtcp2_cid odcid;
    bool retried;
    if (!initial_admissible(ep, addr, &hd, &odcid, &retried)) {
        ep->stats.dropped++;
        return;
    }
    tpi_accept_conn(ep, &hd, retried ? &odcid : NULL, addr);
    c = tpi_cid_find(ep, vc.dcid, vc.dcidlen);
    if (c)
        tpi_conn_read(c, addr, data, n);
    else
        ep->stats.dropped++;
}

/* One recvmmsg per readiness event: the loop's idle phase then flushes (ACKs, answers) before
 * the next batch is read — a fuller queue simply reports readable again. With UDP GRO the
 * kernel hands over runs of same-sized datagrams from one sender as one buffer (a control
 * message gives the segment size), so a burst costs one receive, not one per datagram. */
static void on_readable(uv_poll_t *h, int status, int events)
{
    tp_endpoint_t *ep = h->data;
    if (status < 0 || ep->closing || !(events & UV_READABLE)) return;
    plat_udp_in_t msgs[RBUF_SLOTS];
    for (size_t i = 0; i < RBUF_SLOTS; i++)
        msgs[i] = (plat_udp_in_t){.buf = ep->rbuf + i * RBUF_SLOT, .cap = RBUF_SLOT};
    int n = plat_udp_recv(ep->fd, msgs, RBUF_SLOTS);
    /* n < 0: an error the next event retries */
    for (int k = 0; k < n && !ep->closing; k++) {
        if (msgs[k].truncated) {
            ep->stats.datagrams_in++;
            ep->stats.dropped++;
            continue;
        }
        size_t len = msgs[k].len, seg = msgs[k].seg;
        const uint8_t *p = ep->rbuf + (size_t)k * RBUF_SLOT;
        for (size_t off = 0; off < len && !ep->closing; off += seg) {
            ep->stats.datagrams_in++;
            ep_datagram(ep, (const struct sockaddr *)&msgs[k].from, p + off,
                        len - off < seg ? len - off : seg);
        }
    }
}

/* ---- endpoint ---- */

/* A socket bound to host:port in ep->fd (-1 on failure), its address in ep->local. */
static int ep_bind(tp_endpoint_t *ep, const char *host, int port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        return -EINVAL;
    ep->fd = plat_udp_socket(ss.ss_family);
    if (ep->fd < 0) {
        int rc = ep->fd;
        ep->fd = -1;
        return rc;
    }
    ep->local_len = sizeof ep->local;
    if (bind(ep->fd, (struct sockaddr *)&ss, tpi_addr_len((struct sockaddr *)&ss)) != 0 ||
        getsockname(ep->fd, (struct sockaddr *)&ep->local, &ep->local_len) != 0) {
        int rc = -errno;
        close(ep->fd);
        ep->fd = -1;
        return rc;
    }
    /* the local end of an IPv4 path on a dual-stack socket */
    struct sockaddr_in *l4 = (struct sockaddr_in *)&ep->local4;
    memset(&ep->local4, 0, sizeof ep->local4);
    l4->sin_family = AF_INET;
    l4->sin_port = ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ep->local)->sin6_port
                                            : ((struct sockaddr_in *)&ep->local)->sin_port;
    if (ss.ss_family == AF_INET) memcpy(&ep->local4, &ep->local, sizeof(struct sockaddr_in));
    ep->dual = ss.ss_family == AF_INET6 &&
               IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ss)->sin6_addr);
    return 0;
}

bool tpi_family_ok(const tp_endpoint_t *ep, const struct sockaddr *remote)
{
    return remote->sa_family == ep->local.ss_family || (ep->dual && remote->sa_family == AF_INET);
}

ngtcp2_addr tpi_local_for(tp_endpoint_t *ep, const struct sockaddr *remote)
{
    if (remote->sa_family == AF_INET && ep->local.ss_family == AF_INET6)
        return (ngtcp2_addr){(struct sockaddr *)&ep->local4, sizeof(struct sockaddr_in)};
    return (ngtcp2_addr){(struct sockaddr *)&ep->local, ep->local_len};
}

bool tp_endpoint_ipv6(const tp_endpoint_t *ep)
{
    return ep->local.ss_family == AF_INET6;
}

int tp_endpoint_new(tp_endpoint_t **out, uv_loop_t *loop, const identity_t *id,
                    const uint8_t secret[32], const char *host, int port, const tp_config_t *cfg,
                    const tp_callbacks_t *cb)
{
    tp_endpoint_t *ep = calloc(1, sizeof *ep);
    if (!ep) return -ENOMEM;
    ep->loop = loop;
    ep->id = id;
    memcpy(ep->secret, secret, 32);
    static const char reset_label[] = "mesh-llm/1 stateless reset";
    crypto_generichash(ep->reset_key, sizeof ep->reset_key, (const uint8_t *)reset_label,
                       sizeof reset_label - 1, id->sk, 32);
    randombytes_buf(ep->retry_secret, sizeof ep->retry_secret);
    if (cfg)
        ep->cfg = *cfg;
    else
        tp_config_default(&ep->cfg);
    ep->cb = *cb;
    ep->fd = -1;
    int rc = tlsid_credentials(id, &ep->cred);
    if (rc) goto fail;
    ep->rbuf = malloc((size_t)RBUF_SLOTS * RBUF_SLOT);
    if (!ep->rbuf) {
        rc = -ENOMEM;
        goto fail;
    }
    /* no host: every address, IPv6 and IPv4 on one dual-stack socket, or IPv4 alone where this
     * machine has no IPv6 */
    rc = ep_bind(ep, host ? host : "::", port);
    if (rc && !host && rc != -EADDRINUSE) rc = ep_bind(ep, "0.0.0.0", port);
    if (rc) goto fail;
    rc = uv_poll_init_socket(loop, &ep->poll, ep->fd);
    if (rc) goto fail;
    ep->poll.data = ep;
    uv_idle_init(loop, &ep->idle);
    ep->idle.data = ep;
    rc = uv_poll_start(&ep->poll, UV_READABLE, on_readable);
    if (rc) {
        gnutls_certificate_free_credentials(ep->cred);
        ep->cred = NULL;
        ep->closing = true;
        ep->pending_closes = 2;
        uv_close((uv_handle_t *)&ep->idle, ep_handle_closed);
        uv_close((uv_handle_t *)&ep->poll, ep_poll_closed);
        return rc;
    }
    ep->port = ep->local.ss_family == AF_INET6
                   ? ntohs(((struct sockaddr_in6 *)&ep->local)->sin6_port)
                   : ntohs(((struct sockaddr_in *)&ep->local)->sin_port);
    *out = ep;
    return 0;
fail:
    if (ep->fd >= 0) close(ep->fd);
    if (ep->cred) gnutls_certificate_free_credentials(ep->cred);
    free(ep->rbuf);
    free(ep->sessions);
    free(ep->turn);
    free(ep);
    return rc;
}

void tp_endpoint_set_secret(tp_endpoint_t *ep, const uint8_t secret[32])
{
    memcpy(ep->secret, secret, 32);
}

void tp_endpoint_set_mesh_id(tp_endpoint_t *ep, const char *mesh_id)
{
    snprintf(ep->mesh_id, sizeof ep->mesh_id, "%s", mesh_id ? mesh_id : "");
}

int tp_endpoint_port(const tp_endpoint_t *ep)
{
    return ep->port;
}

void *tp_endpoint_data(const tp_endpoint_t *ep)
{
    return ep->cb.data;
}

/* One pending handle close finished; the endpoint goes when it is closing and none is left. */
void tpi_ep_release(tp_endpoint_t *ep)
{
    if (--ep->pending_closes > 0 || !ep->closing) return;
    void (*cb)(void *) = ep->close_cb;
    void *d = ep->close_data;
    for (size_t i = 0; i < CID_BUCKETS; i++)
        for (cid_ent_t *e = ep->buckets[i]; e;) {
            cid_ent_t *n = e->next;
            free(e);
            e = n;
        }
    if (ep->cred) gnutls_certificate_free_credentials(ep->cred);
    free(ep->rbuf);
    free(ep->sessions);
    free(ep->turn);
    free(ep);
    if (cb) cb(d);
}

static void ep_handle_closed(uv_handle_t *h)
{
    tpi_ep_release(h->data);
}

static void ep_poll_closed(uv_handle_t *h)
{
    tp_endpoint_t *ep = h->data;
    close(ep->fd);
    ep->fd = -1;
    tpi_ep_release(ep);
}

void tp_endpoint_close(tp_endpoint_t *ep, void (*cb)(void *data), void *data)
{
    if (ep->closing) return;
    ep->closing = true;
    ep->close_cb = cb;
    ep->close_data = data;
    while (ep->conns) {
        tp_conn_t *c = ep->conns;
        if (!c->close_err && !c->ccerr.error_code)
            ngtcp2_connection_close_error_set_application_error(
                &c->ccerr, APP_ERR_SHUTDOWN, (const uint8_t *)"shutting down", 13);
        if (!c->close_why[0]) snprintf(c->close_why, sizeof c->close_why, "shutting down");
        tpi_conn_close_now(c);
    }
    /* connections' timers close first (pending_closes counts them), then these two */
    ep->pending_closes += 2;
    uv_close((uv_handle_t *)&ep->idle, ep_handle_closed);
    uv_close((uv_handle_t *)&ep->poll, ep_poll_closed);
}

const tp_stats_t *tp_stats(const tp_endpoint_t *ep)
{
    return &ep->stats;
}

size_t tp_conn_count(const tp_endpoint_t *ep)
{
    return ep->n_conns;
}

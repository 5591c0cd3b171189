#include "transport.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tlsid.h"
#include "util.h"
#include "wire.h"

#include "transport_int.h"

static const char priority[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+SIGN-EDDSA-ED25519:"
                               "%DISABLE_TLS13_COMPAT_MODE";

/* ---- timers and closing ---- */

/* Take c out of the endpoint: its connection ids, the list, the flush list. */
static void conn_unlink(tp_conn_t *c)
{
    tp_endpoint_t *ep = c->ep;
    while (c->n_cids)
        tpi_cid_remove(c, &c->cids[c->n_cids - 1]);
    if (c->prev)
        c->prev->next = c->next;
    else
        ep->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    ep->n_conns--;
    tpi_dirty_unlink(c);
}

static void conn_free_cb(uv_handle_t *h)
{
    tp_conn_t *c = h->data;
    tp_endpoint_t *ep = c->ep;
    if (c->q) ngtcp2_conn_del(c->q);
    if (c->tls) gnutls_deinit(c->tls);
    wire_reader_free(&c->admit_rd);
    free(c);
    tpi_ep_release(ep);
}

void tpi_conn_close_now(tp_conn_t *c)
{
    tp_endpoint_t *ep = c->ep;
    if (c->closing) return;
    c->closing = true;
    if (c->q && !ngtcp2_conn_is_in_closing_period(c->q) &&
        !ngtcp2_conn_is_in_draining_period(c->q) && c->close_err != -ECONNRESET &&
        c->close_err != -ETIMEDOUT) {
        ngtcp2_path_storage ps;
        ngtcp2_path_storage_zero(&ps);
        ngtcp2_pkt_info pi;
        ngtcp2_ssize nw = ngtcp2_conn_write_connection_close(c->q, &ps.path, &pi, ep->sbuf[0],
                                                             MAX_PKT, &c->ccerr, tpi_now_ns());
        if (nw > 0) {
            ep->slen[0] = (size_t)nw;
            tpi_send_batch(ep, c, 1);
        }
    }
    while (c->streams)
        tpi_stream_finish(c->streams, c->close_err ? c->close_err : -ECONNRESET);
    conn_unlink(c);
    if (ep->cb.on_conn_closed)
        ep->cb.on_conn_closed(ep, c, c->ready, c->close_err,
                              c->close_why[0] ? c->close_why : "closed");
    c->freed = true;
    ep->pending_closes++;
    uv_close((uv_handle_t *)&c->timer, conn_free_cb);
}

void tp_conn_close(tp_conn_t *c, int app_error, const char *why)
{
    if (c->close_requested || c->closing) return;
    tpi_conn_request_close(c, 0, why);
    /* the reason must outlive the deferred close: point at our copy */
    ngtcp2_connection_close_error_set_application_error(
        &c->ccerr, (uint64_t)app_error, (const uint8_t *)c->close_why, strlen(c->close_why));
}

/* ---- one connection per pair ---- */

/* Which of two ready connections to the same peer is preferred: the one dialled by the larger
 * node id; between two dialled by the same side, the one ready first. */
static bool conn_better(const tp_conn_t *a, const tp_conn_t *b)
{
    bool a_direct = !tp_addr_virtual((const struct sockaddr *)&a->remote),
         b_direct = !tp_addr_virtual((const struct sockaddr *)&b->remote);
    if (a_direct != b_direct) return a_direct; /* a direct path beats a relayed one */
    const char *self = a->ep->id->id;
    bool peer_larger = strcmp(a->peer_id, self) > 0;
    bool a_by_larger = a->outbound != peer_larger, b_by_larger = b->outbound != peer_larger;
    if (a_by_larger != b_by_larger) return a_by_larger;
    return a->ready_seq < b->ready_seq;
}

tp_conn_t *tp_find(tp_endpoint_t *ep, const char *peer_id)
{
    tp_conn_t *best = NULL;
    for (tp_conn_t *c = ep->conns; c; c = c->next) {
        if (!c->ready || c->closing || c->close_requested) continue;
        if (strcmp(c->peer_id, peer_id) != 0) continue;
        if (!best || conn_better(c, best)) best = c;
    }
    return best;
}

/* Close our own outbound duplicates that lost, once they carry no streams. */
static void prune_duplicates(tp_endpoint_t *ep, const char *peer_id)
{
    tp_conn_t *best = tp_find(ep, peer_id);
    if (!best) return;
    for (tp_conn_t *c = ep->conns; c; c = c->next) {
        if (c == best || !c->ready || !c->outbound || c->closing || c->close_requested) continue;
        if (strcmp(c->peer_id, peer_id) != 0 || c->streams) continue;
        tp_conn_close(c, APP_ERR_DUPLICATE, "duplicate connection");
    }
}

static void conn_ready(tp_conn_t *c)
{
    c->ready = true;
    c->ready_seq = ++c->ep->ready_counter;
    LOGD("quic", "%s connection with %.12s ready", c->outbound ? "outbound" : "inbound",
         c->peer_id);
    /* streams the peer opened while we were waiting for its proof */
    for (tp_stream_t *s = c->streams; s; s = s->next) {
        if (!s->held) continue;
        s->held = false;
        if (c->ep->cb.on_stream) c->ep->cb.on_stream(c->ep, c, s);
        if (!s->cb) {
            s->internal = true;
            ngtcp2_conn_shutdown_stream(c->q, s->id, 0);
        }
    }
    if (c->ep->cb.on_conn_ready) c->ep->cb.on_conn_ready(c->ep, c);
    for (tp_stream_t *s = c->streams, *n; s; s = n) {
        n = s->next;
        if (s->cb && s->held_data.len && s->cb->on_data)
            s->cb->on_data(s, (const uint8_t *)s->held_data.data, s->held_data.len);
        buf_free(&s->held_data);
        if (s->held_fin && s->cb && s->cb->on_fin) s->cb->on_fin(s);
        s->held_fin = false;
    }
    prune_duplicates(c->ep, c->peer_id);
}

/* ---- admission ---- */

static int admission_send(tp_conn_t *c, tp_stream_t *s, bool with_type)
{
    uint8_t mac[32];
    char hex[65];
    identity_admission_mac(c->ep->secret, c->ep->id->pk, c->peer_pk, mac);
    hex_encode(mac, sizeof mac, hex);
    json_t *f = json_pack("{s:i,s:s,s:s}", "v", 1, "type", "admit", "proof", hex);
    if (f && c->ep->mesh_id[0]) json_object_set_new(f, "mesh", json_string(c->ep->mesh_id));
    /* the peer's address as we see it (additive): behind a NAT, its public one */
    char seen[64];
    if (f && !tp_addr_virtual((const struct sockaddr *)&c->remote) &&
        addr_format((const struct sockaddr *)&c->remote, seen, sizeof seen) == 0)
        json_object_set_new(f, "seen", json_string(seen));
    buf_t b;
    buf_init(&b, 4096);
    int rc = f ? wire_write(&b, with_type ? WIRE_GOSSIP : -1, f) : -ENOMEM;
    json_decref(f);
    if (rc == 0) rc = tp_stream_write(s, b.data, b.len);
    buf_free(&b);
    return rc;
}

static bool admission_check(tp_conn_t *c, json_t *f)
{
    const char *type = json_string_value(json_object_get(f, "type"));
    const char *proof = json_string_value(json_object_get(f, "proof"));
    uint8_t got[32], want[32];
    if (!type || strcmp(type, "admit") != 0 || !proof ||
        hex_decode(proof, strlen(proof), got, sizeof got) != 0)
        return false;
    identity_admission_mac(c->ep->secret, c->peer_pk, c->ep->id->pk, want);
    if (crypto_verify_32(got, want) != 0) return false;
    /* the peer's mesh id: kept only when well formed (1 to MESH_ID_MAX lowercase hex) */
    const char *mesh = json_string_value(json_object_get(f, "mesh"));
    size_t ml = mesh ? strlen(mesh) : 0;
    bool hex = ml > 0 && ml <= MESH_ID_MAX;
    for (size_t i = 0; hex && i < ml; i++)
        hex = (mesh[i] >= '0' && mesh[i] <= '9') || (mesh[i] >= 'a' && mesh[i] <= 'f');
    snprintf(c->peer_mesh, sizeof c->peer_mesh, "%s", hex ? mesh : "");
    /* "seen": kept only as a well-formed numeric ip:port or [ipv6]:port, re-formatted */
    const char *seen = json_string_value(json_object_get(f, "seen"));
    struct sockaddr_storage sa;
    c->seen[0] = '\0';
    if (seen && strlen(seen) < sizeof c->seen && addr_parse(seen, &sa) == 0)
        addr_format((const struct sockaddr *)&sa, c->seen, sizeof c->seen);
    return true;
}

/* Admission bytes (either side). Returns an ngtcp2 callback result. */
static int admission_data(tp_conn_t *c, tp_stream_t *s, const uint8_t *p, size_t n)
{
    while (n > 0) {
        json_t *f = NULL;
        ssize_t used = wire_read(&c->admit_rd, p, n, &f);
        if (used < 0) {
            tpi_conn_request_close(c, -EACCES, "malformed admission frame");
            return 0;
        }
        p += used;
        n -= (size_t)used;
        if (!f) continue;
        bool ok = admission_check(c, f);
        json_decref(f);
        if (!ok) {
            c->ep->stats.conns_refused++;
            LOGW("quic", "refused %.12s: bad admission proof (wrong mesh secret)", c->peer_id);
            ngtcp2_connection_close_error_set_application_error(
                &c->ccerr, APP_ERR_ADMISSION,
                (const uint8_t *)"admission refused (wrong mesh secret)", 36);
            tpi_conn_request_close(c, -EACCES, "admission refused: wrong mesh secret");
            return 0;
        }
        if (!c->outbound) {
            admission_send(c, s, false);
            tp_stream_shutdown(s);
        }
        conn_ready(c);
        return 0;
    }
    return 0;
}

/* ---- ngtcp2 callbacks ---- */

static void rand_cb(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    randombytes_buf(dest, len);
}

static int new_cid_cb(ngtcp2_conn *q, ngtcp2_cid *cid, uint8_t *token, size_t cidlen, void *ud)
{
    tp_conn_t *c = ud;
    randombytes_buf(cid->data, cidlen);
    cid->datalen = cidlen;
    tpi_reset_token(c->ep, cid, token);
    return tpi_cid_add(c, cid) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int remove_cid_cb(ngtcp2_conn *q, const ngtcp2_cid *cid, void *ud)
{
    tpi_cid_remove(ud, cid);
    return 0;
}

static int handshake_completed_cb(ngtcp2_conn *q, void *ud)
{
    tp_conn_t *c = ud;
    uint8_t pk[32];
    if (tlsid_peer_key(c->tls, pk) != 0) {
        snprintf(c->close_why, sizeof c->close_why, "peer presented no Ed25519 certificate");
        c->close_err = -EACCES;
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    if (c->outbound) {
        if (sodium_memcmp(pk, c->peer_pk, 32) != 0) {
            char got[65];
            hex_encode(pk, 32, got);
            snprintf(c->close_why, sizeof c->close_why,
                     "peer at this address is %.12s…, not the node %.12s… we dialled", got,
                     c->peer_id);
            c->close_err = -EACCES;
            c->ep->stats.conns_refused++;
            return NGTCP2_ERR_CALLBACK_FAILURE;
        }
    } else {
        memcpy(c->peer_pk, pk, 32);
        hex_encode(pk, 32, c->peer_id);
        if (strcmp(c->peer_id, c->ep->id->id) == 0) {
            snprintf(c->close_why, sizeof c->close_why, "peer uses our own key");
            c->close_err = -EACCES;
            return NGTCP2_ERR_CALLBACK_FAILURE;
        }
    }
    c->handshake_done = true;
    if (c->outbound) {
        tp_stream_t *s = tpi_stream_new(c, -1);
        if (!s) return NGTCP2_ERR_CALLBACK_FAILURE;
        s->internal = true;
        c->admit = s;
        if (admission_send(c, s, true) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
        tp_stream_shutdown(s);
        c->open_pending = true;
    }
    tpi_mark_dirty(c);
    return 0;
}

static int stream_open_cb(ngtcp2_conn *q, int64_t id, void *ud)
{
    tp_conn_t *c = ud;
    if (ngtcp2_is_bidi_stream(id) == 0) return 0;
    tp_stream_t *s = tpi_stream_new(c, id);
    if (!s) return NGTCP2_ERR_CALLBACK_FAILURE;
    ngtcp2_conn_set_stream_user_data(q, id, s);
    if (!c->ready) {
        if (!c->outbound && !c->admit) {
            s->internal = true; /* the dialer's first stream: its admission proof */
            c->admit = s;
            return 0;
        }
        if (!c->outbound) {
            tpi_conn_request_close(c, -EPROTO, "stream before admission");
            s->internal = true;
            return 0;
        }
        s->held = true; /* acceptor's stream racing ahead of its proof */
        return 0;
    }
    if (c->ep->cb.on_stream) c->ep->cb.on_stream(c->ep, c, s);
    if (!s->cb) {
        s->internal = true;
        ngtcp2_conn_shutdown_stream(q, id, 0);
    }
    return 0;
}

static int recv_stream_data_cb(ngtcp2_conn *q, uint32_t flags, int64_t id, uint64_t off,
                               const uint8_t *data, size_t len, void *ud, void *sud)
{
    tp_conn_t *c = ud;
    tp_stream_t *s = sud;
    c->rx_data = true;
    if (!s) return 0;
    if (s == c->admit) {
        ngtcp2_conn_extend_max_stream_offset(q, id, len);
        ngtcp2_conn_extend_max_offset(q, len);
        return admission_data(c, s, data, len);
    }
    if (s->internal) {
        ngtcp2_conn_extend_max_stream_offset(q, id, len);
        ngtcp2_conn_extend_max_offset(q, len);
        return 0;
    }
    if (s->held) {
        if (len && buf_append(&s->held_data, data, len) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
        if (flags & NGTCP2_STREAM_DATA_FLAG_FIN) s->held_fin = true;
        return 0;
    }
    if (len && s->cb && s->cb->on_data) s->cb->on_data(s, data, len);
    if ((flags & NGTCP2_STREAM_DATA_FLAG_FIN) && !s->closed && s->cb && s->cb->on_fin)
        s->cb->on_fin(s);
    return 0;
}

static int acked_cb(ngtcp2_conn *q, int64_t id, uint64_t off, uint64_t len, void *ud, void *sud)
{
    tp_stream_t *s = sud;
    if (!s) return 0;
    size_t before = s->out.unacked;
    sendbuf_acked(&s->out, (size_t)len);
    s->conn->queued -= before - s->out.unacked;
    if (s->above_hw) tpi_stream_check_drain(s);
    return 0;
}

static int stream_close_cb(ngtcp2_conn *q, uint32_t flags, int64_t id, uint64_t app_error, void *ud,
                           void *sud)
{
    tp_conn_t *c = ud;
    tp_stream_t *s = sud;
    if (!ngtcp2_conn_is_local_stream(q, id)) ngtcp2_conn_extend_max_streams_bidi(q, 1);
    if (s) tpi_stream_finish(s, app_error ? -ECONNRESET : 0);
    if (c->ready && !c->streams) prune_duplicates(c->ep, c->peer_id);
    return 0;
}

static int stream_reset_cb(ngtcp2_conn *q, int64_t id, uint64_t final_size, uint64_t app_error,
                           void *ud, void *sud)
{
    ngtcp2_conn_shutdown_stream(q, id, app_error);
    return 0;
}

static int extend_max_stream_data_cb(ngtcp2_conn *q, int64_t id, uint64_t max, void *ud, void *sud)
{
    tp_stream_t *s = sud;
    if (s && s->blocked) {
        s->blocked = false;
        tpi_sendq_push(s);
        tpi_mark_dirty(s->conn);
    }
    return 0;
}

static int extend_max_local_streams_cb(ngtcp2_conn *q, uint64_t max, void *ud)
{
    tp_conn_t *c = ud;
    if (c->open_pending) tpi_mark_dirty(c);
    return 0;
}

static ngtcp2_conn *get_conn_cb(ngtcp2_crypto_conn_ref *ref)
{
    tp_conn_t *c = ref->user_data;
    return c->q;
}

static int stateless_reset_cb(ngtcp2_conn *q, const ngtcp2_pkt_stateless_reset *sr, void *ud)
{
    tp_conn_t *c = ud;
    snprintf(c->close_why, sizeof c->close_why, "stateless reset (the peer restarted)");
    return 0;
}

/* The callbacks both sides share; client and server add their initial-packet handlers. */
static void callbacks(ngtcp2_callbacks *cb, bool client)
{
    memset(cb, 0, sizeof *cb);
    if (client) {
        cb->client_initial = ngtcp2_crypto_client_initial_cb;
        cb->recv_retry = ngtcp2_crypto_recv_retry_cb;
    } else {
        cb->recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
    }
    cb->recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
    cb->handshake_completed = handshake_completed_cb;
    cb->encrypt = ngtcp2_crypto_encrypt_cb;
    cb->decrypt = ngtcp2_crypto_decrypt_cb;
    cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
    cb->recv_stream_data = recv_stream_data_cb;
    cb->acked_stream_data_offset = acked_cb;
    cb->stream_open = stream_open_cb;
    cb->stream_close = stream_close_cb;
    cb->extend_max_local_streams_bidi = extend_max_local_streams_cb;
    cb->rand = rand_cb;
    cb->get_new_connection_id = new_cid_cb;
    cb->remove_connection_id = remove_cid_cb;
    cb->recv_stateless_reset = stateless_reset_cb;
    cb->update_key = ngtcp2_crypto_update_key_cb;
    cb->stream_reset = stream_reset_cb;
    cb->extend_max_stream_data = extend_max_stream_data_cb;
    cb->delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
    cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
    cb->get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
    cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
}

/* ---- connection setup ---- */

static tp_conn_t *conn_alloc(tp_endpoint_t *ep, const struct sockaddr *remote, bool outbound)
{
    tp_conn_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ep = ep;
    c->outbound = outbound;
    c->created_ms = uv_now(ep->loop);
    c->remote_len =
        remote->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    memcpy(&c->remote, remote, c->remote_len);
    c->ref.get_conn = get_conn_cb;
    c->ref.user_data = c;
    ngtcp2_connection_close_error_default(&c->ccerr);
    wire_reader_init(&c->admit_rd, !outbound);
    uv_timer_init(ep->loop, &c->timer);
    c->timer.data = c;
    c->next = ep->conns;
    if (ep->conns) ep->conns->prev = c;
    ep->conns = c;
    ep->n_conns++;
    return c;
}

/* Undo conn_alloc for a connection that never got going (no callbacks). */
static void conn_discard(tp_conn_t *c)
{
    tp_endpoint_t *ep = c->ep;
    conn_unlink(c);
    c->freed = true;
    c->closing = true;
    ep->pending_closes++;
    uv_close((uv_handle_t *)&c->timer, conn_free_cb);
}

static int tls_setup(tp_conn_t *c)
{
    tp_endpoint_t *ep = c->ep;
    unsigned flags = c->outbound ? GNUTLS_CLIENT : GNUTLS_SERVER;
    if (gnutls_init(&c->tls, flags | GNUTLS_NO_END_OF_EARLY_DATA) != 0) return -ENOMEM;
    int rv = c->outbound ? ngtcp2_crypto_gnutls_configure_client_session(c->tls)
                         : ngtcp2_crypto_gnutls_configure_server_session(c->tls);
    if (rv != 0) return -EIO;
    if (gnutls_priority_set_direct(c->tls, priority, NULL) != 0) return -EIO;
    if (gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, ep->cred) != 0) return -EIO;
    gnutls_datum_t alpn = {(unsigned char *)ALPN, sizeof ALPN - 1};
    gnutls_alpn_set_protocols(c->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY);
    if (c->outbound)
        gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, "mesh-llm", 8);
    else
        gnutls_certificate_server_set_request(c->tls, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_ptr(c->tls, &c->ref);
    return 0;
}

static void settings_params(tp_endpoint_t *ep, ngtcp2_settings *st, ngtcp2_transport_params *tp)
{
    ngtcp2_settings_default(st);
    st->initial_ts = tpi_now_ns();
    st->handshake_timeout = ep->cfg.handshake_timeout_ms * NGTCP2_MILLISECONDS;
    st->max_tx_udp_payload_size = MAX_PKT;
    st->cc_algo = (ngtcp2_cc_algo)ep->cfg.cc_algo;
    st->max_window = 64 * ep->cfg.stream_window;
    st->max_stream_window = 4 * ep->cfg.stream_window;
    /* an owed ACK rides on the very next packet: when to send is decided by our scheduler
     * (transport_tx.c), not by ngtcp2's min(max_ack_delay, srtt/8), which on a fast path would
     * leave a reply going out just before the ACK is due and the ACK alone right after */
    st->ack_thresh = 1;
    ngtcp2_transport_params_default(tp);
    tp->initial_max_stream_data_bidi_local = ep->cfg.stream_window;
    tp->initial_max_stream_data_bidi_remote = ep->cfg.stream_window;
    tp->initial_max_data = 16 * ep->cfg.stream_window;
    tp->initial_max_streams_bidi = 256;
    tp->initial_max_streams_uni = 0;
    tp->max_idle_timeout = ep->cfg.idle_timeout_ms * NGTCP2_MILLISECONDS;
}

int tp_dial(tp_endpoint_t *ep, const char *peer_id, const struct sockaddr *addr, tp_conn_t **out)
{
    if (ep->closing) return -ESHUTDOWN;
    if (ep->n_conns >= ep->cfg.max_conns) return -EMFILE;
    if (strlen(peer_id) != ID_HEX_LEN) return -EINVAL;
    if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) return -EAFNOSUPPORT;
    if (!tpi_family_ok(ep, addr)) return -EAFNOSUPPORT;
    tp_conn_t *c = conn_alloc(ep, addr, true);
    if (!c) return -ENOMEM;
    int rc = -EIO;
    memcpy(c->peer_id, peer_id, ID_HEX_LEN + 1);
    if (hex_decode(peer_id, ID_HEX_LEN, c->peer_pk, 32) != 0) {
        rc = -EINVAL;
        goto fail;
    }
    ngtcp2_cid dcid, scid;
    dcid.datalen = 18;
    randombytes_buf(dcid.data, dcid.datalen);
    scid.datalen = SCID_LEN;
    randombytes_buf(scid.data, scid.datalen);
    ngtcp2_settings st;
    ngtcp2_transport_params tp;
    settings_params(ep, &st, &tp);
    ngtcp2_path path = {tpi_local_for(ep, (struct sockaddr *)&c->remote),
                        {(struct sockaddr *)&c->remote, c->remote_len},
                        NULL};
    ngtcp2_callbacks cbs;
    callbacks(&cbs, true);
    if (ngtcp2_conn_client_new(&c->q, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &cbs, &st, &tp,
                               NULL, c) != 0)
        goto fail;
    if ((rc = tls_setup(c)) != 0) goto fail;
    ngtcp2_conn_set_tls_native_handle(c->q, c->tls);
    ngtcp2_conn_set_keep_alive_timeout(c->q, ep->cfg.keepalive_ms * NGTCP2_MILLISECONDS);
    if ((rc = tpi_cid_add(c, &scid)) != 0) goto fail;
    tpi_mark_dirty(c);
    if (out) *out = c;
    return 0;
fail:
    conn_discard(c);
    return rc;
}

size_t tpi_unadmitted(const tp_endpoint_t *ep)
{
    size_t k = 0;
    for (const tp_conn_t *x = ep->conns; x; x = x->next)
        if (!x->ready && !x->outbound) k++;
    return k;
}

void tpi_accept_conn(tp_endpoint_t *ep, const ngtcp2_pkt_hd *hd, const ngtcp2_cid *odcid,
                     const struct sockaddr *addr)
{
    if (ep->closing || ep->n_conns >= ep->cfg.max_conns || tpi_unadmitted(ep) >= MAX_UNADMITTED) {
        ep->stats.dropped++;
        return;
    }
    tp_conn_t *c = conn_alloc(ep, addr, false);
    if (!c) return;
    ngtcp2_cid scid;
    scid.datalen = SCID_LEN;
    randombytes_buf(scid.data, scid.datalen);
    ngtcp2_settings st;
    ngtcp2_transport_params tp;
    settings_params(ep, &st, &tp);
    tp.original_dcid = hd->dcid;
    if (odcid) { /* the client came back with our Retry token: its address is proven */
        tp.original_dcid = *odcid;
        tp.retry_scid = hd->dcid;
        tp.retry_scid_present = 1;
        st.token = hd->token;
    }
    tp.stateless_reset_token_present = 1;
    tpi_reset_token(ep, &scid, tp.stateless_reset_token);
    ngtcp2_path path = {tpi_local_for(ep, (struct sockaddr *)&c->remote),
                        {(struct sockaddr *)&c->remote, c->remote_len},
                        NULL};
    ngtcp2_callbacks cbs;
    callbacks(&cbs, false);
    if (ngtcp2_conn_server_new(&c->q, &hd->scid, &scid, &path, hd->version, &cbs, &st, &tp, NULL,
                               c) != 0 ||
        tls_setup(c) != 0 || tpi_cid_add(c, &scid) != 0 || tpi_cid_add(c, &hd->dcid) != 0) {
        conn_discard(c);
        return;
    }
    ngtcp2_conn_set_tls_native_handle(c->q, c->tls);
    ngtcp2_conn_set_keep_alive_timeout(c->q, ep->cfg.keepalive_ms * NGTCP2_MILLISECONDS);
    ep->stats.conns_accepted++;
}

/* ---- packets in ---- */

/* The peer's address moved (its NAT rebound it, or it changed networks: ngtcp2 saw a
 * non-probing packet from a new address and migrated the connection, validating the new path):
 * our packets follow it. A relayed path never moves (its address is a virtual one). */
static void follow_path(tp_conn_t *c)
{
    const ngtcp2_path *cur = ngtcp2_conn_get_path(c->q);
    const struct sockaddr *r = cur ? cur->remote.addr : NULL;
    if (!r || cur->remote.addrlen > sizeof c->remote || tpi_same_addr(&c->remote, r) ||
        tp_addr_virtual((const struct sockaddr *)&c->remote) || tp_addr_virtual(r))
        return;
    char was[64] = "", now[64] = "";
    addr_format((const struct sockaddr *)&c->remote, was, sizeof was);
    addr_format(r, now, sizeof now);
    LOGI("quic", "peer %.12s moved from %s to %s: following it", c->peer_id, was, now);
    memset(&c->remote, 0, sizeof c->remote);
    memcpy(&c->remote, r, cur->remote.addrlen);
    c->remote_len = (socklen_t)cur->remote.addrlen;
    c->ep->stats.migrations++;
}

void tpi_conn_read(tp_conn_t *c, const struct sockaddr *from, const uint8_t *data, size_t n)
{
    if (c->closing || c->freed) return;
    ngtcp2_path path = {
        tpi_local_for(c->ep, from), {(struct sockaddr *)from, tpi_addr_len(from)}, NULL};
    ngtcp2_pkt_info pi = {0};
    int rv = ngtcp2_conn_read_pkt(c->q, &path, &pi, data, n, tpi_now_ns());
    if (rv == 0) {
        c->last_rx_ms = uv_now(c->ep->loop);
        follow_path(c);
    }
    if (rv != 0) {
        switch (rv) {
        case NGTCP2_ERR_DRAINING: {
            ngtcp2_connection_close_error pe;
            ngtcp2_conn_get_connection_close_error(c->q, &pe);
            c->close_err = -ECONNRESET;
            if (pe.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION &&
                pe.error_code == APP_ERR_ADMISSION)
                c->close_err = c->outbound ? TP_ERR_ADMISSION : -EACCES;
            if (!c->close_why[0])
                snprintf(c->close_why, sizeof c->close_why, "closed by peer%s%.*s",
                         pe.reasonlen ? ": " : "", (int)(pe.reasonlen < 100 ? pe.reasonlen : 100),
                         pe.reason ? (const char *)pe.reason : "");
            break;
        }
        case NGTCP2_ERR_DROP_CONN:
            c->close_err = -ECONNRESET;
            break;
        case NGTCP2_ERR_CRYPTO:
            ngtcp2_connection_close_error_set_transport_error_tls_alert(
                &c->ccerr, ngtcp2_conn_get_tls_alert(c->q), NULL, 0);
            if (!c->close_err) c->close_err = -EACCES;
            if (!c->close_why[0])
                snprintf(c->close_why, sizeof c->close_why, "TLS handshake failed (alert %u)",
                         ngtcp2_conn_get_tls_alert(c->q));
            break;
        default:
            if (c->ccerr.error_code == 0 &&
                c->ccerr.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT)
                ngtcp2_connection_close_error_set_transport_error_liberr(&c->ccerr, rv, NULL, 0);
            if (!c->close_err) c->close_err = -EIO;
            if (!c->close_why[0])
                snprintf(c->close_why, sizeof c->close_why, "%s", ngtcp2_strerror(rv));
        }
        tpi_conn_close_now(c);
        return;
    }
    /* answered (ACKs, retransmissions, credit) once per batch of datagrams, in the idle phase
     * of this loop turn, or deferred: see "scheduling" */
    c->rx_unflushed += n;
    c->rx_last_full = n >= NGTCP2_MAX_UDP_PAYLOAD_SIZE;
    tpi_conn_enqueue(c);
}

const char *tp_conn_peer_id(const tp_conn_t *c)
{
    return c->peer_id;
}

void tp_conn_remote(const tp_conn_t *c, struct sockaddr_storage *out)
{
    *out = c->remote;
}

const char *tp_conn_seen(const tp_conn_t *c)
{
    return c->seen;
}

const char *tp_conn_peer_mesh(const tp_conn_t *c)
{
    return c->peer_mesh;
}

bool tp_conn_is_ready(const tp_conn_t *c)
{
    return c->ready && !c->closing && !c->close_requested;
}

bool tp_conn_outbound(const tp_conn_t *c)
{
    return c->outbound;
}

double tp_conn_rtt_ms(const tp_conn_t *c)
{
    if (!c->q) return 0;
    ngtcp2_conn_stat st;
    ngtcp2_conn_get_conn_stat(c->q, &st);
    return (double)st.smoothed_rtt / (double)NGTCP2_MILLISECONDS;
}

double tp_conn_min_rtt_ms(const tp_conn_t *c)
{
    if (!c->q) return 0;
    ngtcp2_conn_stat st;
    ngtcp2_conn_get_conn_stat(c->q, &st);
    return st.min_rtt == UINT64_MAX ? -1 : (double)st.min_rtt / (double)NGTCP2_MILLISECONDS;
}

void tp_conn_set_data(tp_conn_t *c, void *data)
{
    c->data = data;
}

void *tp_conn_data(const tp_conn_t *c)
{
    return c->data;
}

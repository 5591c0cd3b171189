/* The sans-I/O TURN and STUN Binding clients (turn_client.h). */
#include "turn_client.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define MS 1000u

/* --- transactions: ids, retransmission (RFC 8489 6.2.1) --- */

static void cfg_defaults(turn_config_t *cfg)
{
    if (!cfg->rto_ms) cfg->rto_ms = 500;
    if (!cfg->max_tx) cfg->max_tx = 7;
    if (cfg->max_tx > 32) cfg->max_tx = 32;
    if (!cfg->rm) cfg->rm = 16;
}

static void new_tid(const turn_config_t *cfg, uint8_t tid[STUN_TID_LEN])
{
    if (cfg->rand)
        cfg->rand(cfg->rand_ud, tid, STUN_TID_LEN);
    else
        randombytes_buf(tid, STUN_TID_LEN);
}

static void tx_start(const turn_config_t *cfg, turn_tx_t *tx, uint64_t now)
{
    memset(tx, 0, sizeof *tx);
    new_tid(cfg, tx->tid);
    tx->active = tx->due = true;
    tx->rto = cfg->rto_ms;
    tx->next_at = now;
}

/* a new transaction for a retried request (401/438): a fresh id, the stale count kept */
static void tx_retry(const turn_config_t *cfg, turn_tx_t *tx, uint64_t now)
{
    uint8_t stale = tx->stale;
    tx_start(cfg, tx, now);
    tx->stale = stale;
}

static void tx_sent(const turn_config_t *cfg, turn_tx_t *tx, uint64_t now)
{
    tx->due = false;
    tx->sends++;
    if (tx->sends < cfg->max_tx) {
        tx->next_at = now + tx->rto;
        tx->rto *= 2;
    } else {
        tx->next_at = now + (uint64_t)cfg->rm * cfg->rto_ms;
    }
}

/* true when the transaction timed out (it is then inactive) */
static bool tx_tick(const turn_config_t *cfg, turn_tx_t *tx, uint64_t now)
{
    if (!tx->active || tx->due || now < tx->next_at) return false;
    if (tx->sends >= cfg->max_tx) {
        tx->active = false;
        return true;
    }
    tx->due = true;
    return false;
}

static uint64_t tx_deadline(const turn_tx_t *tx)
{
    if (!tx->active) return UINT64_MAX;
    return tx->due ? 0 : tx->next_at;
}

static uint64_t min64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static bool tx_match(const turn_tx_t *tx, const stun_msg_t *m)
{
    return tx->active && memcmp(tx->tid, m->tid, STUN_TID_LEN) == 0;
}

/* "CODE reason" of an error response, printable ASCII only */
static void error_text(const stun_msg_t *m, char *out, size_t cap)
{
    char r[96];
    size_t k = 0;
    for (size_t i = 0; i < m->error_reason.n && k + 1 < sizeof r; i++) {
        uint8_t ch = m->error_reason.p[i];
        r[k++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    r[k] = '\0';
    snprintf(out, cap, "%u %s", (unsigned)m->error_code, k ? r : "(no reason)");
}

static void unknown_text(const stun_msg_t *m, char *out, size_t cap)
{
    snprintf(out, cap, "the response has an unknown comprehension-required attribute 0x%04x",
             m->unknown[0]);
}

/* --- events --- */

static void push_event(turn_client_t *c, const turn_event_t *ev)
{
    if (c->ev_count == TURN_MAX_EVENTS) {
        c->ev_dropped++;
        return;
    }
    c->events[(c->ev_head + c->ev_count) % TURN_MAX_EVENTS] = *ev;
    c->ev_count++;
}

int turn_next_event(turn_client_t *c, turn_event_t *ev)
{
    if (!c->ev_count) return 0;
    *ev = c->events[c->ev_head];
    c->ev_head = (c->ev_head + 1) % TURN_MAX_EVENTS;
    c->ev_count--;
    return 1;
}

static void stop_all(turn_client_t *c)
{
    c->alloc_tx.active = false;
    for (size_t i = 0; i < TURN_MAX_PEERS; i++) {
        c->peers[i].perm_tx.active = false;
        c->peers[i].chan_tx.active = false;
    }
}

static void fail(turn_client_t *c, const char *what, const char *detail)
{
    if (c->state == TURN_FAILED || c->state == TURN_CLOSED) return;
    snprintf(c->reason, sizeof c->reason, "%s: %s", what, detail);
    c->state = TURN_FAILED;
    stop_all(c);
    turn_event_t ev = {.type = TURN_EV_FAILED, .reason = c->reason};
    push_event(c, &ev);
}

static void closed(turn_client_t *c)
{
    c->state = TURN_CLOSED;
    stop_all(c);
    turn_event_t ev = {.type = TURN_EV_CLOSED, .reason = "closed"};
    push_event(c, &ev);
}

static void peer_failed(turn_client_t *c, turn_peer_t *p, const char *what, const char *detail)
{
    snprintf(p->reason, sizeof p->reason, "%s: %s", what, detail);
    turn_event_t ev = {.type = TURN_EV_PEER_FAILED, .peer = p->addr, .reason = p->reason};
    push_event(c, &ev);
}

/* --- the client --- */

int turn_init(turn_client_t *c, const turn_config_t *cfg)
{
    memset(c, 0, sizeof *c);
    if (!cfg || !cfg->username || !cfg->password || strlen(cfg->username) > TURN_MAX_CRED ||
        strlen(cfg->password) > TURN_MAX_CRED)
        return -EINVAL;
    c->cfg = *cfg;
    cfg_defaults(&c->cfg);
    memcpy(c->username, cfg->username, strlen(cfg->username) + 1);
    memcpy(c->password, cfg->password, strlen(cfg->password) + 1);
    c->cfg.username = c->username;
    c->cfg.password = c->password;
    c->state = TURN_IDLE;
    c->next_channel = STUN_CHANNEL_MIN;
    return 0;
}

int turn_start(turn_client_t *c, uint64_t now)
{
    if (c->state != TURN_IDLE) return -EALREADY;
    c->state = TURN_ALLOCATING;
    c->alloc_tx.active = false;
    tx_start(&c->cfg, &c->alloc_tx, now);
    c->alloc_tx.authed = false;
    return 0;
}

turn_state_t turn_state(const turn_client_t *c)
{
    return c->state;
}

const char *turn_reason(const turn_client_t *c)
{
    return c->reason;
}

static turn_peer_t *find_peer(turn_client_t *c, const stun_addr_t *a)
{
    for (size_t i = 0; i < TURN_MAX_PEERS; i++)
        if (c->peers[i].used && stun_addr_equal(&c->peers[i].addr, a)) return &c->peers[i];
    return NULL;
}

static void peer_request_permission(turn_client_t *c, turn_peer_t *p, uint64_t now)
{
    p->perm_tx.active = false;
    tx_start(&c->cfg, &p->perm_tx, now);
    if (p->perm != TURN_P_READY) p->perm = TURN_P_PENDING;
}

static void peer_request_channel(turn_client_t *c, turn_peer_t *p, uint64_t now)
{
    if (c->cfg.no_channels) return;
    if (!p->channel) {
        p->channel = c->next_channel;
        /* numbers are not reused for another peer while they may still be bound: 0x4000-0x4FFF
         * (RFC 8656's range) cycles once every 4096 bindings */
        c->next_channel = c->next_channel >= 0x4FFF ? STUN_CHANNEL_MIN : c->next_channel + 1;
    }
    p->chan_tx.active = false;
    tx_start(&c->cfg, &p->chan_tx, now);
    if (p->chan != TURN_P_READY) p->chan = TURN_P_PENDING;
}

int turn_add_peer(turn_client_t *c, const stun_addr_t *peer, uint64_t now)
{
    if (!peer || (peer->family != 4 && peer->family != 6) || !peer->port) return -EINVAL;
    if (c->state == TURN_FAILED || c->state == TURN_CLOSING || c->state == TURN_CLOSED)
        return -EPIPE;
    if (c->state == TURN_ALLOCATED && peer->family != c->relayed.family) return -EINVAL;
    turn_peer_t *p = find_peer(c, peer);
    if (p) return (int)(p - c->peers);
    for (size_t i = 0; i < TURN_MAX_PEERS; i++) {
        if (c->peers[i].used) continue;
        p = &c->peers[i];
        memset(p, 0, sizeof *p);
        p->used = true;
        p->addr = *peer;
        if (c->state == TURN_ALLOCATED) peer_request_permission(c, p, now);
        return (int)i;
    }
    return -ENOSPC;
}

int turn_remove_peer(turn_client_t *c, const stun_addr_t *peer)
{
    turn_peer_t *p = find_peer(c, peer);
    if (!p) return -ENOENT;
    memset(p, 0, sizeof *p);
    return 0;
}

int turn_peer_state(const turn_client_t *c, const stun_addr_t *peer, int *perm, int *chan)
{
    for (size_t i = 0; i < TURN_MAX_PEERS; i++) {
        const turn_peer_t *p = &c->peers[i];
        if (!p->used || !stun_addr_equal(&p->addr, peer)) continue;
        if (perm) *perm = p->perm;
        if (chan) *chan = p->chan;
        return 0;
    }
    return -ENOENT;
}

void turn_close(turn_client_t *c, uint64_t now)
{
    if (c->state == TURN_ALLOCATED) {
        stop_all(c);
        c->state = TURN_CLOSING;
        tx_start(&c->cfg, &c->alloc_tx, now);
        c->alloc_tx.stale = 0;
        return;
    }
    if (c->state == TURN_IDLE || c->state == TURN_ALLOCATING) closed(c);
}

static stun_cred_t cred_of(const turn_client_t *c)
{
    stun_cred_t cr = {.username = c->username,
                      .realm = c->realm,
                      .realm_len = c->realm_len,
                      .nonce = c->nonce,
                      .nonce_len = c->nonce_len};
    memcpy(cr.key, c->key, STUN_KEY_LEN);
    return cr;
}

int turn_poll_send(turn_client_t *c, uint8_t *buf, size_t cap, uint64_t now)
{
    stun_cred_t cr = cred_of(c);
    const stun_cred_t *crp = c->have_key ? &cr : NULL;
    int n;
    if (c->alloc_tx.active && c->alloc_tx.due) {
        turn_tx_t *tx = &c->alloc_tx;
        if (c->state == TURN_ALLOCATING)
            n = stun_encode_allocate(buf, cap, tx->tid, crp, c->cfg.lifetime_s);
        else if (c->state == TURN_CLOSING)
            n = stun_encode_refresh(buf, cap, tx->tid, crp, 0);
        else
            n = stun_encode_refresh(buf, cap, tx->tid, crp,
                                    c->cfg.lifetime_s ? c->cfg.lifetime_s : c->lifetime_s);
        if (n < 0) return n;
        tx->authed = crp != NULL;
        tx_sent(&c->cfg, tx, now);
        return n;
    }
    if (c->state != TURN_ALLOCATED) return 0;
    for (size_t i = 0; i < TURN_MAX_PEERS; i++) {
        turn_peer_t *p = &c->peers[i];
        if (!p->used) continue;
        if (p->perm_tx.active && p->perm_tx.due) {
            n = stun_encode_create_permission(buf, cap, p->perm_tx.tid, crp, &p->addr);
            if (n < 0) return n;
            p->perm_tx.authed = crp != NULL;
            tx_sent(&c->cfg, &p->perm_tx, now);
            return n;
        }
        if (p->chan_tx.active && p->chan_tx.due) {
            n = stun_encode_channel_bind(buf, cap, p->chan_tx.tid, crp, p->channel, &p->addr);
            if (n < 0) return n;
            p->chan_tx.authed = crp != NULL;
            tx_sent(&c->cfg, &p->chan_tx, now);
            return n;
        }
    }
    return 0;
}

void turn_tick(turn_client_t *c, uint64_t now)
{
    if (tx_tick(&c->cfg, &c->alloc_tx, now)) {
        if (c->state == TURN_ALLOCATING)
            fail(c, "allocate", "no response from the TURN server");
        else if (c->state == TURN_CLOSING)
            closed(c);
        else if (c->state == TURN_ALLOCATED)
            fail(c, "refresh", "no response from the TURN server");
    }
    if (c->state != TURN_ALLOCATED) return;
    if (!c->alloc_tx.active && now >= c->refresh_at) {
        tx_start(&c->cfg, &c->alloc_tx, now);
        c->alloc_tx.stale = 0;
    }
    for (size_t i = 0; i < TURN_MAX_PEERS; i++) {
        turn_peer_t *p = &c->peers[i];
        if (!p->used) continue;
        if (tx_tick(&c->cfg, &p->perm_tx, now)) {
            p->perm = TURN_P_FAILED;
            peer_failed(c, p, "permission", "no response from the TURN server");
        }
        if (tx_tick(&c->cfg, &p->chan_tx, now)) {
            p->chan = TURN_P_FAILED;
            peer_failed(c, p, "channel bind", "no response from the TURN server");
        }
        if (p->perm == TURN_P_READY && !p->perm_tx.active && now >= p->perm_refresh_at) {
            tx_start(&c->cfg, &p->perm_tx, now);
            p->perm_tx.stale = 0;
        }
        if (p->chan == TURN_P_READY && !p->chan_tx.active && now >= p->chan_refresh_at) {
            tx_start(&c->cfg, &p->chan_tx, now);
            p->chan_tx.stale = 0;
        }
    }
}

uint64_t turn_next_timeout(const turn_client_t *c)
{
    uint64_t t = tx_deadline(&c->alloc_tx);
    if (c->state != TURN_ALLOCATED) return t;
    if (!c->alloc_tx.active) t = min64(t, c->refresh_at);
    for (size_t i = 0; i < TURN_MAX_PEERS; i++) {
        const turn_peer_t *p = &c->peers[i];
        if (!p->used) continue;
        t = min64(t, tx_deadline(&p->perm_tx));
        t = min64(t, tx_deadline(&p->chan_tx));
        if (p->perm == TURN_P_READY && !p->perm_tx.active) t = min64(t, p->perm_refresh_at);
        if (p->chan == TURN_P_READY && !p->chan_tx.active) t = min64(t, p->chan_refresh_at);
    }
    return t;
}

/* takes REALM and NONCE of a 401/438; false if it has no NONCE (or, for a 401, no REALM) */
static bool take_challenge(turn_client_t *c, const stun_msg_t *m, bool need_realm)
{
    if (!(m->have & STUN_HAVE_NONCE)) return false;
    if (m->have & STUN_HAVE_REALM) {
        bool changed = m->realm.n != c->realm_len || memcmp(m->realm.p, c->realm, c->realm_len);
        memcpy(c->realm, m->realm.p, m->realm.n);
        c->realm_len = m->realm.n;
        if (changed || !c->have_key) {
            if (stun_long_term_key(c->username, (const char *)c->realm, c->realm_len, c->password,
                                   c->key) < 0)
                return false;
            c->have_key = true;
        }
    } else if (need_realm || !c->have_key) {
        return false;
    }
    memcpy(c->nonce, m->nonce.p, m->nonce.n);
    c->nonce_len = m->nonce.n;
    return true;
}

/* the response's integrity: true if acceptable (required on success to an authenticated one) */
static bool response_ok(const turn_client_t *c, const turn_tx_t *tx, const uint8_t *p, size_t n,
                        const stun_msg_t *m)
{
    if (!tx->authed || m->cls == STUN_ERROR) return true;
    return c->have_key && stun_check_integrity(p, n, m, c->key, STUN_KEY_LEN) == 0;
}

static uint64_t refresh_delay_ms(uint32_t lifetime_s)
{
    /* a minute before it ends, or halfway for short lifetimes */
    uint64_t l = (uint64_t)lifetime_s * MS;
    return lifetime_s > 120 ? l - 60 * MS : l / 2;
}

static void on_alloc_response(turn_client_t *c, const uint8_t *p, size_t n, const stun_msg_t *m,
                              uint64_t now)
{
    turn_tx_t *tx = &c->alloc_tx;
    const char *what = c->state == TURN_ALLOCATING ? "allocate"
                       : c->state == TURN_CLOSING  ? "deallocate"
                                                   : "refresh";
    char err[TURN_REASON_LEN];
    if (m->n_unknown) { /* RFC 8489 7.3.3: the transaction failed */
        if (c->state == TURN_CLOSING) {
            closed(c);
            return;
        }
        unknown_text(m, err, sizeof err);
        fail(c, what, err);
        return;
    }
    if (m->cls == STUN_SUCCESS) {
        if (c->state == TURN_CLOSING) {
            closed(c);
            return;
        }
        uint32_t lifetime = m->have & STUN_HAVE_LIFETIME ? m->lifetime : TURN_DEFAULT_LIFETIME_S;
        if (lifetime == 0) {
            fail(c, what, "the server granted a zero lifetime");
            return;
        }
        c->lifetime_s = lifetime;
        tx->active = false;
        c->refresh_at = now + refresh_delay_ms(lifetime);
        if (c->state == TURN_ALLOCATED) {
            turn_event_t ev = {.type = TURN_EV_REFRESHED, .lifetime = lifetime};
            push_event(c, &ev);
            return;
        }
        if (!(m->have & STUN_HAVE_XOR_RELAYED)) {
            fail(c, what, "the success response has no XOR-RELAYED-ADDRESS");
            return;
        }
        c->relayed = m->xor_relayed;
        if (m->have & STUN_HAVE_XOR_MAPPED) c->mapped = m->xor_mapped;
        c->state = TURN_ALLOCATED;
        turn_event_t ev = {.type = TURN_EV_ALLOCATED,
                           .relayed = c->relayed,
                           .mapped = c->mapped,
                           .lifetime = lifetime};
        push_event(c, &ev);
        for (size_t i = 0; i < TURN_MAX_PEERS; i++) {
            turn_peer_t *pe = &c->peers[i];
            if (!pe->used) continue;
            if (pe->addr.family != c->relayed.family) {
                pe->perm = TURN_P_FAILED;
                peer_failed(c, pe, "permission", "not the relayed address's family");
                continue;
            }
            peer_request_permission(c, pe, now);
        }
        return;
    }
    /* an error response */
    if (!(m->have & STUN_HAVE_ERROR)) {
        fail(c, what, "an error response without ERROR-CODE");
        return;
    }
    error_text(m, err, sizeof err);
    if (m->error_code == 438 && tx->stale < TURN_MAX_STALE && take_challenge(c, m, false)) {
        tx->stale++;
        c->stale_retries++;
        tx_retry(&c->cfg, tx, now);
        return;
    }
    if (c->state == TURN_CLOSING) {
        closed(c); /* nothing to delete any more */
        return;
    }
    if (m->error_code == 401 && c->state == TURN_ALLOCATING && !tx->authed && c->auth_tries == 0) {
        c->auth_tries++;
        if (!take_challenge(c, m, true)) {
            strncat(err, " (no REALM/NONCE to answer)", sizeof err - strlen(err) - 1);
            fail(c, what, err);
            return;
        }
        tx_retry(&c->cfg, tx, now);
        return;
    }
    if (m->error_code == 401)
        strncat(err, " (wrong username or password?)", sizeof err - strlen(err) - 1);
    fail(c, what, err);
}

static void on_peer_response(turn_client_t *c, turn_peer_t *p, bool chan, const stun_msg_t *m,
                             uint64_t now)
{
    turn_tx_t *tx = chan ? &p->chan_tx : &p->perm_tx;
    const char *what = chan ? "channel bind" : "permission";
    if (m->n_unknown) {
        char err[TURN_REASON_LEN];
        unknown_text(m, err, sizeof err);
        tx->active = false;
        if (chan)
            p->chan = TURN_P_FAILED;
        else
            p->perm = TURN_P_FAILED;
        peer_failed(c, p, what, err);
        return;
    }
    if (m->cls == STUN_SUCCESS) {
        tx->active = false;
        if (chan) {
            bool first = p->chan != TURN_P_READY;
            p->chan = TURN_P_READY;
            p->chan_refresh_at = now + TURN_CHANNEL_REFRESH_S * MS;
            /* a channel binding installs the permission too */
            if (p->perm == TURN_P_READY) p->perm_refresh_at = now + TURN_PERMISSION_REFRESH_S * MS;
            if (first) {
                turn_event_t ev = {.type = TURN_EV_CHANNEL, .peer = p->addr, .channel = p->channel};
                push_event(c, &ev);
            }
        } else {
            bool first = p->perm != TURN_P_READY;
            p->perm = TURN_P_READY;
            p->perm_refresh_at = now + TURN_PERMISSION_REFRESH_S * MS;
            if (first) {
                turn_event_t ev = {.type = TURN_EV_PERMISSION, .peer = p->addr};
                push_event(c, &ev);
                if (p->chan == TURN_P_NONE) peer_request_channel(c, p, now);
            }
        }
        return;
    }
    char err[TURN_REASON_LEN];
    if (!(m->have & STUN_HAVE_ERROR)) {
        snprintf(err, sizeof err, "an error response without ERROR-CODE");
    } else {
        error_text(m, err, sizeof err);
        if ((m->error_code == 438 || m->error_code == 401) && tx->stale < TURN_MAX_STALE &&
            take_challenge(c, m, false)) {
            tx->stale++;
            c->stale_retries++;
            tx_retry(&c->cfg, tx, now);
            return;
        }
        if (m->error_code == 437) {
            strncat(err, " (the allocation is gone)", sizeof err - strlen(err) - 1);
            fail(c, what, err);
            return;
        }
    }
    tx->active = false;
    if (chan)
        p->chan = TURN_P_FAILED;
    else
        p->perm = TURN_P_FAILED;
    peer_failed(c, p, what, err);
}

static int on_response(turn_client_t *c, const uint8_t *p, size_t n, const stun_msg_t *m,
                       uint64_t now)
{
    if (tx_match(&c->alloc_tx, m)) {
        uint16_t want = c->state == TURN_ALLOCATING ? STUN_ALLOCATE : STUN_REFRESH;
        if (m->method != want || !response_ok(c, &c->alloc_tx, p, n, m)) return 0;
        on_alloc_response(c, p, n, m, now);
        return 0;
    }
    for (size_t i = 0; i < TURN_MAX_PEERS; i++) {
        turn_peer_t *pe = &c->peers[i];
        if (!pe->used) continue;
        if (tx_match(&pe->perm_tx, m)) {
            if (m->method != STUN_CREATE_PERMISSION || !response_ok(c, &pe->perm_tx, p, n, m))
                return 0;
            on_peer_response(c, pe, false, m, now);
            return 0;
        }
        if (tx_match(&pe->chan_tx, m)) {
            if (m->method != STUN_CHANNEL_BIND || !response_ok(c, &pe->chan_tx, p, n, m)) return 0;
            on_peer_response(c, pe, true, m, now);
            return 0;
        }
    }
    return 0; /* a stray or late response */
}

int turn_recv(turn_client_t *c, const uint8_t *p, size_t n, uint64_t now, turn_data_t *out)
{
    uint16_t ch;
    stun_bytes_t data;
    if (stun_channel_data_decode(p, n, &ch, &data) == 0) {
        if (c->state != TURN_ALLOCATED) return -ENOENT;
        for (size_t i = 0; i < TURN_MAX_PEERS; i++) {
            turn_peer_t *pe = &c->peers[i];
            if (!pe->used || pe->channel != ch || pe->chan == TURN_P_NONE ||
                pe->chan == TURN_P_FAILED)
                continue;
            out->peer = pe->addr;
            out->data = data.p;
            out->n = data.n;
            out->channel = true;
            return 1;
        }
        return -ENOENT;
    }
    stun_msg_t m;
    if (stun_decode(p, n, &m) < 0) return -EINVAL;
    if (m.cls == STUN_INDICATION) {
        if (m.method != STUN_DATA) return 0;
        if (c->state != TURN_ALLOCATED) return -ENOENT;
        if ((m.have & (STUN_HAVE_XOR_PEER | STUN_HAVE_DATA)) !=
            (STUN_HAVE_XOR_PEER | STUN_HAVE_DATA))
            return -EINVAL;
        out->peer = m.xor_peer;
        out->data = m.data.p;
        out->n = m.data.n;
        out->channel = false;
        return 1;
    }
    if (m.cls == STUN_REQUEST) return 0; /* a client answers no requests */
    return on_response(c, p, n, &m, now);
}

int turn_wrap(turn_client_t *c, const stun_addr_t *peer, const uint8_t *data, size_t n,
              uint8_t *out, size_t cap)
{
    if (c->state != TURN_ALLOCATED) return -EPIPE;
    turn_peer_t *p = find_peer(c, peer);
    if (!p) return -ENOENT;
    if (p->chan == TURN_P_READY) return stun_channel_data_encode(out, cap, p->channel, data, n);
    if (p->perm != TURN_P_READY) return -EAGAIN;
    uint8_t tid[STUN_TID_LEN];
    new_tid(&c->cfg, tid);
    return stun_encode_send(out, cap, tid, peer, data, n);
}

/* --- STUN Binding --- */

void stun_bind_init(stun_bind_t *b, const turn_config_t *cfg)
{
    memset(b, 0, sizeof *b);
    if (cfg) b->cfg = *cfg;
    b->cfg.username = b->cfg.password = NULL;
    cfg_defaults(&b->cfg);
}

void stun_bind_start(stun_bind_t *b, uint64_t now)
{
    b->state = STUN_BIND_WAITING;
    b->tx.active = false;
    tx_start(&b->cfg, &b->tx, now);
}

int stun_bind_recv(stun_bind_t *b, const uint8_t *p, size_t n)
{
    stun_msg_t m;
    if (stun_decode(p, n, &m) < 0) return -EINVAL;
    if (b->state != STUN_BIND_WAITING || !tx_match(&b->tx, &m) || m.method != STUN_BINDING ||
        (m.cls != STUN_SUCCESS && m.cls != STUN_ERROR))
        return 0;
    b->tx.active = false;
    if (m.cls == STUN_ERROR) {
        char err[TURN_REASON_LEN - 16];
        if (m.have & STUN_HAVE_ERROR)
            error_text(&m, err, sizeof err);
        else
            snprintf(err, sizeof err, "an error response");
        snprintf(b->reason, sizeof b->reason, "binding: %s", err);
        b->state = STUN_BIND_FAILED;
        return 1;
    }
    if (m.have & STUN_HAVE_XOR_MAPPED) {
        b->mapped = m.xor_mapped;
    } else if (m.have & STUN_HAVE_MAPPED) {
        b->mapped = m.mapped;
    } else {
        snprintf(b->reason, sizeof b->reason, "binding: the response has no mapped address");
        b->state = STUN_BIND_FAILED;
        return 1;
    }
    b->state = STUN_BIND_DONE;
    return 1;
}

int stun_bind_poll_send(stun_bind_t *b, uint8_t *buf, size_t cap, uint64_t now)
{
    if (!b->tx.active || !b->tx.due) return 0;
    int n = stun_encode_binding(buf, cap, b->tx.tid);
    if (n < 0) return n;
    tx_sent(&b->cfg, &b->tx, now);
    return n;
}

void stun_bind_tick(stun_bind_t *b, uint64_t now)
{
    if (tx_tick(&b->cfg, &b->tx, now) && b->state == STUN_BIND_WAITING) {
        snprintf(b->reason, sizeof b->reason, "binding: no response from the STUN server");
        b->state = STUN_BIND_FAILED;
    }
}

uint64_t stun_bind_next_timeout(const stun_bind_t *b)
{
    return tx_deadline(&b->tx);
}

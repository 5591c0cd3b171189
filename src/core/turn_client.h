/* A sans-I/O TURN client over UDP (RFC 8656, was 5766) and a STUN Binding client (RFC 8489).
 *
 * Nothing here touches a socket or a clock: the driver passes the time in (milliseconds, any
 * monotonic origin) and moves the datagrams. Everything goes to and comes from one server (the
 * driver knows its address). The driver's loop:
 *
 *   turn_init(&c, &cfg); turn_start(&c, now);
 *   after every call below: while ((n = turn_poll_send(&c, buf, sizeof buf, now)) > 0)
 *                               send buf[0..n) to the server;
 *                           while (turn_next_event(&c, &ev)) handle ev;
 *                           arm a timer for turn_next_timeout(&c) (UINT64_MAX: none)
 *   a datagram from the server:  turn_recv(&c, p, n, now, &in) == 1 -> in.peer sent in.data
 *   the timer fires:             turn_tick(&c, now)
 *   talk to a peer:              turn_add_peer(&c, &peer, now) (permission, then a channel);
 *                                turn_wrap(&c, &peer, data, n, out, cap) -> a datagram for
 *                                the server (ChannelData once bound, else a Send indication)
 *   leave:                       turn_close(&c, now) (Refresh LIFETIME 0), until TURN_EV_CLOSED
 *
 * Allocate is sent without credentials first; the 401 challenge's REALM and NONCE make the
 * long-term key and the request is sent again with them; a 438 (stale nonce) on any request
 * resends it with the new nonce (bounded). Requests are retransmitted RFC 8489 style (RTO
 * doubling, max_tx sends, then rm * rto). The allocation is refreshed before its lifetime ends,
 * permissions every 240 s, channels every 540 s. Success responses to authenticated requests
 * must carry a valid MESSAGE-INTEGRITY (others are ignored); a response with an unknown
 * comprehension-required attribute fails its transaction (RFC 8489 7.3.3). */
#ifndef MESH_CORE_TURN_CLIENT_H
#define MESH_CORE_TURN_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stun.h"

#define TURN_MAX_PEERS 64
#define TURN_MAX_EVENTS (2 * TURN_MAX_PEERS + 8)
#define TURN_REASON_LEN 160
#define TURN_MAX_CRED 256             /* username, password */
#define TURN_PERMISSION_REFRESH_S 240 /* permissions last 300 s */
#define TURN_CHANNEL_REFRESH_S 540    /* channels last 600 s */
#define TURN_DEFAULT_LIFETIME_S 600
#define TURN_MAX_STALE 3 /* 438 retries per request */

typedef void (*turn_rand_fn)(void *ud, uint8_t *buf, size_t n);

typedef struct {
    const char *username; /* long-term credentials (copied by turn_init) */
    const char *password;
    uint32_t lifetime_s; /* requested allocation lifetime; 0: the server's default */
    bool no_channels;    /* permissions only: data as Send/Data indications */
    uint32_t rto_ms;     /* initial retransmission timeout; 0: 500 */
    uint32_t max_tx;     /* sends per request (Rc); 0: 7 */
    uint32_t rm;         /* wait after the last send, in initial RTOs; 0: 16 */
    turn_rand_fn rand;   /* transaction ids; NULL: libsodium's randombytes_buf */
    void *rand_ud;
} turn_config_t;

typedef enum {
    TURN_IDLE,
    TURN_ALLOCATING,
    TURN_ALLOCATED,
    TURN_CLOSING,
    TURN_CLOSED,
    TURN_FAILED,
} turn_state_t;

typedef enum {
    TURN_EV_ALLOCATED = 1, /* relayed, mapped (mapped.family 0 if the server sent none) */
    TURN_EV_FAILED,        /* reason; the client is in TURN_FAILED */
    TURN_EV_PERMISSION,    /* peer: its permission is installed (data may flow) */
    TURN_EV_CHANNEL,       /* peer, channel: bound (data goes as ChannelData) */
    TURN_EV_PEER_FAILED,   /* peer, reason: its permission or channel was refused/timed out */
    TURN_EV_CLOSED,        /* the allocation is deleted (or the delete timed out) */
    TURN_EV_REFRESHED,     /* lifetime: the allocation was refreshed */
} turn_event_type_t;

typedef struct {
    turn_event_type_t type;
    stun_addr_t relayed, mapped, peer;
    uint16_t channel;
    uint32_t lifetime;  /* TURN_EV_ALLOCATED, TURN_EV_REFRESHED: seconds granted */
    const char *reason; /* valid as long as the client */
} turn_event_t;

typedef struct {
    bool active, due, authed;
    uint8_t sends, stale;
    uint8_t tid[STUN_TID_LEN];
    uint64_t next_at;
    uint64_t rto;
} turn_tx_t;

enum { TURN_P_NONE, TURN_P_PENDING, TURN_P_READY, TURN_P_FAILED };

typedef struct {
    bool used;
    stun_addr_t addr;
    uint8_t perm, chan; /* TURN_P_* */
    uint16_t channel;
    uint64_t perm_refresh_at, chan_refresh_at;
    turn_tx_t perm_tx, chan_tx;
    char reason[TURN_REASON_LEN];
} turn_peer_t;

typedef struct {
    turn_config_t cfg;
    char username[TURN_MAX_CRED + 1], password[TURN_MAX_CRED + 1];
    turn_state_t state;
    char reason[TURN_REASON_LEN];
    bool have_key;
    uint8_t key[STUN_KEY_LEN];
    uint8_t realm[STUN_MAX_STRING], nonce[STUN_MAX_STRING];
    size_t realm_len, nonce_len;
    stun_addr_t relayed, mapped;
    uint32_t lifetime_s;
    uint64_t refresh_at;
    turn_tx_t alloc_tx; /* Allocate, Refresh, and the closing Refresh(0) */
    uint8_t auth_tries;
    uint32_t stale_retries; /* requests resent after a 438 (stale nonce), all together */
    uint16_t next_channel;
    turn_peer_t peers[TURN_MAX_PEERS];
    turn_event_t events[TURN_MAX_EVENTS];
    size_t ev_head, ev_count, ev_dropped;
} turn_client_t;

/* what turn_recv found for the application */
typedef struct {
    stun_addr_t peer;
    const uint8_t *data; /* points into the datagram given to turn_recv */
    size_t n;
    bool channel; /* came as ChannelData (else a Data indication) */
} turn_data_t;

/* 0, or -EINVAL (no or too long credentials) */
int turn_init(turn_client_t *c, const turn_config_t *cfg);
/* sends Allocate; -EALREADY unless idle */
int turn_start(turn_client_t *c, uint64_t now);
/* a datagram from the server: 1 application data in *out, 0 consumed (a response, or nothing
 * for us: a stray response, one failing its integrity), -EINVAL neither STUN nor ChannelData
 * (or malformed), -ENOENT ChannelData/Data for no known channel or before the allocation */
int turn_recv(turn_client_t *c, const uint8_t *p, size_t n, uint64_t now, turn_data_t *out);
/* the next datagram for the server into buf: its length, 0 none, -ENOBUFS (cap too small; it
 * stays queued) */
int turn_poll_send(turn_client_t *c, uint8_t *buf, size_t cap, uint64_t now);
void turn_tick(turn_client_t *c, uint64_t now);
/* the time turn_tick wants to run next (now or earlier: at once); UINT64_MAX none */
uint64_t turn_next_timeout(const turn_client_t *c);
/* 1 and *ev, or 0 none */
int turn_next_event(turn_client_t *c, turn_event_t *ev);
/* a permission (and channel unless cfg.no_channels) for peer; before the allocation: sent once
 * allocated. The peer's index, or -ENOSPC (TURN_MAX_PEERS), -EINVAL (bad address, or another
 * family than the relayed address), -EPIPE (failed or closing) */
int turn_add_peer(turn_client_t *c, const stun_addr_t *peer, uint64_t now);
/* forgets the peer (the server lets its permission and channel expire); 0 or -ENOENT */
int turn_remove_peer(turn_client_t *c, const stun_addr_t *peer);
/* data for peer as a datagram for the server in out (out must not overlap data): its length,
 * -ENOENT not an added peer, -EAGAIN its permission is not installed yet, -EPIPE not allocated,
 * -ENOBUFS cap too small (a Send indication takes 36 + n + 3 bytes for IPv4, ChannelData 4 + n
 * + 3) */
int turn_wrap(turn_client_t *c, const stun_addr_t *peer, const uint8_t *data, size_t n,
              uint8_t *out, size_t cap);
/* deletes the allocation (Refresh with LIFETIME 0); TURN_EV_CLOSED follows. Not allocated yet:
 * closed at once. */
void turn_close(turn_client_t *c, uint64_t now);
turn_state_t turn_state(const turn_client_t *c);
const char *turn_reason(const turn_client_t *c);
/* the peer's TURN_P_* permission and channel states; -ENOENT unknown */
int turn_peer_state(const turn_client_t *c, const stun_addr_t *peer, int *perm, int *chan);

/* --- a STUN Binding client (--stun): the same driving, one request --- */
typedef enum {
    STUN_BIND_IDLE,
    STUN_BIND_WAITING,
    STUN_BIND_DONE,
    STUN_BIND_FAILED
} stun_bind_state_t;

typedef struct {
    turn_config_t cfg; /* rto_ms, max_tx, rm, rand */
    stun_bind_state_t state;
    turn_tx_t tx;
    stun_addr_t mapped; /* the XOR-MAPPED-ADDRESS (or MAPPED-ADDRESS) once done */
    char reason[TURN_REASON_LEN];
} stun_bind_t;

void stun_bind_init(stun_bind_t *b, const turn_config_t *cfg);
void stun_bind_start(stun_bind_t *b, uint64_t now);
/* 1 done (b->mapped), 0 not its answer, -EINVAL not STUN; an error response fails it */
int stun_bind_recv(stun_bind_t *b, const uint8_t *p, size_t n);
int stun_bind_poll_send(stun_bind_t *b, uint8_t *buf, size_t cap, uint64_t now);
void stun_bind_tick(stun_bind_t *b, uint64_t now);
uint64_t stun_bind_next_timeout(const stun_bind_t *b);

#endif

/* mesh-turn-probe: drives src/core/turn_client.h on a real UDP socket (libuv), for
 * tests/integration/test_turn.py against coturn.
 *
 *   mesh-turn-probe stun HOST:PORT [--rto MS]
 *       prints "local IP:PORT" (its socket) and "mapped IP:PORT"; exit 0, or "failed: REASON"
 *       and exit 1
 *   mesh-turn-probe turn HOST:PORT USER PASS PEER_IP:PEER_PORT [--no-channel] [--lifetime S]
 *                   [--rto MS] [--peer-delay MS]
 *       allocates ("relayed IP:PORT", "mapped IP:PORT"), asks a permission ("permission PEER")
 *       and a channel ("channel PEER 0xNNNN") for the peer, then echoes every datagram a peer
 *       sends to the relayed address back to it through the server ("echo N in=channel|data
 *       out=channel|send"). --peer-delay adds the peer that long after the allocation (a nonce
 *       may be stale by then: "permission PEER stale_retries=N" counts the 438 retries).
 * SIGTERM/SIGINT deallocates: "deallocated", exit 0. A failure: "failed: REASON", exit 1.
 *
 * HOST is numeric (IPv4 or [IPv6]); the socket binds the server's loopback/any address, port 0. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "stun.h"
#include "turn_client.h"

typedef struct {
    uv_loop_t *loop;
    uv_udp_t udp;
    uv_timer_t timer;
    uv_signal_t sigterm, sigint;
    struct sockaddr_storage server;
    bool turn_mode;
    turn_client_t turn;
    stun_bind_t bind;
    stun_addr_t peer;
    uint64_t peer_delay_ms; /* --peer-delay: the peer is added this long after the allocation */
    uv_timer_t peer_timer;
    int exit_code;
    bool stopping;
} probe_t;

static void on_closed(uv_handle_t *h)
{
    (void)h;
}

static void stop(probe_t *p, int code)
{
    if (p->stopping) return;
    p->stopping = true;
    p->exit_code = code;
    uv_close((uv_handle_t *)&p->udp, on_closed);
    uv_close((uv_handle_t *)&p->timer, on_closed);
    uv_close((uv_handle_t *)&p->peer_timer, on_closed);
    uv_close((uv_handle_t *)&p->sigterm, on_closed);
    uv_close((uv_handle_t *)&p->sigint, on_closed);
}

static void send_server(probe_t *p, const uint8_t *buf, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)buf, (unsigned)n);
    int rc = uv_udp_try_send(&p->udp, &b, 1, (const struct sockaddr *)&p->server);
    if (rc < 0) fprintf(stderr, "mesh-turn-probe: send: %s\n", uv_strerror(rc));
}

static void on_timer(uv_timer_t *t);
static void pump(probe_t *p);

static void add_peer(probe_t *p)
{
    if (turn_add_peer(&p->turn, &p->peer, uv_now(p->loop)) < 0) {
        printf("failed: cannot add the peer\n");
        stop(p, 1);
    }
}

static void on_peer_timer(uv_timer_t *t)
{
    probe_t *p = t->data;
    add_peer(p);
    pump(p);
}

/* sends what the client has, handles its events, rearms the timer */
static void pump(probe_t *p)
{
    if (p->stopping) return;
    uint8_t buf[1500];
    uint64_t now = uv_now(p->loop);
    int n;
    char s1[64], s2[64];
    if (!p->turn_mode) {
        while ((n = stun_bind_poll_send(&p->bind, buf, sizeof buf, now)) > 0)
            send_server(p, buf, (size_t)n);
        if (p->bind.state == STUN_BIND_DONE) {
            printf("mapped %s\n", stun_addr_str(&p->bind.mapped, s1, sizeof s1));
            stop(p, 0);
            return;
        }
        if (p->bind.state == STUN_BIND_FAILED) {
            printf("failed: %s\n", p->bind.reason);
            stop(p, 1);
            return;
        }
        uint64_t t = stun_bind_next_timeout(&p->bind);
        if (t != UINT64_MAX) uv_timer_start(&p->timer, on_timer, t > now ? t - now : 0, 0);
        return;
    }
    while ((n = turn_poll_send(&p->turn, buf, sizeof buf, now)) > 0)
        send_server(p, buf, (size_t)n);
    turn_event_t ev;
    bool again = false;
    while (turn_next_event(&p->turn, &ev)) {
        switch (ev.type) {
        case TURN_EV_ALLOCATED:
            printf("relayed %s\n", stun_addr_str(&ev.relayed, s1, sizeof s1));
            if (ev.mapped.family) printf("mapped %s\n", stun_addr_str(&ev.mapped, s2, sizeof s2));
            printf("lifetime %u\n", (unsigned)ev.lifetime);
            if (p->peer_delay_ms) {
                uv_timer_start(&p->peer_timer, on_peer_timer, p->peer_delay_ms, 0);
                break;
            }
            add_peer(p);
            if (p->stopping) return;
            again = true;
            break;
        case TURN_EV_PERMISSION:
            printf("permission %s stale_retries=%u\n", stun_addr_str(&ev.peer, s1, sizeof s1),
                   (unsigned)p->turn.stale_retries);
            again = true;
            break;
        case TURN_EV_CHANNEL:
            printf("channel %s 0x%04x\n", stun_addr_str(&ev.peer, s1, sizeof s1), ev.channel);
            break;
        case TURN_EV_REFRESHED:
            printf("refreshed lifetime=%u stale_retries=%u\n", (unsigned)ev.lifetime,
                   (unsigned)p->turn.stale_retries);
            break;
        case TURN_EV_PEER_FAILED:
            printf("peer failed: %s\n", ev.reason);
            break;
        case TURN_EV_FAILED:
            printf("failed: %s\n", ev.reason);
            stop(p, 1);
            return;
        case TURN_EV_CLOSED:
            printf("deallocated\n");
            stop(p, 0);
            return;
        }
    }
    if (again) {
        pump(p);
        return;
    }
    uint64_t t = turn_next_timeout(&p->turn);
    if (t != UINT64_MAX)
        uv_timer_start(&p->timer, on_timer, t > now ? t - now : 0, 0);
    else
        uv_timer_stop(&p->timer);
}

static void on_timer(uv_timer_t *t)
{
    probe_t *p = t->data;
    uint64_t now = uv_now(p->loop);
    if (p->turn_mode)
        turn_tick(&p->turn, now);
    else
        stun_bind_tick(&p->bind, now);
    pump(p);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    static char slab[65536]; /* scratch: consumed in on_recv before the next read */
    (void)h;
    *b = uv_buf_init(slab, sizeof slab);
}

static void on_recv(uv_udp_t *u, ssize_t nread, const uv_buf_t *b, const struct sockaddr *from,
                    unsigned flags)
{
    probe_t *p = u->data;
    if (nread <= 0 || !from || (flags & UV_UDP_PARTIAL)) return;
    stun_addr_t src, srv;
    stun_addr_from_sockaddr((const struct sockaddr *)&p->server, &srv);
    if (stun_addr_from_sockaddr(from, &src) < 0 || !stun_addr_equal(&src, &srv))
        return; /* not the server */
    const uint8_t *d = (const uint8_t *)b->base;
    uint64_t now = uv_now(p->loop);
    if (!p->turn_mode) {
        stun_bind_recv(&p->bind, d, (size_t)nread);
        pump(p);
        return;
    }
    turn_data_t in;
    if (turn_recv(&p->turn, d, (size_t)nread, now, &in) == 1) {
        uint8_t out[1600];
        uint8_t copy[1500];
        size_t n = in.n < sizeof copy ? in.n : sizeof copy;
        memcpy(copy, in.data, n);
        int w = turn_wrap(&p->turn, &in.peer, copy, n, out, sizeof out);
        if (w > 0) {
            send_server(p, out, (size_t)w);
            printf("echo %zu in=%s out=%s\n", n, in.channel ? "channel" : "data",
                   stun_is_channel_data(out, (size_t)w) ? "channel" : "send");
        } else {
            printf("echo %zu dropped: %s\n", n, strerror(-w));
        }
    }
    pump(p);
}

static void on_signal(uv_signal_t *s, int signum)
{
    probe_t *p = s->data;
    (void)signum;
    if (!p->turn_mode) {
        stop(p, 1);
        return;
    }
    turn_close(&p->turn, uv_now(p->loop));
    pump(p);
}

static int usage(void)
{
    fprintf(stderr, "usage: mesh-turn-probe stun HOST:PORT [--rto MS]\n"
                    "       mesh-turn-probe turn HOST:PORT USER PASS PEER_IP:PORT [--no-channel]"
                    " [--lifetime S] [--rto MS] [--peer-delay MS]\n");
    return 2;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) return usage();
    probe_t p;
    memset(&p, 0, sizeof p);
    p.loop = uv_default_loop();
    turn_config_t cfg = {0};
    int first_opt;
    if (strcmp(argv[1], "stun") == 0) {
        first_opt = 3;
    } else if (strcmp(argv[1], "turn") == 0 && argc >= 6) {
        p.turn_mode = true;
        cfg.username = argv[3];
        cfg.password = argv[4];
        if (stun_addr_parse(argv[5], &p.peer) < 0) return usage();
        first_opt = 6;
    } else {
        return usage();
    }
    for (int i = first_opt; i < argc; i++) {
        if (strcmp(argv[i], "--no-channel") == 0)
            cfg.no_channels = true;
        else if (strcmp(argv[i], "--lifetime") == 0 && i + 1 < argc)
            cfg.lifetime_s = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--peer-delay") == 0 && i + 1 < argc)
            p.peer_delay_ms = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rto") == 0 && i + 1 < argc)
            cfg.rto_ms = (uint32_t)strtoul(argv[++i], NULL, 10);
        else
            return usage();
    }
    stun_addr_t srv;
    if (stun_addr_parse(argv[2], &srv) < 0) return usage();
    stun_addr_to_sockaddr(&srv, srv.family == 4 ? AF_INET : AF_INET6, &p.server);

    uv_udp_init(p.loop, &p.udp);
    uv_timer_init(p.loop, &p.timer);
    uv_timer_init(p.loop, &p.peer_timer);
    uv_signal_init(p.loop, &p.sigterm);
    uv_signal_init(p.loop, &p.sigint);
    p.udp.data = p.timer.data = p.peer_timer.data = p.sigterm.data = p.sigint.data = &p;
    stun_addr_t local = srv;
    local.port = 0;
    struct sockaddr_storage ls;
    stun_addr_to_sockaddr(&local, local.family == 4 ? AF_INET : AF_INET6, &ls);
    int rc = uv_udp_bind(&p.udp, (const struct sockaddr *)&ls, 0);
    if (rc < 0) {
        fprintf(stderr, "mesh-turn-probe: bind: %s\n", uv_strerror(rc));
        return 1;
    }
    struct sockaddr_storage name;
    int len = sizeof name;
    uv_udp_getsockname(&p.udp, (struct sockaddr *)&name, &len);
    stun_addr_t me;
    char s[64];
    stun_addr_from_sockaddr((const struct sockaddr *)&name, &me);
    printf("local %s\n", stun_addr_str(&me, s, sizeof s));
    uv_udp_recv_start(&p.udp, on_alloc, on_recv);
    uv_signal_start(&p.sigterm, on_signal, SIGTERM);
    uv_signal_start(&p.sigint, on_signal, SIGINT);

    uint64_t now = uv_now(p.loop);
    if (p.turn_mode) {
        if (turn_init(&p.turn, &cfg) < 0) return usage();
        turn_start(&p.turn, now);
    } else {
        stun_bind_init(&p.bind, &cfg);
        stun_bind_start(&p.bind, now);
    }
    pump(&p);
    uv_run(p.loop, UV_RUN_DEFAULT);
    uv_loop_close(p.loop);
    return p.exit_code;
}

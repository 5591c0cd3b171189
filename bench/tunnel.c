/* bench/tunnel — the mesh transport against plain TCP, in the same run, on loopback.
 *
 * Or across an impaired link (bench/tunnel-impaired): BENCH_SERVER_NETNS / BENCH_CLIENT_NETNS
 * name the network namespaces (ip netns) the two processes enter after the fork, and
 * BENCH_SERVER_ADDR the server's address in its namespace (default 127.0.0.1).
 *
 * Two processes (one per core): a server and a client. Over one QUIC stream of the real
 * transport module (ngtcp2 + GnuTLS, admitted connection), then over one plain TCP connection:
 *   bulk:      the client sends BULK_MB MiB, the server consumes it and answers when all arrived;
 *   ping-pong: 64-byte request, 64-byte echo, ROUNDS times; round-trip latency p50/p99.
 * Then memory: the server's RSS growth per idle admitted peer connection (PEERS client
 * endpoints in the client process).
 * Output: a human table on stderr and one line on stdout:
 *   BENCH tunnel quic_gbps=… tcp_gbps=… bulk_ratio=… quic_rtt_p50_us=… tcp_rtt_p50_us=…
 *   added_rtt_p50_us=… rss_per_idle_peer_kb=…
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "identity.h"
#include "transport.h"

#define PING 64
/* every wait is bounded: a phase that makes no progress for this long fails the run */
#define IO_TIMEOUT_MS 30000

static size_t bulk_bytes = (size_t)512 << 20;
static int rounds = 2000;
static int peers = 100;

static const char *srv_addr = "127.0.0.1"; /* the server's address (and the client's target) */
static const char *cl_bind = "127.0.0.1";  /* the client's bind address: any inside a netns */
static uv_loop_t *loop;
static identity_t me;
static uint8_t secret[32];

static uint64_t now_ns(void)
{
    return uv_hrtime();
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void tick(uv_timer_t *t)
{
    (void)t;
}

/* poll() retrying on EINTR; > 0 some fd ready (or hung up), 0 timeout, < 0 error */
static int poll_in(struct pollfd *p, nfds_t n, int ms)
{
    int r;
    do
        r = poll(p, n, ms);
    while (r < 0 && errno == EINTR);
    return r;
}

/* read exactly n bytes from a pipe within ms milliseconds; 0 ok, -1 timeout, EOF or error */
static int read_full(int fd, void *buf, size_t n, int ms)
{
    uint8_t *b = buf;
    uint64_t end = now_ns() + (uint64_t)ms * 1000000u;
    while (n) {
        uint64_t t = now_ns();
        if (t >= end) return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll_in(&p, 1, (int)((end - t) / 1000000u) + 1) <= 0) return -1;
        ssize_t r = read(fd, b, n);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r <= 0) return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* blocking TCP socket whose every read/write gives up after IO_TIMEOUT_MS without progress */
static void tcp_opts(int fd)
{
    int one = 1;
    struct timeval tv = {IO_TIMEOUT_MS / 1000, 0};
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void run_until(volatile int *flag, uint64_t ms)
{
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, tick, 50, 50);
    uv_update_time(loop);
    uint64_t end = uv_now(loop) + ms;
    while (!*flag && uv_now(loop) < end)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

/* ---------------- server ---------------- */

typedef struct {
    int mode; /* 0 unknown, 'B' bulk sink, 'P' echo */
    size_t got;
} srv_stream_t;

static volatile int srv_ready_conns;
static int mem_timer_ticks;

static void srv_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    srv_stream_t *x = tp_stream_data(s);
    if (!x->mode && n) x->mode = p[0];
    x->got += n;
    if (x->mode == 'P') tp_stream_write(s, p, n);
    tp_stream_consumed(s, n);
}
static void srv_fin(tp_stream_t *s)
{
    srv_stream_t *x = tp_stream_data(s);
    if (x->mode == 'B') tp_stream_write(s, "done", 4);
    tp_stream_shutdown(s);
}
static void srv_close(tp_stream_t *s, int err)
{
    free(tp_stream_data(s));
}
static const tp_stream_cb_t srv_cb = {srv_data, srv_fin, NULL, srv_close};

static void srv_on_ready(tp_endpoint_t *ep, tp_conn_t *c)
{
    srv_ready_conns++;
}
static void srv_on_stream(tp_endpoint_t *ep, tp_conn_t *c, tp_stream_t *s)
{
    tp_stream_set_cb(s, &srv_cb, calloc(1, sizeof(srv_stream_t)));
}

/* accept one connection, or give up when the client process is gone (its control pipe
 * hangs up) or nothing arrives within IO_TIMEOUT_MS */
static int accept_bounded(int lfd, int ctl)
{
    struct pollfd p[2] = {{.fd = lfd, .events = POLLIN}, {.fd = ctl, .events = POLLIN}};
    if (poll_in(p, 2, IO_TIMEOUT_MS) <= 0 || !(p[0].revents & POLLIN)) return -1;
    int fd = accept(lfd, NULL, NULL);
    if (fd >= 0) tcp_opts(fd);
    return fd;
}

/* the plain-TCP reference: exactly two connections from the client, in order —
 * the bulk transfer, then the ping-pong */
static void tcp_server(int lfd, int ctl)
{
    int fd = accept_bounded(lfd, ctl);
    if (fd < 0) return;
    static uint8_t buf[1 << 16];
    /* bulk: read until the client half-closes, answer "done" */
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r <= 0) break;
    }
    if (write(fd, "done", 4) != 4) {
        close(fd);
        return;
    }
    close(fd);
    /* ping-pong on a second connection */
    fd = accept_bounded(lfd, ctl);
    if (fd < 0) return;
    for (;;) {
        size_t have = 0;
        while (have < PING) {
            ssize_t r = read(fd, buf + have, PING - have);
            if (r <= 0) goto out;
            have += (size_t)r;
        }
        if (write(fd, buf, PING) != PING) break;
    }
out:
    close(fd);
}

static int srv_wfd;
static long mem_before;
static int mem_base;
static uv_timer_t mem_timer;

static void ctl_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    static char c[16];
    b->base = c;
    b->len = 1;
}

/* memory phase: wait until the extra peers are all admitted, then report RSS */
static void mem_check(uv_timer_t *t)
{
    if (getenv("BENCH_DEBUG") && mem_timer_ticks % 100 == 0)
        fprintf(stderr, "mem: %d ready (base %d)\n", srv_ready_conns, mem_base);
    if (srv_ready_conns < mem_base + peers && ++mem_timer_ticks < 6000) return;
    uv_timer_stop(t);
    long after = rss_kb();
    int n = srv_ready_conns - mem_base;
    if (write(srv_wfd, &after, sizeof after) != sizeof after ||
        write(srv_wfd, &n, sizeof n) != sizeof n)
        exit(1);
}

static void ctl_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    if (n == 0) return; /* EAGAIN */
    if (n < 0 || b->base[0] == 'T') {
        uv_read_stop(st);
        uv_stop(loop);
        return;
    }
    if (b->base[0] == 'M') {
        mem_before = rss_kb();
        mem_base = srv_ready_conns;
        if (write(srv_wfd, &mem_before, sizeof mem_before) != sizeof mem_before) exit(1);
        uv_timer_init(loop, &mem_timer);
        uv_timer_start(&mem_timer, mem_check, 10, 10);
    }
}

static int server(int wfd, int rfd)
{
    loop = uv_default_loop();
    tp_endpoint_t *ep;
    tp_callbacks_t cb = {NULL, srv_on_ready, NULL, srv_on_stream};
    if (tp_endpoint_new(&ep, loop, &me, secret, srv_addr, 0, NULL, &cb) != 0) return 1;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, srv_addr, &sa.sin_addr) != 1) return 1;
    socklen_t sl = sizeof sa;
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 8) ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl))
        return 1;
    int ports[2] = {tp_endpoint_port(ep), ntohs(sa.sin_port)};
    if (write(wfd, ports, sizeof ports) != sizeof ports) return 1;
    /* QUIC phase: the loop serves until the client says it moves on to TCP ('T') */
    uv_pipe_t ctl;
    uv_pipe_init(loop, &ctl, 0);
    uv_pipe_open(&ctl, rfd);
    srv_wfd = wfd;
    uv_read_start((uv_stream_t *)&ctl, ctl_alloc, ctl_read);
    uv_run(loop, UV_RUN_DEFAULT);
    /* TCP phase: the listening socket exists since before the ports were sent; tell the
     * client the QUIC loop is left, so its timed TCP runs do not wait for the server */
    char r = 'R';
    if (write(wfd, &r, 1) != 1) return 1;
    tcp_server(lfd, rfd);
    close(lfd);
    return 0;
}

/* ---------------- client ---------------- */

static volatile int cl_ready, cl_done;
static tp_conn_t *cl_conn;
static size_t cl_sent, cl_echo;
static tp_stream_t *cl_stream;
static uint8_t chunk[1 << 16];

static void cl_on_ready(tp_endpoint_t *ep, tp_conn_t *c)
{
    cl_ready++;
    cl_conn = c;
}

static void bulk_pump(tp_stream_t *s)
{
    while (cl_sent < bulk_bytes && !tp_stream_over_high_water(s)) {
        size_t n = bulk_bytes - cl_sent < sizeof chunk ? bulk_bytes - cl_sent : sizeof chunk;
        tp_stream_write(s, chunk, n);
        cl_sent += n;
    }
    if (cl_sent == bulk_bytes) tp_stream_shutdown(s);
}
static void bulk_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    tp_stream_consumed(s, n);
}
static void bulk_fin(tp_stream_t *s)
{
    cl_done = 1;
}
static void bulk_drain(tp_stream_t *s)
{
    bulk_pump(s);
}
static const tp_stream_cb_t bulk_cb = {bulk_data, bulk_fin, bulk_drain, NULL};

static void pp_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    cl_echo += n;
    tp_stream_consumed(s, n);
    if (cl_echo % PING == 0) cl_done = 1;
}
static const tp_stream_cb_t pp_cb = {pp_data, NULL, NULL, NULL};

static double tcp_bulk(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    tcp_opts(fd);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, srv_addr, &sa.sin_addr);
    double gbps = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) goto out;
    uint64_t t0 = now_ns();
    size_t sent = 0;
    while (sent < bulk_bytes) {
        size_t n = bulk_bytes - sent < sizeof chunk ? bulk_bytes - sent : sizeof chunk;
        ssize_t w = write(fd, chunk, n);
        if (w <= 0) goto out;
        sent += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    char d[4];
    if (read(fd, d, 4) != 4) goto out;
    double s = (double)(now_ns() - t0) / 1e9;
    gbps = (double)bulk_bytes * 8 / s / 1e9;
out:
    close(fd);
    return gbps;
}

/* during the QUIC phases the server writes nothing on the control pipe: any readiness
 * there is its end hanging up, so the client stops at once instead of running out its
 * phase timeouts */
static uv_poll_t srv_watch;
static void srv_gone(uv_poll_t *h, int status, int events)
{
    (void)h, (void)status, (void)events;
    fprintf(stderr, "bench/tunnel: server gone during the QUIC phase\n");
    _exit(1);
}

static volatile int pp_timed_out;
static void pp_timeout(uv_timer_t *t)
{
    (void)t;
    pp_timed_out = 1;
}

/* 1 when all rounds completed */
static int tcp_pingpong(int port, uint64_t *lat)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    tcp_opts(fd);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, srv_addr, &sa.sin_addr);
    int done = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) goto out;
    uint8_t b[PING];
    memset(b, 'P', sizeof b);
    for (; done < rounds; done++) {
        uint64_t t0 = now_ns();
        if (write(fd, b, PING) != PING) goto out;
        size_t have = 0;
        while (have < PING) {
            ssize_t r = read(fd, b + have, PING - have);
            if (r <= 0) goto out;
            have += (size_t)r;
        }
        lat[done] = now_ns() - t0;
    }
out:
    close(fd);
    return done == rounds;
}

static int client(int rfd, int wfd)
{
    int ports[2];
    if (read_full(rfd, ports, sizeof ports, IO_TIMEOUT_MS)) {
        fprintf(stderr, "bench/tunnel: server did not start\n");
        return 1;
    }
    loop = uv_default_loop();
    uv_poll_init(loop, &srv_watch, rfd);
    uv_poll_start(&srv_watch, UV_READABLE | UV_DISCONNECT, srv_gone);
    identity_t cid;
    crypto_sign_keypair(cid.pk, cid.sk);
    hex_encode(cid.pk, 32, cid.id);
    tp_endpoint_t *ep;
    tp_callbacks_t cb = {NULL, cl_on_ready, NULL, NULL};
    if (tp_endpoint_new(&ep, loop, &cid, secret, cl_bind, 0, NULL, &cb) != 0) return 1;
    struct sockaddr_in sa;
    uv_ip4_addr(srv_addr, ports[0], &sa);
    tp_dial(ep, me.id, (struct sockaddr *)&sa, NULL);
    run_until(&cl_ready, 10000);
    if (!cl_ready) {
        fprintf(stderr, "bench/tunnel: QUIC connection failed\n");
        return 1;
    }
    memset(chunk, 'B', sizeof chunk);
    /* QUIC bulk */
    uint64_t t0 = now_ns();
    tp_stream_open(cl_conn, &bulk_cb, NULL, &cl_stream);
    bulk_pump(cl_stream);
    run_until(&cl_done, 120000);
    double quic_s = (double)(now_ns() - t0) / 1e9;
    double quic_gbps = cl_done ? (double)bulk_bytes * 8 / quic_s / 1e9 : 0;
    /* QUIC ping-pong on one stream */
    uint64_t *ql = calloc((size_t)rounds, sizeof *ql), *tl = calloc((size_t)rounds, sizeof *tl);
    tp_stream_t *ps;
    tp_stream_open(cl_conn, &pp_cb, NULL, &ps);
    uint8_t b[PING];
    memset(b, 'P', sizeof b);
    /* one one-shot watchdog for the whole phase: no periodic wakeups in the timed rounds */
    uv_timer_t wd;
    uv_timer_init(loop, &wd);
    uv_timer_start(&wd, pp_timeout, IO_TIMEOUT_MS, 0);
    int qrounds = 0;
    for (; qrounds < rounds && !pp_timed_out; qrounds++) {
        cl_done = 0;
        uint64_t s0 = now_ns();
        tp_stream_write(ps, b, PING);
        while (!cl_done && !pp_timed_out)
            uv_run(loop, UV_RUN_ONCE);
        if (!cl_done) break;
        ql[qrounds] = now_ns() - s0;
    }
    uv_close((uv_handle_t *)&wd, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    if (qrounds < rounds) {
        fprintf(stderr, "bench/tunnel: QUIC ping-pong stalled after %d of %d rounds\n", qrounds,
                rounds);
        return 1;
    }
    double rtt_conn = tp_conn_rtt_ms(cl_conn);
    /* from here on the server answers on the pipe: bounded reads take over */
    uv_poll_stop(&srv_watch);
    uv_close((uv_handle_t *)&srv_watch, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    /* memory per idle peer: PEERS more client endpoints connect and stay idle */
    char c = 'M';
    long before = 0, after = 0;
    int n_ok = 0;
    if (write(wfd, &c, 1) != 1 || read_full(rfd, &before, sizeof before, IO_TIMEOUT_MS)) {
        fprintf(stderr, "bench/tunnel: server did not start the memory phase\n");
        return 1;
    }
    tp_endpoint_t **eps = calloc((size_t)peers, sizeof *eps);
    identity_t *ids = calloc((size_t)peers, sizeof *ids);
    for (int i = 0; i < peers; i++) {
        crypto_sign_keypair(ids[i].pk, ids[i].sk);
        hex_encode(ids[i].pk, 32, ids[i].id);
        if (tp_endpoint_new(&eps[i], loop, &ids[i], secret, cl_bind, 0, NULL, &cb) == 0)
            tp_dial(eps[i], me.id, (struct sockaddr *)&sa, NULL);
    }
    /* keep the client side turning while the server counts */
    volatile int got = 0;
    uv_update_time(loop);
    uint64_t end = uv_now(loop) + 60000;
    while (!got && uv_now(loop) < end) {
        uv_run(loop, UV_RUN_NOWAIT);
        fd_set fs;
        FD_ZERO(&fs);
        FD_SET(rfd, &fs);
        struct timeval tv = {0, 1000};
        if (select(rfd + 1, &fs, NULL, NULL, &tv) > 0) got = 1;
        uv_update_time(loop);
    }
    /* the server reports at the latest 60 s after 'M' */
    if (read_full(rfd, &after, sizeof after, IO_TIMEOUT_MS) ||
        read_full(rfd, &n_ok, sizeof n_ok, IO_TIMEOUT_MS)) {
        fprintf(stderr, "bench/tunnel: server did not report the memory phase\n");
        return 1;
    }
    /* TCP phase: 'T' ends the server's QUIC loop; it answers 'R' just before accepting */
    c = 'T';
    if (write(wfd, &c, 1) != 1 || read_full(rfd, &c, 1, IO_TIMEOUT_MS) || c != 'R') {
        fprintf(stderr, "bench/tunnel: server did not start the TCP phase\n");
        return 1;
    }
    double tcp_gbps = tcp_bulk(ports[1]);
    if (!tcp_pingpong(ports[1], tl)) {
        fprintf(stderr, "bench/tunnel: TCP ping-pong failed\n");
        tcp_gbps = 0;
    }
    qsort(ql, (size_t)rounds, sizeof *ql, cmp_u64);
    qsort(tl, (size_t)rounds, sizeof *tl, cmp_u64);
    double q50 = (double)ql[rounds / 2] / 1e3, q99 = (double)ql[rounds * 99 / 100] / 1e3;
    double t50 = (double)tl[rounds / 2] / 1e3, t99 = (double)tl[rounds * 99 / 100] / 1e3;
    double per_peer = n_ok > 0 ? (double)(after - before) / n_ok : -1;
    fprintf(stderr,
            "bench/tunnel: %zu MiB bulk, %d ping-pong rounds of %d bytes, %d idle peers\n"
            "                     QUIC        TCP\n"
            "  bulk Gbit/s     %8.2f   %8.2f   (ratio %.2f)\n"
            "  rtt p50 us      %8.1f   %8.1f   (added %.1f)\n"
            "  rtt p99 us      %8.1f   %8.1f\n"
            "  QUIC smoothed rtt %.3f ms; server RSS +%ld kB for %d idle peers\n",
            bulk_bytes >> 20, rounds, PING, n_ok, quic_gbps, tcp_gbps,
            tcp_gbps > 0 ? quic_gbps / tcp_gbps : 0, q50, t50, q50 - t50, q99, t99, rtt_conn,
            after - before, n_ok);
    printf("BENCH tunnel quic_gbps=%.4f tcp_gbps=%.4f bulk_ratio=%.3f quic_rtt_p50_us=%.1f "
           "tcp_rtt_p50_us=%.1f added_rtt_p50_us=%.1f quic_rtt_p99_us=%.1f "
           "rss_per_idle_peer_kb=%.1f\n",
           quic_gbps, tcp_gbps, tcp_gbps > 0 ? quic_gbps / tcp_gbps : 0, q50, t50, q50 - t50, q99,
           per_peer);
    fflush(stdout);
    _exit(quic_gbps > 0 && tcp_gbps > 0 ? 0 : 1);
}

/* enter the network namespace named by the environment variable var, if set; 0 ok */
static int enter_netns(const char *var)
{
    const char *name = getenv(var);
    if (!name || !*name) return 0;
    char path[256];
    snprintf(path, sizeof path, "/run/netns/%s", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "bench/tunnel: cannot enter network namespace %s: %s\n", name,
                strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (sodium_init() < 0) return 1;
    const char *e;
    if ((e = getenv("BENCH_BULK_MB"))) bulk_bytes = (size_t)atol(e) << 20;
    if ((e = getenv("BENCH_ROUNDS"))) rounds = atoi(e);
    if ((e = getenv("BENCH_PEERS"))) peers = atoi(e);
    if ((e = getenv("BENCH_SERVER_ADDR"))) srv_addr = e;
    if ((e = getenv("BENCH_CLIENT_NETNS")) && *e) cl_bind = "0.0.0.0";
    if (rounds < 10) rounds = 10;
    if (peers < 0) peers = 0;
    crypto_sign_keypair(me.pk, me.sk);
    hex_encode(me.pk, 32, me.id);
    randombytes_buf(secret, sizeof secret);
    /* both processes: a vanished peer is an error return from write(), not a kill */
    signal(SIGPIPE, SIG_IGN);
    int to_client[2], to_server[2];
    if (pipe(to_client) || pipe(to_server)) return 1;
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        close(to_client[1]);
        close(to_server[0]);
        if (enter_netns("BENCH_CLIENT_NETNS")) _exit(1);
        return client(to_client[0], to_server[1]);
    }
    close(to_client[0]);
    close(to_server[1]);
    /* the server also exits when the client is gone (its control pipe hangs up); the
     * alarm is only a last resort should a wait above still be unbounded */
    alarm(300);
    if (enter_netns("BENCH_SERVER_NETNS")) return 1;
    server(to_client[1], to_server[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* bench/rpc_latency — llama.cpp-RPC-like request/response latency through a TUNNEL_RPC relay,
 * against the same client talking straight to the server over TCP, in the same run, on loopback.
 *
 * Processes (fork), as in a split model:
 *   rpc     a blocking TCP server standing in for ggml-rpc-server: it reads messages
 *           [u32 len][u32 resp_len][len-8 bytes] and answers a message with resp_len > 0 by
 *           [u64 size] then size-8 bytes, as two writes (rpc-server sends size and data apart);
 *   worker  a mesh side: transport endpoint + tunnel_rpc_serve to the rpc server;
 *   host    a mesh side: transport endpoint dialling the worker + tunnel_rpc_listen;
 *   client  (the parent) standing in for llama-server: TCP_NODELAY, one write per message.
 * Each has its own uv loop. Modes, each first direct (client -> rpc) then tunnelled
 * (client -> host listener -> QUIC -> worker -> rpc):
 *   echo64 / echo4k / echo64k   one S-byte request, one S-byte answer, ROUNDS times;
 *   llama   one decode step as llama.cpp's RPC backend does it (measured with strace on
 *           ggml-rpc-server, stories260K split): eight async SET_TENSOR / GRAPH_RECOMPUTE
 *           messages (570, 570, 318, 322, 322, 826, 318, 13 bytes) without answers, then
 *           GET_TENSOR (321 bytes) whose 8 + 2048-byte answer the client waits for.
 * Per mode: p50/p95/p99/mean of the round trip, the added latency (tunnel - direct), and per
 * round trip of each mesh side: UDP datagrams sent, sleeps (voluntary context switches: each
 * is a wake-up on the critical path or beside it) and CPU time.
 * Output: a human table on stderr and one line on stdout:
 *   BENCH rpc_latency <mode>_direct_p50_us=… <mode>_tunnel_p50_us=… <mode>_added_p50_us=… …
 *   (dgrams_per_rt and cpu_us_per_rt: both mesh sides together)
 * Env: BENCH_ROUNDS (default 3000), BENCH_MODES (comma list, default all).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "identity.h"
#include "transport.h"
#include "tunnel_rpc.h"
#include "wire.h"

static int rounds = 3000;
static identity_t host_id, worker_id;
static uint8_t secret[32];

static uint64_t now_ns(void)
{
    return uv_hrtime();
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int read_full(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t r = write(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---------------- rpc server stand-in ---------------- */

static uint8_t rpc_buf[1 << 20];

static void rpc_serve_conn(int fd)
{
    nodelay(fd);
    for (;;) {
        uint32_t h[2];
        if (read_full(fd, h, sizeof h) != 0) break;
        if (h[0] < 8 || h[0] - 8 > sizeof rpc_buf || h[1] > sizeof rpc_buf) break;
        if (read_full(fd, rpc_buf, h[0] - 8) != 0) break;
        if (h[1] == 0) continue;
        uint64_t size = h[1] >= 8 ? h[1] - 8 : 0;
        if (write_full(fd, &size, sizeof size) != 0 || write_full(fd, rpc_buf, size) != 0) break;
    }
    close(fd);
}

static int rpc_server(int lfd)
{
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        rpc_serve_conn(fd);
    }
}

/* ---------------- mesh sides ---------------- */

static uv_loop_t *loop;
static tp_endpoint_t *ep;
static int ctl_out; /* to the parent */
static int rpc_port;
static rpc_fwd_t *fwd;

typedef struct {
    uint64_t dgram_in, dgram_out, nvcsw, nivcsw, cpu_us;
} side_stats_t;

static void ctl_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    static char c[16];
    b->base = c;
    b->len = 1;
}

static void ctl_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    if (n == 0) return;
    if (n < 0 || b->base[0] == 'Q') _exit(0);
    if (b->base[0] == 'S') {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        const tp_stats_t *t = tp_stats(ep);
        side_stats_t s = {t->datagrams_in, t->datagrams_out, (uint64_t)ru.ru_nvcsw,
                          (uint64_t)ru.ru_nivcsw,
                          (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
                              (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec)};
        if (write_full(ctl_out, &s, sizeof s) != 0) _exit(1);
    }
}

static void ctl_start(int rfd, uv_pipe_t *p)
{
    uv_pipe_init(loop, p, 0);
    uv_pipe_open(p, rfd);
    uv_read_start((uv_stream_t *)p, ctl_alloc, ctl_read);
}

/* worker: what mesh.c does for an incoming stream */
typedef struct {
    wire_reader_t rd;
} in_ctx_t;

static void in_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    in_ctx_t *x = tp_stream_data(s);
    tp_stream_consumed(s, n);
    json_t *f = NULL;
    while (n > 0 && !f) {
        ssize_t used = wire_read(&x->rd, p, n, &f);
        if (used < 0) {
            tp_stream_reset(s, 1);
            return;
        }
        p += used;
        n -= (size_t)used;
    }
    if (!f) return;
    wire_reader_free(&x->rd);
    free(x);
    tunnel_rpc_serve(loop, s, f, p, n, rpc_port, NULL, NULL);
    json_decref(f);
}

static void in_close(tp_stream_t *s, int err)
{
    in_ctx_t *x = tp_stream_data(s);
    wire_reader_free(&x->rd);
    free(x);
}

static const tp_stream_cb_t in_cb = {in_data, NULL, NULL, in_close};

static void w_on_stream(tp_endpoint_t *e, tp_conn_t *c, tp_stream_t *s)
{
    in_ctx_t *x = calloc(1, sizeof *x);
    wire_reader_init(&x->rd, 1);
    tp_stream_set_cb(s, &in_cb, x);
}

static int worker(int rfd, int wfd)
{
    loop = uv_default_loop();
    ctl_out = wfd;
    tp_callbacks_t cb = {NULL, NULL, NULL, w_on_stream};
    if (tp_endpoint_new(&ep, loop, &worker_id, secret, "127.0.0.1", 0, NULL, &cb) != 0) return 1;
    int port = tp_endpoint_port(ep);
    if (write_full(wfd, &port, sizeof port) != 0) return 1;
    uv_pipe_t ctl;
    ctl_start(rfd, &ctl);
    uv_run(loop, UV_RUN_DEFAULT);
    return 0;
}

static tp_conn_t *get_conn(void *data, const char *peer_id)
{
    return tp_find(ep, peer_id);
}

static void h_on_ready(tp_endpoint_t *e, tp_conn_t *c)
{
    if (fwd) return;
    if (tunnel_rpc_listen(loop, worker_id.id, "bench", get_conn, NULL, NULL, &fwd) != 0) _exit(1);
    int port = tunnel_rpc_port(fwd);
    if (write_full(ctl_out, &port, sizeof port) != 0) _exit(1);
}

static int host(int rfd, int wfd, int worker_quic)
{
    loop = uv_default_loop();
    ctl_out = wfd;
    tp_callbacks_t cb = {NULL, h_on_ready, NULL, NULL};
    if (tp_endpoint_new(&ep, loop, &host_id, secret, "127.0.0.1", 0, NULL, &cb) != 0) return 1;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", worker_quic, &sa);
    if (tp_dial(ep, worker_id.id, (struct sockaddr *)&sa, NULL) != 0) return 1;
    uv_pipe_t ctl;
    ctl_start(rfd, &ctl);
    uv_run(loop, UV_RUN_DEFAULT);
    return 0;
}

/* ---------------- client ---------------- */

typedef struct {
    const char *name;
    const uint32_t *async; /* sizes of the messages sent without waiting for an answer */
    size_t n_async;
    uint32_t req, resp; /* the message that is answered, and its answer's size */
    int rounds_div;     /* fewer rounds for the big ones */
} bmode_t;

static const uint32_t llama_async[] = {570, 570, 318, 322, 322, 826, 318, 13};
static const bmode_t modes[] = {
    {"echo64", NULL, 0, 64, 64, 1},
    {"echo4k", NULL, 0, 4096, 4096, 1},
    {"echo64k", NULL, 0, 65536, 65536, 4},
    {"llama", llama_async, 8, 321, 8 + 2048, 1},
};

static uint8_t cl_buf[1 << 20];

static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    nodelay(fd);
    return fd;
}

static int send_msg(int fd, uint32_t len, uint32_t resp)
{
    uint32_t h[2] = {len, resp};
    memcpy(cl_buf, h, sizeof h);
    return write_full(fd, cl_buf, len);
}

/* One round: the async messages, then the answered one; returns the time to the answer. */
static int one_round(int fd, const bmode_t *m, uint64_t *ns)
{
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < m->n_async; i++)
        if (send_msg(fd, m->async[i], 0) != 0) return -1;
    if (send_msg(fd, m->req, m->resp) != 0) return -1;
    uint64_t size;
    if (read_full(fd, &size, sizeof size) != 0 || size + 8 != m->resp ||
        read_full(fd, cl_buf, size) != 0)
        return -1;
    *ns = now_ns() - t0;
    return 0;
}

static int run_mode(int port, const bmode_t *m, int n, uint64_t *lat)
{
    int fd = -1;
    for (int tries = 0; tries < 100 && fd < 0; tries++) {
        fd = tcp_connect(port);
        if (fd < 0) usleep(10000);
    }
    if (fd < 0) return -1;
    uint64_t w;
    for (int i = 0; i < 50; i++) /* warm-up: the stream opens, the windows grow */
        if (one_round(fd, m, &w) != 0) {
            close(fd);
            return -1;
        }
    for (int i = 0; i < n; i++)
        if (one_round(fd, m, &lat[i]) != 0) {
            close(fd);
            return -1;
        }
    close(fd);
    return 0;
}

typedef struct {
    double p50, p95, p99, mean;
} pct_t;

static pct_t pct(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)v[i];
    pct_t p = {(double)v[n / 2] / 1e3, (double)v[n * 95 / 100] / 1e3, (double)v[n * 99 / 100] / 1e3,
               sum / n / 1e3};
    return p;
}

static int side_stats(int wfd, int rfd, side_stats_t *s)
{
    char c = 'S';
    if (write_full(wfd, &c, 1) != 0) return -1;
    return read_full(rfd, s, sizeof *s);
}

static bool mode_enabled(const char *name)
{
    const char *e = getenv("BENCH_MODES");
    if (!e || !*e) return true;
    size_t l = strlen(name);
    for (const char *p = e; *p;) {
        const char *q = strchr(p, ',');
        size_t k = q ? (size_t)(q - p) : strlen(p);
        if (k == l && strncmp(p, name, l) == 0) return true;
        if (!q) break;
        p = q + 1;
    }
    return false;
}

int main(int argc, char **argv)
{
    if (sodium_init() < 0) return 1;
    const char *e;
    if ((e = getenv("BENCH_ROUNDS"))) rounds = atoi(e);
    if (rounds < 100) rounds = 100;
    crypto_sign_keypair(host_id.pk, host_id.sk);
    hex_encode(host_id.pk, 32, host_id.id);
    host_id.incarnation = 1;
    crypto_sign_keypair(worker_id.pk, worker_id.sk);
    hex_encode(worker_id.pk, 32, worker_id.id);
    worker_id.incarnation = 1;
    randombytes_buf(secret, sizeof secret);
    signal(SIGPIPE, SIG_IGN);

    /* the rpc server */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 8) ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl))
        return 1;
    rpc_port = ntohs(sa.sin_port);
    pid_t pids[3];
    pids[0] = fork();
    if (pids[0] < 0) return 1;
    if (pids[0] == 0) {
        alarm(600);
        _exit(rpc_server(lfd));
    }
    close(lfd);

    /* the worker, then the host (which needs the worker's port) */
    int w_to[2], w_from[2], h_to[2], h_from[2];
    if (pipe(w_to) || pipe(w_from) || pipe(h_to) || pipe(h_from)) return 1;
    pids[1] = fork();
    if (pids[1] < 0) return 1;
    if (pids[1] == 0) {
        alarm(600);
        _exit(worker(w_to[0], w_from[1]));
    }
    int wq = 0;
    if (read_full(w_from[0], &wq, sizeof wq) != 0) return 1;
    pids[2] = fork();
    if (pids[2] < 0) return 1;
    if (pids[2] == 0) {
        alarm(600);
        _exit(host(h_to[0], h_from[1], wq));
    }
    int tport = 0, rc = 0;
    if (read_full(h_from[0], &tport, sizeof tport) != 0) {
        fprintf(stderr, "bench/rpc_latency: the host side never got a connection\n");
        rc = 1;
        goto out;
    }

    uint64_t *dl = calloc((size_t)rounds, sizeof *dl), *tl = calloc((size_t)rounds, sizeof *tl);
    char line[4096];
    size_t ll = (size_t)snprintf(line, sizeof line, "BENCH rpc_latency");
    fprintf(stderr,
            "bench/rpc_latency: round trips, direct TCP vs host->QUIC->worker tunnel (us)\n"
            "  mode     rounds  direct p50/p95/p99/mean        tunnel p50/p95/p99/mean       "
            "added p50/mean  dgrams/rt h,w  sleeps/rt h,w  cpu us/rt h,w\n");
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        const bmode_t *m = &modes[k];
        if (!mode_enabled(m->name)) continue;
        int n = rounds / m->rounds_div;
        side_stats_t h0, h1, w0, w1;
        if (run_mode(rpc_port, m, n, dl) != 0 || side_stats(h_to[1], h_from[0], &h0) ||
            side_stats(w_to[1], w_from[0], &w0) || run_mode(tport, m, n, tl) != 0 ||
            side_stats(h_to[1], h_from[0], &h1) || side_stats(w_to[1], w_from[0], &w1)) {
            fprintf(stderr, "bench/rpc_latency: mode %s failed\n", m->name);
            rc = 1;
            break;
        }
        pct_t d = pct(dl, n), t = pct(tl, n);
        double tot = n + 50;
        fprintf(stderr,
                "  %-8s %5d  %6.1f %6.1f %6.1f %6.1f   %6.1f %6.1f %6.1f %6.1f   %6.1f %6.1f  "
                "%5.2f %5.2f  %5.2f %5.2f  %5.1f %5.1f\n",
                m->name, n, d.p50, d.p95, d.p99, d.mean, t.p50, t.p95, t.p99, t.mean, t.p50 - d.p50,
                t.mean - d.mean, (double)(h1.dgram_out - h0.dgram_out) / tot,
                (double)(w1.dgram_out - w0.dgram_out) / tot, (double)(h1.nvcsw - h0.nvcsw) / tot,
                (double)(w1.nvcsw - w0.nvcsw) / tot, (double)(h1.cpu_us - h0.cpu_us) / tot,
                (double)(w1.cpu_us - w0.cpu_us) / tot);
        ll += (size_t)snprintf(
            line + ll, sizeof line - ll,
            " %s_direct_p50_us=%.1f %s_tunnel_p50_us=%.1f %s_tunnel_p99_us=%.1f"
            " %s_added_p50_us=%.1f %s_added_mean_us=%.1f"
            " %s_dgrams_per_rt=%.2f %s_cpu_us_per_rt=%.1f",
            m->name, d.p50, m->name, t.p50, m->name, t.p99, m->name, t.p50 - d.p50, m->name,
            t.mean - d.mean, m->name,
            (double)(h1.dgram_out - h0.dgram_out + w1.dgram_out - w0.dgram_out) / tot, m->name,
            (double)(h1.cpu_us - h0.cpu_us + w1.cpu_us - w0.cpu_us) / tot);
    }
    if (rc == 0) printf("%s\n", line);
    fflush(stdout);
    free(dl);
    free(tl);
out:;
    char q = 'Q';
    if (write(h_to[1], &q, 1) != 1 || write(w_to[1], &q, 1) != 1) rc = 1;
    kill(pids[0], SIGTERM);
    for (int i = 0; i < 3; i++)
        waitpid(pids[i], NULL, 0);
    return rc;
}

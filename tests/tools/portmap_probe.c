/* mesh-portmap-probe: net/portmap.c on its own, for tests/integration/test_portmap.py.
 * Usage: mesh-portmap-probe PORT [--echo] [--lease S] [--retry-ms MS] [--rounds N]
 *        [--discover-ms MS] [--debug]
 * Runs portmap_start on UDP PORT and prints each change as one line on stdout:
 *   "mapped IP:PORT via natpmp|upnp [private]", "lost via natpmp|upnp", "none" (no router);
 * on SIGTERM or SIGINT calls portmap_stop and prints "deleted" once it is done, then exits 0.
 * --echo also binds UDP PORT (0.0.0.0) and sends every datagram back to its sender, so a host
 * beyond the router can check the mapping carries traffic. Logs (portmap's) go to stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "log.h"
#include "portmap.h"

typedef struct {
    uv_loop_t *loop;
    portmap_t *pm;
    uv_signal_t sig_term, sig_int;
    uv_udp_t udp;
    bool echo;
    bool stopping;
    char buf[2048];
} probe_t;

static void on_change(void *data, const char *external, const char *via, bool private_ext)
{
    (void)data;
    if (external)
        printf("mapped %s via %s%s\n", external, via, private_ext ? " private" : "");
    else if (via)
        printf("lost via %s\n", via);
    else
        printf("none\n");
    fflush(stdout);
}

static void on_done(void *data)
{
    probe_t *p = data;
    printf("deleted\n");
    fflush(stdout);
    uv_close((uv_handle_t *)&p->sig_term, NULL);
    uv_close((uv_handle_t *)&p->sig_int, NULL);
    if (p->echo) uv_close((uv_handle_t *)&p->udp, NULL);
}

static void on_signal(uv_signal_t *s, int signum)
{
    (void)signum;
    probe_t *p = s->data;
    if (p->stopping) return;
    p->stopping = true;
    portmap_stop(p->pm, on_done, p);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    probe_t *p = h->data;
    *b = uv_buf_init(p->buf, sizeof p->buf);
}

static void on_sent(uv_udp_send_t *req, int status)
{
    (void)status;
    free(req);
}

static void on_recv(uv_udp_t *u, ssize_t n, const uv_buf_t *b, const struct sockaddr *from,
                    unsigned flags)
{
    (void)flags;
    if (n <= 0 || !from) return;
    /* one send at a time is plenty for a test; a datagram arriving while one is queued still
     * gets its own request (bounded by the sender: the test sends a handful) */
    uv_udp_send_t *req = malloc(sizeof *req + (size_t)n);
    if (!req) return;
    memcpy(req + 1, b->base, (size_t)n);
    uv_buf_t out = uv_buf_init((char *)(req + 1), (unsigned)n);
    if (uv_udp_send(req, u, &out, 1, from, on_sent) != 0) free(req);
}

static int usage(void)
{
    fprintf(stderr, "usage: mesh-portmap-probe PORT [--echo] [--lease S] [--retry-ms MS] "
                    "[--rounds N] [--discover-ms MS] [--debug]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    char *end;
    unsigned long port = strtoul(argv[1], &end, 10);
    if (*end || port == 0 || port > 65535) return usage();
    probe_t p = {.loop = uv_default_loop()};
    portmap_opts_t o = {.port = (uint16_t)port, .on_change = on_change, .data = &p};
    log_level_t level = LOG_INFO;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--echo"))
            p.echo = true;
        else if (!strcmp(argv[i], "--debug"))
            level = LOG_DEBUG;
        else if (!strcmp(argv[i], "--lease") && i + 1 < argc)
            o.lease_s = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--retry-ms") && i + 1 < argc)
            o.retry_base_ms = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--discover-ms") && i + 1 < argc)
            o.discover_ms = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            o.max_rounds = (uint32_t)strtoul(argv[++i], NULL, 10);
        else
            return usage();
    }
    log_init(LOG_FORMAT_PRETTY, level);
    if (p.echo) {
        struct sockaddr_in a;
        uv_ip4_addr("0.0.0.0", (int)port, &a);
        uv_udp_init(p.loop, &p.udp);
        p.udp.data = &p;
        int rc = uv_udp_bind(&p.udp, (const struct sockaddr *)&a, 0);
        if (rc == 0) rc = uv_udp_recv_start(&p.udp, on_alloc, on_recv);
        if (rc != 0) {
            fprintf(stderr, "mesh-portmap-probe: UDP %lu: %s\n", port, uv_strerror(rc));
            return 1;
        }
    }
    uv_signal_init(p.loop, &p.sig_term);
    uv_signal_init(p.loop, &p.sig_int);
    p.sig_term.data = p.sig_int.data = &p;
    uv_signal_start(&p.sig_term, on_signal, SIGTERM);
    uv_signal_start(&p.sig_int, on_signal, SIGINT);
    int rc = portmap_start(&p.pm, p.loop, &o);
    if (rc != 0) {
        fprintf(stderr, "mesh-portmap-probe: portmap_start: %s\n", uv_strerror(rc));
        return 1;
    }
    printf("started %lu\n", port);
    fflush(stdout);
    uv_run(p.loop, UV_RUN_DEFAULT);
    uv_loop_close(p.loop);
    return 0;
}

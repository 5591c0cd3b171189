/* Accepting connections for httpd. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "httpd_int.h"
#include "log.h"
#include "platform.h"

#define ACCEPTS_PER_WAKEUP 64
#define EMFILE_LOG_EVERY_MS 60000
#define ACCEPT_PAUSE_MS 250

/* ---- accepting ----
 *
 * The listener is our own socket under a uv_poll handle rather than uv_listen: libuv answers
 * EMFILE by silently accepting and closing connections, and the node should say so. Out of file
 * descriptors, a reserved one is spent to accept each waiting client, answer 503 and close; the
 * condition is logged once a minute with the limit and the count. */

static bool addr_is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a)) return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

#define BUSY_BODY                                                                                  \
    "{\"error\":{\"message\":\"the server is out of file descriptors; retry shortly\","            \
    "\"type\":\"server_error\",\"code\":\"too_many_open_files\"}}"

static void on_listen(uv_poll_t *h, int status, int events);

static void on_accept_resume(uv_timer_t *t)
{
    httpd_t *s = t->data;
    if (!s->closing) uv_poll_start(&s->listener, UV_READABLE, on_listen);
}

static void out_of_fds(httpd_t *s, int err)
{
    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                               "application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
                               "Content-Length: " /* filled below */;
    char resp[512];
    int rn = snprintf(resp, sizeof resp, "%s%zu\r\n\r\n%s", busy, strlen(BUSY_BODY), BUSY_BODY);
    uint64_t now = uv_now(s->loop);
    bool log = !s->emfile_ever || now - s->emfile_logged_ms >= EMFILE_LOG_EVERY_MS;
    if (s->reserve_fd >= 0) {
        close(s->reserve_fd);
        s->reserve_fd = -1;
    }
    long open_fds = log ? plat_open_fds() : -1;
    unsigned refused = 0;
    for (; refused < 1024; refused++) {
        int fd = plat_accept(s->lfd, NULL, NULL);
        if (fd < 0) break;
        plat_send_nowait(fd, resp, (size_t)rn); /* best effort */
        close(fd);
    }
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    s->emfile_refused += refused;
    if (log) {
        struct rlimit rl = {0, 0};
        getrlimit(RLIMIT_NOFILE, &rl);
        LOGW("httpd",
             "port %d: cannot accept connections: %s (limit %llu open files, %ld open; %u HTTP "
             "connections on this port); %u client(s) answered 503 — raise the limit (ulimit "
             "-n) or lower the load (logged at most once a minute)",
             s->port, strerror(err), (unsigned long long)rl.rlim_cur, open_fds, s->n_conns,
             s->emfile_refused);
        s->emfile_refused = 0;
        s->emfile_logged_ms = now;
        s->emfile_ever = true;
    }
    if (refused == 0) {
        /* nothing could be shed (no spare descriptor): stop polling for a moment rather than
         * spin on a listener that stays readable */
        uv_poll_stop(&s->listener);
        uv_timer_start(&s->accept_pause, on_accept_resume, ACCEPT_PAUSE_MS, 0);
    }
}

static void on_listen(uv_poll_t *h, int status, int events)
{
    httpd_t *s = h->data;
    (void)events;
    if (status < 0) {
        LOGW("httpd", "port %d: listener error: %s", s->port, uv_strerror(status));
        return;
    }
    for (int i = 0; i < ACCEPTS_PER_WAKEUP && !s->closing; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = plat_accept(s->lfd, (struct sockaddr *)&ss, &sl);
        if (fd < 0) {
            int e = -fd;
            if (e == EINTR || e == ECONNABORTED) continue;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM)
                out_of_fds(s, e);
            else if (e != EAGAIN && e != EWOULDBLOCK)
                LOGW("httpd", "port %d: accept: %s", s->port, strerror(e));
            return;
        }
        httpd_serve_fd(s, fd, addr_is_loopback(&ss) ? HTTPD_PEER_LOOPBACK : HTTPD_PEER_NETWORK);
    }
}

static int listen_socket(const char *host, int port, int *out_fd, int *out_port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
    if (rc) rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss);
    if (rc) return rc;
    int fd = plat_socket(ss.ss_family, SOCK_STREAM, true);
    if (fd < 0) return fd;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t sl =
        ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *out_port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                              : ((struct sockaddr_in6 *)&ss)->sin6_port);
    *out_fd = fd;
    return 0;
}

int httpd_listen_open(httpd_t *s, const char *host, int port)
{
    int rc = listen_socket(host, port, &s->lfd, &s->port);
    if (rc) return rc;
    rc = uv_poll_init_socket(s->loop, &s->listener, s->lfd);
    if (rc) {
        close(s->lfd);
        s->lfd = -1;
        return rc;
    }
    s->listener.data = s;
    uv_timer_init(s->loop, &s->accept_pause);
    s->accept_pause.data = s;
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    s->listening = true;
    return uv_poll_start(&s->listener, UV_READABLE, on_listen);
}

void httpd_listen_close(httpd_t *s)
{
    if (!s->listening) return;
    uv_close((uv_handle_t *)&s->listener, NULL);
    uv_close((uv_handle_t *)&s->accept_pause, NULL);
    close(s->lfd);
    s->lfd = -1;
    if (s->reserve_fd >= 0) close(s->reserve_fd);
    s->reserve_fd = -1;
    s->listening = false;
}

/* platform for Linux — see platform.h. The only file of the tree with Linux-only calls
 * (tests/tools/check_platform.py). */
#include "platform.h"

#include "procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <uv.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define NET_TCP_MAX (8u << 20) /* a host with ~50k sockets; beyond that /proc cannot tell */
#define UDP_BATCH_MAX 64u      /* messages per sendmmsg/recvmmsg call */

/* ---- this process ---- */

int plat_self_exe(char *buf, size_t cap)
{
    if (!buf || cap < 2) return -EINVAL;
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n < 0) return -errno;
    if ((size_t)n >= cap - 1) return -ENAMETOOLONG;
    buf[n] = '\0';
    return 0;
}

int plat_die_with_parent(int sig)
{
    return prctl(PR_SET_PDEATHSIG, sig) == 0 ? 0 : -errno;
}

uint64_t plat_mem_available(void)
{
    uint64_t avail = 0;
    FILE *f = fopen("/proc/meminfo", "re");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = (uint64_t)kb * 1024;
                break;
            }
        }
        fclose(f);
    }
    return avail ? avail : uv_get_free_memory();
}

unsigned plat_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (unsigned)CPU_COUNT(&set);
    unsigned n = uv_available_parallelism();
    return n ? n : 1;
}

long plat_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* ---- other processes ---- */

/* Read a procfs file whole (at most max bytes) into a malloc'd NUL-terminated string. */
static int read_proc(const char *path, size_t max, char **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int rc = buf ? 0 : -ENOMEM;
    while (!rc) {
        if (len + 1 >= cap) {
            if (cap >= max) {
                rc = -EFBIG;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) rc = -errno;
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

int plat_proc_cpu_ticks(int pid, uint64_t *cpu_ticks, char *state)
{
    char path[64], *text = NULL;
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int rc = read_proc(path, 64 * 1024, &text);
    if (rc) return rc;
    rc = procfs_parse_stat(text, cpu_ticks, state);
    free(text);
    return rc;
}

static int listen_inode(uint16_t port, uint64_t *inode)
{
    static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    int rc = -ENOENT;
    for (size_t i = 0; i < 2; i++) {
        char *text = NULL;
        int r = read_proc(tables[i], NET_TCP_MAX, &text);
        if (r == -ENOENT && i == 1) break; /* no IPv6 */
        if (r) return r;
        r = procfs_parse_listen_inode(text, port, inode);
        free(text);
        if (r != -ENOENT) return r;
    }
    return rc;
}

int plat_port_held_by(int pid, uint16_t port)
{
    uint64_t inode;
    int rc = listen_inode(port, &inode);
    if (rc == -ENOENT) return 0;
    if (rc) return rc;
    char dir[64], want[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
    snprintf(want, sizeof want, "socket:[%" PRIu64 "]", inode);
    DIR *d = opendir(dir);
    if (!d) return -errno;
    bool held = false;
    struct dirent *e;
    while (!held && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[384], target[64];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(p, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        held = strcmp(target, want) == 0;
    }
    closedir(d);
    return held ? 1 : 0;
}

/* ---- sockets and pipes ---- */

int plat_socket(int domain, int type, bool nonblock)
{
    int fd = socket(domain, type | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    return fd >= 0 ? fd : -errno;
}

int plat_socketpair(int domain, int type, int sv[2])
{
    return socketpair(domain, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0 ? 0 : -errno;
}

int plat_accept(int lfd, struct sockaddr *addr, socklen_t *len)
{
    int fd = accept4(lfd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int plat_pipe(int fds[2])
{
    return pipe2(fds, O_CLOEXEC) == 0 ? 0 : -errno;
}

long plat_send_nowait(int fd, const void *buf, size_t len)
{
    ssize_t n = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    return n >= 0 ? (long)n : -errno;
}

size_t plat_sock_unsent(int fd)
{
    int n = 0;
    if (ioctl(fd, SIOCOUTQ, &n) != 0 || n < 0) return 0;
    return (size_t)n;
}

/* ---- UDP in batches ---- */

int plat_udp_socket(int family)
{
    int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int sz = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    int one = 1; /* receive GRO batches (kernels without it: one datagram at a time) */
    setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
    int zero = 0; /* dual-stack whatever net.ipv6.bindv6only says */
    if (family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    return fd;
}

/* An IPv4 address as an IPv4-mapped IPv6 one (::ffff:a.b.c.d), for a dual-stack socket. */
static void v4_mapped(const struct sockaddr_in *in, struct sockaddr_in6 *out)
{
    memset(out, 0, sizeof *out);
    out->sin6_family = AF_INET6;
    out->sin6_port = in->sin_port;
    out->sin6_addr.s6_addr[10] = 0xff;
    out->sin6_addr.s6_addr[11] = 0xff;
    memcpy(&out->sin6_addr.s6_addr[12], &in->sin_addr, 4);
}

/* The reverse: an IPv4-mapped sender back to AF_INET, in place. */
static void v4_unmapped(struct sockaddr_storage *ss)
{
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
    if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) return;
    struct sockaddr_in v = {.sin_family = AF_INET, .sin_port = a->sin6_port};
    memcpy(&v.sin_addr, &a->sin6_addr.s6_addr[12], 4);
    memset(ss, 0, sizeof *ss);
    memcpy(ss, &v, sizeof v);
}

int plat_udp_send(int fd, int family, plat_udp_out_t *m, size_t n)
{
    if (n > UDP_BATCH_MAX) n = UDP_BATCH_MAX;
    struct mmsghdr msgs[UDP_BATCH_MAX];
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl[UDP_BATCH_MAX];
    struct sockaddr_in6 mapped[UDP_BATCH_MAX];
    memset(msgs, 0, n * sizeof msgs[0]);
    for (size_t i = 0; i < n; i++) {
        struct msghdr *h = &msgs[i].msg_hdr;
        h->msg_name = (void *)m[i].to;
        h->msg_namelen = m[i].to_len;
        if (m[i].to->sa_family == AF_INET && family == AF_INET6) {
            v4_mapped((const struct sockaddr_in *)m[i].to, &mapped[i]);
            h->msg_name = &mapped[i];
            h->msg_namelen = sizeof mapped[i];
        }
        h->msg_iov = m[i].iov;
        h->msg_iovlen = m[i].n_iov;
        if (m[i].seg > 0) {
            memset(&ctl[i], 0, sizeof ctl[i]);
            h->msg_control = ctl[i].buf;
            h->msg_controllen = sizeof ctl[i].buf;
            struct cmsghdr *cm = CMSG_FIRSTHDR(h);
            cm->cmsg_level = SOL_UDP;
            cm->cmsg_type = UDP_SEGMENT;
            cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            memcpy(CMSG_DATA(cm), &m[i].seg, sizeof m[i].seg);
        }
    }
    for (;;) {
        int r = sendmmsg(fd, msgs, (unsigned)n, 0);
        if (r >= 0) return r;
        if (errno != EINTR) return -errno;
    }
}

int plat_udp_recv(int fd, plat_udp_in_t *m, size_t n)
{
    if (n > UDP_BATCH_MAX) n = UDP_BATCH_MAX;
    struct mmsghdr msgs[UDP_BATCH_MAX];
    struct iovec iov[UDP_BATCH_MAX];
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl[UDP_BATCH_MAX];
    memset(msgs, 0, n * sizeof msgs[0]);
    for (size_t i = 0; i < n; i++) {
        iov[i].iov_base = m[i].buf;
        iov[i].iov_len = m[i].cap;
        msgs[i].msg_hdr.msg_name = &m[i].from;
        msgs[i].msg_hdr.msg_namelen = sizeof m[i].from;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_control = ctl[i].buf;
        msgs[i].msg_hdr.msg_controllen = sizeof ctl[i].buf;
    }
    int got = -1;
    for (int tries = 0; tries < 4 && got < 0; tries++) {
        got = recvmmsg(fd, msgs, (unsigned)n, MSG_DONTWAIT, NULL);
        if (got < 0 && errno != EINTR) break;
    }
    if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
    for (int k = 0; k < got; k++) {
        struct msghdr *mh = &msgs[k].msg_hdr;
        m[k].len = msgs[k].msg_len;
        m[k].seg = m[k].len;
        m[k].truncated = (mh->msg_flags & MSG_TRUNC) != 0;
        v4_unmapped(&m[k].from);
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm))
            if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
                int g;
                memcpy(&g, CMSG_DATA(cm), sizeof g);
                if (g > 0 && (size_t)g < m[k].len) m[k].seg = (size_t)g;
            }
    }
    return got;
}

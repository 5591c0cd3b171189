/* platform — every call the node makes that is particular to Linux, behind one small API.
 *
 * The rest of the tree uses POSIX and libuv only; tests/tools/check_platform.py fails the build's
 * unit stage when a Linux-only call appears outside platform_linux.c. A port to another OS
 * (macOS first: Apple Silicon with Metal is a large share of local-inference users) writes a
 * platform_<os>.c with the same functions; docs/portability.md says, call by call, what each needs
 * there. Return values follow libuv: 0 or a count on success, a negative errno on failure. */
#ifndef MESH_PLATFORM_H
#define MESH_PLATFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* ---- this process ---- */

/* The absolute path of the running binary (NUL-terminated, at most cap-1 bytes). 0 or -errno.
 * Linux: /proc/self/exe (readlink). */
int plat_self_exe(char *buf, size_t cap);

/* In a child between fork and exec (async-signal-safe): ask for signal sig when the parent
 * exits. The caller checks getppid() afterwards (the parent may already be gone). 0 or -errno;
 * -ENOSYS where the OS has no such request. Linux: prctl(PR_SET_PDEATHSIG). */
int plat_die_with_parent(int sig);

/* Memory this machine can give new allocations without swapping, in bytes (Linux: MemAvailable
 * of /proc/meminfo; libuv's free memory when that cannot be read). */
uint64_t plat_mem_available(void);

/* The CPUs this process may run on (Linux: its affinity mask; else libuv's parallelism). >= 1. */
unsigned plat_cpus(void);

/* Descriptors this process has open, -1 when the OS cannot tell (Linux: /proc/self/fd). */
long plat_open_fds(void);

/* ---- other processes (the node's children) ---- */

/* The CPU time (user + system, clock ticks) and state letter of process pid (Linux:
 * /proc/PID/stat). 0, -ENOENT for no such process, -errno. */
int plat_proc_cpu_ticks(int pid, uint64_t *cpu_ticks, char *state);

/* 1 when process pid holds the socket listening on TCP port, 0 when another process does or
 * nothing listens, -errno when the OS cannot tell (then the caller trusts the port). Linux:
 * /proc/net/tcp{,6} and /proc/PID/fd. */
int plat_port_held_by(int pid, uint16_t port);

/* ---- sockets and pipes: close-on-exec (and non-blocking when asked) set atomically ---- */

int plat_socket(int domain, int type, bool nonblock);            /* fd or -errno */
int plat_socketpair(int domain, int type, int sv[2]);            /* non-blocking; 0 or -errno */
int plat_accept(int lfd, struct sockaddr *addr, socklen_t *len); /* non-blocking fd, -errno */
int plat_pipe(int fds[2]);                                       /* 0 or -errno */

/* Send without blocking and without SIGPIPE. Bytes sent or -errno. */
long plat_send_nowait(int fd, const void *buf, size_t len);

/* Bytes in a stream socket's send queue the peer has not taken yet (TCP: unsent or
 * unacknowledged; a socketpair: unread). 0 when the OS cannot tell. Linux: SIOCOUTQ. */
size_t plat_sock_unsent(int fd);

/* ---- UDP in batches (the QUIC endpoint) ---- */

/* A non-blocking, close-on-exec UDP socket with 4 MiB buffers that receives coalesced batches
 * where the kernel can (Linux: UDP GRO). An AF_INET6 socket is dual-stack (IPv4 peers too, as
 * IPv4-mapped addresses, which plat_udp_send and plat_udp_recv translate: callers see and give
 * plain AF_INET addresses). fd or -errno. */
int plat_udp_socket(int family);

/* One message out: iov[0..n_iov) to one address. seg > 0 asks the kernel to cut the message
 * into datagrams of seg bytes (all but the last exactly seg; Linux: UDP GSO); seg == 0 sends
 * one datagram. */
typedef struct {
    const struct sockaddr *to;
    socklen_t to_len;
    struct iovec *iov;
    size_t n_iov;
    uint16_t seg;
} plat_udp_out_t;

/* Send messages m[0..n) in as few calls as the OS allows (Linux: sendmmsg). The number of
 * messages sent (possibly fewer than n), or -errno for the first: -EIO/-EINVAL/-ENOPROTOOPT on a
 * message with seg > 0 mean the kernel cannot segment (send one datagram per message instead).
 * family: the one fd was made with (AF_INET6: IPv4 destinations are sent IPv4-mapped). */
int plat_udp_send(int fd, int family, plat_udp_out_t *m, size_t n);

/* One buffer in: the caller sets buf and cap; plat_udp_recv fills the rest. */
typedef struct {
    uint8_t *buf;
    size_t cap;
    struct sockaddr_storage from;
    size_t len;     /* bytes received */
    size_t seg;     /* the datagram size when the kernel coalesced several (len when not) */
    bool truncated; /* the datagram was larger than cap (its bytes are lost) */
} plat_udp_in_t;

/* Receive up to n buffers without waiting (Linux: recvmmsg with UDP GRO). The count filled,
 * 0 when nothing waits, or -errno. An IPv4 sender on a dual-stack socket is given as AF_INET. */
int plat_udp_recv(int fd, plat_udp_in_t *m, size_t n);

#endif

/* mesh-netimp: a user-space network impairment relay for tests and benchmarks.
 *
 * The kernel's netem is not available on the test machines, so links are impaired here: every
 * node runs in its own network namespace, joined by a veth pair to one "router" namespace whose
 * policy routing sends every packet arriving from a node into this process's TUN device. The
 * relay delays (fixed + jitter), drops, duplicates and reorders the IPv4 packets per directed
 * link and can cut a link (partition) and heal it, then writes them back into the TUN device,
 * from where the router namespace forwards them to their destination node.
 *
 * Node i has the address SUBNET.i.2 (router side SUBNET.i.1); the link of a packet is named by
 * the third octets of its source and destination. Namespaces, veths and routes are created by
 * tests/harness/netimp.py; this program only moves packets and answers its control socket.
 *
 * Usage: mesh-netimp --netns ROUTER_NS --tun NAME --ctl SOCKET_PATH [--subnet A.B] [--seed N]
 * Control socket (unix stream, one line per command, one reply line "ok ..." or "err ..."):
 *   set SRC DST key=value...   SRC/DST: node index 1..63 or '*'; keys: delay_us, jitter_us,
 *                              loss, dup, reorder (probabilities 0..1), cut (0|1)
 *   stats                      "ok" then one line per link with traffic: "SRC DST passed dropped
 *                              duplicated bytes turns payload", then "end"
 *
 * Turns count request/response exchanges at the packet level: turns of SRC DST is how often
 * data began to flow SRC -> DST while the pair's last data went DST -> SRC (for a worker
 * answering its host: the round trips the host waited for). Data is a TCP segment with payload
 * (pure ACKs do not count) or a UDP datagram with more than UDP_DATA_MIN payload bytes (a QUIC
 * packet carrying only an ACK is smaller; encrypted QUIC cannot be told apart otherwise, so for
 * QUIC this is an estimate, and gossip between the nodes counts too). payload = TCP or UDP
 * payload bytes of the packets that passed (bytes = whole IP packets).
 *   quit
 * Prints "ready" on stdout once the TUN device is up. Bounded: at most QUEUE_MAX packets and
 * QUEUE_BYTES_MAX bytes wait in the delay queue (more are dropped, like a full router buffer). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES 64
#define PKT_MAX 65536
#define QUEUE_MAX 65536
#define QUEUE_BYTES_MAX (256u << 20)
#define MAX_CLIENTS 8
#define LINE_MAX_BYTES 512
#define UDP_DATA_MIN 72 /* UDP payload bytes above which a datagram counts as data */

typedef struct {
    uint32_t delay_us, jitter_us;
    double loss, dup, reorder;
    bool cut;
    uint64_t passed, dropped, duplicated, bytes;
    uint64_t turns, payload;
} link_t;

typedef struct {
    uint64_t due_ns, seq;
    uint32_t len;
    uint8_t *data;
} pkt_t;

static link_t links[MAX_NODES][MAX_NODES];
static uint8_t last_data_src[MAX_NODES][MAX_NODES]; /* [lo][hi]: who sent the pair's last data */
static pkt_t *heap[QUEUE_MAX];
static size_t heap_n, heap_bytes;
static uint64_t seq_next, rng_state = 0x9e3779b97f4a7c15ull;
static unsigned subnet_a = 10, subnet_b = 231;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double rnd(void) /* xorshift64*, reproducible from --seed */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / (double)(1ull << 53);
}

static bool before(const pkt_t *a, const pkt_t *b)
{
    return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

static void heap_push(pkt_t *p)
{
    size_t i = heap_n++;
    heap[i] = p;
    while (i > 0 && before(heap[i], heap[(i - 1) / 2])) {
        pkt_t *t = heap[i];
        heap[i] = heap[(i - 1) / 2];
        heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
    heap_bytes += p->len;
}

static pkt_t *heap_pop(void)
{
    pkt_t *top = heap[0];
    heap[0] = heap[--heap_n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < heap_n && before(heap[l], heap[m])) m = l;
        if (r < heap_n && before(heap[r], heap[m])) m = r;
        if (m == i) break;
        pkt_t *t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
    heap_bytes -= top->len;
    return top;
}

static int enqueue(const uint8_t *buf, uint32_t len, uint64_t due)
{
    if (heap_n >= QUEUE_MAX || heap_bytes + len > QUEUE_BYTES_MAX) return -ENOBUFS;
    pkt_t *p = malloc(sizeof *p + len);
    if (!p) return -ENOMEM;
    p->data = (uint8_t *)(p + 1);
    memcpy(p->data, buf, len);
    p->len = len;
    p->due_ns = due;
    p->seq = seq_next++;
    heap_push(p);
    return 0;
}

/* node index of an address in SUBNET.i.x, or 0 when the address is elsewhere */
static unsigned node_of(const uint8_t *ip)
{
    if (ip[0] != subnet_a || ip[1] != subnet_b || ip[2] == 0 || ip[2] >= MAX_NODES) return 0;
    return ip[2];
}

/* Payload bytes of an IPv4 TCP or UDP packet (0 for others and malformed ones); *data: whether
 * it counts as data for turns. */
static uint32_t payload_of(const uint8_t *buf, uint32_t len, bool *data)
{
    *data = false;
    uint32_t ihl = (uint32_t)(buf[0] & 0x0f) * 4, tot = (uint32_t)buf[2] << 8 | buf[3];
    if (ihl < 20 || tot > len || tot < ihl) return 0;
    if ((((uint32_t)buf[6] & 0x1f) << 8 | buf[7]) != 0) return 0; /* a later fragment */
    const uint8_t *l4 = buf + ihl;
    uint32_t l4len = tot - ihl;
    if (buf[9] == 6 && l4len >= 20) { /* TCP */
        uint32_t doff = (uint32_t)(l4[12] >> 4) * 4;
        uint32_t pl = doff >= 20 && doff <= l4len ? l4len - doff : 0;
        *data = pl > 0;
        return pl;
    }
    if (buf[9] == 17 && l4len >= 8) { /* UDP */
        uint32_t pl = l4len - 8;
        *data = pl > UDP_DATA_MIN;
        return pl;
    }
    return 0;
}

static void count_turn(unsigned s, unsigned d, const uint8_t *buf, uint32_t len)
{
    bool data;
    links[s][d].payload += payload_of(buf, len, &data);
    if (!data) return;
    unsigned lo = s < d ? s : d, hi = s < d ? d : s;
    if (last_data_src[lo][hi] == d) links[s][d].turns++;
    last_data_src[lo][hi] = (uint8_t)s;
}

static void on_packet(int tun, const uint8_t *buf, uint32_t len)
{
    if (len < 20 || (buf[0] >> 4) != 4) return; /* IPv4 only: nothing else is routed here */
    unsigned s = node_of(buf + 12), d = node_of(buf + 16);
    if (!s || !d) {
        if (write(tun, buf, len) < 0) { /* not between two nodes: pass untouched */
        }
        return;
    }
    link_t *l = &links[s][d];
    if (l->cut || (l->loss > 0 && rnd() < l->loss)) {
        l->dropped++;
        return;
    }
    uint64_t now = now_ns();
    int copies = (l->dup > 0 && rnd() < l->dup) ? 2 : 1;
    for (int c = 0; c < copies; c++) {
        uint64_t d_us = l->delay_us;
        if (l->jitter_us) d_us += (uint64_t)(rnd() * l->jitter_us);
        if (l->reorder > 0 && rnd() < l->reorder) d_us += l->delay_us / 2 + 1000;
        if (enqueue(buf, len, now + d_us * 1000ull) < 0) {
            l->dropped++;
            return;
        }
        if (c) l->duplicated++;
    }
    l->passed++;
    l->bytes += len;
    count_turn(s, d, buf, len);
}

static void flush_due(int tun)
{
    uint64_t now = now_ns();
    while (heap_n && heap[0]->due_ns <= now) {
        pkt_t *p = heap_pop();
        if (write(tun, p->data, p->len) < 0 && errno != EAGAIN) { /* a vanished route: drop */
        }
        free(p);
    }
}

static int parse_node(const char *s, unsigned *lo, unsigned *hi)
{
    if (strcmp(s, "*") == 0) {
        *lo = 1;
        *hi = MAX_NODES - 1;
        return 0;
    }
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v >= MAX_NODES) return -EINVAL;
    *lo = *hi = (unsigned)v;
    return 0;
}

static int apply_kv(link_t *l, const char *k, const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (*end || x < 0) return -EINVAL;
    if (strcmp(k, "delay_us") == 0 && x <= 10e6)
        l->delay_us = (uint32_t)x;
    else if (strcmp(k, "jitter_us") == 0 && x <= 10e6)
        l->jitter_us = (uint32_t)x;
    else if (strcmp(k, "loss") == 0 && x <= 1)
        l->loss = x;
    else if (strcmp(k, "dup") == 0 && x <= 1)
        l->dup = x;
    else if (strcmp(k, "reorder") == 0 && x <= 1)
        l->reorder = x;
    else if (strcmp(k, "cut") == 0 && x <= 1)
        l->cut = x != 0;
    else
        return -EINVAL;
    return 0;
}

static void reply(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* one control line; returns false when the relay should stop */
static bool on_command(int fd, char *line)
{
    char *save, *argv[16];
    int argc = 0;
    for (char *t = strtok_r(line, " \t\r", &save); t && argc < 16;
         t = strtok_r(NULL, " \t\r", &save))
        argv[argc++] = t;
    if (argc == 0) return true;
    if (strcmp(argv[0], "quit") == 0) {
        reply(fd, "ok bye\n");
        return false;
    }
    if (strcmp(argv[0], "stats") == 0) {
        reply(fd, "ok\n");
        char out[224];
        for (unsigned s = 1; s < MAX_NODES; s++)
            for (unsigned d = 1; d < MAX_NODES; d++) {
                link_t *l = &links[s][d];
                if (!l->passed && !l->dropped) continue;
                snprintf(out, sizeof out, "%u %u %llu %llu %llu %llu %llu %llu\n", s, d,
                         (unsigned long long)l->passed, (unsigned long long)l->dropped,
                         (unsigned long long)l->duplicated, (unsigned long long)l->bytes,
                         (unsigned long long)l->turns, (unsigned long long)l->payload);
                reply(fd, out);
            }
        reply(fd, "end\n");
        return true;
    }
    if (strcmp(argv[0], "set") == 0 && argc >= 3) {
        unsigned s0, s1, d0, d1;
        if (parse_node(argv[1], &s0, &s1) < 0 || parse_node(argv[2], &d0, &d1) < 0) {
            reply(fd, "err bad node (1..63 or *)\n");
            return true;
        }
        link_t probe = {0};
        for (int i = 3; i < argc; i++) { /* validate every setting before applying any */
            char *eq = strchr(argv[i], '=');
            if (!eq || eq == argv[i]) goto bad;
            *eq = 0;
            if (apply_kv(&probe, argv[i], eq + 1) < 0) goto bad;
            *eq = '=';
        }
        /* only the keys given change; each link keeps its other settings and its counters */
        for (unsigned s = s0; s <= s1; s++)
            for (unsigned d = d0; d <= d1; d++)
                for (int i = 3; i < argc; i++) {
                    char *eq = strchr(argv[i], '=');
                    *eq = 0;
                    apply_kv(&links[s][d], argv[i], eq + 1);
                    *eq = '=';
                }
        reply(fd, "ok\n");
        return true;
    bad:
        reply(fd, "err bad setting (delay_us jitter_us loss dup reorder cut)\n");
        return true;
    }
    reply(fd, "err unknown command (set stats quit)\n");
    return true;
}

static int open_tun(const char *name)
{
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct ifreq ifr = {0};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) goto fail;
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) goto fail;
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0 ||
        (ifr.ifr_flags |= IFF_UP, ioctl(s, SIOCSIFFLAGS, &ifr)) < 0) {
        close(s);
        goto fail;
    }
    close(s);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
fail:;
    int e = -errno;
    close(fd);
    return e;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: mesh-netimp --netns ROUTER_NS --tun NAME --ctl SOCKET_PATH [--subnet A.B] "
            "[--seed N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *ns = NULL, *tun_name = NULL, *ctl = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--netns") == 0)
            ns = argv[i + 1];
        else if (strcmp(argv[i], "--tun") == 0)
            tun_name = argv[i + 1];
        else if (strcmp(argv[i], "--ctl") == 0)
            ctl = argv[i + 1];
        else if (strcmp(argv[i], "--seed") == 0)
            rng_state ^= strtoull(argv[i + 1], NULL, 10) * 0x2545f4914f6cdd1dull;
        else if (strcmp(argv[i], "--subnet") == 0) {
            if (sscanf(argv[i + 1], "%u.%u", &subnet_a, &subnet_b) != 2 || subnet_a > 255 ||
                subnet_b > 255)
                usage();
        } else
            usage();
    }
    if (!ns || !tun_name || !ctl || strlen(ctl) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        usage();
    signal(SIGPIPE, SIG_IGN);

    /* the control socket lives in the caller's mount namespace; bind it before entering the
     * router's network namespace so the caller can reach it */
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", ctl);
    unlink(ctl);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 4) < 0) {
        perror("mesh-netimp: control socket");
        return 1;
    }
    char path[256];
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) < 0) {
        fprintf(stderr, "mesh-netimp: cannot enter network namespace %s: %s\n", ns,
                strerror(errno));
        return 1;
    }
    close(nsfd);
    int tun = open_tun(tun_name);
    if (tun < 0) {
        fprintf(stderr, "mesh-netimp: TUN device %s: %s\n", tun_name, strerror(-tun));
        return 1;
    }
    printf("ready\n");
    fflush(stdout);

    static uint8_t buf[PKT_MAX];
    int clients[MAX_CLIENTS];
    char lines[MAX_CLIENTS][LINE_MAX_BYTES];
    size_t line_len[MAX_CLIENTS];
    int nclients = 0;
    for (bool run = true; run;) {
        struct pollfd pf[2 + MAX_CLIENTS];
        pf[0] = (struct pollfd){.fd = tun, .events = POLLIN};
        pf[1] = (struct pollfd){.fd = lfd, .events = nclients < MAX_CLIENTS ? POLLIN : 0};
        for (int i = 0; i < nclients; i++)
            pf[2 + i] = (struct pollfd){.fd = clients[i], .events = POLLIN};
        struct timespec to, *top = NULL;
        if (heap_n) {
            uint64_t now = now_ns(), due = heap[0]->due_ns;
            uint64_t wait = due > now ? due - now : 0;
            to.tv_sec = (time_t)(wait / 1000000000ull);
            to.tv_nsec = (long)(wait % 1000000000ull);
            top = &to;
        }
        if (ppoll(pf, (nfds_t)(2 + nclients), top, NULL) < 0 && errno != EINTR) break;
        if (pf[0].revents & POLLIN)
            for (int burst = 0; burst < 256; burst++) {
                ssize_t n = read(tun, buf, sizeof buf);
                if (n <= 0) break;
                on_packet(tun, buf, (uint32_t)n);
            }
        flush_due(tun);
        if (pf[1].revents & POLLIN) {
            int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0) {
                clients[nclients] = c;
                line_len[nclients++] = 0;
            }
        }
        for (int i = 0; i < nclients; i++) {
            if (!(pf[2 + i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(clients[i], lines[i] + line_len[i], LINE_MAX_BYTES - 1 - line_len[i]);
            bool drop = n <= 0;
            if (!drop) {
                line_len[i] += (size_t)n;
                char *nl;
                while (run && (nl = memchr(lines[i], '\n', line_len[i]))) {
                    *nl = 0;
                    run = on_command(clients[i], lines[i]);
                    size_t used = (size_t)(nl + 1 - lines[i]);
                    memmove(lines[i], nl + 1, line_len[i] - used);
                    line_len[i] -= used;
                }
                if (line_len[i] >= LINE_MAX_BYTES - 1) drop = true; /* a line too long */
            }
            if (drop) {
                close(clients[i]);
                clients[i] = clients[--nclients];
                line_len[i] = line_len[nclients];
                memcpy(lines[i], lines[nclients], line_len[i]);
                pf[2 + i] = pf[2 + nclients];
                i--;
            }
        }
    }
    unlink(ctl);
    return 0;
}

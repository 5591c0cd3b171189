#include "procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NET_TCP_MAX (8u << 20) /* a host with ~50k sockets; beyond that /proc cannot tell */

int procfs_parse_stat(const char *text, uint64_t *cpu_ticks, char *state)
{
    /* "pid (comm) S ppid ...": comm may hold spaces and parentheses, so start after the last ')' */
    const char *p = strrchr(text, ')');
    if (!p) return -EINVAL;
    p++;
    char st = 0;
    unsigned long long utime = 0, stime = 0;
    /* fields 3..15: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
     * stime */
    if (sscanf(p, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &st, &utime, &stime) !=
        3)
        return -EINVAL;
    if (cpu_ticks) *cpu_ticks = utime + stime;
    if (state) *state = st;
    return 0;
}

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

int procfs_cpu_ticks(int pid, uint64_t *cpu_ticks, char *state)
{
    char path[64], *text = NULL;
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int rc = read_proc(path, 64 * 1024, &text);
    if (rc) return rc;
    rc = procfs_parse_stat(text, cpu_ticks, state);
    free(text);
    return rc;
}

int procfs_parse_listen_inode(const char *text, uint16_t port, uint64_t *inode)
{
    const char *line = strchr(text, '\n'); /* skip the header */
    if (!line || !strstr(text, "local_address")) return -EINVAL;
    for (line++; *line;) {
        const char *next = strchr(line, '\n');
        /* "  0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0  0 12345"
         */
        char local[64];
        unsigned lport, st;
        unsigned long long ino;
        if (sscanf(line,
                   " %*u: %63[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %llu",
                   local, &lport, &st, &ino) == 4 &&
            lport == port && st == 0x0A /* TCP_LISTEN */) {
            *inode = ino;
            return 0;
        }
        if (!next) break;
        line = next + 1;
    }
    return -ENOENT;
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

int procfs_port_held_by(int pid, uint16_t port)
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

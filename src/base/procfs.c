#include "procfs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

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

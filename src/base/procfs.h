/* procfs — what Linux's /proc says about a child: its CPU time (progress while it is busy) and
 * whether it is the process holding a listening port (a port picked for a child can be taken by
 * another process before the child binds it). Parsers are pure; the readers do small reads of
 * procfs, which never wait on a disk. */
#ifndef MESH_PROCFS_H
#define MESH_PROCFS_H

#include <stdint.h>

/* From the text of /proc/PID/stat: utime+stime (clock ticks) and the state letter. 0 or
 * -EINVAL. */
int procfs_parse_stat(const char *text, uint64_t *cpu_ticks, char *state);
int procfs_cpu_ticks(int pid, uint64_t *cpu_ticks, char *state);

/* From the text of /proc/net/tcp or tcp6: the inode of the socket listening on port (any local
 * address). 0, -ENOENT when nothing listens there, -EINVAL for text that is not such a table. */
int procfs_parse_listen_inode(const char *text, uint16_t port, uint64_t *inode);

/* 1 when process pid holds the socket listening on TCP port, 0 when another process does or
 * nothing listens, -errno when /proc cannot tell (then the caller trusts the port). */
int procfs_port_held_by(int pid, uint16_t port);

#endif

/* procfs — the parsers of the Linux /proc texts platform_linux.c reads about a child: its CPU
 * time (progress while it is busy) and whether it is the process holding a listening port (a
 * port picked for a child can be taken by another process before the child binds it). Pure:
 * the readers are plat_proc_cpu_ticks and plat_port_held_by (platform.h). */
#ifndef MESH_PROCFS_H
#define MESH_PROCFS_H

#include <stdint.h>

/* From the text of /proc/PID/stat: utime+stime (clock ticks) and the state letter. 0 or
 * -EINVAL. */
int procfs_parse_stat(const char *text, uint64_t *cpu_ticks, char *state);

/* From the text of /proc/net/tcp or tcp6: the inode of the socket listening on port (any local
 * address). 0, -ENOENT when nothing listens there, -EINVAL for text that is not such a table. */
int procfs_parse_listen_inode(const char *text, uint16_t port, uint64_t *inode);

#endif

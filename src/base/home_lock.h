/* One node per home: an exclusive lock on $MESH_LLM_HOME/lock, held for the node's lifetime. */
#ifndef MESH_HOME_LOCK_H
#define MESH_HOME_LOCK_H

#include <stddef.h>
#include <sys/types.h>

/* Take the lock of home (created 0700 when missing): 0 with *fd open (close-on-exec; the lock
 * goes with the process), -EWOULDBLOCK when another process holds it (its pid in *holder, 0
 * when unknown), another -errno otherwise. The holder's pid is written into the lock file. */
int home_lock(const char *home, int *fd, pid_t *holder);

/* The pid of the process that holds home's lock, 0 when none does (or home has no lock file).
 * Takes nothing: for read-only commands. */
pid_t home_lock_holder(const char *home);

/* The message for a refused start: names the holder and the two-line recipe for a second
 * node on the same machine. */
void home_lock_refusal(char *out, size_t outlen, const char *home, pid_t holder);

#endif

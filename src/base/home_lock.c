/* home_lock — see home_lock.h. A POSIX record lock (fcntl): F_GETLK names the holder's pid
 * even when the lock file's text is stale. */
#include "home_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define LOCK_NAME "lock"

static int lock_path(char *out, size_t outlen, const char *home)
{
    int n = snprintf(out, outlen, "%s/" LOCK_NAME, home);
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* The pid written in the lock file (a fallback: F_GETLK gives 0 across pid namespaces). */
static pid_t pid_in_file(int fd)
{
    char buf[24];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *end;
    long v = strtol(buf, &end, 10);
    return v > 0 && (*end == '\n' || *end == '\0') ? (pid_t)v : 0;
}

static pid_t holder_of(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_GETLK, &fl) != 0 || fl.l_type == F_UNLCK) return 0;
    return fl.l_pid > 0 ? fl.l_pid : pid_in_file(fd);
}

int home_lock(const char *home, int *fd, pid_t *holder)
{
    char path[4096];
    *fd = -1;
    *holder = 0;
    int rc = lock_path(path, sizeof path, home);
    if (rc) return rc;
    if ((rc = mkdir_p(home, 0700)) != 0) return rc;
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f < 0) return -errno;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(f, F_SETLK, &fl) != 0) {
        int e = errno;
        if (e == EACCES || e == EAGAIN) {
            *holder = holder_of(f);
            e = EWOULDBLOCK;
        }
        close(f);
        return -e;
    }
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)n, 0) != n) {
        /* the lock holds without the text: F_GETLK still names this process */
    }
    *fd = f;
    return 0;
}

pid_t home_lock_holder(const char *home)
{
    char path[4096];
    if (lock_path(path, sizeof path, home)) return 0;
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return 0;
    /* F_GETLK with a write lock asks "who would block me", which a read-only fd may ask */
    pid_t p = holder_of(f);
    close(f);
    return p;
}

void home_lock_refusal(char *out, size_t outlen, const char *home, pid_t holder)
{
    char who[48] = "another mesh-llm node";
    if (holder > 0) snprintf(who, sizeof who, "another mesh-llm node (pid %ld)", (long)holder);
    snprintf(out, outlen,
             "%s is already running with the state directory %s. One node per state "
             "directory: for a second node on this machine give it its own directory and "
             "ports, e.g. MESH_LLM_HOME=%s-2 mesh-llm --port 0 --console 0 --bind-port 0 "
             "--join TOKEN",
             who, home, home);
}

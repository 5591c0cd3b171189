/* cli_agents_node — see cli_agents_node.h. */
#include "cli_agents_node.h"
#include "platform.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int agent_node_start(agent_node_t *n, const char *const *argv, const char *join, const char *log,
                     bool tied)
{
    memset(n, 0, sizeof *n);
    n->log_fd = -1;
    int out = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) return -errno;
    if (fchmod(out, 0600) != 0) {
        int e = errno;
        close(out);
        return -e;
    }
    int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    n->log_fd = open(log, O_RDONLY | O_CLOEXEC);
    if (in < 0 || n->log_fd < 0) {
        int e = errno;
        close(out);
        if (in >= 0) close(in);
        agent_node_close(n);
        return -e;
    }
    pid_t parent = getpid();
    fflush(NULL);
    /* the token in the node's environment only: set around the fork, not in the child (setenv
     * allocates), gone again before anything else runs here */
    int rc = join ? (setenv("MESH_LLM_JOIN", join, 1) ? -errno : 0) : 0;
    pid_t pid = rc ? -1 : fork();
    if (join && pid != 0) unsetenv("MESH_LLM_JOIN");
    if (pid < 0) {
        int e = rc ? -rc : errno;
        close(out);
        close(in);
        agent_node_close(n);
        return -e;
    }
    if (pid == 0) {
        /* the child: async-signal-safe calls only until the exec */
        setsid();
        if (tied) {
            plat_die_with_parent(SIGTERM);
            if (getppid() != parent) _exit(1); /* the launcher is already gone */
        }
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(errno == ENOENT ? 127 : 126);
    }
    close(out);
    close(in);
    n->pid = pid;
    return 0;
}

bool agent_node_alive(agent_node_t *n)
{
    if (n->pid <= 0) return false;
    int st;
    pid_t r = waitpid(n->pid, &st, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) return true;
    if (r == n->pid) n->status = st;
    n->pid = 0;
    return false;
}

void agent_node_echo(agent_node_t *n, FILE *to, const char *prefix)
{
    if (n->log_fd < 0) return;
    char buf[4096];
    for (int rounds = 0; rounds < 64; rounds++) { /* bounded: at most 256 KiB a call */
        ssize_t r = pread(n->log_fd, buf, sizeof buf, n->echoed);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n->echoed += r;
        for (ssize_t i = 0; i < r; i++) {
            bool nl = buf[i] == '\n';
            if (!nl && n->n_partial < sizeof n->partial - 1) n->partial[n->n_partial++] = buf[i];
            if (nl || n->n_partial == sizeof n->partial - 1) {
                fprintf(to, "%s%.*s\n", prefix, (int)n->n_partial, n->partial);
                n->n_partial = 0;
            }
        }
    }
    fflush(to);
}

void agent_node_stop(agent_node_t *n, unsigned grace_ms)
{
    if (!agent_node_alive(n)) return;
    kill(n->pid, SIGTERM);
    for (unsigned waited = 0; waited < grace_ms && agent_node_alive(n); waited += 50)
        sleep_ms(50);
    if (!agent_node_alive(n)) return;
    kill(n->pid, SIGKILL);
    int st;
    while (waitpid(n->pid, &st, 0) < 0 && errno == EINTR) {
    }
    n->status = st;
    n->pid = 0;
}

void agent_node_close(agent_node_t *n)
{
    if (n->log_fd >= 0) close(n->log_fd);
    n->log_fd = -1;
}

/* ---- the agent beside it ---- */

static volatile sig_atomic_t child_pid;

static void pass_on(int sig)
{
    if (child_pid > 0) kill((pid_t)child_pid, sig);
}

int agent_run_child(char *const *argv)
{
    struct sigaction ign = {.sa_handler = SIG_IGN}, fwd = {.sa_handler = pass_on}, old[4];
    sigemptyset(&ign.sa_mask);
    sigemptyset(&fwd.sa_mask);
    const int sigs[4] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 126;
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(errno == ENOENT ? 127 : 126);
    }
    child_pid = pid;
    for (int i = 0; i < 4; i++)
        sigaction(sigs[i], i < 2 ? &ign : &fwd, &old[i]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    child_pid = 0;
    for (int i = 0; i < 4; i++)
        sigaction(sigs[i], &old[i], NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
}

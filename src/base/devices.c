/* devices — see devices.h. */
#include "devices.h"
#include "platform.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_LINES 64
#define OUT_CAP 16384

int devices_parse(const char *text, size_t len, uint64_t *free_bytes, unsigned *n_devices)
{
    *free_bytes = 0;
    *n_devices = 0;
    const char *p = text, *end = text + len;
    const char *hdr = memmem(text, len, "Available devices:", 18);
    if (!hdr) return -EINVAL;
    p = hdr + 18;
    for (unsigned lines = 0; p < end && lines < MAX_LINES; lines++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        char line[512];
        size_t n = (size_t)(le - p) < sizeof line - 1 ? (size_t)(le - p) : sizeof line - 1;
        memcpy(line, p, n);
        line[n] = '\0';
        p = nl ? nl + 1 : end;
        /* "  CUDA0: NVIDIA … (24576 MiB, 23000 MiB free)": the last parenthesis */
        char *open = strrchr(line, '(');
        unsigned long long total, fr;
        if (!open || sscanf(open, "(%llu MiB, %llu MiB free)", &total, &fr) != 2) continue;
        if (fr > (1ULL << 40)) continue; /* > 1 EiB: not a real reading */
        *free_bytes += fr * 1024 * 1024;
        (*n_devices)++;
    }
    return 0;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int devices_detect(const char *llama_server, unsigned timeout_ms, uint64_t *free_bytes,
                   unsigned *n_devices)
{
    int fds[2];
    int prc = plat_pipe(fds);
    if (prc) return prc;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)llama_server, (char *)"--list-devices", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, llama_server, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return -rc;
    }
    char out[OUT_CAP];
    size_t len = 0;
    uint64_t deadline = mono_ms() + timeout_ms;
    bool eof = false;
    while (!eof && len < sizeof out - 1) {
        uint64_t now = mono_ms();
        if (now >= deadline) break;
        struct pollfd pf = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&pf, 1, (int)(deadline - now));
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) break;
        ssize_t r = read(fds[0], out + len, sizeof out - 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            eof = true;
        else
            len += (size_t)r;
    }
    close(fds[0]);
    if (!eof) kill(pid, SIGKILL);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!eof) return -ETIMEDOUT;
    out[len] = '\0';
    return devices_parse(out, len, free_bytes, n_devices);
}

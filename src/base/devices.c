/* devices — see devices.h. */
#include "devices.h"
#include "platform.h"

#include <ctype.h>
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

/* Name "NAME" of "  NAME: DESC (...)": [A-Za-z0-9_-], at most DEVICE_NAME_MAX-1 bytes. */
static bool device_name(const char *line, const char *colon, char *name)
{
    while (*line == ' ' || *line == '\t')
        line++;
    size_t n = (size_t)(colon - line);
    if (n == 0 || n >= DEVICE_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)line[i]) && line[i] != '_' && line[i] != '-') return false;
    memcpy(name, line, n);
    name[n] = '\0';
    return true;
}

int devices_parse(const char *text, size_t len, devices_t *out)
{
    memset(out, 0, sizeof *out);
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
        char *colon = strchr(line, ':');
        unsigned long long total, fr;
        if (!open || !colon || colon > open ||
            sscanf(open, "(%llu MiB, %llu MiB free)", &total, &fr) != 2)
            continue;
        if (fr > (1ULL << 40) || total > (1ULL << 40)) continue; /* > 1 EiB: not a real reading */
        if (out->n >= DEVICES_MAX) continue;
        device_t *d = &out->dev[out->n];
        if (!device_name(line, colon, d->name)) continue;
        size_t b = strcspn(d->name, "0123456789");
        if (b >= DEVICE_BACKEND_MAX) b = DEVICE_BACKEND_MAX - 1;
        memcpy(d->backend, d->name, b);
        d->backend[b] = '\0';
        const char *ds = colon + 1;
        while (*ds == ' ')
            ds++;
        const char *de = open;
        while (de > ds && de[-1] == ' ')
            de--;
        size_t dn =
            (size_t)(de - ds) < DEVICE_DESC_MAX - 1 ? (size_t)(de - ds) : DEVICE_DESC_MAX - 1;
        for (size_t i = 0; i < dn; i++) /* printable only: it reaches status and gossip */
            d->desc[i] = (unsigned char)ds[i] < 0x20 || ds[i] == 0x7f ? '?' : ds[i];
        d->desc[dn] = '\0';
        d->total_bytes = total * 1024 * 1024;
        d->free_bytes = fr * 1024 * 1024;
        out->n++;
    }
    return 0;
}

/* The n-th name of a list ("a,b,c") into name; false past the end. */
static bool list_item(const char *list, unsigned n, char *name)
{
    const char *p = list;
    for (unsigned i = 0; i < n && p; i++) {
        p = strchr(p, ',');
        if (p) p++;
    }
    if (!p || !*p) return false;
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= DEVICE_NAME_MAX) return false;
    memcpy(name, p, len);
    name[len] = '\0';
    return true;
}

int devices_list_valid(const char *list)
{
    if (!list || !*list || strlen(list) > 511) return -EINVAL;
    if (strcmp(list, "none") == 0) return 0;
    unsigned n = 0;
    for (const char *p = list;; p++) {
        size_t len = 0;
        while (isalnum((unsigned char)p[len]) || p[len] == '_' || p[len] == '-')
            len++;
        if (len == 0 || len >= DEVICE_NAME_MAX || ++n > DEVICES_MAX) return -EINVAL;
        p += len;
        if (*p == '\0') return 0;
        if (*p != ',') return -EINVAL;
    }
}

int devices_select(devices_t *d, const char *list, char *err, size_t errlen)
{
    if (devices_list_valid(list) != 0) {
        snprintf(err, errlen, "'%s' is not a device list", list ? list : "");
        return -EINVAL;
    }
    bool none = strcmp(list, "none") == 0;
    char name[DEVICE_NAME_MAX];
    for (unsigned i = 0; !none && list_item(list, i, name); i++) {
        bool found = false;
        for (unsigned k = 0; k < d->n && !found; k++)
            found = strcmp(d->dev[k].name, name) == 0;
        if (!found) {
            size_t off =
                (size_t)snprintf(err, errlen, "llama-server lists no device %s; it lists ", name);
            for (unsigned k = 0; k < d->n && off < errlen; k++)
                off += (size_t)snprintf(err + off, errlen - off, "%s%s (%s)", k ? ", " : "",
                                        d->dev[k].name, d->dev[k].desc);
            if (d->n == 0 && off < errlen) snprintf(err + off, errlen - off, "none");
            return -ENOENT;
        }
    }
    unsigned kept = 0;
    for (unsigned k = 0; k < d->n; k++) {
        bool named = false;
        for (unsigned i = 0; !none && !named && list_item(list, i, name); i++)
            named = strcmp(d->dev[k].name, name) == 0;
        if (named) d->dev[kept++] = d->dev[k];
    }
    d->n = kept;
    return 0;
}

uint64_t devices_free(const devices_t *d)
{
    uint64_t sum = 0;
    for (unsigned i = 0; d && i < d->n; i++)
        sum += d->dev[i].free_bytes;
    return sum;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int devices_detect(const char *llama_server, unsigned timeout_ms, devices_t *devs)
{
    memset(devs, 0, sizeof *devs);
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
    return devices_parse(out, len, devs);
}

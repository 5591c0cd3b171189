#include "cli_status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "ledger.h"
#include "platform.h"
#include "util.h"

#define CLI_MAX_RESPONSE (8u << 20)
#define CLI_MAX_TOKEN 16384
#define CLI_POLL_MS 250

bool cli_is_command(const char *arg)
{
    return strcmp(arg, "status") == 0 || strcmp(arg, "join") == 0;
}

void cli_request(cli_http_t *h, const char *method, const char *path, const char *body)
{
    h->status = 0;
    h->refused = false;
    json_decref(h->body);
    h->body = NULL;
    h->err[0] = '\0';
    int fd = plat_socket(AF_INET, SOCK_STREAM, false);
    if (fd < 0) {
        snprintf(h->err, sizeof h->err, "socket: %s", strerror(-fd));
        return;
    }
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)h->port)};
    sa.sin_addr.s_addr = h->addr ? h->addr : htonl(INADDR_LOOPBACK);
    char *buf = NULL;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        h->refused = errno == ECONNREFUSED;
        if (errno == ECONNREFUSED)
            snprintf(h->err, sizeof h->err,
                     "no mesh-llm node is running with its console on 127.0.0.1:%d (start one "
                     "with 'mesh-llm', or name its port with --console PORT)",
                     h->port);
        else
            snprintf(h->err, sizeof h->err, "cannot connect to 127.0.0.1:%d: %s", h->port,
                     strerror(errno));
        goto out;
    }
    const char *key = config_env_api_key();
    char head[1024];
    int hl = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n%s%s%s\r\n",
                      method, path, h->port, body ? strlen(body) : 0,
                      key && *key ? "Authorization: Bearer " : "", key && *key ? key : "",
                      key && *key ? "\r\n" : "");
    if (hl < 0 || (size_t)hl >= sizeof head || write(fd, head, (size_t)hl) != hl ||
        (body && write(fd, body, strlen(body)) != (ssize_t)strlen(body))) {
        snprintf(h->err, sizeof h->err, "cannot send the request to 127.0.0.1:%d", h->port);
        goto out;
    }
    size_t len = 0, cap = 65536;
    buf = malloc(cap + 1);
    if (!buf) goto out;
    for (;;) {
        if (len == cap) {
            if (cap >= CLI_MAX_RESPONSE) {
                snprintf(h->err, sizeof h->err, "answer larger than %u bytes", CLI_MAX_RESPONSE);
                goto out;
            }
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) goto out;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(h->err, sizeof h->err, "no answer from 127.0.0.1:%d: %s", h->port,
                     strerror(errno));
            goto out;
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    const char *sep = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) != 0 || !sep || sscanf(buf + 8, " %d", &h->status) != 1) {
        snprintf(h->err, sizeof h->err, "127.0.0.1:%d does not answer like a mesh-llm console",
                 h->port);
        h->status = 0;
        goto out;
    }
    h->body = json_loadb(sep + 4, len - (size_t)(sep + 4 - buf), 0, NULL);
out:
    free(buf);
    close(fd);
}

/* The error message of an OpenAI-shaped error body, or a generic one. */
static const char *error_message(const cli_http_t *h)
{
    const char *m =
        json_string_value(json_object_get(json_object_get(h->body, "error"), "message"));
    return m ? m : "unexpected answer";
}

/* A string field for the terminal: peers' announcements are not trusted, so control bytes
 * (escape sequences) are shown as '?' and long values cut (a ring of buffers: several per
 * printf). */
static const char *str(json_t *o, const char *key, const char *def)
{
    static char ring[16][256];
    static unsigned next;
    const char *s = json_string_value(json_object_get(o, key));
    if (!s) return def;
    char *out = ring[next++ % 16];
    size_t i = 0;
    for (; s[i] && i < sizeof ring[0] - 1; i++)
        out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    out[i] = '\0';
    return out;
}

static void print_ids(json_t *arr)
{
    size_t i;
    json_t *v;
    if (!json_array_size(arr)) {
        printf("-");
        return;
    }
    json_array_foreach(arr, i, v)
    {
        json_t *o = json_pack("{s:O}", "id", v);
        printf("%s%.12s", i ? ", " : "", str(o, "id", "?"));
        json_decref(o);
    }
}

static void print_status(json_t *st)
{
    json_t *node = json_object_get(st, "node");
    const char *state = str(node, "state", "member");
    printf("node %s  %s", str(node, "id", "?"), state);
    if (strcmp(state, "idle") != 0)
        printf("  role %s  mesh %s", str(node, "role", "?"), str(node, "mesh_id", "?"));
    printf("  version %s\n", str(node, "version", "?"));
    printf("  api http://127.0.0.1:%lld/v1  console http://127.0.0.1:%lld",
           (long long)json_integer_value(json_object_get(node, "api_port")),
           (long long)json_integer_value(json_object_get(node, "console_port")));
    if (json_integer_value(json_object_get(node, "quic_port")))
        printf("  quic udp/%lld",
               (long long)json_integer_value(json_object_get(node, "quic_port")));
    printf("\n");
    if (strcmp(state, "idle") == 0) {
        printf("  not in a mesh yet: mesh-llm join TOKEN --console %lld\n",
               (long long)json_integer_value(json_object_get(node, "console_port")));
        return;
    }
    const char *jerr = str(node, "join_error", "");
    if (strcmp(state, "joining") == 0 && jerr[0]) printf("  last join attempt: %s\n", jerr);
    json_t *route = json_object_get(st, "route");
    if (strcmp(state, "passive") == 0 && json_is_object(route))
        printf("  passive %s: no gossip; routing table from %.12s (%lld active node(s), %lld "
               "check-in(s))\n",
               str(route, "role", "?"), str(route, "checkin", "-"),
               (long long)json_integer_value(json_object_get(route, "active_nodes")),
               (long long)json_integer_value(json_object_get(route, "checkins")));
    /* the llama.cpp flavour and the devices it can use */
    const char *flavour = str(node, "llama_flavour", "");
    json_t *devs = json_object_get(node, "devices");
    if (flavour[0] || json_array_size(devs)) {
        printf("  llama.cpp %s:", flavour[0] ? flavour : "(flavour unknown)");
        size_t di;
        json_t *dv;
        char tb[32], fb[32];
        if (!json_array_size(devs)) printf(" no accelerator (CPU and RAM)");
        json_array_foreach(devs, di, dv)
            printf("%s %s %s (%s, %s free)", di ? "," : "", str(dv, "name", "?"),
                   str(dv, "description", ""),
                   ledger_fmt((uint64_t)json_integer_value(json_object_get(dv, "total_bytes")), tb,
                              sizeof tb),
                   ledger_fmt((uint64_t)json_integer_value(json_object_get(dv, "free_bytes")), fb,
                              sizeof fb));
        printf("\n");
    }
    json_t *asg = json_object_get(node, "assignment");
    if (json_is_object(asg) && str(asg, "model", "")[0] &&
        strcmp(str(asg, "rule", ""), "assigned") != 0)
        printf("  given by the mesh: %s (rule %s)\n", str(asg, "model", ""), str(asg, "rule", ""));
    size_t ai;
    json_t *av;
    json_array_foreach(json_object_get(st, "assignments"), ai, av)
        printf("  assigned here: %s (%s)\n", str(av, "model", "?"), str(av, "state", "?"));

    size_t i, k;
    json_t *v, *w;
    json_t *peers = json_object_get(st, "peers");
    printf("peers (%zu):\n", json_array_size(peers));
    json_array_foreach(peers, i, v)
    {
        json_t *rtt = json_object_get(v, "rtt_ms");
        printf("  %.12s  %-7s %-7s", str(v, "id", "?"), str(v, "state", "?"), str(v, "role", "?"));
        if (json_is_number(rtt))
            printf(" rtt %6.1f ms", json_number_value(rtt));
        else
            printf(" rtt      -   ");
        /* how it is reached: direct, mapped, punched, relayed via X (docs/nat.md) */
        const char *path = str(v, "path", "-");
        if (!strcmp(path, "relayed"))
            printf("  relayed via %.12s", str(v, "via", "?"));
        else
            printf("  %-7s", path);
        printf("  serving ");
        json_t *sv = json_object_get(v, "serving");
        if (!json_array_size(sv)) printf("-");
        json_array_foreach(sv, k, w) printf("%s%s", k ? ", " : "", str(w, "model", "?"));
        printf("\n");
    }
    json_t *cat = json_object_get(st, "catalog");
    printf("models (%zu):\n", json_array_size(cat));
    json_array_foreach(cat, i, v)
    {
        printf("  %-28s %-15s hosts ", str(v, "name", "?"), str(v, "status", "?"));
        print_ids(json_object_get(v, "hosts"));
        printf("\n");
    }
    json_t *plan = json_object_get(st, "plan");
    printf("plans (%zu):\n", json_array_size(plan));
    json_array_foreach(plan, i, v)
    {
        printf("  %-28s role %-8s mode %-6s host %.12s  (%s)\n", str(v, "model", "?"),
               str(v, "role", "?"), str(v, "mode", "?"), str(v, "host", "-"), str(v, "rule", "?"));
        size_t wi;
        json_t *wk;
        /* a split host's workers: their layers and observed stage times (architecture.md) */
        json_array_foreach(json_object_get(v, "workers"), wi, wk)
        {
            json_t *sg = json_object_get(wk, "stage");
            printf("    worker %.12s  layers %lld-%lld%s", str(wk, "id", "?"),
                   (long long)json_integer_value(json_object_get(wk, "first")),
                   (long long)json_integer_value(json_object_get(wk, "end")),
                   json_is_true(json_object_get(wk, "output")) ? " + output" : "");
            if (json_is_object(sg))
                printf("  stage %.2f ms (%lld samples), %.3f ms a layer, %lld MFLOP/s effective",
                       json_real_value(json_object_get(sg, "ema_ms")),
                       (long long)json_integer_value(json_object_get(sg, "samples")),
                       json_real_value(json_object_get(sg, "layer_ms")),
                       (long long)json_integer_value(json_object_get(sg, "speed_mflops")));
            printf("\n");
        }
    }
    json_t *procs = json_object_get(st, "processes");
    printf("processes (%zu):\n", json_array_size(procs));
    json_array_foreach(procs, i, v)
        printf("  %-13s %-28s pid %-8lld port %-6lld %s\n", str(v, "kind", "?"),
               str(v, "model", "?"), (long long)json_integer_value(json_object_get(v, "pid")),
               (long long)json_integer_value(json_object_get(v, "port")), str(v, "state", "?"));
}

static int cmd_status(cli_http_t *h)
{
    cli_request(h, "GET", "/api/status", NULL);
    if (h->status == 0) {
        fprintf(stderr, "mesh-llm status: %s\n", h->err);
        return 1;
    }
    if (h->status != 200 || !json_is_object(h->body)) {
        fprintf(stderr, "mesh-llm status: %d: %s\n", h->status, error_message(h));
        return 1;
    }
    print_status(h->body);
    return 0;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The token argument, or @FILE's first line (whitespace trimmed). */
static int read_token(const char *arg, char *out, size_t outlen)
{
    if (arg[0] != '@') {
        if (strlen(arg) >= outlen) return -E2BIG;
        snprintf(out, outlen, "%s", arg);
        return 0;
    }
    FILE *f = fopen(arg + 1, "r");
    if (!f) return -errno;
    size_t n = fread(out, 1, outlen - 1, f);
    bool more = fgetc(f) != EOF;
    fclose(f);
    if (more) return -E2BIG;
    out[n] = '\0';
    while (n && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' '))
        out[--n] = '\0';
    return 0;
}

static int cmd_join(cli_http_t *h, const char *arg, uint64_t timeout_ms)
{
    static char token[CLI_MAX_TOKEN];
    int rc = read_token(arg, token, sizeof token);
    if (rc) {
        fprintf(stderr, "mesh-llm join: cannot read the token %s: %s\n", arg, strerror(-rc));
        return 2;
    }
    json_t *req = json_pack("{s:s}", "token", token);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) return 1;
    cli_request(h, "POST", "/api/join", body);
    free(body);
    if (h->status == 0) {
        fprintf(stderr, "mesh-llm join: %s\n", h->err);
        return 1;
    }
    if (h->status != 200 && h->status != 202) {
        fprintf(stderr, "mesh-llm join: refused (%d): %s\n", h->status, error_message(h));
        return 1;
    }
    printf("%s\n", str(h->body, "message", "joining"));
    fflush(stdout);
    uint64_t deadline = mono_ms() + timeout_ms;
    char last_err[256] = "";
    for (;;) {
        cli_request(h, "GET", "/api/status", NULL);
        json_t *node = json_object_get(h->body, "node");
        if (h->status == 200 && node) {
            const char *state = str(node, "state", "");
            if (strcmp(state, "member") == 0) {
                printf("in mesh %s with %zu peer(s)\n", str(node, "mesh_id", "?"),
                       json_array_size(json_object_get(h->body, "peers")));
                return 0;
            }
            if (strcmp(state, "passive") == 0) {
                printf("in mesh %s, standing by passively (no gossip: routing tables from an "
                       "active node)\n",
                       str(node, "mesh_id", "?"));
                return 0;
            }
            const char *e = str(node, "join_error", "");
            if (e[0] && strcmp(e, last_err) != 0) {
                printf("join attempt failed: %s (the node tries again)\n", e);
                fflush(stdout);
                snprintf(last_err, sizeof last_err, "%s", e);
            }
        } else if (h->status == 0) {
            fprintf(stderr, "mesh-llm join: the node stopped answering: %s\n", h->err);
            return 1;
        }
        if (mono_ms() >= deadline) {
            fprintf(stderr,
                    "mesh-llm join: not in the mesh after %llu s%s%s (the node keeps "
                    "trying; see mesh-llm status)\n",
                    (unsigned long long)(timeout_ms / 1000), last_err[0] ? ": " : "", last_err);
            return 1;
        }
        usleep(CLI_POLL_MS * 1000);
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: mesh-llm status [--console PORT]\n"
                    "       mesh-llm join TOKEN|@FILE [--console PORT] [--timeout SECONDS]\n");
    return 2;
}

int cli_main(int argc, char **argv)
{
    cli_http_t h = {.port = 3131};
    const char *token = NULL;
    uint64_t timeout_s = 60, v;
    bool join = strcmp(argv[1], "join") == 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--console") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], 1, 65535, &v) != 0) return usage();
            h.port = (int)v;
        } else if (join && strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], 1, 86400, &timeout_s) != 0) return usage();
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage();
            return 0;
        } else if (join && !token && argv[i][0] != '-') {
            token = argv[i];
        } else {
            fprintf(stderr, "mesh-llm %s: unexpected argument '%s'\n", argv[1], argv[i]);
            return usage();
        }
    }
    int rc;
    if (join) {
        if (!token) {
            fprintf(stderr, "mesh-llm join: give the invite token (or @FILE)\n");
            return usage();
        }
        rc = cmd_join(&h, token, timeout_s * 1000);
    } else {
        rc = cmd_status(&h);
    }
    json_decref(h.body);
    return rc;
}

/* cli_agents — see cli_agents.h. */
#include "cli_agents.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents.h"
#include "cli_status.h"
#include "config.h"
#include "identity.h"
#include "tunables.h"
#include "util.h"

#define DEFAULT_CONSOLE 3131
#define DEFAULT_API 9337
#define MAX_MODELS 256

bool cli_agents_is_command(const char *arg)
{
    return agent_by_name(arg, NULL) != NULL;
}

static int usage(const char *name)
{
    fprintf(stderr,
            "usage: mesh-llm %s [--model NAME] [--api URL|--port PORT] [--console PORT] [--] "
            "[%s's own "
            "arguments...]\n",
            name, name);
    return 2;
}

/* http://HOST:PORT[/...] with HOST an IPv4 address or localhost: its address and port. */
static int parse_api(const char *url, uint32_t *addr, int *port)
{
    const char *p = strncmp(url, "http://", 7) == 0 ? url + 7 : NULL;
    const char *colon = p ? strchr(p, ':') : NULL;
    if (!colon || colon == p || (size_t)(colon - p) >= 64) return -EINVAL;
    char host[64];
    memcpy(host, p, (size_t)(colon - p));
    host[colon - p] = '\0';
    char digits[8];
    size_t n = strcspn(colon + 1, "/");
    if (n == 0 || n >= sizeof digits) return -EINVAL;
    memcpy(digits, colon + 1, n);
    digits[n] = '\0';
    uint64_t v;
    if (parse_u64(digits, 1, 65535, &v) != 0) return -EINVAL;
    struct in_addr a;
    if (strcmp(host, "localhost") == 0)
        a.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &a) != 1)
        return -EINVAL;
    *addr = a.s_addr;
    *port = (int)v;
    return 0;
}

/* Whether a local llama-server's /props says its chat template takes tools. */
static agent_tools_t probe_tools(int port)
{
    cli_http_t h = {.port = port};
    cli_request(&h, "GET", "/props", NULL);
    agent_tools_t t = AGENT_TOOLS_UNKNOWN;
    json_t *caps = json_object_get(h.body, "chat_template_caps");
    json_t *st = json_object_get(caps, "supports_tools");
    const char *tmpl = json_string_value(json_object_get(h.body, "chat_template"));
    if (h.status == 200 && json_is_boolean(st))
        t = json_is_true(st) ? AGENT_TOOLS_YES : AGENT_TOOLS_NO;
    else if (h.status == 200 && tmpl)
        t = strstr(tmpl, "tools") ? AGENT_TOOLS_YES : AGENT_TOOLS_NO;
    json_decref(h.body);
    return t;
}

static const char *type_of(json_t *m)
{
    const char *t = json_string_value(json_object_get(m, "type"));
    return t ? t : "llm";
}

static int write_file(const char *path, const char *content, bool keep)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (keep ? O_EXCL : O_TRUNC), 0600);
    if (fd < 0 && keep && errno == EEXIST) return 0;
    if (fd < 0) return -errno;
    size_t n = strlen(content), off = 0;
    int rc = fchmod(fd, 0600) != 0 ? -errno : 0;
    while (!rc && off < n) {
        ssize_t w = write(fd, content + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) rc = w < 0 ? -errno : -EIO;
        off += w > 0 ? (size_t)w : 0;
    }
    if (close(fd) != 0 && !rc) rc = -errno;
    return rc;
}

/* whether name is an executable file in a PATH directory (or a path itself) */
static bool on_path(const char *name, const char *path)
{
    if (strchr(name, '/')) return access(name, X_OK) == 0;
    char buf[PATH_MAX];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        if (n && snprintf(buf, sizeof buf, "%.*s/%s", (int)n, path, name) < (int)sizeof buf &&
            access(buf, X_OK) == 0)
            return true;
        path += n + (path[n] == ':');
    }
    return false;
}

typedef struct {
    const char *name;
    agent_kind_t kind;
    const agent_info_t *info;
    const char *want;
    uint32_t api_addr;
    int api_port, console_port;
    bool api_given, console_given;
    char base_url[96];
} launch_t;

static void no_node(const launch_t *l)
{
    fprintf(stderr,
            "mesh-llm %s: no mesh-llm node answers at %s%s. Start one first, in another "
            "terminal or as a service, with a model that can call tools, e.g.\n"
            "  mesh-llm --model ~/.models/MODEL.gguf      (a GGUF file; mesh-llm models list "
            "for the catalog)\n"
            "  mesh-llm --join TOKEN                      (join a mesh that serves one)\n"
            "then run mesh-llm %s again (or name a running node with --api URL or --console "
            "PORT).\n",
            l->name, l->base_url,
            l->api_given || l->console_given ? ""
                                             : " (nor a console on 127.0.0.1:3131 that names one)",
            l->name);
}

/* Finds the node: the API port from the console's /api/status (and there the local
 * llama-servers, for probe), else the default API port. 0, or 1 with the reason printed. */
static int find_node(launch_t *l, cli_http_t *status)
{
    if (!l->api_given) {
        status->port = l->console_port;
        cli_request(status, "GET", "/api/status", NULL);
        json_t *node = json_object_get(status->body, "node");
        json_int_t api = json_integer_value(json_object_get(node, "api_port"));
        if (status->status == 200 && api > 0 && api <= 65535) {
            l->api_port = (int)api;
        } else if (status->status != 0) {
            fprintf(stderr, "mesh-llm %s: the console on 127.0.0.1:%d answered %d: %s\n", l->name,
                    l->console_port, status->status,
                    json_string_value(
                        json_object_get(json_object_get(status->body, "error"), "message"))
                        ?: "no API port in /api/status");
            return 1;
        } else if (l->console_given) {
            if (status->refused) {
                snprintf(l->base_url, sizeof l->base_url, "127.0.0.1:%d", l->console_port);
                no_node(l);
            } else {
                fprintf(stderr, "mesh-llm %s: %s\n", l->name, status->err);
            }
            return 1;
        } else {
            l->api_port = DEFAULT_API; /* a --headless node has no console */
        }
    }
    char host[INET_ADDRSTRLEN] = "127.0.0.1";
    struct in_addr a = {.s_addr = l->api_addr};
    if (l->api_addr) inet_ntop(AF_INET, &a, host, sizeof host);
    snprintf(l->base_url, sizeof l->base_url, "http://%s:%d", host, l->api_port);
    return 0;
}

/* The node's models, the pick, and the exec. */
static int launch(launch_t *l, cli_http_t *status, int uargc, char **uargv,
                  const struct tunables *tun)
{
    cli_http_t h = {.port = l->api_port, .addr = l->api_addr};
    cli_request(&h, "GET", "/v1/models", NULL);
    if (h.status == 0) {
        no_node(l);
        json_decref(h.body);
        return 1;
    }
    json_t *data = json_object_get(h.body, "data");
    if (h.status != 200 || !json_is_array(data)) {
        fprintf(stderr, "mesh-llm %s: %s/v1/models answered %d: %s\n", l->name, l->base_url,
                h.status,
                json_string_value(json_object_get(json_object_get(h.body, "error"), "message"))
                    ?: "not a model list");
        json_decref(h.body);
        return 1;
    }
    agent_model_t ms[MAX_MODELS];
    size_t n = 0, i;
    json_t *m;
    json_array_foreach(data, i, m)
    {
        const char *id = json_string_value(json_object_get(m, "id"));
        if (!id || n == MAX_MODELS) continue;
        agent_model_t *r = &ms[n++];
        *r = (agent_model_t){.id = id, .llm = strcmp(type_of(m), "llm") == 0};
        const char *st = json_string_value(json_object_get(m, "status"));
        r->ready = st && strcmp(st, "ready") == 0;
        json_int_t sz = json_integer_value(json_object_get(m, "size"));
        r->size = sz > 0 ? (uint64_t)sz : 0;
        /* a model this node runs: ask its llama-server what its chat template takes */
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(status->body, "processes"), k, p)
        {
            const char *pm = json_string_value(json_object_get(p, "model"));
            const char *kind = json_string_value(json_object_get(p, "kind"));
            json_int_t port = json_integer_value(json_object_get(p, "port"));
            if (pm && kind && strcmp(pm, id) == 0 && strcmp(kind, "llama-server") == 0 &&
                port > 0 && port <= 65535) {
                r->tools = probe_tools((int)port);
                break;
            }
        }
    }
    int pick = agent_pick_model(ms, n, l->want);
    if (pick < 0) {
        if (l->want)
            fprintf(stderr, "mesh-llm %s: the mesh at %s serves no model '%s'; it lists:", l->name,
                    l->base_url, l->want);
        else
            fprintf(stderr,
                    "mesh-llm %s: the mesh at %s serves no LLM yet (start a node with --model "
                    "NAME, or name one with --model); it lists:",
                    l->name, l->base_url);
        for (i = 0; i < n; i++)
            fprintf(stderr, " %s", ms[i].id);
        fprintf(stderr, "%s\n", n ? "" : " nothing");
        json_decref(h.body);
        return 1;
    }
    char model[256];
    snprintf(model, sizeof model, "%s", ms[pick].id);
    agent_tools_t tools = ms[pick].tools;
    json_decref(h.body);

    char home[PATH_MAX], dir[PATH_MAX + 64];
    int rc = identity_home(tun->home, home, sizeof home);
    if (rc == 0 && snprintf(dir, sizeof dir, "%s/agents/%s", home, l->name) >= (int)sizeof dir)
        rc = -ENAMETOOLONG;
    if (rc == 0) rc = mkdir_p(dir, 0700);
    if (rc) {
        fprintf(stderr, "mesh-llm %s: cannot make the agent's directory under %s: %s\n", l->name,
                home, strerror(-rc));
        return 1;
    }
    const char *path = getenv("PATH");
    if (!on_path(l->info->binary, path ? path : "/usr/local/bin:/usr/bin:/bin")) {
        fprintf(stderr,
                "mesh-llm %s: %s is not installed (no '%s' on PATH). Install it with\n"
                "  npm i -g %s\n",
                l->name, l->info->title, l->info->binary, l->info->package);
        return 127;
    }
    agent_ctx_t ctx = {
        .base_url = l->base_url, .model = model, .key = config_env_api_key(), .dir = dir};
    agent_plan_t plan;
    rc = agent_plan(l->kind, &ctx, uargc, uargv, &plan);
    for (size_t f = 0; !rc && f < plan.n_files; f++)
        rc = write_file(plan.files[f].path, plan.files[f].content, plan.files[f].keep);
    for (size_t e = 0; !rc && e < plan.n_env; e++)
        rc = plan.env[e].value ? (setenv(plan.env[e].name, plan.env[e].value, 1) ? -errno : 0)
                               : (unsetenv(plan.env[e].name) ? -errno : 0);
    if (rc) {
        fprintf(stderr, "mesh-llm %s: cannot prepare %s: %s\n", l->name, l->info->title,
                strerror(-rc));
        agent_plan_free(&plan);
        return 1;
    }
    fprintf(stderr, "mesh-llm %s: %s with model %s%s on %s (its settings: %s)\n", l->name,
            l->info->title, model,
            tools == AGENT_TOOLS_YES  ? " (takes tools)"
            : tools == AGENT_TOOLS_NO ? " (its chat template takes no tools)"
                                      : "",
            l->base_url, dir);
    fflush(stderr);
    execvp(plan.argv[0], plan.argv);
    rc = errno;
    fprintf(stderr, "mesh-llm %s: cannot run %s: %s\n", l->name, plan.argv[0], strerror(rc));
    agent_plan_free(&plan);
    return rc == ENOENT ? 127 : 126;
}

int cli_agents_main(int argc, char **argv, const struct tunables *tun)
{
    launch_t l = {.name = argv[1], .console_port = DEFAULT_CONSOLE, .api_port = DEFAULT_API};
    l.info = agent_by_name(argv[1], &l.kind);
    if (!l.info) return 2;
    int i = 2;
    uint64_t v;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        bool has = i + 1 < argc;
        if (strcmp(a, "--model") == 0 && has) {
            l.want = argv[++i];
        } else if (strcmp(a, "--api") == 0 && has) {
            if (parse_api(argv[++i], &l.api_addr, &l.api_port) != 0) {
                fprintf(stderr,
                        "mesh-llm %s: --api wants http://HOST:PORT (an IPv4 address or "
                        "localhost), not '%s'\n",
                        l.name, argv[i]);
                return usage(l.name);
            }
            l.api_given = true;
        } else if (strcmp(a, "--port") == 0 && has) {
            if (parse_u64(argv[++i], 1, 65535, &v) != 0) return usage(l.name);
            l.api_port = (int)v;
            l.api_addr = 0;
            l.api_given = true;
        } else if (strcmp(a, "--console") == 0 && has) {
            if (parse_u64(argv[++i], 1, 65535, &v) != 0) return usage(l.name);
            l.console_port = (int)v;
            l.console_given = true;
        } else {
            break; /* the agent's own arguments */
        }
    }
    cli_http_t status = {0};
    int rc = find_node(&l, &status);
    if (rc == 0) rc = launch(&l, &status, argc - i, argv + i, tun);
    json_decref(status.body);
    return rc;
}

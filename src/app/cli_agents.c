/* cli_agents — see cli_agents.h. */
#include "cli_agents.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agents.h"
#include "cli_agents_node.h"
#include "cli_status.h"
#include "config.h"
#include "identity.h"
#include "platform.h"
#include "tunables.h"
#include "util.h"

#define DEFAULT_CONSOLE 3131
#define DEFAULT_API 9337
#define MAX_MODELS 256
#define DEFAULT_WAIT_S 1800 /* a first download of a large model takes a while */
#define STOP_GRACE_MS 30000

bool cli_agents_is_command(const char *arg)
{
    return agent_by_name(arg, NULL) != NULL;
}

static int usage(const char *name)
{
    fprintf(stderr,
            "usage: mesh-llm %s [--model NAME] [--join TOKEN|@FILE] [--api URL|--port PORT] "
            "[--console PORT] [--keep-node] [--wait SECONDS] [--] [%s's own arguments...]\n",
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
    const char *join; /* --join: the node started here joins that mesh */
    bool keep_node;   /* the node started here keeps running after the agent */
    unsigned wait_s;  /* how long a started node may take to serve a model */
    uint32_t api_addr;
    int api_port, console_port;
    bool api_given, console_given, port_given;
    bool console_seen; /* a console answered: a node runs here */
    bool quiet;        /* find_node prints nothing (a started node coming up) */
    char base_url[96];
    char picked[256]; /* the started node's own model (what its --model NAME became) */
    json_t *models;   /* GET /v1/models of the node found */
} launch_t;

enum { NODE_UP = 0, NODE_ERR = 1, NODE_NONE = 2 };

static void no_node(const launch_t *l)
{
    fprintf(stderr,
            "mesh-llm %s: no mesh-llm node answers at %s%s. Name a model that can call tools "
            "or a mesh, and the launcher starts a node for the session:\n"
            "  mesh-llm %s --model ~/.models/MODEL.gguf   (a GGUF file; mesh-llm models list "
            "for the catalog)\n"
            "  mesh-llm %s --join TOKEN                   (a mesh that serves one)\n"
            "or start one yourself (mesh-llm --model …, or as a service) and name it with --api "
            "URL or --console PORT when it is not on the default ports.\n",
            l->name, l->base_url,
            l->api_given || l->console_given ? ""
                                             : " (nor a console on 127.0.0.1:3131 that names one)",
            l->name, l->name);
}

static void say(const launch_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const launch_t *l, const char *fmt, ...)
{
    if (l->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* Finds the node: the API port from the console's /api/status (and there the local
 * llama-servers, for probe), else the default API port; then its models (l->models). NODE_UP,
 * NODE_NONE (nothing answers), or NODE_ERR with the reason printed. */
static int find_node(launch_t *l, cli_http_t *status)
{
    json_decref(status->body);
    *status = (cli_http_t){0};
    json_decref(l->models);
    l->models = NULL;
    if (!l->api_given) {
        status->port = l->console_port;
        cli_request(status, "GET", "/api/status", NULL);
        json_t *node = json_object_get(status->body, "node");
        json_int_t api = json_integer_value(json_object_get(node, "api_port"));
        if (status->status == 200 && api > 0 && api <= 65535) {
            l->api_port = (int)api;
            l->console_seen = true;
        } else if (status->status != 0) {
            say(l, "mesh-llm %s: the console on 127.0.0.1:%d answered %d: %s\n", l->name,
                l->console_port, status->status,
                json_string_value(
                    json_object_get(json_object_get(status->body, "error"), "message"))
                    ?: "no API port in /api/status");
            return NODE_ERR;
        } else if (l->console_given && !status->refused) {
            say(l, "mesh-llm %s: %s\n", l->name, status->err);
            return NODE_ERR;
        } else if (l->console_given) {
            snprintf(l->base_url, sizeof l->base_url, "127.0.0.1:%d", l->console_port);
            return NODE_NONE;
        }
        /* else a --headless node has no console: its API on the default (or --port) port */
    }
    char host[INET_ADDRSTRLEN] = "127.0.0.1";
    struct in_addr a = {.s_addr = l->api_addr};
    if (l->api_addr) inet_ntop(AF_INET, &a, host, sizeof host);
    snprintf(l->base_url, sizeof l->base_url, "http://%s:%d", host, l->api_port);

    cli_http_t h = {.port = l->api_port, .addr = l->api_addr};
    cli_request(&h, "GET", "/v1/models", NULL);
    json_t *data = json_object_get(h.body, "data");
    if (h.status == 0 && !l->console_seen) {
        json_decref(h.body);
        return NODE_NONE;
    }
    if (h.status != 200 || !json_is_array(data)) {
        if (h.status == 0)
            say(l, "mesh-llm %s: the node's console answers but its API at %s does not: %s\n",
                l->name, l->base_url, h.err);
        else
            say(l, "mesh-llm %s: %s/v1/models answered %d: %s\n", l->name, l->base_url, h.status,
                json_string_value(json_object_get(json_object_get(h.body, "error"), "message"))
                    ?: "not a model list");
        json_decref(h.body);
        return NODE_ERR;
    }
    l->models = h.body;
    return NODE_UP;
}

/* The rows of l->models (ids borrowed from it), with what each local llama-server's /props says
 * of its chat template; the number of rows. */
static size_t model_rows(const launch_t *l, const cli_http_t *status, agent_model_t *ms)
{
    size_t n = 0, i;
    json_t *m;
    json_array_foreach(json_object_get(l->models, "data"), i, m)
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
    return n;
}

/* The model a started node serves for the agent, once it is ready: its own model (what its
 * --model NAME became: the console's local row) or, for a client, the mesh's best. */
static bool started_ready(launch_t *l, const cli_http_t *status)
{
    const char *want = NULL;
    if (l->want) {
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(status->body, "models"), i, m)
        {
            const char *name = json_string_value(json_object_get(m, "name"));
            if (name && strcmp(json_string_value(json_object_get(m, "node")) ?: "", "local") == 0) {
                want = name;
                break;
            }
        }
        if (!want) return false;
    }
    size_t n = 0, i;
    json_t *m;
    json_array_foreach(json_object_get(l->models, "data"), i, m)
    {
        const char *id = json_string_value(json_object_get(m, "id"));
        const char *st = json_string_value(json_object_get(m, "status"));
        if (!id || !st || strcmp(st, "ready") != 0 || strcmp(type_of(m), "llm") != 0) continue;
        if (want && strcmp(id, want) != 0) continue;
        snprintf(l->picked, sizeof l->picked, "%s", id);
        n++;
        break;
    }
    return n > 0;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int agent_home(const launch_t *l, const struct tunables *tun, char *dir, size_t len,
                      const char *sub)
{
    char home[PATH_MAX];
    int rc = identity_home(tun->home, home, sizeof home);
    if (rc == 0 &&
        (size_t)snprintf(dir, len, "%s%s%s", home, sub ? "/" : "", sub ? sub : "") >= len)
        rc = -ENAMETOOLONG;
    if (rc)
        fprintf(stderr, "mesh-llm %s: no home directory for its files: %s\n", l->name,
                strerror(-rc));
    return rc;
}

/* No node answers here: start one from what the launcher was given (agent_node_args), follow
 * its log until it serves a model, and find it. NODE_UP, or NODE_ERR with the reason printed
 * (the node stopped again). */
static int start_node(launch_t *l, cli_http_t *status, const struct tunables *tun,
                      agent_node_t *node)
{
    char self[PATH_MAX], home[PATH_MAX], conf[PATH_MAX + 16], dir[PATH_MAX + 16],
        log[PATH_MAX + 32];
    int erc = plat_self_exe(self, sizeof self);
    if (erc) {
        fprintf(stderr, "mesh-llm %s: cannot find its own binary: %s\n", l->name, strerror(-erc));
        return NODE_ERR;
    }
    if (agent_home(l, tun, home, sizeof home, NULL)) return NODE_ERR;
    snprintf(conf, sizeof conf, "%s/config", home);
    snprintf(dir, sizeof dir, "%s/agents", home);
    snprintf(log, sizeof log, "%s/node.log", dir);
    agent_start_t s = {.self = self,
                       .model = l->want,
                       .join = l->join,
                       .have_config = file_exists(conf),
                       .api_port = l->port_given ? l->api_port : 0,
                       .console_port = l->console_given ? l->console_port : 0};
    agent_node_cmd_t cmd;
    struct in_addr a = {.s_addr = l->api_addr};
    if ((l->api_addr && a.s_addr != htonl(INADDR_LOOPBACK)) || agent_node_args(&s, &cmd) != 0) {
        no_node(l);
        return NODE_ERR;
    }
    int rc = mkdir_p(dir, 0700);
    if (rc == 0) rc = agent_node_start(node, cmd.argv, cmd.join_env, log, !l->keep_node);
    if (rc) {
        fprintf(stderr, "mesh-llm %s: cannot start a node: %s\n", l->name, strerror(-rc));
        return NODE_ERR;
    }
    fprintf(stderr, "mesh-llm %s: no node runs here: started one (pid %d):", l->name,
            (int)node->pid);
    for (int i = 0; i < cmd.argc; i++)
        fprintf(stderr, " %s", i ? cmd.argv[i] : "mesh-llm");
    fprintf(stderr, "%s; its log: %s\n", l->join ? " (joining the mesh of --join)" : "", log);
    /* the node finds its ports from the launcher's: they are its own defaults otherwise */
    l->api_given = false;
    l->api_addr = 0;
    if (!l->port_given) l->api_port = DEFAULT_API;
    uint64_t waited = 0, said = 0;
    const unsigned step_ms = 250;
    for (;;) {
        agent_node_echo(node, stderr, "  node | ");
        if (!agent_node_alive(node)) {
            agent_node_echo(node, stderr, "  node | ");
            int st = node->status;
            fprintf(stderr,
                    "mesh-llm %s: the node exited (%s %d) before it served a model; its "
                    "log: %s\n",
                    l->name, WIFSIGNALED(st) ? "signal" : "status",
                    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), log);
            return NODE_ERR;
        }
        l->quiet = true;
        int f = find_node(l, status);
        l->quiet = false;
        if (f == NODE_UP && started_ready(l, status)) return NODE_UP;
        if (waited >= (uint64_t)l->wait_s * 1000) {
            fprintf(stderr,
                    "mesh-llm %s: the node serves no model after %u s (--wait SECONDS waits "
                    "longer); stopping it. Its log: %s\n",
                    l->name, l->wait_s, log);
            agent_node_stop(node, STOP_GRACE_MS);
            return NODE_ERR;
        }
        if (waited - said >= 15000) {
            fprintf(stderr, "mesh-llm %s: waiting for the node to serve a model (%llu s)\n",
                    l->name, (unsigned long long)(waited / 1000));
            said = waited;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = step_ms * 1000000L};
        nanosleep(&ts, NULL);
        waited += step_ms;
    }
}

/* The pick, the plan, and the agent: executed in place of this process, or (a node started
 * for the session) run beside the node, which stops after it. */
static int launch(launch_t *l, cli_http_t *status, int uargc, char **uargv,
                  const struct tunables *tun, agent_node_t *node)
{
    agent_model_t ms[MAX_MODELS];
    size_t n = model_rows(l, status, ms), i;
    const char *want = l->picked[0] ? l->picked : l->want;
    int pick = agent_pick_model(ms, n, want);
    if (pick < 0) {
        if (want)
            fprintf(stderr, "mesh-llm %s: the mesh at %s serves no model '%s'; it lists:", l->name,
                    l->base_url, want);
        else
            fprintf(stderr,
                    "mesh-llm %s: the mesh at %s serves no LLM yet (start a node with --model "
                    "NAME, or name one with --model); it lists:",
                    l->name, l->base_url);
        for (i = 0; i < n; i++)
            fprintf(stderr, " %s", ms[i].id);
        fprintf(stderr, "%s\n", n ? "" : " nothing");
        return 1;
    }
    char model[256];
    snprintf(model, sizeof model, "%s", ms[pick].id);
    agent_tools_t tools = ms[pick].tools;

    char dir[PATH_MAX + 64], sub[64];
    snprintf(sub, sizeof sub, "agents/%s", l->name);
    int rc = agent_home(l, tun, dir, sizeof dir, sub);
    if (rc) return 1;
    rc = mkdir_p(dir, 0700);
    if (rc) {
        fprintf(stderr, "mesh-llm %s: cannot make the agent's directory %s: %s\n", l->name, dir,
                strerror(-rc));
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
    if (node->pid > 0 && l->keep_node)
        fprintf(stderr,
                "mesh-llm %s: the node keeps running after %s exits (pid %d; stop it with "
                "kill %d)\n",
                l->name, l->info->title, (int)node->pid, (int)node->pid);
    fflush(stderr);
    if (node->pid > 0 && !l->keep_node) {
        rc = agent_run_child(plan.argv);
        agent_plan_free(&plan);
        fprintf(stderr, "mesh-llm %s: %s exited (%d); stopping the node it ran on (pid %d)\n",
                l->name, l->info->title, rc, (int)node->pid);
        agent_node_stop(node, STOP_GRACE_MS);
        return rc;
    }
    agent_node_close(node);
    execvp(plan.argv[0], plan.argv);
    rc = errno;
    fprintf(stderr, "mesh-llm %s: cannot run %s: %s\n", l->name, plan.argv[0], strerror(rc));
    agent_plan_free(&plan);
    return rc == ENOENT ? 127 : 126;
}

int cli_agents_main(int argc, char **argv, const struct tunables *tun)
{
    launch_t l = {.name = argv[1],
                  .console_port = DEFAULT_CONSOLE,
                  .api_port = DEFAULT_API,
                  .wait_s = DEFAULT_WAIT_S};
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
            l.api_given = l.port_given = true;
        } else if (strcmp(a, "--join") == 0 && has) {
            l.join = argv[++i];
        } else if (strcmp(a, "--keep-node") == 0) {
            l.keep_node = true;
        } else if (strcmp(a, "--wait") == 0 && has) {
            if (parse_u64(argv[++i], 1, 86400, &v) != 0) return usage(l.name);
            l.wait_s = (unsigned)v;
        } else if (strcmp(a, "--console") == 0 && has) {
            if (parse_u64(argv[++i], 1, 65535, &v) != 0) return usage(l.name);
            l.console_port = (int)v;
            l.console_given = true;
        } else {
            break; /* the agent's own arguments */
        }
    }
    cli_http_t status = {0};
    agent_node_t node = {.log_fd = -1};
    int rc = find_node(&l, &status);
    if (rc == NODE_NONE) rc = start_node(&l, &status, tun, &node);
    if (rc == NODE_UP) rc = launch(&l, &status, argc - i, argv + i, tun, &node);
    if (!l.keep_node) agent_node_stop(&node, STOP_GRACE_MS); /* it came up, ran no agent */
    agent_node_close(&node);
    json_decref(status.body);
    json_decref(l.models);
    return rc;
}

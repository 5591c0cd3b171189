/* mesh-llm entry point: configuration, the event loop, startup and shutdown. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <uv.h>

#include "api_mgmt.h"
#include "api_openai.h"
#include "identity.h"
#include "mesh.h"
#include "meshstat.h"
#include "planner.h"
#include "routing.h"
#include "statgen.h"
#include "config.h"
#include "log.h"
#include "offer.h"
#include "passive.h"
#include "route_serve.h"
#include "supervisor.h"
#include "util.h"

#define STOP_GRACE_MS 5000

typedef struct {
    uv_loop_t *loop;
    config_t cfg;
    supervisor_t sv;
    models_t ms;
    api_t api;
    mgmt_t mgmt;
    planner_t plan;
    mesh_t *mesh;
    routing_t route;    /* requests to the mesh, the planner's gate, the rpc-server's guard */
    route_serve_t rs;   /* answers passive nodes' ROUTE_REQUESTs (active nodes) */
    passive_t *passive; /* a passive node's check-ins and routing (--client) */
    bool mesh_stopped, children_stopped;
    uv_signal_t sigint, sigterm;
    bool announced;
    bool shutting_down;
    int exit_code;
} node_t;

static node_t *g_node;

static void announce(void *data)
{
    node_t *n = data;
    if (n->announced || n->shutting_down) return;
    n->announced = true;
    char names[1024] = "";
    size_t off = 0, ready = 0;
    for (size_t i = 0; i < n->ms.n && off < sizeof names - 1; i++) {
        model_entry_t *e = &n->ms.entries[i];
        const char *st = models_status(e);
        if (strcmp(st, "ready") == 0) ready++;
        off += (size_t)snprintf(names + off, sizeof names - off, "%s%s (%s, %s)", off ? ", " : "",
                                e->mm->name, mm_type_name(e->mm->type), st);
    }
    LOGI("node", "ready: OpenAI API at http://%s:%d/v1 — %zu of %zu known model(s) loaded%s%s",
         n->cfg.listen_all ? "0.0.0.0" : "127.0.0.1", n->api.httpd.port, ready, n->ms.n,
         n->ms.n ? ": " : "", names);
    for (size_t i = 0; i < n->cfg.n_requested; i++)
        LOGI("node", "model %s: no file here; asking the mesh for it (listed as requested)",
             n->cfg.requested[i]);
    if (n->cfg.client)
        LOGI("node", "client node: requests are routed to the mesh; this node serves no model");
    else if (n->ms.n == 0 && n->cfg.n_requested == 0 && n->cfg.n_joins > 0)
        LOGI("node", "no models given: the mesh may give this node one of its models, or it "
                     "lends its memory to split models");
    else if (n->ms.n == 0 && n->cfg.n_requested == 0)
        LOGI("node", "no models given: add --model PATH.gguf (or --models-dir DIR) to serve one");
    LOGI("node", "invite token (share it: mesh-llm --join TOKEN): %s", mesh_token(n->mesh));
    if (n->mgmt.started)
        LOGI("node", "management API at http://%s:%d/api/status",
             n->cfg.listen_all ? "0.0.0.0" : "127.0.0.1", n->mgmt.httpd.port);
    printf("mesh-llm ready api=%d console=%d quic=%d id=%s token=%s\n", n->api.httpd.port,
           n->mgmt.started ? n->mgmt.httpd.port : 0, mesh_quic_port(n->mesh), mesh_node_id(n->mesh),
           mesh_token(n->mesh));
    fflush(stdout);
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void maybe_exit(node_t *n)
{
    if (!n->children_stopped || !n->mesh_stopped) return;
    LOGI("node", "all children stopped, mesh left; bye");
    uv_walk(n->loop, close_walk_cb, NULL);
}

static void on_all_stopped(supervisor_t *sv, sv_child_t *unused)
{
    node_t *n = g_node;
    (void)sv;
    (void)unused;
    n->children_stopped = true;
    maybe_exit(n);
}

static void on_mesh_stopped(void *data)
{
    node_t *n = data;
    n->mesh = NULL;
    n->route.mesh = NULL;
    n->rs.mesh = NULL;
    n->mesh_stopped = true;
    maybe_exit(n);
}

static bool route_remote(void *data, const char *model, int needs, httpd_req_t *req)
{
    node_t *n = data;
    if (n->passive) return passive_route(n->passive, model, needs, req);
    return routing_remote(&n->route, model, needs, req);
}

static bool local_gate(void *data, const char *model, int needs, httpd_req_t *req, bool hop)
{
    node_t *n = data;
    return routing_local_gate(&n->route, model, needs, req, hop);
}

static int rpc_port(void *data, const char *peer_id, const char *model)
{
    node_t *n = data;
    return routing_rpc_port(&n->route, peer_id, model);
}

static void list_remote(void *data, json_t *list)
{
    node_t *n = data;
    if (n->passive)
        passive_list_models(n->passive, list);
    else
        planner_list_models(&n->plan, list);
}

static void mgmt_extra(void *data, json_t *st)
{
    node_t *n = data;
    planner_status(&n->plan, st);
    if (n->passive)
        passive_status(n->passive, st);
    else
        route_serve_status(&n->rs, st);
}

static void sv_changed(supervisor_t *sv, sv_child_t *c)
{
    status_changed(); /* the events stream (api_events.h) */
    (void)sv;
    (void)c;
    if (!g_node->shutting_down) planner_kick(&g_node->plan);
}

static void peers_changed(void *data)
{
    status_changed(); /* the events stream (api_events.h) */
    node_t *n = data;
    route_serve_invalidate(&n->rs);
    if (!n->shutting_down) planner_kick(&n->plan);
}

static json_t *route_request(void *data, const char *peer_id, json_t *req)
{
    node_t *n = data;
    return route_serve_answer(&n->rs, peer_id, req);
}

static void models_changed(void *data)
{
    status_changed(); /* the events stream (api_events.h) */
    node_t *n = data;
    if (n->mesh && !n->shutting_down) mesh_announce_changed(n->mesh);
    if (!n->shutting_down) planner_kick(&n->plan);
}

static void fill_announcement(void *data, json_t *ann)
{
    node_t *n = data;
    planner_fill_announcement(&n->plan, ann);
}

static void on_signal(uv_signal_t *s, int signum)
{
    node_t *n = s->data;
    if (n->shutting_down) {
        LOGW("node", "second %s: killing children now", strsignal(signum));
        for (sv_child_t *c = n->sv.children; c; c = c->next)
            if (c->proc_open) uv_process_kill(&c->proc, SIGKILL);
        return;
    }
    n->shutting_down = true;
    LOGI("node", "%s received: shutting down", strsignal(signum));
    planner_stop(&n->plan);
    passive_stop(n->passive);
    api_stop(&n->api);
    mgmt_stop(&n->mgmt);
    if (n->mesh)
        mesh_stop(n->mesh, on_mesh_stopped, n);
    else
        n->mesh_stopped = true;
    sv_stop_all(&n->sv, STOP_GRACE_MS);
}

/* A startup step failed after the servers were up: close everything, exit 1. */
static int abort_startup(node_t *n)
{
    api_stop(&n->api);
    mgmt_stop(&n->mgmt);
    uv_walk(n->loop, close_walk_cb, NULL);
    uv_run(n->loop, UV_RUN_DEFAULT);
    sv_close(&n->sv);
    config_free(&n->cfg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--exec-child") == 0) return sv_exec_child_main(argc, argv);

    static node_t node;
    node_t *n = &node;
    g_node = n;
    char err[1024];
    int rc = config_parse(&n->cfg, argc, argv, err, sizeof err);
    if (rc == CONFIG_EXIT) return 0;
    if (rc < 0) {
        fprintf(stderr, "mesh-llm: error: %s\nRun 'mesh-llm --help' for usage.\n", err);
        return 2;
    }
    log_init(n->cfg.log_format, n->cfg.verbose ? LOG_DEBUG : LOG_INFO);
    config_log_warnings(&n->cfg);
    if (sodium_init() < 0) {
        LOGE("node", "libsodium failed to initialise");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);

    LOGI("node", "mesh-llm %s starting", MESH_VERSION);
    char *llama_server = NULL;
    if (!n->cfg.client) {
        llama_server = sv_find_binary(n->cfg.bin_dir, "llama-server");
        if (!llama_server) {
            if (n->cfg.bin_dir)
                LOGE("node", "no executable llama-server in --bin-dir %s", n->cfg.bin_dir);
            else
                LOGE("node", "llama-server not found. Run 'make' in the mesh-llm source tree "
                             "(it builds the pinned llama.cpp into ~/.cache/mesh-llm), or point "
                             "--bin-dir or MESH_LLM_BIN_DIR at a directory holding llama-server");
            config_free(&n->cfg);
            return 1;
        }
        LOGI("node", "using %s", llama_server);
    }
    char *rpc_server = NULL;
    if (!n->cfg.client) {
        rpc_server = sv_find_binary(n->cfg.bin_dir, "ggml-rpc-server");
        if (!rpc_server) rpc_server = sv_find_binary(n->cfg.bin_dir, "rpc-server");
        if (!rpc_server)
            LOGW("node", "ggml-rpc-server not found next to llama-server: this node cannot lend "
                         "its memory to models split over several nodes");
    }

    n->loop = uv_default_loop();
    rc = sv_init(&n->sv, n->loop, llama_server ? llama_server : "llama-server", n->cfg.verbose);
    free(llama_server);
    if (rc) {
        LOGE("node", "supervisor: %s", strerror(-rc));
        return 1;
    }
    n->sv.rpc_server = rpc_server;
    n->sv.on_all_stopped = on_all_stopped;
    rc = models_init(&n->ms, n->loop, &n->cfg, &n->sv, err, sizeof err);
    if (rc) {
        LOGE("node", "%s", err);
        return 1;
    }
    n->ms.on_preload_done = announce;
    n->ms.data = n;
    LOGI("node", "%zu known model(s); slots: %u llm, %u embedding, %u reranking", n->ms.n,
         n->cfg.max_loaded[0], n->cfg.max_loaded[1], n->cfg.max_loaded[2]);
    uint64_t vram = n->cfg.client ? 0 : offer_detect(&n->cfg, n->sv.llama_server);
    models_set_offer(&n->ms, vram);
    planner_init(&n->plan, n->loop, &n->cfg, &n->ms, &n->sv, vram);
    n->route.plan = &n->plan;

    rc = api_start(&n->api, n->loop, &n->cfg, &n->ms);
    if (rc) {
        if (rc == UV_EADDRINUSE)
            LOGE("node", "port %d is already in use; choose another with --port N (0 = any free)",
                 n->cfg.port);
        else
            LOGE("node", "cannot listen on port %d: %s", n->cfg.port, uv_strerror(rc));
        uv_walk(n->loop, close_walk_cb, NULL);
        uv_run(n->loop, UV_RUN_DEFAULT);
        sv_close(&n->sv);
        config_free(&n->cfg);
        return 1;
    }
    LOGI("node", "API listening on %s:%d", n->cfg.listen_all ? "0.0.0.0" : "127.0.0.1",
         n->api.httpd.port);

    char home[4096];
    if (identity_home(home, sizeof home) != 0) {
        LOGE("node", "cannot find a state directory: set MESH_LLM_HOME or HOME");
        return 1;
    }
    mesh_opts_t mo = {
        .home = home,
        .bind_port = n->cfg.bind_port,
        .joins = n->cfg.joins,
        .n_joins = n->cfg.n_joins,
        .mesh_name = n->cfg.mesh_name,
        .vram_bytes = vram,
        .role = n->cfg.client ? "client"
                : n->ms.n > 0 ? "host"
                              : "worker",
        .api_port = n->api.httpd.port,
        .api = &n->api.httpd,
        .api_key = n->cfg.api_key,
        .console_port = 0,
        .heartbeat_ms = env_ms("MESH_LLM_HEARTBEAT_MS", 60000),
        .fill_announcement = fill_announcement,
        .on_peers_changed = peers_changed,
        .rpc_port = rpc_port,
        .passive = n->cfg.client,   /* seed 002: a client does not gossip */
        .ephemeral = n->cfg.client, /* and writes nothing to $MESH_LLM_HOME */
        .route_request = n->cfg.client ? NULL : route_request,
        .data = n,
    };
    uint64_t refresh_ms = env_ms("MESH_LLM_ROUTE_REFRESH_MS", RT_REFRESH_MS);
    route_serve_init(&n->rs, n->loop, &n->plan, refresh_ms);
    if (!n->cfg.headless) {
        rc = mgmt_start(&n->mgmt, n->loop, &n->cfg, NULL, &n->ms, &n->sv);
        if (rc) {
            if (rc == UV_EADDRINUSE)
                LOGE("node",
                     "console port %d is already in use; choose another with --console N (0 = "
                     "any free) or --headless",
                     n->cfg.console_port);
            else
                LOGE("node", "cannot listen on console port %d: %s", n->cfg.console_port,
                     uv_strerror(rc));
            return abort_startup(n);
        }
        n->mgmt.api_port = n->api.httpd.port;
        mo.console_port = n->mgmt.httpd.port;
    }
    rc = mesh_start(&n->mesh, n->loop, &mo, err, sizeof err);
    if (rc) {
        LOGE("node", "%s", err);
        return abort_startup(n);
    }
    n->mgmt.mesh = n->mesh;
    meshstat_set_node(mesh_node_id(n->mesh));
    n->rs.mesh = n->mesh;
    if (n->cfg.client) {
        passive_opts_t po = {.role = RT_ROLE_CLIENT,
                             .refresh_ms = refresh_ms,
                             .joins = n->cfg.joins,
                             .n_joins = n->cfg.n_joins};
        if (passive_start(&n->passive, n->loop, n->mesh, &po) != 0) {
            LOGE("node", "cannot start the passive driver (out of memory)");
            return abort_startup(n);
        }
    }
    n->route = (routing_t){.plan = &n->plan, .mesh = n->mesh};
    n->api.route_remote = route_remote;
    n->api.list_remote = list_remote;
    n->api.local_gate = local_gate;
    n->api.remote_data = n;
    n->ms.on_change = models_changed;
    n->sv.on_change = sv_changed;
    n->mgmt.extra_status = mgmt_extra;
    n->mgmt.extra_data = n;
    planner_start(&n->plan, n->mesh);

    uv_signal_init(n->loop, &n->sigint);
    uv_signal_init(n->loop, &n->sigterm);
    n->sigint.data = n->sigterm.data = n;
    uv_signal_start(&n->sigint, on_signal, SIGINT);
    uv_signal_start(&n->sigterm, on_signal, SIGTERM);

    models_preload(&n->ms);

    uv_run(n->loop, UV_RUN_DEFAULT);
    uv_walk(n->loop, close_walk_cb, NULL);
    uv_run(n->loop, UV_RUN_DEFAULT);
    uv_loop_close(n->loop);
    models_free(&n->ms);
    route_serve_free(&n->rs);
    sv_close(&n->sv);
    config_free(&n->cfg);
    return n->exit_code;
}

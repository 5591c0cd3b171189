#include "api_mgmt.h"
#include "api_events.h"
#include "api_metrics.h"
#include "console.h"

#include <string.h>

#include "api_openai.h"
#include "httpd_guard.h"
#include "meshstat.h"
#include "options.h"
#include "relay.h"
#include "util.h"

static json_t *models_json(models_t *ms)
{
    json_t *a = json_array();
    for (size_t i = 0; ms && i < ms->n; i++) {
        model_entry_t *e = &ms->entries[i];
        json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:I,s:s}", "name", e->mm->name, "type",
                                           mm_type_name(e->mm->type), "status", models_status(e),
                                           "size_bytes", (json_int_t)e->size, "node", "local"));
    }
    return a;
}

static json_t *processes_json(supervisor_t *sv)
{
    json_t *a = json_array();
    for (sv_child_t *c = sv ? sv->children : NULL; c; c = c->next) {
        if (!c->proc_open) continue;
        json_t *args = json_array();
        char **av = sv_build_argv(c);
        for (size_t i = 1; av && av[i]; i++)
            json_array_append_new(args, json_string(av[i]));
        argv_free(av);
        json_array_append_new(a, json_pack("{s:s,s:s,s:i,s:i,s:I,s:s,s:o}", "kind",
                                           c->kind == SV_KIND_RPC ? "rpc-server" : "llama-server",
                                           "model", c->name, "pid", c->pid, "port", c->port,
                                           "restarts", (json_int_t)c->restarts, "state",
                                           child_state_name(c->state), "args", args));
    }
    return a;
}

json_t *mgmt_status(mgmt_t *g)
{
    json_t *st = g->mesh ? mesh_status(g->mesh) : mgmt_idle_status(g);
    if (!st) return NULL;
    json_t *node = json_object_get(st, "node");
    json_object_set_new(node, "api_port", json_integer(g->api_port));
    json_object_set_new(node, "console_port", json_integer(g->httpd.port));
    if (g->mesh) {
        /* passive: a --client or a standby, in the mesh without gossip (routing tables) */
        json_object_set_new(node, "state",
                            json_string(mesh_is_passive(g->mesh) ? "passive"
                                        : mesh_joined(g->mesh)   ? "member"
                                                                 : "joining"));
        json_object_set_new(node, "join_error", json_string(mesh_join_error(g->mesh)));
    }
    json_object_set_new(st, "models", models_json(g->ms));
    json_object_set_new(st, "processes", processes_json(g->sv));
    /* request bytes every HTTP connection of the node holds (capped by
     * MESH_LLM_HTTP_MAX_BUFFERED) */
    json_object_set_new(st, "http",
                        json_pack("{s:I}", "buffered_bytes", (json_int_t)httpd_buffered_bytes()));
    json_object_set_new(st, "routing", relay_status_json());
    if (g->extra_status && g->mesh) g->extra_status(g->extra_data, st);
    if (!g->mesh) {
        json_object_set_new(st, "catalog", json_array());
        json_object_set_new(st, "plan", json_array());
    }
    json_object_set_new(st, "requests", reqlog_json(meshstat_reqlog())); /* newest first */
    api_events_status(g, st);
    return st;
}

/* The invite token carries the mesh secret: whoever reads it can join the mesh. It is shown to
 * clients on this machine only, and only when they name it by a loopback name (a web page that
 * rebinds its own DNS name to 127.0.0.1 gets no secret either). */
bool mgmt_may_see_secrets(httpd_peer_t peer, const char *host_header)
{
    return peer == HTTPD_PEER_LOOPBACK && guard_loopback_host_header(host_header);
}

static void hide_secrets(json_t *st)
{
    json_object_set_new(json_object_get(st, "node"), "token", json_null());
}

static void handle(httpd_req_t *req)
{
    mgmt_t *g = req->server->data;
    const char *auth = httpd_header(req, "authorization");
    if ((strncmp(req->path, "/api/", 5) == 0 || strcmp(req->path, "/metrics") == 0) &&
        (g->key_known ? !g->key_known(g->key_data, req)
                      : g->cfg->api_key && !api_key_ok(auth, g->cfg->api_key))) {
        httpd_respond_error(req, 401, "invalid_request_error", "invalid_api_key",
                            "missing or wrong API key; send 'Authorization: Bearer <key>'");
        return;
    }
    if (strcmp(req->path, "/api/status") == 0) {
        if (strcmp(req->method_str, "GET") != 0) {
            httpd_respond_405(req, "GET");
            return;
        }
        json_t *st = mgmt_status(g);
        if (!st) {
            httpd_respond_error(req, 500, "server_error", "internal_error", "out of memory");
            return;
        }
        if (!mgmt_may_see_secrets(req->peer, httpd_header(req, "host"))) hide_secrets(st);
        httpd_respond_json(req, 200, st); /* takes the reference */
        return;
    }
    if (mgmt_join_routes(g, req)) return;
    if (api_metrics_handle(g, req)) return;
    if (api_events_handle(g, req)) return;
    if (console_handle(req)) return;
    httpd_respond_error(req, 404, "invalid_request_error", "not_found",
                        "no such endpoint on the management API (try GET /api/status)");
}

int mgmt_start(mgmt_t *g, uv_loop_t *loop, const config_t *cfg, mesh_t *mesh, models_t *ms,
               supervisor_t *sv)
{
    memset(g, 0, sizeof *g);
    g->cfg = cfg;
    g->mesh = mesh;
    g->ms = ms;
    g->sv = sv;
    httpd_opts_t o = {
        .host = cfg->listen_all ? "0.0.0.0" : "127.0.0.1",
        .port = cfg->console_port,
        .max_body_bytes = 1024 * 1024, /* POST /api/chat bodies (conversations) */
        .idle_timeout_ms = options_env_ms("MESH_LLM_HTTP_IDLE_MS"),
        .read_timeout_ms = options_env_ms("MESH_LLM_HTTP_READ_MS"),
        .write_timeout_ms = options_env_ms("MESH_LLM_HTTP_WRITE_MS"),
        .max_conns = 256,
        .web_guard = true,
        .allow_origins = (const char *const *)cfg->allow_origins,
        .n_allow_origins = cfg->n_allow_origins,
        .handler = handle,
        .data = g,
    };
    int rc = httpd_start(&g->httpd, loop, &o);
    if (rc == 0) g->started = true;
    return rc;
}

void mgmt_stop(mgmt_t *g)
{
    api_events_stop(g);
    if (g->started) httpd_stop(&g->httpd);
    g->started = false;
}

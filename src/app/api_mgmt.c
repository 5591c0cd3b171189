#include "api_mgmt.h"
#include "api_events.h"
#include "api_metrics.h"
#include "console.h"

#include <string.h>

#include "api_openai.h"
#include "options.h"
#include "status_doc.h"

/* The whole status document: status_doc's, with the event streams' counters. */
static json_t *full_status(void *data)
{
    mgmt_t *g = data;
    return status_doc(g, api_events_status(g->events));
}

static void handle(httpd_req_t *req)
{
    mgmt_t *g = req->server->data;
    const char *auth = httpd_header(req, "authorization");
    if ((strncmp(req->path, "/api/", 5) == 0 || strcmp(req->path, "/metrics") == 0) &&
        (g->dep.key_known ? !g->dep.key_known(g->dep.key_data, req)
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
        json_t *st = full_status(g);
        if (!st) {
            httpd_respond_error(req, 500, "server_error", "internal_error", "out of memory");
            return;
        }
        if (!mgmt_may_see_secrets(req->peer, httpd_header(req, "host")))
            status_doc_hide_secrets(st);
        httpd_respond_json(req, 200, st); /* takes the reference */
        return;
    }
    if (mgmt_join_routes(g, req)) return;
    if (mgmt_assign_routes(g, req)) return;
    if (api_metrics_handle(g, req)) return;
    if (g->events && api_events_handle(g->events, req)) return;
    if (console_handle(req)) return;
    httpd_respond_error(req, 404, "invalid_request_error", "not_found",
                        "no such endpoint on the management API (try GET /api/status)");
}

int mgmt_start(mgmt_t *g, uv_loop_t *loop, const config_t *cfg, mesh_t *mesh, models_t *ms,
               supervisor_t *sv, changes_t *changes, meshstat_t *stat, httpd_budget_t *budget,
               const mgmt_deps_t *dep)
{
    memset(g, 0, sizeof *g);
    g->dep = *dep;
    g->cfg = cfg;
    g->mesh = mesh;
    g->ms = ms;
    g->sv = sv;
    g->changes = changes;
    g->stat = stat;
    int rc = api_events_init(&g->events, loop, changes, full_status, g, cfg->tun.events_ms,
                             cfg->tun.events_max_queue);
    if (rc) return rc;
    httpd_opts_t o = {
        .host = cfg->listen_all ? "0.0.0.0" : "127.0.0.1",
        .port = cfg->console_port,
        .max_body_bytes = 1024 * 1024, /* POST /api/chat bodies (conversations) */
        .idle_timeout_ms = cfg->tun.http_idle_ms,
        .read_timeout_ms = cfg->tun.http_read_ms,
        .write_timeout_ms = cfg->tun.http_write_ms,
        .max_conns = 256,
        .web_guard = true,
        .allow_origins = (const char *const *)cfg->allow_origins,
        .n_allow_origins = cfg->n_allow_origins,
        .stat = stat,
        .budget = budget,
        .handler = handle,
        .data = g,
    };
    rc = httpd_start(&g->httpd, loop, &o);
    if (rc) {
        api_events_stop(g->events); /* its timer closes on the next loop turn */
        g->events = NULL;
        return rc;
    }
    g->started = true;
    return 0;
}

void mgmt_set_mesh(mgmt_t *g, mesh_t *mesh)
{
    g->mesh = mesh;
}

void mgmt_stop(mgmt_t *g)
{
    if (g->events) api_events_stop(g->events);
    g->events = NULL;
    if (g->started) httpd_stop(&g->httpd);
    g->started = false;
}

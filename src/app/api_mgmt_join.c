/* The management API's mesh-membership endpoints: POST /api/join, POST /api/chat,
 * GET /api/discover (api_mgmt.h). */
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "api_mgmt.h"
#include "httpd_guard.h"
#include "join_policy.h"

/* Joining moves this node into another mesh (its memory and models serve strangers), an
 * assignment moves its models: only a client on this machine that names it by a loopback name
 * (no DNS rebinding), or a client that holds the API key (checked before this, for every /api/
 * path), may ask. */
bool mgmt_may_change(const mgmt_t *g, const httpd_req_t *req)
{
    if (g->cfg->api_key) return true;
    return req->peer == HTTPD_PEER_LOOPBACK &&
           guard_loopback_host_header(httpd_header(req, "host"));
}

/* The token from a {"token": "..."} body; answers the request and returns false when there is
 * none or it is not a valid token. */
static bool read_token(httpd_req_t *req, token_t *t)
{
    char err[256];
    if (req->body_len > MGMT_JOIN_MAX_BODY) {
        httpd_respond_error(req, 413, "invalid_request_error", "body_too_large",
                            "request body is %zu bytes; POST /api/join takes at most %d "
                            "({\"token\": \"...\"})",
                            req->body_len, MGMT_JOIN_MAX_BODY);
        return false;
    }
    json_error_t je;
    json_t *root = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_body",
                            "request body is not valid JSON: %s (line %d, column %d); send "
                            "{\"token\": \"...\"}",
                            je.text, je.line, je.column);
        return false;
    }
    json_t *tok = json_is_object(root) ? json_object_get(root, "token") : NULL;
    bool ok = false;
    if (!json_is_string(tok) || json_string_length(tok) == 0) {
        httpd_respond_error(req, 400, "invalid_request_error", "token_required",
                            "'token' is required: send {\"token\": \"<invite token>\"} (a node "
                            "in the mesh prints its token, and shows it in GET /api/status)");
    } else if (token_decode(json_string_value(tok), json_string_length(tok), t, err, sizeof err) !=
               0) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_token",
                            "invalid invite token: %s", err);
    } else {
        ok = true;
    }
    json_decref(root);
    return ok;
}

static void handle_join(mgmt_t *g, httpd_req_t *req)
{
    if (strcmp(req->method_str, "POST") != 0) {
        httpd_respond_405(req, "POST");
        return;
    }
    if (!mgmt_may_change(g, req)) {
        httpd_respond_error(req, 403, "invalid_request_error", "forbidden",
                            "joining a mesh moves this node: only a client on this machine "
                            "(naming it 127.0.0.1 or localhost) may ask, or one with the API "
                            "key when the node has one (--api-key-file)");
        return;
    }
    token_t t;
    if (!read_token(req, &t)) return;
    char msg[512] = "";
    int status = g->dep.join ? g->dep.join(g->dep.data, &t, msg, sizeof msg) : 503;
    if (status >= 400) {
        httpd_respond_error(req, status, "invalid_request_error",
                            status == 409   ? "already_in_mesh"
                            : status == 400 ? "invalid_token"
                                            : "join_failed",
                            "%s", msg[0] ? msg : "this node cannot join a mesh now");
    } else {
        changes_notify(g->changes); /* the event streams show the join at once */
        httpd_respond_json(req, status,
                           json_pack("{s:s,s:s,s:s,s:s}", "status",
                                     status == 202 ? "joining" : "already_in_mesh", "mesh_id",
                                     t.mesh_id, "via", t.id, "message", msg));
    }
    sodium_memzero(&t, sizeof t);
}

bool mgmt_join_routes(mgmt_t *g, httpd_req_t *req)
{
    if (strcmp(req->path, "/api/join") == 0) {
        handle_join(g, req);
        return true;
    }
    if (strcmp(req->path, "/api/chat") == 0) {
        if (strcmp(req->method_str, "POST") != 0)
            httpd_respond_405(req, "POST");
        else if (!g->dep.chat)
            httpd_respond_error(req, 503, "server_error", "unavailable", "no inference API");
        else
            g->dep.chat(g->dep.data, req);
        return true;
    }
    if (strcmp(req->path, "/api/discover") == 0) {
        if (strcmp(req->method_str, "GET") != 0)
            httpd_respond_405(req, "GET");
        else if (g->dep.discover)
            g->dep.discover(g->dep.data, req);
        else
            httpd_respond_json(req, 200,
                               json_pack("{s:[],s:b,s:s}", "meshes", "searching", false, "reason",
                                         "public discovery is not available on this node"));
        return true;
    }
    return false;
}

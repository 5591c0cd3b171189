/* The management API's assignment endpoints (api_mgmt.h; seed 000's admin command):
 *   POST /api/assign   {"model": NAME|REF}  200 {status:"assigned", model, message}
 *                                           202 {status:"downloading", ...} (assigned on arrival)
 *   POST /api/unassign {"model": NAME}      200 {status:"unassigned", model, message}
 * Errors: 400 body, 403 not this node's operator, 404 no such model (or not assigned), 409 it
 * cannot (too big, another assignment in the way). Only this node's operator may ask
 * (mgmt_may_change); a mesh member never reaches the console port (its tunnel ends at the
 * inference API, api_path_allowed). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "api_mgmt.h"

#define ASSIGN_MAX_BODY 4096

static void handle(mgmt_t *g, httpd_req_t *req, bool unassign)
{
    const char *path = unassign ? "/api/unassign" : "/api/assign";
    if (strcmp(req->method_str, "POST") != 0) {
        httpd_respond_405(req, "POST");
        return;
    }
    if (!mgmt_may_change(g, req)) {
        httpd_respond_error(req, 403, "invalid_request_error", "forbidden",
                            "assigning models changes this node: only a client on this machine "
                            "(naming it 127.0.0.1 or localhost) may ask, or one with the API key "
                            "when the node has one (--api-key-file); a peer never can");
        return;
    }
    if (req->body_len > ASSIGN_MAX_BODY) {
        httpd_respond_error(req, 413, "invalid_request_error", "body_too_large",
                            "request body is %zu bytes; POST %s takes at most %d", req->body_len,
                            path, ASSIGN_MAX_BODY);
        return;
    }
    json_error_t je;
    json_t *root = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je);
    json_t *m = json_is_object(root) ? json_object_get(root, "model") : NULL;
    if (!json_is_string(m) || json_string_length(m) == 0 ||
        json_string_length(m) >= MODEL_NAME_MAX ||
        strlen(json_string_value(m)) != json_string_length(m)) {
        httpd_respond_error(req, 400, "invalid_request_error", "model_required",
                            "send {\"model\": \"<name or reference>\"} to POST %s", path);
        json_decref(root);
        return;
    }
    char model[MODEL_NAME_MAX];
    snprintf(model, sizeof model, "%s", json_string_value(m));
    json_decref(root);
    char msg[1024] = "";
    int status = g->dep.assign ? g->dep.assign(g->dep.data, model, unassign, msg, sizeof msg) : 503;
    if (status >= 400) {
        httpd_respond_error(req, status, "invalid_request_error",
                            status == 404   ? (unassign ? "not_assigned" : "model_not_found")
                            : status == 409 ? "cannot_assign"
                                            : "unavailable",
                            "%s", msg[0] ? msg : "this node cannot assign models now");
        return;
    }
    changes_notify(g->changes); /* the event streams show it at once */
    httpd_respond_json(req, status,
                       json_pack("{s:s,s:s,s:s}", "status",
                                 unassign        ? "unassigned"
                                 : status == 202 ? "downloading"
                                                 : "assigned",
                                 "model", model, "message", msg));
}

bool mgmt_assign_routes(mgmt_t *g, httpd_req_t *req)
{
    if (strcmp(req->path, "/api/assign") == 0) {
        handle(g, req, false);
        return true;
    }
    if (strcmp(req->path, "/api/unassign") == 0) {
        handle(g, req, true);
        return true;
    }
    return false;
}

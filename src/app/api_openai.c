#include "api_openai.h"

#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api_ollama.h"
#include "api_routes.h"
#include "log.h"
#include "meshstat.h"
#include "options.h"
#include "route.h"
#include "util.h"
#include "vision.h"

#define API_AVAIL_MAX_NAMES 20 /* in a "not found; available: …" message */

static bool key_equal(const char *given, const char *key);

bool api_key_ok(const char *header, const char *key)
{
    if (!header || strncasecmp(header, "Bearer ", 7) != 0) return false;
    const char *given = header + 7;
    while (*given == ' ')
        given++;
    return key_equal(given, key);
}

bool api_x_api_key_ok(const char *header, const char *key)
{
    return header && key_equal(header, key);
}

static bool key_equal(const char *given, const char *key)
{
    size_t gl = strlen(given), kl = strlen(key);
    /* Compare fixed-size digests so neither length nor content leaks through timing. */
    unsigned char a[crypto_generichash_BYTES], b[crypto_generichash_BYTES];
    crypto_generichash(a, sizeof a, (const unsigned char *)given, gl, NULL, 0);
    crypto_generichash(b, sizeof b, (const unsigned char *)key, kl, NULL, 0);
    return sodium_memcmp(a, b, sizeof a) == 0;
}

static ml_status_t state_row(model_state_t s)
{
    return s == MODEL_READY ? ML_READY : s == MODEL_LOADING ? ML_LOADING : ML_UNLOADED;
}

static void handle_models(api_t *api, httpd_req_t *req)
{
    model_list_t l;
    ml_init(&l);
    for (model_entry_t *e = NULL; (e = models_next(api->ms, e));) {
        ml_row_t *r = ml_add(&l, e->mm->name);
        if (!r) continue;
        r->status = state_row(models_state(e));
        r->has_type = r->described = r->own = true;
        r->type = e->mm->type;
        r->size = e->size;
    }
    if (api->list_remote) api->list_remote(api->remote_data, &l);
    json_t *data = ml_list_json(&l, (int64_t)time(NULL));
    ml_free(&l);
    httpd_respond_json(req, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

static void handle_health(api_t *api, httpd_req_t *req)
{
    json_t *models = json_array();
    for (model_entry_t *e = NULL; (e = models_next(api->ms, e));)
        json_array_append_new(models, json_pack("{s:s,s:s}", "name", e->mm->name, "status",
                                                model_state_name(models_state(e))));
    httpd_respond_json(req, 200, json_pack("{s:s,s:o}", "status", "ok", "models", models));
}

/* GET / and HEAD /: Ollama's answer, which its clients (and Claude Code, with HEAD) take as
 * "the server is up"; like /health it needs no key and says nothing else. */
static void handle_root(httpd_req_t *req)
{
    static const char running[] = "Ollama is running";
    httpd_respond(req, 200, "text/plain; charset=utf-8", running, sizeof running - 1, NULL);
}

static const char *endpoint_for(mm_type_t t)
{
    return t == MM_EMBEDDING ? "/v1/embeddings"
           : t == MM_RERANKING
               ? "/v1/rerank"
               : "/v1/chat/completions, /v1/completions, /v1/messages or /v1/responses";
}

/* With no "model" in the body, llama-server uses its only model; the node does the same with its
 * only local model, or (serving none itself) with the mesh's only model. */
static bool only_mesh_model(api_t *api, char *out, size_t outlen)
{
    if (!api->list_remote) return false;
    model_list_t l;
    ml_init(&l);
    api->list_remote(api->remote_data, &l);
    const char *id = l.n == 1 ? l.rows[0].id : NULL;
    bool ok = id && strlen(id) < outlen;
    if (ok) snprintf(out, outlen, "%s", id);
    ml_free(&l);
    return ok;
}

/* One name more in a bounded "a, b, c" list: false (and nothing written) once it is full. */
static bool append_name(char *out, size_t len, size_t *off, size_t *shown, const char *name)
{
    if (*shown >= API_AVAIL_MAX_NAMES) return false;
    int w = snprintf(out + *off, len - *off, "%s%s", *off ? ", " : "", name);
    if (w < 0 || (size_t)w >= len - *off - 32) { /* room left for ", and N more" */
        out[*off] = '\0';
        return false;
    }
    *off += (size_t)w;
    (*shown)++;
    return true;
}

/* The models a request may name, for a 404: this node's, then the rest of the mesh's (what
 * GET /v1/models lists: the planner's view, or a passive node's route table), at most
 * API_AVAIL_MAX_NAMES of them and then how many more. */
static void available_names(api_t *api, char *out, size_t len)
{
    size_t off = 0, shown = 0, more = 0;
    out[0] = '\0';
    for (model_entry_t *e = NULL; (e = models_next(api->ms, e));)
        if (!append_name(out, len, &off, &shown, e->mm->name)) more++;
    model_list_t l;
    ml_init(&l);
    if (api->list_remote) api->list_remote(api->remote_data, &l);
    for (size_t i = 0; i < l.n; i++) {
        const char *id = l.rows[i].id;
        if (models_find(api->ms, id) || ml_listed_before(&l, i, id)) continue;
        if (!append_name(out, len, &off, &shown, id)) more++;
    }
    ml_free(&l);
    if (more)
        snprintf(out + off, len - off, ", and %zu more (GET /v1/models lists them)", more);
    else if (!off)
        snprintf(out, len, "(none)");
}

static void handle_inference(api_t *api, httpd_req_t *req, const api_route_t *route)
{
    int needs = route->needs;
    /* the one parse of the body (again after admission: the same facts, not parsed again);
     * admission, routing, the relay read req->rq */
    const request_t *rq = meshstat_parse_body(req);
    if (api->dep.admit && api->dep.admit(api->dep.admit_data, req, needs)) return;
    char name[MODEL_NAME_MAX];
    int rc = rq->model_rc;
    if (rc < 0) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_body", "%s", rq->err);
        return;
    }
    /* an Anthropic body llama-server would answer with a 500 in OpenAI's shape */
    if (route->errors == API_ERR_ANTHROPIC && rq->anthropic_rc < 0) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_body", "%s",
                            rq->anthropic_err);
        return;
    }
    snprintf(name, sizeof name, "%s", rq->model);
    model_entry_t *e = NULL;
    if (rc == REQUEST_MODEL_ABSENT) {
        size_t known = models_count(api->ms);
        if (known != 1) {
            if (known == 0 && api->route) {
                if (only_mesh_model(api, name, sizeof name)) goto named;
                httpd_respond_error(req, 400, "invalid_request_error", "model_required",
                                    "'model' is required: this node serves no model itself");
                return;
            }
            httpd_respond_error(req, 400, "invalid_request_error", "model_required",
                                "'model' is required when the node has %zu models", known);
            return;
        }
        e = models_only(api->ms);
    } else {
    named:
        e = models_find(api->ms, name);
    }
    snprintf(req->mesh.model, sizeof req->mesh.model, "%s", e ? e->mm->name : name);
    /* A tunnelled request came through the mesh already, whatever its headers say: it is never
     * forwarded again (a member cannot make this node relay for it). */
    bool hop = route_req_is_hop(req);
    if (api->route) { /* route_decide: here, parked, relayed, or answered */
        route_local_t local = {.have = e != NULL,
                               .type = e ? (int)e->mm->type : 0,
                               .vision = e && e->vision,
                               .full = e && api->dep.spilled &&
                                       api->dep.spilled(api->dep.admit_data, req)};
        route_outcome_t o =
            route_inference(api->route, e ? e->mm->name : name, &local, needs, req, hop);
        if (o == ROUTE_TAKEN) return;
        if (o == ROUTE_UNKNOWN) e = NULL;
    } else if (e && !e->vision && rq->images) { /* no mesh: images need a projector here */
        char msg[512];
        vision_refusal(e->mm->name, msg, sizeof msg);
        httpd_respond_error(req, 400, "invalid_request_error", VISION_ERR_CODE, "%s", msg);
        return;
    }
    if (!e) {
        /* a name no node knows is not a label of its own (bounded cardinality) */
        snprintf(req->mesh.model, sizeof req->mesh.model, "_unknown");
        char avail[1024];
        available_names(api, avail, sizeof avail);
        httpd_respond_error(req, 404, "invalid_request_error", "model_not_found",
                            "model '%s' not found; available: %s", name, avail);
        return;
    }
    if (needs != API_NEEDS_ANY && e->mm->type != (mm_type_t)needs) {
        httpd_respond_error(req, 400, "invalid_request_error", "model_type_mismatch",
                            "model '%s' is a %s model and cannot serve %s; use %s", e->mm->name,
                            mm_type_name(e->mm->type), req->path, endpoint_for(e->mm->type));
        return;
    }
    models_route(api->ms, e, req);
}

void api_inference(void *api, httpd_req_t *req, int needs)
{
    (void)needs;
    const api_route_t *route = api_route_find(req->path);
    if (route)
        handle_inference(api, req, route);
    else /* cannot happen: admission takes only routed requests */
        httpd_respond_error(req, 404, "invalid_request_error", "not_found", "no endpoint at %s",
                            req->path);
}

/* What a request may reach given where it comes from: a mesh member (through a tunnel) only the
 * model endpoints of api_routes.h, GET /v1/models and /health, on every request of its
 * connection, pipelined or not. */
bool api_path_allowed(httpd_peer_t peer, const char *path)
{
    if (peer != HTTPD_PEER_TUNNEL) return true;
    return api_route_find(path) || strcmp(path, "/health") == 0 || strcmp(path, "/v1/models") == 0;
}

static bool key_ok(const api_t *api, const httpd_req_t *req)
{
    /* tunnelled requests were admitted by the mesh (and are limited to inference); Anthropic
     * clients send the key as x-api-key */
    if (api->dep.key_known)
        return req->peer == HTTPD_PEER_TUNNEL || api->dep.key_known(api->dep.admit_data, req);
    return !api->cfg->api_key || req->peer == HTTPD_PEER_TUNNEL ||
           api_key_ok(httpd_header(req, "authorization"), api->cfg->api_key) ||
           api_x_api_key_ok(httpd_header(req, "x-api-key"), api->cfg->api_key);
}

static void dispatch(api_t *api, httpd_req_t *req)
{
    const char *path = req->path;
    bool is_get = req->method == HTTP_GET || req->method == HTTP_HEAD;
    bool is_post = req->method == HTTP_POST;
    req->error_shape = (int)api_route_err_shape(path);

    if (!api_path_allowed(req->peer, path)) {
        LOGW("api", "refused a tunnelled %s %.80s from a mesh member: only the inference API",
             req->method_str, path);
        httpd_respond_error(req, 403, "invalid_request_error", "forbidden",
                            "mesh members may only use the inference API (model endpoints, "
                            "/v1/models, /health); %s is not part of it",
                            path);
        return;
    }
    if (strcmp(path, "/health") == 0 || strcmp(path, "/") == 0) {
        if (!is_get) {
            httpd_respond_405(req, "GET");
            return;
        }
        return path[1] ? handle_health(api, req) : handle_root(req);
    }
    /* an Ollama inference request counts under its own label and path (api_ollama.h) */
    const char *label = NULL, *called = NULL;
    ollama_ep_t oep = ollama_endpoint(path);
    if (oep != OL_NONE) {
        if (!key_ok(api, req)) {
            httpd_respond_error(req, 401, "invalid_request_error", "invalid_api_key",
                                "missing or wrong API key; send 'Authorization: Bearer <key>'");
            return;
        }
        const char *as = api_ollama(api, req, oep);
        if (!as) return;
        label = ollama_label(oep);
        called = ollama_path(oep);
        req->url = req->path = path = as; /* an OpenAI request from here on (api_ollama.h) */
    }
    if (strncmp(path, "/api/v1/", 8) == 0 || strncmp(path, "/api/v0/", 8) == 0) {
        if (!key_ok(api, req)) {
            httpd_respond_error(req, 401, "invalid_request_error", "invalid_api_key",
                                "missing or wrong API key; send 'Authorization: Bearer <key>'");
            return;
        }
        if (!models_api(api->ms, req, path + 8))
            httpd_respond_error(req, 404, "invalid_request_error", "not_found", "no endpoint at %s",
                                path);
        return;
    }
    const api_route_t *route = api_route_find(path);
    if (!route && strcmp(path, "/v1/models") != 0) {
        /* what a client wanted that the API lacks (-v shows it: the agents' tests read it) */
        LOGD("api", "no endpoint at %s %.120s", req->method_str, path);
        httpd_respond_error(req, 404, "invalid_request_error", "not_found", "no endpoint at %s",
                            path);
        return;
    }
    if (!key_ok(api, req)) {
        httpd_respond_error(req, 401, "invalid_request_error", "invalid_api_key",
                            "missing or wrong API key; send 'Authorization: Bearer <key>'");
        return;
    }
    if (!route) { /* /v1/models */
        if (!is_get) {
            httpd_respond_405(req, "GET");
            return;
        }
        return handle_models(api, req);
    }
    if (api->unavailable) { /* idle: not in a mesh yet */
        httpd_respond_error(req, 503, "unavailable", "not_in_mesh", "%s", api->unavailable);
        return;
    }
    if (!is_post) {
        httpd_respond_405(req, "POST");
        return;
    }
    req->mesh.endpoint = label ? label : route->label;
    req->mesh.path = called ? called : route->path;
    handle_inference(api, req, route);
}

static void api_handle(httpd_req_t *req)
{
    dispatch(req->server->data, req);
}

void api_chat(api_t *api, httpd_req_t *req)
{
    static const char path[] = "/v1/chat/completions";
    req->url = req->path = path; /* what the proxy and the tunnel forward */
    dispatch(api, req);
}

void api_set_downloads(api_t *api, struct node_dl *dl)
{
    api->dl = dl;
}

void api_set_unavailable(api_t *api, const char *msg)
{
    api->unavailable = msg;
}

void api_join(api_t *api, struct route *route, void (*list_remote)(void *data, model_list_t *list),
              void *data)
{
    api->route = route;
    api->list_remote = list_remote;
    api->remote_data = data;
}

int api_start(api_t *api, uv_loop_t *loop, const config_t *cfg, models_t *ms, meshstat_t *stat,
              httpd_budget_t *budget, const api_deps_t *dep)
{
    memset(api, 0, sizeof *api);
    if (dep) api->dep = *dep;
    api->loop = loop;
    api->cfg = cfg;
    api->ms = ms;
    httpd_opts_t o = {
        .host = cfg->listen_all ? "0.0.0.0" : "127.0.0.1",
        .port = cfg->port,
        .max_body_bytes = cfg->max_body_bytes,
        .max_conns = cfg->max_connections,
        .idle_timeout_ms = cfg->tun.http_idle_ms,
        .read_timeout_ms = cfg->tun.http_read_ms,
        .write_timeout_ms = cfg->tun.http_write_ms,
        .web_guard = true,
        .allow_origins = (const char *const *)cfg->allow_origins,
        .n_allow_origins = cfg->n_allow_origins,
        .stat = stat,
        .budget = budget,
        .handler = api_handle,
        .data = api,
    };
    int rc = httpd_start(&api->httpd, loop, &o);
    if (rc == 0) api->started = true;
    if (rc == 0 && cfg->ollama_port >= 0) { /* the same server again, where Ollama's clients look */
        o.port = cfg->ollama_port;
        rc = api->ollama_rc = httpd_start(&api->ollama_httpd, loop, &o);
        if (rc == 0)
            api->ollama_started = true;
        else
            api_stop(api);
    }
    return rc;
}

void api_stop(api_t *api)
{
    if (api->started) httpd_stop(&api->httpd);
    if (api->ollama_started) httpd_stop(&api->ollama_httpd);
    api->started = api->ollama_started = false;
}

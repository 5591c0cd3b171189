/* The inference API on :9337: the OpenAI surface under /v1, the model manager under
 * /api/v1 (and /api/v0), and /health. */
#ifndef MESH_API_OPENAI_H
#define MESH_API_OPENAI_H

#include <stddef.h>
#include <uv.h>

#include "config.h"
#include "httpd.h"
#include "model_list.h"
#include "models.h"

/* Admission control (node/admission.h): admit takes an inference request before it is
 * served or routed (true: taken; it comes back through api_inference once admitted);
 * key_known, when set, replaces the --api-key check (--api-keys: any configured key). */
typedef struct {
    bool (*admit)(void *data, httpd_req_t *req, int needs);
    bool (*key_known)(void *data, const httpd_req_t *req);
    bool (*spilled)(void *data, const httpd_req_t *req); /* admission_spilled */
    void *admit_data;
} api_deps_t;

typedef struct {
    uv_loop_t *loop;
    const config_t *cfg;
    models_t *ms;
    httpd_t httpd;
    bool started;
    httpd_t ollama_httpd; /* --ollama-port: the same API on a second port */
    bool ollama_started;
    int ollama_rc; /* api_start failed on that port */
    /* The mesh: where a request goes (node/route.h: served here, parked, relayed, or answered);
     * NULL before the mesh starts (a model of this node is served here, any other is unknown).
     * list_remote merges the mesh's view into a /v1/models list (rows of this node's
     * models) and appends the mesh's other models (see model_list.h). */
    struct route *route;
    void (*list_remote)(void *data, model_list_t *list);
    void *remote_data;
    /* Idle mode: the /v1 endpoints (but GET /v1/models) answer 503 with this message until a join.
     */
    const char *unavailable;
    api_deps_t dep;     /* api_start's */
    struct node_dl *dl; /* the node's downloader (Ollama's /api/pull); NULL: none */
} api_t;

/* Serve or route an inference request for `needs` (mm_type_t), admitted already. */
void api_inference(void *api, httpd_req_t *req, int needs);

/* stat: the node's meshstat (httpd_opts_t.stat); budget: the buffer budget the node's servers
 * share, whose cap is set here from MESH_LLM_HTTP_MAX_BUFFERED; dep: admission (NULL: none). */
int api_start(api_t *api, uv_loop_t *loop, const config_t *cfg, models_t *ms, meshstat_t *stat,
              httpd_budget_t *budget, const api_deps_t *dep);
/* The node's downloader (node_dl.h), for Ollama's POST /api/pull. */
void api_set_downloads(api_t *api, struct node_dl *dl);
/* Idle mode: the /v1 endpoints (but GET /v1/models) answer 503 with msg; NULL: they serve. */
void api_set_unavailable(api_t *api, const char *msg);
/* The node joined a mesh: requests go through route, and /v1/models lists what list_remote
 * adds (called with data). */
void api_join(api_t *api, struct route *route, void (*list_remote)(void *data, model_list_t *list),
              void *data);
void api_stop(api_t *api);
/* A request that came to another server (the console's POST /api/chat) answered as
 * POST /v1/chat/completions: the same checks, routing and byte-for-byte proxying. */
void api_chat(api_t *api, httpd_req_t *req);

/* (A request's body — its "model", the Anthropic fields — is validated from the facts parsed
 * once, core/request.h: model_rc REQUEST_MODEL_FOUND / _ABSENT or -EINVAL with err,
 * anthropic_rc / anthropic_err.) */

/* Whether a request from peer may reach path: everything for local and network clients (the
 * API key and the web guard apply), only the model endpoints (api_routes.h), /v1/models and
 * /health for a mesh member's tunnel. */
bool api_path_allowed(httpd_peer_t peer, const char *path);

/* Constant-time check of an "Authorization: Bearer KEY" header value. */
bool api_key_ok(const char *header, const char *key);
/* The same for an "x-api-key: KEY" header value (Anthropic clients). */
bool api_x_api_key_ok(const char *header, const char *key);

#endif

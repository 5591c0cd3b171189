/* api_ollama — see api_ollama.h. */
#include "api_ollama.h"

#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

/* Local management (keep_alive 0's unload, pull, delete): a client on this host, or one that
 * showed the node's API key (a mesh member's tunnel never gets here: api_path_allowed). */
static bool mgmt_allowed(const api_t *api, const httpd_req_t *req)
{
    return req->peer == HTTPD_PEER_LOOPBACK ||
           (req->peer == HTTPD_PEER_NETWORK && (api->cfg->api_key || api->dep.key_known));
}

/* Whether the mesh knows the model: this node's, or a row of what /v1/models lists. */
static bool mesh_knows(api_t *api, const char *name)
{
    if (models_find(api->ms, name)) return true;
    if (!api->list_remote) return false;
    model_list_t l;
    ml_init(&l);
    api->list_remote(api->remote_data, &l);
    bool known = ml_get(&l, name, false) != NULL;
    ml_free(&l);
    return known;
}

/* Ollama's answer to a call with nothing to generate: it loads the model, or (keep_alive 0)
 * unloads it. Nothing is loaded ahead here (the first request loads it, wherever it is). */
static void load_only(api_t *api, httpd_req_t *req, const ollama_req_t *rq)
{
    if (!mesh_knows(api, rq->model)) {
        httpd_respond_error(req, 404, "invalid_request_error", "model_not_found",
                            "model '%s' not found", rq->model);
        return;
    }
    const char *reason = "load";
    model_entry_t *e = models_find(api->ms, rq->model);
    if (rq->keep_alive_set && e && mgmt_allowed(api, req)) {
        if (rq->keep_alive_zero) {
            LOGI("ollama", "keep_alive 0: unloading %s", e->mm->name);
            reason = "unload";
        }
        models_keep_alive(api->ms, e, rq->keep_alive_ms);
    }
    char at[48];
    api_ollama_time(at, sizeof at);
    json_t *o = json_pack("{s:s,s:s}", "model", rq->model, "created_at", at);
    if (rq->ep == OL_CHAT)
        json_object_set_new(o, "message",
                            json_pack("{s:s,s:s}", "role", "assistant", "content", ""));
    else
        json_object_set_new(o, "response", json_string(""));
    json_object_set_new(o, "done", json_true());
    json_object_set_new(o, "done_reason", json_string(reason));
    httpd_respond_json(req, 200, o);
}

static const char *inference(api_t *api, httpd_req_t *req, ollama_ep_t ep)
{
    ollama_req_t rq;
    int rc = ollama_request(&rq, ep, req->body, req->body_len);
    if (rc < 0) {
        httpd_respond_error(req, rc == -ENOMEM ? 500 : 400, "invalid_request_error", "invalid_body",
                            "%s", rc == -ENOMEM ? "out of memory" : rq.err);
        ollama_req_free(&rq);
        return NULL;
    }
    if (rq.load_only) {
        load_only(api, req, &rq);
        ollama_req_free(&rq);
        return NULL;
    }
    /* keep_alive 0 unloads the model here once the answer is out (local management only; a
     * model served elsewhere keeps its host's idle unload) */
    model_entry_t *unload = NULL, *here = models_find(api->ms, rq.model);
    if (rq.keep_alive_zero && mgmt_allowed(api, req)) unload = here;
    /* another keep_alive: this node's copy stays loaded that long idle after the request (a
     * model served elsewhere keeps its host's policy) */
    if (rq.keep_alive_set && !rq.keep_alive_zero && here && mgmt_allowed(api, req)) {
        if (rq.keep_alive_ms < 0)
            LOGI("ollama", "keep_alive: %s stays loaded until evicted", here->mm->name);
        else
            LOGI("ollama", "keep_alive: %s is unloaded after %.1f s idle", here->mm->name,
                 (double)rq.keep_alive_ms / 1000);
        models_keep_alive(api->ms, here, rq.keep_alive_ms);
    }
    const char *path = rq.path;
    if (api_ollama_filter(req, &rq, api->ms, unload) < 0) {
        httpd_respond_error(req, 500, "server_error", "no_memory", "out of memory");
        return NULL;
    }
    /* from here on the request is an OpenAI one (the body is the filter's): the same key,
     * admission, routing and metrics; the filter turns whatever answers it into Ollama's */
    return path;
}

const char *api_ollama(api_t *api, httpd_req_t *req, ollama_ep_t ep)
{
    const char *want = ollama_method(ep);
    if (ep == OL_UNKNOWN) {
        httpd_respond_error(req, 404, "invalid_request_error", "not_found",
                            "%s is not part of the Ollama API this node serves (version, tags, "
                            "ps, show, chat, generate, embed, embeddings, pull, delete)",
                            req->path);
        return NULL;
    }
    bool head = want && strcmp(want, "GET") == 0 && strcmp(req->method_str, "HEAD") == 0;
    if (!want || (strcmp(req->method_str, want) != 0 && !head)) {
        httpd_respond_405(req, want ? want : "GET");
        return NULL;
    }
    switch (ep) {
    case OL_VERSION:
        httpd_respond_json(req, 200, json_pack("{s:s}", "version", OLLAMA_VERSION));
        return NULL;
    case OL_TAGS:
        api_ollama_tags(api, req);
        return NULL;
    case OL_PS:
        api_ollama_ps(api, req);
        return NULL;
    case OL_SHOW:
        api_ollama_show(api, req);
        return NULL;
    case OL_PULL:
    case OL_DELETE:
        if (!mgmt_allowed(api, req)) {
            httpd_respond_error(req, 403, "invalid_request_error", "forbidden",
                                "%s is a local management action: call it on the node's host, or "
                                "give the node an API key",
                                req->path);
            return NULL;
        }
        (ep == OL_PULL ? api_ollama_pull : api_ollama_delete)(api, req);
        return NULL;
    default:
        return inference(api, req, ep);
    }
}

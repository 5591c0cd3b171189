#include "models.h"

#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama_args.h"
#include "meshstat.h"
#include "models_int.h"
#include "models_slots.h"

/* models_api — the model-manager API: /api/v1/{health,load,unload,stats,models} (and /api/v0/).
 * The load handler validates a request's llamacpp_args against llama_args.h's allowlist. */

static json_int_t unix_of(models_t *ms, uint64_t mono_ms)
{
    uint64_t now = models_now(ms);
    return (json_int_t)time(NULL) - (json_int_t)((now - (mono_ms < now ? mono_ms : now)) / 1000);
}

static void api_health(models_t *ms, httpd_req_t *req)
{
    json_t *all = json_array();
    model_entry_t *recent = NULL;
    for (model_entry_t *e = NULL; (e = models_next(ms, e));) {
        if (e->mm->state != MM_LOADED) continue;
        if (!recent || e->mm->last_use > recent->mm->last_use) recent = e;
        char url[64], dev[32];
        snprintf(url, sizeof url, "http://127.0.0.1:%u", e->child->port);
        json_array_append_new(
            all, json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:s}", "model_name", e->mm->name, "checkpoint",
                           e->path, "last_use", unix_of(ms, e->mm->last_use), "type",
                           mm_type_name(e->mm->type), "device",
                           mm_device_name(e->mm->device, dev, sizeof dev), "backend_url", url,
                           "status", model_state_name(models_state(e))));
    }
    json_t *o = json_pack("{s:s,s:o,s:o,s:o,s:{s:I,s:I,s:I}}", "status", "ok", "model_loaded",
                          recent ? json_string(recent->mm->name) : json_null(), "checkpoint_loaded",
                          recent ? json_string(recent->path) : json_null(), "all_models_loaded",
                          all, "max_models", "llm", (json_int_t)ms->mm.max_loaded[MM_LLM],
                          "embedding", (json_int_t)ms->mm.max_loaded[MM_EMBEDDING], "reranking",
                          (json_int_t)ms->mm.max_loaded[MM_RERANKING]);
    httpd_respond_json(req, 200, o);
}

static void api_models(models_t *ms, httpd_req_t *req)
{
    json_t *data = json_array();
    for (model_entry_t *e = NULL; (e = models_next(ms, e));) {
        json_array_append_new(
            data,
            json_pack("{s:s,s:s,s:s,s:I,s:b,s:s,s:I,s:I,s:I,s:I}", "model_name", e->mm->name,
                      "checkpoint", e->path, "type", mm_type_name(e->mm->type), "size",
                      (json_int_t)e->size, "loaded", e->mm->state == MM_LOADED, "status",
                      model_state_name(models_state(e)), "slots", (json_int_t)models_slots(e),
                      "ctx_per_slot", (json_int_t)(e->slot_ctx ? e->slot_ctx : models_slot_ctx(e)),
                      "busy", (json_int_t)models_busy(e), "free_slots",
                      (json_int_t)models_free_slots(e)));
    }
    httpd_respond_json(req, 200, json_pack("{s:o}", "data", data));
}

static void api_stats(models_t *ms, httpd_req_t *req)
{
    if (!ms->last_stats_json) {
        httpd_respond_json(req, 200, json_pack("{s:n}", "model"));
        return;
    }
    json_t *t = json_loads(ms->last_stats_json, 0, NULL);
    json_t *u = ms->last_usage_json ? json_loads(ms->last_usage_json, 0, NULL) : NULL;
    double prompt_ms = json_number_value(json_object_get(t, "prompt_ms"));
    json_t *o = json_pack(
        "{s:s,s:f,s:f,s:I,s:I,s:I,s:o}", "model", ms->last_model, "time_to_first_token",
        prompt_ms / 1000.0, "tokens_per_second",
        json_number_value(json_object_get(t, "predicted_per_second")), "input_tokens",
        (json_int_t)json_integer_value(json_object_get(t, "prompt_n")), "output_tokens",
        (json_int_t)json_integer_value(json_object_get(t, "predicted_n")), "prompt_tokens",
        (json_int_t)(u ? json_integer_value(json_object_get(u, "prompt_tokens"))
                       : json_integer_value(json_object_get(t, "prompt_n"))),
        "timings", t ? t : json_null());
    json_decref(u);
    /* speculative decoding: the last request's counts (llama-server reports them only when a
     * draft ran) and the model's totals on this node */
    json_t *dn = json_object_get(t, "draft_n"), *da = json_object_get(t, "draft_n_accepted");
    if (o && json_is_integer(dn)) {
        json_int_t n = json_integer_value(dn), a = json_integer_value(da);
        json_object_set_new(o, "draft_tokens", json_integer(n));
        json_object_set_new(o, "draft_accepted_tokens", json_integer(a));
        json_object_set_new(o, "draft_acceptance_rate",
                            n > 0 ? json_real((double)a / (double)n) : json_null());
    }
    json_t *spec = json_object();
    for (model_entry_t *e = NULL; spec && (e = models_next(ms, e));) {
        uint64_t dt, at;
        metrics_draft_totals(meshstat_metrics(ms->stat), e->mm->name, &dt, &at);
        if (!e->draft[0] && !dt) continue;
        json_object_set_new(spec, e->mm->name,
                            json_pack("{s:s,s:I,s:I,s:o}", "draft", e->draft, "draft_tokens",
                                      (json_int_t)dt, "accepted_tokens", (json_int_t)at,
                                      "acceptance_rate",
                                      dt ? json_real((double)at / (double)dt) : json_null()));
    }
    if (o && spec) json_object_set_new(o, "speculative", spec);
    httpd_respond_json(req, 200, o);
}

static json_t *parse_body(httpd_req_t *req)
{
    json_error_t je;
    json_t *b = req->body_len ? json_loadb(req->body, req->body_len, 0, &je) : json_object();
    if (!b || !json_is_object(b)) {
        json_decref(b);
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_body",
                            "request body must be a JSON object");
        return NULL;
    }
    return b;
}

static void api_load(models_t *ms, httpd_req_t *req)
{
    json_t *b = parse_body(req);
    if (!b) return;
    const char *name = NULL, *args = NULL, *backend = NULL;
    char *canon_args = NULL;
    json_int_t ctx = 0;
    json_error_t je;
    if (json_unpack_ex(b, &je, 0, "{s:s,s?I,s?s,s?s}", "model_name", &name, "ctx_size", &ctx,
                       "llamacpp_args", &args, "llamacpp_backend", &backend) != 0) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_body",
                            "expected {\"model_name\": string, \"ctx_size\"?: integer, "
                            "\"llamacpp_args\"?: string, \"llamacpp_backend\"?: string}: %s",
                            je.text);
        goto out;
    }
    model_entry_t *e = models_find(ms, name);
    char resolved[MODEL_NAME_MAX];
    if (!e && ms->load_ref) { /* a reference: downloaded first (202), or its model's name */
        int r = ms->load_ref(ms->load_ref_data, name, resolved, sizeof resolved, req);
        if (r > 0) goto out;
        if (r == 0) e = models_find(ms, name = resolved);
    }
    if (!e) {
        httpd_respond_error(req, 404, "invalid_request_error", "model_not_found",
                            "model '%s' is not known to this node", name);
        goto out;
    }
    if (models_file_missing(e)) {
        httpd_respond_error(req, 404, "invalid_request_error", "model_file_not_found",
                            "model '%s': file %s not found", e->mm->name, e->path);
        goto out;
    }
    if (e->mm->state == MM_UNLOADED && models_known_bad(ms, e)) {
        models_respond_bad(e, req);
        goto out;
    }
    /* ctx_size: absent = the default (--ctx-size, else the model's own); given, it is
     * a number of tokens from 1 to 2^24, like --ctx-size (no sentinel values). */
    bool has_ctx = json_is_integer(json_object_get(b, "ctx_size"));
    if (has_ctx && (ctx < 1 || ctx > (1 << 24))) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_ctx_size",
                            "ctx_size must be a number of tokens from 1 to %d, got %lld; leave "
                            "it out to use the default (--ctx-size, else the model's own)",
                            1 << 24, (long long)ctx);
        goto out;
    }
    if (args) {
        char why[512];
        int rc = llama_args_check(args, LLAMA_ARGS_CLIENT, &canon_args, why, sizeof why);
        if (rc == -ENOMEM) {
            httpd_respond_error(req, 500, "server_error", "out_of_memory", "out of memory");
            goto out;
        }
        if (rc) {
            httpd_respond_error(req, 400, "invalid_request_error",
                                rc == -EPERM ? "forbidden_llamacpp_arg" : "invalid_llamacpp_args",
                                "%s", why);
            goto out;
        }
        args = canon_args;
    }
    if (backend && *backend && strcmp(backend, "cpu") != 0 && strcmp(backend, "auto") != 0) {
        httpd_respond_error(req, 400, "invalid_request_error", "backend_not_installed",
                            "llamacpp backend '%s' is not installed on this node; installed: cpu",
                            backend);
        goto out;
    }
    /* Precedence: this request > CLI > built-in defaults. */
    uint32_t want_ctx = has_ctx ? (uint32_t)ctx : config_ctx_of(ms->cfg, e->mm->name);
    const char *want_args = args ? args : config_llamacpp_args_of(ms->cfg, e->mm->name);
    bool same = want_ctx == e->ctx_size &&
                strcmp(want_args ? want_args : "", e->llamacpp_args ? e->llamacpp_args : "") == 0;
    if (!same) {
        free(e->llamacpp_args);
        e->llamacpp_args = want_args ? strdup(want_args) : NULL;
        e->ctx_size = want_ctx;
        models_update_bytes(ms, e);
    }
    if (e->mm->state == MM_LOADED && same && !e->mm->unload_pending) {
        mm_load(&ms->mm, e->mm, models_now(ms)); /* no-op, refreshes last use */
        char body[256];
        int n = snprintf(body, sizeof body,
                         "{\"status\":\"success\",\"message\":\"model %s already loaded\"}", name);
        httpd_respond(req, 200, "application/json", body, (size_t)n, NULL);
        goto out;
    }
    if (models_park(ms, e, req, PARK_LOAD) != 0) {
        httpd_respond_error(req, 503, "unavailable", "busy", "too many pending loads");
        goto out;
    }
    if (!same && (e->mm->state == MM_LOADED || e->mm->state == MM_LOADING))
        mm_reload(&ms->mm, e->mm, models_now(ms));
    else
        mm_load(&ms->mm, e->mm, models_now(ms));
    models_run(ms);
out:
    free(canon_args);
    json_decref(b);
}

static void api_unload(models_t *ms, httpd_req_t *req)
{
    json_t *b = parse_body(req);
    if (!b) return;
    json_t *jn = json_object_get(b, "model_name");
    if (jn && !json_is_string(jn) && !json_is_null(jn)) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_body",
                            "model_name must be a string");
        json_decref(b);
        return;
    }
    if (jn && json_is_string(jn)) {
        model_entry_t *e = models_find(ms, json_string_value(jn));
        if (!e || mm_unload(&ms->mm, e->mm, models_now(ms)) != 0) {
            httpd_respond_error(req, 404, "invalid_request_error", "model_not_loaded",
                                "model '%s' is not loaded", json_string_value(jn));
        } else if (e->mm->state == MM_UNLOADED) { /* was only queued */
            httpd_respond(req, 200, "application/json", "{\"status\":\"success\"}", 20, NULL);
        } else if (models_park(ms, e, req, PARK_UNLOAD) != 0) {
            httpd_respond_error(req, 503, "unavailable", "busy", "too many pending unloads");
        }
        models_run(ms);
    } else {
        /* everything: answer now, the unloads proceed as models become idle */
        unsigned n = 0;
        for (model_entry_t *e = NULL; (e = models_next(ms, e));)
            if (mm_unload(&ms->mm, e->mm, models_now(ms)) == 0) n++;
        models_run(ms);
        char body[128];
        int len = snprintf(body, sizeof body,
                           "{\"status\":\"success\",\"message\":\"unloading %u model(s)\"}", n);
        httpd_respond(req, 200, "application/json", body, (size_t)len, NULL);
    }
    json_decref(b);
}

bool models_api(models_t *ms, httpd_req_t *req, const char *sub)
{
    bool get = req->method == HTTP_GET || req->method == HTTP_HEAD;
    bool post = req->method == HTTP_POST;
    static const struct {
        const char *name;
        bool is_post;
        void (*fn)(models_t *, httpd_req_t *);
    } routes[] = {{"health", false, api_health},
                  {"models", false, api_models},
                  {"stats", false, api_stats},
                  {"load", true, api_load},
                  {"unload", true, api_unload}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(sub, routes[i].name) != 0) continue;
        if (routes[i].is_post ? !post : !get)
            httpd_respond_405(req, routes[i].is_post ? "POST" : "GET");
        else
            routes[i].fn(ms, req);
        return true;
    }
    return false;
}

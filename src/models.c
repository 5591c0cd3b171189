#include "models.h"

#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "gguf_info.h"
#include "log.h"
#include "proxy.h"
#include "util.h"

#define MAX_PARKED_PER_MODEL 4096
#define UNLOAD_GRACE_MS 5000

enum { PARK_REQUEST, PARK_LOAD, PARK_UNLOAD };

struct parked {
    httpd_req_t *req;
    models_t *ms;
    model_entry_t *e;
    int kind;
    parked_t *next;
};

static void run_actions(models_t *ms);

static uint64_t now_ms(models_t *ms)
{
    return uv_now(ms->loop);
}

static model_entry_t *entry_of(const mm_model_t *m)
{
    return m->data;
}

model_entry_t *models_find(models_t *ms, const char *name)
{
    for (size_t i = 0; i < ms->n; i++)
        if (strcmp(ms->entries[i].mm->name, name) == 0) return &ms->entries[i];
    return NULL;
}

const char *models_status(const model_entry_t *e)
{
    switch (e->mm->state) {
    case MM_LOADED:
        return e->child->state == CHILD_READY ? "ready" : "loading";
    case MM_LOADING:
        return "loading";
    default:
        return (e->mm->queued || e->mm->waiters) ? "loading" : "unloaded";
    }
}

const char *models_forbidden_arg(const char *args)
{
    static const char *const managed[] = {"-m",  "--model",   "--port",       "--host",
                                          "-a",  "--alias",   "-mu",          "--model-url",
                                          "-hf", "--hf-repo", "--models-dir", "--api-key"};
    char **av;
    static char bad[64];
    if (argv_split(args, &av) < 0) {
        snprintf(bad, sizeof bad, "(unbalanced quotes)");
        return bad;
    }
    const char *res = NULL;
    for (char **p = av; *p && !res; p++) {
        char flag[64];
        snprintf(flag, sizeof flag, "%s", *p);
        char *eq = strchr(flag, '=');
        if (eq) *eq = '\0';
        for (size_t i = 0; i < sizeof managed / sizeof managed[0]; i++) {
            if (strcmp(flag, managed[i]) == 0) {
                snprintf(bad, sizeof bad, "%s", managed[i]);
                res = bad;
                break;
            }
        }
    }
    argv_free(av);
    return res;
}

/* ---- parking ---- */

static void park_unlink(parked_t **list, parked_t *p)
{
    for (parked_t **pp = list; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            return;
        }
    }
}

static parked_t **park_list(model_entry_t *e, int kind)
{
    return kind == PARK_REQUEST ? &e->waiting
           : kind == PARK_LOAD  ? &e->load_waiters
                                : &e->unload_waiters;
}

static void on_parked_abort(httpd_req_t *req)
{
    parked_t *p = req->data;
    park_unlink(park_list(p->e, p->kind), p);
    if (p->kind == PARK_REQUEST) mm_request_cancel(&p->ms->mm, p->e->mm);
    free(p);
}

static int park(models_t *ms, model_entry_t *e, httpd_req_t *req, int kind)
{
    parked_t **list = park_list(e, kind);
    size_t n = 0;
    for (parked_t *q = *list; q; q = q->next)
        n++;
    parked_t *p = n < MAX_PARKED_PER_MODEL ? calloc(1, sizeof *p) : NULL;
    if (!p) return -ENOMEM;
    p->req = req;
    p->ms = ms;
    p->e = e;
    p->kind = kind;
    while (*list)
        list = &(*list)->next;
    *list = p;
    req->data = p;
    req->on_abort = on_parked_abort;
    return 0;
}

static httpd_req_t *unpark(model_entry_t *e, int kind)
{
    parked_t **list = park_list(e, kind);
    parked_t *p = *list;
    if (!p) return NULL;
    *list = p->next;
    httpd_req_t *req = p->req;
    req->data = NULL;
    req->on_abort = NULL;
    free(p);
    return req;
}

/* ---- serving ---- */

typedef struct {
    models_t *ms;
    model_entry_t *e;
} flight_t;

static char *extract_object(const char *tail, size_t len, const char *key)
{
    char needle[64];
    snprintf(needle, sizeof needle, "\"%s\":", key);
    const char *last = NULL;
    for (const char *p = tail; p && p < tail + len;) {
        const char *q = memmem(p, (size_t)(tail + len - p), needle, strlen(needle));
        if (!q) break;
        last = q;
        p = q + 1;
    }
    if (!last) return NULL;
    const char *start = last + strlen(needle);
    json_error_t je;
    json_t *o = json_loadb(start, (size_t)(tail + len - start), JSON_DISABLE_EOF_CHECK, &je);
    if (!o) return NULL;
    char *s = json_is_object(o) ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static void on_flight_done(void *data, bool ok, int status, const char *tail, size_t len)
{
    flight_t *f = data;
    models_t *ms = f->ms;
    if (ok && status == 200) {
        char *t = extract_object(tail, len, "timings");
        if (t) {
            free(ms->last_stats_json);
            ms->last_stats_json = t;
            free(ms->last_usage_json);
            ms->last_usage_json = extract_object(tail, len, "usage");
            snprintf(ms->last_model, sizeof ms->last_model, "%s", f->e->mm->name);
        }
    }
    mm_request_end(&ms->mm, f->e->mm, now_ms(ms));
    free(f);
    run_actions(ms);
}

/* The request is already counted in flight. */
static void dispatch(models_t *ms, model_entry_t *e, httpd_req_t *req)
{
    if (e->child->state != CHILD_READY) {
        httpd_respond_error(req, 503, "unavailable", "model_unavailable",
                            "model '%s' is restarting after its server exited; retry shortly",
                            e->mm->name);
        mm_request_end(&ms->mm, e->mm, now_ms(ms));
        return;
    }
    flight_t *f = malloc(sizeof *f);
    if (!f) {
        httpd_respond_error(req, 500, "server_error", "out_of_memory", "out of memory");
        mm_request_end(&ms->mm, e->mm, now_ms(ms));
        return;
    }
    f->ms = ms;
    f->e = e;
    proxy_opts_t po = {
        .strip_authorization = ms->cfg->api_key != NULL,
        .on_done = on_flight_done,
        .data = f,
    };
    proxy_forward(ms->loop, req, e->child->port, &po); /* on failure on_done already ran */
}

/* A model whose file is gone answers 404 before anything is evicted for it. */
static bool file_missing(model_entry_t *e)
{
    struct stat st;
    return e->mm->state == MM_UNLOADED && stat(e->path, &st) != 0 && errno == ENOENT;
}

void models_route(models_t *ms, model_entry_t *e, httpd_req_t *req)
{
    if (file_missing(e)) {
        httpd_respond_error(req, 404, "invalid_request_error", "model_file_not_found",
                            "model '%s': file %s not found", e->mm->name, e->path);
        return;
    }
    mm_req_result_t r = mm_request_begin(&ms->mm, e->mm, now_ms(ms));
    if (r == MM_SERVE_NOW) {
        dispatch(ms, e, req);
    } else {
        if (park(ms, e, req, PARK_REQUEST) != 0) {
            mm_request_cancel(&ms->mm, e->mm);
            httpd_respond_error(req, 503, "unavailable", "too_many_waiting",
                                "too many requests waiting for model '%s' to load", e->mm->name);
            return;
        }
        LOGD("models", "request for %s waits for its load", e->mm->name);
    }
    run_actions(ms);
}

/* ---- memory ---- */

static uint32_t load_ctx(const model_entry_t *e)
{
    return e->ctx_size ? e->ctx_size : e->train_ctx;
}

uint64_t models_need_bytes(const models_t *ms, const model_entry_t *e)
{
    (void)ms;
    return ledger_need(e->size, ledger_kv_bytes(&e->shape, load_ctx(e)));
}

static void update_bytes(models_t *ms, model_entry_t *e)
{
    mm_set_bytes(e->mm, e->host_share ? e->host_share : models_need_bytes(ms, e));
}

void models_set_offer(models_t *ms, uint64_t offered)
{
    ledger_init(&ms->ledger, offered);
    mm_set_ledger(&ms->mm, &ms->ledger);
}

void models_set_host_share(models_t *ms, model_entry_t *e, uint64_t bytes)
{
    e->host_share = bytes;
    update_bytes(ms, e);
}

bool models_fits(const models_t *ms, const model_entry_t *e)
{
    return mm_can_fit(&ms->mm, e->mm);
}

void models_memory_msg(const models_t *ms, const model_entry_t *e, char *buf, size_t len)
{
    char need[32], off[32], fr[32], wk[32];
    uint64_t workers = ledger_held_kind(&ms->ledger, LEDGER_WORKER);
    snprintf(buf, len,
             "model '%s' needs %s of memory (weights and the KV cache of a %u-token context); "
             "this node offers %s%s and %s of it is free%s%s%s",
             e->mm->name, ledger_fmt(e->mm->bytes, need, sizeof need), load_ctx(e),
             ledger_fmt(ms->ledger.offered, off, sizeof off),
             ms->cfg->max_vram_bytes ? " (--max-vram)" : "",
             ledger_fmt(ledger_free(&ms->ledger), fr, sizeof fr),
             workers ? "; split worker shards hold " : "",
             workers ? ledger_fmt(workers, wk, sizeof wk) : "",
             e->host_share ? "" : " (a smaller --ctx-size or more memory would let it load)");
}

/* ---- load outcomes ---- */

static void answer_load_waiters(models_t *ms, model_entry_t *e, int status)
{
    httpd_req_t *req;
    while ((req = unpark(e, PARK_LOAD))) {
        if (status == 200) {
            char body[512];
            int n =
                snprintf(body, sizeof body,
                         "{\"status\":\"success\",\"message\":\"loaded model %s\"}", e->mm->name);
            httpd_respond(req, 200, "application/json", body, (size_t)n, NULL);
        } else if (status == 404) {
            httpd_respond_error(req, 404, "invalid_request_error", "model_file_not_found",
                                "model file %s not found", e->path);
        } else if (status == 507) { /* does not fit in memory */
            char msg[512];
            models_memory_msg(ms, e, msg, sizeof msg);
            httpd_respond_error(req, 503, "unavailable", "insufficient_memory", "%s", msg);
        } else {
            httpd_respond_error(req, status, "server_error", "model_load_failed",
                                "model '%s' failed to load: %s", e->mm->name,
                                e->child->last_error[0] ? e->child->last_error : "unknown error");
        }
    }
}

static void preload_settled(models_t *ms, model_entry_t *e)
{
    if (e->preload && !e->preload_done) {
        e->preload_done = 1;
        if (ms->preload_pending && --ms->preload_pending == 0 && ms->on_preload_done)
            ms->on_preload_done(ms->data);
    }
}

static void load_result(models_t *ms, model_entry_t *e, bool ok)
{
    mm_model_t *m = e->mm;
    uint64_t now = now_ms(ms);
    bool missing = !ok && e->child->missing_file;
    if (!ok && !missing)
        LOGW("models", "loading %s failed: %s%s", m->name, e->child->last_error,
             m->attempt == 0 ? "; unloading every idle model and retrying once" : "");
    mm_load_done(&ms->mm, m, ok, missing, now);
    ms->state_changed = true;
    bool final = ms->mm.current != m;
    if (ok) {
        LOGI("models", "model %s loaded (%s slots: %u/%u)", m->name, mm_type_name(m->type),
             mm_count_loaded(&ms->mm, m->type), ms->mm.max_loaded[m->type]);
        answer_load_waiters(ms, e, 200);
        preload_settled(ms, e);
    } else if (final) {
        answer_load_waiters(ms, e, missing ? 404 : 500);
        preload_settled(ms, e);
    }
    run_actions(ms);
}

static void on_child_ready(supervisor_t *sv, sv_child_t *c)
{
    models_t *ms = sv->data;
    if (c->kind != SV_KIND_LLAMA) return;
    model_entry_t *e = models_find(ms, c->name);
    if (e && e->mm->state == MM_LOADING) load_result(ms, e, true);
}

static void on_child_load_failed(supervisor_t *sv, sv_child_t *c)
{
    models_t *ms = sv->data;
    if (c->kind != SV_KIND_LLAMA) return;
    model_entry_t *e = models_find(ms, c->name);
    if (e && e->mm->state == MM_LOADING) load_result(ms, e, false);
}

static void on_child_stopped(supervisor_t *sv, sv_child_t *c)
{
    models_t *ms = sv->data;
    if (c->kind != SV_KIND_LLAMA) return;
    model_entry_t *e = models_find(ms, c->name);
    if (!e) return;
    if (e->mm->state == MM_UNLOADING) {
        LOGI("models", "model %s unloaded", e->mm->name);
        mm_unload_done(&ms->mm, e->mm, now_ms(ms));
        ms->state_changed = true;
        httpd_req_t *req;
        while ((req = unpark(e, PARK_UNLOAD))) {
            char body[256];
            int n =
                snprintf(body, sizeof body,
                         "{\"status\":\"success\",\"message\":\"unloaded model %s\"}", e->mm->name);
            httpd_respond(req, 200, "application/json", body, (size_t)n, NULL);
        }
    }
    run_actions(ms);
}

static int set_child_options(model_entry_t *e)
{
    if (!e->mesh_args) return sv_set_options(e->child, e->ctx_size, e->llamacpp_args);
    buf_t b;
    buf_init(&b, 1 << 16);
    buf_printf(&b, "%s %s", e->llamacpp_args ? e->llamacpp_args : "", e->mesh_args);
    int rc = b.data ? sv_set_options(e->child, e->ctx_size, b.data) : -ENOMEM;
    buf_free(&b);
    return rc;
}

int models_set_mesh_args(models_t *ms, model_entry_t *e, const char *args)
{
    (void)ms;
    char *copy = args ? strdup(args) : NULL;
    if (args && !copy) return -ENOMEM;
    free(e->mesh_args);
    e->mesh_args = copy;
    return 0;
}

void models_load(models_t *ms, model_entry_t *e, bool reload)
{
    if (reload && (e->mm->state == MM_LOADED || e->mm->state == MM_LOADING))
        mm_reload(&ms->mm, e->mm, now_ms(ms));
    else
        mm_load(&ms->mm, e->mm, now_ms(ms));
    run_actions(ms);
}

void models_unload(models_t *ms, model_entry_t *e)
{
    if (mm_unload(&ms->mm, e->mm, now_ms(ms)) == 0) run_actions(ms);
}

static void run_actions(models_t *ms)
{
    if (ms->running_actions) {
        ms->rerun = true;
        return;
    }
    ms->running_actions = true;
    mm_action_t a;
    do {
        ms->rerun = false;
        while (mm_next_action(&ms->mm, &a)) {
            model_entry_t *e = entry_of(a.model);
            httpd_req_t *req;
            switch (a.kind) {
            case MM_ACT_LOAD:
                ms->state_changed = true;
                LOGI("models", "loading %s (%s)", a.model->name, mm_type_name(a.model->type));
                if (set_child_options(e) != 0 || sv_start(e->child) != 0) {
                    if (!e->child->last_error[0])
                        snprintf(e->child->last_error, sizeof e->child->last_error,
                                 "could not start llama-server");
                    load_result(ms, e, false);
                }
                break;
            case MM_ACT_UNLOAD:
                ms->state_changed = true;
                LOGI("models", "unloading %s", a.model->name);
                sv_stop(e->child, UNLOAD_GRACE_MS);
                break;
            case MM_ACT_SERVE:
                for (unsigned i = 0; i < a.count && (req = unpark(e, PARK_REQUEST)); i++)
                    dispatch(ms, e, req);
                break;
            case MM_ACT_FAIL:
                if (a.reason == MM_FAIL_MEMORY) {
                    char msg[512];
                    models_memory_msg(ms, e, msg, sizeof msg);
                    LOGW("models", "not loading: %s", msg);
                    for (unsigned i = 0; i < a.count && (req = unpark(e, PARK_REQUEST)); i++)
                        httpd_respond_error(req, 503, "unavailable", "insufficient_memory", "%s",
                                            msg);
                    answer_load_waiters(ms, e, 507);
                    preload_settled(ms, e);
                    break;
                }
                for (unsigned i = 0; i < a.count && (req = unpark(e, PARK_REQUEST)); i++) {
                    if (a.status == 404)
                        httpd_respond_error(req, 404, "invalid_request_error",
                                            "model_file_not_found", "model '%s': file %s not found",
                                            a.model->name, e->path);
                    else if (a.status == 503)
                        httpd_respond_error(req, 503, "unavailable", "model_unloaded",
                                            "model '%s' was unloaded", a.model->name);
                    else
                        httpd_respond_error(req, 500, "server_error", "model_load_failed",
                                            "model '%s' failed to load: %s", a.model->name,
                                            e->child->last_error[0] ? e->child->last_error
                                                                    : "unknown error");
                }
                break;
            default:
                break;
            }
        }
    } while (ms->rerun);
    ms->running_actions = false;
    if (ms->state_changed) {
        ms->state_changed = false;
        if (ms->on_change) ms->on_change(ms->data);
    }
}

/* ---- registry ---- */

static int add_entry(models_t *ms, const config_model_t *cm, bool preload, char *err, size_t errlen)
{
    if (ms->n >= MM_MAX_MODELS) {
        snprintf(err, errlen, "too many models");
        return -E2BIG;
    }
    mm_type_t type;
    gguf_info_t gi;
    struct stat st;
    uint64_t size = stat(cm->path, &st) == 0 ? (uint64_t)st.st_size : 0;
    int grc = gguf_info_read(cm->path, &gi);
    if (cm->type != MODEL_TYPE_AUTO) {
        type = cm->type == MODEL_TYPE_EMBEDDING   ? MM_EMBEDDING
               : cm->type == MODEL_TYPE_RERANKING ? MM_RERANKING
                                                  : MM_LLM;
    } else if (grc == 0) {
        type = gguf_info_type(&gi);
    } else {
        LOGW("models", "%s: cannot read GGUF metadata (%s); treating it as an llm", cm->path,
             grc == -EINVAL ? "not a valid GGUF file" : strerror(-grc));
        type = MM_LLM;
    }
    model_entry_t *e = &ms->entries[ms->n];
    memset(e, 0, sizeof *e);
    e->mm = mm_add(&ms->mm, cm->name, type, MM_DEV_CPU);
    if (!e->mm) {
        snprintf(err, errlen, "duplicate model name '%s'", cm->name);
        return -EEXIST;
    }
    e->mm->data = e;
    e->path = strdup(cm->path);
    e->size = size;
    e->n_layers = grc == 0 ? gi.block_count : 0;
    if (grc == 0) {
        e->train_ctx = gi.context_length;
        e->shape = (ledger_shape_t){.n_layers = gi.block_count,
                                    .n_embd = gi.embedding_length,
                                    .n_head = gi.head_count,
                                    .n_head_kv = gi.head_count_kv,
                                    .key_length = gi.key_length,
                                    .value_length = gi.value_length};
    }
    e->preload = preload;
    e->ctx_size = ms->cfg->ctx_size;
    e->llamacpp_args = ms->cfg->llamacpp_args ? strdup(ms->cfg->llamacpp_args) : NULL;
    snprintf(e->backend, sizeof e->backend, "cpu");
    model_type_t st_type = type == MM_EMBEDDING   ? MODEL_TYPE_EMBEDDING
                           : type == MM_RERANKING ? MODEL_TYPE_RERANKING
                                                  : MODEL_TYPE_LLM;
    update_bytes(ms, e);
    int rc = sv_add(ms->sv, cm->name, cm->path, st_type, e->ctx_size, e->llamacpp_args, &e->child);
    if (rc) {
        snprintf(err, errlen, "model %s: %s", cm->name, strerror(-rc));
        return rc;
    }
    ms->n++;
    return 0;
}

int models_init(models_t *ms, uv_loop_t *loop, const config_t *cfg, supervisor_t *sv, char *err,
                size_t errlen)
{
    memset(ms, 0, sizeof *ms);
    ms->loop = loop;
    ms->cfg = cfg;
    ms->sv = sv;
    mm_init(&ms->mm, cfg->max_loaded);
    sv->data = ms;
    sv->on_ready = on_child_ready;
    sv->on_load_failed = on_child_load_failed;
    sv->on_stopped = on_child_stopped;
    for (size_t i = 0; i < cfg->n_models; i++) {
        int rc = add_entry(ms, &cfg->models[i], !cfg->models[i].from_dir, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

void models_preload(models_t *ms)
{
    unsigned planned[MM_N_TYPES] = {0};
    for (size_t i = 0; i < ms->n; i++) {
        model_entry_t *e = &ms->entries[i];
        if (!e->preload) continue;
        if (planned[e->mm->type] >= ms->mm.max_loaded[e->mm->type]) {
            LOGI("models", "%s will load on first use (%s slots full: --max-loaded-models)",
                 e->mm->name, mm_type_name(e->mm->type));
            e->preload = 0;
            continue;
        }
        planned[e->mm->type]++;
        ms->preload_pending++;
    }
    for (size_t i = 0; i < ms->n; i++)
        if (ms->entries[i].preload) mm_load(&ms->mm, ms->entries[i].mm, now_ms(ms));
    run_actions(ms);
    if (ms->preload_pending == 0 && ms->on_preload_done) ms->on_preload_done(ms->data);
}

void models_free(models_t *ms)
{
    for (size_t i = 0; i < ms->n; i++) {
        free(ms->entries[i].path);
        free(ms->entries[i].llamacpp_args);
        free(ms->entries[i].mesh_args);
    }
    free(ms->last_stats_json);
    free(ms->last_usage_json);
}

/* ---- model-manager API ---- */

static json_int_t unix_of(models_t *ms, uint64_t mono_ms)
{
    uint64_t now = now_ms(ms);
    return (json_int_t)time(NULL) - (json_int_t)((now - (mono_ms < now ? mono_ms : now)) / 1000);
}

static void api_health(models_t *ms, httpd_req_t *req)
{
    json_t *all = json_array();
    model_entry_t *recent = NULL;
    for (size_t i = 0; i < ms->n; i++) {
        model_entry_t *e = &ms->entries[i];
        if (e->mm->state != MM_LOADED) continue;
        if (!recent || e->mm->last_use > recent->mm->last_use) recent = e;
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%u", e->child->port);
        json_array_append_new(all, json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:s}", "model_name",
                                             e->mm->name, "checkpoint", e->path, "last_use",
                                             unix_of(ms, e->mm->last_use), "type",
                                             mm_type_name(e->mm->type), "device", "cpu",
                                             "backend_url", url, "status", models_status(e)));
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
    for (size_t i = 0; i < ms->n; i++) {
        model_entry_t *e = &ms->entries[i];
        json_array_append_new(
            data, json_pack("{s:s,s:s,s:s,s:I,s:b,s:s}", "model_name", e->mm->name, "checkpoint",
                            e->path, "type", mm_type_name(e->mm->type), "size", (json_int_t)e->size,
                            "loaded", e->mm->state == MM_LOADED, "status", models_status(e)));
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
    json_int_t ctx = 0;
    json_error_t je;
    if (json_unpack_ex(b, &je, 0, "{s:s,s?I,s?s,s?s}", "model_name", &name, "ctx_size", &ctx,
                       "llamacpp_args", &args, "llamacpp_backend", &backend) != 0) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_body",
                            "expected {\"model_name\": string, \"ctx_size\"?: integer, "
                            "\"llamacpp_args\"?: string, \"llamacpp_backend\"?: string}: %s",
                            je.text);
        json_decref(b);
        return;
    }
    model_entry_t *e = models_find(ms, name);
    if (!e) {
        httpd_respond_error(req, 404, "invalid_request_error", "model_not_found",
                            "model '%s' is not known to this node", name);
        goto out;
    }
    if (file_missing(e)) {
        httpd_respond_error(req, 404, "invalid_request_error", "model_file_not_found",
                            "model '%s': file %s not found", e->mm->name, e->path);
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
    const char *bad = args ? models_forbidden_arg(args) : NULL;
    if (bad) {
        httpd_respond_error(req, 400, "invalid_request_error", "forbidden_llamacpp_arg",
                            "llamacpp_args may not set %s: the node manages it", bad);
        goto out;
    }
    if (backend && *backend && strcmp(backend, "cpu") != 0 && strcmp(backend, "auto") != 0) {
        httpd_respond_error(req, 400, "invalid_request_error", "backend_not_installed",
                            "llamacpp backend '%s' is not installed on this node; installed: cpu",
                            backend);
        goto out;
    }
    /* Precedence: this request > CLI > built-in defaults. */
    uint32_t want_ctx = has_ctx ? (uint32_t)ctx : ms->cfg->ctx_size;
    const char *want_args = args ? args : ms->cfg->llamacpp_args;
    bool same = want_ctx == e->ctx_size &&
                strcmp(want_args ? want_args : "", e->llamacpp_args ? e->llamacpp_args : "") == 0;
    if (!same) {
        free(e->llamacpp_args);
        e->llamacpp_args = want_args ? strdup(want_args) : NULL;
        e->ctx_size = want_ctx;
        update_bytes(ms, e);
    }
    if (e->mm->state == MM_LOADED && same && !e->mm->unload_pending) {
        mm_load(&ms->mm, e->mm, now_ms(ms)); /* no-op, refreshes last use */
        char body[256];
        int n = snprintf(body, sizeof body,
                         "{\"status\":\"success\",\"message\":\"model %s already loaded\"}", name);
        httpd_respond(req, 200, "application/json", body, (size_t)n, NULL);
        goto out;
    }
    if (park(ms, e, req, PARK_LOAD) != 0) {
        httpd_respond_error(req, 503, "unavailable", "busy", "too many pending loads");
        goto out;
    }
    if (!same && (e->mm->state == MM_LOADED || e->mm->state == MM_LOADING))
        mm_reload(&ms->mm, e->mm, now_ms(ms));
    else
        mm_load(&ms->mm, e->mm, now_ms(ms));
    run_actions(ms);
out:
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
        if (!e || mm_unload(&ms->mm, e->mm, now_ms(ms)) != 0) {
            httpd_respond_error(req, 404, "invalid_request_error", "model_not_loaded",
                                "model '%s' is not loaded", json_string_value(jn));
        } else if (e->mm->state == MM_UNLOADED) { /* was only queued */
            httpd_respond(req, 200, "application/json", "{\"status\":\"success\"}", 20, NULL);
        } else if (park(ms, e, req, PARK_UNLOAD) != 0) {
            httpd_respond_error(req, 503, "unavailable", "busy", "too many pending unloads");
        }
        run_actions(ms);
    } else {
        /* everything: answer now, the unloads proceed as models become idle */
        unsigned n = 0;
        for (size_t i = 0; i < ms->n; i++)
            if (mm_unload(&ms->mm, ms->entries[i].mm, now_ms(ms)) == 0) n++;
        run_actions(ms);
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

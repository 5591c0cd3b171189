#include "models.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "gguf_info.h"
#include "gguf_tensors.h"
#include "llama_args.h"
#include "log.h"
#include "meshstat.h"
#include "models_int.h"
#include "models_slots.h"
#include "options.h"
#include "proxy.h"
#include "serve_opts.h"
#include "util.h"

#define MAX_PARKED_PER_MODEL 4096
#define UNLOAD_GRACE_MS 5000

struct parked {
    httpd_req_t *req;
    models_t *ms;
    model_entry_t *e;
    int kind;
    parked_t *next;
};

uint64_t models_now(models_t *ms)
{
    return ms->clock ? ms->clock(ms->clock_data) : uv_now(ms->loop);
}

static model_entry_t *entry_of(const mm_model_t *m)
{
    return m->data;
}

/* The slot of that name, deleted or not (the supervisor's reports, a re-download). */
static model_entry_t *find_slot(models_t *ms, const char *name)
{
    for (size_t i = 0; i < ms->n; i++)
        if (strcmp(ms->entries[i].mm->name, name) == 0) return &ms->entries[i];
    return NULL;
}

model_entry_t *models_find(models_t *ms, const char *name)
{
    model_entry_t *e = find_slot(ms, name);
    return e && !e->deleted ? e : NULL;
}

model_entry_t *models_next(const models_t *ms, const model_entry_t *prev)
{
    for (size_t i = prev ? (size_t)(prev - ms->entries) + 1 : 0; i < ms->n; i++)
        if (!ms->entries[i].deleted) return (model_entry_t *)&ms->entries[i];
    return NULL;
}

size_t models_count(const models_t *ms)
{
    size_t n = 0;
    for (const model_entry_t *e = NULL; (e = models_next(ms, e));)
        n++;
    return n;
}

model_entry_t *models_only(const models_t *ms)
{
    model_entry_t *e = models_next(ms, NULL);
    return e && !models_next(ms, e) ? e : NULL;
}

model_state_t models_state(const model_entry_t *e)
{
    switch (e->mm->state) {
    case MM_LOADED:
        return e->child->state == CHILD_READY ? MODEL_READY : MODEL_LOADING;
    case MM_LOADING:
        return MODEL_LOADING;
    default:
        return (e->mm->queued || e->mm->waiters) ? MODEL_LOADING : MODEL_UNLOADED;
    }
}

const char *model_state_name(model_state_t s)
{
    switch (s) {
    case MODEL_READY:
        return "ready";
    case MODEL_LOADING:
        return "loading";
    default:
        return "unloaded";
    }
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

int models_park(models_t *ms, model_entry_t *e, httpd_req_t *req, int kind)
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

struct flight {
    models_t *ms;
    model_entry_t *e;
    proxy_t *proxy; /* valid until on_flight_done */
    uint64_t tag;   /* the request's httpd tag */
    flight_t *next;
};

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
    for (flight_t **pp = &f->e->flights; *pp; pp = &(*pp)->next) {
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    }
    if (f->e->child->in_flight) f->e->child->in_flight--;
    metrics_in_flight_add(meshstat_metrics(ms->stat), f->e->mm->name, -1);
    if (ms->on_flight_tail && f->tag) ms->on_flight_tail(ms->tail_data, f->tag, status, tail, len);
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
    mm_request_end(&ms->mm, f->e->mm, models_now(ms));
    free(f);
    models_run(ms);
}

/* The request is already counted in flight. */
static void dispatch(models_t *ms, model_entry_t *e, httpd_req_t *req)
{
    if (e->child->state != CHILD_READY) {
        httpd_respond_error(req, 503, "unavailable", "model_unavailable",
                            "model '%s' is restarting (its server exited or stopped "
                            "responding); retry shortly",
                            e->mm->name);
        mm_request_end(&ms->mm, e->mm, models_now(ms));
        return;
    }
    flight_t *f = calloc(1, sizeof *f);
    if (!f) {
        httpd_respond_error(req, 500, "server_error", "out_of_memory", "out of memory");
        mm_request_end(&ms->mm, e->mm, models_now(ms));
        return;
    }
    f->ms = ms;
    f->e = e;
    f->tag = req->tag;
    f->next = e->flights;
    e->flights = f;
    e->child->in_flight++; /* the supervisor watches a busy child for progress */
    metrics_in_flight_add(meshstat_metrics(ms->stat), e->mm->name, 1);
    proxy_t *h = NULL;
    proxy_opts_t po = {
        .strip_authorization = ms->cfg->api_key != NULL,
        .on_done = on_flight_done,
        .data = f,
        .handle = &h,
    };
    int rc = proxy_forward(ms->loop, req, e->child->port, &po);
    if (rc == 0)
        f->proxy = h;
    else if (!h) /* not even started (the client has its 500): on_done did not run */
        on_flight_done(f, false, 500, NULL, 0);
    /* else: it failed after starting, and on_done already ran */
}

/* The model's server stopped responding and was killed: its requests get a 503 now instead of
 * waiting for the upstream timeout. */
static void on_child_wedged(supervisor_t *sv, sv_child_t *c)
{
    models_t *ms = sv->data;
    if (c->kind != SV_KIND_LLAMA) return;
    model_entry_t *e = find_slot(ms, c->name);
    if (!e) return;
    char why[256];
    snprintf(why, sizeof why,
             "model '%s' stopped responding; its server is being restarted, retry shortly",
             e->mm->name);
    while (e->flights) {
        flight_t *f = e->flights;
        proxy_cancel(f->proxy, 503, "model_unavailable", why); /* on_flight_done unlinks f */
        if (e->flights == f) e->flights = f->next;             /* defensive: never loop forever */
    }
}

/* The file of e is unusable until it changes (id: what was checked). */
static void remember_bad(model_entry_t *e, const file_id_t *id, const char *reason)
{
    e->bad = true;
    e->bad_id = *id;
    snprintf(e->bad_reason, sizeof e->bad_reason, "%s", reason);
}

static int vet_file(const char *path, file_id_t *id, char *why, size_t len);

/* Known to be unusable, and unchanged since, or a new version of the file that is not a
 * complete GGUF: fail at once, evict nothing. A version found complete is not read again. */
bool models_known_bad(models_t *ms, model_entry_t *e)
{
    (void)ms;
    file_id_t now;
    bool have = file_id_of(e->path, &now) == 0;
    if (e->bad) {
        if (have && file_id_same(&now, &e->bad_id)) return true;
        LOGI("models", "%s changed since it failed to load; trying it again", e->path);
        e->bad = false;
    }
    if (!have || (e->vetted && file_id_same(&now, &e->vetted_id))) return false;
    char why[256];
    int rc = vet_file(e->path, &now, why, sizeof why);
    if (rc == -ENOENT) return false; /* gone meanwhile: the load reports it */
    if (rc) {
        LOGW("models", "model %s: %s is unusable (%s); nothing is unloaded for it", e->mm->name,
             e->path, why);
        remember_bad(e, &now, why);
        return true;
    }
    e->vetted = true;
    e->vetted_id = now;
    return false;
}

void models_respond_bad(model_entry_t *e, httpd_req_t *req)
{
    httpd_respond_error(req, 500, "server_error", "model_file_invalid",
                        "model '%s' failed to load: %s (file %s is unusable; it is tried again "
                        "once it changes)",
                        e->mm->name, e->bad_reason, e->path);
}

/* A model whose file is gone answers 404 before anything is evicted for it. */
bool models_file_missing(model_entry_t *e)
{
    struct stat st;
    return e->mm->state == MM_UNLOADED && stat(e->path, &st) != 0 && errno == ENOENT;
}

void models_route(models_t *ms, model_entry_t *e, httpd_req_t *req)
{
    if (e->deleted) { /* a pointer to it taken before its delete */
        httpd_respond_error(req, 404, "invalid_request_error", "model_not_found",
                            "model '%s' not found (deleted)", e->mm->name);
        return;
    }
    if (models_file_missing(e)) {
        httpd_respond_error(req, 404, "invalid_request_error", "model_file_not_found",
                            "model '%s': file %s not found", e->mm->name, e->path);
        return;
    }
    if (e->mm->state == MM_UNLOADED && models_known_bad(ms, e)) {
        models_respond_bad(e, req);
        return;
    }
    /* demand: every request this node's llama-server takes, direct or through a tunnel */
    demand_record(&ms->demand, e->mm->name, models_now(ms), (uint64_t)time(NULL));
    mm_req_result_t r = mm_request_begin(&ms->mm, e->mm, models_now(ms));
    if (r == MM_SERVE_NOW) {
        dispatch(ms, e, req);
    } else {
        if (models_park(ms, e, req, PARK_REQUEST) != 0) {
            mm_request_cancel(&ms->mm, e->mm);
            httpd_respond_error(req, 503, "unavailable", "too_many_waiting",
                                "too many requests waiting for model '%s' to load", e->mm->name);
            return;
        }
        LOGD("models", "request for %s waits for its load", e->mm->name);
    }
    models_run(ms);
}

/* ---- memory ---- */

static uint32_t load_ctx(const model_entry_t *e)
{
    return models_slot_ctx(e);
}

uint64_t models_need_bytes(const models_t *ms, const model_entry_t *e)
{
    /* slots sized by the node: the plans count the slots asked for, else one */
    if (models_slots_sized(e)) {
        slots_in_t in = models_slots_in(ms, e, UINT64_MAX);
        return slots_need(&in);
    }
    /* the arguments in the order llama-server reads them (set_child_options): the last wins */
    llama_mem_t mem = LLAMA_MEM_INIT;
    llama_args_memory(e->serve_args, &mem);
    llama_args_memory(e->llamacpp_args, &mem);
    uint32_t ctx = !mem.has_ctx ? load_ctx(e) : mem.ctx ? mem.ctx : e->train_ctx;
    uint64_t kv = ledger_kv_bytes_as(&e->shape, ctx, mem.k_x32, mem.v_x32);
    uint64_t compute = ledger_compute_bytes(&e->shape, ctx, llama_mem_ubatch(&mem));
    uint64_t extra = kv + compute < kv ? UINT64_MAX : kv + compute;
    return ledger_need(e->size + e->serve_bytes, extra);
}

uint64_t models_host_bytes(const models_t *ms, const model_entry_t *e)
{
    return ledger_host_bytes(e->serve_bytes, e->input_bytes, e->output_bytes,
                             ms->cfg->split_private);
}

void models_update_bytes(models_t *ms, model_entry_t *e)
{
    uint64_t b = e->host_share ? e->host_share : models_need_bytes(ms, e);
    if (!e->host_share && e->slot_ctx && models_slots_sized(e)) { /* running with its slots */
        slots_in_t in = models_slots_in(ms, e, UINT64_MAX);
        b = slots_bytes(&in, e->slots);
    }
    mm_set_bytes(e->mm, b);
}

void models_on_preload_done(models_t *ms, void (*done)(void *data), void *data)
{
    ms->on_preload_done = done;
    ms->data = data;
}

void models_watch(models_t *ms, void (*on_change)(void *data), void *data)
{
    ms->on_change = on_change;
    ms->data = data;
}

void models_set_loader(models_t *ms,
                       int (*load_ref)(void *data, const char *ref, char *name, size_t len,
                                       httpd_req_t *req),
                       void *data)
{
    ms->load_ref = load_ref;
    ms->load_ref_data = data;
}

void models_set_devices(models_t *ms, const devices_t *devs)
{
    unsigned bits = 0;
    for (unsigned i = 0; devs && i < devs->n; i++)
        bits |= mm_device_class(devs->dev[i].backend);
    ms->device_class = bits ? bits : MM_DEV_CPU;
    for (model_entry_t *e = NULL; (e = models_next(ms, e));)
        e->mm->device = ms->device_class;
}

void models_set_offer(models_t *ms, uint64_t offered, uint64_t device_bytes)
{
    ms->device_bytes = device_bytes;
    ledger_init(&ms->ledger, offered);
    mm_set_ledger(&ms->mm, &ms->ledger);
}

void models_set_host_share(models_t *ms, model_entry_t *e, uint64_t bytes)
{
    e->host_share = bytes;
    models_update_bytes(ms, e);
}

bool models_fits(const models_t *ms, const model_entry_t *e)
{
    return mm_can_fit(&ms->mm, e->mm);
}

void models_memory_msg(const models_t *ms, const model_entry_t *e, char *buf, size_t len)
{
    char need[32], off[32], fr[32], wk[32];
    uint64_t workers = ledger_held_kind(&ms->ledger, LEDGER_WORKER);
    unsigned want = models_slots_sized(e) ? models_slots_wanted(e) : 0;
    snprintf(buf, len,
             "model '%s' needs %s of memory (weights and the KV cache of %u slot(s) of a "
             "%u-token context); this node offers %s%s and %s of it is free%s%s%s",
             e->mm->name, ledger_fmt(e->mm->bytes, need, sizeof need), want ? want : 1, load_ctx(e),
             ledger_fmt(ms->ledger.offered, off, sizeof off),
             ms->cfg->max_vram_bytes ? " (--max-vram)" : "",
             ledger_fmt(ledger_free(&ms->ledger), fr, sizeof fr),
             workers ? "; split worker shards hold " : "",
             workers ? ledger_fmt(workers, wk, sizeof wk) : "",
             e->host_share ? ""
             : want > 1    ? " (fewer --slots, a smaller --ctx-size or more memory would let it "
                             "load)"
                           : " (a smaller --ctx-size or more memory would let it load)");
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

/* The outcome of e's load (ok, or failed for reason why). */
static void load_result(models_t *ms, model_entry_t *e, bool ok, mm_load_err_t why)
{
    mm_model_t *m = e->mm;
    uint64_t now = models_now(ms);
    if (!ok && why != MM_LOAD_ERR_MISSING)
        LOGW("models", "loading %s failed: %s%s", m->name, e->child->last_error,
             why == MM_LOAD_ERR_FINAL ? " (a retry cannot fix this: nothing is unloaded for it)"
             : m->attempt == 0        ? "; unloading every idle model and retrying once"
                                      : "");
    mm_load_done(&ms->mm, m, ok, why, now);
    if (!ok) {
        models_slots_reset(e);
        models_update_bytes(ms, e);
    }
    metrics_load_end(meshstat_metrics(ms->stat), m->name, ok, httpd_now_ns());
    ms->state_changed = true;
    bool final = ms->mm.current != m;
    if (ok) {
        LOGI("models", "model %s loaded (%u parallel slot(s); %s models loaded: %u of %u)", m->name,
             models_slots(e), mm_type_name(m->type), mm_count_loaded(&ms->mm, m->type),
             ms->mm.max_loaded[m->type]);
        answer_load_waiters(ms, e, 200);
        preload_settled(ms, e);
    } else if (final) {
        answer_load_waiters(ms, e, why == MM_LOAD_ERR_MISSING ? 404 : 500);
        preload_settled(ms, e);
    }
    models_run(ms);
}

/* ---- the load decision: MM_ACT_LOAD starts here ----
 * 1. check the file off the loop (model_file.h): missing → 404, unusable → fail at once and
 *    remember it; 2. start llama-server with the model's options and a load timeout scaled by
 *    its size; 3. the supervisor reports ready (on_child_ready) or failed (on_child_load_failed),
 *    and load_result tells mm how retryable the failure is. */

static void load_spawn(models_t *ms, model_entry_t *e);
static int set_child_options(models_t *ms, model_entry_t *e);

static void on_file_checked(void *data, int rc, const file_id_t *id, const char *why)
{
    model_entry_t *e = data;
    models_t *ms = e->ms;
    if (e->mm->state != MM_LOADING) return; /* cannot happen: loads end only through here */
    if (rc == -ENOENT) {
        e->child->missing_file = true;
        snprintf(e->child->last_error, sizeof e->child->last_error, "model file %s: %s", e->path,
                 strerror(ENOENT));
        load_result(ms, e, false, MM_LOAD_ERR_MISSING);
        return;
    }
    if (rc == -ECANCELED || rc == -ENOMEM) {
        snprintf(e->child->last_error, sizeof e->child->last_error, "%s", strerror(-rc));
        load_result(ms, e, false, MM_LOAD_ERR_RETRY);
        return;
    }
    if (rc) {
        snprintf(e->child->last_error, sizeof e->child->last_error, "%s", why);
        remember_bad(e, id, why);
        load_result(ms, e, false, MM_LOAD_ERR_FINAL);
        return;
    }
    e->checked = *id;
    load_spawn(ms, e);
}

static void load_begin(models_t *ms, model_entry_t *e)
{
    ms->state_changed = true;
    e->child->missing_file = false;
    e->child->last_error[0] = '\0';
    LOGI("models", "loading %s (%s)", e->mm->name, mm_type_name(e->mm->type));
    metrics_load_begin(meshstat_metrics(ms->stat), e->mm->name, httpd_now_ns());
    int rc = model_file_check_async(ms->loop, e->path, on_file_checked, e);
    if (rc) {
        snprintf(e->child->last_error, sizeof e->child->last_error, "%s", strerror(-rc));
        load_result(ms, e, false, MM_LOAD_ERR_RETRY);
    }
}

static void load_spawn(models_t *ms, model_entry_t *e)
{
    e->child->load_timeout_ms = sv_default_load_timeout_ms(e->size);
    models_slots_size(ms, e);
    if (set_child_options(ms, e) != 0 ||
        (ms->child_start ? ms->child_start : sv_start)(e->child) != 0) {
        if (!e->child->last_error[0])
            snprintf(e->child->last_error, sizeof e->child->last_error,
                     "could not start llama-server");
        load_result(ms, e, false, e->child->missing_file ? MM_LOAD_ERR_MISSING : MM_LOAD_ERR_RETRY);
    }
}

static void on_child_ready(supervisor_t *sv, sv_child_t *c)
{
    models_t *ms = sv->data;
    if (c->kind != SV_KIND_LLAMA) return;
    model_entry_t *e = find_slot(ms, c->name);
    if (e && e->mm->state == MM_LOADING) load_result(ms, e, true, MM_LOAD_ERR_RETRY);
}

static void on_child_load_failed(supervisor_t *sv, sv_child_t *c)
{
    models_t *ms = sv->data;
    if (c->kind != SV_KIND_LLAMA) return;
    model_entry_t *e = find_slot(ms, c->name);
    if (!e) return;
    if (e->mm->state == MM_LOADED) {
        /* a restart (after a crash or a hang) failed: give the slot back; the next request
         * loads it afresh */
        LOGW("models", "model %s could not be restarted (%s); unloading it", e->mm->name,
             c->last_error);
        if (mm_unload(&ms->mm, e->mm, models_now(ms)) == 0) models_run(ms);
        return;
    }
    if (e->mm->state != MM_LOADING) return;
    mm_load_err_t why = MM_LOAD_ERR_RETRY;
    if (c->missing_file) {
        why = MM_LOAD_ERR_MISSING;
    } else if (c->fail_kind == CHILD_FAIL_FILE) {
        why = MM_LOAD_ERR_FINAL;
        remember_bad(e, &e->checked, c->last_error);
    } else if (c->fail_kind == CHILD_FAIL_ARGS) {
        why = MM_LOAD_ERR_FINAL; /* its options are wrong: not remembered, new options may fix it */
    }
    load_result(ms, e, false, why);
}

static void on_child_stopped(supervisor_t *sv, sv_child_t *c)
{
    models_t *ms = sv->data;
    if (c->kind != SV_KIND_LLAMA) return;
    model_entry_t *e = find_slot(ms, c->name);
    if (!e) return;
    if (e->mm->state == MM_UNLOADING) {
        LOGI("models", "model %s unloaded", e->mm->name);
        mm_unload_done(&ms->mm, e->mm, models_now(ms));
        models_slots_reset(e);
        models_update_bytes(ms, e);
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
    models_run(ms);
}

/* A solo model on a node with devices and --offload-ram that does not fit on the devices'
 * memory left for it: "-ngl K" (ledger_gpu_layers), logged; "" otherwise (llama.cpp's own
 * placement: every layer on the devices). A split host's layers come from its plan. */
static void offload_args(models_t *ms, model_entry_t *e, char *out, size_t len)
{
    out[0] = '\0';
    if (e->mesh_args || !ms->device_bytes || ms->ledger.offered <= ms->device_bytes) return;
    uint64_t others = ledger_held(&ms->ledger) - ledger_held_for(&ms->ledger, e->mm->name);
    uint64_t on_device = others >= ms->device_bytes ? 0 : ms->device_bytes - others;
    int k = ledger_gpu_layers(e->mm->bytes, e->n_layers, on_device);
    if (k < 0) return;
    char need[32], dev[32];
    LOGI("models",
         "model %s: %d of its %u layers on the devices, the rest on the CPU from RAM "
         "(partial offload: it needs %s, the devices have %s for it)",
         e->mm->name, k, e->n_layers, ledger_fmt(e->mm->bytes, need, sizeof need),
         ledger_fmt(on_device, dev, sizeof dev));
    snprintf(out, len, "-ngl %d", k);
}

static int set_child_options(models_t *ms, model_entry_t *e)
{
    char ngl[32], np[24] = "";
    offload_args(ms, e, ngl, sizeof ngl);
    /* slots sized here (models_slots_size): -np S and S contexts of a slot's size */
    uint32_t ctx = e->ctx_size;
    if (e->slot_ctx) {
        ctx = e->slot_ctx * e->slots; /* at most 2^24 × 64: no overflow */
        snprintf(np, sizeof np, "-np %u", e->slots);
    }
    if (!e->mesh_args && !e->serve_args && !ngl[0] && !np[0])
        return sv_set_options(e->child, ctx, e->llamacpp_args);
    buf_t b;
    buf_init(&b, 1 << 17);
    /* the operator's and the API's arguments come after the node's defaults: they win; a split
     * host's (--rpc ...) and its draft's placement on the host come last */
    buf_printf(&b, "%s %s %s %s %s %s", np, e->serve_args ? e->serve_args : "", ngl,
               e->llamacpp_args ? e->llamacpp_args : "", e->mesh_args ? e->mesh_args : "",
               serve_draft_placement(e->draft[0] != '\0', e->mesh_args != NULL));
    int rc = b.data ? sv_set_options(e->child, ctx, b.data) : -ENOMEM;
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
    if (e->deleted) return;
    if (reload && (e->mm->state == MM_LOADED || e->mm->state == MM_LOADING))
        mm_reload(&ms->mm, e->mm, models_now(ms));
    else
        mm_load(&ms->mm, e->mm, models_now(ms));
    models_run(ms);
}

void models_unload(models_t *ms, model_entry_t *e)
{
    if (mm_unload(&ms->mm, e->mm, models_now(ms)) != 0) return;
    /* a queued load dropped before it started (the planner stopped a --model that waits for
     * memory): its preload is settled, so the node's start goes on */
    if (e->mm->state == MM_UNLOADED) preload_settled(ms, e);
    models_run(ms);
}

void models_keep_alive(models_t *ms, model_entry_t *e, int64_t ms_idle)
{
    if (ms_idle == 0) {
        models_unload(ms, e);
        return;
    }
    mm_set_keep_alive(&ms->mm, e->mm, ms_idle > 0 ? (uint64_t)ms_idle : 0, models_now(ms));
    models_run(ms);
    if (ms->on_deadline) ms->on_deadline(ms->deadline_data);
}

uint64_t models_expires_unix_ms(models_t *ms, const model_entry_t *e)
{
    if (!e->mm->keep_alive || e->mm->state != MM_LOADED) return 0;
    uint64_t now = models_now(ms);
    /* idle or not: from its last use (a busy model's timer starts again when it ends) */
    uint64_t at = e->mm->last_use + e->mm->keep_alive;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t wall = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    return at > now ? wall + (at - now) : wall;
}

void models_delete(models_t *ms, model_entry_t *e)
{
    if (e->deleted) return;
    LOGI("models", "model %s deleted (%s)%s", e->mm->name, e->path,
         e->mm->state == MM_UNLOADED ? "" : "; unloading it");
    e->deleted = true;
    preload_settled(ms, e); /* a preload it had queued is dropped: the node's start goes on */
    mm_set_pinned(&ms->mm, e->mm, false);
    mm_unload(&ms->mm, e->mm, models_now(ms));
    ms->state_changed = true; /* listings, the announcement and the planner see it go */
    models_run(ms);
}

void models_run(models_t *ms)
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
                load_begin(ms, e);
                break;
            case MM_ACT_UNLOAD:
                ms->state_changed = true;
                LOGI("models", "unloading %s", a.model->name);
                metrics_unload(meshstat_metrics(ms->stat), a.model->name);
                (ms->child_stop ? ms->child_stop : sv_stop)(e->child, UNLOAD_GRACE_MS);
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
                    else if (a.reason == MM_FAIL_PINNED)
                        httpd_respond_error(req, 503, "unavailable", "slots_pinned",
                                            "model '%s' cannot load: every %s slot holds a "
                                            "pinned model (--pin)",
                                            a.model->name, mm_type_name(a.model->type));
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

/* What e knows of its file at path: its size, the GGUF metadata (layers, context, the KV
 * cache's shape) and its input and output layers' bytes. gguf_info_read's rc (gi set when 0). */
static int read_facts(model_entry_t *e, const char *path, gguf_info_t *gi)
{
    struct stat st;
    e->size = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    int grc = gguf_info_read(path, gi);
    e->n_layers = grc == 0 ? gi->block_count : 0;
    e->train_ctx = grc == 0 ? gi->context_length : 0;
    e->shape = (ledger_shape_t){0};
    e->input_bytes = e->output_bytes = 0;
    if (grc) return grc;
    e->shape = (ledger_shape_t){.n_layers = gi->block_count,
                                .n_embd = gi->embedding_length,
                                .n_head = gi->head_count,
                                .n_head_kv = gi->head_count_kv,
                                .key_length = gi->key_length,
                                .value_length = gi->value_length};
    gguf_tensors_t tt;
    if (gguf_tensors_read(path, &tt) == 0) {
        /* the input and output layers' bytes: what a split host keeps (ledger_host_bytes) */
        gguf_layer_bytes_t lb;
        gguf_tensors_layer_bytes(&tt, &lb);
        e->input_bytes = lb.input;
        e->output_bytes = lb.output;
        gguf_tensors_free(&tt);
    }
    return 0;
}

static int add_entry(models_t *ms, const config_model_t *cm, bool preload, char *err, size_t errlen)
{
    if (ms->n >= MM_MAX_MODELS) {
        snprintf(err, errlen, "too many models");
        return -E2BIG;
    }
    mm_type_t type;
    gguf_info_t gi;
    model_entry_t *e = &ms->entries[ms->n];
    memset(e, 0, sizeof *e);
    int grc = read_facts(e, cm->path, &gi);
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
    e->mm = mm_add(&ms->mm, cm->name, type, ms->device_class ? ms->device_class : MM_DEV_CPU);
    if (!e->mm) {
        snprintf(err, errlen, "duplicate model name '%s'", cm->name);
        return -EEXIST;
    }
    e->mm->data = e;
    e->ms = ms;
    e->path = strdup(cm->path);
    e->preload = preload;
    e->ctx_size = config_ctx_of(ms->cfg, cm->name);
    e->want_slots = config_slots_of(ms->cfg, cm->name);
    const char *args = config_llamacpp_args_of(ms->cfg, cm->name);
    e->llamacpp_args = args ? strdup(args) : NULL;
    snprintf(e->backend, sizeof e->backend, "cpu");
    model_type_t st_type = type == MM_EMBEDDING   ? MODEL_TYPE_EMBEDDING
                           : type == MM_RERANKING ? MODEL_TYPE_RERANKING
                                                  : MODEL_TYPE_LLM;
    int rc = models_serve_setup(ms, e);
    models_update_bytes(ms, e); /* with its serving features' arguments and files */
    if (rc) {
        snprintf(err, errlen, "model %s: %s", cm->name, strerror(-rc));
        return rc;
    }
    rc = sv_add(ms->sv, cm->name, cm->path, st_type, e->ctx_size, e->llamacpp_args, &e->child);
    if (rc) {
        snprintf(err, errlen, "model %s: %s", cm->name, strerror(-rc));
        return rc;
    }
    ms->n++;
    return 0;
}

/* A regular, readable GGUF whose tensor table fits in the file (a truncated download fails
 * here, not in llama-server, and before anything is evicted for it). 0, or -errno with why. */
static int vet_file(const char *path, file_id_t *id, char *why, size_t len)
{
    int rc = model_file_check(path, id, why, len);
    if (rc == -ENOENT) snprintf(why, len, "%s", strerror(ENOENT));
    gguf_tensors_t tt;
    if (rc == 0) {
        rc = gguf_tensors_read(path, &tt);
        if (rc == 0)
            gguf_tensors_free(&tt);
        else
            snprintf(why, len, "%s",
                     rc == -EINVAL ? "not a valid GGUF model: its header or tensor table is "
                                     "malformed, or its tensor data runs past the end of the "
                                     "file (truncated?)"
                                   : strerror(-rc));
    }
    return rc;
}

/* A file given with --model: vet_file. 0, or -errno with the file and why. */
static int check_named(const config_model_t *cm, char *err, size_t errlen)
{
    file_id_t id;
    char why[256];
    int rc = vet_file(cm->path, &id, why, sizeof why);
    if (rc)
        snprintf(err, errlen, "--model %s: %s; give the path of a complete .gguf model file",
                 cm->path, why);
    return rc;
}

int models_init(models_t *ms, uv_loop_t *loop, const config_t *cfg, supervisor_t *sv,
                meshstat_t *stat, char *err, size_t errlen)
{
    memset(ms, 0, sizeof *ms);
    ms->loop = loop;
    ms->stat = stat;
    ms->cfg = cfg;
    ms->sv = sv;
    mm_init(&ms->mm, cfg->max_loaded);
    demand_init(&ms->demand, cfg->tun.demand_window_ms);
    sv->data = ms;
    sv->on_ready = on_child_ready;
    sv->on_load_failed = on_child_load_failed;
    sv->on_stopped = on_child_stopped;
    sv->on_wedged = on_child_wedged;
    /* what the command line skipped (bad --models-dir entries), now that logging is set up */
    for (const char *l = cfg->notes; l && *l;) {
        size_t len = strcspn(l, "\n");
        LOGW("models", "%.*s", (int)len, l);
        l += len + (l[len] == '\n');
    }
    for (size_t i = 0; i < cfg->n_models; i++) {
        /* the user named this file: one that cannot be a model stops the start at once */
        int rc = cfg->models[i].from_dir ? 0 : check_named(&cfg->models[i], err, errlen);
        if (rc) return rc;
        rc = add_entry(ms, &cfg->models[i], !cfg->models[i].from_dir, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

/* A deleted entry's file is back (a re-download): the same slot, mm model and child (so every
 * pointer to them stays right), with the new file's facts; not loaded (the caller loads it). */
static int revive(models_t *ms, model_entry_t *e, const char *path)
{
    if (strcmp(e->path, path) != 0) {
        char *p = strdup(path), *cp = strdup(path);
        if (!p || !cp) {
            free(p);
            free(cp);
            return -ENOMEM;
        }
        free(e->path);
        e->path = p;
        free(e->child->path);
        e->child->path = cp;
    }
    gguf_info_t gi;
    read_facts(e, path, &gi);
    e->bad = e->vetted = false; /* a new file: checked again before its load */
    e->deleted = false;
    models_update_bytes(ms, e);
    LOGI("models", "model %s is back (%s)", e->mm->name, path);
    ms->state_changed = true;
    models_run(ms);
    return 0;
}

int models_add_file(models_t *ms, const char *path, model_entry_t **out, char *err, size_t errlen)
{
    config_model_t cm;
    int rc = config_parse_model_arg(path, &cm, err, errlen);
    if (rc) return rc;
    model_entry_t *e = find_slot(ms, cm.name);
    if (e && e->deleted) rc = revive(ms, e, cm.path);
    if (e) {
        free(cm.path);
        if (rc) snprintf(err, errlen, "model %s: %s", e->mm->name, strerror(-rc));
        *out = e;
        return rc;
    }
    rc = add_entry(ms, &cm, false, err, errlen);
    free(cm.path);
    if (rc) return rc;
    *out = &ms->entries[ms->n - 1];
    return 0;
}

void models_preload(models_t *ms)
{
    unsigned planned[MM_N_TYPES] = {0};
    uint64_t planned_bytes = 0;
    for (model_entry_t *e = NULL; (e = models_next(ms, e));) {
        if (!e->preload) continue;
        if (planned[e->mm->type] >= ms->mm.max_loaded[e->mm->type]) {
            LOGI("models", "%s will load on first use (%s slots full: --max-loaded-models)",
                 e->mm->name, mm_type_name(e->mm->type));
            e->preload = 0;
            continue;
        }
        /* in the order given: one that does not fit beside the ones before it is not queued
         * (queued, it would evict them as soon as they loaded) */
        if (!mm_fits_beside(&ms->mm, e->mm, planned_bytes)) {
            char need[32], held[32];
            LOGI("models",
                 "%s needs %s, which does not fit beside the %s of the models given before it: "
                 "it waits in the mesh catalog for a node with room (or for memory here)",
                 e->mm->name, ledger_fmt(e->mm->bytes, need, sizeof need),
                 ledger_fmt(planned_bytes, held, sizeof held));
            e->preload = 0;
            e->waits_memory = 1;
            continue;
        }
        planned_bytes += e->mm->bytes;
        planned[e->mm->type]++;
        ms->preload_pending++;
    }
    for (model_entry_t *e = NULL; (e = models_next(ms, e));)
        if (e->preload) mm_load(&ms->mm, e->mm, models_now(ms));
    models_run(ms);
    if (ms->preload_pending == 0 && ms->on_preload_done) ms->on_preload_done(ms->data);
}

bool models_preload_all_failed(const models_t *ms, char *why, size_t len)
{
    size_t named = 0, failed = 0, off = 0;
    why[0] = '\0';
    for (const model_entry_t *e = NULL; (e = models_next(ms, e));) {
        if (!e->preload) continue;
        named++;
        if (!e->preload_done || e->mm->state != MM_UNLOADED || !e->child->last_error[0]) continue;
        failed++;
        if (off < len)
            off += (size_t)snprintf(why + off, len - off, "%s%s: %s", off ? "; " : "", e->path,
                                    e->child->last_error);
    }
    return named > 0 && failed == named;
}

void models_free(models_t *ms)
{
    for (size_t i = 0; i < ms->n; i++) {
        free(ms->entries[i].path);
        free(ms->entries[i].llamacpp_args);
        free(ms->entries[i].mesh_args);
        free(ms->entries[i].serve_args);
    }
    free(ms->last_stats_json);
    free(ms->last_usage_json);
}

/* view — see view.h. */
#include "view.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model_ref.h"

/* ---- words ---- */

static const char *const SERVE_ROLES[] = {NULL, "replica", "host", "worker", "idle", "waiting"};
static const char *const STATES[] = {NULL, "unloaded", "loading", "ready", "standby"};
static const char *const TYPES[] = {"llm", "embedding", "reranking"};

static int word_index(const char *const *words, size_t n, const char *s)
{
    for (size_t i = 0; s && i < n; i++)
        if (words[i] && strcmp(words[i], s) == 0) return (int)i;
    return -1;
}

const char *view_serve_role_name(view_serve_role_t r)
{
    return (size_t)r < sizeof SERVE_ROLES / sizeof *SERVE_ROLES ? SERVE_ROLES[r] : NULL;
}

const char *view_state_name(view_state_t s)
{
    return (size_t)s < sizeof STATES / sizeof *STATES ? STATES[s] : NULL;
}

/* ---- building ---- */

void view_node_init(view_node_t *n)
{
    memset(n, 0, sizeof *n);
}

void view_node_free(view_node_t *n)
{
    free(n->available);
    free(n->serving);
    free(n->requested);
    free(n->plans);
    free(n->demand);
    free(n->sources);
    free(n->downloads);
    free(n->rtt);
    view_node_init(n);
}

/* Room for one more element in *arr (n used, *cap allocated), growing up to VIEW_MAX_LIST. */
static bool grow(void **arr, size_t n, size_t *cap, size_t elem)
{
    if (n < *cap) return true;
    if (n >= VIEW_MAX_LIST) return false;
    size_t c = *cap ? *cap * 2 : 4;
    if (c > VIEW_MAX_LIST) c = VIEW_MAX_LIST;
    void *p = realloc(*arr, c * elem);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}

static bool name_ok(const char *s, size_t max)
{
    return catalog_name_valid(s) && strlen(s) < max;
}

view_avail_t *view_add_available(view_node_t *n, const char *name)
{
    if (!name_ok(name, CATALOG_NAME_MAX) ||
        !grow((void **)&n->available, n->n_available, &n->cap_av_, sizeof *n->available))
        return NULL;
    view_avail_t *a = &n->available[n->n_available++];
    memset(a, 0, sizeof *a);
    strcpy(a->name, name);
    return a;
}

view_serving_t *view_add_serving(view_node_t *n, const char *model)
{
    if (!name_ok(model, CATALOG_NAME_MAX) ||
        !grow((void **)&n->serving, n->n_serving, &n->cap_sv_, sizeof *n->serving))
        return NULL;
    view_serving_t *s = &n->serving[n->n_serving++];
    memset(s, 0, sizeof *s);
    strcpy(s->model, model);
    return s;
}

bool view_add_requested(view_node_t *n, const char *name)
{
    if (!name_ok(name, CATALOG_NAME_MAX) ||
        !grow((void **)&n->requested, n->n_requested, &n->cap_rq_, sizeof *n->requested))
        return false;
    strcpy(n->requested[n->n_requested++], name);
    return true;
}

view_demand_t *view_add_demand(view_node_t *n, const char *model)
{
    for (size_t i = 0; i < n->n_demand; i++)
        if (strcmp(n->demand[i].model, model) == 0) return &n->demand[i];
    if (!name_ok(model, CATALOG_NAME_MAX) ||
        !grow((void **)&n->demand, n->n_demand, &n->cap_dm_, sizeof *n->demand))
        return NULL;
    view_demand_t *d = &n->demand[n->n_demand++];
    memset(d, 0, sizeof *d);
    strcpy(d->model, model);
    return d;
}

/* A model_source ref: bounded, no control characters, and a remote model reference (never a
 * path on the receiver's disk). */
static bool ref_ok(const char *ref)
{
    model_ref_t r;
    char err[8];
    return name_ok(ref, VIEW_REF_MAX) && model_ref_parse(ref, &r, err, sizeof err) == 0 &&
           model_ref_remote(&r);
}

view_source_t *view_add_source(view_node_t *n, const char *model, const char *ref)
{
    if (!ref_ok(ref)) return NULL;
    for (size_t i = 0; i < n->n_sources; i++)
        if (strcmp(n->sources[i].model, model) == 0) return &n->sources[i];
    if (!name_ok(model, CATALOG_NAME_MAX) ||
        !grow((void **)&n->sources, n->n_sources, &n->cap_src_, sizeof *n->sources))
        return NULL;
    view_source_t *src = &n->sources[n->n_sources++];
    memset(src, 0, sizeof *src);
    strcpy(src->model, model);
    strcpy(src->ref, ref);
    return src;
}

view_download_t *view_add_download(view_node_t *n, const char *model)
{
    if (!name_ok(model, CATALOG_NAME_MAX) ||
        !grow((void **)&n->downloads, n->n_downloads, &n->cap_dl_, sizeof *n->downloads))
        return NULL;
    view_download_t *d = &n->downloads[n->n_downloads++];
    memset(d, 0, sizeof *d);
    strcpy(d->model, model);
    return d;
}

view_plan_t *view_add_plan(view_node_t *n, view_serving_t *s, const char *id)
{
    if (!name_ok(id, VIEW_PLAN_ID_MAX) || n->n_plans >= VIEW_MAX_PLANS) return NULL;
    if (!n->plans && !(n->plans = calloc(VIEW_MAX_PLANS, sizeof *n->plans))) return NULL;
    view_plan_t *p = &n->plans[n->n_plans++];
    memset(p, 0, sizeof *p);
    strcpy(p->id, id);
    s->plan = p;
    return p;
}

/* ---- decoding ---- */

/* A name: a string of 1..max-1 bytes, no control characters, no NUL inside. */
static const char *json_name(const json_t *v, size_t max)
{
    const char *s = json_string_value(v);
    if (!s || json_string_length(v) != strlen(s) || !name_ok(s, max)) return NULL;
    return s;
}

/* Optional unsigned field: false when absent; wrong type, negative or > max count as rejected. */
static bool get_uint(const json_t *o, const char *k, uint64_t max, uint64_t *out, size_t *rej)
{
    json_t *v = json_object_get(o, k);
    if (!v) return false;
    json_int_t i = json_integer_value(v);
    if (!json_is_integer(v) || i < 0 || (uint64_t)i > max) {
        (*rej)++;
        return false;
    }
    *out = (uint64_t)i;
    return true;
}

static uint32_t get_u32(const json_t *o, const char *k, size_t *rej)
{
    uint64_t v = 0;
    get_uint(o, k, UINT32_MAX, &v, rej);
    return (uint32_t)v;
}

static uint64_t get_u64(const json_t *o, const char *k, size_t *rej)
{
    uint64_t v = 0;
    get_uint(o, k, UINT64_MAX, &v, rej);
    return v;
}

static bool get_bool(const json_t *o, const char *k, size_t *rej)
{
    json_t *v = json_object_get(o, k);
    if (v && !json_is_boolean(v)) (*rej)++;
    return json_is_true(v);
}

/* A known word (index in words), else -1; present but unknown counts as rejected. */
static int get_word(const json_t *o, const char *k, const char *const *words, size_t n, size_t *rej)
{
    json_t *v = json_object_get(o, k);
    if (!v) return -1;
    int i = word_index(words, n, json_string_value(v));
    if (i < 0) (*rej)++;
    return i;
}

/* The list under k: its first VIEW_MAX_LIST elements are visited; the rest count as rejected. */
static size_t get_list(const json_t *o, const char *k, json_t **arr, size_t *rej)
{
    *arr = json_object_get(o, k);
    if (!*arr) return 0;
    if (!json_is_array(*arr)) {
        (*rej)++;
        return 0;
    }
    size_t n = json_array_size(*arr);
    if (n > VIEW_MAX_LIST) {
        *rej += n - VIEW_MAX_LIST;
        n = VIEW_MAX_LIST;
    }
    return n;
}

static void decode_plan(view_node_t *n, view_serving_t *s, const json_t *o)
{
    size_t *rej = &n->rejected;
    if (!json_is_object(o)) {
        (*rej)++;
        return;
    }
    const char *id = json_name(json_object_get(o, "id"), VIEW_PLAN_ID_MAX);
    json_t *ws = json_object_get(o, "workers");
    if (!id || (ws && !json_is_array(ws)) || json_array_size(ws) > VIEW_MAX_PLAN_WORKERS ||
        n->n_plans >= VIEW_MAX_PLANS) {
        (*rej)++;
        return;
    }
    view_plan_t *p = view_add_plan(n, s, id);
    if (!p) { /* cannot happen: checked above */
        (*rej)++;
        return;
    }
    p->ngl = get_u32(o, "ngl", rej);
    p->private_split = get_bool(o, "private", rej);
    size_t i;
    json_t *w;
    json_array_foreach(ws, i, w)
    {
        const char *wid = json_string_value(json_object_get(w, "id"));
        uint64_t first = 0, end = 0, weight = 0;
        size_t bad = 0;
        bool ok = json_is_object(w) && catalog_id_valid(wid) &&
                  get_uint(w, "first", UINT32_MAX, &first, &bad) &&
                  get_uint(w, "end", UINT32_MAX, &end, &bad);
        get_uint(w, "weight", UINT32_MAX, &weight, &bad);
        if (!ok || bad) { /* a worker that cannot be read is left out of the plan */
            (*rej)++;
            continue;
        }
        if (p->n_workers >= VIEW_MAX_PLAN_WORKERS) break; /* checked above; never trust it */
        view_worker_t *vw = &p->workers[p->n_workers++];
        memcpy(vw->id, wid, sizeof vw->id);
        vw->first = (uint32_t)first;
        vw->end = (uint32_t)end;
        vw->weight = (uint32_t)weight;
        vw->output = get_bool(w, "output", rej);
    }
}

static int decode_serving(view_node_t *n, const json_t *ann)
{
    size_t *rej = &n->rejected;
    json_t *arr;
    size_t cnt = get_list(ann, "serving", &arr, rej);
    for (size_t i = 0; i < cnt; i++) {
        json_t *v = json_array_get(arr, i);
        const char *model = json_name(json_object_get(v, "model"), CATALOG_NAME_MAX);
        if (!model) {
            (*rej)++;
            continue;
        }
        view_serving_t *s = view_add_serving(n, model);
        if (!s) return -ENOMEM;
        s->member = get_bool(v, "member", rej);
        int r = get_word(v, "role", SERVE_ROLES, sizeof SERVE_ROLES / sizeof *SERVE_ROLES, rej);
        s->role = r < 0 ? VIEW_SERVE_NONE : (view_serve_role_t)r;
        int st = get_word(v, "state", STATES, sizeof STATES / sizeof *STATES, rej);
        s->state = st < 0 ? VIEW_STATE_NONE : (view_state_t)st;
        s->http_ready = get_bool(v, "http_ready", rej);
        s->is_host = get_bool(v, "is_host", rej);
        s->split = get_bool(v, "split", rej);
        s->pinned = get_bool(v, "pinned", rej);
        s->bytes = get_u64(v, "bytes", rej);
        uint64_t slots = get_u64(v, "slots", rej);
        if (slots > VIEW_MAX_SLOTS) (*rej)++;
        s->slots = slots <= VIEW_MAX_SLOTS ? (uint32_t)slots : 0;
        uint64_t busy = get_u64(v, "busy", rej);
        if (busy > VIEW_MAX_BUSY) (*rej)++;
        s->busy = busy <= VIEW_MAX_BUSY ? (uint32_t)busy : 0;
        json_t *plan = json_object_get(v, "plan");
        if (plan) decode_plan(n, s, plan);
        json_t *pr = json_object_get(v, "plan_ready");
        if (pr) {
            const char *id = json_name(pr, VIEW_PLAN_ID_MAX);
            if (id)
                strcpy(s->plan_ready, id);
            else
                (*rej)++;
        }
    }
    return 0;
}

/* request_rates / last_request: {model: non-negative integer}, at most VIEW_MAX_LIST models
 * (the first ones in the object's order); the rest and bad entries count as rejected. */
static int decode_demand(view_node_t *n, const json_t *ann, const char *key)
{
    size_t *rej = &n->rejected;
    json_t *o = json_object_get(ann, key);
    if (!o) return 0;
    if (!json_is_object(o)) {
        (*rej)++;
        return 0;
    }
    bool rates = strcmp(key, "request_rates") == 0;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        json_int_t i = json_integer_value(v);
        if (!json_is_integer(v) || i < 0 || !name_ok(k, CATALOG_NAME_MAX)) {
            (*rej)++;
            continue;
        }
        if (!view_demand(n, k) && n->n_demand >= VIEW_MAX_LIST) {
            (*rej)++;
            continue;
        }
        view_demand_t *d = view_add_demand(n, k);
        if (!d) return -ENOMEM;
        if (rates)
            d->rate = (uint64_t)i;
        else
            d->last_unix = (uint64_t)i;
    }
    return 0;
}

/* model_source: {model: {ref, size_bytes}}, at most VIEW_MAX_LIST models. */
static int decode_sources(view_node_t *n, const json_t *ann)
{
    size_t *rej = &n->rejected;
    json_t *o = json_object_get(ann, "model_source");
    if (!o) return 0;
    if (!json_is_object(o)) {
        (*rej)++;
        return 0;
    }
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        const char *ref = json_name(json_object_get(v, "ref"), VIEW_REF_MAX);
        if (!json_is_object(v) || !name_ok(k, CATALOG_NAME_MAX) || !ref || !ref_ok(ref) ||
            n->n_sources >= VIEW_MAX_LIST) {
            (*rej)++;
            continue;
        }
        view_source_t *src = view_add_source(n, k, ref);
        if (!src) return -ENOMEM;
        src->size_bytes = get_u64(v, "size_bytes", rej);
    }
    return 0;
}

/* downloading: [{model, bytes, total}] */
static int decode_downloads(view_node_t *n, const json_t *ann)
{
    size_t *rej = &n->rejected;
    json_t *arr;
    size_t cnt = get_list(ann, "downloading", &arr, rej);
    for (size_t i = 0; i < cnt; i++) {
        json_t *v = json_array_get(arr, i);
        const char *model = json_name(json_object_get(v, "model"), CATALOG_NAME_MAX);
        uint64_t bytes = 0, total = 0;
        size_t bad = 0;
        get_uint(v, "bytes", UINT64_MAX, &bytes, &bad);
        get_uint(v, "total", UINT64_MAX, &total, &bad);
        if (!model || bad || (total && bytes > total) || view_download(n, model)) {
            (*rej)++;
            continue;
        }
        view_download_t *d = view_add_download(n, model);
        if (!d) return -ENOMEM;
        d->bytes = bytes;
        d->total = total;
    }
    return 0;
}

/* addrs: ["host:port"], at most VIEW_MAX_ADDRS; a bad or surplus one counts as rejected. */
static void decode_addrs(view_node_t *n, const json_t *ann)
{
    json_t *arr;
    size_t cnt = get_list(ann, "addrs", &arr, &n->rejected);
    for (size_t i = 0; i < cnt; i++) {
        const char *a = json_name(json_array_get(arr, i), VIEW_ADDR_MAX);
        if (!a || n->n_addrs >= VIEW_MAX_ADDRS) {
            n->rejected++;
            continue;
        }
        memcpy(n->addrs[n->n_addrs++], a, strlen(a) + 1);
    }
}

/* A device name or backend: [A-Za-z0-9_-]+, shorter than max. */
static bool device_word(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= max) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return false;
    return true;
}

/* devices: [{name, backend, description, total_bytes, free_bytes}], at most VIEW_MAX_DEVICES; a
 * bad or surplus one counts as rejected. */
static void decode_devices(view_node_t *n, const json_t *ann)
{
    json_t *arr;
    size_t cnt = get_list(ann, "devices", &arr, &n->rejected);
    for (size_t i = 0; i < cnt; i++) {
        const json_t *o = json_array_get(arr, i);
        const char *name = json_string_value(json_object_get(o, "name"));
        const char *backend = json_string_value(json_object_get(o, "backend"));
        const json_t *dj = json_object_get(o, "description");
        const char *desc =
            json_is_string(dj) && json_string_length(dj) == 0 ? "" : json_name(dj, DEVICE_DESC_MAX);
        size_t bad = 0;
        uint64_t total = 0, fr = 0;
        get_uint(o, "total_bytes", UINT64_MAX, &total, &bad);
        get_uint(o, "free_bytes", UINT64_MAX, &fr, &bad);
        if (!json_is_object(o) || !device_word(name, DEVICE_NAME_MAX) ||
            !device_word(backend, DEVICE_BACKEND_MAX) || !desc || bad || fr > total ||
            n->n_devices >= VIEW_MAX_DEVICES) {
            n->rejected++;
            continue;
        }
        device_t *d = &n->devices[n->n_devices++];
        memset(d, 0, sizeof *d);
        memcpy(d->name, name, strlen(name) + 1);
        memcpy(d->backend, backend, strlen(backend) + 1);
        memcpy(d->desc, desc, strlen(desc) + 1);
        d->total_bytes = total;
        d->free_bytes = fr;
    }
}

/* rtt_ms: {"<node id>": ms}, at most RTT_MAX_ENTRIES kept (rtt.h); anything else counts as
 * rejected. */
static int decode_rtt(view_node_t *n, const json_t *ann)
{
    json_t *o = json_object_get(ann, "rtt_ms"), *v;
    const char *k;
    if (!o) return 0;
    if (!json_is_object(o)) {
        n->rejected++;
        return 0;
    }
    size_t want = json_object_size(o);
    if (want == 0) return 0;
    if (want > RTT_MAX_ENTRIES) want = RTT_MAX_ENTRIES;
    if (!(n->rtt = malloc(want * sizeof *n->rtt))) return -ENOMEM;
    json_object_foreach((json_t *)o, k, v)
    {
        double ms = json_is_number(v) ? json_number_value(v) : -1;
        if (n->n_rtt >= RTT_MAX_ENTRIES || !catalog_id_valid(k) || strcmp(k, n->id) == 0 ||
            !(ms >= 0)) {
            n->rejected++;
            continue;
        }
        rtt_entry_t *e = &n->rtt[n->n_rtt++];
        memcpy(e->id, k, sizeof e->id);
        e->ms = ms >= RTT_MAX_MS ? RTT_MAX_MS : (int32_t)(ms + 0.5);
    }
    return 0;
}

int view_decode(const json_t *ann, const char *id, view_node_t *out)
{
    view_node_init(out);
    if (!json_is_object(ann) || !catalog_id_valid(id)) return -EINVAL;
    memcpy(out->id, id, sizeof out->id);
    size_t *rej = &out->rejected;
    static const char *const node_roles[] = {"worker", "host", "client"};
    int r = get_word(ann, "role", node_roles, 3, rej);
    out->role = r == 1 ? CATALOG_ROLE_HOST : r == 2 ? CATALOG_ROLE_CLIENT : CATALOG_ROLE_WORKER;
    out->vram_bytes = get_u64(ann, "vram_bytes", rej);
    out->has_free = get_uint(ann, "free_bytes", UINT64_MAX, &out->free_bytes, rej);
    uint64_t speed = 0; /* a member cannot claim an absurd speed: clamped */
    get_uint(ann, "speed_mflops", UINT64_MAX, &speed, rej);
    out->speed_mflops = (uint32_t)(speed > VIEW_SPEED_MAX ? VIEW_SPEED_MAX : speed);
    decode_addrs(out, ann);
    decode_devices(out, ann);
    out->nostr_published = get_bool(ann, "nostr_published", rej);

    json_t *arr;
    size_t cnt = get_list(ann, "available_models", &arr, rej);
    for (size_t i = 0; i < cnt; i++) {
        json_t *v = json_array_get(arr, i);
        const char *name = json_name(json_object_get(v, "name"), CATALOG_NAME_MAX);
        if (!name) {
            (*rej)++;
            continue;
        }
        view_avail_t *a = view_add_available(out, name);
        if (!a) goto nomem;
        a->size_bytes = get_u64(v, "size_bytes", rej);
        a->need_bytes = get_u64(v, "need_bytes", rej);
        a->host_bytes = get_u64(v, "host_bytes", rej);
        int t = get_word(v, "type", TYPES, 3, rej);
        a->has_type = t >= 0;
        a->type = t < 0 ? MM_LLM : (mm_type_t)t;
        a->vision = get_bool(v, "vision", rej);
    }
    cnt = get_list(ann, "requested_models", &arr, rej);
    for (size_t i = 0; i < cnt; i++) {
        const char *name = json_name(json_array_get(arr, i), CATALOG_NAME_MAX);
        if (!name)
            (*rej)++;
        else if (!view_add_requested(out, name))
            goto nomem;
    }
    if (decode_serving(out, ann) != 0) goto nomem;
    if (decode_demand(out, ann, "request_rates") != 0 ||
        decode_demand(out, ann, "last_request") != 0)
        goto nomem;
    if (decode_sources(out, ann) != 0 || decode_downloads(out, ann) != 0) goto nomem;
    if (decode_rtt(out, ann) != 0) goto nomem;
    return 0;
nomem:
    view_node_free(out);
    return -ENOMEM;
}

/* ---- encoding ---- */

static json_t *encode_plan(const view_plan_t *p)
{
    json_t *w = json_array();
    for (size_t k = 0; w && k < p->n_workers; k++) {
        const view_worker_t *vw = &p->workers[k];
        json_array_append_new(w, json_pack("{s:s,s:I,s:I,s:b,s:I}", "id", vw->id, "first",
                                           (json_int_t)vw->first, "end", (json_int_t)vw->end,
                                           "output", vw->output, "weight", (json_int_t)vw->weight));
    }
    json_t *o = json_pack("{s:s,s:I,s:o}", "id", p->id, "ngl", (json_int_t)p->ngl, "workers", w);
    if (o && p->private_split) json_object_set_new(o, "private", json_true());
    return o;
}

static json_t *encode_serving(const view_serving_t *s)
{
    json_t *o = json_pack("{s:s,s:b,s:b,s:b,s:b,s:I}", "model", s->model, "member", s->member,
                          "http_ready", s->http_ready, "is_host", s->is_host, "split", s->split,
                          "bytes", (json_int_t)s->bytes);
    if (!o) return NULL;
    const char *role = view_serve_role_name(s->role), *state = view_state_name(s->state);
    if (role) json_object_set_new(o, "role", json_string(role));
    if (state) json_object_set_new(o, "state", json_string(state));
    if (s->plan) json_object_set_new(o, "plan", encode_plan(s->plan));
    if (s->plan_ready[0]) json_object_set_new(o, "plan_ready", json_string(s->plan_ready));
    if (s->pinned) json_object_set_new(o, "pinned", json_true());
    if (s->slots) json_object_set_new(o, "slots", json_integer((json_int_t)s->slots));
    if (s->busy) json_object_set_new(o, "busy", json_integer((json_int_t)s->busy));
    return o;
}

/* model_source and downloading, set only when n has any (removed otherwise). */
static int encode_fetching(const view_node_t *n, json_t *ann)
{
    json_t *src = json_object(), *dls = json_array();
    if (!src || !dls) goto nomem;
    for (size_t i = 0; i < n->n_sources; i++) {
        const view_source_t *x = &n->sources[i];
        json_t *o = json_pack("{s:s}", "ref", x->ref);
        if (o && x->size_bytes)
            json_object_set_new(o, "size_bytes", json_integer((json_int_t)x->size_bytes));
        if (!o || json_object_set_new(src, x->model, o) != 0) goto nomem;
    }
    for (size_t i = 0; i < n->n_downloads; i++) {
        const view_download_t *d = &n->downloads[i];
        json_t *o = json_pack("{s:s,s:I,s:I}", "model", d->model, "bytes", (json_int_t)d->bytes,
                              "total", (json_int_t)d->total);
        if (!o || json_array_append_new(dls, o) != 0) goto nomem;
    }
    int rc = 0;
    if (n->n_sources)
        rc |= json_object_set_new(ann, "model_source", src);
    else {
        json_decref(src);
        json_object_del(ann, "model_source");
    }
    if (n->n_downloads)
        rc |= json_object_set_new(ann, "downloading", dls);
    else {
        json_decref(dls);
        json_object_del(ann, "downloading");
    }
    return rc ? -ENOMEM : 0;
nomem:
    json_decref(src);
    json_decref(dls);
    return -ENOMEM;
}

json_t *view_devices_json(const device_t *devs, size_t n)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++) {
        const device_t *d = &devs[i];
        if (json_array_append_new(list, json_pack("{s:s,s:s,s:s,s:I,s:I}", "name", d->name,
                                                  "backend", d->backend, "description", d->desc,
                                                  "total_bytes", (json_int_t)d->total_bytes,
                                                  "free_bytes", (json_int_t)d->free_bytes)) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    return list;
}

int view_encode(const view_node_t *n, json_t *ann)
{
    static const char *const node_roles[] = {"worker", "host", "client"};
    json_t *av = json_array(), *rq = json_array(), *sv = json_array();
    json_t *rr = json_object(), *lr = json_object();
    if (!av || !rq || !sv || !rr || !lr) goto nomem;
    for (size_t i = 0; i < n->n_demand; i++) {
        const view_demand_t *d = &n->demand[i];
        if (json_object_set_new(rr, d->model, json_integer((json_int_t)d->rate)) != 0) goto nomem;
        if (d->last_unix &&
            json_object_set_new(lr, d->model, json_integer((json_int_t)d->last_unix)) != 0)
            goto nomem;
    }
    for (size_t i = 0; i < n->n_available; i++) {
        const view_avail_t *a = &n->available[i];
        json_t *o = json_pack("{s:s,s:I,s:I}", "name", a->name, "size_bytes",
                              (json_int_t)a->size_bytes, "need_bytes", (json_int_t)a->need_bytes);
        if (o && a->has_type) json_object_set_new(o, "type", json_string(TYPES[a->type % 3]));
        if (o && a->vision) json_object_set_new(o, "vision", json_true());
        if (o && a->host_bytes)
            json_object_set_new(o, "host_bytes", json_integer((json_int_t)a->host_bytes));
        if (!o || json_array_append_new(av, o) != 0) goto nomem;
    }
    for (size_t i = 0; i < n->n_requested; i++)
        if (json_array_append_new(rq, json_string(n->requested[i])) != 0) goto nomem;
    for (size_t i = 0; i < n->n_serving; i++) {
        json_t *o = encode_serving(&n->serving[i]);
        if (!o || json_array_append_new(sv, o) != 0) goto nomem;
    }
    /* json_object_set_new consumes its value even when it fails */
    int rc = json_object_set_new(ann, "available_models", av);
    rc |= json_object_set_new(ann, "requested_models", rq);
    rc |= json_object_set_new(ann, "serving", sv);
    rc |= json_object_set_new(ann, "request_rates", rr);
    rc |= json_object_set_new(ann, "last_request", lr);
    if (rc || encode_fetching(n, ann) != 0) return -ENOMEM;
    json_object_set_new(ann, "role", json_string(node_roles[n->role % 3]));
    json_object_set_new(ann, "vram_bytes", json_integer((json_int_t)n->vram_bytes));
    if (n->has_free)
        json_object_set_new(ann, "free_bytes", json_integer((json_int_t)n->free_bytes));
    else
        json_object_del(ann, "free_bytes");
    if (n->speed_mflops)
        json_object_set_new(ann, "speed_mflops", json_integer((json_int_t)n->speed_mflops));
    else
        json_object_del(ann, "speed_mflops");
    if (n->n_devices) {
        json_t *devs = view_devices_json(n->devices, n->n_devices);
        if (!devs || json_object_set_new(ann, "devices", devs) != 0) return -ENOMEM;
    }
    if (n->n_addrs) {
        json_t *addrs = json_array();
        for (size_t i = 0; addrs && i < n->n_addrs; i++)
            if (json_array_append_new(addrs, json_string(n->addrs[i])) != 0) {
                json_decref(addrs);
                addrs = NULL;
            }
        if (!addrs || json_object_set_new(ann, "addrs", addrs) != 0) return -ENOMEM;
    }
    if (n->nostr_published) json_object_set_new(ann, "nostr_published", json_true());
    if (n->n_rtt) {
        json_t *r = json_object();
        for (size_t i = 0; r && i < n->n_rtt; i++)
            if (json_object_set_new(r, n->rtt[i].id, json_integer(n->rtt[i].ms)) != 0) {
                json_decref(r);
                r = NULL;
            }
        if (!r || json_object_set_new(ann, "rtt_ms", r) != 0) return -ENOMEM;
    }
    return 0;
nomem:
    json_decref(av);
    json_decref(rq);
    json_decref(sv);
    json_decref(rr);
    json_decref(lr);
    return -ENOMEM;
}

/* ---- queries ---- */

const view_serving_t *view_serving(const view_node_t *n, const char *model)
{
    for (size_t i = 0; i < n->n_serving; i++)
        if (strcmp(n->serving[i].model, model) == 0) return &n->serving[i];
    return NULL;
}

const view_avail_t *view_available(const view_node_t *n, const char *name)
{
    for (size_t i = 0; i < n->n_available; i++)
        if (strcmp(n->available[i].name, name) == 0) return &n->available[i];
    return NULL;
}

bool view_requested(const view_node_t *n, const char *name)
{
    for (size_t i = 0; i < n->n_requested; i++)
        if (strcmp(n->requested[i], name) == 0) return true;
    return false;
}

const view_demand_t *view_demand(const view_node_t *n, const char *model)
{
    for (size_t i = 0; i < n->n_demand; i++)
        if (strcmp(n->demand[i].model, model) == 0) return &n->demand[i];
    return NULL;
}

const view_source_t *view_source(const view_node_t *n, const char *model)
{
    for (size_t i = 0; i < n->n_sources; i++)
        if (strcmp(n->sources[i].model, model) == 0) return &n->sources[i];
    return NULL;
}

const view_download_t *view_download(const view_node_t *n, const char *model)
{
    for (size_t i = 0; i < n->n_downloads; i++)
        if (strcmp(n->downloads[i].model, model) == 0) return &n->downloads[i];
    return NULL;
}

uint64_t view_offer_for(const view_node_t *n, const char *model)
{
    if (!n->has_free) return n->vram_bytes;
    const view_serving_t *s = view_serving(n, model);
    uint64_t held = s ? s->bytes : 0;
    uint64_t o = n->free_bytes > UINT64_MAX - held ? UINT64_MAX : n->free_bytes + held;
    return o < n->vram_bytes ? o : n->vram_bytes;
}

/* ---- equality ---- */

static bool plan_equal(const view_plan_t *a, const view_plan_t *b)
{
    if (!a || !b) return a == b;
    if (strcmp(a->id, b->id) != 0 || a->ngl != b->ngl || a->private_split != b->private_split ||
        a->n_workers != b->n_workers)
        return false;
    for (size_t i = 0; i < a->n_workers; i++) {
        const view_worker_t *x = &a->workers[i], *y = &b->workers[i];
        if (strcmp(x->id, y->id) != 0 || x->first != y->first || x->end != y->end ||
            x->output != y->output || x->weight != y->weight)
            return false;
    }
    return true;
}

bool view_serving_equal(const view_node_t *a, const view_node_t *b)
{
    if (a->n_serving != b->n_serving) return false; /* busy aside (view.h) */
    for (size_t i = 0; i < a->n_serving; i++) {
        const view_serving_t *x = &a->serving[i], *y = &b->serving[i];
        if (strcmp(x->model, y->model) != 0 || x->member != y->member || x->role != y->role ||
            x->state != y->state || x->http_ready != y->http_ready || x->is_host != y->is_host ||
            x->split != y->split || x->pinned != y->pinned || x->bytes != y->bytes ||
            x->slots != y->slots || strcmp(x->plan_ready, y->plan_ready) != 0 ||
            !plan_equal(x->plan, y->plan))
            return false;
    }
    return true;
}

bool view_node_equal(const view_node_t *a, const view_node_t *b)
{
    if (strcmp(a->id, b->id) != 0 || a->role != b->role || a->vram_bytes != b->vram_bytes ||
        a->speed_mflops != b->speed_mflops || a->has_free != b->has_free ||
        (a->has_free && a->free_bytes != b->free_bytes) || a->n_available != b->n_available ||
        a->n_requested != b->n_requested || a->n_demand != b->n_demand ||
        a->n_sources != b->n_sources || a->n_downloads != b->n_downloads ||
        a->n_addrs != b->n_addrs || a->nostr_published != b->nostr_published ||
        a->n_devices != b->n_devices || !view_serving_equal(a, b) ||
        !rtt_equal(a->rtt, a->n_rtt, b->rtt, b->n_rtt))
        return false;
    for (size_t i = 0; i < a->n_serving; i++)
        if (a->serving[i].busy != b->serving[i].busy) return false;
    for (size_t i = 0; i < a->n_addrs; i++)
        if (strcmp(a->addrs[i], b->addrs[i]) != 0) return false;
    for (size_t i = 0; i < a->n_devices; i++)
        if (memcmp(&a->devices[i], &b->devices[i], sizeof a->devices[i]) != 0) return false;
    for (size_t i = 0; i < a->n_sources; i++) {
        const view_source_t *x = &a->sources[i], *y = &b->sources[i];
        if (strcmp(x->model, y->model) != 0 || strcmp(x->ref, y->ref) != 0 ||
            x->size_bytes != y->size_bytes)
            return false;
    }
    for (size_t i = 0; i < a->n_downloads; i++) {
        const view_download_t *x = &a->downloads[i], *y = &b->downloads[i];
        if (strcmp(x->model, y->model) != 0 || x->bytes != y->bytes || x->total != y->total)
            return false;
    }
    for (size_t i = 0; i < a->n_demand; i++) {
        const view_demand_t *x = &a->demand[i], *y = &b->demand[i];
        if (strcmp(x->model, y->model) != 0 || x->rate != y->rate || x->last_unix != y->last_unix)
            return false;
    }
    for (size_t i = 0; i < a->n_available; i++) {
        const view_avail_t *x = &a->available[i], *y = &b->available[i];
        if (strcmp(x->name, y->name) != 0 || x->size_bytes != y->size_bytes ||
            x->need_bytes != y->need_bytes || x->host_bytes != y->host_bytes ||
            x->has_type != y->has_type || (x->has_type && x->type != y->type) ||
            x->vision != y->vision)
            return false;
    }
    for (size_t i = 0; i < a->n_requested; i++)
        if (strcmp(a->requested[i], b->requested[i]) != 0) return false;
    return true;
}

/* ---- catalog input ---- */

void view_to_catalog_sized(const view_node_t *n, catalog_node_t *cn, catalog_avail_t *av,
                           catalog_serving_t *sv, const char **rq, uint64_t *rq_size)
{
    view_to_catalog(n, cn, av, sv, rq);
    for (size_t i = 0; i < n->n_requested; i++) {
        const view_source_t *src = view_source(n, n->requested[i]);
        rq_size[i] = src ? src->size_bytes : 0;
    }
    cn->requested_size = rq_size;
}

void view_to_catalog(const view_node_t *n, catalog_node_t *cn, catalog_avail_t *av,
                     catalog_serving_t *sv, const char **rq)
{
    memset(cn, 0, sizeof *cn);
    cn->id = n->id;
    cn->alive = true;
    cn->vram_bytes = n->vram_bytes;
    cn->role = n->role;
    for (size_t i = 0; i < n->n_available; i++)
        av[i] = (catalog_avail_t){.name = n->available[i].name,
                                  .size_bytes = n->available[i].size_bytes,
                                  .need_bytes = n->available[i].need_bytes,
                                  .type = n->available[i].type};
    for (size_t i = 0; i < n->n_serving; i++) {
        const view_serving_t *s = &n->serving[i];
        sv[i] = (catalog_serving_t){.model = s->model,
                                    .is_host = s->is_host,
                                    .state = s->is_host && s->http_ready ? CATALOG_SERVE_READY
                                                                         : CATALOG_SERVE_LOADING};
    }
    for (size_t i = 0; i < n->n_requested; i++)
        rq[i] = n->requested[i];
    cn->available = av;
    cn->n_available = n->n_available;
    cn->serving = sv;
    cn->n_serving = n->n_serving;
    cn->requested = rq;
    cn->n_requested = n->n_requested;
}

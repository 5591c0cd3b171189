/* model_list — see model_list.h. */
#include "model_list.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const STATUS[] = {"unloaded",       "loading", "ready",
                                     "needs_capacity", "waiting", "downloading"};

void ml_init(model_list_t *l)
{
    memset(l, 0, sizeof *l);
}

void ml_free(model_list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->rows[i].hosts);
    free(l->rows);
    ml_init(l);
}

ml_row_t *ml_add(model_list_t *l, const char *id)
{
    size_t len = id ? strlen(id) : 0;
    if (len == 0 || len >= ML_ID_MAX) return NULL;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        ml_row_t *rows = realloc(l->rows, cap * sizeof *rows);
        if (!rows) return NULL;
        l->rows = rows;
        l->cap = cap;
    }
    ml_row_t *r = &l->rows[l->n++];
    memset(r, 0, sizeof *r);
    memcpy(r->id, id, len + 1);
    return r;
}

ml_row_t *ml_get(model_list_t *l, const char *id, bool create)
{
    for (size_t i = l->n; id && i-- > 0;)
        if (strcmp(l->rows[i].id, id) == 0) return &l->rows[i];
    return create ? ml_add(l, id) : NULL;
}

bool ml_listed_before(const model_list_t *l, size_t i, const char *id)
{
    for (size_t j = 0; j < i && j < l->n; j++)
        if (strcmp(l->rows[j].id, id) == 0) return true;
    return false;
}

int ml_add_host(ml_row_t *r, const char *id)
{
    size_t len = id ? strlen(id) : 0;
    if (len == 0 || len > CATALOG_ID_LEN) return -EINVAL;
    if (r->n_hosts == r->cap_hosts) {
        size_t cap = r->cap_hosts ? 2 * r->cap_hosts : 4;
        catalog_id_t *h = realloc(r->hosts, cap * sizeof *h);
        if (!h) return -ENOMEM;
        r->hosts = h;
        r->cap_hosts = cap;
    }
    memcpy(r->hosts[r->n_hosts++], id, len + 1);
    r->has_hosts = true;
    return 0;
}

const char *ml_status_name(ml_status_t s)
{
    return (unsigned)s < sizeof STATUS / sizeof *STATUS ? STATUS[s] : "unloaded";
}

ml_status_t ml_status_of_catalog(catalog_status_t s)
{
    switch (s) {
    case CATALOG_LOADING:
        return ML_LOADING;
    case CATALOG_READY:
        return ML_READY;
    case CATALOG_NEEDS_CAPACITY:
        return ML_NEEDS_CAPACITY;
    default:
        return ML_UNLOADED;
    }
}

bool ml_status_catalog(ml_status_t s, catalog_status_t *out)
{
    switch (s) {
    case ML_UNLOADED:
        *out = CATALOG_UNLOADED;
        return true;
    case ML_LOADING:
    case ML_WAITING:
        *out = CATALOG_LOADING;
        return true;
    case ML_READY:
        *out = CATALOG_READY;
        return true;
    case ML_NEEDS_CAPACITY:
        *out = CATALOG_NEEDS_CAPACITY;
        return true;
    default:
        return false;
    }
}

static int set_int(json_t *o, const char *key, uint64_t v)
{
    return json_object_set_new(o, key, json_integer((json_int_t)v));
}

/* o when every set succeeded (rc 0), else NULL (o released) */
static json_t *built(json_t *o, int rc)
{
    if (rc == 0) return o;
    json_decref(o);
    return NULL;
}

static json_t *progress_json(const ml_row_t *r)
{
    json_t *p = json_object();
    if (!p) return NULL;
    int rc = r->dl_node[0] ? json_object_set_new(p, "node", json_string(r->dl_node)) : 0;
    rc |= set_int(p, "bytes", r->dl_bytes);
    rc |= set_int(p, "total", r->dl_total);
    return built(p, rc);
}

json_t *ml_row_json(const ml_row_t *r, int64_t created)
{
    json_t *o = json_pack("{s:s,s:s}", "id", r->id, "object", "model");
    if (!o) return NULL;
    int rc = 0;
    if (r->described) rc |= json_object_set_new(o, "created", json_integer((json_int_t)created));
    rc |= json_object_set_new(o, "owned_by", json_string("mesh-llm"));
    if (r->own) rc |= json_object_set_new(o, "status", json_string(ml_status_name(r->status)));
    if (r->has_type) rc |= json_object_set_new(o, "type", json_string(mm_type_name(r->type)));
    if (r->described) rc |= set_int(o, "size", r->size);
    if (!r->own) rc |= json_object_set_new(o, "status", json_string(ml_status_name(r->status)));
    /* a download's row (source) had its progress before the catalog's short_bytes */
    bool short_first = r->short_bytes && !r->source[0];
    if (short_first) rc |= set_int(o, "short_bytes", r->short_bytes);
    if (r->has_progress) rc |= json_object_set_new(o, "progress", progress_json(r));
    if (r->source[0]) rc |= json_object_set_new(o, "source", json_string(r->source));
    if (r->short_bytes && !short_first) rc |= set_int(o, "short_bytes", r->short_bytes);
    if (r->has_hosts) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < r->n_hosts; i++)
            rc |= json_array_append_new(a, json_string(r->hosts[i]));
        rc |= json_object_set_new(o, "hosts", a);
    }
    if (r->in_catalog) {
        rc |= set_int(o, "nodes", r->nodes);
        rc |= json_object_set_new(o, "requested", json_boolean(r->requested));
        rc |= set_int(o, "request_rate", r->request_rate);
        rc |= set_int(o, "last_request", r->last_request);
    }
    return built(o, rc);
}

json_t *ml_list_json(const model_list_t *l, int64_t created)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < l->n; i++) {
        json_t *o = ml_row_json(&l->rows[i], created);
        if (o) json_array_append_new(a, o);
    }
    return a;
}

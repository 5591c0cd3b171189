/* route_table — see route_table.h. */
#include "route_table.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *const STATUS[] = {"unloaded", "loading", "ready", "needs_capacity"};

const char *rt_role_name(rt_role_t r)
{
    return r == RT_ROLE_STANDBY ? "standby" : "client";
}

bool rt_status_of(const char *s, catalog_status_t *out)
{
    for (int i = 0; s && i < 4; i++)
        if (strcmp(s, STATUS[i]) == 0) {
            *out = (catalog_status_t)i;
            return true;
        }
    return false;
}

bool rt_type_of(const char *s, mm_type_t *out)
{
    for (int i = 0; s && i < MM_N_TYPES; i++)
        if (strcmp(s, mm_type_name((mm_type_t)i)) == 0) {
            *out = (mm_type_t)i;
            return true;
        }
    return false;
}

/* An unsigned integer field: absent → def; wrong type or negative → def and rejected++. */
static uint64_t get_u64(const json_t *o, const char *k, uint64_t def, size_t *rejected)
{
    json_t *v = json_object_get(o, k);
    if (!v) return def;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        (*rejected)++;
        return def;
    }
    return (uint64_t)json_integer_value(v);
}

static bool printable(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n >= max) return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x21 || (unsigned char)*s == 0x7f) return false;
    return true;
}

/* ---- request ---- */

json_t *rt_request_encode(const rt_request_t *rq)
{
    json_t *models = json_array();
    for (size_t i = 0; models && i < rq->n_models; i++)
        json_array_append_new(models, json_string(rq->models[i]));
    json_t *silent = rq->n_silent ? json_array() : NULL;
    for (size_t i = 0; silent && i < rq->n_silent && i < RT_MAX_SILENT; i++)
        json_array_append_new(silent, json_string(rq->silent[i]));
    return json_pack("{s:i,s:s,s:s,s:s,s:I,s:o*,s:o*}", "v", 1, "type", "route_request", "id",
                     rq->id, "role", rt_role_name(rq->role), "vram_bytes",
                     (json_int_t)rq->vram_bytes, "models", models, "silent", silent);
}

int rt_request_decode(const json_t *f, const char *peer_id, rt_request_t *out)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(f)) return -EINVAL;
    const char *type = json_string_value(json_object_get(f, "type"));
    const char *id = json_string_value(json_object_get(f, "id"));
    const char *role = json_string_value(json_object_get(f, "role"));
    if (!type || strcmp(type, "route_request") != 0 || !id || !catalog_id_valid(id) || !role)
        return -EINVAL;
    if (strcmp(role, "client") == 0)
        out->role = RT_ROLE_CLIENT;
    else if (strcmp(role, "standby") == 0)
        out->role = RT_ROLE_STANDBY;
    else
        return -EINVAL;
    if (!peer_id || strcmp(id, peer_id) != 0) return -EPERM;
    snprintf(out->id, sizeof out->id, "%s", id);
    out->vram_bytes = get_u64(f, "vram_bytes", 0, &out->rejected);
    json_t *models = json_object_get(f, "models");
    if (models && !json_is_array(models)) out->rejected++;
    size_t i;
    json_t *v;
    json_array_foreach(models, i, v)
    {
        const char *name = json_string_value(v);
        bool dup = false;
        for (size_t k = 0; name && k < out->n_models; k++)
            dup |= strcmp(out->models[k], name) == 0;
        if (!name || !catalog_name_valid(name) || dup || out->n_models == RT_MAX_REQ_MODELS) {
            out->rejected++;
            continue;
        }
        snprintf(out->models[out->n_models++], CATALOG_NAME_MAX, "%s", name);
    }
    json_t *silent = json_object_get(f, "silent");
    if (silent && !json_is_array(silent)) out->rejected++;
    json_array_foreach(silent, i, v)
    {
        const char *sid = json_string_value(v);
        if (!sid || !catalog_id_valid(sid) || out->n_silent == RT_MAX_SILENT) {
            out->rejected++;
            continue;
        }
        snprintf(out->silent[out->n_silent++], CATALOG_ID_LEN + 1, "%s", sid);
    }
    return 0;
}

/* ---- table: building ---- */

void rt_table_init(rt_table_t *t, const char *mesh_id)
{
    memset(t, 0, sizeof *t);
    if (mesh_id) snprintf(t->mesh_id, sizeof t->mesh_id, "%s", mesh_id);
}

int rt_table_find_node(const rt_table_t *t, const char *id)
{
    for (size_t i = 0; id && i < t->n_nodes; i++)
        if (strcmp(t->nodes[i].id, id) == 0) return (int)i;
    return -1;
}

int rt_table_add_node(rt_table_t *t, const char *id, uint64_t vram_bytes)
{
    if (!id || !catalog_id_valid(id)) return -1;
    int k = rt_table_find_node(t, id);
    if (k >= 0) return k;
    if (t->n_nodes == RT_MAX_NODES) return -1;
    rt_node_t *n = &t->nodes[t->n_nodes];
    memset(n, 0, sizeof *n);
    snprintf(n->id, sizeof n->id, "%s", id);
    n->vram_bytes = vram_bytes;
    return (int)t->n_nodes++;
}

bool rt_node_add_addr(rt_node_t *n, const char *addr)
{
    if (!addr || !printable(addr, RT_ADDR_MAX) || n->n_addrs == RT_MAX_ADDRS) return false;
    for (size_t i = 0; i < n->n_addrs; i++)
        if (strcmp(n->addrs[i], addr) == 0) return false;
    snprintf(n->addrs[n->n_addrs++], RT_ADDR_MAX, "%s", addr);
    return true;
}

const rt_model_t *rt_table_find_model(const rt_table_t *t, const char *name)
{
    for (size_t i = 0; name && i < t->n_models; i++)
        if (strcmp(t->models[i].name, name) == 0) return &t->models[i];
    return NULL;
}

rt_model_t *rt_table_add_model(rt_table_t *t, const char *name, catalog_status_t st)
{
    if (!name || !catalog_name_valid(name) || rt_table_find_model(t, name) ||
        t->n_models == RT_MAX_MODELS)
        return NULL;
    rt_model_t *m = &t->models[t->n_models++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->status = st;
    return m;
}

bool rt_model_add_host(rt_model_t *m, size_t node, uint32_t load)
{
    if (node >= RT_MAX_NODES || m->n_hosts == RT_MAX_HOSTS) return false;
    for (size_t i = 0; i < m->n_hosts; i++)
        if (m->hosts[i].node == node) return false;
    m->hosts[m->n_hosts++] = (rt_host_t){.node = (uint16_t)node, .load = load};
    return true;
}

bool rt_model_set_slots(rt_model_t *m, size_t node, uint32_t slots)
{
    if (slots > RT_MAX_SLOTS) return false;
    for (size_t i = 0; i < m->n_hosts; i++)
        if (m->hosts[i].node == node) {
            m->hosts[i].slots = (uint16_t)slots;
            return true;
        }
    return false;
}

static rt_host_t *host_of(rt_model_t *m, size_t node)
{
    for (size_t i = 0; i < m->n_hosts; i++)
        if (m->hosts[i].node == node) return &m->hosts[i];
    return NULL;
}

bool rt_model_set_vision(rt_model_t *m, size_t node, bool vision)
{
    rt_host_t *h = host_of(m, node);
    if (h) h->vision = vision;
    return h != NULL;
}

bool rt_model_set_private(rt_model_t *m, size_t node, bool priv)
{
    rt_host_t *h = host_of(m, node);
    if (h) h->priv = priv;
    return h != NULL;
}

uint32_t rt_host_slots(const rt_model_t *m, size_t node)
{
    for (size_t i = 0; i < m->n_hosts; i++)
        if (m->hosts[i].node == node)
            return m->hosts[i].slots ? m->hosts[i].slots : RT_DEFAULT_SLOTS;
    return RT_DEFAULT_SLOTS;
}

/* ---- table: frames ---- */

json_t *rt_table_encode(const rt_table_t *t)
{
    json_t *nodes = json_array(), *models = json_array();
    if (!nodes || !models) goto fail;
    for (size_t i = 0; i < t->n_nodes; i++) {
        const rt_node_t *n = &t->nodes[i];
        json_t *addrs = json_array();
        for (size_t k = 0; addrs && k < n->n_addrs; k++)
            json_array_append_new(addrs, json_string(n->addrs[k]));
        json_t *o = json_pack("{s:s,s:o*,s:I}", "id", n->id, "addrs", addrs, "vram_bytes",
                              (json_int_t)n->vram_bytes);
        if (!o || json_array_append_new(nodes, o)) goto fail;
    }
    for (size_t i = 0; i < t->n_models; i++) {
        const rt_model_t *m = &t->models[i];
        json_t *hosts = json_array();
        for (size_t k = 0; hosts && k < m->n_hosts; k++)
            if (m->hosts[k].node < t->n_nodes) {
                json_t *h = json_pack("{s:s,s:I}", "id", t->nodes[m->hosts[k].node].id, "load",
                                      (json_int_t)m->hosts[k].load);
                if (h && m->hosts[k].slots)
                    json_object_set_new(h, "slots", json_integer(m->hosts[k].slots));
                if (h && m->hosts[k].vision) json_object_set_new(h, "vision", json_true());
                if (h && m->hosts[k].priv) json_object_set_new(h, "private", json_true());
                json_array_append_new(hosts, h);
            }
        json_t *o = json_pack("{s:s,s:s,s:o*}", "name", m->name, "status", STATUS[m->status],
                              "hosts", hosts);
        if (o && m->has_type) json_object_set_new(o, "type", json_string(mm_type_name(m->type)));
        if (o && m->requested) json_object_set_new(o, "requested", json_true());
        if (o && m->short_bytes)
            json_object_set_new(o, "short_bytes", json_integer((json_int_t)m->short_bytes));
        if (!o || json_array_append_new(models, o)) goto fail;
    }
    return json_pack("{s:i,s:s,s:s,s:I,s:o,s:o}", "v", 1, "type", "route_table", "mesh_id",
                     t->mesh_id, "refresh_ms", (json_int_t)t->refresh_ms, "nodes", nodes, "models",
                     models);
fail:
    json_decref(nodes);
    json_decref(models);
    return NULL;
}

static void decode_nodes(const json_t *arr, rt_table_t *t)
{
    size_t i;
    json_t *v;
    if (arr && !json_is_array(arr)) t->rejected++;
    json_array_foreach(arr, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        if (!json_is_object(v) || !id || !catalog_id_valid(id) || rt_table_find_node(t, id) >= 0 ||
            t->n_nodes == RT_MAX_NODES) {
            t->rejected++;
            continue;
        }
        int k = rt_table_add_node(t, id, get_u64(v, "vram_bytes", 0, &t->rejected));
        rt_node_t *n = &t->nodes[k];
        json_t *addrs = json_object_get(v, "addrs");
        if (addrs && !json_is_array(addrs)) t->rejected++;
        size_t j;
        json_t *a;
        json_array_foreach(addrs, j, a)
        {
            if (!rt_node_add_addr(n, json_string_value(a))) t->rejected++;
        }
    }
}

static void decode_models(const json_t *arr, rt_table_t *t)
{
    size_t i;
    json_t *v;
    if (arr && !json_is_array(arr)) t->rejected++;
    json_array_foreach(arr, i, v)
    {
        catalog_status_t st;
        const char *name = json_string_value(json_object_get(v, "name"));
        if (!json_is_object(v) ||
            !rt_status_of(json_string_value(json_object_get(v, "status")), &st)) {
            t->rejected++;
            continue;
        }
        rt_model_t *m = rt_table_add_model(t, name, st);
        if (!m) {
            t->rejected++;
            continue;
        }
        json_t *type = json_object_get(v, "type");
        if (type) {
            m->has_type = rt_type_of(json_string_value(type), &m->type);
            if (!m->has_type) t->rejected++;
        }
        json_t *rq = json_object_get(v, "requested");
        if (rq && !json_is_boolean(rq)) t->rejected++;
        m->requested = json_is_true(rq);
        m->short_bytes = get_u64(v, "short_bytes", 0, &t->rejected);
        json_t *hosts = json_object_get(v, "hosts");
        if (hosts && !json_is_array(hosts)) t->rejected++;
        size_t j;
        json_t *h;
        json_array_foreach(hosts, j, h)
        {
            int k = rt_table_find_node(t, json_string_value(json_object_get(h, "id")));
            uint64_t load = json_is_object(h) ? get_u64(h, "load", 0, &t->rejected) : 0;
            uint64_t slots = json_is_object(h) ? get_u64(h, "slots", 0, &t->rejected) : 0;
            if (k < 0 || load > UINT32_MAX || !rt_model_add_host(m, (size_t)k, (uint32_t)load)) {
                t->rejected++;
                continue;
            }
            if (slots > RT_MAX_SLOTS || !rt_model_set_slots(m, (size_t)k, (uint32_t)slots))
                t->rejected++;
            json_t *vis = json_object_get(h, "vision");
            if (vis && !json_is_boolean(vis)) t->rejected++;
            rt_model_set_vision(m, (size_t)k, json_is_true(vis));
            json_t *priv = json_object_get(h, "private");
            if (priv && !json_is_boolean(priv)) t->rejected++;
            rt_model_set_private(m, (size_t)k, json_is_true(priv));
        }
    }
}

int rt_table_decode(const json_t *f, rt_table_t *out)
{
    rt_table_init(out, NULL);
    if (!json_is_object(f)) return -EINVAL;
    const char *type = json_string_value(json_object_get(f, "type"));
    const char *mesh = json_string_value(json_object_get(f, "mesh_id"));
    if (!type || strcmp(type, "route_table") != 0 || !mesh || !printable(mesh, RT_MESH_ID_MAX))
        return -EINVAL;
    snprintf(out->mesh_id, sizeof out->mesh_id, "%s", mesh);
    out->refresh_ms = get_u64(f, "refresh_ms", 0, &out->rejected);
    decode_nodes(json_object_get(f, "nodes"), out); /* first: hosts refer to them */
    decode_models(json_object_get(f, "models"), out);
    return 0;
}

/* ---- choices ---- */

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

#define FNV_BASIS 1469598103934665603ULL

static uint64_t mix(uint64_t z) /* splitmix64's finaliser: every input bit moves every output bit */
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t rt_score(const char *self_id, const char *node_id)
{
    return mix(fnv1a(fnv1a(fnv1a(FNV_BASIS, self_id), "\n"), node_id));
}

size_t rt_checkin_order(const rt_table_t *t, const char *self_id, size_t *order, size_t max)
{
    uint64_t score[RT_MAX_NODES];
    size_t n = 0;
    for (size_t i = 0; i < t->n_nodes; i++) {
        if (self_id && strcmp(t->nodes[i].id, self_id) == 0) continue;
        uint64_t s = rt_score(self_id ? self_id : "", t->nodes[i].id);
        size_t k = n < max ? n++ : max; /* insertion into the top `max`, descending */
        if (k == max && (max == 0 || s <= score[max - 1])) continue;
        if (k == max) k = max - 1;
        while (k > 0 && score[k - 1] < s) {
            score[k] = score[k - 1];
            order[k] = order[k - 1];
            k--;
        }
        score[k] = s;
        order[k] = i;
    }
    return n;
}

void rt_table_from_list(rt_table_t *t, const model_list_t *l, const view_node_t *const *views,
                        rt_load_fn load, void *data)
{
    for (size_t i = 0; i < l->n; i++) {
        const ml_row_t *r = &l->rows[i];
        catalog_status_t st;
        if (!ml_status_catalog(r->status, &st)) continue;
        rt_model_t *m = rt_table_add_model(t, r->id, st);
        if (!m) continue;
        m->has_type = r->has_type;
        m->type = r->type;
        m->requested = r->requested;
        m->short_bytes = r->short_bytes;
        for (size_t k = 0; k < t->n_nodes; k++) {
            const view_serving_t *s = views[k] ? view_serving(views[k], r->id) : NULL;
            if (s && s->http_ready && rt_model_add_host(m, k, load ? load(data, k, r->id) : 0)) {
                rt_model_set_slots(m, k, s->slots);
                const view_avail_t *a = view_available(views[k], r->id);
                rt_model_set_vision(m, k, a && a->vision);
                rt_model_set_private(m, k, s->plan && s->plan->private_split);
            }
        }
    }
}

/* route_serve — see route_serve.h. */
#include "route_serve.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "view.h"

void route_serve_init(route_serve_t *rs, uv_loop_t *loop, planner_t *plan, uint64_t refresh_ms)
{
    memset(rs, 0, sizeof *rs);
    rs->loop = loop;
    rs->plan = plan;
    rs->refresh_ms = refresh_ms ? refresh_ms : RT_REFRESH_MS;
    rs->cache_ms = rs->refresh_ms / 4 < 1000 ? rs->refresh_ms / 4 : 1000;
}

void route_serve_set_mesh(route_serve_t *rs, mesh_t *mesh)
{
    rs->mesh = mesh;
}

void route_serve_free(route_serve_t *rs)
{
    json_decref(rs->cached);
    free(rs->seen);
    rs->cached = NULL;
    rs->seen = NULL;
    rs->n_seen = rs->cap_seen = 0;
}

void route_serve_invalidate(route_serve_t *rs)
{
    json_decref(rs->cached);
    rs->cached = NULL;
}

/* ---- building the table ---- */

typedef struct {
    route_serve_t *rs;
    rt_table_t *t;
    const view_node_t *views[RT_MAX_NODES]; /* by node index: self, or mesh_peers' (borrowed) */
    view_node_t self;                       /* this node's announcement, decoded */
} build_t;

static void add_node(build_t *b, const view_node_t *v, const char *const *addrs, size_t n_addrs)
{
    if (v->role == CATALOG_ROLE_CLIENT) return; /* clients are not active */
    int k = rt_table_add_node(b->t, v->id, v->vram_bytes);
    if (k < 0) return;
    b->views[k] = v;
    for (size_t i = 0; i < n_addrs && i < RT_MAX_ADDRS; i++)
        rt_node_add_addr(&b->t->nodes[k], addrs[i]);
}

/* This node (its announcement: NULL when passive) and the mesh's live peers, decoded by the
 * mesh once per change. */
static void add_nodes(build_t *b, json_t *self_ann, const char *const *own, size_t n_own)
{
    if (self_ann && view_decode(self_ann, mesh_node_id(b->rs->mesh), &b->self) == 0)
        add_node(b, &b->self, own, n_own);
    const view_node_t *peers;
    size_t n = mesh_peers(b->rs->mesh, &peers);
    for (size_t i = 0; i < n; i++) {
        const char *addrs[VIEW_MAX_ADDRS];
        for (size_t a = 0; a < peers[i].n_addrs; a++)
            addrs[a] = peers[i].addrs[a];
        add_node(b, &peers[i], addrs, peers[i].n_addrs);
    }
}

/* requests per minute the node announces for model (request_rates), 0 unknown */
static uint32_t load_of(const view_node_t *v, const char *model)
{
    const view_demand_t *d = view_demand(v, model);
    return !d ? 0 : d->rate > UINT32_MAX ? UINT32_MAX : (uint32_t)d->rate;
}

static uint32_t node_load(void *data, size_t node, const char *model)
{
    build_t *b = data;
    return load_of(b->views[node], model);
}

int route_serve_build(route_serve_t *rs, rt_table_t *t)
{
    if (!rs->mesh) return -ENOTCONN;
    rt_table_init(t, mesh_id(rs->mesh));
    t->refresh_ms = rs->refresh_ms;
    build_t *b = calloc(1, sizeof *b);
    model_list_t list;
    ml_init(&list);
    int rc = -ENOMEM;
    if (!b) goto out;
    b->rs = rs;
    b->t = t;
    json_t *self = mesh_self_announcement(rs->mesh);
    const char *own[RT_MAX_ADDRS];
    add_nodes(b, self, own, mesh_own_addrs(rs->mesh, own, RT_MAX_ADDRS));
    planner_list_catalog(rs->plan, &list);
    rt_table_from_list(t, &list, b->views, node_load, b);
    rc = 0;
out:
    if (b) view_node_free(&b->self);
    ml_free(&list);
    free(b);
    return rc;
}

/* ---- check-ins ---- */

static void remember(route_serve_t *rs, const rt_request_t *rq)
{
    uint64_t now = uv_now(rs->loop);
    rs_passive_t *p = NULL;
    for (size_t i = 0; i < rs->n_seen && !p; i++)
        if (strcmp(rs->seen[i].id, rq->id) == 0) p = &rs->seen[i];
    if (!p) {
        /* forget those not seen for two refresh periods, then the oldest when full */
        size_t w = 0;
        for (size_t i = 0; i < rs->n_seen; i++)
            if (now - rs->seen[i].last_ms <= 2 * rs->refresh_ms) rs->seen[w++] = rs->seen[i];
        rs->n_seen = w;
        if (rs->n_seen == RS_MAX_PASSIVE) {
            size_t old = 0;
            for (size_t i = 1; i < rs->n_seen; i++)
                if (rs->seen[i].last_ms < rs->seen[old].last_ms) old = i;
            rs->seen[old] = rs->seen[--rs->n_seen];
        }
        if (rs->n_seen == rs->cap_seen) {
            size_t cap = rs->cap_seen ? rs->cap_seen * 2 : 64;
            rs_passive_t *n = realloc(rs->seen, cap * sizeof *n);
            if (!n) return;
            rs->seen = n;
            rs->cap_seen = cap;
        }
        p = &rs->seen[rs->n_seen++];
        memset(p, 0, sizeof *p);
        snprintf(p->id, sizeof p->id, "%s", rq->id);
        LOGI("route", "passive node %.12s (%s) checked in", rq->id, rt_role_name(rq->role));
    }
    p->role = rq->role;
    p->vram_bytes = rq->vram_bytes;
    p->n_models = rq->n_models;
    p->last_ms = now;
    p->wall_s = (uint64_t)time(NULL);
}

json_t *route_serve_answer(route_serve_t *rs, const char *peer_id, json_t *req)
{
    if (!rs->mesh || mesh_is_passive(rs->mesh)) { /* a passive standby has no view to give */
        rs->refused++;
        return NULL;
    }
    rt_request_t *rq = malloc(sizeof *rq);
    int rc = rq ? rt_request_decode(req, peer_id, rq) : -ENOMEM;
    if (rc) {
        rs->refused++;
        LOGD("route", "route request from %.12s refused: %s", peer_id, strerror(-rc));
        free(rq);
        return NULL;
    }
    remember(rs, rq);
    /* hosts the passive node found silent: hints, checked with our own probe (a dead one is
     * declared dead and gossiped; the next table leaves it out) */
    for (size_t i = 0; i < rq->n_silent; i++)
        if (strcmp(rq->silent[i], peer_id) != 0) mesh_suspect(rs->mesh, rq->silent[i]);
    free(rq);
    uint64_t now = uv_now(rs->loop);
    if (!rs->cached || now - rs->built_at >= rs->cache_ms) {
        rt_table_t *t = malloc(sizeof *t);
        json_t *f = t && route_serve_build(rs, t) == 0 ? rt_table_encode(t) : NULL;
        free(t);
        if (!f) {
            rs->refused++;
            return NULL;
        }
        json_decref(rs->cached);
        rs->cached = f;
        rs->built_at = now;
    }
    rs->answered++;
    return json_incref(rs->cached);
}

static bool recent(const route_serve_t *rs, const rs_passive_t *p, uint64_t now)
{
    return now - p->last_ms <= 2 * rs->refresh_ms;
}

size_t route_serve_passive_count(const route_serve_t *rs, uint64_t *vram_bytes)
{
    uint64_t now = uv_now(rs->loop);
    size_t n = 0;
    for (size_t i = 0; i < rs->n_seen; i++)
        if (recent(rs, &rs->seen[i], now)) {
            n++;
            *vram_bytes += rs->seen[i].vram_bytes;
        }
    return n;
}

void route_serve_status(route_serve_t *rs, route_serve_status_t *out)
{
    uint64_t now = uv_now(rs->loop);
    *out = (route_serve_status_t){.answered = rs->answered, .refused = rs->refused};
    out->ids = rs->n_seen ? calloc(rs->n_seen, sizeof *out->ids) : NULL;
    json_t *a = json_array();
    for (size_t i = 0; a && i < rs->n_seen; i++) {
        const rs_passive_t *p = &rs->seen[i];
        if (!recent(rs, p, now)) continue;
        if (out->ids) snprintf(out->ids[out->n_ids++], sizeof *out->ids, "%s", p->id);
        json_array_append_new(
            a, json_pack("{s:s,s:s,s:I,s:I,s:I}", "id", p->id, "role", rt_role_name(p->role),
                         "last_checkin", (json_int_t)p->wall_s, "vram_bytes",
                         (json_int_t)p->vram_bytes, "models", (json_int_t)p->n_models));
    }
    out->passive = a;
}

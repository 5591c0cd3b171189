/* status_doc — see status_doc.h. */
#include "status_doc.h"

#include "httpd_guard.h"
#include "meshstat.h"
#include "models_slots.h"
#include "relay.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static json_t *models_json(models_t *ms)
{
    json_t *a = json_array();
    for (model_entry_t *e = NULL; ms && (e = models_next(ms, e));) {
        json_array_append_new(
            a, json_pack("{s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I}", "name", e->mm->name, "type",
                         mm_type_name(e->mm->type), "status", model_state_name(models_state(e)),
                         "size_bytes", (json_int_t)e->size, "node", "local", "slots",
                         (json_int_t)models_slots(e), "busy", (json_int_t)models_busy(e),
                         "free_slots", (json_int_t)models_free_slots(e)));
    }
    return a;
}

static json_t *processes_json(supervisor_t *sv)
{
    json_t *a = json_array();
    for (sv_child_t *c = sv ? sv->children : NULL; c; c = c->next) {
        if (!c->proc_open) continue;
        json_t *args = json_array();
        char **av = sv_build_argv(c);
        for (size_t i = 1; av && av[i]; i++)
            json_array_append_new(args, json_string(av[i]));
        argv_free(av);
        json_array_append_new(a, json_pack("{s:s,s:s,s:i,s:i,s:I,s:s,s:o}", "kind",
                                           c->kind == SV_KIND_RPC ? "rpc-server" : "llama-server",
                                           "model", c->name, "pid", c->pid, "port", c->port,
                                           "restarts", (json_int_t)c->restarts, "state",
                                           child_state_name(c->state), "args", args));
    }
    return a;
}

static bool has_id(const catalog_id_t *ids, size_t n, const char *id)
{
    for (size_t i = 0; id && i < n; i++)
        if (strcmp(ids[i], id) == 0) return true;
    return false;
}

/* The facts of the peers' entries that other modules know: the speed the planner decoded from a
 * peer's announcement; a standby that left gossip (its "left" record) but checks in as a passive
 * node is a member standing by, not a departed node. */
static void place_peers(json_t *peers, const status_parts_t *p)
{
    size_t i;
    json_t *o;
    json_array_foreach(peers, i, o)
    {
        const char *id = json_string_value(json_object_get(o, "id"));
        for (size_t k = 0; id && k < p->plan.n_speeds; k++)
            if (strcmp(p->plan.speeds[k].id, id) == 0)
                json_object_set_new(o, "speed_mflops",
                                    p->plan.speeds[k].mflops
                                        ? json_integer((json_int_t)p->plan.speeds[k].mflops)
                                        : json_null());
    }
    if (p->passive) return;
    json_array_foreach(peers, i, o)
    {
        if (strcmp(json_string_value(json_object_get(o, "state")) ?: "", "left") == 0 &&
            has_id(p->rs.ids, p->rs.n_ids, json_string_value(json_object_get(o, "id"))))
            json_object_set_new(o, "state", json_string("standby"));
    }
}

void status_doc_place(json_t *st, status_parts_t *p)
{
    json_t *node = json_object_get(st, "node"), *stats = json_object_get(st, "stats");
    if (!json_is_object(stats)) stats = NULL; /* set_new on NULL drops the value */
    json_object_set_new(stats, "route_requests", json_integer((json_int_t)p->route_requests));
    const planner_status_t *pl = &p->plan;
    json_object_set_new(node, "memory", pl->memory);
    json_object_set_new(st, "catalog", pl->catalog);
    json_object_set_new(st, "plan", pl->plan);
    json_object_set_new(st, "rpc_tunnel", pl->rpc_tunnel);
    json_object_set_new(node, "role", pl->role);
    json_object_set_new(node, "assignment", pl->assignment);
    json_object_set_new(st, "assignments", pl->assignments);
    json_object_set_new(node, "demand", pl->demand);
    json_object_set_new(node, "speed", pl->speed);
    place_peers(json_object_get(st, "peers"), p);
    if (p->passive) {
        json_object_set_new(st, "route", p->pas.route);
        json_object_set_new(st, "catalog", p->pas.catalog);
    } else {
        json_object_set_new(st, "passive", p->rs.passive);
        json_object_set_new(stats, "route_answered", json_integer((json_int_t)p->rs.answered));
        json_object_set_new(stats, "route_refused", json_integer((json_int_t)p->rs.refused));
    }
    json_object_set_new(node, "standby", p->standby);
    json_object_set_new(st, "admission", p->admission);
    json_object_set_new(st, "downloads", p->downloads);
    json_object_set_new(st, "download_errors", p->download_errors);
    json_object_set_new(st, "nostr", p->nostr);
    json_object_set_new(node, "llama_flavour", json_incref(json_object_get(p->devices, "flavour")));
    json_object_set_new(node, "devices", json_incref(json_object_get(p->devices, "devices")));
    json_decref(p->devices);
    free(p->plan.speeds);
    free(p->rs.ids);
    *p = (status_parts_t){0};
}

/* The status document of an idle node (no mesh). */
static json_t *idle_status(mgmt_t *g)
{
    return json_pack("{s:{s:s?,s:s,s:n,s:n,s:i,s:n,s:n,s:s,s:b},s:[]}", "node", "id",
                     g->dep.idle_id, "state", "idle", "mesh_id", "role", "quic_port", 0, "token",
                     "incarnation", "version", MESH_VERSION, "joined", false, "peers");
}

json_t *status_doc(mgmt_t *g, json_t *events)
{
    json_t *st = g->mesh ? mesh_status(g->mesh) : idle_status(g);
    if (!st) {
        json_decref(events);
        return NULL;
    }
    json_t *node = json_object_get(st, "node");
    json_object_set_new(node, "api_port", json_integer(g->dep.api_port));
    json_object_set_new(node, "console_port", json_integer(g->httpd.port));
    if (g->mesh) {
        /* passive: a --client or a standby, in the mesh without gossip (routing tables) */
        json_object_set_new(node, "state",
                            json_string(mesh_is_passive(g->mesh) ? "passive"
                                        : mesh_joined(g->mesh)   ? "member"
                                                                 : "joining"));
        json_object_set_new(node, "join_error", json_string(mesh_join_error(g->mesh)));
    }
    json_object_set_new(st, "models", models_json(g->ms));
    json_object_set_new(st, "processes", processes_json(g->sv));
    /* request bytes every HTTP connection of the node holds (capped by
     * MESH_LLM_HTTP_MAX_BUFFERED) */
    json_object_set_new(st, "http",
                        json_pack("{s:I}", "buffered_bytes",
                                  (json_int_t)(g->httpd.budget ? g->httpd.budget->buffered : 0)));
    json_object_set_new(st, "routing", relay_status_json(g->dep.relay));
    if (g->dep.status_parts && g->mesh) {
        status_parts_t parts = {0};
        g->dep.status_parts(g->dep.data, &parts);
        status_doc_place(st, &parts);
    }
    if (!g->mesh) {
        json_object_set_new(st, "catalog", json_array());
        json_object_set_new(st, "plan", json_array());
    }
    json_object_set_new(st, "requests", /* newest first; no meshstat (tests): none */
                        g->stat ? reqlog_json(&g->stat->reqlog) : json_array());
    json_object_set_new(st, "events", events);
    return st;
}

/* The invite token carries the mesh secret: whoever reads it can join the mesh. It is shown to
 * clients on this machine only, and only when they name it by a loopback name (a web page that
 * rebinds its own DNS name to 127.0.0.1 gets no secret either). */
bool mgmt_may_see_secrets(httpd_peer_t peer, const char *host_header)
{
    return peer == HTTPD_PEER_LOOPBACK && guard_loopback_host_header(host_header);
}

void status_doc_hide_secrets(json_t *st)
{
    json_object_set_new(json_object_get(st, "node"), "token", json_null());
}

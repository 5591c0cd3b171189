/* status_doc — see status_doc.h. */
#include "status_doc.h"

#include "httpd_guard.h"
#include "meshstat.h"
#include "relay.h"
#include "util.h"

static json_t *models_json(models_t *ms)
{
    json_t *a = json_array();
    for (size_t i = 0; ms && i < ms->n; i++) {
        model_entry_t *e = &ms->entries[i];
        json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:I,s:s}", "name", e->mm->name, "type",
                                           mm_type_name(e->mm->type), "status",
                                           model_state_name(models_state(e)), "size_bytes",
                                           (json_int_t)e->size, "node", "local"));
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

/* The status document of an idle node (no mesh). */
static json_t *idle_status(mgmt_t *g)
{
    return json_pack("{s:{s:s?,s:s,s:n,s:n,s:i,s:n,s:n,s:s,s:b},s:[]}", "node", "id",
                     g->dep.idle_id, "state", "idle", "mesh_id", "role", "quic_port", 0, "token",
                     "incarnation", "version", MESH_VERSION, "joined", false, "peers");
}

json_t *status_doc(mgmt_t *g)
{
    json_t *st = g->mesh ? mesh_status(g->mesh) : idle_status(g);
    if (!st) return NULL;
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
    if (g->dep.extra_status && g->mesh) g->dep.extra_status(g->dep.data, st);
    if (!g->mesh) {
        json_object_set_new(st, "catalog", json_array());
        json_object_set_new(st, "plan", json_array());
    }
    json_object_set_new(st, "requests", /* newest first; no meshstat (tests): none */
                        g->stat ? reqlog_json(&g->stat->reqlog) : json_array());
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

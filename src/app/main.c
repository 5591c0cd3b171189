/* mesh-llm entry point: configuration, the event loop, startup and shutdown. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sodium.h>
#include <uv.h>

#include "admission.h"
#include "changes.h"
#include "api_mgmt.h"
#include "cli.h"
#include "api_openai.h"
#include "bin_find.h"
#include "identity.h"
#include "join_policy.h"
#include "mesh.h"
#include "meshstat.h"
#include "options.h"
#include "planner.h"
#include "route.h"
#include "config.h"
#include "home_lock.h"
#include "log.h"
#include "offer.h"
#include "node_ctx.h"
#include "node_dl.h"
#include "nostr_app.h"
#include "passive.h"
#include "route_serve.h"
#include "standby.h"
#include "status_doc.h"
#include "supervisor.h"
#include "tunnels.h"
#include "util.h"

#define STOP_GRACE_MS 5000

typedef struct {
    uv_loop_t *loop;
    node_ctx_t ctx; /* the owned parts: cfg, changes, stat, budget, relay, ... (node_ctx.h) */
    supervisor_t sv;
    models_t ms;
    api_t api;
    mgmt_t mgmt;
    planner_t plan;
    mesh_t *mesh;
    route_t route;              /* where requests go (route_decide), the rpc-server's guard */
    route_serve_t rs;           /* answers passive nodes' ROUTE_REQUESTs (active nodes) */
    passive_t *passive;         /* a passive node's check-ins and routing (--client, a standby) */
    standby_t sb;               /* a node without --model: standing by passively, promotion */
    admission_t adm;            /* admission control, API keys, pins */
    node_dl_t ndl;              /* model downloads (--model REF, the mesh's rule 4) */
    nostr_app_t nostr;          /* public discovery: --publish, --auto, GET /api/discover */
    tunnels_t tun;              /* the mesh's tunnel and route-request streams (tunnels.h) */
    tunnel_rpc_opts_t rpc_opts; /* their worker side's (from cfg.tun) */
    bool mesh_stopped, children_stopped;
    uv_signal_t sigint, sigterm;
    bool announced;
    bool shutting_down;
    int exit_code;
    char home[4096];
    uint64_t vram;
    bool idle; /* no mesh yet: waiting for POST /api/join */
    bool joined_at_runtime;
    char idle_id[ID_HEX_LEN + 1];
    char idle_msg[160]; /* the inference API's 503 while idle */
} node_t;

/* The node that holds a supervisor (its callbacks get only the supervisor). */
static node_t *node_of_sv(supervisor_t *sv)
{
    return (node_t *)(void *)((char *)sv - offsetof(node_t, sv));
}

static void announce_idle(node_t *n)
{
    const char *host = n->ctx.cfg.listen_all ? "0.0.0.0" : "127.0.0.1";
    if (n->ctx.cfg.auto_join)
        LOGI("node",
             "not in a mesh yet: --auto is looking for one; console: open http://127.0.0.1:%d",
             n->mgmt.httpd.port);
    else
        LOGI("node",
             "idle: not in a mesh yet. Join one: open http://127.0.0.1:%d in a browser, run "
             "'mesh-llm join TOKEN --console %d', or POST http://127.0.0.1:%d/api/join "
             "{\"token\": \"...\"}. Until then the OpenAI API at http://%s:%d/v1 answers 503",
             n->mgmt.httpd.port, n->mgmt.httpd.port, n->mgmt.httpd.port, host, n->api.httpd.port);
    printf("mesh-llm idle api=%d console=%d id=%s\n", n->api.httpd.port, n->mgmt.httpd.port,
           n->idle_id);
    fflush(stdout);
}

static void node_shutdown(node_t *n);

static void announce(void *data)
{
    node_t *n = data;
    if (n->announced || n->shutting_down) return;
    n->announced = true;
    if (n->idle) {
        announce_idle(n);
        return;
    }
    char why[1024];
    if (models_preload_all_failed(&n->ms, why, sizeof why)) { /* it would serve nothing asked */
        LOGE("node", "no model given with --model could be loaded, so the node stops: %s", why);
        n->exit_code = 1;
        node_shutdown(n);
        return;
    }
    char names[1024] = "";
    size_t off = 0, ready = 0;
    size_t known = models_count(&n->ms);
    for (model_entry_t *e = NULL; off < sizeof names - 1 && (e = models_next(&n->ms, e));) {
        model_state_t st = models_state(e);
        if (st == MODEL_READY) ready++;
        off += (size_t)snprintf(names + off, sizeof names - off, "%s%s (%s, %s)", off ? ", " : "",
                                e->mm->name, mm_type_name(e->mm->type), model_state_name(st));
    }
    LOGI("node", "ready: OpenAI API at http://%s:%d/v1 — %zu of %zu known model(s) loaded%s%s",
         n->ctx.cfg.listen_all ? "0.0.0.0" : "127.0.0.1", n->api.httpd.port, ready, known,
         known ? ": " : "", names);
    for (size_t i = 0; i < n->ctx.cfg.n_requested; i++)
        LOGI("node", "model %s: no file here; asking the mesh for it (listed as requested)",
             n->ctx.cfg.requested[i]);
    if (n->ctx.cfg.client)
        LOGI("node", "client node: requests are routed to the mesh; this node serves no model");
    else if (known == 0 && n->nostr.auto_model[0])
        LOGI("node", "model %s: fetched for --auto; served once it is here", n->nostr.auto_model);
    else if (known == 0 && n->ctx.cfg.n_requested == 0 &&
             (n->ctx.cfg.n_joins > 0 || n->joined_at_runtime))
        LOGI("node", "no models given: the mesh may give this node one of its models, or it "
                     "lends its memory to split models");
    else if (known == 0 && n->ctx.cfg.n_requested == 0)
        LOGI("node", "no models given: add --model PATH.gguf (or --models-dir DIR) to serve one");
    LOGI("node", "invite token (share it: mesh-llm --join TOKEN): %s", mesh_token(n->mesh));
    if (n->mgmt.started)
        LOGI("node", "console: open http://127.0.0.1:%d in a browser (status: GET /api/status)",
             n->mgmt.httpd.port);
    char ollama[32] = "";
    if (n->api.ollama_started)
        snprintf(ollama, sizeof ollama, " ollama=%d", n->api.ollama_httpd.port);
    printf("mesh-llm ready api=%d console=%d quic=%d id=%s token=%s%s\n", n->api.httpd.port,
           n->mgmt.started ? n->mgmt.httpd.port : 0, mesh_quic_port(n->mesh), mesh_node_id(n->mesh),
           mesh_token(n->mesh), ollama);
    fflush(stdout);
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void maybe_exit(node_t *n)
{
    if (!n->children_stopped || !n->mesh_stopped) return;
    LOGI("node", "all children stopped, mesh left; bye");
    uv_walk(n->loop, close_walk_cb, NULL);
}

static void on_all_stopped(supervisor_t *sv, sv_child_t *unused)
{
    node_t *n = node_of_sv(sv);
    (void)unused;
    n->children_stopped = true;
    maybe_exit(n);
}

static void on_mesh_stopped(void *data)
{
    node_t *n = data;
    n->mesh = NULL;
    route_set_mesh(&n->route, NULL);
    route_serve_set_mesh(&n->rs, NULL);
    n->mesh_stopped = true;
    maybe_exit(n);
}

/* admission: whether requests that wait for a model of this node can be served */
static bool has_host(void *data, const char *model)
{
    node_t *n = data;
    return route_has_host_of(&n->route, model);
}

/* admission: whether a request for a model whose server here is full goes to a peer replica */
static bool spills(void *data, const char *model, httpd_req_t *req)
{
    node_t *n = data;
    return route_spills(&n->route, model, req);
}

static bool spilled(void *data, const httpd_req_t *req)
{
    return admission_spilled(data, req);
}

static int rpc_port(void *data, const char *peer_id, const char *model)
{
    node_t *n = data;
    return route_rpc_port(&n->route, peer_id, model);
}

static void list_remote(void *data, model_list_t *list)
{
    node_t *n = data;
    node_dl_list_models(&n->ndl, list);
    if (passive_active(n->passive))
        passive_list_models(n->passive, list);
    else
        planner_list_models(&n->plan, list);
}

/* Each module's parts of the status document (status_doc.c places them). */
static void status_parts(void *data, status_parts_t *p)
{
    node_t *n = data;
    p->route_requests = tunnels_route_requests(&n->tun);
    planner_status(&n->plan, &p->plan);
    p->passive = passive_active(n->passive);
    if (p->passive)
        passive_status(n->passive, &p->pas);
    else
        route_serve_status(&n->rs, &p->rs);
    p->standby = standby_status(&n->sb);
    p->admission = admission_status(&n->adm);
    node_dl_status(&n->ndl, &p->downloads, &p->download_errors);
    p->nostr = nostr_app_status(&n->nostr);
    p->devices = offer_devices_json(&n->ctx.devices, n->sv.llama_server);
}

static bool admit(void *data, httpd_req_t *req, int needs)
{
    return admission_enter(data, req, needs);
}

static bool key_known(void *data, const httpd_req_t *req)
{
    return admission_req_key(data, req) >= 0;
}

static void sv_changed(supervisor_t *sv, sv_child_t *c)
{
    node_t *n = node_of_sv(sv);
    changes_notify(&n->ctx.changes); /* the events stream (api_events.h) */
    (void)c;
    if (!n->shutting_down) planner_kick(&n->plan);
}

static void peers_changed(void *data)
{
    node_t *n = data;
    changes_notify(&n->ctx.changes); /* the events stream (api_events.h) */
    route_serve_invalidate(&n->rs);
    if (!n->shutting_down) planner_kick(&n->plan);
    if (!n->shutting_down && nostr_app_peers_changed(&n->nostr) && n->mesh)
        mesh_announce_changed(n->mesh); /* now it watches the listing too */
}

static json_t *route_request(void *data, const char *peer_id, json_t *req)
{
    node_t *n = data;
    return route_serve_answer(&n->rs, peer_id, req);
}

static void models_changed(void *data)
{
    node_t *n = data;
    changes_notify(&n->ctx.changes); /* the events stream (api_events.h) */
    if (n->mesh && !n->shutting_down) mesh_announce_changed(n->mesh);
    if (!n->shutting_down) planner_kick(&n->plan);
}

/* the listing's count of the passive nodes that check in with this node */
static size_t passive_count(void *data, uint64_t *vram_bytes)
{
    return route_serve_passive_count(data, vram_bytes);
}

static void fill_announcement(void *data, json_t *ann)
{
    node_t *n = data;
    planner_fill_announcement(&n->plan, ann); /* node_dl's fields come through its view */
    nostr_app_fill_announcement(&n->nostr, ann);
}

static void dl_changed(void *data)
{
    node_t *n = data;
    if (n->mesh && !n->shutting_down) mesh_announce_changed(n->mesh);
}

/* A download ended: its file joins the node's models and is served. */
static void dl_done(void *data, const char *ref, const char *path, int rc, const char *err)
{
    node_t *n = data;
    if (n->shutting_down) return;
    if (rc) { /* node_dl logged why */
        planner_download_failed(&n->plan, ref);
        return;
    }
    model_entry_t *e;
    char msg[512];
    if (models_add_file(&n->ms, path, &e, msg, sizeof msg) != 0) {
        LOGE("node", "%s: %s", ref, msg);
        return;
    }
    (void)err;
    planner_add_model(&n->plan, e);
}

/* POST /api/v1/load {"model_name": REF} (models_api.c): a reference's model when it is here,
 * else its download (node_dl). */
static int load_ref(void *data, const char *ref, char *name, size_t len, httpd_req_t *req)
{
    node_t *n = data;
    if (node_dl_ref_name(&n->ndl, ref, name, len) != 0) {
        if (!strstr(ref, "://")) return -1;     /* a name: 404 */
        node_dl_answer_load(&n->ndl, ref, req); /* a broken URL or hf:// ref: 400 saying why */
        return 1;
    }
    if (models_find(&n->ms, name)) return 0;
    node_dl_answer_load(&n->ndl, ref, req);
    return 1;
}

/* Into a mesh: the one connect → assign → serve flow, for --join (or a mesh of its own) at
 * startup and for POST /api/join on an idle node. */
static int enter_mesh(node_t *n, const token_t *joins, size_t n_joins, char *err, size_t errlen)
{
    mesh_opts_t mo = {
        .home = n->home,
        .bind_port = n->ctx.cfg.bind_port,
        .joins = joins,
        .n_joins = n_joins,
        .mesh_name = n->ctx.cfg.mesh_name,
        .name_key = n->nostr.have_key ? n->nostr.pk : NULL,
        .vram_bytes = n->vram,
        .role = n->ctx.cfg.client          ? "client"
                : models_count(&n->ms) > 0 ? "host"
                                           : "worker",
        .api_port = n->api.httpd.port,
        .console_port = n->mgmt.started ? n->mgmt.httpd.port : 0,
        .heartbeat_ms = n->ctx.cfg.tun.heartbeat_ms,
        .relay = n->ctx.cfg.relay && !n->ctx.cfg.client,
        .portmap = !n->ctx.cfg.no_portmap && n->ctx.cfg.tun.portmap,
        .relay_rate = n->ctx.cfg.tun.relay_rate,
        .tun = &n->ctx.cfg.tun,
        .changes = &n->ctx.changes,
        .fill_announcement = fill_announcement,
        .on_peers_changed = peers_changed,
        .passive = n->ctx.cfg.client,   /* seed 002: a client does not gossip */
        .ephemeral = n->ctx.cfg.client, /* and writes nothing to $MESH_LLM_HOME */
        .data = n,
        .on_stream = tunnels_take,
        .stream_data = &n->tun,
    };
    tunables_rpc_opts(&n->ctx.cfg.tun, &n->rpc_opts);
    n->tun = (tunnels_t){
        .loop = n->loop,
        .rpc_opts = &n->rpc_opts,
        .api = &n->api.httpd,
        .rpc_port = rpc_port,
        .route_request = n->ctx.cfg.client ? NULL : route_request, /* a client answers none */
        .data = n,
        .rpc_stats = &n->ctx.rpc_stats,
    };
    uint64_t refresh_ms = n->ctx.cfg.tun.route_refresh_ms;
    route_serve_init(&n->rs, n->loop, &n->plan, refresh_ms);
    int rc = mesh_start(&n->mesh, n->loop, &mo, err, errlen);
    if (rc) return rc;
    /* --stun / --turn: from the mesh's QUIC socket, once it is bound */
    mesh_servers_t ms = {.stun = (const char *const *)n->ctx.cfg.stun,
                         .n_stun = n->ctx.cfg.n_stun,
                         .turn = n->ctx.cfg.turn,
                         .turn_user = n->ctx.cfg.turn_user,
                         .turn_password = n->ctx.cfg.turn_password};
    rc = mesh_servers_start(n->mesh, &ms, err, errlen);
    if (rc) return rc;
    route_serve_set_mesh(&n->rs, n->mesh);
    if (n->ctx.cfg.client) {
        passive_opts_t po = {.role = RT_ROLE_CLIENT,
                             .refresh_ms = refresh_ms,
                             .joins = joins,
                             .n_joins = n_joins,
                             .relay = &n->ctx.relay};
        if (passive_start(&n->passive, n->loop, n->mesh, &po) != 0) {
            snprintf(err, errlen, "cannot start the passive driver (out of memory)");
            return -ENOMEM;
        }
    }
    n->idle = false;
    api_set_unavailable(&n->api, NULL);
    mgmt_set_mesh(&n->mgmt, n->mesh);
    route_set_mesh(&n->route, n->mesh);
    api_join(&n->api, &n->route, list_remote, n);
    models_watch(&n->ms, models_changed, n);
    sv_watch(&n->sv, sv_changed);
    meshstat_set_node(&n->ctx.stat, mesh_node_id(n->mesh)); /* X-Mesh-Node on proxied answers */
    /* without --model, a joining node is given its model by the mesh (allocation); when it
     * gives nothing, the node stands by passively (standby.h) */
    passive_opts_t so = {.refresh_ms = refresh_ms,
                         .vram_bytes = n->vram,
                         .joins = joins,
                         .n_joins = n_joins,
                         .relay = &n->ctx.relay};
    if (standby_join(&n->sb, n->loop, &n->plan, n->mesh, n->ctx.cfg.client, &so, &n->passive)) {
        snprintf(err, errlen, "cannot start the standby driver (out of memory)");
        return -ENOMEM;
    }
    planner_start(&n->plan, n->mesh);
    nostr_app_set_passive(&n->nostr, passive_count, &n->rs);
    nostr_app_in_mesh(&n->nostr, &n->plan, n->mesh);
    if (n->nostr.pub.started) mesh_announce_changed(n->mesh); /* "nostr_published" */
    return 0;
}

/* --auto (nostr_app.h): join the mesh of token t, or start a mesh of this node's own (t NULL),
 * through the same flow as --join and POST /api/join. */
static int auto_join(void *data, const token_t *t, char *err, size_t errlen)
{
    node_t *n = data;
    if (n->mesh || n->shutting_down) {
        snprintf(err, errlen, "this node is already in a mesh");
        return -EALREADY;
    }
    if (t && join_decide(n->idle_id, NULL, false, t->id, t->mesh_id) == JOIN_OWN_TOKEN) {
        snprintf(err, errlen, "this is this node's own listing");
        return -EINVAL;
    }
    int rc = enter_mesh(n, t, t ? 1 : 0, err, errlen);
    if (rc) return rc;
    if (t) n->joined_at_runtime = true;
    n->announced = false;
    announce(n); /* the ready line, with this node's invite token */
    return 0;
}

/* --auto started a new mesh without a model: fetch the catalog model that fits. */
static int auto_fetch(void *data, const char *ref, char *err, size_t errlen)
{
    node_t *n = data;
    return node_dl_start(&n->ndl, ref, err, errlen);
}

static uint32_t auto_speed(void *data, bool *pending)
{
    node_t *n = data;
    *pending = n->plan.speed.running;
    /* the calibration measures the CPU: an accelerator's speed is not estimated (no limit) */
    return n->ctx.devices.n ? AUTO_SPEED_UNLIMITED : n->plan.speed.mflops;
}

static bool auto_on_disk(void *data, const char *ref)
{
    node_t *n = data;
    return node_dl_on_disk(&n->ndl, ref);
}

static int auto_probe_hub(void *data, const char *ref, node_dl_probe_fn cb, void *arg)
{
    node_t *n = data;
    return n->ndl.d ? node_dl_probe(&n->ndl, ref, cb, arg) : -ENOTCONN;
}

static void on_discover(void *data, httpd_req_t *req)
{
    node_t *n = data;
    nostr_app_discover(&n->nostr, req);
}

/* POST /api/join (api_mgmt_join.c): the decision is join_policy's, the flow enter_mesh's. */
/* POST /api/assign, /api/unassign (api_mgmt_assign.c): a model on disk is assigned at once; a
 * reference whose file is not here is downloaded (for the operator, like --model REF) and
 * assigned when it arrives. */
static int on_assign(void *data, const char *model, bool unassign, char *msg, size_t len)
{
    node_t *n = data;
    if (unassign) return planner_unassign(&n->plan, model, msg, len);
    char name[MODEL_NAME_MAX];
    if (models_find(&n->ms, model) || node_dl_ref_name(&n->ndl, model, name, sizeof name) != 0)
        return planner_assign(&n->plan, model, msg, len); /* on disk, or a 404 saying so */
    if (models_find(&n->ms, name)) return planner_assign(&n->plan, name, msg, len);
    if (!n->ndl.d) {
        snprintf(msg, len, "model '%s' is not on this node and it cannot download models", model);
        return 404;
    }
    char err[600];
    int rc = node_dl_start(&n->ndl, model, err, sizeof err);
    if (rc) {
        snprintf(msg, len, "cannot download %s: %s", model, err);
        return rc == -E2BIG || rc == -ENOMEM ? 503 : rc == -EFBIG ? 409 : 400;
    }
    const node_dl_job_t *j = node_dl_job(&n->ndl, model);
    return planner_assign_pending(&n->plan, j ? j->name : name, msg, len);
}

static int on_join(void *data, const token_t *t, char *msg, size_t msglen)
{
    node_t *n = data;
    if (n->shutting_down) {
        snprintf(msg, msglen, "the node is shutting down");
        return 503;
    }
    const char *cur = n->mesh ? mesh_id(n->mesh) : NULL;
    join_decision_t d = join_decide(n->mesh ? mesh_node_id(n->mesh) : n->idle_id, cur,
                                    n->mesh && mesh_join_stuck(n->mesh), t->id, t->mesh_id);
    if (d == JOIN_OWN_TOKEN) {
        snprintf(msg, msglen,
                 "this is this node's own invite token: give the token of a node "
                 "in the mesh you want to join");
    } else if (d == JOIN_ALREADY) {
        snprintf(msg, msglen, "this node is already %s mesh %s: nothing to do",
                 mesh_joined(n->mesh) ? "in" : "joining", cur);
    } else if (d == JOIN_OTHER_MESH) {
        snprintf(msg, msglen,
                 "this node is already %s mesh %s, not the token's mesh %s; it cannot leave a "
                 "mesh while running: restart it with --join TOKEN (or with no arguments to be "
                 "idle again)",
                 mesh_joined(n->mesh) ? "in" : "joining", cur, t->mesh_id);
    } else if (d == JOIN_REPLACE) {
        if (mesh_join_replace(n->mesh, t) != 0) {
            snprintf(msg, msglen, "this node's join is under way: try again");
            return 409;
        }
        n->joined_at_runtime = true;
        LOGI("node", "joining mesh %s through %.12s instead (asked through the management API)",
             t->mesh_id, t->id);
        snprintf(msg, msglen,
                 "the join through the earlier token reached no one: joining mesh %s through %s "
                 "(%s) instead; follow GET /api/status",
                 t->mesh_id, t->id, t->addrs[0]);
    } else {
        char err[512];
        int rc = enter_mesh(n, t, 1, err, sizeof err);
        if (rc) {
            LOGE("node", "cannot join: %s", err);
            snprintf(msg, msglen, "cannot join: %s", err);
            return 500;
        }
        n->joined_at_runtime = true;
        LOGI("node", "joining mesh %s through %.12s (asked through the management API)", t->mesh_id,
             t->id);
        snprintf(msg, msglen,
                 "joining mesh %s through %s (%s); follow GET /api/status: node.state goes "
                 "from joining to member, then the mesh gives this node its part",
                 t->mesh_id, t->id, t->addrs[0]);
        n->announced = false;
        announce(n); /* the ready line, with this node's invite token */
    }
    return join_http_status(d);
}

static void on_chat(void *data, httpd_req_t *req)
{
    node_t *n = data;
    api_chat(&n->api, req);
}

static void on_signal(uv_signal_t *s, int signum)
{
    node_t *n = s->data;
    if (n->shutting_down) {
        LOGW("node", "second %s: killing children now", strsignal(signum));
        for (sv_child_t *c = n->sv.children; c; c = c->next)
            if (c->proc_open) uv_process_kill(&c->proc, SIGKILL);
        return;
    }
    LOGI("node", "%s received: shutting down", strsignal(signum));
    node_shutdown(n);
}

static void node_shutdown(node_t *n)
{
    n->shutting_down = true;
    admission_close(&n->adm);
    standby_stop(&n->sb);
    planner_stop(&n->plan);
    node_dl_close(&n->ndl);
    passive_stop(n->passive);
    nostr_app_stop(&n->nostr);
    api_stop(&n->api);
    mgmt_stop(&n->mgmt);
    if (n->mesh)
        mesh_stop(n->mesh, on_mesh_stopped, n);
    else
        n->mesh_stopped = true;
    sv_stop_all(&n->sv, STOP_GRACE_MS);
}

/* A startup step failed after the servers were up: close everything, exit 1. */
static int abort_startup(node_t *n)
{
    node_speed_cancel(&n->plan.speed); /* no log line after the error */
    api_stop(&n->api);
    mgmt_stop(&n->mgmt);
    uv_walk(n->loop, close_walk_cb, NULL);
    uv_run(n->loop, UV_RUN_DEFAULT);
    sv_close(&n->sv);
    node_ctx_free(&n->ctx);
    return 1;
}

/* Lock the home for this process's lifetime (the descriptor stays open until exit). */
static int lock_home(const char *home)
{
    int fd;
    pid_t holder;
    int rc = home_lock(home, &fd, &holder);
    if (rc == -EWOULDBLOCK) {
        char msg[1024];
        home_lock_refusal(msg, sizeof msg, home, holder);
        LOGE("node", "%s", msg);
    } else if (rc) {
        LOGE("node", "cannot lock the state directory %s: %s", home, strerror(-rc));
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--exec-child") == 0) return sv_exec_child_main(argc, argv);
    int cli_rc = cli_dispatch(argc, argv);
    if (cli_rc >= 0) return cli_rc;

    static node_t node;
    node_t *n = &node;
    char err[1024];
    int rc = node_ctx_init(&n->ctx, argc, argv, err, sizeof err);
    if (rc == CONFIG_EXIT) return 0;
    if (rc < 0) {
        fprintf(stderr, "mesh-llm: error: %s\nRun 'mesh-llm --help' for usage.\n", err);
        return 2;
    }
    log_init(n->ctx.cfg.log_format, n->ctx.cfg.verbose ? LOG_DEBUG : LOG_INFO);
    config_log_warnings(&n->ctx.cfg);
    if (sodium_init() < 0) {
        LOGE("node", "libsodium failed to initialise");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);

    if (identity_home(n->ctx.cfg.tun.home, n->home, sizeof n->home) != 0) {
        LOGE("node", "cannot find a state directory: set MESH_LLM_HOME or HOME");
        node_ctx_free(&n->ctx);
        return 1;
    }
    /* one node per home (a client writes nothing there), before anything else touches it */
    if (!n->ctx.cfg.client && lock_home(n->home) != 0) {
        node_ctx_free(&n->ctx);
        return 1;
    }
    LOGI("node", "mesh-llm %s starting", MESH_VERSION);
    char *llama_server = NULL;
    if (!n->ctx.cfg.client) {
        llama_server = sv_find_binary(n->ctx.cfg.bin_dir, "llama-server", &n->ctx.bins);
        if (!llama_server) {
            if (n->ctx.cfg.bin_dir)
                LOGE("node", "no executable llama-server in --bin-dir %s", n->ctx.cfg.bin_dir);
            else {
                bin_not_found(err, sizeof err, "llama-server", &n->ctx.bins);
                LOGE("node", "%s", err);
            }
            node_ctx_free(&n->ctx);
            return 1;
        }
        LOGI("node", "using %s", llama_server);
    }
    char *rpc_server = NULL;
    if (!n->ctx.cfg.client) {
        rpc_server = sv_find_binary(n->ctx.cfg.bin_dir, "ggml-rpc-server", &n->ctx.bins);
        if (!rpc_server)
            rpc_server = sv_find_binary(n->ctx.cfg.bin_dir, "rpc-server", &n->ctx.bins);
        if (!rpc_server)
            LOGW("node", "ggml-rpc-server not found next to llama-server: this node cannot lend "
                         "its memory to models split over several nodes");
    }

    n->loop = uv_default_loop();
    sv_deps_t svd = {.rpc_server = rpc_server, .on_all_stopped = on_all_stopped};
    rc = sv_init(&n->sv, n->loop, llama_server ? llama_server : "llama-server", n->ctx.cfg.verbose,
                 &n->ctx.cfg.tun, &svd);
    free(llama_server);
    if (rc) {
        LOGE("node", "supervisor: %s", strerror(-rc));
        return 1;
    }
    rc = models_init(&n->ms, n->loop, &n->ctx.cfg, &n->sv, &n->ctx.stat, err, sizeof err);
    if (rc) {
        LOGE("node", "%s", err);
        return 1;
    }
    /* admission control (node/admission.h): every inference request passes it, idle or not */
    admission_deps_t ad = {.resume = api_inference,
                           .data = &n->api,
                           .has_host = has_host,
                           .spills = spills,
                           .host_data = n};
    rc = admission_init(&n->adm, n->loop, &n->ctx.cfg, &n->ms, &n->ctx.stat, &ad, err, sizeof err);
    if (rc) {
        LOGE("node", "%s", err);
        return 1;
    }
    models_on_preload_done(&n->ms, announce, n);
    LOGI("node", "%zu known model(s); slots: %u llm, %u embedding, %u reranking",
         models_count(&n->ms), n->ctx.cfg.max_loaded[0], n->ctx.cfg.max_loaded[1],
         n->ctx.cfg.max_loaded[2]);
    uint64_t on_devices = 0, vram = 0;
    if (!n->ctx.cfg.client) {
        rc = offer_detect(&n->ctx.cfg, n->sv.llama_server, &n->ctx.devices, &vram, &on_devices, err,
                          sizeof err);
        if (rc) {
            LOGE("node", "%s", err);
            return 1;
        }
    }
    n->sv.device = n->ctx.cfg.device; /* --device: the children get only those */
    n->vram = vram;
    models_set_offer(&n->ms, vram, on_devices);
    models_set_devices(&n->ms, &n->ctx.devices);
    planner_init(&n->plan, n->loop, &n->ctx.cfg, &n->ms, &n->sv, vram, &n->ctx.rpc_stats);
    n->plan.devices = &n->ctx.devices;
    route_init(&n->route, &(route_deps_t){.plan = &n->plan,
                                          .relay = &n->ctx.relay,
                                          .ndl = &n->ndl,
                                          .passive = &n->passive});

    bool keys = admission_has_keys(&n->adm);
    api_deps_t apd = {.admit = admit,
                      .key_known = keys ? key_known : NULL,
                      .spilled = spilled,
                      .admit_data = &n->adm};
    rc = api_start(&n->api, n->loop, &n->ctx.cfg, &n->ms, &n->ctx.stat, &n->ctx.http_budget, &apd);
    if (rc) {
        if (n->api.ollama_rc)
            LOGE("node", "cannot listen on --ollama-port %d: %s", n->ctx.cfg.ollama_port,
                 uv_strerror(rc));
        else if (rc == UV_EADDRINUSE)
            LOGE("node", "port %d is already in use; choose another with --port N (0 = any free)",
                 n->ctx.cfg.port);
        else
            LOGE("node", "cannot listen on port %d: %s", n->ctx.cfg.port, uv_strerror(rc));
        node_speed_cancel(&n->plan.speed); /* no log line after the error */
        uv_walk(n->loop, close_walk_cb, NULL);
        uv_run(n->loop, UV_RUN_DEFAULT);
        sv_close(&n->sv);
        node_ctx_free(&n->ctx);
        return 1;
    }
    LOGI("node", "API listening on %s:%d", n->ctx.cfg.listen_all ? "0.0.0.0" : "127.0.0.1",
         n->api.httpd.port);
    if (n->api.ollama_started)
        LOGI("node", "the API (with Ollama's) also on %s:%d (--ollama-port)",
             n->ctx.cfg.listen_all ? "0.0.0.0" : "127.0.0.1", n->api.ollama_httpd.port);

    n->idle = (config_idle(&n->ctx.cfg) && node_dl_pending(&n->ctx.dl_args, NULL) == 0) ||
              n->ctx.cfg.auto_join;
    if (!n->ctx.cfg.headless) {
        mgmt_deps_t md = {.api_port = n->api.httpd.port,
                          .relay = &n->ctx.relay,
                          .rpc_stats = &n->ctx.rpc_stats,
                          .status_parts = status_parts,
                          .data = n,
                          .idle_id = n->idle ? n->idle_id : NULL, /* filled in below */
                          .join = on_join,
                          .assign = on_assign,
                          .chat = on_chat,
                          .discover = on_discover,
                          .key_known = keys ? key_known : NULL,
                          .key_data = keys ? &n->adm : NULL};
        rc = mgmt_start(&n->mgmt, n->loop, &n->ctx.cfg, NULL, &n->ms, &n->sv, &n->ctx.changes,
                        &n->ctx.stat, &n->ctx.http_budget, &md);
        if (rc) {
            if (rc == UV_EADDRINUSE)
                LOGE("node",
                     "console port %d is already in use; choose another with --console N (0 = "
                     "any free) or --headless",
                     n->ctx.cfg.console_port);
            else
                LOGE("node", "cannot listen on console port %d: %s", n->ctx.cfg.console_port,
                     uv_strerror(rc));
            return abort_startup(n);
        }
    }
    nostr_app_deps_t nd = {.join = auto_join,
                           .fetch_model = auto_fetch,
                           .speed = auto_speed,
                           .on_disk = auto_on_disk,
                           .probe_hub = auto_probe_hub,
                           .data = n,
                           .offer = n->vram};
    rc = nostr_app_init(&n->nostr, n->loop, &n->ctx.cfg, n->home, &nd, err, sizeof err);
    if (rc) {
        LOGE("node", "%s", err);
        return abort_startup(n);
    }
    if (n->idle) {
        identity_t id;
        rc = identity_load(&id, n->home, (uint64_t)time(NULL) * 1000, err, sizeof err);
        if (rc) {
            LOGE("node", "%s", err);
            return abort_startup(n);
        }
        snprintf(n->idle_id, sizeof n->idle_id, "%s", id.id);
        sodium_memzero(&id, sizeof id);
        snprintf(n->idle_msg, sizeof n->idle_msg,
                 "not in a mesh yet: join one at http://127.0.0.1:%d", n->mgmt.httpd.port);
        api_set_unavailable(&n->api, n->idle_msg);
    } else {
        rc = enter_mesh(n, n->ctx.cfg.joins, n->ctx.cfg.n_joins, err, sizeof err);
        if (rc) {
            LOGE("node", "%s", err);
            return abort_startup(n);
        }
    }

    uv_signal_init(n->loop, &n->sigint);
    uv_signal_init(n->loop, &n->sigterm);
    n->sigint.data = n->sigterm.data = n;
    uv_signal_start(&n->sigint, on_signal, SIGINT);
    uv_signal_start(&n->sigterm, on_signal, SIGTERM);

    models_preload(&n->ms);
    admission_start(&n->adm);
    if (n->ctx.cfg.auto_join) nostr_app_auto(&n->nostr);
    if (!n->ctx.cfg.client) {
        node_dl_deps_t dd = {
            .offer = n->vram, .on_done = dl_done, .on_change = dl_changed, .data = n};
        rc = node_dl_init(&n->ndl, n->loop, n->ctx.cfg.models_dir, &n->ctx.cfg.tun, &dd);
        if (rc)
            LOGW("node", "downloads disabled: %s", strerror(-rc));
        else
            node_dl_add_present(&n->ndl, &n->ctx.dl_args);
        if (rc == 0) {
            planner_set_downloads(&n->plan, &n->ndl);
            models_set_loader(&n->ms, load_ref, n);
            api_set_downloads(&n->api, &n->ndl);
        }
        const char *const *refs;
        size_t nref = node_dl_pending(&n->ctx.dl_args, &refs);
        for (size_t i = 0; i < nref && rc == 0; i++)
            if (node_dl_start(&n->ndl, refs[i], err, sizeof err) != 0)
                LOGE("node", "%s: %s", refs[i], err);
    }

    uv_run(n->loop, UV_RUN_DEFAULT);
    uv_walk(n->loop, close_walk_cb, NULL);
    uv_run(n->loop, UV_RUN_DEFAULT);
    uv_loop_close(n->loop);
    models_free(&n->ms);
    route_serve_free(&n->rs);
    sv_close(&n->sv);
    node_ctx_free(&n->ctx);
    return n->exit_code;
}

/* passive — see passive.h. */
#include "passive.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "meshstat.h"
#include "relay.h"
#include "route_decide.h"

#define PV_POLL_MS 50 /* while a request waits */

typedef struct pv_req {
    passive_t *p;
    httpd_req_t *req;
    char model[CATALOG_NAME_MAX];
    int needs;
    const request_t *rq;    /* the parsed body (req->rq): the stickiness and prefix keys */
    unsigned tries;         /* hosts tried */
    bool spilled;           /* the last step sent it past its hashed host (spill-over) */
    uint64_t dial_deadline; /* waiting for the connection to the current host */
    uint64_t deadline;      /* waiting for a table */
    struct pv_req *next;
} pv_req_t;

struct passive {
    uv_loop_t *loop;
    passive_io_t io; /* the mesh's (passive_start) or a test's */
    checkin_t *ck;
    relay_ctx_t *relay;
    size_t n_joins;
    uv_timer_t poll;
    pv_req_t *pending;
    size_t n_pending;
    struct {
        char id[ID_HEX_LEN + 1];
        uint64_t n; /* requests forwarded to it (in flight: relay_inflight) */
    } fwd[RT_MAX_NODES];
    size_t n_fwd;
    uint64_t retries, spilled;
    bool stopping;
};

static void poll_cb(uv_timer_t *t);
static bool step(passive_t *p, pv_req_t *r);

static uint64_t now_ms(passive_t *p)
{
    return checkin_now(p->ck);
}

static bool routing(const passive_t *p)
{
    return !p->stopping && checkin_active(p->ck);
}

static void kick(passive_t *p, uint64_t ms)
{
    if (routing(p)) uv_timer_start(&p->poll, poll_cb, ms, 0);
}

static void mark_bad(passive_t *p, const char *id)
{
    checkin_mark_bad(p->ck, id, false);
}

static void set_node_addrs(passive_t *p, const rt_node_t *n)
{
    const char *a[RT_MAX_ADDRS];
    for (size_t i = 0; i < n->n_addrs; i++)
        a[i] = n->addrs[i];
    p->io.set_addrs(p->io.data, n->id, a, n->n_addrs);
}

/* The check-in client's news (a table, a silent host): the waiting requests, now; paused or
 * stopped: they are answered (503) now. */
static void on_checkin(void *data)
{
    passive_t *p = data;
    if (!routing(p)) {
        while (p->pending)
            step(p, p->pending); /* answers 503 */
        return;
    }
    kick(p, 0);
}

/* ---- requests ---- */

static void pending_unlink(passive_t *p, pv_req_t *r)
{
    for (pv_req_t **pp = &p->pending; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            p->n_pending--;
            return;
        }
}

static void on_req_abort(httpd_req_t *req)
{
    pv_req_t *r = req->data;
    pending_unlink(r->p, r);
    free(r);
}

static void park(passive_t *p, pv_req_t *r)
{
    r->next = p->pending;
    p->pending = r;
    p->n_pending++;
    r->req->data = r;
    r->req->on_abort = on_req_abort;
}

/* Take r out of the waiting list: the request is answered or forwarded now. */
static void unpark(passive_t *p, pv_req_t *r)
{
    pending_unlink(p, r);
    r->req->data = NULL;
    r->req->on_abort = NULL;
}

/* Answer r with msg and free it. */
static void answer(pv_req_t *r, int status, const char *type, const char *code, const char *msg)
{
    httpd_req_t *req = r->req;
    unpark(r->p, r);
    httpd_respond_error(req, status, type, code, "%s", msg);
    free(r);
}

/* Answer r ("model '…': " msg) and free it. */
static void finish(pv_req_t *r, int status, const char *type, const char *code, const char *msg)
{
    char m[RD_MSG_MAX];
    snprintf(m, sizeof m, "model '%s': %s", r->model, msg);
    answer(r, status, type, code, m);
}

/* ---- forwarded requests: counts per host (in flight: relay_track) ---- */

static int fwd_slot(passive_t *p, const char *id, bool add)
{
    for (size_t i = 0; i < p->n_fwd; i++)
        if (strcmp(p->fwd[i].id, id) == 0) return (int)i;
    if (!add || p->n_fwd == RT_MAX_NODES) return -1;
    snprintf(p->fwd[p->n_fwd].id, sizeof p->fwd[0].id, "%s", id);
    p->fwd[p->n_fwd].n = 0;
    return (int)p->n_fwd++;
}

static void count_forward(passive_t *p, const char *id)
{
    int k = fwd_slot(p, id, true);
    if (k >= 0) p->fwd[k].n++;
}

void passive_facts(const passive_t *p, const char *model, rd_input_t *in, rd_host_t *hosts,
                   size_t *node_of, size_t max)
{
    rd_input_t t;
    rd_passive_input(&t, checkin_table(p->ck), model, in->self_id, hosts, node_of, max);
    in->passive = true;
    in->have_table = t.have_table;
    in->in_table = t.in_table;
    in->table_status = t.table_status;
    in->table_type = t.table_type;
    in->hosts = hosts;
    in->n_hosts = t.n_hosts;
    for (size_t k = 0; k < t.n_hosts; k++) {
        hosts[k].inflight = relay_inflight(p->relay, hosts[k].id);
        hosts[k].bad = checkin_is_bad(p->ck, hosts[k].id);
    }
}

/* One step for a waiting request: true when it left the pending list (forwarded/answered).
 * The verdict is route_decide's (core/route_decide.h) over the table's hosts of the model, with
 * this node's requests in flight there and the check-in client's bad marks. */
static bool step(passive_t *p, pv_req_t *r)
{
    uint64_t now = now_ms(p);
    if (p->stopping) {
        finish(r, 503, "unavailable", "shutting_down", "this node is shutting down");
        return true;
    }
    if (!checkin_active(p->ck)) {
        finish(r, 503, "unavailable", "model_replanned",
               "this node joined the mesh's gossip while the request waited; retry");
        return true;
    }
    const rt_table_t *t = checkin_table(p->ck);
    rd_host_t hosts[RD_MAX_HOSTS];
    size_t node_of[RD_MAX_HOSTS];
    rd_input_t in = {
        .rq = r->rq, /* the one stickiness rule (route_decide.h), as active nodes */
        .path = r->req->path,
        .model = r->model,
        .needs = r->needs,
        .self_id = p->io.self_id(p->io.data),
        .table_expired = now >= r->deadline,
        .tries = r->tries,
        .allow_host = rd_allows_host(httpd_header(r->req, RD_ALLOW_HOST_HEADER)),
    };
    passive_facts(p, r->model, &in, hosts, node_of, RD_MAX_HOSTS);
    relay_affinity_input(p->relay, &in);
    rd_decision_t d;
    route_decide(&in, &d);
    if (d.verdict == RD_WAIT) return false;
    if (d.verdict == RD_UNKNOWN) { /* the table came while it waited, without the model */
        finish(r, 404, "invalid_request_error", "model_not_found", "not found in the mesh");
        return true;
    }
    if (d.verdict != RD_FORWARD) { /* RD_REFUSE (no RD_LOCAL / RD_PARK: in.local is false) */
        answer(r, d.status, d.type, d.code, d.msg);
        return true;
    }
    r->spilled = d.spilled; /* counted when forwarded */
    /* the current candidate: hosts that failed went last, so index by tries among the rest */
    const rt_node_t *host = &t->nodes[node_of[d.order[0]]];
    set_node_addrs(p, host);
    tp_conn_t *c = p->io.conn(p->io.data, host->id);
    if (!c) {
        if (!r->dial_deadline) r->dial_deadline = now + checkin_attempt_ms(p->ck);
        if (now < r->dial_deadline) return false;
        LOGI("passive", "model %s: host %.12s cannot be reached; trying another", r->model,
             host->id);
        mark_bad(p, host->id);
        r->tries++;
        p->retries++; /* moved to the next host */
        r->dial_deadline = 0;
        return step(p, r);
    }
    unpark(p, r);
    r->dial_deadline = 0;
    /* the relay (relay.h) gives passive nodes the same failure semantics as active ones:
     * first-byte deadline, one retry, streams continued on another replica */
    relay_host_t relay[RELAY_MAX_HOSTS];
    size_t n_relay = 0;
    for (size_t k = 0; k < d.n && n_relay < RELAY_MAX_HOSTS; k++) {
        const rt_node_t *h = &t->nodes[node_of[d.order[k]]];
        if (k > 0 && hosts[d.order[k]].bad) continue;
        set_node_addrs(p, h);
        snprintf(relay[n_relay].id, sizeof relay[n_relay].id, "%s", h->id);
        relay[n_relay++].ready = in.table_status == CATALOG_READY;
    }
    httpd_req_t *req = r->req;
    relay_affinity_note(p->relay, &in, &d); /* before: a relay may end req (and rq) at once */
    relay_track(p->relay, req, host->id);
    count_forward(p, host->id);
    if (r->spilled) p->spilled++;
    if (p->io.relay(p->io.data, p->relay, r->model, req, relay, n_relay) == 0) {
        free(r);
        return true;
    }
    /* no host took it (the first one's stream limit or send queue full, the others not
     * connected): skip that host until the next table and try the next one at the next poll */
    if (r->spilled) p->spilled--;
    relay_untrack(req);
    int k = fwd_slot(p, host->id, false);
    if (k >= 0 && p->fwd[k].n > 0) p->fwd[k].n--;
    mark_bad(p, host->id);
    r->tries++;
    p->retries++;
    park(p, r);
    return false;
}

static void pump(passive_t *p)
{
    pv_req_t *r = p->pending, *next;
    for (; r; r = next) {
        next = r->next;
        step(p, r);
    }
}

bool passive_route(passive_t *p, const char *model, int needs, httpd_req_t *req)
{
    const rt_table_t *t = checkin_table(p->ck);
    if (t && !rt_table_find_model(t, model)) return false;
    pv_req_t *r = p->n_pending < PV_MAX_PENDING ? calloc(1, sizeof *r) : NULL;
    if (!r) {
        httpd_respond_error(req, 503, "unavailable", "busy",
                            "too many requests wait for a route; retry shortly");
        return true;
    }
    r->p = p;
    r->req = req;
    r->needs = needs;
    snprintf(r->model, sizeof r->model, "%s", model);
    r->rq = meshstat_parse_body(req); /* parsed once already (api_openai.c) */
    r->deadline =
        now_ms(p) + 2 * checkin_attempt_ms(p->ck) * (p->n_joins + 1) + checkin_refresh_ms(p->ck);
    park(p, r);
    step(p, r);
    if (p->pending) kick(p, PV_POLL_MS);
    return true;
}

/* ---- timers ---- */

static void poll_cb(uv_timer_t *t)
{
    passive_t *p = t->data;
    if (!routing(p)) return;
    pump(p);
    if (p->pending) uv_timer_start(&p->poll, poll_cb, PV_POLL_MS, 0);
}

/* ---- life cycle, status ---- */

static const char *mesh_io_self_id(void *data)
{
    return mesh_node_id(data);
}

static tp_conn_t *mesh_io_conn(void *data, const char *id)
{
    return mesh_conn(data, id);
}

static void mesh_io_set_addrs(void *data, const char *id, const char *const *a, size_t n)
{
    mesh_set_peer_addrs(data, id, a, n);
}

static int mesh_io_relay(void *data, relay_ctx_t *rc, const char *model, httpd_req_t *req,
                         const relay_host_t *hosts, size_t n)
{
    return relay_start(rc, data, model, req, hosts, n, true); /* it dials its hosts itself */
}

/* mesh: passive_start's (its check-in client is checkin_start's), else ckio's. */
static int start(passive_t **out, uv_loop_t *loop, mesh_t *mesh, const passive_io_t *io,
                 const checkin_io_t *ckio, const passive_opts_t *o)
{
    passive_t *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->loop = loop;
    p->io = *io;
    p->relay = o->relay;
    p->n_joins = o->n_joins;
    checkin_opts_t co = {.role = o->role,
                         .refresh_ms = o->refresh_ms,
                         .vram_bytes = o->vram_bytes,
                         .models = o->models,
                         .n_models = o->n_models,
                         .joins = o->joins,
                         .n_joins = o->n_joins,
                         .on_table = o->on_table,
                         .data = o->data,
                         .paused = o->paused};
    int rc = mesh ? checkin_start(&p->ck, loop, mesh, &co)
                  : checkin_start_io(&p->ck, loop, io->self_id(io->data), ckio, &co);
    if (rc) {
        free(p);
        return rc;
    }
    checkin_watch(p->ck, on_checkin, p);
    uv_timer_init(loop, &p->poll);
    p->poll.data = p;
    *out = p;
    return 0;
}

int passive_start(passive_t **out, uv_loop_t *loop, mesh_t *mesh, const passive_opts_t *o)
{
    passive_io_t io = {.self_id = mesh_io_self_id,
                       .conn = mesh_io_conn,
                       .set_addrs = mesh_io_set_addrs,
                       .relay = mesh_io_relay,
                       .data = mesh};
    return start(out, loop, mesh, &io, NULL, o);
}

int passive_start_io(passive_t **out, uv_loop_t *loop, const passive_io_t *io,
                     const checkin_io_t *ck, const passive_opts_t *o)
{
    return start(out, loop, NULL, io, ck, o);
}

/* The driver itself stays allocated: tunnels and streams in flight may still call back into it
 * until the mesh closes; they find it stopping. */
void passive_stop(passive_t *p)
{
    if (!p || p->stopping) return;
    p->stopping = true;
    uv_timer_stop(&p->poll);
    checkin_stop(p->ck); /* and the waiting requests are answered 503 (on_checkin) */
    while (p->pending)
        step(p, p->pending);
}

static void poll_closed(uv_handle_t *h)
{
    free(h->data);
}

void passive_free(passive_t *p)
{
    if (!p) return;
    passive_stop(p);
    checkin_free(p->ck);
    p->ck = NULL;
    uv_close((uv_handle_t *)&p->poll, poll_closed);
}

checkin_t *passive_checkin(const passive_t *p)
{
    return p ? p->ck : NULL;
}

bool passive_active(const passive_t *p)
{
    return p && routing(p);
}

const rt_table_t *passive_table(const passive_t *p)
{
    return p ? checkin_table(p->ck) : NULL;
}

static json_t *host_ids(const rt_table_t *t, const rt_model_t *m)
{
    json_t *a = json_array();
    for (size_t k = 0; a && k < m->n_hosts; k++)
        json_array_append_new(a, json_string(t->nodes[m->hosts[k].node].id));
    return a;
}

void passive_list_models(passive_t *p, model_list_t *list)
{
    const rt_table_t *t = checkin_table(p->ck);
    if (!t) return;
    for (size_t i = 0; i < t->n_models; i++) {
        const rt_model_t *m = &t->models[i];
        ml_row_t *r = ml_add(list, m->name);
        if (!r) continue;
        r->has_type = true;
        r->type = m->has_type ? m->type : MM_LLM;
        r->status = ml_status_of_catalog(m->status);
        r->has_hosts = true;
        for (size_t k = 0; k < m->n_hosts; k++)
            ml_add_host(r, t->nodes[m->hosts[k].node].id);
    }
}

static void put_inflight(const char *id, uint32_t n, void *data)
{
    json_object_set_new(data, id, json_integer(n));
}

void passive_status(passive_t *p, passive_status_t *out)
{
    *out = (passive_status_t){0};
    json_t *fwd = json_object();
    for (size_t i = 0; fwd && i < p->n_fwd; i++)
        json_object_set_new(fwd, p->fwd[i].id, json_integer((json_int_t)p->fwd[i].n));
    json_t *inflight = json_object();
    if (inflight) relay_each_inflight(p->relay, put_inflight, inflight);
    const checkin_stat_t c = checkin_stat(p->ck);
    json_t *o = json_pack(
        "{s:s,s:s?,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:I,s:o}", "role", c.role, "checkin", c.checkin,
        "refresh_ms", (json_int_t)c.refresh_ms, "table_age_ms", (json_int_t)c.table_age_ms,
        "active_nodes", (json_int_t)c.active_nodes, "checkins", (json_int_t)c.checkins,
        "failed_rounds", (json_int_t)c.failed_rounds, "retries", (json_int_t)p->retries,
        "forwarded", fwd, "spilled", (json_int_t)p->spilled, "in_flight", inflight);
    out->route = o;
    const rt_table_t *t = checkin_table(p->ck);
    if (!t) return;
    json_t *nodes = json_array(); /* the mesh's active nodes, as the table says (the console) */
    for (size_t i = 0; nodes && i < t->n_nodes; i++)
        json_array_append_new(nodes, json_pack("{s:s,s:I}", "id", t->nodes[i].id, "vram_bytes",
                                               (json_int_t)t->nodes[i].vram_bytes));
    if (o)
        json_object_set_new(o, "nodes", nodes);
    else
        json_decref(nodes);
    json_t *cat = json_array(); /* the mesh's catalog, as the table says */
    for (size_t i = 0; cat && i < t->n_models; i++) {
        const rt_model_t *m = &t->models[i];
        json_t *e = json_pack("{s:s,s:s,s:s,s:o,s:o,s:[]}", "name", m->name, "status",
                              catalog_status_name(m->status), "type",
                              m->has_type ? mm_type_name(m->type) : "llm", "hosts", host_ids(t, m),
                              "servers", host_ids(t, m), "holders");
        if (e) json_array_append_new(cat, e);
    }
    out->catalog = cat;
}

/* passive — see passive.h. */
#include "passive.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "meshstat.h"
#include "relay.h"
#include "util.h"
#include "wire.h"

#define PV_POLL_MS 50 /* while a dial or a request waits */
#define PV_MAX_CAND (RT_MAX_NODES + MESH_MAX_JOIN)
#define PV_MAX_BAD 32
/* after a host went silent: a new table once the mesh agreed it is dead (the gossip probe,
 * GOSSIP_PROBE_MAX_MS, + slack) */
#define PV_SILENT_REFRESH_MS 3000
#define PV_GONE_ROUNDS 3 /* rounds in a row without an answer: every active node is gone */

typedef struct {
    char id[ID_HEX_LEN + 1];
    char addrs[TOKEN_MAX_ADDRS][TOKEN_ADDR_MAX];
    size_t n_addrs;
} pv_cand_t;

typedef struct ck ck_t;

typedef struct pv_req {
    passive_t *p;
    httpd_req_t *req;
    char model[CATALOG_NAME_MAX];
    int needs;
    bool has_key;
    uint64_t key;           /* request.h's passive_key */
    unsigned tries;         /* hosts tried */
    bool spilled;           /* the last step sent it past its hashed host (rt_spill) */
    uint64_t dial_deadline; /* waiting for the connection to the current host */
    uint64_t deadline;      /* waiting for a table */
    struct pv_req *next;
} pv_req_t;

typedef enum { PV_IDLE = 0, PV_DIALING, PV_ASKING } pv_state_t;

struct passive {
    uv_loop_t *loop;
    mesh_t *mesh;
    passive_opts_t o;
    char (*models)[CATALOG_NAME_MAX];
    token_t *joins;
    rt_table_t *table, *scratch;
    bool have_table;
    uint64_t table_at;
    char checkin[ID_HEX_LEN + 1]; /* the node that answered last */
    pv_cand_t *cand;
    size_t n_cand, i_cand;
    pv_state_t state;
    uint64_t attempt_ms, attempt_deadline;
    unsigned failed_rounds;
    ck_t *ck;
    uv_timer_t timer, poll;
    pv_req_t *pending;
    size_t n_pending;
    struct {
        char id[ID_HEX_LEN + 1];
        uint64_t until;
        bool silent; /* its connection went silent: the mark outlives a new table */
    } bad[PV_MAX_BAD];
    struct {
        char id[ID_HEX_LEN + 1];
        uint64_t n;        /* requests forwarded to it */
        uint32_t inflight; /* of those, not finished yet (spill-over) */
    } fwd[RT_MAX_NODES];
    size_t n_fwd;
    uint64_t checkins, failures, retries, spilled;
    bool stopping, paused;
};

struct ck {
    passive_t *p; /* NULL once the attempt is over (answered, abandoned) */
    wire_reader_t rd;
    bool answered;
};

static void poll_cb(uv_timer_t *t);
static void round_cb(uv_timer_t *t);
static void abandon_checkin(passive_t *p);

static uint64_t now_ms(passive_t *p)
{
    return uv_now(p->loop);
}

static void kick(passive_t *p, uint64_t ms)
{
    if (!p->stopping && !p->paused) uv_timer_start(&p->poll, poll_cb, ms, 0);
}

/* ---- bad hosts (skipped until the next table) ---- */

static bool is_bad(void *data, const char *id)
{
    passive_t *p = data;
    uint64_t now = now_ms(p);
    for (size_t i = 0; i < PV_MAX_BAD; i++)
        if (p->bad[i].until > now && strcmp(p->bad[i].id, id) == 0) return true;
    return false;
}

static void mark_bad_as(passive_t *p, const char *id, bool silent)
{
    size_t k = 0;
    for (size_t i = 0; i < PV_MAX_BAD; i++)
        if (p->bad[i].until < p->bad[k].until) k = i;
    snprintf(p->bad[k].id, sizeof p->bad[k].id, "%s", id);
    p->bad[k].until = now_ms(p) + p->o.refresh_ms;
    p->bad[k].silent = silent;
}

static void mark_bad(passive_t *p, const char *id)
{
    mark_bad_as(p, id, false);
}

/* A new table: failed hosts get another chance, silent ones stay skipped (the table may list
 * them until the mesh has agreed they are dead). */
static void clear_bad(passive_t *p)
{
    for (size_t i = 0; i < PV_MAX_BAD; i++)
        if (!p->bad[i].silent) memset(&p->bad[i], 0, sizeof p->bad[i]);
}

static bool is_silent(passive_t *p, const char *id)
{
    for (size_t i = 0; i < PV_MAX_BAD; i++)
        if (p->bad[i].silent && strcmp(p->bad[i].id, id) == 0) return is_bad(p, id);
    return false;
}

static void set_addrs(passive_t *p, const char *id, char addrs[][TOKEN_ADDR_MAX], size_t n)
{
    const char *a[TOKEN_MAX_ADDRS];
    for (size_t i = 0; i < n && i < TOKEN_MAX_ADDRS; i++)
        a[i] = addrs[i];
    mesh_set_peer_addrs(p->mesh, id, a, n < TOKEN_MAX_ADDRS ? n : TOKEN_MAX_ADDRS);
}

static void set_node_addrs(passive_t *p, const rt_node_t *n)
{
    const char *a[RT_MAX_ADDRS];
    for (size_t i = 0; i < n->n_addrs; i++)
        a[i] = n->addrs[i];
    mesh_set_peer_addrs(p->mesh, n->id, a, n->n_addrs);
}

/* ---- check-in ---- */

static void add_cand(passive_t *p, const char *id, char addrs[][TOKEN_ADDR_MAX], size_t n)
{
    if (p->n_cand == PV_MAX_CAND || strcmp(id, mesh_node_id(p->mesh)) == 0) return;
    for (size_t i = 0; i < p->n_cand; i++)
        if (strcmp(p->cand[i].id, id) == 0) return;
    pv_cand_t *c = &p->cand[p->n_cand++];
    snprintf(c->id, sizeof c->id, "%s", id);
    c->n_addrs = n < TOKEN_MAX_ADDRS ? n : TOKEN_MAX_ADDRS;
    for (size_t i = 0; i < c->n_addrs; i++)
        snprintf(c->addrs[i], TOKEN_ADDR_MAX, "%s", addrs[i]);
}

static void try_next(passive_t *p);

static void round_failed(passive_t *p)
{
    p->state = PV_IDLE;
    p->failures++;
    uint64_t cap = p->o.refresh_ms / 2 > 500 ? p->o.refresh_ms / 2 : 500;
    uint64_t d = backoff_ms(p->failed_rounds++, 250, cap);
    uint64_t r;
    randombytes_buf(&r, sizeof r);
    d -= r % (d / 2 + 1);
    if ((p->failed_rounds & (p->failed_rounds - 1)) == 0)
        LOGW("passive", "no active node answered a route request (%zu tried); again in %.1f s",
             p->n_cand, (double)d / 1000);
    uv_timer_start(&p->timer, round_cb, d, 0);
    if (p->failed_rounds >= PV_GONE_ROUNDS && p->o.on_table) p->o.on_table(p->o.data, NULL);
}

static void ck_data(tp_stream_t *s, const uint8_t *b, size_t n)
{
    ck_t *x = tp_stream_data(s);
    tp_stream_consumed(s, n);
    passive_t *p = x->p;
    while (p && n > 0 && !x->answered) {
        json_t *f = NULL;
        ssize_t used = wire_read(&x->rd, b, n, &f);
        if (used < 0) {
            LOGD("passive", "malformed route table: %s", strerror((int)-used));
            tp_stream_reset(s, 1);
            return; /* on_close: the next candidate */
        }
        b += used;
        n -= (size_t)used;
        if (!f) continue;
        int rc = rt_table_decode(f, p->scratch);
        json_decref(f);
        if (rc || strcmp(p->scratch->mesh_id, mesh_id(p->mesh)) != 0) {
            LOGW("passive", "%.12s answered a route request with %s", p->cand[p->i_cand].id,
                 rc ? "an invalid table" : "another mesh's table");
            tp_stream_reset(s, 1);
            return;
        }
        x->answered = true;
        if (p->have_table) /* nodes gone from the table: their tunnels fail over now */
            for (size_t i = 0; i < p->table->n_nodes; i++) {
                tp_conn_t *c = rt_table_find_node(p->scratch, p->table->nodes[i].id) < 0
                                   ? mesh_find_conn(p->mesh, p->table->nodes[i].id)
                                   : NULL;
                if (c) tp_conn_close(c, 0, "gone from the routing table");
            }
        rt_table_t *t = p->table;
        p->table = p->scratch;
        p->scratch = t;
        if (!p->have_table || strcmp(p->checkin, p->cand[p->i_cand].id) != 0)
            LOGI("passive", "routing table from %.12s: %zu active node(s), %zu model(s)",
                 p->cand[p->i_cand].id, p->table->n_nodes, p->table->n_models);
        p->have_table = true;
        p->table_at = now_ms(p);
        snprintf(p->checkin, sizeof p->checkin, "%s", p->cand[p->i_cand].id);
        clear_bad(p);
        p->checkins++;
        p->failed_rounds = 0;
        p->state = PV_IDLE;
        p->ck = NULL;
        x->p = NULL;
        /* a model still loading (or an empty mesh): look again within a second */
        uint64_t next = p->o.refresh_ms;
        for (size_t i = 0; i < p->table->n_models; i++)
            if (p->table->models[i].status == CATALOG_LOADING) next = 1000;
        if (p->table->n_models == 0) next = 1000;
        uv_timer_start(&p->timer, round_cb, next < p->o.refresh_ms ? next : p->o.refresh_ms, 0);
        if (p->o.on_table) p->o.on_table(p->o.data, p->table);
        kick(p, 0); /* waiting requests */
    }
}

static void ck_close(tp_stream_t *s, int err)
{
    ck_t *x = tp_stream_data(s);
    passive_t *p = x->p;
    wire_reader_free(&x->rd);
    free(x);
    if (!p) return;
    /* no table on this stream: the next candidate (decided in the poll timer) */
    p->ck = NULL;
    p->attempt_deadline = 0;
    kick(p, 0);
}

static const tp_stream_cb_t ck_cb = {ck_data, NULL, NULL, ck_close};

static int ask(passive_t *p, tp_conn_t *c)
{
    ck_t *x = calloc(1, sizeof *x);
    rt_request_t *rq = calloc(1, sizeof *rq);
    json_t *f = NULL;
    buf_t b;
    buf_init(&b, WIRE_MAX_FRAME + 8);
    tp_stream_t *s = NULL;
    int rc = -ENOMEM;
    if (!x || !rq) goto out;
    snprintf(rq->id, sizeof rq->id, "%s", mesh_node_id(p->mesh));
    rq->role = p->o.role;
    rq->vram_bytes = p->o.vram_bytes;
    for (size_t i = 0; i < p->o.n_models && i < RT_MAX_REQ_MODELS; i++)
        snprintf(rq->models[rq->n_models++], CATALOG_NAME_MAX, "%s", p->models[i]);
    for (size_t i = 0; i < PV_MAX_BAD && rq->n_silent < RT_MAX_SILENT; i++)
        if (p->bad[i].silent && p->bad[i].until > now_ms(p))
            snprintf(rq->silent[rq->n_silent++], sizeof rq->silent[0], "%s", p->bad[i].id);
    f = rt_request_encode(rq);
    if (!f || (rc = wire_write(&b, WIRE_ROUTE_REQUEST, f)) != 0) goto out;
    x->p = p;
    wire_reader_init(&x->rd, 0);
    rc = tp_stream_open(c, &ck_cb, x, &s);
    if (rc) {
        wire_reader_free(&x->rd);
        goto out;
    }
    p->ck = x;
    x = NULL; /* the stream owns it now */
    rc = tp_stream_write(s, b.data, b.len);
    if (rc == 0)
        tp_stream_shutdown(s);
    else
        tp_stream_reset(s, 1); /* on_close moves on */
    rc = 0;
out:
    free(x);
    free(rq);
    json_decref(f);
    buf_free(&b);
    return rc;
}

/* Dial (or use the connection to) the current candidate, or move past the last one. */
static void try_next(passive_t *p)
{
    while (p->i_cand < p->n_cand && !p->stopping) {
        pv_cand_t *c = &p->cand[p->i_cand];
        if (is_silent(p, c->id)) { /* found dead by our own connection: not worth a dial */
            p->i_cand++;
            continue;
        }
        set_addrs(p, c->id, c->addrs, c->n_addrs);
        tp_conn_t *conn = mesh_conn(p->mesh, c->id);
        p->attempt_deadline = now_ms(p) + p->attempt_ms;
        if (!conn) {
            p->state = PV_DIALING;
            kick(p, PV_POLL_MS);
            return;
        }
        if (ask(p, conn) == 0) {
            p->state = PV_ASKING;
            kick(p, PV_POLL_MS);
            return;
        }
        p->i_cand++;
    }
    round_failed(p);
}

static void round_cb(uv_timer_t *t)
{
    passive_t *p = t->data;
    if (p->stopping || p->paused || p->state != PV_IDLE) return;
    p->n_cand = p->i_cand = 0;
    if (p->have_table) {
        size_t order[RT_MAX_NODES];
        size_t n = rt_checkin_order(p->table, mesh_node_id(p->mesh), order, RT_MAX_NODES);
        for (size_t k = 0; k < n; k++) {
            const rt_node_t *nd = &p->table->nodes[order[k]];
            char addrs[RT_MAX_ADDRS][TOKEN_ADDR_MAX];
            for (size_t i = 0; i < nd->n_addrs; i++)
                snprintf(addrs[i], TOKEN_ADDR_MAX, "%s", nd->addrs[i]);
            add_cand(p, nd->id, addrs, nd->n_addrs);
        }
    }
    for (size_t i = 0; i < p->o.n_joins; i++)
        add_cand(p, p->joins[i].id, p->joins[i].addrs, p->joins[i].n_addrs);
    try_next(p);
}

/* The connection to `id` went silent while streams were open (mesh_on_silent, ~2 s after a
 * kill -9): its requests fail over or end now (the relay), later ones skip it, and a new table
 * is asked for once the mesh has had time to agree it is dead (PV_SILENT_REFRESH_MS) instead
 * of at the refresh period. */
static void on_silent(void *data, const char *id)
{
    passive_t *p = data;
    if (p->stopping) return;
    LOGI("passive", "host %.12s went silent; skipping it, new routing table in %.1f s", id,
         PV_SILENT_REFRESH_MS / 1000.0);
    mark_bad_as(p, id, true);
    if (!p->paused && p->state == PV_IDLE &&
        (!uv_is_active((uv_handle_t *)&p->timer) ||
         uv_timer_get_due_in(&p->timer) > PV_SILENT_REFRESH_MS))
        uv_timer_start(&p->timer, round_cb, PV_SILENT_REFRESH_MS, 0);
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

/* Answer r and free it. */
static void finish(pv_req_t *r, int status, const char *type, const char *code, const char *msg)
{
    httpd_req_t *req = r->req;
    unpark(r->p, r);
    req->data = NULL;
    req->on_abort = NULL;
    httpd_respond_error(req, status, type, code, "model '%s': %s", r->model, msg);
    free(r);
}

/* ---- forwarded requests: counts and this node's requests in flight per host ---- */

typedef struct {
    passive_t *p;
    size_t slot; /* index in p->fwd */
    void (*prev)(httpd_req_t *req);
    void *prev_data;
} pv_flight_t;

static int fwd_slot(passive_t *p, const char *id, bool add)
{
    for (size_t i = 0; i < p->n_fwd; i++)
        if (strcmp(p->fwd[i].id, id) == 0) return (int)i;
    if (!add || p->n_fwd == RT_MAX_NODES) return -1;
    snprintf(p->fwd[p->n_fwd].id, sizeof p->fwd[0].id, "%s", id);
    p->fwd[p->n_fwd].n = 0;
    p->fwd[p->n_fwd].inflight = 0;
    return (int)p->n_fwd++;
}

static uint32_t inflight_at(passive_t *p, const char *id)
{
    int k = fwd_slot(p, id, false);
    return k < 0 ? 0 : p->fwd[k].inflight;
}

/* The request's life ended (answered, failed, client gone): one fewer in flight there; then
 * whoever watched it before (admission control) is told. */
static void flight_done(httpd_req_t *req)
{
    pv_flight_t *f = req->finish_data;
    if (f->p->fwd[f->slot].inflight > 0) f->p->fwd[f->slot].inflight--;
    req->on_finish = f->prev;
    req->finish_data = f->prev_data;
    free(f);
    if (req->on_finish) {
        void (*fn)(httpd_req_t *) = req->on_finish;
        req->on_finish = NULL;
        fn(req);
    }
}

/* Counted in flight at host id from now on (before it is handed over: a forward may end it). */
static void track(passive_t *p, httpd_req_t *req, const char *id)
{
    int k = fwd_slot(p, id, true);
    pv_flight_t *f = k < 0 ? NULL : calloc(1, sizeof *f);
    if (!f) return; /* not counted in flight: the spill-over sees one request fewer */
    *f = (pv_flight_t){
        .p = p, .slot = (size_t)k, .prev = req->on_finish, .prev_data = req->finish_data};
    req->on_finish = flight_done;
    req->finish_data = f;
    p->fwd[k].inflight++;
}

/* Not handed over after all (or its host failed before answering): no longer in flight there. */
static void untrack(httpd_req_t *req)
{
    if (req->on_finish != flight_done) return;
    pv_flight_t *f = req->finish_data;
    if (f->p->fwd[f->slot].inflight > 0) f->p->fwd[f->slot].inflight--;
    req->on_finish = f->prev;
    req->finish_data = f->prev_data;
    free(f);
}

static void count_forward(passive_t *p, const char *id)
{
    int k = fwd_slot(p, id, true);
    if (k >= 0) p->fwd[k].n++;
}

/* One step for a waiting request: true when it left the pending list (forwarded/answered). */
static bool step(passive_t *p, pv_req_t *r)
{
    uint64_t now = now_ms(p);
    if (p->stopping) {
        finish(r, 503, "unavailable", "shutting_down", "this node is shutting down");
        return true;
    }
    if (p->paused) {
        finish(r, 503, "unavailable", "model_replanned",
               "this node joined the mesh's gossip while the request waited; retry");
        return true;
    }
    if (!p->have_table) {
        if (now < r->deadline) return false;
        finish(r, 503, "unavailable", "no_route",
               "no active node of the mesh answered a route request yet; retry shortly");
        return true;
    }
    const rt_model_t *m = rt_table_find_model(p->table, r->model);
    if (!m) {
        finish(r, 404, "invalid_request_error", "model_not_found", "not found in the mesh");
        return true;
    }
    if (m->has_type && r->needs >= 0 && r->needs < MM_N_TYPES && (int)m->type != r->needs) {
        httpd_req_t *req = r->req;
        unpark(p, r);
        httpd_respond_error(req, 400, "invalid_request_error", "model_type_mismatch",
                            "model '%s' is a %s model and cannot serve %s", r->model,
                            mm_type_name(m->type), req->path);
        free(r);
        return true;
    }
    size_t order[RT_MAX_HOSTS];
    size_t n = rt_pick_hosts(p->table, m, mesh_node_id(p->mesh), r->has_key ? &r->key : NULL,
                             is_bad, p, order, RT_MAX_HOSTS);
    if (n == 0) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "in the mesh (status %s) but no node serves it now; retry "
                 "shortly",
                 catalog_status_name(m->status));
        finish(r, 503, "unavailable", "model_unavailable", msg);
        return true;
    }
    if (r->tries >= n || r->tries >= PV_MAX_TRIES) {
        finish(r, 503, "unavailable", "host_unreachable",
               "its hosts cannot be reached right now; retry shortly");
        return true;
    }
    /* without a stickiness key: the host with the fewest of this node's requests in flight per
     * slot, the hashed one among equals (rt_spill; hosts that just failed are no candidates) */
    r->spilled = false;
    if (!r->has_key && r->tries == 0) {
        uint32_t inflight[RT_MAX_HOSTS];
        size_t good = 0;
        while (good < n && !is_bad(p, p->table->nodes[order[good]].id)) {
            inflight[good] = inflight_at(p, p->table->nodes[order[good]].id);
            good++;
        }
        r->spilled = rt_spill(m, order, good, inflight) > 0; /* counted when forwarded */
    }
    /* the current candidate: hosts that failed went last, so index by tries among the rest */
    const rt_node_t *host = &p->table->nodes[order[0]];
    set_node_addrs(p, host);
    tp_conn_t *c = mesh_conn(p->mesh, host->id);
    if (!c) {
        if (!r->dial_deadline) r->dial_deadline = now + p->attempt_ms;
        if (now < r->dial_deadline) return false;
        LOGI("passive", "model %s: host %.12s cannot be reached; trying another", r->model,
             host->id);
        mark_bad(p, host->id);
        r->tries++;
        r->dial_deadline = 0;
        return step(p, r);
    }
    unpark(p, r);
    r->dial_deadline = 0;
    /* the relay (relay.h) gives passive nodes the same failure semantics as active ones:
     * first-byte deadline, one retry, streams continued on another replica */
    relay_host_t hosts[RELAY_MAX_HOSTS];
    size_t nh = 0;
    for (size_t k = 0; k < n && nh < RELAY_MAX_HOSTS; k++) {
        const rt_node_t *h = &p->table->nodes[order[k]];
        if (k > 0 && is_bad(p, h->id)) continue;
        set_node_addrs(p, h);
        snprintf(hosts[nh].id, sizeof hosts[nh].id, "%s", h->id);
        hosts[nh++].ready = m->status == CATALOG_READY;
    }
    httpd_req_t *req = r->req;
    track(p, req, host->id);
    count_forward(p, host->id);
    if (r->spilled) p->spilled++;
    if (relay_start(p->o.relay, p->mesh, r->model, req, hosts, nh) == 0) {
        free(r);
        return true;
    }
    /* no host took it (the first one's stream limit or send queue full, the others not
     * connected): skip that host until the next table and try the next one at the next poll */
    if (r->spilled) p->spilled--;
    untrack(req);
    int k = fwd_slot(p, host->id, false);
    if (k >= 0 && p->fwd[k].n > 0) p->fwd[k].n--;
    mark_bad(p, host->id);
    r->tries++;
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
    if (p->have_table && !rt_table_find_model(p->table, model)) return false;
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
    const request_t *rq = meshstat_parse_body(req); /* parsed once already (api_openai.c) */
    r->has_key = rq->has_passive_key;
    r->key = rq->passive_key;
    r->deadline = now_ms(p) + 2 * p->attempt_ms * (p->o.n_joins + 1) + p->o.refresh_ms;
    park(p, r);
    step(p, r);
    if (p->pending) kick(p, PV_POLL_MS);
    return true;
}

/* ---- timers ---- */

static void poll_cb(uv_timer_t *t)
{
    passive_t *p = t->data;
    if (p->stopping || p->paused) return;
    uint64_t now = now_ms(p);
    if (p->state == PV_DIALING || p->state == PV_ASKING) {
        pv_cand_t *c = &p->cand[p->i_cand];
        tp_conn_t *conn = mesh_find_conn(p->mesh, c->id);
        if (p->state == PV_DIALING && conn && ask(p, conn) == 0) {
            p->state = PV_ASKING;
            p->attempt_deadline = now + p->attempt_ms;
        } else if (p->state == PV_ASKING && !p->ck) { /* closed without an answer */
            p->i_cand++;
            try_next(p);
        } else if (now >= p->attempt_deadline) {
            LOGI("passive", "check-in with %.12s: no answer within %llu ms; trying the next node",
                 c->id, (unsigned long long)p->attempt_ms);
            if (p->ck) {
                p->ck->p = NULL; /* its close no longer concerns us */
                p->ck = NULL;
            }
            if (conn) tp_conn_close(conn, 0, "no route table");
            p->i_cand++;
            try_next(p);
        }
    }
    pump(p);
    if (p->state == PV_DIALING || p->state == PV_ASKING || p->pending)
        uv_timer_start(&p->poll, poll_cb, PV_POLL_MS, 0);
}

/* ---- life cycle, status ---- */

int passive_start(passive_t **out, uv_loop_t *loop, mesh_t *mesh, const passive_opts_t *o)
{
    passive_t *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->loop = loop;
    p->mesh = mesh;
    p->o = *o;
    if (!p->o.refresh_ms) p->o.refresh_ms = RT_REFRESH_MS;
    uint64_t a = p->o.refresh_ms / 3;
    p->attempt_ms = a < 500 ? 500 : a > 5000 ? 5000 : a;
    p->table = malloc(sizeof *p->table);
    p->scratch = malloc(sizeof *p->scratch);
    p->cand = calloc(PV_MAX_CAND, sizeof *p->cand);
    p->n_cand = 0;
    p->models = o->n_models ? calloc(o->n_models, sizeof *p->models) : NULL;
    p->joins = o->n_joins ? calloc(o->n_joins, sizeof *p->joins) : NULL;
    if (!p->table || !p->scratch || !p->cand || (o->n_models && !p->models) ||
        (o->n_joins && !p->joins)) {
        free(p->table);
        free(p->scratch);
        free(p->cand);
        free(p->models);
        free(p->joins);
        free(p);
        return -ENOMEM;
    }
    for (size_t i = 0; i < o->n_models; i++)
        snprintf(p->models[i], CATALOG_NAME_MAX, "%s", o->models[i]);
    if (o->n_joins) memcpy(p->joins, o->joins, sizeof *p->joins * o->n_joins);
    p->o.models = NULL;
    p->o.joins = NULL;
    uv_timer_init(loop, &p->timer);
    uv_timer_init(loop, &p->poll);
    p->timer.data = p->poll.data = p;
    p->paused = o->paused;
    mesh_on_silent(mesh, on_silent, p);
    if (!p->paused) {
        LOGI("passive",
             "passive %s node: no gossip; routing table every %.1f s from an active node",
             rt_role_name(o->role), (double)p->o.refresh_ms / 1000);
        uv_timer_start(&p->timer, round_cb, 0, 0);
    }
    *out = p;
    return 0;
}

/* The driver itself stays allocated: tunnels and streams in flight may still call back into it
 * until the mesh closes; they find it stopping. */
void passive_stop(passive_t *p)
{
    if (!p || p->stopping) return;
    p->stopping = true;
    mesh_on_silent(p->mesh, NULL, NULL);
    abandon_checkin(p);
    while (p->pending)
        step(p, p->pending); /* answers 503 */
    if (p->joins) sodium_memzero(p->joins, sizeof *p->joins * p->o.n_joins);
}

static void abandon_checkin(passive_t *p)
{
    uv_timer_stop(&p->timer);
    uv_timer_stop(&p->poll);
    if (p->ck) p->ck->p = NULL;
    p->ck = NULL;
    p->state = PV_IDLE;
}

void passive_pause(passive_t *p)
{
    if (!p || p->stopping || p->paused) return;
    p->paused = true;
    abandon_checkin(p);
    while (p->pending)
        step(p, p->pending); /* answers 503 */
}

void passive_resume(passive_t *p)
{
    if (!p || p->stopping || !p->paused) return;
    p->paused = false;
    p->failed_rounds = 0;
    memset(p->bad, 0, sizeof p->bad);
    LOGI("passive", "passive %s node again: routing tables every %.1f s", rt_role_name(p->o.role),
         (double)p->o.refresh_ms / 1000);
    uv_timer_start(&p->timer, round_cb, 0, 0);
}

bool passive_active(const passive_t *p)
{
    return p && !p->stopping && !p->paused;
}

const rt_table_t *passive_table(const passive_t *p)
{
    return p && p->have_table ? p->table : NULL;
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
    if (!p->have_table) return;
    const rt_table_t *t = p->table;
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

void passive_status(passive_t *p, json_t *st)
{
    json_t *fwd = json_object();
    for (size_t i = 0; fwd && i < p->n_fwd; i++)
        json_object_set_new(fwd, p->fwd[i].id, json_integer((json_int_t)p->fwd[i].n));
    json_t *inflight = json_object();
    for (size_t i = 0; inflight && i < p->n_fwd; i++)
        if (p->fwd[i].inflight)
            json_object_set_new(inflight, p->fwd[i].id, json_integer(p->fwd[i].inflight));
    json_t *o = json_pack("{s:s,s:s?,s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "role", rt_role_name(p->o.role),
                          "checkin", p->have_table ? p->checkin : NULL, "refresh_ms",
                          (json_int_t)p->o.refresh_ms, "table_age_ms",
                          (json_int_t)(p->have_table ? now_ms(p) - p->table_at : 0), "active_nodes",
                          (json_int_t)(p->have_table ? p->table->n_nodes : 0), "checkins",
                          (json_int_t)p->checkins, "failed_rounds", (json_int_t)p->failures,
                          "retries", (json_int_t)p->retries, "forwarded", fwd);
    if (o) {
        json_object_set_new(o, "spilled", json_integer((json_int_t)p->spilled));
        json_object_set_new(o, "in_flight", inflight);
        json_object_set_new(st, "route", o);
    } else {
        json_decref(inflight);
    }
    if (!p->have_table) return;
    json_t *nodes = json_array(); /* the mesh's active nodes, as the table says (the console) */
    for (size_t i = 0; nodes && i < p->table->n_nodes; i++)
        json_array_append_new(nodes,
                              json_pack("{s:s,s:I}", "id", p->table->nodes[i].id, "vram_bytes",
                                        (json_int_t)p->table->nodes[i].vram_bytes));
    if (o)
        json_object_set_new(o, "nodes", nodes);
    else
        json_decref(nodes);
    json_t *cat = json_array(); /* the mesh's catalog, as the table says */
    for (size_t i = 0; cat && i < p->table->n_models; i++) {
        const rt_model_t *m = &p->table->models[i];
        json_t *e = json_pack("{s:s,s:s,s:s,s:o,s:o,s:[]}", "name", m->name, "status",
                              catalog_status_name(m->status), "type",
                              m->has_type ? mm_type_name(m->type) : "llm", "hosts",
                              host_ids(p->table, m), "servers", host_ids(p->table, m), "holders");
        if (e) json_array_append_new(cat, e);
    }
    json_object_set_new(st, "catalog", cat);
}

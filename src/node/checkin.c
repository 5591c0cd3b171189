/* checkin — see checkin.h. */
#include "checkin.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"
#include "wire.h"

#define CK_MAX_CAND (RT_MAX_NODES + MESH_MAX_JOIN)

typedef struct {
    char id[ID_HEX_LEN + 1];
    char addrs[TOKEN_MAX_ADDRS][TOKEN_ADDR_MAX];
    size_t n_addrs;
} ck_cand_t;

typedef struct ck_ask ck_ask_t;

typedef enum { CK_IDLE = 0, CK_DIALING, CK_ASKING } ck_state_t;

struct checkin {
    uv_loop_t *loop;
    mesh_t *mesh; /* checkin_start's (NULL with checkin_start_io) */
    checkin_io_t io;
    checkin_opts_t o;
    char self[ID_HEX_LEN + 1];
    char (*models)[CATALOG_NAME_MAX];
    token_t *joins;
    rt_table_t *table, *scratch;
    bool have_table;
    uint64_t table_at;
    char checkin[ID_HEX_LEN + 1]; /* the node that answered last */
    ck_cand_t *cand;
    size_t n_cand, i_cand;
    size_t n_tried;   /* candidates dialled or asked this round */
    bool last_resort; /* every candidate was silent: this round tries them anyway */
    ck_state_t state;
    uint64_t attempt_ms, attempt_deadline;
    unsigned failed_rounds;
    ck_ask_t *ask;
    uv_timer_t timer, poll;
    struct {
        char id[ID_HEX_LEN + 1];
        uint64_t until;
        bool silent; /* its connection went silent: the mark outlives a new table */
    } bad[CK_MAX_BAD];
    uint64_t checkins, failures;
    bool stopping, paused;
    int closed; /* timers closed (checkin_free) */
    void (*watch)(void *data);
    void *watch_data;
};

struct ck_ask {
    checkin_t *ck; /* NULL once the attempt is over (answered, abandoned) */
    wire_reader_t rd;
    bool answered;
};

static void poll_cb(uv_timer_t *t);
static void round_cb(uv_timer_t *t);
static void abandon(checkin_t *ck);

uint64_t checkin_now(const checkin_t *ck)
{
    return ck->io.now ? ck->io.now(ck->io.data) : uv_now(ck->loop);
}

static void kick(checkin_t *ck, uint64_t ms)
{
    if (!ck->stopping && !ck->paused) uv_timer_start(&ck->poll, poll_cb, ms, 0);
}

static void notify(checkin_t *ck)
{
    if (ck->watch) ck->watch(ck->watch_data);
}

/* ---- bad hosts (skipped until the next table) ---- */

bool checkin_is_bad(const checkin_t *ck, const char *id)
{
    uint64_t now = checkin_now(ck);
    for (size_t i = 0; i < CK_MAX_BAD; i++)
        if (ck->bad[i].until > now && strcmp(ck->bad[i].id, id) == 0) return true;
    return false;
}

void checkin_mark_bad(checkin_t *ck, const char *id, bool silent)
{
    size_t k = 0;
    for (size_t i = 0; i < CK_MAX_BAD; i++)
        if (ck->bad[i].until < ck->bad[k].until) k = i;
    snprintf(ck->bad[k].id, sizeof ck->bad[k].id, "%s", id);
    ck->bad[k].until = checkin_now(ck) + ck->o.refresh_ms;
    ck->bad[k].silent = silent;
}

/* A new table: failed hosts get another chance, silent ones stay skipped (the table may list
 * them until the mesh has agreed they are dead). */
static void clear_bad(checkin_t *ck)
{
    for (size_t i = 0; i < CK_MAX_BAD; i++)
        if (!ck->bad[i].silent) memset(&ck->bad[i], 0, sizeof ck->bad[i]);
}

static bool is_silent(checkin_t *ck, const char *id)
{
    for (size_t i = 0; i < CK_MAX_BAD; i++)
        if (ck->bad[i].silent && strcmp(ck->bad[i].id, id) == 0) return checkin_is_bad(ck, id);
    return false;
}

static void set_addrs(checkin_t *ck, const char *id, char addrs[][TOKEN_ADDR_MAX], size_t n)
{
    const char *a[TOKEN_MAX_ADDRS];
    for (size_t i = 0; i < n && i < TOKEN_MAX_ADDRS; i++)
        a[i] = addrs[i];
    ck->io.set_addrs(ck->io.data, id, a, n < TOKEN_MAX_ADDRS ? n : TOKEN_MAX_ADDRS);
}

/* ---- check-in ---- */

static void add_cand(checkin_t *ck, const char *id, char addrs[][TOKEN_ADDR_MAX], size_t n)
{
    if (ck->n_cand == CK_MAX_CAND || strcmp(id, ck->self) == 0) return;
    for (size_t i = 0; i < ck->n_cand; i++)
        if (strcmp(ck->cand[i].id, id) == 0) return;
    ck_cand_t *c = &ck->cand[ck->n_cand++];
    snprintf(c->id, sizeof c->id, "%s", id);
    c->n_addrs = n < TOKEN_MAX_ADDRS ? n : TOKEN_MAX_ADDRS;
    for (size_t i = 0; i < c->n_addrs; i++)
        snprintf(c->addrs[i], TOKEN_ADDR_MAX, "%s", addrs[i]);
}

static void try_next(checkin_t *ck);

static void round_failed(checkin_t *ck)
{
    ck->state = CK_IDLE;
    ck->failures++;
    uint64_t cap = ck->o.refresh_ms / 2 > 500 ? ck->o.refresh_ms / 2 : 500;
    uint64_t d = backoff_ms(ck->failed_rounds++, 250, cap);
    uint64_t r;
    randombytes_buf(&r, sizeof r);
    d -= r % (d / 2 + 1);
    if ((ck->failed_rounds & (ck->failed_rounds - 1)) == 0)
        LOGW("passive", "no active node answered a route request (%zu tried); again in %.1f s",
             ck->n_cand, (double)d / 1000);
    uv_timer_start(&ck->timer, round_cb, d, 0);
    if (ck->failed_rounds >= CK_GONE_ROUNDS && ck->o.on_table) ck->o.on_table(ck->o.data, NULL);
}

/* A table came on the current candidate's stream: it becomes the table. */
static void take_table(checkin_t *ck)
{
    const char *from = ck->cand[ck->i_cand].id;
    if (ck->have_table) /* nodes gone from the table: their tunnels fail over now */
        for (size_t i = 0; i < ck->table->n_nodes; i++) {
            tp_conn_t *c = rt_table_find_node(ck->scratch, ck->table->nodes[i].id) < 0
                               ? ck->io.find(ck->io.data, ck->table->nodes[i].id)
                               : NULL;
            if (c) tp_conn_close(c, 0, "gone from the routing table");
        }
    rt_table_t *t = ck->table;
    ck->table = ck->scratch;
    ck->scratch = t;
    if (!ck->have_table || strcmp(ck->checkin, from) != 0)
        LOGI("passive", "routing table from %.12s: %zu active node(s), %zu model(s)", from,
             ck->table->n_nodes, ck->table->n_models);
    ck->have_table = true;
    ck->table_at = checkin_now(ck);
    snprintf(ck->checkin, sizeof ck->checkin, "%s", from);
    clear_bad(ck);
    ck->checkins++;
    ck->failed_rounds = 0;
    ck->state = CK_IDLE;
    ck->ask = NULL;
    /* a model still loading (or an empty mesh): look again within a second */
    uint64_t next = ck->o.refresh_ms;
    for (size_t i = 0; i < ck->table->n_models; i++)
        if (ck->table->models[i].status == CATALOG_LOADING) next = 1000;
    if (ck->table->n_models == 0) next = 1000;
    uv_timer_start(&ck->timer, round_cb, next < ck->o.refresh_ms ? next : ck->o.refresh_ms, 0);
    if (ck->o.on_table) ck->o.on_table(ck->o.data, ck->table);
    notify(ck); /* waiting requests */
}

static void ask_data(tp_stream_t *s, const uint8_t *b, size_t n)
{
    ck_ask_t *x = tp_stream_data(s);
    tp_stream_consumed(s, n);
    checkin_t *ck = x->ck;
    while (ck && n > 0 && !x->answered) {
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
        int rc = rt_table_decode(f, ck->scratch);
        json_decref(f);
        const char *mid = ck->io.mesh_id(ck->io.data);
        if (rc || strcmp(ck->scratch->mesh_id, mid ? mid : "") != 0) {
            LOGW("passive", "%.12s answered a route request with %s", ck->cand[ck->i_cand].id,
                 rc ? "an invalid table" : "another mesh's table");
            tp_stream_reset(s, 1);
            return;
        }
        x->answered = true;
        x->ck = NULL;
        take_table(ck);
    }
}

static void ask_close(tp_stream_t *s, int err)
{
    (void)err;
    ck_ask_t *x = tp_stream_data(s);
    checkin_t *ck = x->ck;
    wire_reader_free(&x->rd);
    free(x);
    if (!ck) return;
    /* no table on this stream: the next candidate (decided in the poll timer) */
    ck->ask = NULL;
    ck->attempt_deadline = 0;
    kick(ck, 0);
}

static const tp_stream_cb_t ask_cb = {ask_data, NULL, NULL, ask_close};

static int ask(checkin_t *ck, tp_conn_t *c)
{
    ck_ask_t *x = calloc(1, sizeof *x);
    rt_request_t *rq = calloc(1, sizeof *rq);
    json_t *f = NULL;
    buf_t b;
    buf_init(&b, WIRE_MAX_FRAME + 8);
    tp_stream_t *s = NULL;
    int rc = -ENOMEM;
    if (!x || !rq) goto out;
    snprintf(rq->id, sizeof rq->id, "%s", ck->self);
    rq->role = ck->o.role;
    rq->vram_bytes = ck->o.vram_bytes;
    for (size_t i = 0; i < ck->o.n_models && i < RT_MAX_REQ_MODELS; i++)
        snprintf(rq->models[rq->n_models++], CATALOG_NAME_MAX, "%s", ck->models[i]);
    uint64_t now = checkin_now(ck);
    for (size_t i = 0; i < CK_MAX_BAD && rq->n_silent < RT_MAX_SILENT; i++)
        if (ck->bad[i].silent && ck->bad[i].until > now)
            snprintf(rq->silent[rq->n_silent++], sizeof rq->silent[0], "%s", ck->bad[i].id);
    f = rt_request_encode(rq);
    if (!f || (rc = wire_write(&b, WIRE_ROUTE_REQUEST, f)) != 0) goto out;
    x->ck = ck;
    wire_reader_init(&x->rd, 0);
    rc = tp_stream_open(c, &ask_cb, x, &s);
    if (rc) {
        wire_reader_free(&x->rd);
        goto out;
    }
    ck->ask = x;
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
static void try_next(checkin_t *ck)
{
    while (ck->i_cand < ck->n_cand && !ck->stopping) {
        ck_cand_t *c = &ck->cand[ck->i_cand];
        if (!ck->last_resort && is_silent(ck, c->id)) { /* found dead by our own connection */
            ck->i_cand++;
            continue;
        }
        ck->n_tried++;
        set_addrs(ck, c->id, c->addrs, c->n_addrs);
        tp_conn_t *conn = ck->io.conn(ck->io.data, c->id);
        ck->attempt_deadline = checkin_now(ck) + ck->attempt_ms;
        if (!conn) {
            ck->state = CK_DIALING;
            kick(ck, CK_POLL_MS);
            return;
        }
        if (ask(ck, conn) == 0) {
            ck->state = CK_ASKING;
            kick(ck, CK_POLL_MS);
            return;
        }
        ck->i_cand++;
    }
    if (ck->n_tried == 0 && ck->n_cand > 0 && !ck->last_resort && !ck->stopping) {
        /* every candidate went silent: skipping them all would leave this node without a table
         * until the marks expire, though the silence may have been ours (a network change, a
         * laptop waking): dial them anyway, a dead one only costs its attempt */
        LOGD("passive", "every active node it knows went silent; asking them anyway");
        ck->last_resort = true;
        ck->i_cand = 0;
        try_next(ck);
        return;
    }
    round_failed(ck);
}

static void round_cb(uv_timer_t *t)
{
    checkin_t *ck = t->data;
    if (ck->stopping || ck->paused || ck->state != CK_IDLE) return;
    ck->n_cand = ck->i_cand = ck->n_tried = 0;
    ck->last_resort = false;
    if (ck->have_table) {
        size_t order[RT_MAX_NODES];
        size_t n = rt_checkin_order(ck->table, ck->self, order, RT_MAX_NODES);
        for (size_t k = 0; k < n; k++) {
            const rt_node_t *nd = &ck->table->nodes[order[k]];
            char addrs[RT_MAX_ADDRS][TOKEN_ADDR_MAX];
            for (size_t i = 0; i < nd->n_addrs; i++)
                snprintf(addrs[i], TOKEN_ADDR_MAX, "%s", nd->addrs[i]);
            add_cand(ck, nd->id, addrs, nd->n_addrs);
        }
    }
    for (size_t i = 0; i < ck->o.n_joins; i++)
        add_cand(ck, ck->joins[i].id, ck->joins[i].addrs, ck->joins[i].n_addrs);
    try_next(ck);
}

/* The connection to `id` went silent while streams were open (mesh_on_silent, ~2 s after a
 * kill -9): its requests fail over or end now (the relay), later ones skip it, and a new table
 * is asked for once the mesh has had time to agree it is dead (CK_SILENT_REFRESH_MS) instead
 * of at the refresh period. */
void checkin_on_silent(void *data, const char *id)
{
    checkin_t *ck = data;
    if (ck->stopping) return;
    LOGI("passive", "host %.12s went silent; skipping it, new routing table in %.1f s", id,
         CK_SILENT_REFRESH_MS / 1000.0);
    checkin_mark_bad(ck, id, true);
    if (!ck->paused && ck->state == CK_IDLE &&
        (!uv_is_active((uv_handle_t *)&ck->timer) ||
         uv_timer_get_due_in(&ck->timer) > CK_SILENT_REFRESH_MS))
        uv_timer_start(&ck->timer, round_cb, CK_SILENT_REFRESH_MS, 0);
    notify(ck);
}

/* The attempt in flight: asked once the dial is done, abandoned past its bound. */
static void poll_cb(uv_timer_t *t)
{
    checkin_t *ck = t->data;
    if (ck->stopping || ck->paused) return;
    if (ck->state != CK_DIALING && ck->state != CK_ASKING) return;
    uint64_t now = checkin_now(ck);
    ck_cand_t *c = &ck->cand[ck->i_cand];
    tp_conn_t *conn = ck->io.find(ck->io.data, c->id);
    if (ck->state == CK_DIALING && conn && ask(ck, conn) == 0) {
        ck->state = CK_ASKING;
        ck->attempt_deadline = now + ck->attempt_ms;
    } else if (ck->state == CK_ASKING && !ck->ask) { /* closed without an answer */
        ck->i_cand++;
        try_next(ck);
    } else if (now >= ck->attempt_deadline) {
        LOGI("passive", "check-in with %.12s: no answer within %llu ms; trying the next node",
             c->id, (unsigned long long)ck->attempt_ms);
        if (ck->ask) {
            ck->ask->ck = NULL; /* its close no longer concerns us */
            ck->ask = NULL;
        }
        if (conn) tp_conn_close(conn, 0, "no route table");
        ck->i_cand++;
        try_next(ck);
    }
    if (ck->state == CK_DIALING || ck->state == CK_ASKING)
        uv_timer_start(&ck->poll, poll_cb, CK_POLL_MS, 0);
}

/* ---- life cycle ---- */

static tp_conn_t *mesh_io_conn(void *data, const char *id)
{
    return mesh_conn(data, id);
}

static tp_conn_t *mesh_io_find(void *data, const char *id)
{
    return mesh_find_conn(data, id);
}

static void mesh_io_set_addrs(void *data, const char *id, const char *const *a, size_t n)
{
    mesh_set_peer_addrs(data, id, a, n);
}

static const char *mesh_io_mesh_id(void *data)
{
    return mesh_id(data);
}

static void release(checkin_t *ck)
{
    free(ck->table);
    free(ck->scratch);
    free(ck->cand);
    free(ck->models);
    free(ck->joins);
    free(ck);
}

int checkin_start(checkin_t **out, uv_loop_t *loop, mesh_t *mesh, const checkin_opts_t *o)
{
    checkin_io_t io = {.conn = mesh_io_conn,
                       .find = mesh_io_find,
                       .set_addrs = mesh_io_set_addrs,
                       .mesh_id = mesh_io_mesh_id,
                       .now = NULL, /* the loop's clock */
                       .data = mesh};
    int rc = checkin_start_io(out, loop, mesh_node_id(mesh), &io, o);
    if (rc) return rc;
    (*out)->mesh = mesh;
    mesh_on_silent(mesh, checkin_on_silent, *out);
    return 0;
}

int checkin_start_io(checkin_t **out, uv_loop_t *loop, const char *self_id, const checkin_io_t *io,
                     const checkin_opts_t *o)
{
    checkin_t *ck = calloc(1, sizeof *ck);
    if (!ck) return -ENOMEM;
    ck->loop = loop;
    ck->io = *io;
    ck->o = *o;
    snprintf(ck->self, sizeof ck->self, "%s", self_id ? self_id : "");
    if (!ck->o.refresh_ms) ck->o.refresh_ms = RT_REFRESH_MS;
    uint64_t a = ck->o.refresh_ms / 3;
    ck->attempt_ms = a < 500 ? 500 : a > 5000 ? 5000 : a;
    ck->table = malloc(sizeof *ck->table);
    ck->scratch = malloc(sizeof *ck->scratch);
    ck->cand = calloc(CK_MAX_CAND, sizeof *ck->cand);
    ck->models = o->n_models ? calloc(o->n_models, sizeof *ck->models) : NULL;
    ck->joins = o->n_joins ? calloc(o->n_joins, sizeof *ck->joins) : NULL;
    if (!ck->table || !ck->scratch || !ck->cand || (o->n_models && !ck->models) ||
        (o->n_joins && !ck->joins)) {
        release(ck);
        return -ENOMEM;
    }
    for (size_t i = 0; i < o->n_models; i++)
        snprintf(ck->models[i], CATALOG_NAME_MAX, "%s", o->models[i]);
    if (o->n_joins) memcpy(ck->joins, o->joins, sizeof *ck->joins * o->n_joins);
    ck->o.models = NULL;
    ck->o.joins = NULL;
    uv_timer_init(loop, &ck->timer);
    uv_timer_init(loop, &ck->poll);
    ck->timer.data = ck->poll.data = ck;
    ck->paused = o->paused;
    if (!ck->paused) {
        LOGI("passive",
             "passive %s node: no gossip; routing table every %.1f s from an active node",
             rt_role_name(o->role), (double)ck->o.refresh_ms / 1000);
        uv_timer_start(&ck->timer, round_cb, 0, 0);
    }
    *out = ck;
    return 0;
}

void checkin_stop(checkin_t *ck)
{
    if (!ck || ck->stopping) return;
    ck->stopping = true;
    if (ck->mesh) mesh_on_silent(ck->mesh, NULL, NULL);
    abandon(ck);
    if (ck->joins) sodium_memzero(ck->joins, sizeof *ck->joins * ck->o.n_joins);
    notify(ck);
}

static void closed_cb(uv_handle_t *h)
{
    checkin_t *ck = h->data;
    if (++ck->closed == 2) release(ck);
}

void checkin_free(checkin_t *ck)
{
    if (!ck) return;
    checkin_stop(ck);
    uv_close((uv_handle_t *)&ck->timer, closed_cb);
    uv_close((uv_handle_t *)&ck->poll, closed_cb);
}

static void abandon(checkin_t *ck)
{
    uv_timer_stop(&ck->timer);
    uv_timer_stop(&ck->poll);
    if (ck->ask) ck->ask->ck = NULL;
    ck->ask = NULL;
    ck->state = CK_IDLE;
}

void checkin_pause(checkin_t *ck)
{
    if (!ck || ck->stopping || ck->paused) return;
    ck->paused = true;
    abandon(ck);
    notify(ck);
}

void checkin_resume(checkin_t *ck)
{
    if (!ck || ck->stopping || !ck->paused) return;
    ck->paused = false;
    ck->failed_rounds = 0;
    memset(ck->bad, 0, sizeof ck->bad);
    LOGI("passive", "passive %s node again: routing tables every %.1f s", rt_role_name(ck->o.role),
         (double)ck->o.refresh_ms / 1000);
    uv_timer_start(&ck->timer, round_cb, 0, 0);
}

bool checkin_active(const checkin_t *ck)
{
    return ck && !ck->stopping && !ck->paused;
}

const rt_table_t *checkin_table(const checkin_t *ck)
{
    return ck && ck->have_table ? ck->table : NULL;
}

uint64_t checkin_refresh_ms(const checkin_t *ck)
{
    return ck->o.refresh_ms;
}

uint64_t checkin_attempt_ms(const checkin_t *ck)
{
    return ck->attempt_ms;
}

void checkin_watch(checkin_t *ck, void (*fn)(void *data), void *data)
{
    ck->watch = fn;
    ck->watch_data = data;
}

checkin_stat_t checkin_stat(const checkin_t *ck)
{
    return (checkin_stat_t){
        .role = rt_role_name(ck->o.role),
        .checkin = ck->have_table ? ck->checkin : NULL,
        .refresh_ms = ck->o.refresh_ms,
        .table_age_ms = ck->have_table ? checkin_now(ck) - ck->table_at : 0,
        .active_nodes = ck->have_table ? ck->table->n_nodes : 0,
        .checkins = ck->checkins,
        .failed_rounds = ck->failures,
    };
}

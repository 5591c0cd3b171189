/* Unit tests for the routing driver (src/node/route.h): route_inference with a fake facts provider
 * and fake actions (route_ops_t), so each verdict of route_decide is checked to become its
 * action — serve here, park, relay to the hosts in order, the error answers, the download's 503,
 * a passive node's own driver — and the driver's own state: the one stickiness rule (the home
 * host of requests without a key, the spill-over by this node's requests in flight, a key's
 * host), prefix affinity's memory and counters in the node's relay_ctx_t, and
 * MESH_LLM_PREFIX_AFFINITY read through the tunables. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "affinity.h"
#include "mm.h"
#include "relay.h"
#include "route.h"
#include "tunables.h"

#define X10 "xxxxxxxxxx"
#define X100 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10
#define X600 X100 X100 X100 X100 X100 X100
#define PREFIXED "{\"prompt\":\"" X600 "\"}" /* a prefix key, no stickiness key */
#define IMAGES "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}"

/* ---- the fake world ---- */

typedef struct {
    const char *peers; /* "aR bF": a peer per word, id then flags (R ready, S starting, F file,
                          Q requested, V vision) */
    int plan;          /* RD_PLAN_* */
    bool requested, offline, dl_here, dl_mesh;
    bool passive;            /* a passive driver routes: the table below */
    int table;               /* 0: none yet, 1: one without the model, 2: one with it */
    const char *table_hosts; /* its hosts of the model: "ab", an id per letter */
    bool passive_takes;
    int relay_rc;
    char log[256]; /* the actions, in order */
    unsigned peer_calls;
} world_t;

static world_t W;

static void logf_(const char *fmt, ...)
{
    size_t l = strlen(W.log);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(W.log + l, sizeof W.log - l, fmt, ap);
    va_end(ap);
}

static size_t f_peers(void *data, const char *model, rd_host_t *out, size_t max)
{
    (void)data;
    (void)model;
    static char ids[16][2];
    size_t n = 0;
    W.peer_calls++;
    for (const char *p = W.peers; p && *p && n < max && n < 16;) {
        while (*p == ' ')
            p++;
        if (!*p) break;
        ids[n][0] = *p++;
        ids[n][1] = '\0';
        rd_host_t h = {.id = ids[n], .type = -1};
        for (; *p && *p != ' '; p++) {
            h.ready |= *p == 'R';
            h.starting |= *p == 'S';
            h.requested |= *p == 'Q';
            h.vision |= *p == 'V';
            if (*p == 'F') {
                h.has_file = true;
                h.type = MM_LLM;
            }
        }
        out[n++] = h;
    }
    return n;
}

static int f_plan(void *data, const char *model)
{
    (void)data;
    (void)model;
    return W.plan;
}

static bool f_requested(void *data, const char *model)
{
    (void)data;
    (void)model;
    return W.requested;
}

static bool f_online(void *data)
{
    (void)data;
    return !W.offline;
}

static bool f_dl_here(void *data, const char *model)
{
    (void)data;
    (void)model;
    return W.dl_here;
}

static bool f_dl_mesh(void *data, const char *model)
{
    (void)data;
    (void)model;
    return W.dl_mesh;
}

static bool f_passive_facts(void *data, const char *model, rd_input_t *in, rd_host_t *hosts,
                            size_t max)
{
    (void)data;
    (void)model;
    static char ids[16][2];
    if (!W.passive) return false;
    in->passive = true;
    in->have_table = W.table > 0;
    in->in_table = W.table == 2;
    in->table_status = CATALOG_READY;
    in->table_type = -1;
    in->hosts = hosts;
    in->n_hosts = 0;
    for (const char *p = W.table == 2 ? W.table_hosts : NULL;
         p && *p && in->n_hosts < max && in->n_hosts < 16; p++) {
        size_t k = in->n_hosts++;
        ids[k][0] = *p;
        ids[k][1] = '\0';
        hosts[k] = (rd_host_t){.id = ids[k], .ready = true, .type = -1};
    }
    return true;
}

static bool f_passive_route(void *data, const char *model, int needs, httpd_req_t *req)
{
    (void)data;
    (void)needs;
    (void)req;
    logf_("passive %s%s;", model, W.passive_takes ? "" : " (declined)");
    return W.passive_takes;
}

static void f_park(void *data, const char *model, httpd_req_t *req)
{
    (void)data;
    (void)req;
    logf_("park %s;", model);
}

static int f_relay(void *data, const char *model, httpd_req_t *req, const relay_host_t *hosts,
                   size_t n)
{
    (void)data;
    (void)model;
    (void)req;
    logf_("relay ");
    for (size_t i = 0; i < n; i++)
        logf_("%s%s", hosts[i].id, hosts[i].ready ? "" : "?");
    logf_(";");
    return W.relay_rc;
}

static void f_downloading(void *data, rd_download_t where, const char *model, httpd_req_t *req)
{
    (void)data;
    (void)req;
    logf_("downloading %s %s;", where == RD_DL_HERE ? "here" : "mesh", model);
}

static void f_answer(void *data, httpd_req_t *req, int status, const char *type, const char *code,
                     const char *msg)
{
    (void)data;
    (void)req;
    (void)type;
    assert_true(msg && msg[0]);
    logf_("answer %d %s;", status, code);
}

static const route_ops_t OPS = {
    .peers = f_peers,
    .plan = f_plan,
    .requested = f_requested,
    .online = f_online,
    .dl_here = f_dl_here,
    .dl_mesh = f_dl_mesh,
    .passive_facts = f_passive_facts,
    .passive_route = f_passive_route,
    .park = f_park,
    .relay = f_relay,
    .downloading = f_downloading,
    .answer = f_answer,
};

static route_t RT;
static relay_ctx_t RC;

static int setup(void **state)
{
    (void)state;
    memset(&W, 0, sizeof W);
    memset(&RC, 0, sizeof RC);
    route_init_ops(&RT, &OPS, NULL, "self");
    RT.d.relay = &RC;
    return 0;
}

/* ---- a request ---- */

static httpd_req_t REQ;

/* The request's end (httpd's req_finished): what the driver watched it with is told. */
static void finish_(void)
{
    void (*f)(httpd_req_t *) = REQ.on_finish;
    REQ.on_finish = NULL;
    if (f) f(&REQ);
}

static int teardown(void **state)
{
    (void)state;
    finish_();
    return 0;
}

static route_outcome_t send_(const char *body, const route_local_t *local, int needs, bool hop)
{
    finish_(); /* the one before ended */
    memset(&REQ, 0, sizeof REQ);
    REQ.path = "/v1/chat/completions";
    const char *b = body ? body : "{}";
    assert_int_equal(request_parse(&REQ.rq, REQ.path, b, strlen(b)), 0);
    REQ.rq_ok = true; /* parsed once, as api_openai.c does */
    W.log[0] = '\0';
    return route_inference(&RT, "m", local, needs, &REQ, hop);
}

static const route_local_t HERE = {.have = true, .type = MM_LLM, .vision = false};
static const route_local_t HERE_VISION = {.have = true, .type = MM_LLM, .vision = true};

/* ---- verdict → action ---- */

static void test_local_verdicts(void **state)
{
    (void)state;
    W.plan = RD_PLAN_SERVE;
    assert_int_equal(send_(NULL, &HERE, -1, false), ROUTE_LOCAL);
    assert_string_equal(W.log, "");
    /* the endpoint needs another type: 400 from the decision, not served */
    assert_int_equal(send_(NULL, &HERE, MM_EMBEDDING, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "answer 400 model_type_mismatch;");
    W.plan = RD_PLAN_WAIT; /* the split starting here: parked */
    assert_int_equal(send_(NULL, &HERE, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "park m;");
    W.plan = RD_PLAN_REMOTE; /* its host is elsewhere and ready */
    W.peers = "aR";
    assert_int_equal(send_(NULL, &HERE, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "relay a;");
    W.peers = NULL; /* ... not ready, nobody else: 503 */
    assert_int_equal(send_(NULL, &HERE, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "answer 503 model_unavailable;");
    W.peers = "aR"; /* a hop is never forwarded again */
    assert_int_equal(send_(NULL, &HERE, -1, true), ROUTE_TAKEN);
    assert_string_equal(W.log, "answer 503 model_unavailable;");
}

static void test_remote_verdicts(void **state)
{
    (void)state;
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_UNKNOWN); /* nobody knows it */
    assert_string_equal(W.log, "");
    W.peers = "aR bR";
    assert_int_equal(send_(NULL, NULL, -1, true), ROUTE_UNKNOWN); /* a hop */
    assert_string_equal(W.log, "");
    W.offline = true; /* no mesh: the peers are not asked */
    W.peer_calls = 0;
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_UNKNOWN);
    assert_int_equal(W.peer_calls, 0);
    W.offline = false;
    W.peers = "aS bF"; /* none ready: the ones that would take it, not ready (no deadline) */
    assert_int_equal(send_("{\"user\":\"u\"}", NULL, -1, false), ROUTE_TAKEN);
    assert_true(strcmp(W.log, "relay a?b?;") == 0 || strcmp(W.log, "relay b?a?;") == 0);
    W.peers = "aF"; /* another type */
    assert_int_equal(send_(NULL, NULL, MM_RERANKING, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "answer 400 model_type_mismatch;");
    W.peers = "aR"; /* images, no peer with a projector */
    assert_int_equal(send_(IMAGES, NULL, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "answer 400 model_not_multimodal;");
    W.peers = "aQ"; /* requested, no file anywhere */
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "answer 503 model_unavailable;");
    W.dl_mesh = true; /* ... but a peer downloads it */
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "downloading mesh m;");
    W.dl_here = true; /* a download here answers first */
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "downloading here m;");
    W.dl_here = W.dl_mesh = false;
    W.peers = "aR bR";
    W.relay_rc = -ENOTCONN; /* the relay reached no host */
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_TAKEN);
    assert_int_equal(strncmp(W.log, "relay ", 6), 0); /* then the answer */
    assert_non_null(strstr(W.log, ";answer 503 host_unreachable;"));
}

/* Images for a model of this node without a projector go to a peer that has one. */
static void test_images(void **state)
{
    (void)state;
    W.plan = RD_PLAN_SERVE;
    W.peers = "aRV bR";
    assert_int_equal(send_(IMAGES, &HERE, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "relay a;");
    assert_int_equal(send_(IMAGES, &HERE_VISION, -1, false), ROUTE_LOCAL);
    W.peers = "bR"; /* nobody has one: 400 */
    assert_int_equal(send_(IMAGES, &HERE, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "answer 400 model_not_multimodal;");
}

/* A passive node decides over its table (passive_facts) by the same rule; what the decision
 * sends to the table (forward, or wait for a first table) the passive driver takes. */
static void test_passive(void **state)
{
    (void)state;
    W.passive = true;
    W.peers = "aR"; /* the peers are not asked */
    W.passive_takes = true;
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_TAKEN); /* no table yet: it waits */
    assert_string_equal(W.log, "passive m;");
    W.table = 1; /* a table without the model: unknown, the driver is not asked */
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_UNKNOWN);
    assert_string_equal(W.log, "");
    W.table = 2; /* with it, but no host serves it now: 503 from the decision */
    W.table_hosts = "";
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "answer 503 model_unavailable;");
    W.table_hosts = "bc";
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "passive m;");
    assert_int_equal(send_(NULL, NULL, MM_EMBEDDING, false), ROUTE_TAKEN); /* the type: unknown */
    assert_string_equal(W.log, "passive m;");
    W.passive_takes = false; /* the table changed under it: unknown */
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_UNKNOWN);
    assert_string_equal(W.log, "passive m (declined);");
    W.passive_takes = true;
    W.dl_here = true; /* a download here answers first */
    assert_int_equal(send_(NULL, NULL, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "downloading here m;");
    W.dl_here = false;
    /* a standby with the model on disk: the table's hosts while there are any */
    W.plan = RD_PLAN_SERVE;
    W.table_hosts = "";
    assert_int_equal(send_(NULL, &HERE, -1, false), ROUTE_LOCAL); /* none listed: here */
    assert_string_equal(W.log, "");
    W.table_hosts = "bc";
    assert_int_equal(send_(NULL, &HERE, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "passive m;");
    W.passive_takes = false;
    assert_int_equal(send_(NULL, &HERE, -1, false), ROUTE_LOCAL); /* declined: here */
    assert_string_equal(W.log, "passive m (declined);");
    W.passive_takes = true;
    assert_int_equal(send_(NULL, &HERE, -1, true), ROUTE_LOCAL); /* a hop: served here */
    assert_string_equal(W.log, "");
    W.passive_takes = false; /* images, no projector here, no table host took them */
    assert_int_equal(send_(IMAGES, &HERE, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "passive m (declined);answer 400 model_not_multimodal;");
    W.table = 1; /* images, no projector here, the table does not list it: 400 */
    assert_int_equal(send_(IMAGES, &HERE, -1, false), ROUTE_TAKEN);
    assert_string_equal(W.log, "answer 400 model_not_multimodal;");
}

/* The first host of the last relay ("relay ab;" -> 'a'). */
static char first_host(void)
{
    assert_int_equal(strncmp(W.log, "relay ", 6), 0);
    return W.log[6];
}

/* The one stickiness rule (S20), as a passive node's: a request without a key goes to this entry
 * node's home host for the model (hash(self id, model)), every time, not round robin; while this
 * node has a request in flight there and the other host has none, the next spills over; a
 * request with a key stays on FNV-1a(key)'s host, full or not, from any entry node. */
static void test_one_rule(void **state)
{
    (void)state;
    W.peers = "aR bR";
    send_(NULL, NULL, -1, false);
    char home = first_host();
    for (int i = 0; i < 3; i++) { /* the one before finished each time: the home host again */
        send_(NULL, NULL, -1, false);
        assert_int_equal(first_host(), home);
    }
    static httpd_req_t held; /* this one stays in flight at the home host */
    held = REQ;
    REQ.on_finish = NULL;
    char other = home == 'a' ? 'b' : 'a';
    send_(NULL, NULL, -1, false);
    assert_int_equal(first_host(), other); /* spilled */
    char sticky[16] = "";
    for (int i = 0; i < 50 && !sticky[0]; i++) { /* a user whose hashed host is the full one */
        char body[64];
        snprintf(body, sizeof body, "{\"user\":\"user-%d\"}", i);
        send_(body, NULL, -1, false);
        if (first_host() == home) snprintf(sticky, sizeof sticky, "user-%d", i);
    }
    assert_true(sticky[0]);
    void (*f)(httpd_req_t *) = held.on_finish; /* the held one ends */
    held.on_finish = NULL;
    f(&held);
    /* the same key from another entry node: the same host; no key: that node's home host */
    route_init_ops(&RT, &OPS, NULL, "another-entry-node");
    RT.d.relay = &RC;
    char body[64];
    snprintf(body, sizeof body, "{\"user\":\"%s\"}", sticky);
    send_(body, NULL, -1, false);
    assert_int_equal(first_host(), home);
    /* "user": "" is no key (the old active router pinned it on FNV-1a("")): the home host */
    send_("{\"user\":\"\",\"session_id\":\"s\"}", NULL, -1, false);
    char by_session = first_host();
    send_("{\"session_id\":\"s\"}", NULL, -1, false);
    assert_int_equal(first_host(), by_session);
}

/* The prefix key of PREFIXED (request.h). */
static uint64_t prefix_key(void)
{
    request_t rq;
    assert_int_equal(request_parse(&rq, "/v1/chat/completions", PREFIXED, strlen(PREFIXED)), 0);
    assert_true(rq.prefix != 0);
    return rq.prefix;
}

/* Prefix affinity: a request whose prompt prefix went to a host goes there again, before the
 * home host; the memory and the counters are the relay context's (per node). */
static void test_affinity(void **state)
{
    (void)state;
    W.peers = "aR bR";
    send_(NULL, NULL, -1, false);
    char home = first_host(), other = home == 'a' ? 'b' : 'a';
    send_(PREFIXED, NULL, -1, false); /* the home host; remembered */
    assert_int_equal(first_host(), home);
    assert_int_equal(RC.affinity.misses, 1);
    const char ids[2][2] = {{other, 0}, {home, 0}};
    affinity_put(&RC.affinity, prefix_key(), ids[0]); /* as if it went to the other host */
    send_(PREFIXED, NULL, -1, false);
    assert_int_equal(first_host(), other);
    assert_int_equal(RC.affinity.hits, 1);
    static relay_ctx_t fresh; /* another node's context never saw the prefix */
    memset(&fresh, 0, sizeof fresh);
    RT.d.relay = &fresh;
    send_(PREFIXED, NULL, -1, false);
    assert_int_equal(first_host(), home);
    assert_int_equal(fresh.affinity.hits, 0);
    assert_int_equal(fresh.affinity.misses, 1);
    assert_string_equal(affinity_get(&fresh.affinity, prefix_key()), ids[1]);
    RT.d.relay = &RC;
}

/* MESH_LLM_PREFIX_AFFINITY follows the one 0/1 rule of the tunables (relay_ctx_t.tun): off, no,
 * false and 0 turn it off (only "0" did when relay.c read the environment); unset, on and 1 leave
 * it on. Off, the home host stands and nothing is counted or remembered. */
static void test_affinity_switch(void **state)
{
    (void)state;
    static const struct {
        const char *env;
        bool on;
    } CASES[] = {{NULL, true},
                 {"MESH_LLM_PREFIX_AFFINITY=1", true},
                 {"MESH_LLM_PREFIX_AFFINITY=on", true},
                 {"MESH_LLM_PREFIX_AFFINITY=0", false},
                 {"MESH_LLM_PREFIX_AFFINITY=off", false},
                 {"MESH_LLM_PREFIX_AFFINITY=No", false},
                 {"MESH_LLM_PREFIX_AFFINITY=false", false}};
    W.peers = "aR bR";
    send_(NULL, NULL, -1, false);
    char home = first_host();
    const char other[2] = {home == 'a' ? 'b' : 'a', 0};
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        static tunables_t tun;
        const char *envp[] = {CASES[i].env, NULL};
        char err[256];
        assert_int_equal(tunables_load(&tun, envp, err, sizeof err), 0);
        memset(&RC, 0, sizeof RC);
        RC.tun = &tun;
        assert_int_equal(relay_prefix_affinity(&RC), CASES[i].on);
        affinity_put(&RC.affinity, prefix_key(), other); /* the prefix went to the other host */
        send_(PREFIXED, NULL, -1, false);
        assert_int_equal(first_host(), CASES[i].on ? other[0] : home);
        assert_int_equal(RC.affinity.hits + RC.affinity.misses, CASES[i].on ? 1 : 0);
    }
}

/* A passive node's decision (passive.c:step): the table's hosts through rd_passive_input, prefix
 * affinity through the relay context as on active nodes (relay_affinity_input / _note), the key
 * of the one rule. Returns the first host's id (a static copy). */
static const char *passive_first_host(const rt_table_t *t, const char *body, rd_decision_t *d)
{
    static char first[ID_HEX_LEN + 1];
    static request_t rq;
    assert_int_equal(request_parse(&rq, "/v1/chat/completions", body, strlen(body)), 0);
    rd_host_t hosts[RD_MAX_HOSTS];
    rd_input_t in;
    rd_passive_input(&in, t, "m", "self", hosts, NULL, RD_MAX_HOSTS);
    in.rq = &rq;
    relay_affinity_input(&RC, &in);
    route_decide(&in, d);
    assert_int_equal(d->verdict, RD_FORWARD);
    relay_affinity_note(&RC, &in, d);
    snprintf(first, sizeof first, "%s", hosts[d->order[0]].id);
    return first;
}

/* S20 on passive nodes: prefix affinity (off for them before: rd_passive_input set no_affinity)
 * and the one key ("user": "" + session_id pins by session_id, as on an active node). */
static void test_passive_affinity(void **state)
{
    (void)state;
    static rt_table_t t;
    rt_table_init(&t, "mesh");
    rt_model_t *m = rt_table_add_model(&t, "m", CATALOG_READY);
    for (size_t i = 0; i < 3; i++) { /* hosts aaa…, bbb…, ccc… */
        char id[ID_HEX_LEN + 1];
        memset(id, 'a' + (int)i, ID_HEX_LEN);
        id[ID_HEX_LEN] = 0;
        assert_true(rt_model_add_host(m, (size_t)rt_table_add_node(&t, id, 0), 0));
    }
    rd_decision_t d;
    char home[ID_HEX_LEN + 1];
    snprintf(home, sizeof home, "%s", passive_first_host(&t, "{}", &d));
    /* a first prefix: the home host, a miss, remembered */
    assert_string_equal(passive_first_host(&t, PREFIXED, &d), home);
    assert_int_equal(RC.affinity.misses, 1);
    assert_string_equal(affinity_get(&RC.affinity, prefix_key()), home);
    /* the prefix went elsewhere last: that host first, a hit */
    const char *other = t.nodes[home[0] == 'c' ? 0 : 2].id;
    affinity_put(&RC.affinity, prefix_key(), other);
    assert_string_equal(passive_first_host(&t, PREFIXED, &d), other);
    assert_true(d.affinity_hit);
    assert_int_equal(RC.affinity.hits, 1);
    /* switched off: the home host, nothing counted */
    static tunables_t tun;
    const char *envp[] = {"MESH_LLM_PREFIX_AFFINITY=off", NULL};
    char err[256];
    assert_int_equal(tunables_load(&tun, envp, err, sizeof err), 0);
    RC.tun = &tun;
    assert_string_equal(passive_first_host(&t, PREFIXED, &d), home);
    assert_int_equal(RC.affinity.hits + RC.affinity.misses, 2);
    RC.tun = NULL;
    /* "user": "" does not shadow session_id: the same host as session_id alone, for each key */
    for (int i = 0; i < 8; i++) {
        char a[96], b[96], first[ID_HEX_LEN + 1];
        snprintf(a, sizeof a, "{\"session_id\":\"s-%d\"}", i);
        snprintf(b, sizeof b, "{\"user\":\"\",\"session_id\":\"s-%d\"}", i);
        snprintf(first, sizeof first, "%s", passive_first_host(&t, a, &d));
        assert_string_equal(passive_first_host(&t, b, &d), first);
    }
    /* and the keys spread (the passive key had none for them: every one on the home host) */
    bool seen[3] = {false, false, false};
    for (int i = 0; i < 8; i++) {
        char b[96];
        snprintf(b, sizeof b, "{\"user\":\"\",\"session_id\":\"s-%d\"}", i);
        seen[passive_first_host(&t, b, &d)[0] - 'a'] = true;
    }
    assert_true(seen[0] + seen[1] + seen[2] >= 2);
}

/* admission's has_host */
static void test_has_host(void **state)
{
    (void)state;
    W.plan = RD_PLAN_SERVE; /* served or starting here */
    assert_true(route_has_host_of(&RT, "m"));
    W.plan = RD_PLAN_REMOTE;
    assert_false(route_has_host_of(&RT, "m"));
    W.peers = "aR";
    assert_true(route_has_host_of(&RT, "m"));
    W.offline = true;
    assert_false(route_has_host_of(&RT, "m"));
    W.offline = false;
    W.peers = "aS"; /* a peer loading it */
    assert_true(route_has_host_of(&RT, "m"));
    W.peers = "aQ";
    assert_false(route_has_host_of(&RT, "m"));
    W.dl_mesh = true;
    assert_true(route_has_host_of(&RT, "m"));
    W.dl_mesh = false;
    W.passive = true; /* a passive table's hosts */
    W.table = 2;
    W.table_hosts = "";
    assert_false(route_has_host_of(&RT, "m"));
    W.table_hosts = "b";
    assert_true(route_has_host_of(&RT, "m"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_local_verdicts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remote_verdicts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_images, setup, teardown),
        cmocka_unit_test_setup_teardown(test_passive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_rule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_affinity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_affinity_switch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_has_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_passive_affinity, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

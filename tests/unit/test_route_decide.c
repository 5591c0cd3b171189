/* Unit tests for the routing decision (src/core/route_decide.h): a table with a row per
 * verdict and per stickiness / spill / affinity / vision case, ported from test_router.c (the
 * active router) and the pick / spill cases of test_route_table.c (the passive node). Orders
 * that depend on a hash are checked against reference functions: passive.c's order before it
 * went through route_decide — route_table.c's rt_pick_hosts + rt_spill, kept verbatim below as
 * ref_pick_hosts / ref_spill (the one rule, `=table`). The rows of the active order before S20
 * (core/router.c's round robin and keys, route_decide's legacy_order) went with it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "affinity.h"
#include "election.h"
#include "mm.h"
#include "route_decide.h"
#include "route_table.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define S(...) ((const char *const[]){__VA_ARGS__, NULL})

#define SELF "self-node"
#define MODEL "qwen"

#define X10 "xxxxxxxxxx"
#define X100 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10
#define X600 X100 X100 X100 X100 X100 X100
#define PREFIXED "{\"prompt\":\"" X600 "\"}"                          /* a prefix key, no key */
#define PREFIXED_KEYED "{\"user\":\"alice\",\"prompt\":\"" X600 "\"}" /* both */
#define IMAGES "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}"

/* ---- hosts written as "a:flags[:type[:slots[:inflight[:busy]]]]" ----
 * flags: R ready, S starting, M member, F has the file, Q requested, V vision, B bad (just
 * failed), P private (hosts it as a private split: the private rule). Host "a" has the id "…0a0"
 * (64 hex digits: route_table's ids), so ids sort as the letters do. */

typedef struct {
    rd_host_t h[48];
    char ids[48][65];
    char alias[48];
    size_t n;
} hosts_t;

static void parse_hosts(const char *const *specs, hosts_t *hs)
{
    memset(hs, 0, sizeof *hs);
    for (; specs && specs[hs->n]; hs->n++) {
        size_t i = hs->n;
        char f[5][16] = {"", "", "", "", ""}; /* flags, type, slots, inflight, busy (or "") */
        const char *p = strchr(specs[i], ':');
        for (size_t k = 0; p && k < 5; k++) {
            const char *e = strchr(p + 1, ':');
            size_t l = e ? (size_t)(e - p - 1) : strlen(p + 1);
            snprintf(f[k], sizeof f[k], "%.*s", (int)l, p + 1);
            p = e;
        }
        const char *flags = f[0], *type = f[1];
        unsigned slots = (unsigned)strtoul(f[2], NULL, 10);
        unsigned inflight = (unsigned)strtoul(f[3], NULL, 10);
        unsigned busy = (unsigned)strtoul(f[4], NULL, 10);
        hs->alias[i] = specs[i][0];
        snprintf(hs->ids[i], sizeof hs->ids[i], "%063x0", (unsigned)(0xa0 + (specs[i][0] - 'a')));
        rd_host_t *h = &hs->h[i];
        h->id = hs->ids[i];
        h->ready = strchr(flags, 'R');
        h->starting = strchr(flags, 'S');
        h->member = strchr(flags, 'M');
        h->has_file = strchr(flags, 'F');
        h->requested = strchr(flags, 'Q');
        h->vision = strchr(flags, 'V');
        h->bad = strchr(flags, 'B');
        h->priv = strchr(flags, 'P');
        h->type = -1;
        for (int t = 0; t < MM_N_TYPES; t++)
            if (strcmp(type, mm_type_name((mm_type_t)t)) == 0) h->type = t;
        h->slots = slots;
        h->inflight = inflight;
        h->busy = busy;
    }
}

static char alias_of(const hosts_t *hs, const char *id)
{
    for (size_t i = 0; i < hs->n; i++)
        if (strcmp(hs->ids[i], id) == 0) return hs->alias[i];
    return '?';
}

static int type_of(const char *name)
{
    for (int t = 0; name && t < MM_N_TYPES; t++)
        if (strcmp(name, mm_type_name((mm_type_t)t)) == 0) return t;
    return -1;
}

typedef struct {
    const char *what;
    const char *const *hosts;
    const char *body;                            /* NULL: "{}" */
    const char *needs, *local_type, *table_type; /* type names, NULL: any / llm / unknown */
    bool hop, local, local_vision, local_full, self_req, offline, dl_here, dl_mesh;
    int plan;
    bool passive, no_table, expired, not_in_table;
    catalog_status_t status;
    unsigned tries;
    char affinity; /* the host remembered for the prefix, 0: none */
    bool no_affinity;
    bool allow;       /* X-Mesh-Private: allow-host */
    const char *self; /* NULL: SELF */
    const char *want; /* see render(); "=table" in place of an order: the reference's */
    const char *msg;  /* a part of the message, NULL: not checked */
} row_t;

/* "FORWARD a,b[ |c][ spilled][ hit|miss][ remember]" ("|" before the hosts that failed),
 * "LOCAL", "PARK", "WAIT", "UNKNOWN", "REFUSE <status> <code>[ here|mesh]" */
static void render(const hosts_t *hs, const rd_decision_t *d, char *out, size_t len)
{
    static const char *const V[] = {"LOCAL", "PARK", "FORWARD", "WAIT", "REFUSE", "UNKNOWN"};
    size_t o = (size_t)snprintf(out, len, "%s", V[d->verdict]);
    if (d->verdict == RD_REFUSE) {
        o += (size_t)snprintf(out + o, len - o, " %d %s", d->status, d->code);
        if (d->download)
            o += (size_t)snprintf(out + o, len - o, " %s",
                                  d->download == RD_DL_HERE ? "here" : "mesh");
    }
    if (d->verdict != RD_FORWARD) return;
    for (size_t k = 0; k < d->n; k++)
        o += (size_t)snprintf(out + o, len - o, "%s%c",
                              k == 0           ? " "
                              : k == d->n_good ? "|"
                                               : ",",
                              alias_of(hs, hs->h[d->order[k]].id));
    if (d->spilled) o += (size_t)snprintf(out + o, len - o, " spilled");
    if (d->affinity) o += (size_t)snprintf(out + o, len - o, d->affinity_hit ? " hit" : " miss");
    if (d->remember) snprintf(out + o, len - o, " remember");
}

/* ---- the references: today's functions on the same facts ---- */

static bool is_bad(void *data, const char *id)
{
    const hosts_t *hs = data;
    for (size_t i = 0; i < hs->n; i++)
        if (strcmp(hs->ids[i], id) == 0) return hs->h[i].bad;
    return false;
}

/* The candidates of an active node, restated (router.c): the ready peers, else the starting
 * ones and those with the file; with images, those with a projector. A table's: all hosts;
 * with images, those it marks with a projector when it marks any. */
static bool candidate(const hosts_t *hs, const row_t *r, bool images, size_t i)
{
    if (r->passive) {
        bool any_vision = false;
        for (size_t k = 0; k < hs->n; k++)
            any_vision |= hs->h[k].vision;
        return !images || !any_vision || hs->h[i].vision;
    }
    bool any_ready = false;
    for (size_t k = 0; k < hs->n; k++)
        any_ready |= hs->h[k].ready && (!images || hs->h[k].vision);
    const rd_host_t *h = &hs->h[i];
    if (images && !h->vision) return false;
    return any_ready ? h->ready : h->starting || h->has_file;
}

/* ---- route_table.c's rt_pick_hosts and rt_spill, verbatim (removed when passive.c:step moved
 * to route_decide): the reference of the passive rows ---- */

#define REF_FNV_BASIS 1469598103934665603ULL

static uint64_t ref_fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

static uint64_t ref_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static size_t ref_pick_hosts(const rt_table_t *t, const rt_model_t *m, const char *self_id,
                             const uint64_t *sticky, bool (*skip_fn)(void *data, const char *id),
                             void *data, size_t *order, size_t max)
{
    size_t ids[RT_MAX_HOSTS], n = 0;
    for (size_t i = 0; i < m->n_hosts; i++) { /* valid hosts, sorted by id (insertion) */
        size_t node = m->hosts[i].node;
        if (node >= t->n_nodes) continue;
        size_t k = n++;
        while (k > 0 && strcmp(t->nodes[ids[k - 1]].id, t->nodes[node].id) > 0) {
            ids[k] = ids[k - 1];
            k--;
        }
        ids[k] = node;
    }
    if (n == 0 || max == 0) return 0;
    uint64_t h =
        sticky ? *sticky
               : ref_mix(ref_fnv1a(
                     ref_fnv1a(ref_fnv1a(REF_FNV_BASIS, self_id ? self_id : ""), "\n"), m->name));
    size_t first = (size_t)(h % n), out = 0, later[RT_MAX_HOSTS], n_later = 0;
    for (size_t k = 0; k < n; k++) {
        size_t node = ids[(first + k) % n];
        if (skip_fn && skip_fn(data, t->nodes[node].id))
            later[n_later++] = node;
        else if (out < max)
            order[out++] = node;
    }
    for (size_t k = 0; k < n_later && out < max; k++)
        order[out++] = later[k];
    return out;
}

static size_t ref_spill(const rt_model_t *m, size_t *order, size_t n, const uint32_t *inflight)
{
    size_t best = 0;
    for (size_t k = 1; k < n; k++) /* fewer in flight per slot (cross-multiplied); ties: earlier */
        if ((uint64_t)inflight[k] * rt_host_slots(m, order[best]) <
            (uint64_t)inflight[best] * rt_host_slots(m, order[k]))
            best = k;
    if (best == 0) return 0;
    size_t chosen = order[best];
    memmove(order + 1, order, best * sizeof *order);
    order[0] = chosen;
    return best;
}

/* passive.c:step — rt_pick_hosts (hosts that failed last) and, without a key on a first try,
 * rt_spill over the ones that did not fail; the key is rt_sticky_key's (request_t.sticky, which
 * was rt_sticky_key's but for "user": "" + session_id and keys over 255 bytes;
 * key_override: the one rule's, where they differ). */
static void ref_table(const hosts_t *hs, const row_t *r, const char *key_override, char *out,
                      size_t len)
{
    rt_table_t *t = malloc(sizeof *t);
    assert_non_null(t);
    rt_table_init(t, "mesh");
    rt_model_t *m = rt_table_add_model(t, MODEL, CATALOG_READY);
    const char *body = r->body ? r->body : "{}";
    request_t rq;
    request_parse(&rq, NULL, body, strlen(body));
    for (size_t i = 0; i < hs->n; i++) {
        if (!candidate(hs, r, rq.images, i)) continue;
        int k = rt_table_add_node(t, hs->ids[i], 0);
        assert_true(k >= 0 && rt_model_add_host(m, (size_t)k, 0));
        assert_true(rt_model_set_slots(m, (size_t)k, hs->h[i].slots));
    }
    uint64_t kh = rq.sticky;
    if (key_override) { /* FNV-1a, as rt_pick_hosts hashed a key it was given */
        kh = 1469598103934665603ULL;
        for (const char *c = key_override; *c; c++)
            kh = (kh ^ (uint8_t)*c) * 1099511628211ULL;
    }
    const uint64_t *key = key_override || rq.has_sticky ? &kh : NULL;
    size_t order[RT_MAX_HOSTS];
    size_t n = ref_pick_hosts(t, m, r->self ? r->self : SELF, key, is_bad, (void *)hs, order,
                              RT_MAX_HOSTS);
    size_t good = 0;
    while (good < n && !is_bad((void *)hs, t->nodes[order[good]].id))
        good++;
    bool spilled = false;
    if (!key && r->tries == 0) {
        uint32_t inflight[RT_MAX_HOSTS];
        for (size_t k = 0; k < good; k++)
            inflight[k] = hs->h[rt_table_find_node(t, t->nodes[order[k]].id)].inflight;
        spilled = ref_spill(m, order, good, inflight) > 0;
    }
    size_t o = 0;
    for (size_t k = 0; k < n; k++)
        o += (size_t)snprintf(out + o, len - o, "%s%c",
                              k == 0      ? ""
                              : k == good ? "|"
                                          : ",",
                              alias_of(hs, t->nodes[order[k]].id));
    if (spilled) snprintf(out + o, len - o, " spilled");
    free(t);
}

/* ---- running a row ---- */

static void input_of(const row_t *r, const hosts_t *hs, const request_t *rq, rd_input_t *in)
{
    *in = (rd_input_t){.rq = rq,
                       .path = "/v1/chat/completions",
                       .model = MODEL,
                       .needs = type_of(r->needs),
                       .hop = r->hop,
                       .self_id = r->self ? r->self : SELF,
                       .local = r->local,
                       .local_type = r->local_type ? type_of(r->local_type) : MM_LLM,
                       .local_vision = r->local_vision,
                       .local_plan = r->plan,
                       .local_full = r->local_full,
                       .self_requested = r->self_req,
                       .offline = r->offline,
                       .dl_here = r->dl_here,
                       .dl_mesh = r->dl_mesh,
                       .passive = r->passive,
                       .have_table = r->passive && !r->no_table,
                       .table_expired = r->expired,
                       .in_table = r->passive && !r->no_table && !r->not_in_table,
                       .table_status = (int)r->status,
                       .table_type = type_of(r->table_type),
                       .tries = r->tries,
                       .hosts = hs->h,
                       .n_hosts = hs->n,
                       .no_affinity = r->no_affinity,
                       .allow_host = r->allow};
    for (size_t i = 0; r->affinity && i < hs->n; i++)
        if (hs->alias[i] == r->affinity) in->affinity_host = hs->ids[i];
}

static void run_row(const row_t *r)
{
    hosts_t hs;
    parse_hosts(r->hosts, &hs);
    request_t rq;
    const char *body = r->body ? r->body : "{}";
    assert_int_equal(request_parse(&rq, "/v1/chat/completions", body, strlen(body)), 0);
    rd_input_t in;
    input_of(r, &hs, &rq, &in);
    rd_decision_t d;
    route_decide(&in, &d);
    char got[256], want[256];
    render(&hs, &d, got, sizeof got);
    /* "=table": the reference's order in place of the marker */
    const char *mark = strchr(r->want, '=');
    if (mark) {
        char ref[160];
        ref_table(&hs, r, NULL, ref, sizeof ref);
        const char *rest = mark + 6;
        /* the reference says " spilled" itself: the row does not repeat it */
        snprintf(want, sizeof want, "%.*s%s%s", (int)(mark - r->want), r->want, ref, rest);
    } else {
        snprintf(want, sizeof want, "%s", r->want);
    }
    if (getenv("TEST_VERBOSE")) print_message("%-64.64s %s\n", r->what, got);
    if (strcmp(got, want) != 0) fail_msg("%s: got \"%s\", want \"%s\"", r->what, got, want);
    if (r->msg && !strstr(d.msg, r->msg))
        fail_msg("%s: message \"%s\" lacks \"%s\"", r->what, d.msg, r->msg);
    if (d.verdict == RD_REFUSE || d.verdict == RD_UNKNOWN) assert_true(d.msg[0] && d.type);
}

static const row_t VERDICTS[] = {
    /* active node, a model it does not have (router.c's verdicts) */
    {.what = "nobody knows it", .want = "UNKNOWN", .msg = "model 'qwen' not found"},
    {.what = "no mesh yet", .hosts = S("a:R"), .offline = true, .want = "UNKNOWN"},
    {.what = "a hop is never forwarded", .hosts = S("a:R"), .hop = true, .want = "UNKNOWN"},
    {.what = "requested here, no file anywhere",
     .self_req = true,
     .want = "REFUSE 503 model_unavailable",
     .msg = "requested, but no node has its file"},
    {.what = "requested by a peer, no file",
     .hosts = S("a:Q"),
     .want = "REFUSE 503 model_unavailable",
     .msg = "requested, but no node has its file"},
    {.what = "requested, a member loads it",
     .hosts = S("a:Q", "b:M"),
     .want = "REFUSE 503 model_unavailable",
     .msg = "(status loading) but no node can serve it now"},
    {.what = "a split worker alone",
     .hosts = S("a:M"),
     .want = "REFUSE 503 model_unavailable",
     .msg = "(status loading)"},
    {.what = "the file's type decides",
     .hosts = S("a:RF:embedding"),
     .needs = "llm",
     .want = "REFUSE 400 model_type_mismatch",
     .msg = "model 'qwen' is a embedding model and cannot serve /v1/chat/completions"},
    {.what = "the right type",
     .hosts = S("a:RF:embedding"),
     .needs = "embedding",
     .want = "FORWARD a"},
    {.what = "any type", .hosts = S("a:RF:embedding"), .want = "FORWARD a"},
    {.what = "one peer with the file", .hosts = S("a:F:llm"), .needs = "llm", .want = "FORWARD a"},
    {.what = "ready hosts before takers",
     .hosts = S("a:S", "b:RF", "c:F", "d:R"),
     .want = "FORWARD =table"},
    {.what = "none ready: a starting host and a node with the file",
     .hosts = S("a:S", "b:M", "c:F"),
     .want = "FORWARD =table"},
    {.what = "a download in the mesh, nobody serves it",
     .hosts = S("a:Q"),
     .dl_mesh = true,
     .want = "REFUSE 503 model_downloading mesh"},
    {.what = "a download in the mesh, a member loads it",
     .hosts = S("a:M"),
     .dl_mesh = true,
     .want = "REFUSE 503 model_downloading mesh"},
    {.what = "a download in the mesh, a host serves it",
     .hosts = S("a:R"),
     .dl_mesh = true,
     .want = "FORWARD a"},
    {.what = "a download here answers first",
     .hosts = S("a:R"),
     .dl_here = true,
     .want = "REFUSE 503 model_downloading here",
     .msg = "downloading on this node"},
    /* images (router.c's vision filter) */
    {.what = "images: only hosts with a projector, ready first",
     .hosts = S("a:RF", "b:RFV", "c:FV"),
     .body = IMAGES,
     .want = "FORWARD b"},
    {.what = "images: a taker with a projector",
     .hosts = S("a:RF", "b:FV"),
     .body = IMAGES,
     .want = "FORWARD b"},
    {.what = "images: nobody has a projector",
     .hosts = S("a:RF", "b:S", "c:F"),
     .body = IMAGES,
     .want = "REFUSE 400 model_not_multimodal",
     .msg = "cannot read images"},
    {.what = "images: unavailable stays unavailable",
     .hosts = S("a:M"),
     .body = IMAGES,
     .want = "REFUSE 503 model_unavailable"},
    {.what = "images: unknown stays unknown", .body = IMAGES, .want = "UNKNOWN"},
    {.what = "no images: vision does not matter",
     .hosts = S("a:RF", "b:RFV"),
     .want = "FORWARD =table"},
    /* a model this node has (handle_inference + local_gate) */
    {.what = "served here", .local = true, .want = "LOCAL"},
    {.what = "served here, any type", .local = true, .local_type = "embedding", .want = "LOCAL"},
    {.what = "served here, another type",
     .local = true,
     .local_type = "embedding",
     .needs = "llm",
     .want = "REFUSE 400 model_type_mismatch",
     .msg = "cannot serve /v1/chat/completions; use /v1/embeddings"},
    {.what = "its split starts here", .local = true, .plan = RD_PLAN_WAIT, .want = "PARK"},
    {.what = "its host is elsewhere",
     .local = true,
     .plan = RD_PLAN_REMOTE,
     .hosts = S("a:R"),
     .want = "FORWARD a"},
    {.what = "bootstrap: its copy here loads, a peer's is ready (rd_local_gate)",
     .local = true,
     .plan = RD_PLAN_REMOTE,
     .hosts = S("a:RF", "b:SF"),
     .want = "FORWARD a"},
    {.what = "bootstrap: a key pins over the ready peers, as from any entry node",
     .local = true,
     .plan = RD_PLAN_REMOTE,
     .body = "{\"user\":\"alice\"}",
     .hosts = S("a:R", "b:R", "c:R"),
     .want = "FORWARD =table"},
    {.what = "bootstrap: no key, the home host over the ready peers",
     .local = true,
     .plan = RD_PLAN_REMOTE,
     .hosts = S("a:R", "b:R", "c:R"),
     .want = "FORWARD =table"},
    {.what = "its host is elsewhere, not known yet",
     .local = true,
     .plan = RD_PLAN_REMOTE,
     .want = "REFUSE 503 model_unavailable",
     .msg = "hosted by another node of the mesh, which is not ready yet"},
    {.what = "its host is elsewhere, a hop",
     .local = true,
     .plan = RD_PLAN_REMOTE,
     .hop = true,
     .hosts = S("a:R"),
     .want = "REFUSE 503 model_unavailable",
     .msg = "not ready yet"},
    {.what = "its host is elsewhere and loading",
     .local = true,
     .plan = RD_PLAN_REMOTE,
     .hosts = S("a:M"),
     .want = "REFUSE 503 model_unavailable",
     .msg = "(status loading)"},
    {.what = "its host is elsewhere: a download here does not answer (routing_local_gate)",
     .local = true,
     .plan = RD_PLAN_REMOTE,
     .dl_here = true,
     .hosts = S("a:R"),
     .want = "FORWARD a"},
    {.what = "images, no projector here: a peer's copy with one",
     .local = true,
     .body = IMAGES,
     .hosts = S("a:RFV"),
     .want = "FORWARD a"},
    {.what = "images, no projector here, no other copy",
     .local = true,
     .body = IMAGES,
     .want = "REFUSE 400 model_not_multimodal"},
    {.what = "images, no projector here, a hop",
     .local = true,
     .hop = true,
     .body = IMAGES,
     .hosts = S("a:RFV"),
     .want = "REFUSE 400 model_not_multimodal"},
    {.what = "images, no projector anywhere",
     .local = true,
     .body = IMAGES,
     .hosts = S("a:RF"),
     .want = "REFUSE 400 model_not_multimodal"},
    {.what = "images, a projector here",
     .local = true,
     .local_vision = true,
     .body = IMAGES,
     .hosts = S("a:RFV"),
     .want = "LOCAL"},
    {.what = "images, no projector here, the other copy loading (today's answer)",
     .local = true,
     .body = IMAGES,
     .hosts = S("a:M"),
     .want = "REFUSE 503 model_unavailable"},
    {.what = "images, no projector here, a download here (today's answer)",
     .local = true,
     .body = IMAGES,
     .dl_here = true,
     .want = "REFUSE 503 model_downloading here"},
    /* passive node, a model it does not have (passive_route + step) */
    {.what = "no table yet", .passive = true, .no_table = true, .want = "WAIT"},
    {.what = "no table within the wait",
     .passive = true,
     .no_table = true,
     .expired = true,
     .want = "REFUSE 503 no_route",
     .msg = "no active node of the mesh answered a route request yet"},
    {.what = "not in the table", .passive = true, .not_in_table = true, .want = "UNKNOWN"},
    {.what = "the table's type decides",
     .passive = true,
     .table_type = "embedding",
     .needs = "llm",
     .hosts = S("a:R"),
     .want = "REFUSE 400 model_type_mismatch"},
    {.what = "in the table, no hosts",
     .passive = true,
     .status = CATALOG_LOADING,
     .want = "REFUSE 503 model_unavailable",
     .msg = "in the mesh (status loading) but no node serves it now"},
    {.what = "one host, tried",
     .passive = true,
     .tries = 1,
     .hosts = S("a:RB"),
     .want = "REFUSE 503 host_unreachable",
     .msg = "its hosts cannot be reached right now"},
    {.what = "five hosts, three tried",
     .passive = true,
     .tries = 3,
     .hosts = S("a:R", "b:R", "c:R", "d:R", "e:R"),
     .want = "REFUSE 503 host_unreachable"},
    {.what = "five hosts, two tried: the failed ones last",
     .passive = true,
     .tries = 2,
     .hosts = S("a:RB", "b:R", "c:RB", "d:R", "e:R"),
     .want = "FORWARD =table"},
    {.what = "a table says nothing of vision: its hosts take images",
     .passive = true,
     .body = IMAGES,
     .hosts = S("a:R", "b:R"),
     .want = "FORWARD =table"},
    {.what = "images: only the table's hosts with a projector",
     .passive = true,
     .body = IMAGES,
     .hosts = S("a:R", "b:RV", "c:R"),
     .want = "FORWARD b"},
    {.what = "images: the table's hosts with a projector, in ring order",
     .passive = true,
     .body = IMAGES,
     .tries = 1,
     .hosts = S("a:RV", "b:R", "c:RVB", "d:RV"),
     .want = "FORWARD =table"},
    {.what = "no images: the table's vision marks do not matter",
     .passive = true,
     .hosts = S("a:R", "b:RV"),
     .want = "FORWARD =table"},
    {.what = "a table's hosts are candidates whatever their flags",
     .passive = true,
     .hosts = S("a:-", "b:-"),
     .want = "FORWARD =table"},
    {.what = "passive, a hop", .passive = true, .hop = true, .hosts = S("a:R"), .want = "UNKNOWN"},
    {.what = "passive, a download here",
     .passive = true,
     .dl_here = true,
     .hosts = S("a:R"),
     .want = "REFUSE 503 model_downloading here"},
    /* a passive standby with the model on disk (main.c:local_gate) */
    {.what = "standby: the table's hosts first",
     .local = true,
     .passive = true,
     .hosts = S("a:R"),
     .want = "FORWARD a"},
    {.what = "standby: a hop is served here",
     .local = true,
     .passive = true,
     .hop = true,
     .hosts = S("a:R"),
     .want = "LOCAL"},
    {.what = "standby: no hosts in the table", .local = true, .passive = true, .want = "LOCAL"},
};

/* The one stickiness rule: keys, home hosts, spill, affinity, failed hosts. */
static const row_t STICKY[] = {
    {.what = "a key pins (passive)",
     .passive = true,
     .body = "{\"user\":\"alice\"}",
     .hosts = S("a:R", "b:R", "c:R", "d:R"),
     .want = "FORWARD =table"},
    {.what = "a key pins (active): the same ring",
     .body = "{\"user\":\"alice\"}",
     .hosts = S("a:R", "b:R", "c:R", "d:R"),
     .want = "FORWARD =table"},
    {.what = "session_id when no user",
     .body = "{\"session_id\":\"s-77\"}",
     .hosts = S("a:R", "b:R", "c:R"),
     .want = "FORWARD =table"},
    {.what = "no key: the home host (passive)",
     .passive = true,
     .hosts = S("a:R", "b:R", "c:R", "d:R"),
     .want = "FORWARD =table"},
    {.what = "no key: the home host (active, not round robin)",
     .hosts = S("a:R", "b:R", "c:R", "d:R"),
     .want = "FORWARD =table"},
    {.what = "no key, another entry node: its own home host",
     .self = "other-node",
     .hosts = S("a:R", "b:R", "c:R", "d:R"),
     .want = "FORWARD =table"},
    {.what = "no key, one in flight everywhere: the home host",
     .hosts = S("a:R::4:1", "b:R::4:1", "c:R::4:1"),
     .want = "FORWARD =table"},
    {.what = "no key, busy home hosts spill (passive)",
     .passive = true,
     .hosts = S("a:R::1:1", "b:R::1:1", "c:R::1:0"),
     .want = "FORWARD =table"},
    {.what = "no key, busy home hosts spill (active)",
     .hosts = S("a:R::1:1", "b:R::1:1", "c:R::1:0"),
     .want = "FORWARD c,a,b spilled"},
    {.what = "a key never spills",
     .body = "{\"user\":\"alice\"}",
     .hosts = S("a:R::1:9", "b:R::1:9", "c:R::1:0"),
     .want = "FORWARD =table"},
    {.what = "a retry does not spill",
     .passive = true,
     .tries = 1,
     .hosts = S("a:R::1:1", "b:R::1:1", "c:R::1:0"),
     .want = "FORWARD =table"},
    {.what = "the failed hosts last, not spilled to",
     .passive = true,
     .hosts = S("a:RB::1:0", "b:R::1:5", "c:RB::1:0"),
     .want = "FORWARD =table"},
    {.what = "an empty user does not shadow session_id",
     .body = "{\"user\":\"\",\"session_id\":\"s\"}",
     .hosts = S("a:R", "b:R", "c:R", "d:R", "e:R"),
     .want = "FORWARD =session"},
    {.what = "prefix affinity: the remembered host first",
     .body = PREFIXED,
     .affinity = 'c',
     .hosts = S("a:R", "b:R", "c:R"),
     .want = "FORWARD c,=rest hit remember"},
    {.what = "prefix affinity on a passive node too",
     .passive = true,
     .body = PREFIXED,
     .affinity = 'b',
     .hosts = S("a:R", "b:R", "c:R"),
     .want = "FORWARD b,=rest hit remember"},
    {.what = "prefix affinity wins over the spill while its host has a free slot",
     .body = PREFIXED,
     .affinity = 'a',
     .hosts = S("a:R::4:3", "b:R::4:0"),
     .want = "FORWARD a,b hit remember"},
    {.what = "prefix affinity yields to a free slot when its host is full",
     .body = PREFIXED,
     .affinity = 'a',
     .hosts = S("a:R::1:3", "b:R::1:0"),
     .want = "FORWARD b,a miss remember"},
    {.what = "prefix affinity yields to a free slot when its host announces it is full",
     .body = PREFIXED,
     .affinity = 'a',
     .hosts = S("a:R::2:0:2", "b:R::2:1:1"),
     .want = "FORWARD b,a miss remember"},
    {.what = "prefix affinity stays when no host has a free slot",
     .body = PREFIXED,
     .affinity = 'a',
     .hosts = S("a:R::1:3", "b:R::1:0:1"),
     .want = "FORWARD a,b hit remember"},
    {.what = "no key: the announced load spills (active)",
     .hosts = S("a:R::1:0:1", "b:R::1:0:1", "c:R::1:0:0"),
     .want = "FORWARD c,a,b spilled"},
    {.what = "no key: the larger of the announced load and this node's in flight counts",
     .hosts = S("a:R::2:1:0", "b:R::2:0:2", "c:R::2:1:1"),
     .want = "FORWARD a,b,c"},
    {.what = "no key: of the hosts with a free slot (announced), the earlier of equals",
     .hosts = S("a:R::1:0:1", "b:R::4:0:3", "c:R::4:0:2"),
     .want = "FORWARD b,a,c spilled"},
    {.what = "no key: of the hosts with a free slot, the fewest of this node's own in flight",
     .hosts = S("a:R::1:0:1", "b:R::4:1:3", "c:R::4:0:3"),
     .want = "FORWARD c,a,b spilled"},
    {.what = "no key, no host with a free slot: the least load per slot",
     .hosts = S("a:R::1:0:3", "b:R::2:0:3", "c:R::4:0:5"),
     .want = "FORWARD c,a,b spilled"},
    {.what = "a key never spills, whatever the hosts announce",
     .body = "{\"user\":\"alice\"}",
     .hosts = S("a:R::1:0:9", "b:R::1:0:9", "c:R::1:0:0"),
     .want = "FORWARD =table"},
    /* the local spill: this node's own server for the model has no free slot */
    {.what = "local full: a peer replica with a free slot, the fewest of this node's own there",
     .local = true,
     .local_full = true,
     .hosts = S("a:R::1:1", "b:R::2:1:1", "c:R::4:0:1"),
     .want = "FORWARD c,a,b spilled"},
    {.what = "local not full: served here, whatever the peers",
     .local = true,
     .hosts = S("a:R::4:0"),
     .want = "LOCAL"},
    {.what = "local full, every peer full: served (queued) here",
     .local = true,
     .local_full = true,
     .hosts = S("a:R::1:1", "b:R::2:0:2"),
     .want = "LOCAL"},
    {.what = "local full, a key: served here (its KV cache is here)",
     .local = true,
     .local_full = true,
     .body = "{\"user\":\"alice\"}",
     .hosts = S("a:R::4:0"),
     .want = "LOCAL"},
    {.what = "local full, a hop: served here",
     .local = true,
     .local_full = true,
     .hop = true,
     .hosts = S("a:R::4:0"),
     .want = "LOCAL"},
    {.what = "local full, a retry: served here",
     .local = true,
     .local_full = true,
     .tries = 1,
     .hosts = S("a:R::4:0"),
     .want = "LOCAL"},
    {.what = "local full, peers that only start it or have its file: served here",
     .local = true,
     .local_full = true,
     .hosts = S("a:S::4:0", "b:F::4:0"),
     .want = "LOCAL"},
    {.what = "local full, a peer that just failed or runs a private split: served here",
     .local = true,
     .local_full = true,
     .hosts = S("a:RB::4:0", "b:RP::4:0"),
     .want = "LOCAL"},
    {.what = "local full, a passive standby's table hosts go first anyway",
     .local = true,
     .local_full = true,
     .passive = true,
     .hosts = S("a:R::4:0"),
     .want = "FORWARD a"},
    {.what = "local full, images: only a peer with a projector",
     .local = true,
     .local_vision = true,
     .local_full = true,
     .body = IMAGES,
     .hosts = S("a:R::4:0", "b:RV::4:0"),
     .want = "FORWARD b spilled"},
    {.what = "local full, prefix affinity: its host when it has a free slot",
     .local = true,
     .local_full = true,
     .body = PREFIXED,
     .affinity = 'b',
     .hosts = S("a:R::4:0", "b:R::4:2"),
     .want = "FORWARD b,a spilled hit remember"},
    {.what = "prefix affinity: the host is not a candidate",
     .body = PREFIXED,
     .affinity = 'z',
     .hosts = S("a:R", "b:R", "z:S"),
     .want = "FORWARD =table miss remember"},
    {.what = "prefix affinity: the host just failed",
     .passive = true,
     .body = PREFIXED,
     .affinity = 'a',
     .tries = 1,
     .hosts = S("a:RB", "b:R", "c:R"),
     .want = "FORWARD =table miss remember"},
    {.what = "prefix affinity: nothing to choose from",
     .body = PREFIXED,
     .affinity = 'a',
     .hosts = S("a:R"),
     .want = "FORWARD a"},
    {.what = "prefix affinity: switched off",
     .body = PREFIXED,
     .affinity = 'c',
     .no_affinity = true,
     .hosts = S("a:R", "b:R", "c:R"),
     .want = "FORWARD =table"},
    {.what = "a key wins over prefix affinity (remembered all the same)",
     .body = PREFIXED_KEYED,
     .affinity = 'c',
     .hosts = S("a:R", "b:R", "c:R"),
     .want = "FORWARD =table remember"},
};

static void run_rows(const row_t *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const row_t *r = &rows[i];
        if (!strstr(r->want, "=session") && !strstr(r->want, "=rest")) {
            run_row(r);
            continue;
        }
        /* "=session": the one rule's key where rt_sticky_key has none; "=rest": the reference
         * order without the host the row put first */
        hosts_t hs;
        parse_hosts(r->hosts, &hs);
        char ref[160], row_want[256];
        if (strstr(r->want, "=session")) {
            ref_table(&hs, r, "s", ref, sizeof ref);
            snprintf(row_want, sizeof row_want, "FORWARD %s", ref);
        } else {
            ref_table(&hs, r, NULL, ref, sizeof ref);
            char rest[160] = "";
            size_t o = 0;
            for (const char *p = ref; *p && *p != ' '; p++)
                if (*p != ',' && *p != r->affinity)
                    o += (size_t)snprintf(rest + o, sizeof rest - o, "%s%c", o ? "," : "", *p);
            const char *mark = strstr(r->want, "=rest");
            snprintf(row_want, sizeof row_want, "%.*s%s%s", (int)(mark - r->want), r->want, rest,
                     mark + 5);
        }
        row_t copy = *r;
        copy.want = row_want;
        run_row(&copy);
    }
}

/* the private rule: a relay of a model some candidate runs as a private split is refused unless
 * the request allows the serving node to read it; what is served here, and hops, unchanged. */
static const row_t PRIVATE[] = {
    {.what = "a third node: the private host would read it",
     .hosts = S("a:RP"),
     .want = "REFUSE 403 private_split",
     .msg = "send the header 'X-Mesh-Private: allow-host'"},
    {.what = "a third node, allowed: the private host",
     .hosts = S("a:RP"),
     .allow = true,
     .want = "FORWARD a"},
    {.what = "a private host still starting counts",
     .hosts = S("a:SP"),
     .want = "REFUSE 403 private_split"},
    {.what = "a private host still starting, a node with the file: that node loads its own",
     .hosts = S("a:SP", "b:F"),
     .want = "FORWARD b"},
    {.what = "a private host and a plain replica: the replica takes it",
     .hosts = S("a:RP", "b:R"),
     .want = "FORWARD b"},
    {.what = "a plain replica and a private host: the replica takes it",
     .hosts = S("a:R", "b:RP"),
     .want = "FORWARD a"},
    {.what = "a private host and a plain replica, allowed: the usual order",
     .hosts = S("a:RP", "b:R"),
     .allow = true,
     .want = "FORWARD =table"},
    {.what = "a worker of the split (its host is elsewhere)",
     .hosts = S("a:RP"),
     .local = true,
     .plan = RD_PLAN_REMOTE,
     .want = "REFUSE 403 private_split",
     .msg = "private split (--split-private) on node 00000000000"},
    {.what = "a worker of the split, allowed",
     .hosts = S("a:RP"),
     .local = true,
     .plan = RD_PLAN_REMOTE,
     .allow = true,
     .want = "FORWARD a"},
    {.what = "its own copy serves it",
     .hosts = S("a:RP"),
     .local = true,
     .plan = RD_PLAN_SERVE,
     .want = "LOCAL"},
    {.what = "the host parks it while its split gets ready",
     .hosts = S("a:M"),
     .local = true,
     .plan = RD_PLAN_WAIT,
     .want = "PARK"},
    {.what = "a hop to the host is served there",
     .hosts = S("a:MP"),
     .local = true,
     .hop = true,
     .plan = RD_PLAN_SERVE,
     .want = "LOCAL"},
    {.what = "a hop is never forwarded, private or not",
     .hosts = S("a:RP"),
     .hop = true,
     .want = "UNKNOWN"},
    {.what = "nothing to forward to: the usual answer",
     .hosts = S("a:MP"),
     .want = "REFUSE 503 model_unavailable"},
    {.what = "no private host: forwarded as before",
     .hosts = S("a:R", "b:R"),
     .want = "FORWARD =table"},
    {.what = "a passive node's table marks the host private",
     .hosts = S("a:RP"),
     .passive = true,
     .want = "REFUSE 403 private_split"},
    {.what = "a passive node, allowed",
     .hosts = S("a:RP"),
     .passive = true,
     .allow = true,
     .want = "FORWARD a"},
};

static void test_private(void **state)
{
    (void)state;
    run_rows(PRIVATE, N(PRIVATE));
}

static void test_verdicts(void **state)
{
    (void)state;
    run_rows(VERDICTS, N(VERDICTS));
}

static void test_sticky(void **state)
{
    (void)state;
    run_rows(STICKY, N(STICKY));
}

/* ---- properties ---- */

static const rd_host_t *decide(const hosts_t *hs, const char *self, const char *body, bool passive,
                               rd_decision_t *d)
{
    request_t rq;
    request_parse(&rq, "/v1/chat/completions", body, strlen(body));
    rd_input_t in = {.rq = &rq,
                     .model = MODEL,
                     .needs = -1,
                     .self_id = self,
                     .passive = passive,
                     .have_table = passive,
                     .in_table = passive,
                     .hosts = hs->h,
                     .n_hosts = hs->n};
    route_decide(&in, d);
    assert_int_equal(d->verdict, RD_FORWARD);
    return &hs->h[d->order[0]];
}

/* test_router.c:test_sticky_key + test_route_table.c:test_pick_hosts: one key, one host, from
 * any entry node, active or passive; keys spread over the hosts. */
static void test_key_pins_everywhere(void **state)
{
    (void)state;
    hosts_t hs;
    parse_hosts(S("a:R", "b:R", "c:R"), &hs);
    rd_decision_t d;
    int seen[3] = {0};
    for (int i = 0; i < 64; i++) {
        char body[64], self[16];
        snprintf(body, sizeof body, "{\"user\":\"user-%d\"}", i);
        const rd_host_t *first = decide(&hs, "n0", body, false, &d);
        for (int s = 1; s < 6; s++) {
            snprintf(self, sizeof self, "n%d", s);
            assert_ptr_equal(decide(&hs, self, body, s % 2, &d), first);
        }
        seen[first - hs.h]++;
    }
    assert_true(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
}

/* test_route_table.c:test_pick_spread: 1000 entry nodes over 10 hosts, each a fair share. */
static void test_home_spread(void **state)
{
    (void)state;
    hosts_t hs;
    parse_hosts(S("a:R", "b:R", "c:R", "d:R", "e:R", "f:R", "g:R", "h:R", "i:R", "j:R"), &hs);
    unsigned count[10] = {0};
    rd_decision_t d;
    for (unsigned c = 0; c < 1000; c++) {
        char self[65];
        snprintf(self, sizeof self, "%064x", 5000 + c * 7919);
        count[decide(&hs, self, "{}", c % 2, &d) - hs.h]++;
    }
    for (unsigned i = 0; i < 10; i++)
        assert_true(count[i] >= 60 && count[i] <= 140);
}

/* test_route_table.c:test_spill's table, through route_decide: the home host is A. */
typedef struct {
    const char *what;
    uint32_t slots[3], inflight[3];
    const char *want; /* the order after the spill */
} spill_row_t;

static const spill_row_t SPILL[] = {
    {"nothing in flight: the home host", {4, 4, 4}, {0, 0, 0}, "ABC"},
    {"one in flight at the home host: the next idle one", {4, 4, 4}, {1, 0, 0}, "BAC"},
    {"home host full: the next with a free slot", {4, 4, 4}, {4, 4, 1}, "CAB"},
    {"equal load: the home host", {4, 4, 4}, {2, 2, 2}, "ABC"},
    {"fewest per slot wins", {4, 4, 8}, {2, 2, 3}, "CAB"},
    {"unknown slots count as the default", {0, 0, 8}, {1, 1, 1}, "CAB"},
    {"announced slots weigh", {1, 8, 4}, {1, 1, 1}, "BAC"},
    {"all full: fewest per slot", {4, 4, 8}, {6, 5, 9}, "CAB"},
};

static void test_spill(void **state)
{
    (void)state;
    /* find the ring's start for SELF: hosts are relabelled so that the home host is "A" */
    hosts_t hs;
    parse_hosts(S("a:R", "b:R", "c:R"), &hs);
    rd_decision_t d;
    size_t home = (size_t)(decide(&hs, SELF, "{}", true, &d) - hs.h);
    for (size_t c = 0; c < N(SPILL); c++) {
        const spill_row_t *sc = &SPILL[c];
        for (size_t k = 0; k < 3; k++) { /* A B C: the ring from the home host */
            hs.h[(home + k) % 3].slots = sc->slots[k];
            hs.h[(home + k) % 3].inflight = sc->inflight[k];
        }
        decide(&hs, SELF, "{}", true, &d);
        char got[4] = "";
        for (size_t k = 0; k < 3; k++)
            got[k] = (char)('A' + ((d.order[k] + 3 - home) % 3));
        if (strcmp(got, sc->want) != 0) fail_msg("%s: got %s, want %s", sc->what, got, sc->want);
        assert_int_equal(d.spilled, sc->want[0] != 'A');
    }
}

/* test_router.c:test_candidate_cap: the lowest ids, whatever the input order. */
static void test_candidate_cap(void **state)
{
    (void)state;
    rd_host_t h[40];
    char ids[40][8];
    for (int i = 0; i < 40; i++) {
        snprintf(ids[i], sizeof ids[i], "p%02d", 39 - i); /* descending */
        h[i] = (rd_host_t){.id = ids[i], .ready = true, .type = -1};
    }
    request_t rq;
    request_parse(&rq, NULL, "{}", 2);
    {
        rd_input_t in = {
            .rq = &rq, .model = MODEL, .needs = -1, .self_id = SELF, .hosts = h, .n_hosts = 40};
        rd_decision_t d;
        route_decide(&in, &d);
        assert_int_equal(d.verdict, RD_FORWARD);
        assert_int_equal(d.n, RD_MAX_HOSTS);
        for (size_t k = 0; k < d.n; k++)
            assert_true(strcmp(h[d.order[k]].id, "p") > 0 &&
                        atoi(h[d.order[k]].id + 1) < (int)RD_MAX_HOSTS);
    }
    /* a passive table's 32 hosts, the most it holds, all ordered */
    rd_input_t in = {.rq = &rq,
                     .model = MODEL,
                     .needs = -1,
                     .self_id = SELF,
                     .passive = true,
                     .have_table = true,
                     .in_table = true,
                     .hosts = h,
                     .n_hosts = RT_MAX_HOSTS};
    rd_decision_t d;
    route_decide(&in, &d);
    assert_int_equal(d.n, RT_MAX_HOSTS);
}

/* ---- admission's has_host (main.c:has_host, routing.c:routing_has_host) ---- */

static void test_has_host(void **state)
{
    (void)state;
    const struct {
        const char *what;
        const char *const *hosts;
        int plan;
        bool passive, offline, dl_mesh, self_req, want;
    } rows[] = {
        {"served here", NULL, RD_PLAN_SERVE, false, false, false, false, true},
        {"starting here", NULL, RD_PLAN_WAIT, false, false, false, false, true},
        {"elsewhere, a ready peer", S("a:R"), RD_PLAN_REMOTE, false, false, false, false, true},
        {"elsewhere, a peer with the file", S("a:F"), RD_PLAN_REMOTE, false, false, false, false,
         true},
        {"elsewhere, a peer loading it", S("a:M"), RD_PLAN_REMOTE, false, false, false, false,
         true},
        {"elsewhere, only requested", S("a:Q"), RD_PLAN_REMOTE, false, false, false, false, false},
        {"elsewhere, nobody", NULL, RD_PLAN_REMOTE, false, false, false, true, false},
        {"elsewhere, a download in the mesh", S("a:Q"), RD_PLAN_REMOTE, false, false, true, false,
         true},
        {"elsewhere, no mesh", S("a:R"), RD_PLAN_REMOTE, false, true, false, false, false},
        {"a passive table's hosts", S("a:R"), RD_PLAN_REMOTE, true, true, false, false, true},
        {"a passive table without hosts", NULL, RD_PLAN_REMOTE, true, true, false, false, false},
    };
    for (size_t i = 0; i < N(rows); i++) {
        hosts_t hs;
        parse_hosts(rows[i].hosts, &hs);
        rd_input_t in = {.model = MODEL,
                         .needs = -1,
                         .local = true,
                         .local_plan = rows[i].plan,
                         .passive = rows[i].passive,
                         .have_table = rows[i].passive,
                         .in_table = rows[i].passive,
                         .offline = rows[i].offline,
                         .dl_mesh = rows[i].dl_mesh,
                         .self_requested = rows[i].self_req,
                         .hosts = hs.h,
                         .n_hosts = hs.n};
        if (route_has_host(&in) != rows[i].want) fail_msg("%s", rows[i].what);
    }
}

/* ---- the planner's gate and its bootstrap rule (rd_local_gate) ---- */

static void test_local_gate(void **state)
{
    (void)state;
    enum { SERVE = RD_PLAN_SERVE, REMOTE = RD_PLAN_REMOTE, WAIT = RD_PLAN_WAIT };
    enum { IDLE = ELECTION_IDLE, REPL = ELECTION_REPLICA, HOST = ELECTION_HOST };
    enum { WORK = ELECTION_WORKER };
    const struct {
        const char *what;
        bool planned, file, first, fits;
        int role;
        bool launched, ready_here, ready_there;
        int want;
    } rows[] = {
        /* what, planned, have_file, first_plan_done, fits_alone, role, launched, local_ready,
         * ready_elsewhere: want */
        {"replica, ready here", 1, 1, 1, 1, REPL, 0, 1, 1, SERVE},
        {"replica loading, a peer ready: the peer", 1, 1, 1, 1, REPL, 0, 0, 1, REMOTE},
        {"replica loading, no peer ready: waits here", 1, 1, 1, 1, REPL, 0, 0, 0, SERVE},
        {"before the first plan, fits: served here", 1, 1, 0, 1, IDLE, 0, 0, 0, SERVE},
        {"before the first plan, fits, a peer ready", 1, 1, 0, 1, IDLE, 0, 0, 1, REMOTE},
        {"before the first plan, ready here", 1, 1, 0, 1, IDLE, 0, 1, 1, SERVE},
        {"before the first plan, too big: parks", 1, 1, 0, 0, IDLE, 0, 0, 1, WAIT},
        {"split host launched", 1, 1, 1, 0, HOST, 1, 0, 0, SERVE},
        {"split host starting: parks", 1, 1, 1, 0, HOST, 0, 0, 1, WAIT},
        {"split worker: the host serves", 1, 1, 1, 0, WORK, 0, 0, 0, REMOTE},
        {"idle here: elsewhere", 1, 1, 1, 1, IDLE, 0, 0, 0, REMOTE},
        {"planned without its file here", 1, 0, 1, 0, REPL, 0, 0, 0, REMOTE},
        {"on demand, unloaded or loading here, a peer ready: the peer", 0, 1, 0, 1, IDLE, 0, 0, 1,
         REMOTE},
        {"on demand, no peer ready: loads here", 0, 1, 0, 1, IDLE, 0, 0, 0, SERVE},
        {"on demand, ready here", 0, 1, 0, 1, IDLE, 0, 1, 1, SERVE},
    };
    for (size_t i = 0; i < N(rows); i++) {
        rd_gate_t g = {.planned = rows[i].planned,
                       .have_file = rows[i].file,
                       .first_plan_done = rows[i].first,
                       .fits_alone = rows[i].fits,
                       .role = rows[i].role,
                       .launched = rows[i].launched,
                       .local_ready = rows[i].ready_here,
                       .ready_elsewhere = rows[i].ready_there};
        int got = rd_local_gate(&g);
        if (got != rows[i].want) fail_msg("%s: got %d, want %d", rows[i].what, got, rows[i].want);
    }
}

/* a request with no body facts: no images, no key, the home host */
static void test_no_request(void **state)
{
    (void)state;
    hosts_t hs;
    parse_hosts(S("a:R", "b:R"), &hs);
    rd_input_t in = {.model = MODEL, .needs = -1, .self_id = SELF, .hosts = hs.h, .n_hosts = 2};
    rd_decision_t d, e;
    route_decide(&in, &d);
    assert_int_equal(d.verdict, RD_FORWARD);
    decide(&hs, SELF, "{}", false, &e);
    assert_memory_equal(d.order, e.order, 2 * sizeof d.order[0]);
}

/* A passive node's hosts from its table: valid hosts only (a node index past the table's nodes
 * is skipped), ready, type unknown, the table's slots (default when it says none), nothing in
 * flight, none bad; node_of maps back; max bounds. */
static void test_table_hosts(void **state)
{
    (void)state;
    rt_table_t *t = malloc(sizeof *t);
    assert_non_null(t);
    rt_table_init(t, "mesh");
    char id[65];
    rt_model_t *m = rt_table_add_model(t, MODEL, CATALOG_READY);
    for (unsigned i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "%064x", 3 - i);
        assert_true(rt_model_add_host(m, (size_t)rt_table_add_node(t, id, 0), 0));
    }
    assert_true(rt_model_set_slots(m, 1, 8));
    m->hosts[m->n_hosts++].node = 99; /* not a node of the table */
    rd_host_t h[RD_MAX_HOSTS];
    size_t node_of[RD_MAX_HOSTS];
    assert_int_equal(rd_table_hosts(t, m, h, node_of, RD_MAX_HOSTS), 3);
    for (size_t k = 0; k < 3; k++) {
        assert_ptr_equal(h[k].id, t->nodes[node_of[k]].id);
        assert_true(h[k].ready);
        assert_int_equal(h[k].type, -1);
        assert_int_equal(h[k].inflight, 0);
        assert_false(h[k].bad);
        assert_int_equal(h[k].slots, node_of[k] == 1 ? 8 : RT_DEFAULT_SLOTS);
    }
    assert_int_equal(rd_table_hosts(t, m, h, NULL, 2), 2);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdicts),      cmocka_unit_test(test_private),
        cmocka_unit_test(test_sticky),        cmocka_unit_test(test_key_pins_everywhere),
        cmocka_unit_test(test_home_spread),   cmocka_unit_test(test_spill),
        cmocka_unit_test(test_candidate_cap), cmocka_unit_test(test_has_host),
        cmocka_unit_test(test_local_gate),    cmocka_unit_test(test_no_request),
        cmocka_unit_test(test_table_hosts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

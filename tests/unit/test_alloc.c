/* Unit tests for src/core/alloc.h: one table case per rule and per tie-break, --model, standby, and
 * seed 000's degenerate cases simulated as a sequence of joins (alloc + catalog + election). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "election.h"

#define G 1000000000ULL
#define MAXN 16
#define MAXL 8

/* ------------------------------------------------------------------------------------------
 * Node specs (as in test_catalog.c): "<tag> [vram=GB] [disk=NAME:GB[:e|:r],…]
 * [serve=NAME[:ready][:host],…] [req=NAME[:GB],…] [client] [dead] [nodl] [src=NAME,…]
 * [fetch=NAME,…]". For the joining node, req= lists its --model names, nodl forbids downloads,
 * src= restricts downloads to models with an announced source and fetch= names the models other
 * nodes are downloading.
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    catalog_node_t nodes[MAXN];
    catalog_avail_t avail[MAXN][MAXL];
    catalog_serving_t serv[MAXN][MAXL];
    const char *req[MAXN][MAXL];
    uint64_t reqsize[MAXN][MAXL];
    char ids[MAXN][CATALOG_ID_LEN + 1];
    bool nodl[MAXN];
    const char *src[MAXN][MAXL], *fetch[MAXN][MAXL];
    size_t n_src[MAXN], n_fetch[MAXN];
    bool has_src[MAXN];
    char pool[4096];
    size_t used, n;
} fx_t;

static char *fx_str(fx_t *f, const char *s)
{
    size_t len = strlen(s) + 1;
    assert_true(f->used + len <= sizeof f->pool);
    char *p = memcpy(f->pool + f->used, s, len);
    f->used += len;
    return p;
}

static void fx_add(fx_t *f, const char *spec)
{
    assert_true(f->n < MAXN);
    char *s = fx_str(f, spec);
    size_t k = f->n++;
    catalog_node_t *n = &f->nodes[k];
    memset(n, 0, sizeof *n);
    n->alive = true;
    f->nodl[k] = false;
    char *save = NULL;
    char *tok = strtok_r(s, " ", &save);
    memset(f->ids[k], tok[0], CATALOG_ID_LEN);
    f->ids[k][CATALOG_ID_LEN] = '\0';
    n->id = f->ids[k];
    n->available = f->avail[k];
    n->serving = f->serv[k];
    n->requested = f->req[k];
    n->requested_size = f->reqsize[k];
    while ((tok = strtok_r(NULL, " ", &save))) {
        char *val = strchr(tok, '=');
        if (val) *val++ = '\0';
        if (strcmp(tok, "vram") == 0)
            n->vram_bytes = strtoull(val, NULL, 10) * G;
        else if (strcmp(tok, "client") == 0)
            n->role = CATALOG_ROLE_CLIENT;
        else if (strcmp(tok, "dead") == 0)
            n->alive = false;
        else if (strcmp(tok, "nodl") == 0)
            f->nodl[k] = true;
        else {
            char *s2 = NULL;
            for (char *item = strtok_r(val, ",", &s2); item; item = strtok_r(NULL, ",", &s2)) {
                char *s3 = NULL;
                char *name = strtok_r(item, ":", &s3);
                char *f1 = strtok_r(NULL, ":", &s3), *f2 = strtok_r(NULL, ":", &s3);
                if (strcmp(tok, "disk") == 0) {
                    catalog_avail_t *a = &f->avail[k][n->n_available++];
                    a->name = name;
                    a->size_bytes = f1 ? strtoull(f1, NULL, 10) * G : 0;
                    a->type = f2 && f2[0] == 'e' ? MM_EMBEDDING : MM_LLM;
                } else if (strcmp(tok, "serve") == 0) {
                    catalog_serving_t *v = &f->serv[k][n->n_serving++];
                    v->model = name;
                    for (char *fl = f1; fl; fl = fl == f1 ? f2 : NULL) {
                        if (strcmp(fl, "ready") == 0) v->state = CATALOG_SERVE_READY;
                        if (strcmp(fl, "host") == 0) v->is_host = true;
                    }
                } else if (strcmp(tok, "req") == 0) {
                    f->reqsize[k][n->n_requested] = f1 ? strtoull(f1, NULL, 10) * G : 0;
                    f->req[k][n->n_requested++] = name;
                } else if (strcmp(tok, "src") == 0) {
                    f->has_src[k] = true;
                    f->src[k][f->n_src[k]++] = name;
                } else if (strcmp(tok, "fetch") == 0) {
                    f->fetch[k][f->n_fetch[k]++] = name;
                } else {
                    fail_msg("bad spec key %s", tok);
                }
            }
        }
    }
}

/* alloc for the node `self_spec` joining the mesh `others` (NULL-terminated specs). */
static int choose(const char *self_spec, const char *const *others, alloc_result_t *out)
{
    static fx_t f;
    memset(&f, 0, sizeof f);
    for (size_t i = 0; others && others[i]; i++)
        fx_add(&f, others[i]);
    fx_add(&f, self_spec);
    size_t k = f.n - 1;
    alloc_self_t self = {.id = f.ids[k],
                         .vram_bytes = f.nodes[k].vram_bytes,
                         .disk = f.avail[k],
                         .n_disk = f.nodes[k].n_available,
                         .models = f.req[k],
                         .n_models = f.nodes[k].n_requested,
                         .no_download = f.nodl[k],
                         .sources = f.has_src[k] ? f.src[k] : NULL,
                         .n_sources = f.n_src[k],
                         .fetching = f.fetch[k],
                         .n_fetching = f.n_fetch[k]};
    return alloc_choose(&self, f.nodes, k, out);
}

typedef struct {
    const char *what;
    const char *self;   /* the joining node */
    const char *others; /* the other nodes' specs, separated by " | " */
    const char *want;   /* "<rule name> [model] [dl]" (dl: must download) */
} acase_t;

/* BIG = 20 GB → needs 22 GB; S = 4 GB → 4.4 GB. */
/* clang-format off */
static const acase_t cases[] = {
    /* rule 1: can't run without me */
    {"1: my memory completes a short split group",
     "a vram=16 disk=BIG:20", "b vram=8 disk=BIG:20 serve=BIG:loading:host",
     "cant_run_without_me BIG"},
    {"1: beats an unserved model I could serve alone (rule 2)",
     "a vram=16 disk=BIG:20,S:4", "b vram=8 disk=BIG:20 serve=BIG:loading:host",
     "cant_run_without_me BIG"},
    {"1: applies even when I must download",
     "a vram=16 disk=S:4", "b vram=8 disk=BIG:20 serve=BIG:loading:host",
     "cant_run_without_me BIG dl"},
    {"1: exactly at the threshold",
     "a vram=14 disk=BIG:20", "b vram=8 disk=BIG:20 serve=BIG:loading:host",
     "cant_run_without_me BIG"},
    {"1 tie-break: on disk beats larger",
     "a vram=16 disk=BIG:20",
     "b vram=8 disk=BIG:20 serve=BIG:loading:host | "
     "c vram=20 disk=HUGE:30 serve=HUGE:loading:host",
     "cant_run_without_me BIG"},
    {"1 tie-break: larger when both on disk",
     "a vram=16 disk=BIG:20,HUGE:30",
     "b vram=8 disk=BIG:20 serve=BIG:loading:host | "
     "c vram=20 disk=HUGE:30 serve=HUGE:loading:host",
     "cant_run_without_me HUGE"},
    {"1 tie-break: alphabetical when same size and both on disk",
     "a vram=16 disk=M2:20,M1:20",
     "b vram=8 disk=M1:20 serve=M1:loading:host | "
     "c vram=8 disk=M2:20 serve=M2:loading:host",
     "cant_run_without_me M1"},
    /* rule 2: unserved */
    {"2: unserved, on disk, fits",
     "a vram=8 disk=S:4", "",
     "unserved S"},
    {"2: a dead server does not count",
     "a vram=8 disk=S:4", "b vram=8 disk=S:4 serve=S:ready:host dead",
     "unserved S"},
    {"2: a client's serving does not count",
     "a vram=8 disk=S:4", "b vram=8 client serve=S:ready:host",
     "unserved S"},
    {"2: my own stale serving is ignored (I am choosing again)",
     "a vram=8 disk=S:4", "a vram=8 disk=S:4 serve=S:ready:host",
     "unserved S"},
    {"2 tie-break: larger",
     "a vram=8 disk=A:2,B:4", "",
     "unserved B"},
    {"2 tie-break: alphabetical",
     "a vram=8 disk=B:4,A:4", "",
     "unserved A"},
    {"2: the larger one does not fit, the smaller does",
     "a vram=8 disk=A:2,B:8", "",
     "unserved A"},
    {"2: beats joining a split group I have on disk (rule 3)",
     "a vram=8 disk=BIG:20,S:4",
     "b vram=8 disk=BIG:20 serve=BIG:ready:host | "
     "c vram=16 serve=BIG:ready",
     "unserved S"},
    /* rule 3: benefits from capacity */
    {"3: a complete split group I have on disk",
     "a vram=8 disk=BIG:20",
     "b vram=12 disk=BIG:20 serve=BIG:ready:host | "
     "c vram=12 serve=BIG:ready",
     "benefits_from_capacity BIG"},
    {"3: a short group I cannot complete alone",
     "a vram=4 disk=BIG:20", "b vram=8 disk=BIG:20 serve=BIG:loading:host",
     "benefits_from_capacity BIG"},
    {"3 tie-break: larger",
     "a vram=4 disk=BIG:20,HUGE:30",
     "b vram=8 serve=BIG:loading:host | "
     "c vram=8 serve=HUGE:loading:host",
     "benefits_from_capacity HUGE"},
    {"3: beats downloading an unserved model (rule 4)",
     "a vram=8 disk=BIG:20",
     "b vram=12 disk=BIG:20,S:4 serve=BIG:ready:host | "
     "c vram=12 serve=BIG:ready",
     "benefits_from_capacity BIG"},
    /* rule 4: download and serve */
    {"4: unserved, fits, not on my disk",
     "a vram=8", "b vram=24 disk=S:4,Q:10 serve=Q:ready:host",
     "download_and_serve S dl"},
    {"4: a split group I do not have",
     "a vram=4", "b vram=12 disk=BIG:20 serve=BIG:ready:host | c vram=12 serve=BIG:ready",
     "download_and_serve BIG dl"},
    {"4 tie-break: larger",
     "a vram=8", "b vram=24 disk=S:4,T:5,Q:10 serve=Q:ready:host",
     "download_and_serve T dl"},
    {"4: beats becoming another replica (rule 5)",
     "a vram=12 disk=Q:10", "b vram=24 disk=S:4,Q:10 serve=Q:ready:host",
     "download_and_serve S dl"},
    {"4: only models with an announced source",
     "a vram=8 src=S", "b vram=24 disk=S:4,T:5,Q:10 serve=Q:ready:host",
     "download_and_serve S dl"},
    {"4: no source for anything it could serve: standby",
     "a vram=8 src=Q", "b vram=24 disk=S:4,T:5,Q:10 serve=Q:ready:host",
     "standby"},
    {"4: a model another node is downloading is left to it",
     "a vram=8 fetch=T", "b vram=24 disk=S:4,T:5,Q:10 serve=Q:ready:host",
     "download_and_serve S dl"},
    {"4: a model requested with a known size (its source's), nobody has it",
     "a vram=8", "b vram=1 req=NEW:4",
     "download_and_serve NEW dl"},
    {"4: the same, too big for me alone: never downloaded",
     "a vram=4", "b vram=1 req=NEW:4",
     "standby"},
    {"2: a model another node is downloading is not unserved",
     "a vram=8 disk=S:4 fetch=S", "",
     "standby"},
    {"4: never downloads what does not fit alone (seed 002)",
     "a vram=4", "b vram=24 disk=S:4,Q:10 serve=Q:ready:host",
     "standby"},
    /* rule 5: biggest */
    {"5: everything covered: another replica of the biggest",
     "a vram=16 disk=Q:10,S:4",
     "b vram=24 disk=Q:10 serve=Q:ready:host | "
     "c vram=8 disk=S:4 serve=S:ready:host",
     "biggest Q"},
    {"5 tie-break: on disk before larger",
     "a vram=16 disk=S:4",
     "b vram=24 disk=Q:10 serve=Q:ready:host | "
     "c vram=8 disk=S:4 serve=S:ready:host",
     "biggest S"},
    {"5: download when nothing is on disk",
     "a vram=16", "b vram=24 disk=Q:10 serve=Q:ready:host | c vram=8 disk=S:4 serve=S:ready:host",
     "biggest Q dl"},
    {"5: only models I fit",
     "a vram=8", "b vram=24 disk=Q:10 serve=Q:ready:host | c vram=8 disk=S:4 serve=S:ready:host",
     "biggest S dl"},
    {"5 tie-break: alphabetical",
     "a vram=16", "b vram=24 disk=Q:10 serve=Q:ready:host | c vram=24 disk=P:10 serve=P:ready:host",
     "biggest P dl"},
    /* standby */
    {"standby: empty mesh",
     "a vram=24", "",
     "standby"},
    {"standby: no memory",
     "a vram=0 disk=S:4", "",
     "standby"},
    {"standby: every model solo-served by bigger nodes",
     "a vram=8", "b vram=24 disk=Q:10 serve=Q:ready:host",
     "standby"},
    {"standby: an unserved model too big for me, no group to join",
     "a vram=8 disk=BIG:20", "b vram=8 disk=BIG:20",
     "standby"},
    {"standby: downloads forbidden",
     "a vram=8 nodl",
     "b vram=24 disk=S:4,Q:10 serve=Q:ready:host | "
     "c vram=8 disk=BIG:20 serve=BIG:loading:host",
     "standby"},
    {"standby: downloads forbidden, even for rule 1",
     "a vram=16 nodl", "b vram=8 disk=BIG:20 serve=BIG:loading:host",
     "standby"},
    {"standby: only a requested model of unknown size",
     "a vram=24", "b vram=0 req=NEW",
     "standby"},
    /* --model */
    {"--model overrides every rule",
     "a vram=16 disk=BIG:20,S:4 req=S", "b vram=8 disk=BIG:20 serve=BIG:loading:host",
     "explicit S"},
    {"--model of a model nobody has (download)",
     "a vram=16 req=NEW", "",
     "explicit NEW dl"},
    {"--model even without memory",
     "a vram=0 disk=S:4 req=S", "",
     "explicit S"},
    {"several --model: the rules, restricted to them",
     "a vram=16 disk=BIG:20,S:4,T:5 req=S,T", "b vram=8 disk=BIG:20 serve=BIG:loading:host",
     "unserved T"},
    {"several --model (seeder): the largest it fits",
     "a vram=12 disk=BIG:20,S1:2,S2:3 req=BIG,S1,S2", "",
     "unserved S2"},
    {"several --model: rule 5 among them",
     "a vram=8 disk=A:100,B:4,C:2 req=A,B,C",
     "b vram=24 disk=B:4,C:2 serve=B:ready:host,C:ready:host",
     "biggest B"},
    {"several --model, none applies: models I fit before models on disk",
     "a vram=8 disk=A:100 req=A,B,C nodl", "b vram=8 disk=B:4,C:5",
     "explicit C dl"},
    {"several --model: nothing fits → by tie-break",
     "a vram=2 disk=A:100 req=A,B", "b vram=8 disk=B:200",
     "explicit A"},
    {"several --model: downloads for rule 5",
     "a vram=8 disk=A:100 req=A,B",
     "b vram=24 disk=B:4 serve=B:ready:host | "
     "c vram=24 serve=B:ready:host",
     "biggest B dl"},
    {"several --model, none useful: the fitting one",
     "a vram=8 disk=A:100 req=A,B nodl", "b vram=24 disk=B:4 serve=B:ready:host",
     "explicit B dl"},
};
/* clang-format on */

/* alloc for the node `self_spec` joining the mesh `others` ("spec | spec …"). */
static int choose_str(const char *self_spec, const char *others, alloc_result_t *out)
{
    static char buf[1024];
    const char *specs[MAXN + 1];
    size_t n = 0;
    snprintf(buf, sizeof buf, "%s", others);
    char *save = NULL;
    for (char *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save)) {
        while (*t == ' ')
            t++;
        if (*t) specs[n++] = t;
    }
    specs[n] = NULL;
    return choose(self_spec, specs, out);
}

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const acase_t *c = &cases[i];
        alloc_result_t r;
        int rc = choose_str(c->self, c->others, &r);
        if (rc != 0) fail_msg("%s: rc %d", c->what, rc);
        char got[CATALOG_NAME_MAX + 64];
        snprintf(got, sizeof got, "%s%s%s%s", alloc_rule_name(r.rule), r.model[0] ? " " : "",
                 r.model, r.download ? " dl" : "");
        if (strcmp(got, c->want) != 0) fail_msg("%s: got '%s', want '%s'", c->what, got, c->want);
    }
}

static void test_result_fields(void **state)
{
    (void)state;
    alloc_result_t r;
    const char *others[] = {"b vram=8 disk=BIG:20 serve=BIG:loading:host", NULL};
    assert_int_equal(choose("a vram=16", others, &r), 0);
    assert_int_equal(r.size_bytes, 20 * G);
    assert_true(r.download);
    assert_int_equal(choose("a vram=16 req=NEW", NULL, &r), 0);
    assert_int_equal(r.size_bytes, 0);
    assert_int_equal(choose("a vram=1", NULL, &r), 0);
    assert_int_equal(r.rule, ALLOC_RULE_NONE);
    assert_string_equal(r.model, "");
    assert_int_equal(r.size_bytes, 0);

    assert_string_equal(alloc_rule_name(ALLOC_RULE_NONE), "standby");
    assert_string_equal(alloc_rule_name(ALLOC_RULE_EXPLICIT), "explicit");
    assert_string_equal(alloc_rule_name(ALLOC_RULE_CANT_RUN_WITHOUT_ME), "cant_run_without_me");
    assert_string_equal(alloc_rule_name(ALLOC_RULE_UNSERVED), "unserved");
    assert_string_equal(alloc_rule_name(ALLOC_RULE_BENEFITS), "benefits_from_capacity");
    assert_string_equal(alloc_rule_name(ALLOC_RULE_DOWNLOAD), "download_and_serve");
    assert_string_equal(alloc_rule_name(ALLOC_RULE_BIGGEST), "biggest");
}

static void test_invalid(void **state)
{
    (void)state;
    char id[CATALOG_ID_LEN + 1];
    memset(id, 'a', CATALOG_ID_LEN);
    id[CATALOG_ID_LEN] = '\0';
    alloc_result_t r;
    alloc_self_t self = {.id = id, .vram_bytes = G};
    assert_int_equal(alloc_choose(&self, NULL, 0, NULL), -EINVAL);
    assert_int_equal(alloc_choose(NULL, NULL, 0, &r), -EINVAL);
    assert_int_equal(alloc_choose(&self, NULL, 1, &r), -EINVAL);
    self.id = "abc";
    assert_int_equal(alloc_choose(&self, NULL, 0, &r), -EINVAL);
    self.id = id;
    const char *bad[] = {"ok", "bad\nname"};
    self.models = bad;
    self.n_models = 2;
    assert_int_equal(alloc_choose(&self, NULL, 0, &r), -EINVAL);
    self.n_models = ALLOC_MAX_MODELS + 1;
    assert_int_equal(alloc_choose(&self, NULL, 0, &r), -E2BIG);
    self.models = NULL;
    self.n_models = 1;
    assert_int_equal(alloc_choose(&self, NULL, 0, &r), -EINVAL);
    self.n_models = 0;
    self.n_disk = 1;
    assert_int_equal(alloc_choose(&self, NULL, 0, &r), -EINVAL);
    self.n_disk = 0;
    /* too many nodes once self is added */
    static catalog_node_t many[CATALOG_MAX_NODES];
    assert_int_equal(alloc_choose(&self, many, CATALOG_MAX_NODES, &r), -E2BIG);
    assert_int_equal(alloc_choose(&self, many, CATALOG_MAX_NODES - 1, &r), 0);
    assert_int_equal(r.rule, ALLOC_RULE_NONE);
}

/* ------------------------------------------------------------------------------------------
 * Seed 000 degenerate cases: nodes join one after another; each is assigned by alloc and then
 * serves its model; the election of every model group is checked at the end.
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    fx_t f;
} mesh_t;

/* Node `spec` joins `m`: alloc must pick (rule, model); the node then serves it. */
static void join(mesh_t *m, const char *spec, alloc_rule_t rule, const char *model)
{
    fx_t *f = &m->f;
    fx_add(f, spec);
    size_t k = f->n - 1;
    alloc_self_t self = {.id = f->ids[k],
                         .vram_bytes = f->nodes[k].vram_bytes,
                         .disk = f->avail[k],
                         .n_disk = f->nodes[k].n_available,
                         .models = f->req[k],
                         .n_models = f->nodes[k].n_requested};
    alloc_result_t r;
    assert_int_equal(alloc_choose(&self, f->nodes, k, &r), 0);
    if (r.rule != rule || strcmp(r.model, model) != 0)
        fail_msg("join %s: got %s '%s', want %s '%s'", spec, alloc_rule_name(r.rule), r.model,
                 alloc_rule_name(rule), model);
    if (r.rule != ALLOC_RULE_NONE)
        f->serv[k][f->nodes[k].n_serving++] =
            (catalog_serving_t){fx_str(f, r.model), CATALOG_SERVE_READY, false};
}

/* Elect `model` among its servers (RTT = position in the mesh × 10 ms) and check the outcome. */
static void elect(mesh_t *m, const char *model, election_mode_t mode, const char *members)
{
    catalog_t cat;
    assert_int_equal(catalog_build(m->f.nodes, m->f.n, &cat), 0);
    const catalog_entry_t *e = catalog_find(&cat, model);
    assert_non_null(e);
    election_node_t nodes[MAXN];
    size_t n = 0;
    for (size_t i = 0; i < m->f.n; i++)
        if (catalog_has_id(e->servers, e->n_servers, m->f.ids[i]))
            nodes[n++] = (election_node_t){
                m->f.ids[i], m->f.nodes[i].vram_bytes, (int32_t)(10 * i), false, false, 0, 0};
    election_input_t in = {
        .model_bytes = e->size_bytes, .n_layers = 32, .nodes = nodes, .n_nodes = n};
    election_plan_t p;
    assert_int_equal(election_run(&in, &p), 0);
    char got[MAXN + 1];
    for (size_t i = 0; i < p.n_members; i++)
        got[i] = p.members[i].id[0];
    got[p.n_members] = '\0';
    if (p.mode != mode || strcmp(got, members) != 0)
        fail_msg("%s: %s '%s', want %s '%s'", model, election_mode_name(p.mode), got,
                 election_mode_name(mode), members);
    election_plan_free(&p);
    catalog_free(&cat);
}

static void test_degenerate_one_model_one_node(void **state)
{
    (void)state;
    static mesh_t m;
    memset(&m, 0, sizeof m);
    join(&m, "a vram=24 disk=M:10 req=M", ALLOC_RULE_EXPLICIT, "M");
    elect(&m, "M", ELECTION_SOLO, "a");
    memset(&m, 0, sizeof m); /* --models-dir with one model: the same */
    join(&m, "a vram=24 disk=M:10", ALLOC_RULE_UNSERVED, "M");
    elect(&m, "M", ELECTION_SOLO, "a");
}

static void test_degenerate_one_model_many_nodes(void **state)
{
    (void)state;
    static mesh_t m;
    /* too big for any node: a tensor-split group grows around the seeder */
    memset(&m, 0, sizeof m);
    join(&m, "a vram=12 disk=BIG:20 req=BIG", ALLOC_RULE_EXPLICIT, "BIG");
    join(&m, "b vram=6 disk=BIG:20", ALLOC_RULE_BENEFITS, "BIG"); /* 18 < 22 */
    join(&m, "c vram=6", ALLOC_RULE_CANT_RUN_WITHOUT_ME, "BIG");  /* 24 >= 22 */
    join(&m, "d vram=4", ALLOC_RULE_DOWNLOAD, "BIG");             /* spare */
    elect(&m, "BIG", ELECTION_SPLIT, "bca"); /* host a; b (10 ms) + c (20 ms) reach 24 */
    /* fits on one node: joiners become replicas */
    memset(&m, 0, sizeof m);
    join(&m, "a vram=24 disk=M:10 req=M", ALLOC_RULE_EXPLICIT, "M");
    join(&m, "b vram=16 disk=M:10", ALLOC_RULE_BIGGEST, "M");
    join(&m, "c vram=12", ALLOC_RULE_BIGGEST, "M");
    join(&m, "d vram=8", ALLOC_RULE_NONE, ""); /* cannot fit it: standby */
    elect(&m, "M", ELECTION_SOLO, "abc");
}

static void test_degenerate_all_fit_solo(void **state)
{
    (void)state;
    static mesh_t m;
    memset(&m, 0, sizeof m);
    join(&m, "a vram=12 disk=A:4,B:6,C:8", ALLOC_RULE_UNSERVED, "C");
    join(&m, "b vram=12 disk=A:4,B:6,C:8", ALLOC_RULE_UNSERVED, "B");
    join(&m, "c vram=12 disk=A:4,B:6,C:8", ALLOC_RULE_UNSERVED, "A");
    join(&m, "d vram=12 disk=A:4,B:6,C:8", ALLOC_RULE_BIGGEST, "C");
    elect(&m, "A", ELECTION_SOLO, "c");
    elect(&m, "B", ELECTION_SOLO, "b");
    elect(&m, "C", ELECTION_SOLO, "da"); /* equal memory: larger id first */
}

static void test_degenerate_big_and_small(void **state)
{
    (void)state;
    static mesh_t m;
    memset(&m, 0, sizeof m);
    join(&m, "a vram=12 disk=BIG:20,S1:2,S2:3 req=BIG", ALLOC_RULE_EXPLICIT, "BIG");
    join(&m, "b vram=12 disk=BIG:20,S1:2", ALLOC_RULE_CANT_RUN_WITHOUT_ME, "BIG");
    join(&m, "c vram=4 disk=S1:2,S2:3", ALLOC_RULE_UNSERVED, "S2");
    join(&m, "d vram=4 disk=S1:2,S2:3", ALLOC_RULE_UNSERVED, "S1");
    elect(&m, "BIG", ELECTION_SPLIT, "ab"); /* equal memory: host b (larger id) */
    elect(&m, "S1", ELECTION_SOLO, "d");
    elect(&m, "S2", ELECTION_SOLO, "c");
    /* every model covered and solo ones out of reach: the next small node is a spare worker of
     * the split (rule 3: on disk), a node without files downloads into it (rule 4) */
    join(&m, "e vram=2 disk=BIG:20", ALLOC_RULE_BENEFITS, "BIG");
    join(&m, "f vram=2", ALLOC_RULE_DOWNLOAD, "BIG");
    elect(&m, "BIG", ELECTION_SPLIT, "ab");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_result_fields),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_degenerate_one_model_one_node),
        cmocka_unit_test(test_degenerate_one_model_many_nodes),
        cmocka_unit_test(test_degenerate_all_fit_solo),
        cmocka_unit_test(test_degenerate_big_and_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

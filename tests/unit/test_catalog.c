/* Unit tests for src/core/catalog.h: table-driven status/holder cases written as node specs, plus
 * validation, caps and order independence. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"

#define G 1000000000ULL
#define MAXN 16
#define MAXL 8

/* ------------------------------------------------------------------------------------------
 * Node specs: "<tag> [vram=GB|vramb=BYTES] [disk=NAME:GB[:e|:r],NAME:BYTESb…]
 *              [serve=NAME[:ready][:host],…] [req=NAME,…] [client] [host] [dead]"
 * The tag is one hex char; the node id is that char 64 times.
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    catalog_node_t nodes[MAXN];
    catalog_avail_t avail[MAXN][MAXL];
    catalog_serving_t serv[MAXN][MAXL];
    const char *req[MAXN][MAXL];
    char ids[MAXN][CATALOG_ID_LEN + 1];
    char pool[4096];
    size_t used, n;
} fx_t;

static uint64_t parse_size(const char *s)
{
    size_t len = strlen(s);
    if (len && s[len - 1] == 'b') return strtoull(s, NULL, 10);
    return strtoull(s, NULL, 10) * G;
}

static void fx_add(fx_t *f, const char *spec)
{
    assert_true(f->n < MAXN);
    size_t len = strlen(spec) + 1;
    assert_true(f->used + len <= sizeof f->pool);
    char *s = memcpy(f->pool + f->used, spec, len);
    f->used += len;
    size_t k = f->n++;
    catalog_node_t *n = &f->nodes[k];
    memset(n, 0, sizeof *n);
    n->alive = true;
    char *save = NULL;
    char *tok = strtok_r(s, " ", &save);
    memset(f->ids[k], tok[0], CATALOG_ID_LEN);
    f->ids[k][CATALOG_ID_LEN] = '\0';
    n->id = f->ids[k];
    n->available = f->avail[k];
    n->serving = f->serv[k];
    n->requested = f->req[k];
    while ((tok = strtok_r(NULL, " ", &save))) {
        char *val = strchr(tok, '=');
        if (val) *val++ = '\0';
        if (strcmp(tok, "vram") == 0)
            n->vram_bytes = strtoull(val, NULL, 10) * G;
        else if (strcmp(tok, "vramb") == 0)
            n->vram_bytes = strtoull(val, NULL, 10);
        else if (strcmp(tok, "client") == 0)
            n->role = CATALOG_ROLE_CLIENT;
        else if (strcmp(tok, "host") == 0)
            n->role = CATALOG_ROLE_HOST;
        else if (strcmp(tok, "dead") == 0)
            n->alive = false;
        else {
            char *s2 = NULL;
            for (char *item = strtok_r(val, ",", &s2); item; item = strtok_r(NULL, ",", &s2)) {
                char *s3 = NULL;
                char *name = strtok_r(item, ":", &s3);
                char *f1 = strtok_r(NULL, ":", &s3), *f2 = strtok_r(NULL, ":", &s3);
                if (strcmp(tok, "disk") == 0) {
                    catalog_avail_t *a = &f->avail[k][n->n_available++];
                    a->name = name;
                    a->size_bytes = f1 ? parse_size(f1) : 0;
                    a->type = !f2            ? MM_LLM
                              : f2[0] == 'e' ? MM_EMBEDDING
                              : f2[0] == 'r' ? MM_RERANKING
                                             : MM_LLM;
                } else if (strcmp(tok, "serve") == 0) {
                    catalog_serving_t *v = &f->serv[k][n->n_serving++];
                    v->model = name;
                    for (char *fl = f1; fl; fl = fl == f1 ? f2 : NULL) {
                        if (strcmp(fl, "ready") == 0) v->state = CATALOG_SERVE_READY;
                        if (strcmp(fl, "host") == 0) v->is_host = true;
                    }
                } else if (strcmp(tok, "req") == 0) {
                    f->req[k][n->n_requested++] = name;
                } else {
                    fail_msg("bad spec key %s", tok);
                }
            }
        }
    }
}

static void fx_build(fx_t *f, const char *const *specs)
{
    memset(f, 0, sizeof *f);
    for (size_t i = 0; specs[i]; i++)
        fx_add(f, specs[i]);
}

static void ids_str(char *out, const catalog_id_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ids[i][0];
    out[n] = '\0';
}

/* "NAME status SIZE h=<holders> s=<servers> H=<hosts>[ req][ embedding]; …" (SIZE in GB when
 * whole, else bytes with a 'b'). */
static void dump(const catalog_t *c, char *out, size_t len)
{
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < c->n; i++) {
        const catalog_entry_t *e = &c->entries[i];
        char h[MAXN + 1], s[MAXN + 1], H[MAXN + 1], size[32];
        ids_str(h, e->holders, e->n_holders);
        ids_str(s, e->servers, e->n_servers);
        ids_str(H, e->hosts, e->n_hosts);
        if (e->size_bytes % G == 0)
            snprintf(size, sizeof size, "%llu", (unsigned long long)(e->size_bytes / G));
        else
            snprintf(size, sizeof size, "%llub", (unsigned long long)e->size_bytes);
        off += (size_t)snprintf(out + off, len - off, "%s%s %s %s h=%s s=%s H=%s%s%s",
                                i ? "; " : "", e->name, catalog_status_name(e->status), size, h, s,
                                H, e->requested ? " req" : "",
                                e->type == MM_LLM         ? ""
                                : e->type == MM_EMBEDDING ? " embedding"
                                                          : " reranking");
        assert_true(off < len);
    }
}

typedef struct {
    const char *what;
    const char *specs[MAXN + 1];
    const char *want;
} ccase_t;

static const ccase_t cases[] = {
    {"empty mesh", {NULL}, ""},
    {"nodes without models", {"a vram=24", "b vram=8", NULL}, ""},
    {"a file on disk, room for it: unloaded",
     {"a vram=24 disk=A:10", NULL},
     "A unloaded 10 h=a s= H="},
    {"ready: a host serves it ready",
     {"a vram=24 disk=A:10 serve=A:ready:host", NULL},
     "A ready 10 h=a s=a H=a"},
    {"loading: the host is loading",
     {"a vram=8 disk=A:10 serve=A:loading:host", "b vram=8 serve=A:ready", NULL},
     "A loading 10 h=a s=ab H=a"},
    {"loading: workers ready, no host yet (re-election)",
     {"a vram=8 disk=A:10 serve=A:ready", "b vram=8 serve=A:ready", NULL},
     "A loading 10 h=a s=ab H="},
    {"loading: the ready host is dead",
     {"a vram=8 disk=A:10 serve=A:ready:host dead", "b vram=8 serve=A:ready", NULL},
     "A loading 0 h= s=b H="},
    {"several ready hosts (solo replicas)",
     {"b vram=24 disk=A:10 serve=A:ready:host", "a vram=24 disk=A:10 serve=A:ready:host", NULL},
     "A ready 10 h=ab s=ab H=ab"},
    {"needs_capacity: one node, 10 GB < 1.1 x 10 GB",
     {"a vram=10 disk=A:10", NULL},
     "A needs_capacity 10 h=a s= H="},
    {"needs_capacity boundary: the mesh has exactly 1.1 x size",
     {"a vramb=5500000000 disk=A:10", "b vramb=5500000000", NULL},
     "A unloaded 10 h=a s= H="},
    {"needs_capacity boundary: one byte short",
     {"a vramb=5500000000 disk=A:10", "b vramb=5499999999", NULL},
     "A needs_capacity 10 h=a s= H="},
    {"capacity counts every live non-client node, not only holders",
     {"a vram=4 disk=A:10", "b vram=8", NULL},
     "A unloaded 10 h=a s= H="},
    {"clients lend no memory, hold nothing, serve nothing, but name models",
     {"a vram=5 disk=A:10", "c vram=100 client disk=B:4 serve=A:ready:host req=R", NULL},
     "A needs_capacity 10 h=a s= H=; B unloaded 4 h= s= H=; R unloaded 0 h= s= H= req"},
    {"dead nodes count for nothing",
     {"a vram=4 disk=A:10", "b vram=100 dead disk=B:4 req=C", NULL},
     "A needs_capacity 10 h=a s= H="},
    {"requested only: unknown size, unloaded even without capacity",
     {"a vram=0 req=C", NULL},
     "C unloaded 0 h= s= H= req"},
    {"requested and on disk elsewhere",
     {"a vram=24 req=A", "b vram=8 disk=A:10", NULL},
     "A unloaded 10 h=b s= H= req"},
    {"served, nobody reports the file: size unknown",
     {"a vram=24 serve=X:ready:host", NULL},
     "X ready 0 h= s=a H=a"},
    {"a served model is never needs_capacity",
     {"a vram=4 disk=A:10 serve=A:loading:host", NULL},
     "A loading 10 h=a s=a H=a"},
    {"sorted by name, ids sorted",
     {"c vram=8 disk=b:1,A:2,Z:3", "a vram=8 disk=Z:3,b:1", "b vram=8 disk=A:2", NULL},
     "A unloaded 2 h=bc s= H=; Z unloaded 3 h=ac s= H=; b unloaded 1 h=ac s= H="},
    {"size: the largest reported, type with it",
     {"a vram=24 disk=A:10", "b vram=24 disk=A:12:e", "c vram=24 disk=A:11:r", NULL},
     "A unloaded 12 h=abc s= H= embedding"},
    {"type tie on the same size: the lowest type",
     {"a vram=24 disk=E:1:r", "b vram=24 disk=E:1:e", NULL},
     "E unloaded 1 h=ab s= H= embedding"},
    {"duplicates in a node's lists count once, ready and host win",
     {"a vram=24 disk=A:10,A:10 serve=A:loading,A:ready:host req=A,A", NULL},
     "A ready 10 h=a s=a H=a req"},
    {"mixed mesh",
     {"a vram=24 disk=Q32:20,Q3:2 serve=Q32:ready:host", "b vram=8 disk=Q3:2 serve=Q3:ready:host",
      "c vram=8 serve=Q32:ready", "d vram=4 disk=E5:1:e serve=E5:loading:host",
      "e vram=2 disk=BIG:200", NULL},
     "BIG needs_capacity 200 h=e s= H=; E5 loading 1 h=d s=d H=d embedding; "
     "Q3 ready 2 h=ab s=b H=b; Q32 ready 20 h=a s=ac H=a"},
};

static void test_table(void **state)
{
    (void)state;
    static fx_t f;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fx_build(&f, cases[i].specs);
        catalog_t c;
        assert_int_equal(catalog_build(f.nodes, f.n, &c), 0);
        char got[2048];
        dump(&c, got, sizeof got);
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("%s:\n  got  '%s'\n  want '%s'", cases[i].what, got, cases[i].want);
        assert_int_equal(c.n_rejected, 0);
        assert_false(c.truncated);
        catalog_free(&c);
    }
}

static void test_fields(void **state)
{
    (void)state;
    static fx_t f;
    const char *specs[] = {"a vram=8 disk=A:20 serve=A:ready",
                           "b vram=12 serve=A:loading:host",
                           "c vram=6 serve=A:ready",
                           "d vram=5 client",
                           "e vram=100 dead",
                           NULL};
    fx_build(&f, specs);
    catalog_t c;
    assert_int_equal(catalog_build(f.nodes, f.n, &c), 0);
    assert_int_equal(c.n_live, 3);
    assert_int_equal(c.capacity_bytes, 26 * G);
    const catalog_entry_t *e = catalog_find(&c, "A");
    assert_non_null(e);
    assert_int_equal(e->n_servers, 3);
    assert_int_equal(e->n_ready, 2);
    assert_int_equal(e->n_hosts, 1);
    assert_int_equal(e->servers_vram, 26 * G);
    assert_int_equal(e->max_server_vram, 12 * G);
    assert_int_equal(e->status, CATALOG_LOADING);
    assert_true(catalog_has_id(e->servers, e->n_servers, f.ids[1]));
    assert_false(catalog_has_id(e->holders, e->n_holders, f.ids[1]));
    assert_false(catalog_has_id(e->servers, e->n_servers, f.ids[3]));
    assert_false(catalog_has_id(NULL, 0, f.ids[0]));
    assert_null(catalog_find(&c, "B"));
    assert_null(catalog_find(&c, "a"));
    assert_null(catalog_find(NULL, "A"));
    catalog_free(&c);
    assert_null(c.entries);
    catalog_free(&c); /* twice is harmless */
    catalog_free(NULL);
}

static void test_validation(void **state)
{
    (void)state;
    assert_true(
        catalog_id_valid("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
    assert_false(catalog_id_valid(NULL));
    assert_false(catalog_id_valid(""));
    assert_false(
        catalog_id_valid("0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"));
    assert_false(
        catalog_id_valid("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde"));
    assert_false(
        catalog_id_valid("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0"));
    assert_true(catalog_name_valid("Qwen2.5-32B-Instruct-Q4_K_M"));
    assert_true(catalog_name_valid("with space/and-slash"));
    assert_true(catalog_name_valid("\xc3\xa9t\xc3\xa9"));
    assert_false(catalog_name_valid(NULL));
    assert_false(catalog_name_valid(""));
    assert_false(catalog_name_valid("tab\there"));
    assert_false(catalog_name_valid("nl\n"));
    assert_false(catalog_name_valid("del\x7f"));
    char name[CATALOG_NAME_MAX + 1];
    memset(name, 'x', sizeof name);
    name[CATALOG_NAME_MAX - 1] = '\0';
    assert_true(catalog_name_valid(name)); /* 127 bytes */
    name[CATALOG_NAME_MAX - 1] = 'x';
    name[CATALOG_NAME_MAX] = '\0';
    assert_false(catalog_name_valid(name)); /* 128 bytes */

    /* invalid entries are skipped and counted */
    static fx_t f;
    const char *specs[] = {"a vram=8 disk=A:1", "b vram=8 disk=B:1", "c vram=8 disk=C:1", NULL};
    fx_build(&f, specs);
    f.avail[0][1] = (catalog_avail_t){"bad\nname", G, MM_LLM, 0};
    f.avail[0][2] = (catalog_avail_t){NULL, G, MM_LLM, 0};
    f.nodes[0].n_available = 3;
    f.serv[1][0] = (catalog_serving_t){"", CATALOG_SERVE_READY, true};
    f.nodes[1].n_serving = 1;
    f.ids[2][0] = 'X';         /* invalid id: the whole node is skipped */
    f.nodes[f.n] = f.nodes[0]; /* duplicate of a: skipped */
    f.nodes[f.n].available = f.avail[1];
    f.n++;
    catalog_t c;
    assert_int_equal(catalog_build(f.nodes, f.n, &c), 0);
    char got[512];
    dump(&c, got, sizeof got);
    assert_string_equal(got, "A unloaded 1 h=a s= H=; B unloaded 1 h=b s= H=");
    assert_int_equal(c.n_rejected, 5);
    assert_int_equal(c.n_live, 2);
    catalog_free(&c);

    assert_int_equal(catalog_build(f.nodes, 1, NULL), -EINVAL);
    assert_int_equal(catalog_build(NULL, 1, &c), -EINVAL);
    assert_int_equal(catalog_build(NULL, 0, &c), 0);
    assert_int_equal(c.n, 0);
    catalog_free(&c);
    assert_int_equal(catalog_build(f.nodes, CATALOG_MAX_NODES + 1, &c), -E2BIG);
    assert_null(c.entries);
    assert_string_equal(catalog_status_name(CATALOG_READY), "ready");
    assert_string_equal(catalog_status_name(CATALOG_LOADING), "loading");
    assert_string_equal(catalog_status_name(CATALOG_UNLOADED), "unloaded");
    assert_string_equal(catalog_status_name(CATALOG_NEEDS_CAPACITY), "needs_capacity");
}

static void test_caps(void **state)
{
    (void)state;
    enum { PER = CATALOG_MAX_NODE_MODELS + 10, NODES = 5 };
    static catalog_avail_t avail[NODES][PER];
    static char names[NODES][PER][16];
    static char ids[NODES][CATALOG_ID_LEN + 1];
    catalog_node_t nodes[NODES];
    /* 5 nodes × 266 distinct names: 256 each looked at, 10 each rejected */
    for (int n = 0; n < NODES; n++) {
        snprintf(ids[n], sizeof ids[n], "%064x", n);
        for (int i = 0; i < PER; i++) {
            snprintf(names[n][i], sizeof names[n][i], "m%05d", n * PER + i);
            avail[n][i] = (catalog_avail_t){names[n][i], G, MM_LLM, 0};
        }
        nodes[n] = (catalog_node_t){.id = ids[n],
                                    .vram_bytes = G,
                                    .alive = true,
                                    .available = avail[n],
                                    .n_available = PER};
    }
    catalog_t c;
    assert_int_equal(catalog_build(nodes, NODES, &c), 0);
    assert_int_equal(c.n_rejected, NODES * 10);
    assert_true(c.truncated); /* 1280 names > 1024 */
    assert_int_equal(c.n, CATALOG_MAX_MODELS);
    /* the alphabetically first names are kept */
    assert_string_equal(c.entries[0].name, "m00000");
    assert_non_null(catalog_find(&c, "m00255"));
    assert_null(catalog_find(&c, "m00256")); /* beyond the per-node cap */
    assert_string_equal(c.entries[CATALOG_MAX_MODELS - 1].name, "m01053");
    for (size_t i = 1; i < c.n; i++)
        assert_true(strcmp(c.entries[i - 1].name, c.entries[i].name) < 0);
    catalog_free(&c);
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The same nodes in any order give the same catalog. */
static void test_order_independence(void **state)
{
    (void)state;
    static fx_t f;
    const char *specs[] = {"a vram=24 disk=Q32:20,Q3:2 serve=Q32:ready:host req=W",
                           "b vram=8 disk=Q3:2:e serve=Q3:ready:host",
                           "c vram=8 disk=Q3:3 serve=Q32:ready",
                           "d vram=4 client disk=E5:1:e req=W,V",
                           "e vram=2 disk=BIG:200 dead",
                           "f vram=9 disk=Q32:20 serve=Q32:loading",
                           NULL};
    fx_build(&f, specs);
    catalog_t c;
    char want[2048], got[2048];
    assert_int_equal(catalog_build(f.nodes, f.n, &c), 0);
    dump(&c, want, sizeof want);
    catalog_free(&c);
    for (int iter = 0; iter < 50; iter++) {
        catalog_node_t shuffled[MAXN];
        memcpy(shuffled, f.nodes, f.n * sizeof shuffled[0]);
        for (size_t i = f.n; i > 1; i--) {
            size_t j = rnd() % i;
            catalog_node_t t = shuffled[i - 1];
            shuffled[i - 1] = shuffled[j];
            shuffled[j] = t;
        }
        assert_int_equal(catalog_build(shuffled, f.n, &c), 0);
        dump(&c, got, sizeof got);
        assert_string_equal(got, want);
        catalog_free(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_order_independence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

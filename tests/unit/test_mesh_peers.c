/* Unit tests for the mesh's typed peers (src/core/view_set.h, used by node/mesh.c mesh_peers):
 * each announcement is decoded once per change, the views come in id order, and a borrowed
 * view stays valid until a sync that changes something. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view_set.h"

#define ID_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define ID_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define ID_C "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static json_t *ann_vram(uint64_t vram)
{
    return json_pack("{s:s,s:I,s:[s],s:[{s:s,s:I}]}", "role", "worker", "vram_bytes",
                     (json_int_t)vram, "addrs", "10.0.0.1:9337", "available_models", "name", "m",
                     "size_bytes", (json_int_t)7);
}

/* Syncing the same peers at the same versions decodes nothing and keeps every pointer; a
 * changed version decodes that peer only. */
static void test_decode_once_per_change(void **state)
{
    (void)state;
    view_set_t s;
    view_set_init(&s);
    json_t *a = ann_vram(100), *b = ann_vram(200), *c = ann_vram(300);
    view_set_in_t in[3] = {{ID_B, b, 1, 1}, {ID_A, a, 1, 1}, {ID_C, c, 1, 1}};
    assert_true(view_set_sync(&s, in, 3));
    assert_int_equal(s.decodes, 3);
    assert_int_equal(s.n, 3);
    uint64_t gen = s.gen;
    /* id order */
    assert_string_equal(s.v[0].id, ID_C);
    assert_string_equal(s.v[1].id, ID_A);
    assert_string_equal(s.v[2].id, ID_B);
    assert_int_equal(s.v[1].vram_bytes, 100);
    assert_string_equal(s.v[1].addrs[0], "10.0.0.1:9337");

    /* ten more gossip events without an announcement change: no decode, same pointers */
    const view_node_t *va = view_set_find(&s, ID_A);
    for (int i = 0; i < 10; i++)
        assert_false(view_set_sync(&s, in, 3));
    assert_int_equal(s.decodes, 3);
    assert_int_equal(s.gen, gen);
    assert_ptr_equal(view_set_find(&s, ID_A), va);

    /* B announces again (seq 2): one decode, the others kept */
    json_t *b2 = ann_vram(250);
    in[0] = (view_set_in_t){ID_B, b2, 1, 2};
    assert_true(view_set_sync(&s, in, 3));
    assert_int_equal(s.decodes, 4);
    assert_int_equal(s.gen, gen + 1);
    assert_int_equal(view_set_find(&s, ID_B)->vram_bytes, 250);
    assert_int_equal(view_set_find(&s, ID_A)->vram_bytes, 100);

    /* A restarts (incarnation 2, seq 0): one decode */
    json_t *a2 = ann_vram(111);
    in[1] = (view_set_in_t){ID_A, a2, 2, 0};
    assert_true(view_set_sync(&s, in, 3));
    assert_int_equal(s.decodes, 5);
    assert_int_equal(view_set_find(&s, ID_A)->vram_bytes, 111);

    /* C leaves: no decode, the set shrinks */
    assert_true(view_set_sync(&s, in, 2));
    assert_int_equal(s.decodes, 5);
    assert_int_equal(s.n, 2);
    assert_null(view_set_find(&s, ID_C));
    /* C comes back at the same version: decoded again (its view was freed) */
    assert_true(view_set_sync(&s, in, 3));
    assert_int_equal(s.decodes, 6);
    assert_int_equal(s.n, 3);

    view_set_free(&s);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(a2);
    json_decref(b2);
}

/* A view borrowed before a change: the consumer copies what it needs while gen is unchanged;
 * across a change the moved views still hold the same content (the lists were moved, not
 * copied) and nothing leaks or is freed twice (run under ASan). */
static void test_borrowed_views_across_change(void **state)
{
    (void)state;
    view_set_t s;
    view_set_init(&s);
    json_t *a = ann_vram(100), *b = ann_vram(200);
    view_set_in_t in[2] = {{ID_A, a, 1, 1}, {ID_B, b, 1, 1}};
    view_set_sync(&s, in, 2);
    const view_node_t *before = view_set_find(&s, ID_A);
    const view_avail_t *av_before = before->available;
    uint64_t gen = s.gen;
    json_decref(a); /* the set never keeps the announcement */
    a = NULL;

    json_t *b2 = ann_vram(201);
    in[1].ann = b2;
    in[1].seq = 2;
    assert_true(view_set_sync(&s, in, 2));
    assert_true(s.gen != gen); /* the consumer's signal to re-borrow */
    const view_node_t *after = view_set_find(&s, ID_A);
    /* A was not decoded again: its lists are the same allocation, moved to the new array */
    assert_ptr_equal(after->available, av_before);
    assert_int_equal(after->n_available, 1);
    assert_string_equal(after->available[0].name, "m");
    assert_int_equal(after->vram_bytes, 100);
    assert_int_equal(s.decodes, 3);

    /* everyone leaves */
    assert_true(view_set_sync(&s, NULL, 0));
    assert_int_equal(s.n, 0);
    assert_null(view_set_find(&s, ID_A));
    assert_false(view_set_sync(&s, NULL, 0));
    view_set_free(&s);
    json_decref(b);
    json_decref(b2);
}

/* Bad input from gossip never crashes and never enters the set; a duplicate id counts once. */
static void test_bad_and_duplicate(void **state)
{
    (void)state;
    view_set_t s;
    view_set_init(&s);
    json_t *a = ann_vram(100), *notobj = json_string("x");
    view_set_in_t in[4] = {
        {ID_A, a, 1, 1}, {"not-an-id", a, 1, 1}, {ID_B, notobj, 1, 1}, {ID_A, a, 1, 1}};
    assert_true(view_set_sync(&s, in, 4));
    assert_int_equal(s.n, 1);
    assert_string_equal(s.v[0].id, ID_A);
    assert_int_equal(s.decodes, 3); /* A once, the two bad ones tried */
    view_set_free(&s);
    json_decref(a);
    json_decref(notobj);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_once_per_change),
        cmocka_unit_test(test_borrowed_views_across_change),
        cmocka_unit_test(test_bad_and_duplicate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

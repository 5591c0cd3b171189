/* Unit tests for what an assignment moves off a node (src/core/assign.h): table tests. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "assign.h"

#define GB 1000000000ull

enum { LLM = 0, EMB = 1 };

/* m: a planned model: kind 'm' mesh-given, 'p' --model, 'a' assigned; loaded; bytes; use */
#define M(nm, kind, ty, ld, by, use)                                                               \
    {                                                                                              \
        .name = nm, .type = ty, .bytes = (by)*GB, .loaded = ld, .pinned = (kind) == 'p',           \
        .assigned = (kind) == 'a', .last_use = use                                                 \
    }

typedef struct {
    const char *what;
    unsigned type;
    uint64_t need, offer; /* GB */
    unsigned slots;
    assign_held_t planned[4];
    size_t n;
    assign_verdict_t verdict;
    assign_go_t go[4];
    const char *in_the_way;
    bool already;
} row_t;

static void test_assign_table(void **state)
{
    (void)state;
    static const row_t rows[] = {
        {"empty node: nothing goes", LLM, 2, 8, 1, {{0}}, 0, ASSIGN_OK, {0}, NULL, false},
        {"too big for the node", LLM, 9, 8, 1, {{0}}, 0, ASSIGN_TOO_BIG, {0}, NULL, false},
        {"the mesh's model goes, even when both would fit",
         LLM,
         2,
         8,
         2,
         {M("x", 'm', LLM, true, 2, 5)},
         1,
         ASSIGN_OK,
         {ASSIGN_GO_MESH},
         NULL,
         false},
        {"a --model one stays when there is room",
         LLM,
         2,
         8,
         2,
         {M("p", 'p', LLM, true, 2, 5)},
         1,
         ASSIGN_OK,
         {ASSIGN_KEEP},
         NULL,
         false},
        {"a --model one goes for the only slot",
         LLM,
         2,
         8,
         1,
         {M("p", 'p', LLM, true, 2, 5)},
         1,
         ASSIGN_OK,
         {ASSIGN_GO_SLOT},
         NULL,
         false},
        {"another type's slot is no conflict",
         LLM,
         2,
         8,
         1,
         {M("e", 'p', EMB, true, 1, 5)},
         1,
         ASSIGN_OK,
         {ASSIGN_KEEP},
         NULL,
         false},
        {"memory: the least recently used --model one goes",
         LLM,
         5,
         8,
         3,
         {M("old", 'p', LLM, true, 2, 1), M("new", 'p', LLM, true, 2, 9)},
         2,
         ASSIGN_OK,
         {ASSIGN_GO_MEMORY, ASSIGN_KEEP},
         NULL,
         false},
        {"memory from another type when needed",
         LLM,
         7,
         8,
         1,
         {M("e", 'p', EMB, true, 2, 9)},
         1,
         ASSIGN_OK,
         {ASSIGN_GO_MEMORY},
         NULL,
         false},
        {"an unloaded --model one holds nothing: it stays",
         LLM,
         2,
         8,
         1,
         {M("p", 'p', LLM, false, 0, 5)},
         1,
         ASSIGN_OK,
         {ASSIGN_KEEP},
         NULL,
         false},
        {"an assigned one never goes: conflict on the slot",
         LLM,
         2,
         8,
         1,
         {M("a", 'a', LLM, true, 2, 5), M("x", 'm', LLM, true, 2, 1)},
         2,
         ASSIGN_CONFLICT,
         {0},
         "a",
         false},
        {"an assigned one never goes: conflict on memory",
         LLM,
         5,
         8,
         2,
         {M("a", 'a', LLM, true, 4, 5)},
         1,
         ASSIGN_CONFLICT,
         {0},
         "a",
         false},
        {"two assignments side by side",
         LLM,
         2,
         8,
         2,
         {M("a", 'a', LLM, true, 2, 5), M("p", 'p', LLM, true, 2, 1)},
         2,
         ASSIGN_OK,
         {ASSIGN_KEEP, ASSIGN_GO_SLOT},
         NULL,
         false},
        {"already assigned: nothing changes",
         LLM,
         2,
         8,
         1,
         {M("x", 'm', LLM, true, 2, 5), M("t", 'a', LLM, true, 2, 5)},
         2,
         ASSIGN_ALREADY,
         {0},
         NULL,
         true},
        {"the model the mesh gave it becomes assigned; its own memory is no conflict",
         LLM,
         6,
         8,
         1,
         {M("t", 'm', LLM, true, 6, 5)},
         1,
         ASSIGN_OK,
         {ASSIGN_KEEP},
         NULL,
         true},
        {"a --model one becomes assigned; the mesh's other goes",
         LLM,
         2,
         8,
         2,
         {M("t", 'p', LLM, true, 2, 5), M("x", 'm', LLM, true, 2, 5)},
         2,
         ASSIGN_OK,
         {ASSIGN_KEEP, ASSIGN_GO_MESH},
         NULL,
         true},
        {"a split worker's share is memory",
         LLM,
         5,
         8,
         1,
         {M("w", 'p', LLM, false, 4, 5)},
         1,
         ASSIGN_OK,
         {ASSIGN_GO_MEMORY},
         NULL,
         false},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const row_t *w = &rows[r];
        assign_input_t in = {.model = "t",
                             .type = w->type,
                             .need_bytes = w->need * GB,
                             .offer_bytes = w->offer * GB,
                             .slots = w->slots,
                             .planned = w->planned,
                             .n_planned = w->n};
        assign_result_t out;
        assign_decide(&in, &out);
        if (out.verdict != w->verdict)
            fail_msg("%s: verdict %s, want %s", w->what, assign_verdict_name(out.verdict),
                     assign_verdict_name(w->verdict));
        if (out.already_planned != w->already) fail_msg("%s: already_planned", w->what);
        for (size_t i = 0; i < w->n; i++)
            if (out.go[i] != w->go[i])
                fail_msg("%s: %s %s, want %s", w->what, w->planned[i].name,
                         assign_go_name(out.go[i]), assign_go_name(w->go[i]));
        if (w->in_the_way && strcmp(w->planned[out.in_the_way].name, w->in_the_way) != 0)
            fail_msg("%s: in the way %s", w->what, w->planned[out.in_the_way].name);
    }
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(assign_go_name(ASSIGN_GO_MESH), "given_by_the_mesh");
    assert_string_equal(assign_verdict_name(ASSIGN_CONFLICT), "conflict");
    assert_string_equal(assign_go_name((assign_go_t)99), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assign_table),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

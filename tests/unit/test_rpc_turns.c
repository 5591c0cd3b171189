/* Unit tests for request/response turn counting (src/core/rpc_turns.h), pure: a table of
 * byte chunks as the host-side relay sees them, and the turns they must count. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "rpc_turns.h"

#define W RPC_DIR_TO_WORKER
#define H RPC_DIR_TO_HOST

typedef struct {
    const char *what;
    struct {
        rpc_dir_t d;
        size_t n;
    } chunks[12];
    int turns;
} turn_case_t;

static const turn_case_t CASES[] = {
    {"nothing", {{0}}, 0},
    {"commands without a reply (set-tensor, graph-compute)", {{W, 9}, {W, 4096}, {W, 100}}, 0},
    {"one command and its reply", {{W, 33}, {H, 16}}, 1},
    {"a reply in several chunks counts once", {{W, 33}, {H, 8}, {H, 65536}, {H, 100}}, 1},
    {"a decode step: set inputs, compute, get output",
     {{W, 500}, {W, 4000}, {W, 40}, {H, 8}, {H, 6656}},
     1},
    {"three steps", {{W, 1}, {H, 1}, {W, 1}, {H, 1}, {W, 1}, {H, 1}}, 3},
    {"bytes from the worker before any request", {{H, 10}, {H, 5}, {W, 3}}, 0},
    {"empty chunks change nothing", {{W, 10}, {H, 0}, {W, 0}, {H, 4}, {W, 0}, {H, 0}}, 1},
    {"an unknown direction changes nothing", {{W, 10}, {RPC_DIR_NONE, 5}, {H, 4}}, 1},
};

static void test_turn_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        rpc_turns_t t = {0};
        int turns = 0;
        for (size_t k = 0; k < 12; k++) {
            const turn_case_t *c = &CASES[i];
            if (c->chunks[k].d == RPC_DIR_NONE && c->chunks[k].n == 0) break;
            turns += rpc_turns_note(&t, c->chunks[k].d, c->chunks[k].n);
        }
        if (turns != CASES[i].turns)
            fail_msg("%s: %d turns, want %d", CASES[i].what, turns, CASES[i].turns);
    }
}

static void test_turn_null(void **state)
{
    (void)state;
    assert_false(rpc_turns_note(NULL, W, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_turn_table),
        cmocka_unit_test(test_turn_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

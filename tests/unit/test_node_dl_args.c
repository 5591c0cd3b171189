/* Unit tests for the --model REFs taken off the command line (src/node/node_dl.h
 * node_dl_args_t): they land in the object the caller owns, not in process state, so a second
 * command line fills a second object and leaves the first as it was. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "node_dl.h"

#define URL_A "https://example.invalid/m/alpha-Q4_K_M.gguf"
#define URL_B "https://example.invalid/m/beta-Q4_K_M.gguf"

static void test_refs_go_to_the_callers_object(void **state)
{
    (void)state;
    char *argv1[] = {
        "mesh-llm", "--models-dir", "/nonexistent/h-stat", "--model", URL_A, "--port", "9999",
        NULL};
    int argc1 = 7;
    node_dl_args_t a;
    assert_int_equal(node_dl_take_args(&a, &argc1, argv1), 1);
    assert_int_equal(argc1, 5); /* --model URL_A is gone; the rest stays in order */
    assert_string_equal(argv1[3], "--port");
    assert_null(argv1[5]);
    const char *const *refs;
    assert_int_equal(node_dl_pending(&a, &refs), 1);
    assert_string_equal(refs[0], URL_A);

    char *argv2[] = {"mesh-llm", "--models-dir", "/nonexistent/h-stat", "-m", URL_B, NULL};
    int argc2 = 5;
    node_dl_args_t b;
    assert_int_equal(node_dl_take_args(&b, &argc2, argv2), 1);
    assert_int_equal(node_dl_pending(&b, &refs), 1);
    assert_string_equal(refs[0], URL_B);
    /* the first object still holds its own reference only */
    assert_int_equal(node_dl_pending(&a, &refs), 1);
    assert_string_equal(refs[0], URL_A);
    assert_int_equal(a.n_present, 0);
}

static void test_local_models_are_not_taken(void **state)
{
    (void)state;
    char *argv[] = {"mesh-llm", "--model", "/some/local/file.gguf", NULL};
    int argc = 3;
    node_dl_args_t a;
    assert_int_equal(node_dl_take_args(&a, &argc, argv), 0);
    assert_int_equal(argc, 3);
    assert_int_equal(node_dl_pending(&a, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refs_go_to_the_callers_object),
        cmocka_unit_test(test_local_models_are_not_taken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

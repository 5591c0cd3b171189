/* Unit tests for the serving features (src/core/serve_opts.h): the llama-server arguments of a
 * draft model and a vision projector, the catalog's draft pairings, which draft a model gets. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_opts.h"
#include "util.h"

static char **split(const buf_t *b)
{
    char **v = NULL;
    char *s = strndup(b->data ? b->data : "", b->len);
    assert_true(argv_split(s, &v) >= 0);
    free(s);
    return v;
}

static void test_args(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 1 << 12);
    serve_opts_t none = {0};
    assert_int_equal(serve_opts_args(&none, &b), 0);
    assert_int_equal(b.len, 0);

    /* paths with spaces, quotes, backslashes and a '$' come back unchanged from argv_split */
    const char *draft = "/m/my draft's \"x\"\\$.gguf", *mmproj = "/m/proj ection.gguf";
    serve_opts_t o = {.draft = draft, .mmproj = mmproj};
    assert_int_equal(serve_opts_args(&o, &b), 0);
    char **v = split(&b);
    const char *want[] = {"--model-draft",      draft,  "--spec-type",        "draft-simple",
                          "--spec-draft-n-max", "16",   "--spec-draft-n-min", "0",
                          "--spec-draft-p-min", "0.75", "--mmproj",           mmproj};
    size_t n = 0;
    while (v[n])
        n++;
    assert_int_equal(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(v[i], want[i]);
    argv_free(v);

    /* jinja alone */
    buf_reset(&b);
    serve_opts_t j = {.jinja = true};
    assert_int_equal(serve_opts_args(&j, &b), 0);
    assert_int_equal(b.len, strlen("--jinja"));
    assert_memory_equal(b.data, "--jinja", b.len);

    /* mmproj alone */
    buf_reset(&b);
    serve_opts_t p = {.mmproj = "/a/b.gguf"};
    assert_int_equal(serve_opts_args(&p, &b), 0);
    assert_int_equal(b.len, strlen("--mmproj /a/b.gguf"));
    assert_memory_equal(b.data, "--mmproj /a/b.gguf", b.len);
    buf_free(&b);

    /* the buffer's cap is respected */
    buf_init(&b, 20);
    assert_int_equal(serve_opts_args(&o, &b), -E2BIG);
    buf_free(&b);
}

static void test_draft_placement(void **state)
{
    (void)state;
    /* a split host's draft stays on its CPU; solo, llama.cpp places it; no draft, nothing */
    const struct {
        bool draft, split;
        const char *want;
    } rows[] = {
        {true, true, "--spec-draft-device none --spec-draft-ngl 0"},
        {true, false, ""},
        {false, true, ""},
        {false, false, ""},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        assert_string_equal(serve_draft_placement(rows[i].draft, rows[i].split), rows[i].want);
    /* the words llama.cpp's common/arg.cpp reads: a device list "none" and a layer count */
    char **v = NULL;
    char *s = strdup(serve_draft_placement(true, true));
    assert_true(argv_split(s, &v) >= 0);
    free(s);
    const char *want[] = {"--spec-draft-device", "none", "--spec-draft-ngl", "0", NULL};
    for (size_t i = 0; i < 5; i++) {
        if (!want[i]) {
            assert_null(v[i]);
            break;
        }
        assert_string_equal(v[i], want[i]);
    }
    argv_free(v);
}

static void test_catalog_draft(void **state)
{
    (void)state;
    /* the 1.5B and 7B Qwen models draft with the 0.5B one (file names, any directory, any
     * case) */
    assert_string_equal(serve_catalog_draft("/x/y/qwen2.5-1.5b-instruct-q4_k_m.gguf"),
                        "qwen2.5-0.5b-instruct-q4_k_m.gguf");
    assert_string_equal(serve_catalog_draft("Qwen2.5-1.5B-Instruct-Q4_K_M.gguf"),
                        "qwen2.5-0.5b-instruct-q4_k_m.gguf");
    assert_string_equal(serve_catalog_draft("SmolLM2-1.7B-Instruct-Q4_K_M.gguf"),
                        "SmolLM2-360M-Instruct-Q4_K_M.gguf");
    /* the smallest has none; unknown files have none */
    assert_null(serve_catalog_draft("/m/qwen2.5-0.5b-instruct-q4_k_m.gguf"));
    assert_null(serve_catalog_draft("/m/stories260K.gguf"));
    assert_null(serve_catalog_draft(""));
}

static void test_pick_draft(void **state)
{
    (void)state;
    /* explicit wins over the catalog; --no-draft and non-llm models get none */
    assert_string_equal(serve_pick_draft(true, false, "/d.gguf", "/c.gguf", "/t.gguf"), "/d.gguf");
    assert_string_equal(serve_pick_draft(true, false, NULL, "/c.gguf", "/t.gguf"), "/c.gguf");
    assert_null(serve_pick_draft(true, false, NULL, NULL, "/t.gguf"));
    assert_null(serve_pick_draft(true, true, "/d.gguf", "/c.gguf", "/t.gguf"));
    assert_null(serve_pick_draft(false, false, "/d.gguf", "/c.gguf", "/t.gguf"));
    /* never the target itself */
    assert_null(serve_pick_draft(true, false, "/t.gguf", NULL, "/t.gguf"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_draft_placement),
        cmocka_unit_test(test_catalog_draft),
        cmocka_unit_test(test_pick_draft),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

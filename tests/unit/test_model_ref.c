/* Unit tests for model references and the shipped catalog (src/core/model_ref.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "model_ref.h"

static model_ref_t parse_ok(const char *s)
{
    model_ref_t r;
    char err[256] = "";
    int rc = model_ref_parse(s, &r, err, sizeof err);
    if (rc) fail_msg("%s: %s", s, err);
    return r;
}

static void parse_bad(const char *s, const char *msg_part)
{
    model_ref_t r;
    char err[512] = "";
    assert_int_equal(model_ref_parse(s, &r, err, sizeof err), -EINVAL);
    if (!strstr(err, msg_part)) fail_msg("%s: error '%s' lacks '%s'", s, err, msg_part);
}

static void test_paths_and_names(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("/models/x.gguf").kind, MODEL_REF_PATH);
    assert_int_equal(parse_ok("./x.gguf").kind, MODEL_REF_PATH);
    assert_int_equal(parse_ok("~/.models/x.gguf").kind, MODEL_REF_PATH);
    assert_int_equal(parse_ok("dir/x.gguf").kind, MODEL_REF_PATH);
    assert_int_equal(parse_ok("x.gguf").kind, MODEL_REF_PATH);
    assert_int_equal(parse_ok("a/b/c").kind, MODEL_REF_PATH);
    assert_int_equal(parse_ok("stories260K").kind, MODEL_REF_NAME);
    assert_false(model_ref_remote(&(model_ref_t){.kind = MODEL_REF_NAME}));
}

static void test_catalog_name(void **state)
{
    (void)state;
    model_ref_t r = parse_ok("qwen2.5-0.5b-instruct-q4_k_m");
    assert_int_equal(r.kind, MODEL_REF_CATALOG);
    assert_string_equal(r.repo, "Qwen/Qwen2.5-0.5B-Instruct-GGUF");
    assert_string_equal(r.file, "qwen2.5-0.5b-instruct-q4_k_m.gguf");
    assert_ptr_equal(r.known, known_model_default());
    assert_true(model_ref_remote(&r));
}

static void test_hf_file(void **state)
{
    (void)state;
    model_ref_t r = parse_ok("hf://org/repo-GGUF/stories260K.gguf");
    assert_int_equal(r.kind, MODEL_REF_HF_FILE);
    assert_string_equal(r.repo, "org/repo-GGUF");
    assert_string_equal(r.file, "stories260K.gguf");
    assert_string_equal(r.rev, "main");
    r = parse_ok("hf://o/r/sub/dir/m-Q8_0.gguf@v1.2");
    assert_string_equal(r.file, "sub/dir/m-Q8_0.gguf");
    assert_string_equal(r.rev, "v1.2");
    parse_bad("hf://o/r", "hf://ORG/REPO/FILE.gguf");
    parse_bad("hf://o/r/x.bin", "hf://ORG/REPO/FILE.gguf");
    parse_bad("hf://o/r/../x.gguf", "hf://ORG/REPO/FILE.gguf");
    parse_bad("hf://o/r/a//x.gguf", "hf://ORG/REPO/FILE.gguf");
    parse_bad("hf://o/../x.gguf", "hf://ORG/REPO/FILE.gguf");
    parse_bad("hf://o/r/x.gguf@", "hf://ORG/REPO/FILE.gguf");
    parse_bad("hf://o/r/x.gguf@a/b", "hf://ORG/REPO/FILE.gguf");
    parse_bad("hf://o/r/x%2e.gguf", "hf://ORG/REPO/FILE.gguf");
}

static void test_hf_quant(void **state)
{
    (void)state;
    model_ref_t r = parse_ok("bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M");
    assert_int_equal(r.kind, MODEL_REF_HF_QUANT);
    assert_string_equal(r.repo, "bartowski/Llama-3.2-1B-Instruct-GGUF");
    assert_string_equal(r.quant, "Q4_K_M");
    r = parse_ok("org/repo");
    assert_int_equal(r.kind, MODEL_REF_HF_QUANT);
    assert_string_equal(r.quant, "Q4_K_M");
    parse_bad("org/repo:", "ORG/REPO:QUANT");
    parse_bad("org/re po:Q8_0", "ORG/REPO:QUANT");
    parse_bad("org/..:Q8_0", "ORG/REPO:QUANT");
}

static void test_url(void **state)
{
    (void)state;
    model_ref_t r = parse_ok("https://example.com/a/b/model-Q8_0.gguf?download=true");
    assert_int_equal(r.kind, MODEL_REF_URL);
    assert_string_equal(r.file, "model-Q8_0.gguf");
    parse_bad("https://example.com/", "must name a .gguf");
    parse_bad("https://example.com/x.bin", "must name a .gguf");
    parse_bad("https://", "not a valid URL");
    parse_bad("https://h/.gguf", "must name a .gguf");
}

static void test_split_names(void **state)
{
    (void)state;
    unsigned i, n;
    size_t stem;
    assert_true(model_ref_split("m-q4_k_m-00002-of-00003.gguf", &i, &n, &stem));
    assert_int_equal(i, 2);
    assert_int_equal(n, 3);
    assert_int_equal(stem, strlen("m-q4_k_m"));
    assert_false(model_ref_split("m.gguf", &i, &n, &stem));
    assert_false(model_ref_split("m-00004-of-00003.gguf", &i, &n, &stem));
    assert_false(model_ref_split("m-00000-of-00003.gguf", &i, &n, &stem));
    assert_false(model_ref_split("-00001-of-00003.gguf", &i, &n, &stem));
    char out[128];
    assert_int_equal(model_ref_split_part("dir/m-00001-of-00003.gguf", 3, out, sizeof out), 0);
    assert_string_equal(out, "dir/m-00003-of-00003.gguf");
    assert_int_equal(model_ref_split_part("m-00001-of-00003.gguf", 4, out, sizeof out), -EINVAL);
    assert_int_equal(model_ref_split_part("m.gguf", 1, out, sizeof out), -EINVAL);
}

static void test_urls_and_quant_pick(void **state)
{
    (void)state;
    char url[256];
    assert_int_equal(
        model_ref_hf_url("http://127.0.0.1:5/", "o/r", "main", "x.gguf", url, sizeof url), 0);
    assert_string_equal(url, "http://127.0.0.1:5/o/r/resolve/main/x.gguf");
    assert_int_equal(model_ref_hf_url("http://h", "o/r", "main", "x.gguf", url, 10), -ENAMETOOLONG);
    const char *files[] = {"README.md",
                           "m-Q4_K_S.gguf",
                           "mmproj-Q4_K_M.gguf",
                           "big/m-Q4_K_M-00002-of-00002.gguf",
                           "big/m-Q4_K_M-00001-of-00002.gguf",
                           "m-Q4_K_M.gguf",
                           "m-Q8_0.gguf"};
    assert_int_equal(model_ref_pick_quant(files, 7, "q4_k_m"), 5);
    assert_int_equal(model_ref_pick_quant(files, 7, "Q8_0"), 6);
    assert_int_equal(model_ref_pick_quant(files, 7, "Q4_K"), -1);
    assert_int_equal(model_ref_pick_quant(files, 7, "Q2_K"), -1);
    assert_int_equal(model_ref_pick_quant(files + 3, 2, "Q4_K_M"), 1);
}

static void test_hf_file_with_projector(void **state)
{
    (void)state;
    static const struct {
        const char *ref, *file, *rev, *mmproj;
    } ok[] = {
        {"hf://o/r/m-Q8_0.gguf?mmproj=mmproj-m-f16.gguf", "m-Q8_0.gguf", "main",
         "mmproj-m-f16.gguf"},
        {"hf://o/r/m.gguf", "m.gguf", "main", ""},
        {"hf://o/r/sub/m.gguf@v2?mmproj=sub/mmproj-F16.gguf", "sub/m.gguf", "v2",
         "sub/mmproj-F16.gguf"},
    };
    model_ref_t r;
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        r = parse_ok(ok[i].ref);
        assert_int_equal(r.kind, MODEL_REF_HF_FILE);
        assert_string_equal(r.file, ok[i].file);
        assert_string_equal(r.rev, ok[i].rev);
        assert_string_equal(r.mmproj, ok[i].mmproj);
    }
    /* table: what a projector may not be */
    static const char *const bad[] = {
        "hf://o/r/m.gguf?mmproj=",
        "hf://o/r/m.gguf?mmproj=p.bin",
        "hf://o/r/m.gguf?mmproj=../p.gguf",
        "hf://o/r/m.gguf?mmproj=/p.gguf",
        "hf://o/r/m.gguf?proj=p.gguf",
        "hf://o/r/m.gguf?mmproj=m.gguf",
        "hf://o/r/m.gguf?mmproj=a?b.gguf",
        "hf://o/r/mmproj-x.gguf?mmproj=p.gguf",
        "hf://o/r/m.gguf?mmproj=p%2e.gguf",
        "hf://o/r/m.gguf?mmproj=a//p.gguf",
        "hf://o/r/m.gguf?mmproj=p.gguf@main",
        "hf://o/r/m.gguf?mmproj=p gguf.gguf",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        parse_bad(bad[i], "?mmproj=PROJECTOR.gguf");
    char out[600];
    assert_int_equal(model_ref_source(&r, r.mmproj, out, sizeof out), 0);
    assert_string_equal(out, "hf://o/r/sub/mmproj-F16.gguf@v2");
    /* the catalog's vision model brings its projector */
    const known_model_t *k = known_model_find("SmolVLM-256M-Instruct-Q8_0");
    assert_non_null(k);
    r = parse_ok("SmolVLM-256M-Instruct-Q8_0");
    assert_string_equal(r.mmproj, k->mmproj);
    assert_true(known_model_matches(k, "vision"));
    assert_false(known_model_matches(known_model_default(), "vision"));
    assert_string_equal(parse_ok(known_model_default()->name).mmproj, "");
}

static void test_mmproj_pick_and_names(void **state)
{
    (void)state;
    static const char *const files[] = {
        "README.md",                   /* 0 */
        "m-Q4_K_M.gguf",               /* 1 */
        "m-Q8_0.gguf",                 /* 2 */
        "mmproj-m-F32.gguf",           /* 3 */
        "mmproj-m-f16.gguf",           /* 4 */
        "mmproj-m-Q8_0.gguf",          /* 5 */
        "sub/mmproj-m-Q4_K_M.gguf",    /* 6: another folder */
        "MMPROJ-m-bf16.gguf",          /* 7 */
        "mmproj-m-Q4_K_M.gguf.sha256", /* 8: not a gguf */
        "big/m-00001-of-00002.gguf",   /* 9 */
        "big/mmproj-big.gguf",         /* 10 */
    };
    const size_t n = sizeof files / sizeof *files;
    struct {
        const char *model, *quant;
        int want;
    } t[] = {
        {"m-Q8_0.gguf", "Q8_0", 5},     /* the model's own quantization */
        {"m-Q4_K_M.gguf", "Q4_K_M", 4}, /* none of that quant here: F16 */
        {"m-Q4_K_M.gguf", NULL, 4},
        {"sub/m-Q4_K_M.gguf", "Q4_K_M", 6},
        {"big/m-00001-of-00002.gguf", "Q2_K", 10},
        {"other/m.gguf", "Q8_0", -1},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        assert_int_equal(model_ref_pick_mmproj(files, n, t[i].model, t[i].quant), t[i].want);
    static const char *const pref[] = {"mmproj-x.gguf", "mmproj-Q8_0.gguf", "mmproj-F32.gguf",
                                       "mmproj-BF16.gguf"};
    assert_int_equal(model_ref_pick_mmproj(pref, 4, "x-Q4_0.gguf", "Q4_0"), 3);
    assert_int_equal(model_ref_pick_mmproj(pref, 3, "x-Q4_0.gguf", "Q4_0"), 2);
    assert_int_equal(model_ref_pick_mmproj(pref, 2, "x-Q4_0.gguf", "Q4_0"), 1);
    assert_int_equal(model_ref_pick_mmproj(pref, 1, "x-Q4_0.gguf", "Q4_0"), 0);
    /* the model pick never takes a projector */
    assert_int_equal(model_ref_pick_quant(files, n, "Q8_0"), 2);

    assert_true(model_ref_is_mmproj("mmproj-F16.gguf"));
    assert_true(model_ref_is_mmproj("dir/MMPROJ.GGUF"));
    assert_false(model_ref_is_mmproj("m-mmproj.gguf"));
    assert_false(model_ref_is_mmproj("mmproj-F16.bin"));
    char out[64];
    struct {
        const char *model, *want;
        int rc;
    } l[] = {
        {"SmolVLM-Q8_0.gguf", "mmproj-SmolVLM-Q8_0.gguf", 0},
        {"/x/y/stories260K.gguf", "mmproj-stories260K.gguf", 0},
        {"big/q-00001-of-00003.gguf", "mmproj-q.gguf", 0},
        {"mmproj-a.gguf", NULL, -EINVAL},
        {".gguf", NULL, -EINVAL},
        {"a.bin", NULL, -EINVAL},
        {"a-very-long-name-that-does-not-fit-in-the-buffer-given.gguf", NULL, -ENAMETOOLONG},
    };
    for (size_t i = 0; i < sizeof l / sizeof *l; i++) {
        assert_int_equal(model_ref_mmproj_local(l[i].model, out, sizeof out), l[i].rc);
        if (l[i].want) assert_string_equal(out, l[i].want);
    }
}

static void test_catalog_is_sane(void **state)
{
    (void)state;
    assert_true(known_models_n >= 10);
    for (size_t i = 0; i < known_models_n; i++) {
        const known_model_t *m = &known_models[i];
        model_ref_t r;
        char err[256];
        assert_int_equal(model_ref_parse(m->name, &r, err, sizeof err), 0);
        assert_ptr_equal(r.known, m);
        assert_true(m->size > 10000000);
        assert_true(m->min_memory > m->size);
        assert_true(m->sha256[0] == 0 || model_ref_is_sha256(m->sha256));
        if (m->draft) assert_non_null(known_model_find(m->draft));
        if (m->mmproj) {
            assert_true(model_ref_is_mmproj(m->mmproj) && strcmp(m->mmproj, m->file) != 0);
            assert_int_equal(model_ref_mmproj_local(m->file, r.mmproj, sizeof r.mmproj), 0);
        }
        assert_true(strchr(m->repo, '/') != NULL);
    }
    assert_true(known_model_matches(known_model_find("bge-reranker-v2-m3-Q4_K_M"), "RERANKER"));
    assert_false(known_model_matches(known_model_default(), "llama"));
    assert_true(
        model_ref_is_sha256("270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"));
    assert_false(model_ref_is_sha256("\"270cba\""));
}

static void test_source(void **state)
{
    (void)state;
    char out[600];
    model_ref_t a = parse_ok("hf://org1/r/a.gguf"), b = parse_ok("hf://org2/r/a.gguf");
    assert_int_equal(model_ref_source(&a, NULL, out, sizeof out), 0);
    assert_string_equal(out, "hf://org1/r/a.gguf");
    assert_int_equal(model_ref_source(&b, NULL, out, sizeof out), 0);
    assert_string_equal(out, "hf://org2/r/a.gguf");
    model_ref_t u = parse_ok("https://example.com/a/b/m-00001-of-00002.gguf?download=true");
    assert_int_equal(model_ref_source(&u, NULL, out, sizeof out), 0);
    assert_string_equal(out, "https://example.com/a/b/m-00001-of-00002.gguf");
    assert_int_equal(model_ref_source(&u, "m-00002-of-00002.gguf", out, sizeof out), 0);
    assert_string_equal(out, "https://example.com/a/b/m-00002-of-00002.gguf");
    assert_int_equal(model_ref_source(&a, NULL, out, 8), -ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_and_names),
        cmocka_unit_test(test_catalog_name),
        cmocka_unit_test(test_hf_file),
        cmocka_unit_test(test_hf_quant),
        cmocka_unit_test(test_url),
        cmocka_unit_test(test_split_names),
        cmocka_unit_test(test_urls_and_quant_pick),
        cmocka_unit_test(test_hf_file_with_projector),
        cmocka_unit_test(test_mmproj_pick_and_names),
        cmocka_unit_test(test_catalog_is_sane),
        cmocka_unit_test(test_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

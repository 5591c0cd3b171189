/* Unit tests for src/core/llama_args.h: which llama-server flags a request (allowlist) and the
 * operator (node-managed flags refused) may pass. Table-driven: each row is an args string, who
 * gives it, the expected result and either the normalized string handed to llama-server or a
 * word the error message must contain (the offending flag or value). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_args.h"
#include "util.h"

typedef struct {
    const char *args;
    llama_args_trust_t trust;
    int rc;
    const char *expect; /* rc 0: the normalized args; else a substring of the error */
} row_t;

#define C LLAMA_ARGS_CLIENT
#define O LLAMA_ARGS_OPERATOR

static const row_t ROWS[] = {
    /* tuning flags a client may set, short and long spellings */
    {"", C, 0, ""},
    {"   ", C, 0, ""},
    {"-c 512", C, 0, "-c 512"},
    {"--ctx-size 512 -b 64 -ub 32", C, 0, "--ctx-size 512 -b 64 -ub 32"},
    {"--parallel 2", C, 0, "--parallel 2"},
    {"-np 4 -t 2 -tb 2", C, 0, "-np 4 -t 2 -tb 2"},
    {"--threads -1", C, 0, "--threads -1"},
    {"-ctk q8_0 --cache-type-v f16", C, 0, "-ctk q8_0 --cache-type-v f16"},
    {"-fa on", C, 0, "-fa on"},
    {"--flash-attn auto", C, 0, "--flash-attn auto"},
    {"-ngl 99", C, 0, "-ngl 99"},
    {"--n-gpu-layers all", C, 0, "--n-gpu-layers all"},
    {"--gpu-layers auto", C, 0, "--gpu-layers auto"},
    {"--temp 0.5 --top-k 40 --top-p 0.9 --min-p 0.05", C, 0,
     "--temp 0.5 --top-k 40 --top-p 0.9 --min-p 0.05"},
    {"--repeat-penalty 1.1 --presence-penalty 0 --frequency-penalty -0.5", C, 0,
     "--repeat-penalty 1.1 --presence-penalty 0 --frequency-penalty -0.5"},
    {"-s 42 -n 128", C, 0, "-s 42 -n 128"},
    {"--seed -1", C, 0, "--seed -1"},
    {"--seed 4294967295", C, 0, "--seed 4294967295"},
    {"--rope-scaling yarn --rope-scale 2 --yarn-orig-ctx 4096 --rope-freq-base 1e4", C, 0,
     "--rope-scaling yarn --rope-scale 2 --yarn-orig-ctx 4096 --rope-freq-base 1e4"},
    /* the draft length of speculative decoding (--draft); never where the draft runs */
    {"--spec-draft-n-max 32 --spec-draft-n-min 4 --draft-p-min 0.5", C, 0,
     "--spec-draft-n-max 32 --spec-draft-n-min 4 --draft-p-min 0.5"},
    {"--spec-draft-n-max lots", C, -EINVAL, "--spec-draft-n-max"},
    {"--spec-draft-device RPC0", C, -EPERM, "--spec-draft-device"},
    {"-ngld 99", C, -EPERM, "-ngld"},
    {"--load-mode mlock", C, 0, "--load-mode mlock"},
    {"-lm mmap+mlock", C, 0, "-lm mmap+mlock"},
    {"--no-warmup --swa-full --no-context-shift -nkvo", C, 0,
     "--no-warmup --swa-full --no-context-shift -nkvo"},
    {"--cont-batching --no-cont-batching -kvu", C, 0, "--cont-batching --no-cont-batching -kvu"},
    /* --flag=value is rewritten (llama-server does not understand '='); underscores fold */
    {"--ctx-size=512", C, 0, "--ctx-size 512"},
    {"-c=256", C, 0, "-c 256"},
    {"--temp=0.7 --top_k=20", C, 0, "--temp 0.7 --top-k 20"},
    {"--ctx_size 128", C, 0, "--ctx-size 128"},
    /* text values keep their content, quoted for the child's argv_split */
    {"--samplers 'top_k;temp'", C, 0, "--samplers \"top_k;temp\""},
    {"--chat-template chatml", C, 0, "--chat-template chatml"},
    {"--chat-template \"{{ a }} \\\"b\\\"\"", C, 0, "--chat-template \"{{ a }} \\\"b\\\"\""},
    {"--grammar ''", C, 0, "--grammar \"\""},
    {"-r --log-file", C, 0, "-r --log-file"}, /* a value, as llama-server reads it too */

    /* files, directories, URLs, network addresses: never from a request */
    {"--log-file /tmp/x", C, -EPERM, "--log-file"},
    {"--log-file=/tmp/x", C, -EPERM, "--log-file"},
    {"--log_file /tmp/x", C, -EPERM, "--log-file"},
    {"--path /", C, -EPERM, "--path"},
    {"--lora /etc/passwd", C, -EPERM, "--lora"},
    {"--lora-scaled a:1", C, -EPERM, "--lora-scaled"},
    {"-hf user/model", C, -EPERM, "-hf"},
    {"--hf-repo user/model", C, -EPERM, "--hf-repo"},
    {"-hfd user/model", C, -EPERM, "-hfd"},
    {"--hf-repo-draft user/model", C, -EPERM, "--hf-repo-draft"},
    {"-md /x.gguf", C, -EPERM, "-md"},
    {"--model-draft /x.gguf", C, -EPERM, "--model-draft"},
    {"-dr ai/smollm2", C, -EPERM, "-dr"},
    {"--mmproj-url http://x", C, -EPERM, "--mmproj-url"},
    {"-mm /x", C, -EPERM, "-mm"},
    {"--control-vector /x", C, -EPERM, "--control-vector"},
    {"--slot-save-path /tmp", C, -EPERM, "--slot-save-path"},
    {"--rpc 10.0.0.1:50052", C, -EPERM, "--rpc"},
    {"--chat-template-file /etc/shadow", C, -EPERM, "--chat-template-file"},
    {"--grammar-file /x", C, -EPERM, "--grammar-file"},
    {"-jf /x", C, -EPERM, "-jf"},
    {"--media-path /", C, -EPERM, "--media-path"},
    {"--log-prompts-dir /tmp", C, -EPERM, "--log-prompts-dir"},
    {"-lcs /x", C, -EPERM, "-lcs"},
    {"--mcp-servers-config /x", C, -EPERM, "--mcp-servers-config"},
    {"--tools all", C, -EPERM, "--tools"},
    {"--ui-config-file /x", C, -EPERM, "--ui-config-file"},
    {"--video-ffmpeg-dir /x", C, -EPERM, "--video-ffmpeg-dir"},
    {"--override-kv a=int:1", C, -EPERM, "--override-kv"},
    {"-ts 1,1", C, -EPERM, "-ts"},
    {"-c 512 --log-file /tmp/x", C, -EPERM, "--log-file"},
    {"--bogus", C, -EPERM, "--bogus"},
    /* what the node manages */
    {"--port 1", C, -EPERM, "the node manages it"},
    {"--port=1", C, -EPERM, "--port"},
    {"--host 0.0.0.0", C, -EPERM, "--host"},
    {"-m other.gguf", C, -EPERM, "-m"},
    {"--api-key k", C, -EPERM, "--api-key"},
    {"--api_key k", C, -EPERM, "--api-key"},
    {"--alias x", C, -EPERM, "--alias"},
    {"-a x", C, -EPERM, "-a"},
    /* values are checked: numbers are numbers, choices are choices */
    {"-c", C, -EINVAL, "-c needs a value"},
    {"-c abc", C, -EINVAL, "-c needs an integer"},
    /* numbers that decide memory are bounded (issue 33: -c 1000000000 kept a child allocating) */
    {"-c 1000000000", C, -EINVAL, "-c takes 0 to 16777216"},
    {"-c 16777216", C, 0, "-c 16777216"},
    {"-b 100000", C, -EINVAL, "-b takes 1 to 8192"},
    {"-ub 0", C, -EINVAL, "-ub takes 1 to 8192"},
    {"--parallel 1000", C, -EINVAL, "--parallel takes -1 to 64"},
    {"-cram -1", C, -EINVAL, "-cram takes 0 to 8192"},
    {"--ctx-checkpoints 100000", C, -EINVAL, "--ctx-checkpoints"},
    {"--spec-draft-n-max 100000", C, -EINVAL, "--spec-draft-n-max takes 0 to 64"},
    {"--threads 100000", C, -EINVAL, "--threads takes -1 to 1024"},
    {"--fit-ctx=99999999", C, -EINVAL, "--fit-ctx"},
    {"-c 12abc", C, -EINVAL, "'12abc'"},
    {"-c 99999999999", C, -EINVAL, "-c"},
    {"--ctx-size=", C, -EINVAL, "--ctx-size"},
    {"--temp hot", C, -EINVAL, "--temp needs a number"},
    {"--temp nan", C, -EINVAL, "--temp"},
    {"--temp inf", C, -EINVAL, "--temp"},
    {"--temp 0x10", C, -EINVAL, "--temp"},
    {"--temp 1e999", C, -EINVAL, "--temp"},
    {"--seed -2", C, -EINVAL, "--seed"},
    {"--seed 4294967296", C, -EINVAL, "--seed"},
    {"-ngl lots", C, -EINVAL, "-ngl"},
    {"-ctk q3_k", C, -EINVAL, "q8_0"},
    {"-fa maybe", C, -EINVAL, "-fa needs one of"},
    {"--rope-scaling cubic", C, -EINVAL, "--rope-scaling"},
    {"--load-mode /tmp", C, -EINVAL, "--load-mode"},
    {"--swa-full=1", C, -EINVAL, "takes no value"},
    {"512", C, -EINVAL, "'512'"},
    {"-c 512 extra", C, -EINVAL, "'extra'"},
    {"-", C, -EINVAL, "'-'"},
    {"--temp \"unbalanced", C, -EINVAL, "unbalanced quotes"},

    /* the operator: anything but the flags the node manages, passed on unchanged */
    {"--log-file /tmp/x --lora a.gguf -ngl 99", O, 0, "--log-file /tmp/x --lora a.gguf -ngl 99"},
    {"--bogus-one", O, 0, "--bogus-one"},
    {"--temp=0.5", O, 0, "--temp=0.5"},
    {"--port 1", O, -EPERM, "--llamacpp-args may not set --port"},
    {"--port=1", O, -EPERM, "--port"},
    {"-t 2 --host 0.0.0.0", O, -EPERM, "--host"},
    {"-m x.gguf", O, -EPERM, "-m"},
    {"--model x.gguf", O, -EPERM, "--model"},
    {"--alias y", O, -EPERM, "--alias"},
    {"--api-key k", O, -EPERM, "--api-key"},
    {"-hf a/b", O, -EPERM, "-hf"},
    {"--x \"unbalanced", O, -EINVAL, "unbalanced quotes"},
};

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const row_t *r = &ROWS[i];
        char err[512] = "";
        char *canon = (char *)"unset";
        int rc = llama_args_check(r->args, r->trust, &canon, err, sizeof err);
        if (rc != r->rc) fail_msg("row %zu '%s': rc %d, want %d (%s)", i, r->args, rc, r->rc, err);
        if (rc == 0) {
            assert_non_null(canon);
            if (strcmp(canon, r->expect) != 0)
                fail_msg("row %zu '%s': got '%s', want '%s'", i, r->args, canon, r->expect);
            free(canon);
        } else {
            assert_null(canon);
            if (!strstr(err, r->expect))
                fail_msg("row %zu '%s': error '%s' does not contain '%s'", i, r->args, err,
                         r->expect);
            /* an unbalanced quote is a syntax error, not a flag the node "manages" */
            if (strstr(r->expect, "unbalanced")) assert_null(strstr(err, "manages"));
        }
    }
}

/* The normalized string is what llama-server gets: splitting it again gives the same words. */
static void test_canonical_round_trip(void **state)
{
    (void)state;
    const char *in = "--chat-template '{% for m in messages %}\"x\\y\" {% endfor %}' --temp=1";
    char err[256], *canon = NULL;
    assert_int_equal(llama_args_check(in, C, &canon, err, sizeof err), 0);
    char **av;
    assert_int_equal(argv_split(canon, &av), 4);
    assert_string_equal(av[0], "--chat-template");
    assert_string_equal(av[1], "{% for m in messages %}\"x\\y\" {% endfor %}");
    assert_string_equal(av[2], "--temp");
    assert_string_equal(av[3], "1");
    argv_free(av);
    /* and it validates again to itself */
    char *again = NULL;
    assert_int_equal(llama_args_check(canon, C, &again, err, sizeof err), 0);
    assert_string_equal(again, canon);
    free(again);
    free(canon);
}

static void test_too_long(void **state)
{
    (void)state;
    size_t n = LLAMA_ARGS_MAX + 10;
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, ' ', n);
    memcpy(s, "--grammar ", 10);
    s[n] = '\0';
    char err[256];
    assert_int_equal(llama_args_check(s, C, NULL, err, sizeof err), -E2BIG);
    assert_int_equal(llama_args_check(s, O, NULL, err, sizeof err), -E2BIG);
    free(s);
}

static void test_control_characters_refused(void **state)
{
    (void)state;
    char err[256];
    assert_int_equal(llama_args_check("--samplers \"a\x01\"", C, NULL, err, sizeof err), -EINVAL);
    assert_int_equal(llama_args_check("--chat-template \"a\nb\"", C, NULL, err, sizeof err), 0);
}

static void test_is_managed(void **state)
{
    (void)state;
    assert_true(llama_args_is_managed("--port"));
    assert_true(llama_args_is_managed("--port=5"));
    assert_true(llama_args_is_managed("--api_key"));
    assert_true(llama_args_is_managed("-m"));
    assert_false(llama_args_is_managed("-mm"));
    assert_false(llama_args_is_managed("--ports"));
    assert_false(llama_args_is_managed("-c"));
}

static void test_sets(void **state)
{
    (void)state;
    static const struct {
        const char *args, *flag;
        bool sets;
    } T[] = {
        {NULL, "--cache-ram", false},
        {"", "--cache-ram", false},
        {"-c 512 -t 2", "--cache-ram", false},
        {"-c 512 --cache-ram 100", "--cache-ram", true},
        {"-cram 0", "--cache-ram", true},
        {"--cache_ram=-1", "--cache-ram", true},
        {"--cache-ram 0", "-cram", true},
        {"--cache-reuse 256", "--cache-ram", false},
        {"-c 512", "-c", true},
        {"--ctx-size 512", "-c", true},
        {"--cache-ram 0", "--not-a-flag", false},
        {"\"unbalanced", "--cache-ram", false},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (llama_args_sets(T[i].args, T[i].flag) != T[i].sets)
            fail_msg("[%s] sets %s: want %d", T[i].args ? T[i].args : "(null)", T[i].flag,
                     T[i].sets);
}

static void test_memory(void **state)
{
    (void)state;
    llama_mem_t m = LLAMA_MEM_INIT;
    llama_args_memory(NULL, &m);
    assert_false(m.has_ctx);
    assert_int_equal(m.k_x32, 64);
    assert_int_equal(llama_mem_ubatch(&m), 512);
    llama_args_memory("--temp 0.5 -c 4096 -ctk f32 --cache_type_v=q8_0 -ub 4096", &m);
    assert_true(m.has_ctx);
    assert_int_equal(m.ctx, 4096);
    assert_int_equal(m.k_x32, 128);
    assert_int_equal(m.v_x32, 34);
    assert_int_equal(llama_mem_ubatch(&m), 2048); /* at most -b, 2048 by default */
    /* a later set of args overrides (the last value wins, as in llama-server) */
    llama_args_memory("--ctx-size=0 -b 8192 -ctk q4_0", &m);
    assert_int_equal(m.ctx, 0);
    assert_int_equal(m.k_x32, 18);
    assert_int_equal(llama_mem_ubatch(&m), 4096);
    /* slots: -np N in any spelling; -1 (auto) is none */
    assert_int_equal(m.np, 0);
    llama_args_memory("-np 3", &m);
    assert_int_equal(m.np, 3);
    llama_args_memory("--parallel=8", &m);
    assert_int_equal(m.np, 8);
    llama_args_memory("--parallel -1", &m);
    assert_int_equal(m.np, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),      cmocka_unit_test(test_canonical_round_trip),
        cmocka_unit_test(test_too_long),   cmocka_unit_test(test_control_characters_refused),
        cmocka_unit_test(test_is_managed), cmocka_unit_test(test_sets),
        cmocka_unit_test(test_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

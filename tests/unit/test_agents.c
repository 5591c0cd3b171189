/* Unit tests for the coding-agent launchers' policy (src/core/agents.h): which model an agent
 * gets, and each agent's argv, environment and files. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents.h"

#define M(id, llm, ready, size, tools)                                                             \
    {                                                                                              \
        id, llm, ready, size, tools                                                                \
    }
#define U AGENT_TOOLS_UNKNOWN
#define Y AGENT_TOOLS_YES
#define N AGENT_TOOLS_NO

static void test_names(void **state)
{
    (void)state;
    agent_kind_t k;
    const char *names[] = {"claude", "codex", "opencode", "pi"};
    for (int i = 0; i < AGENT_N; i++) {
        const agent_info_t *a = agent_by_name(names[i], &k);
        assert_non_null(a);
        assert_int_equal(k, i);
        assert_ptr_equal(agent_info(k), a);
        assert_non_null(a->package);
    }
    assert_string_equal(agent_info(AGENT_OPENCODE)->package, "opencode-ai");
    assert_null(agent_by_name("goose", &k));
    assert_null(agent_by_name("", NULL));
    assert_null(agent_info(AGENT_N));
}

static void test_pick(void **state)
{
    (void)state;
    struct {
        const char *what;
        agent_model_t m[4];
        size_t n;
        const char *want;
        int expect;
    } rows[] = {
        {"nothing listed", {{0}}, 0, NULL, -ENOENT},
        {"no llm", {M("emb", false, true, 9, U)}, 1, NULL, -ENOENT},
        {"the one llm", {M("emb", false, true, 9, U), M("a", true, false, 1, U)}, 2, NULL, 1},
        {"ready before bigger",
         {M("big", true, false, 900, Y), M("small", true, true, 10, U)},
         2,
         NULL,
         1},
        {"tools before bigger",
         {M("big", true, true, 900, N), M("small", true, true, 10, Y)},
         2,
         NULL,
         1},
        {"unknown before no",
         {M("no", true, true, 900, N), M("unk", true, true, 10, U)},
         2,
         NULL,
         1},
        {"largest of equals",
         {M("a", true, true, 10, Y), M("b", true, true, 30, Y), M("c", true, true, 20, Y)},
         3,
         NULL,
         1},
        {"alphabetical tie", {M("b", true, true, 10, Y), M("a", true, true, 10, Y)}, 2, NULL, 1},
        {"--model wins", {M("a", true, true, 10, Y), M("b", false, false, 1, N)}, 2, "b", 1},
        {"--model unknown", {M("a", true, true, 10, Y)}, 1, "zz", -ENOENT},
        {"empty id skipped", {M("", true, true, 99, Y), M("x", true, true, 1, U)}, 2, NULL, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int got = agent_pick_model(rows[i].m, rows[i].n, rows[i].want);
        if (got != rows[i].expect)
            fail_msg("%s: got %d, want %d", rows[i].what, got, rows[i].expect);
    }
}

static const agent_ctx_t CTX = {
    .base_url = "http://127.0.0.1:9337", .model = "Qwen \"x\"", .key = NULL, .dir = "/h/agents/x"};

static bool argv_has(const agent_plan_t *p, const char *s)
{
    for (int i = 0; i < p->argc; i++)
        if (strcmp(p->argv[i], s) == 0) return true;
    return false;
}

/* no plan carries the key on argv or in a file */
static void assert_key_hidden(const agent_plan_t *p, const char *key)
{
    for (int i = 0; i < p->argc; i++)
        assert_null(strstr(p->argv[i], key));
    for (size_t i = 0; i < p->n_files; i++)
        assert_null(strstr(p->files[i].content, key));
}

static void test_claude(void **state)
{
    (void)state;
    char *user[] = {"-p", "hi"};
    agent_ctx_t c = CTX;
    c.key = "s3cret";
    agent_plan_t p;
    assert_int_equal(agent_plan(AGENT_CLAUDE, &c, 2, user, &p), 0);
    assert_int_equal(p.argc, 3);
    assert_string_equal(p.argv[0], "claude");
    assert_string_equal(p.argv[1], "-p");
    assert_string_equal(p.argv[2], "hi");
    assert_null(p.argv[3]);
    assert_string_equal(agent_plan_env(&p, "ANTHROPIC_BASE_URL", NULL), "http://127.0.0.1:9337");
    assert_string_equal(agent_plan_env(&p, "ANTHROPIC_AUTH_TOKEN", NULL), "s3cret");
    assert_string_equal(agent_plan_env(&p, "ANTHROPIC_MODEL", NULL), "Qwen \"x\"");
    assert_string_equal(agent_plan_env(&p, "ANTHROPIC_SMALL_FAST_MODEL", NULL), "Qwen \"x\"");
    assert_string_equal(agent_plan_env(&p, "ANTHROPIC_DEFAULT_HAIKU_MODEL", NULL), "Qwen \"x\"");
    assert_string_equal(agent_plan_env(&p, "CLAUDE_CONFIG_DIR", NULL), "/h/agents/x");
    assert_string_equal(agent_plan_env(&p, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", NULL), "1");
    assert_string_equal(agent_plan_env(&p, "DISABLE_TELEMETRY", NULL), "1");
    assert_string_equal(agent_plan_env(&p, "DISABLE_AUTOUPDATER", NULL), "1");
    bool unset;
    assert_null(agent_plan_env(&p, "ANTHROPIC_API_KEY", &unset));
    assert_true(unset);
    /* the onboarding seed, never overwriting Claude Code's own state */
    assert_int_equal(p.n_files, 1);
    assert_string_equal(p.files[0].path, "/h/agents/x/.claude.json");
    assert_true(p.files[0].keep);
    json_t *seed = json_loads(p.files[0].content, 0, NULL);
    assert_true(json_is_true(json_object_get(seed, "hasCompletedOnboarding")));
    json_decref(seed);
    assert_key_hidden(&p, "s3cret");
    agent_plan_free(&p);

    /* no key: the placeholder */
    assert_int_equal(agent_plan(AGENT_CLAUDE, &CTX, 0, NULL, &p), 0);
    assert_string_equal(agent_plan_env(&p, "ANTHROPIC_AUTH_TOKEN", NULL), AGENT_DUMMY_KEY);
    assert_int_equal(p.argc, 1);
    agent_plan_free(&p);
}

static void test_codex(void **state)
{
    (void)state;
    char *user[] = {"exec", "hi"};
    agent_ctx_t c = CTX;
    c.key = "s3cret";
    agent_plan_t p;
    assert_int_equal(agent_plan(AGENT_CODEX, &c, 2, user, &p), 0);
    assert_string_equal(p.argv[0], "codex");
    /* the overrides come before the user's subcommand */
    assert_string_equal(p.argv[p.argc - 2], "exec");
    assert_string_equal(p.argv[p.argc - 1], "hi");
    const char *want[] = {
        "model_provider=\"mesh\"",
        "model_providers.mesh.base_url=\"http://127.0.0.1:9337/v1\"",
        "model_providers.mesh.wire_api=\"responses\"",
        "model_providers.mesh.env_key=\"" AGENT_KEY_ENV "\"",
        "model=\"Qwen \\\"x\\\"\"", /* TOML-escaped */
        "analytics.enabled=false",
        "check_for_update_on_startup=false",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!argv_has(&p, want[i])) fail_msg("codex argv lacks %s", want[i]);
    for (int i = 1; i < p.argc - 2; i += 2)
        assert_string_equal(p.argv[i], "-c");
    assert_string_equal(agent_plan_env(&p, "CODEX_HOME", NULL), "/h/agents/x");
    assert_string_equal(agent_plan_env(&p, AGENT_KEY_ENV, NULL), "s3cret");
    assert_key_hidden(&p, "s3cret");
    agent_plan_free(&p);
}

static void test_opencode(void **state)
{
    (void)state;
    char *user[] = {"run", "hi"};
    agent_ctx_t c = CTX;
    c.key = "s3cret";
    agent_plan_t p;
    assert_int_equal(agent_plan(AGENT_OPENCODE, &c, 2, user, &p), 0);
    assert_int_equal(p.argc, 3);
    assert_string_equal(p.argv[0], "opencode");
    const char *cfg = agent_plan_env(&p, "OPENCODE_CONFIG_CONTENT", NULL);
    assert_non_null(cfg);
    assert_null(strstr(cfg, "s3cret"));
    json_t *j = json_loads(cfg, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "model")), "mesh/Qwen \"x\"");
    json_t *prov = json_object_get(json_object_get(j, "provider"), "mesh");
    assert_string_equal(json_string_value(json_object_get(prov, "npm")),
                        "@ai-sdk/openai-compatible");
    json_t *opt = json_object_get(prov, "options");
    assert_string_equal(json_string_value(json_object_get(opt, "baseURL")),
                        "http://127.0.0.1:9337/v1");
    assert_string_equal(json_string_value(json_object_get(opt, "apiKey")),
                        "{env:" AGENT_KEY_ENV "}");
    assert_non_null(json_object_get(json_object_get(prov, "models"), "Qwen \"x\""));
    assert_true(json_is_false(json_object_get(j, "autoupdate")));
    json_decref(j);
    assert_string_equal(agent_plan_env(&p, "OPENCODE_DISABLE_AUTOUPDATE", NULL), "1");
    assert_string_equal(agent_plan_env(&p, "OPENCODE_DISABLE_MODELS_FETCH", NULL), "1");
    assert_string_equal(agent_plan_env(&p, "OPENCODE_CONFIG_DIR", NULL), "/h/agents/x");
    assert_string_equal(agent_plan_env(&p, AGENT_KEY_ENV, NULL), "s3cret");
    assert_key_hidden(&p, "s3cret");
    agent_plan_free(&p);
}

static void test_pi(void **state)
{
    (void)state;
    char *user[] = {"-p", "hi"};
    agent_ctx_t c = CTX;
    c.key = "s3cret";
    agent_plan_t p;
    assert_int_equal(agent_plan(AGENT_PI, &c, 2, user, &p), 0);
    const char *want[] = {"pi", "--provider", "mesh", "--model", "Qwen \"x\"", "-p", "hi"};
    assert_int_equal(p.argc, 7);
    for (int i = 0; i < 7; i++)
        assert_string_equal(p.argv[i], want[i]);
    assert_int_equal(p.n_files, 1);
    assert_string_equal(p.files[0].path, "/h/agents/x/models.json");
    assert_false(p.files[0].keep); /* the launcher's: rewritten every time */
    json_t *j = json_loads(p.files[0].content, 0, NULL);
    json_t *prov = json_object_get(json_object_get(j, "providers"), "mesh");
    assert_string_equal(json_string_value(json_object_get(prov, "baseUrl")),
                        "http://127.0.0.1:9337/v1");
    assert_string_equal(json_string_value(json_object_get(prov, "api")), "openai-completions");
    /* the name of the variable, which pi resolves: not the key */
    assert_string_equal(json_string_value(json_object_get(prov, "apiKey")), AGENT_KEY_ENV);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(prov, "models"), 0), "id")),
                        "Qwen \"x\"");
    json_decref(j);
    assert_string_equal(agent_plan_env(&p, "PI_CODING_AGENT_DIR", NULL), "/h/agents/x");
    assert_string_equal(agent_plan_env(&p, "PI_OFFLINE", NULL), "1");
    assert_string_equal(agent_plan_env(&p, AGENT_KEY_ENV, NULL), "s3cret");
    assert_key_hidden(&p, "s3cret");
    agent_plan_free(&p);
}

static void test_refusals(void **state)
{
    (void)state;
    agent_plan_t p;
    agent_ctx_t c = CTX;
    c.model = "bad\nname";
    assert_int_equal(agent_plan(AGENT_CLAUDE, &c, 0, NULL, &p), -EINVAL);
    agent_plan_free(&p);
    c = CTX;
    c.model = "";
    assert_int_equal(agent_plan(AGENT_PI, &c, 0, NULL, &p), -EINVAL);
    agent_plan_free(&p);
    c = CTX;
    c.dir = NULL;
    assert_int_equal(agent_plan(AGENT_CODEX, &c, 0, NULL, &p), -EINVAL);
    agent_plan_free(&p);
    assert_int_equal(agent_plan(AGENT_N, &CTX, 0, NULL, &p), -EINVAL);
    agent_plan_free(&p);
    char *many[AGENT_MAX_ARGS + 1];
    for (int i = 0; i <= AGENT_MAX_ARGS; i++)
        many[i] = "x";
    assert_int_equal(agent_plan(AGENT_CODEX, &CTX, AGENT_MAX_ARGS + 1, many, &p), -E2BIG);
    agent_plan_free(&p);
    /* AGENT_MAX_ARGS fit after the longest launcher part (codex's overrides) */
    assert_int_equal(agent_plan(AGENT_CODEX, &CTX, AGENT_MAX_ARGS, many, &p), 0);
    assert_null(p.argv[p.argc]);
    agent_plan_free(&p);
}

/* what the launcher starts when no node answers: rows of (input, the node's argv) */
static void test_node_args(void **state)
{
    (void)state;
    static const struct {
        agent_start_t in;
        int rc;
        const char *argv; /* joined by spaces */
        const char *join_env;
    } rows[] = {
        {{.self = "mesh-llm", .model = "/m/a.gguf"}, 0, "mesh-llm --model /m/a.gguf", NULL},
        {{.self = "mesh-llm", .model = "Qwen3-8B-Q4_K_M", .join = "eyJ2Ijox"},
         0,
         "mesh-llm --model Qwen3-8B-Q4_K_M",
         "eyJ2Ijox"},
        {{.self = "mesh-llm", .join = "eyJ2Ijox"}, 0, "mesh-llm --client", "eyJ2Ijox"},
        {{.self = "mesh-llm", .join = "@/run/token"},
         0,
         "mesh-llm --client --join @/run/token",
         NULL},
        {{.self = "mesh-llm", .join = ""}, -ENOENT, NULL, NULL},
        {{.self = "mesh-llm", .have_config = true}, 0, "mesh-llm", NULL},
        {{.self = "mesh-llm", .model = "x", .have_config = true}, 0, "mesh-llm --model x", NULL},
        {{.self = "mesh-llm", .join = "t", .api_port = 9400, .console_port = 3200},
         0,
         "mesh-llm --client --port 9400 --console 3200",
         "t"},
        {{.self = "mesh-llm", .model = "x", .api_port = 70000}, 0, "mesh-llm --model x", NULL},
        {{.self = "mesh-llm"}, -ENOENT, NULL, NULL},
        {{.self = "mesh-llm", .model = ""}, -ENOENT, NULL, NULL},
        {{.self = "mesh-llm", .api_port = 9400}, -ENOENT, NULL, NULL},
        {{.model = "x"}, -EINVAL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        agent_node_cmd_t c;
        int rc = agent_node_args(&rows[i].in, &c);
        assert_int_equal(rc, rows[i].rc);
        if (rc) continue;
        char joined[256] = "";
        for (int k = 0; k < c.argc; k++)
            snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s%s", k ? " " : "",
                     c.argv[k]);
        assert_string_equal(joined, rows[i].argv);
        assert_null(c.argv[c.argc]);
        if (rows[i].join_env)
            assert_string_equal(c.join_env, rows[i].join_env);
        else
            assert_null(c.join_env);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),    cmocka_unit_test(test_pick),
        cmocka_unit_test(test_claude),   cmocka_unit_test(test_codex),
        cmocka_unit_test(test_opencode), cmocka_unit_test(test_pi),
        cmocka_unit_test(test_refusals), cmocka_unit_test(test_node_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

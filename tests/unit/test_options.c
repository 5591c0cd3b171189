/* Unit tests for the option table (src/node/options.h), "did you mean" (src/core/suggest.h) and
 * the config file (src/node/config_file.h): --help, the config keys and the parser come from one
 * table, so each table entry is checked against each of them. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "config_file.h"
#include "options.h"
#include "suggest.h"

static void test_distance_table(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b;
        size_t d;
    } cases[] = {
        {"", "", 0},        {"port", "port", 0},      {"prot", "port", 1}, /* adjacent swap */
        {"por", "port", 1}, {"portt", "port", 1},     {"pxrt", "port", 1}, {"", "abc", 3},
        {"abc", "", 3},     {"kitten", "sitting", 3}, {"hepl", "help", 1}, {"consle", "console", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (suggest_distance(cases[i].a, cases[i].b) != cases[i].d)
            fail_msg("distance(%s, %s) = %zu, want %zu", cases[i].a, cases[i].b,
                     suggest_distance(cases[i].a, cases[i].b), cases[i].d);
}

static void test_closest(void **state)
{
    (void)state;
    const char *names[] = {"status", "join", "models", NULL, "download", "discover"};
    size_t n = sizeof names / sizeof names[0];
    assert_string_equal(suggest_closest("stauts", names, n), "status");
    assert_string_equal(suggest_closest("jion", names, n), "join");
    assert_string_equal(suggest_closest("dowload", names, n), "download");
    assert_string_equal(suggest_closest("disc", names, n), "discover"); /* a prefix */
    assert_null(suggest_closest("xyzzy", names, n));
    assert_null(suggest_closest("", names, n));
    /* a long typo is cut at SUGGEST_NAME_MAX, never read past */
    char longname[300];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_null(suggest_closest(longname, names, n));
    assert_string_equal(options_suggest("prot"), "port");
    assert_string_equal(options_suggest("modle"), "model");
    assert_null(options_suggest("help-markdow")); /* hidden options are never suggested */
}

/* names, short names and keys are unique; every visible option is in --help */
static void test_table_consistent_with_help(void **state)
{
    (void)state;
    size_t n;
    const mesh_option_t *all = options_all(&n);
    static char help[32768];
    FILE *f = fmemopen(help, sizeof help - 1, "w");
    assert_non_null(f);
    options_usage(f);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < i; k++) {
            assert_string_not_equal(all[i].name, all[k].name);
            assert_int_not_equal(all[i].id, all[k].id);
            if (all[i].key && all[k].key) assert_string_not_equal(all[i].key, all[k].key);
            if (all[i].short_name) assert_int_not_equal(all[i].short_name, all[k].short_name);
        }
        assert_ptr_equal(options_by_name(all[i].name), &all[i]);
        assert_ptr_equal(options_by_id(all[i].id), &all[i]);
        char flag[96];
        snprintf(flag, sizeof flag, "--%s%s", all[i].name, all[i].metavar ? " " : "");
        bool shown = strstr(help, flag) != NULL;
        if (shown == !!(all[i].flags & OPTF_HIDDEN))
            fail_msg("--%s is %s --help", all[i].name, shown ? "hidden but in" : "missing from");
        if (all[i].env && !strstr(help, all[i].env))
            fail_msg("--%s: its environment variable %s is not in --help", all[i].name, all[i].env);
        assert_true((all[i].metavar == NULL) == (all[i].value == OPTV_SWITCH));
    }
    size_t nc;
    const mesh_command_t *cmds = options_commands(&nc);
    for (size_t i = 0; i < nc; i++) {
        char line[64];
        snprintf(line, sizeof line, "mesh-llm %s ", cmds[i].name);
        if (!strstr(help, line)) fail_msg("command %s is not in --help", cmds[i].name);
    }
}

static char tmpdir[] = "/tmp/test_options_XXXXXX";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* a value of the right type for o in the config file */
static void sample_value(const mesh_option_t *o, char *out, size_t len)
{
    switch (o->value) {
    case OPTV_SWITCH:
        snprintf(out, len, "true");
        break;
    case OPTV_INT:
        snprintf(out, len, "0");
        break;
    case OPTV_NUMBER:
        snprintf(out, len, "1.5");
        break;
    case OPTV_INTS:
        snprintf(out, len, "[1, 2]");
        break;
    default:
        snprintf(out, len, "%s\"x\"%s", o->flags & OPTF_REPEAT ? "[" : "",
                 o->flags & OPTF_REPEAT ? "]" : "");
    }
}

/* every key of the table is accepted by config check (in its section, with its type), and
 * becomes its own flag */
static void test_every_key_accepted(void **state)
{
    (void)state;
    size_t n;
    const mesh_option_t *all = options_all(&n);
    char path[256], text[512], val[64], report[4096];
    snprintf(path, sizeof path, "%s/one.cfg", tmpdir);
    for (size_t i = 0; i < n; i++) {
        const mesh_option_t *o = &all[i];
        if (!o->key) continue;
        sample_value(o, val, sizeof val);
        const char *dot = strchr(o->key, '.');
        if (strcmp(o->key, "models.model") == 0)
            snprintf(text, sizeof text, "models = ( { model = \"m.gguf\"; } );\n");
        else if (strncmp(o->key, "models.", 7) == 0)
            snprintf(text, sizeof text, "models = ( { model = \"m.gguf\"; %s = \"x\"; } );\n",
                     dot + 1);
        else if (dot)
            snprintf(text, sizeof text, "%.*s = { %s = %s; };\n", (int)(dot - o->key), o->key,
                     dot + 1, val);
        else
            snprintf(text, sizeof text, "%s = %s;\n", o->key, val);
        write_file(path, text);
        FILE *f = fmemopen(report, sizeof report - 1, "w");
        int rc = config_file_check(path, f);
        fclose(f);
        if (rc != 0) fail_msg("key %s refused: %s\n(file: %s)", o->key, report, text);
    }
}

static void test_check_reports_lines_and_suggestions(void **state)
{
    (void)state;
    char path[256], report[4096];
    snprintf(path, sizeof path, "%s/bad.cfg", tmpdir);
    write_file(path, "# a comment\n"
                     "api = {\n"
                     "  prot = 9000;\n"
                     "};\n"
                     "mesh = { split = 3; };\n"
                     "models = ( { model = \"a.gguf\"; ctx = 1; } );\n");
    FILE *f = fmemopen(report, sizeof report - 1, "w");
    assert_int_equal(config_file_check(path, f), 2);
    fclose(f);
    assert_non_null(strstr(report, "bad.cfg:3: unknown key 'api.prot'; did you mean 'api.port'?"));
    assert_non_null(strstr(report, "bad.cfg:5: mesh.split takes true or false"));
    assert_non_null(strstr(report, "bad.cfg:6: unknown key 'models.ctx'"));

    write_file(path, "api = { port = 9000; };\nmesh = { split = };\n"); /* no value */
    f = fmemopen(report, sizeof report - 1, "w");
    assert_int_equal(config_file_check(path, f), 2);
    fclose(f);
    assert_non_null(strstr(report, "bad.cfg:2: "));
}

/* the file's settings become flags; flags and environment variables override them */
static void test_precedence(void **state)
{
    (void)state;
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/node.cfg", tmpdir);
    write_file(path, "api = { port = 9400; console = 9401; queue_len = 7;\n"
                     "        allow_origin = [\"http://a.example\", \"http://b.example\"]; };\n"
                     "log = { verbose = true; };\n"
                     "bin_dir = \"/from/file\";\n"
                     "mesh = { own_mesh = true; };\n"
                     "models = ( { model = \"/nonexistent/x.gguf\"; ctx_size = 512; } );\n");
    char *argv[] = {"mesh-llm",       "--config",         path, "--port", "9500",
                    "--allow-origin", "http://c.example", NULL};
    config_src_t *src = calloc(1, sizeof *src);
    setenv("MESH_LLM_BIN_DIR", "/from/env", 1);
    assert_int_equal(config_src_load(src, 7, argv, err, sizeof err), 0);
    unsetenv("MESH_LLM_BIN_DIR");
    /* the file's model is dropped by nothing: it is refused by the parser (no such file) */
    config_t cfg;
    int rc = config_parse_src(&cfg, src, err, sizeof err);
    assert_int_equal(rc, -EINVAL);
    assert_non_null(strstr(err, "x.gguf"));
    assert_non_null(strstr(err, path)); /* names the file the bad value came from */
    config_free(&cfg);
    config_src_free(src);

    write_file(path, "api = { port = 9400; console = 9401; queue_len = 7;\n"
                     "        allow_origin = [\"http://a.example\", \"http://b.example\"]; };\n"
                     "log = { verbose = true; };\n"
                     "bin_dir = \"/from/file\";\n"
                     "mesh = { own_mesh = true; };\n");
    setenv("MESH_LLM_BIN_DIR", "/from/env", 1);
    assert_int_equal(config_src_load(src, 7, argv, err, sizeof err), 0);
    unsetenv("MESH_LLM_BIN_DIR");
    assert_int_equal(config_parse_src(&cfg, src, err, sizeof err), CONFIG_OK);
    config_src_free(src);
    assert_int_equal(cfg.port, 9500);         /* the flag */
    assert_int_equal(cfg.console_port, 9401); /* the file */
    assert_int_equal(cfg.queue_len, 7);
    assert_true(cfg.verbose && cfg.own_mesh);
    assert_null(cfg.bin_dir); /* the environment's wins: the file's is dropped */
    /* a repeatable option on the command line replaces the file's list */
    assert_int_equal(cfg.n_allow_origins, 1);
    assert_string_equal(cfg.config_path, path);
    config_free(&cfg);

    /* no flag: the file's list */
    char *argv2[] = {"mesh-llm", "--config", path, NULL};
    assert_int_equal(config_src_load(src, 3, argv2, err, sizeof err), 0);
    assert_int_equal(config_parse_src(&cfg, src, err, sizeof err), CONFIG_OK);
    config_src_free(src);
    assert_int_equal(cfg.n_allow_origins, 2);
    assert_int_equal(cfg.port, 9400);
    assert_string_equal(cfg.bin_dir, "/from/file");
    config_free(&cfg);
    free(src);
}

/* per-model settings, and a model entry given as a plain string */
static void test_models_list(void **state)
{
    (void)state;
    const char *models = getenv("MESH_LLM_TEST_MODELS");
    if (!models) {
        print_message("skipping: MESH_LLM_TEST_MODELS is not set\n");
        skip();
    }
    char path[256], text[2048], err[512];
    snprintf(path, sizeof path, "%s/models.cfg", tmpdir);
    snprintf(text, sizeof text,
             "models = ( { model = \"%s/stories260K.gguf\"; ctx_size = 256;\n"
             "             llamacpp_args = \"--temp 0\"; },\n"
             "           \"%s/TinyStories-656K-Q8_0.gguf\" );\n"
             "ctx_size = 1024;\n",
             models, models);
    write_file(path, text);
    char *argv[] = {"mesh-llm", "--config", path, NULL};
    config_src_t *src = calloc(1, sizeof *src);
    assert_int_equal(config_src_load(src, 3, argv, err, sizeof err), 0);
    config_t cfg;
    assert_int_equal(config_parse_src(&cfg, src, err, sizeof err), CONFIG_OK);
    config_src_free(src);
    free(src);
    assert_int_equal(cfg.n_models, 2);
    assert_int_equal(config_ctx_of(&cfg, "stories260K"), 256);
    assert_string_equal(config_llamacpp_args_of(&cfg, "stories260K"), "--temp 0");
    assert_int_equal(config_ctx_of(&cfg, "TinyStories-656K-Q8_0"), 1024);
    assert_null(config_llamacpp_args_of(&cfg, "TinyStories-656K-Q8_0"));
    config_free(&cfg);

    /* a managed flag in a model's llamacpp_args is refused with its line */
    write_file(path, "models = ( { model = \"a.gguf\";\n llamacpp_args = \"--port 1\"; } );\n");
    char report[1024];
    FILE *f = fmemopen(report, sizeof report - 1, "w");
    assert_int_equal(config_file_check(path, f), 2);
    fclose(f);
    assert_non_null(strstr(report, "models.cfg:2: models.llamacpp_args"));
}

/* a join token from the file is not "on the command line" (no argv warning) */
static void test_secret_from_file_not_in_argv(void **state)
{
    (void)state;
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/secret.cfg", tmpdir);
    write_file(path, "api = { key = \"sekret-key-123\"; };\n");
    char *argv[] = {"mesh-llm", "--config", path, NULL};
    config_src_t *src = calloc(1, sizeof *src);
    assert_int_equal(config_src_load(src, 3, argv, err, sizeof err), 0);
    config_t cfg;
    assert_int_equal(config_parse_src(&cfg, src, err, sizeof err), CONFIG_OK);
    config_src_free(src);
    assert_string_equal(cfg.api_key, "sekret-key-123");
    assert_false(cfg.api_key_in_argv);
    config_free(&cfg);

    char *argv2[] = {"mesh-llm", "--api-key", "sekret-key-456", NULL};
    assert_int_equal(config_src_load(src, 3, argv2, err, sizeof err), 0);
    assert_int_equal(config_parse_src(&cfg, src, err, sizeof err), CONFIG_OK);
    config_src_free(src);
    assert_true(cfg.api_key_in_argv);
    config_free(&cfg);
    free(src);
}

/* $MESH_LLM_HOME/config is read without --config; a missing --config file is an error */
static void test_default_file(void **state)
{
    (void)state;
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/config", tmpdir);
    write_file(path, "api = { port = 9777; };\n");
    setenv("MESH_LLM_HOME", tmpdir, 1);
    char *argv[] = {"mesh-llm", NULL};
    config_src_t *src = calloc(1, sizeof *src);
    assert_int_equal(config_src_load(src, 1, argv, err, sizeof err), 0);
    config_t cfg;
    assert_int_equal(config_parse_src(&cfg, src, err, sizeof err), CONFIG_OK);
    config_src_free(src);
    assert_int_equal(cfg.port, 9777);
    config_free(&cfg);
    unlink(path);
    unsetenv("MESH_LLM_HOME");

    char *argv2[] = {"mesh-llm", "--config", "/nonexistent/mesh.cfg", NULL};
    assert_int_equal(config_src_load(src, 3, argv2, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "/nonexistent/mesh.cfg"));
    free(src);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The environment table: names unique and sorted, every option's variable listed, a timer's
 * value read through options_env_ms and its default taken from the table. */
static void test_env_table(void **state)
{
    (void)state;
    size_t n, no;
    const mesh_env_t *e = options_env_all(&n);
    assert_true(n > 40);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(strncmp(e[i].name, "MESH_LLM_", 9), 0);
        assert_non_null(e[i].unit);
        assert_non_null(e[i].help);
        if (i > 0 && strcmp(e[i - 1].name, e[i].name) >= 0)
            fail_msg("%s after %s: keep the table sorted, each name once", e[i].name,
                     e[i - 1].name);
        if (e[i].value == 0 && !e[i].def) fail_msg("%s: no default shown", e[i].name);
    }
    const mesh_option_t *o = options_all(&no);
    for (size_t i = 0; i < no; i++)
        if (o[i].env && !options_env(o[i].env))
            fail_msg("--%s's %s is not in the environment table", o[i].name, o[i].env);
    assert_null(options_env("MESH_LLM_NOPE"));

    unsetenv("MESH_LLM_HEARTBEAT_MS");
    assert_int_equal(options_env_ms("MESH_LLM_HEARTBEAT_MS"), 60000);
    setenv("MESH_LLM_HEARTBEAT_MS", "1234", 1);
    assert_int_equal(options_env_ms("MESH_LLM_HEARTBEAT_MS"), 1234);
    setenv("MESH_LLM_HEARTBEAT_MS", "0", 1); /* below 1 ms: the default */
    assert_int_equal(options_env_ms("MESH_LLM_HEARTBEAT_MS"), 60000);
    setenv("MESH_LLM_HEARTBEAT_MS", "12x", 1);
    assert_int_equal(options_env_ms("MESH_LLM_HEARTBEAT_MS"), 60000);
    unsetenv("MESH_LLM_HEARTBEAT_MS");
    assert_int_equal(options_env_default("MESH_LLM_QUEUE_WAIT_MS"), 600000);

    /* mesh-llm help environment lists every variable with its default */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    options_env_usage(f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (!strstr(buf, e[i].name)) fail_msg("%s missing from help environment", e[i].name);
    assert_non_null(strstr(buf, "MESH_LLM_LIVE_MS\n      a QUIC connection"));
    assert_non_null(strstr(buf, "(default: 2000; ms)"));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distance_table),
        cmocka_unit_test(test_closest),
        cmocka_unit_test(test_table_consistent_with_help),
        cmocka_unit_test(test_every_key_accepted),
        cmocka_unit_test(test_check_reports_lines_and_suggestions),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_models_list),
        cmocka_unit_test(test_secret_from_file_not_in_argv),
        cmocka_unit_test(test_default_file),
        cmocka_unit_test(test_env_table),
    };
    return cmocka_run_group_tests_name("options", tests, setup, teardown);
}

/* Unit tests for the node object's owned parts (src/node/node_ctx.h, issue 30 S12): one
 * node_ctx_init parses a command line (with the config file and the environment) into an object
 * the caller owns — options, defaults, the --model REFs the node downloads, the tunables — and a
 * bad command line is an error with a message, not an exit. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node_ctx.h"
#include "nostr_pool.h"

#define URL_A "https://example.invalid/m/alpha-Q4_K_M.gguf"

static char g_dir[] = "/tmp/test_node_ctx.XXXXXX";

/* an empty home: no config file, no identity */
static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(g_dir)) return -1;
    setenv("HOME", g_dir, 1);
    setenv("MESH_LLM_HOME", g_dir, 1);
    unsetenv("MESH_LLM_HEARTBEAT_MS");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rmdir(g_dir);
    return 0;
}

static int init(node_ctx_t *ctx, char **argv, char *err, size_t errlen)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    err[0] = '\0';
    return node_ctx_init(ctx, argc, argv, err, errlen);
}

static void test_options_parsed(void **state)
{
    (void)state;
    char *argv[] = {"mesh-llm", "--port", "9999", "--console", "4000", "--model", URL_A, NULL};
    node_ctx_t *ctx = malloc(sizeof *ctx);
    char err[512];
    assert_int_equal(init(ctx, argv, err, sizeof err), CONFIG_OK);
    assert_int_equal(ctx->cfg.port, 9999);
    assert_int_equal(ctx->cfg.console_port, 4000);
    /* the URL is not a file: the node downloads it, it is not a model of the config */
    const char *const *refs;
    assert_int_equal(node_dl_pending(&ctx->dl_args, &refs), 1);
    assert_string_equal(refs[0], URL_A);
    assert_int_equal(ctx->cfg.n_models, 0);
    /* the parts are wired to each other: a logged request changes the status */
    assert_ptr_equal(ctx->stat.changes, &ctx->changes);
    assert_string_equal(ctx->cfg.tun.home, g_dir);
    node_ctx_free(ctx);
    free(ctx);
}

static void test_defaults(void **state)
{
    (void)state;
    char *argv[] = {"mesh-llm", NULL};
    node_ctx_t *ctx = malloc(sizeof *ctx);
    char err[512];
    assert_int_equal(init(ctx, argv, err, sizeof err), CONFIG_OK);
    assert_int_equal(ctx->cfg.port, 9337);
    assert_int_equal(ctx->cfg.console_port, 3131);
    assert_false(ctx->cfg.headless);
    assert_false(ctx->cfg.client);
    assert_true(config_idle(&ctx->cfg)); /* no model, no join: an idle node */
    assert_int_equal(node_dl_pending(&ctx->dl_args, NULL), 0);
    assert_true(ctx->cfg.tun.heartbeat_ms > 0);
    node_ctx_free(ctx);
    free(ctx);
}

static void test_environment_read_once(void **state)
{
    (void)state;
    char *argv[] = {"mesh-llm", NULL};
    node_ctx_t *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    char err[512];
    setenv("MESH_LLM_HEARTBEAT_MS", "1234", 1);
    setenv("MESH_LLM_HTTP_MAX_BUFFERED", "8192", 1);
    assert_int_equal(init(a, argv, err, sizeof err), CONFIG_OK);
    unsetenv("MESH_LLM_HEARTBEAT_MS");
    unsetenv("MESH_LLM_HTTP_MAX_BUFFERED");
    assert_int_equal(init(b, argv, err, sizeof err), CONFIG_OK);
    assert_int_equal(a->cfg.tun.heartbeat_ms, 1234); /* taken at init, kept after */
    assert_int_not_equal(b->cfg.tun.heartbeat_ms, 1234);
    /* the HTTP buffer budget the API and console servers share gets its cap from the tunables */
    assert_int_equal(a->http_budget.cap, 8192);
    assert_int_equal(b->http_budget.cap, HTTPD_DEFAULT_BUFFER_CAP);
    node_ctx_free(a);
    node_ctx_free(b);
    free(a);
    free(b);
}

/* $MESH_LLM_NOSTR_RELAYS is read with the options, once; the relay list is built from it */
static void test_nostr_relays_from_env(void **state)
{
    (void)state;
    char *argv[] = {"mesh-llm", NULL};
    node_ctx_t *ctx = malloc(sizeof *ctx);
    char err[512], buf[256];
    const char *urls[8];
    setenv("MESH_LLM_NOSTR_RELAYS", "ws://a.invalid, wss://b.invalid", 1);
    assert_int_equal(init(ctx, argv, err, sizeof err), CONFIG_OK);
    unsetenv("MESH_LLM_NOSTR_RELAYS");
    assert_string_equal(ctx->cfg.nostr_relays_env, "ws://a.invalid, wss://b.invalid");
    assert_int_equal(
        nostr_pool_relays(NULL, 0, ctx->cfg.nostr_relays_env, buf, sizeof buf, urls, 8), 2);
    assert_string_equal(urls[1], "wss://b.invalid");
    node_ctx_free(ctx);
    setenv("MESH_LLM_NOSTR_RELAYS", "none", 1);
    assert_int_equal(init(ctx, argv, err, sizeof err), CONFIG_OK);
    unsetenv("MESH_LLM_NOSTR_RELAYS");
    assert_int_equal(
        nostr_pool_relays(NULL, 0, ctx->cfg.nostr_relays_env, buf, sizeof buf, urls, 8), 0);
    node_ctx_free(ctx);
    assert_int_equal(init(ctx, argv, err, sizeof err), CONFIG_OK); /* unset: the defaults */
    assert_null(ctx->cfg.nostr_relays_env);
    assert_true(nostr_pool_relays(NULL, 0, ctx->cfg.nostr_relays_env, buf, sizeof buf, urls, 8) >
                0);
    node_ctx_free(ctx);
    free(ctx);
}

/* $MESH_LLM_BIN_DIR and $MESH_LLM_CACHE are read at init; the binary search uses those values */
static void test_bin_dirs_from_env(void **state)
{
    (void)state;
    char *argv[] = {"mesh-llm", NULL};
    node_ctx_t *ctx = malloc(sizeof *ctx);
    char err[512];
    setenv("MESH_LLM_BIN_DIR", "/nonexistent/bins", 1);
    setenv("MESH_LLM_CACHE", "/nonexistent/cache", 1);
    assert_int_equal(init(ctx, argv, err, sizeof err), CONFIG_OK);
    unsetenv("MESH_LLM_BIN_DIR");
    unsetenv("MESH_LLM_CACHE");
    bin_dirs_t d;
    bin_dirs(&d, &ctx->bins); /* the environment changed since: the values read at init count */
    assert_true(d.n >= 2);
    assert_string_equal(d.dir[0], "/nonexistent/bins");
    assert_string_equal(d.what[0], "$MESH_LLM_BIN_DIR");
    assert_non_null(strstr(d.dir[d.n - 1], "/nonexistent/cache/"));
    bin_not_found(err, sizeof err, "llama-server", &ctx->bins);
    assert_non_null(strstr(err, "/nonexistent/bins ($MESH_LLM_BIN_DIR)"));
    assert_null(sv_find_binary(NULL, "no-such-binary-h-node", &ctx->bins));
    node_ctx_free(ctx);
    assert_int_equal(init(ctx, argv, err, sizeof err), CONFIG_OK); /* unset: not searched */
    bin_dirs(&d, &ctx->bins);
    for (size_t i = 0; i < d.n; i++)
        assert_string_not_equal(d.what[i], "$MESH_LLM_BIN_DIR");
    node_ctx_free(ctx);
    free(ctx);
}

static void test_bad_command_line_is_an_error(void **state)
{
    (void)state;
    node_ctx_t *ctx = malloc(sizeof *ctx);
    char err[512];
    char *unknown[] = {"mesh-llm", "--prot", "1", NULL};
    assert_true(init(ctx, unknown, err, sizeof err) < 0);
    assert_non_null(strstr(err, "--prot"));
    char *same[] = {"mesh-llm", "--port", "5000", "--console", "5000", NULL};
    assert_true(init(ctx, same, err, sizeof err) < 0);
    assert_non_null(strstr(err, "must differ"));
    char *bad_port[] = {"mesh-llm", "--port", "70000", NULL};
    assert_true(init(ctx, bad_port, err, sizeof err) < 0);
    assert_true(err[0] != '\0');
    free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_parsed),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_environment_read_once),
        cmocka_unit_test(test_nostr_relays_from_env),
        cmocka_unit_test(test_bin_dirs_from_env),
        cmocka_unit_test(test_bad_command_line_is_an_error),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

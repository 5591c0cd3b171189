/* Unit tests for config_parse (src/node/config.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "identity.h"

#define MAX_ARGS 64

/* ------------------------------------------------------------------------------------------
 * helpers
 * ---------------------------------------------------------------------------------------- */

/* Parse "mesh-llm" followed by the NULL-terminated list of arguments. */
static int parse_errlen(config_t *cfg, char *err, size_t errlen, ...)
{
    static char *argv[MAX_ARGS + 2]; /* static: getopt may keep pointers into it */
    memset(argv, 0, sizeof argv);
    int argc = 0;
    argv[argc++] = (char *)"mesh-llm";
    va_list ap;
    va_start(ap, errlen);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        assert_true(argc < MAX_ARGS);
        argv[argc++] = (char *)a;
    }
    va_end(ap);
    argv[argc] = NULL;
    memset(err, 'Q', errlen); /* detect whether err is written / terminated */
    if (errlen) err[errlen - 1] = '\0';
    return config_parse(cfg, argc, argv, err, errlen);
}

#define PARSE(cfg, err, ...)                                                                       \
    parse_errlen((cfg), (err), sizeof(err), __VA_ARGS__, (const char *)NULL)
#define PARSE0(cfg, err) parse_errlen((cfg), (err), sizeof(err), (const char *)NULL)

/* Assert a refusal whose message mentions `needle`. */
#define ASSERT_REFUSED(rc, err, needle)                                                            \
    do {                                                                                           \
        assert_int_equal((rc), -EINVAL);                                                           \
        assert_true(strlen(err) > 0);                                                              \
        if (strstr((err), (needle)) == NULL)                                                       \
            fail_msg("error message \"%s\" does not mention \"%s\"", (err), (needle));             \
    } while (0)

/* glibc getopt keeps hidden state (the position inside a cluster like "-hv") that
 * `optind = 1` does not clear; `optind = 0` does. Reset it before each test so one test can
 * never leak into the next. (See test_getopt_state_does_not_leak_between_parses.) */
static int reset_getopt(void **state)
{
    (void)state;
    char *dummy[] = {(char *)"x", NULL};
    optind = 0;
    opterr = 0;
    (void)getopt(1, dummy, "");
    return 0;
}

static const char *models_root(void)
{
    const char *d = getenv("MESH_LLM_TEST_MODELS");
    return d && *d ? d : "/work/main/../shared/models";
}

/* Path of stories260K.gguf, or skip the test when it is not available. */
static const char *stories_path(void)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/stories260K.gguf", models_root());
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        print_message("skipping: %s not found\n", path);
        skip();
    }
    return path;
}

static void touch(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail_msg("cannot create %s: %s", path, strerror(errno));
    close(fd);
}

/* A scratch directory, removed (with everything created through tmp_file/tmp_subdir) at the
 * end of the test. */
typedef struct {
    char dir[512];
    char *paths[200]; /* files and subdirectories, removed in reverse order */
    size_t n;
} tmpdir_t;

/* Every open scratch dir and a saved $HOME, cleaned up by the teardown even when an
 * assertion aborts the test half-way. */
static tmpdir_t *g_open_tmp[4];
static char *g_saved_home;
static bool g_home_saved;

static void tmp_open(tmpdir_t *t)
{
    memset(t, 0, sizeof *t);
    size_t slot = 0;
    while (slot < 4 && g_open_tmp[slot])
        slot++;
    assert_true(slot < 4);
    g_open_tmp[slot] = t;
    const char *base = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/mesh-llm-ut-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(t->dir)) fail_msg("mkdtemp: %s", strerror(errno));
}

static const char *tmp_track(tmpdir_t *t, const char *path)
{
    assert_true(t->n < sizeof t->paths / sizeof t->paths[0]);
    t->paths[t->n] = strdup(path);
    assert_non_null(t->paths[t->n]);
    return t->paths[t->n++];
}

/* Create an empty file `name` (relative to the scratch dir); returns its full path. */
static const char *tmp_file(tmpdir_t *t, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", t->dir, name);
    touch(path);
    return tmp_track(t, path);
}

/* Create an empty file with a random mkstemp name ending in `suffix`. */
static const char *tmp_random_file(tmpdir_t *t, const char *prefix, const char *suffix)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%sXXXXXX%s", t->dir, prefix, suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    if (fd < 0) fail_msg("mkstemps: %s", strerror(errno));
    close(fd);
    return tmp_track(t, path);
}

static const char *tmp_subdir(tmpdir_t *t, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", t->dir, name);
    if (mkdir(path, 0755) != 0) fail_msg("mkdir %s: %s", path, strerror(errno));
    return tmp_track(t, path);
}

static void tmp_close(tmpdir_t *t)
{
    while (t->n > 0) {
        char *p = t->paths[--t->n];
        if (unlink(p) != 0) rmdir(p);
        free(p);
    }
    rmdir(t->dir);
    for (size_t i = 0; i < 4; i++)
        if (g_open_tmp[i] == t) g_open_tmp[i] = NULL;
}

static void home_set(const char *dir)
{
    if (!g_home_saved) {
        const char *h = getenv("HOME");
        g_saved_home = h ? strdup(h) : NULL;
        g_home_saved = true;
    }
    setenv("HOME", dir, 1);
}

static void home_restore(void)
{
    if (!g_home_saved) return;
    if (g_saved_home)
        setenv("HOME", g_saved_home, 1);
    else
        unsetenv("HOME");
    free(g_saved_home);
    g_saved_home = NULL;
    g_home_saved = false;
}

static int cleanup(void **state)
{
    (void)state;
    unsetenv("MESH_LLM_JOIN");
    unsetenv("MESH_LLM_API_KEY");
    unsetenv("MESH_LLM_TURN_PASSWORD");
    for (size_t i = 0; i < 4; i++)
        if (g_open_tmp[i]) tmp_close(g_open_tmp[i]);
    home_restore();
    return 0;
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Capture what fn writes to stdout while parsing. */
static int parse_capturing_stdout(config_t *cfg, char *err, size_t errlen, const char *arg,
                                  char *out, size_t outlen)
{
    char tmpl[] = "/tmp/mesh-llm-ut-stdout-XXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fd, STDOUT_FILENO) >= 0);
    int rc = parse_errlen(cfg, err, errlen, arg, (const char *)NULL);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    ssize_t n = pread(fd, out, outlen - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(tmpl);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * defaults and simple flags
 * ---------------------------------------------------------------------------------------- */

static void test_defaults(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    memset(&cfg, 0x5A, sizeof cfg); /* config_parse must initialise everything */
    assert_int_equal(PARSE0(&cfg, err), CONFIG_OK);
    assert_string_equal(err, "");
    assert_int_equal(cfg.port, 9337);
    assert_int_equal(cfg.console_port, 3131);
    assert_int_equal(cfg.max_body_bytes, 8u * 1024 * 1024);
    assert_int_equal(cfg.n_models, 0);
    assert_null(cfg.models_dir);
    assert_false(cfg.headless);
    assert_false(cfg.listen_all);
    assert_int_equal(cfg.ctx_size, 0);
    assert_null(cfg.llamacpp_args);
    assert_null(cfg.bin_dir);
    assert_null(cfg.api_key);
    assert_int_equal(cfg.log_format, LOG_FORMAT_PRETTY);
    assert_false(cfg.verbose);
    config_free(&cfg);
    assert_int_equal(cfg.n_models, 0);
    assert_null(cfg.api_key);
}

static void test_boolean_flags(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--headless", "--listen-all", "-v", "--mesh-name", "lab"),
                     CONFIG_OK);
    assert_true(cfg.headless);
    assert_true(cfg.listen_all);
    assert_true(cfg.verbose);
    config_free(&cfg);

    assert_int_equal(PARSE(&cfg, err, "--verbose"), CONFIG_OK);
    assert_true(cfg.verbose);
    assert_false(cfg.headless);
    assert_false(cfg.split_private);
    config_free(&cfg);

    assert_int_equal(PARSE(&cfg, err, "--split-private"), CONFIG_OK);
    assert_true(cfg.split_private);
    assert_false(cfg.split); /* it says where a split's layers go, not whether to split */
    config_free(&cfg);
    int rc = PARSE(&cfg, err, "--client", "--split-private");
    ASSERT_REFUSED(rc, err, "--split-private");
    config_free(&cfg);
}

static void test_string_options(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--bin-dir", "/opt/llama/bin", "--api-key", "s3cr3t",
                           "--ctx-size", "4096"),
                     CONFIG_OK);
    assert_string_equal(cfg.bin_dir, "/opt/llama/bin");
    assert_string_equal(cfg.api_key, "s3cr3t");
    assert_int_equal(cfg.ctx_size, 4096);
    config_free(&cfg);

    /* --opt=value syntax, and the last occurrence wins without leaking the first. */
    assert_int_equal(
        PARSE(&cfg, err, "--api-key=one", "--api-key=two", "--bin-dir=a", "--bin-dir=b"),
        CONFIG_OK);
    assert_string_equal(cfg.api_key, "two");
    assert_string_equal(cfg.bin_dir, "b");
    config_free(&cfg);
}

static void test_api_key_empty_refused(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    int rc = PARSE(&cfg, err, "--api-key", "");
    ASSERT_REFUSED(rc, err, "--api-key");
    config_free(&cfg);
}

static void test_ctx_size(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--ctx-size", "1"), CONFIG_OK);
    assert_int_equal(cfg.ctx_size, 1);
    config_free(&cfg);
    assert_int_equal(PARSE(&cfg, err, "--ctx-size", "16777216"), CONFIG_OK);
    assert_int_equal(cfg.ctx_size, 16777216);
    config_free(&cfg);

    const char *bad[] = {"0", "16777217", "abc", "-1", "", "12k"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = PARSE(&cfg, err, "--ctx-size", bad[i]);
        if (rc != -EINVAL) fail_msg("--ctx-size '%s' returned %d", bad[i], rc);
        ASSERT_REFUSED(rc, err, "--ctx-size");
        config_free(&cfg);
    }
}

/* ------------------------------------------------------------------------------------------
 * ports
 * ---------------------------------------------------------------------------------------- */

static void test_port_values(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--port", "0"), CONFIG_OK);
    assert_int_equal(cfg.port, 0);
    assert_int_equal(cfg.console_port, 3131);
    config_free(&cfg);

    assert_int_equal(PARSE(&cfg, err, "--port", "65535", "--console", "1"), CONFIG_OK);
    assert_int_equal(cfg.port, 65535);
    assert_int_equal(cfg.console_port, 1);
    config_free(&cfg);

    assert_int_equal(PARSE(&cfg, err, "--port=8080"), CONFIG_OK);
    assert_int_equal(cfg.port, 8080);
    config_free(&cfg);
}

static void test_port_refused(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    const char *bad[] = {"70000", "65536", "abc",    "-1",
                         "",      "80x",   "8080.0", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = PARSE(&cfg, err, "--port", bad[i]);
        if (rc != -EINVAL) fail_msg("--port '%s' returned %d", bad[i], rc);
        ASSERT_REFUSED(rc, err, "--port");
        if (*bad[i]) ASSERT_REFUSED(rc, err, bad[i]);
        config_free(&cfg);

        rc = PARSE(&cfg, err, "--console", bad[i]);
        ASSERT_REFUSED(rc, err, "--console");
        config_free(&cfg);
    }
}

static void test_port_equal_console_refused(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    int rc = PARSE(&cfg, err, "--port", "3131");
    ASSERT_REFUSED(rc, err, "3131");
    config_free(&cfg);

    rc = PARSE(&cfg, err, "--port", "5000", "--console", "5000");
    ASSERT_REFUSED(rc, err, "--console");
    config_free(&cfg);

    rc = PARSE(&cfg, err, "--console", "9337");
    ASSERT_REFUSED(rc, err, "9337");
    config_free(&cfg);

    /* Headless: there is no console, so the clash does not matter. */
    assert_int_equal(
        PARSE(&cfg, err, "--port", "5000", "--console", "5000", "--headless", "--mesh-name", "lab"),
        CONFIG_OK);
    config_free(&cfg);

    /* Both 0 means "any free port" for each: no clash. */
    assert_int_equal(PARSE(&cfg, err, "--port", "0", "--console", "0"), CONFIG_OK);
    assert_int_equal(cfg.port, 0);
    assert_int_equal(cfg.console_port, 0);
    config_free(&cfg);
}

/* ------------------------------------------------------------------------------------------
 * --max-body-size / --log-format / --llamacpp-args
 * ---------------------------------------------------------------------------------------- */

static void test_max_body_size(void **state)
{
    (void)state;
    static const struct {
        const char *arg;
        size_t want;
    } ok[] = {
        {"1K", 1024},
        {"1k", 1024},
        {"2M", 2u * 1024 * 1024},
        {"2m", 2u * 1024 * 1024},
        {"1G", 1024u * 1024 * 1024},
        {"65536", 65536},
        {"1", 1},
        {"1KB", 1024},
        {"1024G", (size_t)1 << 40},
    };
    config_t cfg;
    char err[256];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int rc = PARSE(&cfg, err, "--max-body-size", ok[i].arg);
        if (rc != CONFIG_OK) fail_msg("--max-body-size '%s' refused: %s", ok[i].arg, err);
        if (cfg.max_body_bytes != ok[i].want)
            fail_msg("--max-body-size '%s' gave %zu, expected %zu", ok[i].arg, cfg.max_body_bytes,
                     ok[i].want);
        config_free(&cfg);
    }
}

static void test_max_body_size_refused(void **state)
{
    (void)state;
    const char *bad[] = {"0",  "0K",   "junk", "",    "K",     "-1",
                         "1T", "1.5M", "1 K",  "1KK", "1025G", "99999999999999999999999",
                         "1Kx"};
    config_t cfg;
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = PARSE(&cfg, err, "--max-body-size", bad[i]);
        if (rc != -EINVAL)
            fail_msg("--max-body-size '%s' returned %d (max_body_bytes=%zu)", bad[i], rc,
                     cfg.max_body_bytes);
        ASSERT_REFUSED(rc, err, "--max-body-size");
        config_free(&cfg);
    }
}

static void test_log_format(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--log-format", "json"), CONFIG_OK);
    assert_int_equal(cfg.log_format, LOG_FORMAT_JSON);
    config_free(&cfg);

    assert_int_equal(PARSE(&cfg, err, "--log-format", "json", "--log-format", "pretty"), CONFIG_OK);
    assert_int_equal(cfg.log_format, LOG_FORMAT_PRETTY);
    config_free(&cfg);

    int rc = PARSE(&cfg, err, "--log-format", "xml");
    ASSERT_REFUSED(rc, err, "xml");
    ASSERT_REFUSED(rc, err, "--log-format");
    config_free(&cfg);

    rc = PARSE(&cfg, err, "--log-format", "");
    ASSERT_REFUSED(rc, err, "--log-format");
    config_free(&cfg);
}

static void test_llamacpp_args(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--llamacpp-args", "-ngl 99 --chat-template \"a b\""),
                     CONFIG_OK);
    assert_string_equal(cfg.llamacpp_args, "-ngl 99 --chat-template \"a b\"");
    config_free(&cfg);

    assert_int_equal(PARSE(&cfg, err, "--llamacpp-args", ""), CONFIG_OK);
    assert_non_null(cfg.llamacpp_args);
    assert_string_equal(cfg.llamacpp_args, "");
    config_free(&cfg);

    assert_int_equal(PARSE(&cfg, err, "--llamacpp-args", "-t 1", "--llamacpp-args", "-t 2"),
                     CONFIG_OK);
    assert_string_equal(cfg.llamacpp_args, "-t 2");
    config_free(&cfg);

    /* the operator is trusted with files and paths... */
    assert_int_equal(PARSE(&cfg, err, "--llamacpp-args", "--log-file /tmp/x --lora a.gguf"),
                     CONFIG_OK);
    config_free(&cfg);
    /* ...but not with what the node manages: "--port 1" used to leave the model loading
     * forever (the node polled the port it chose, llama-server listened on port 1) */
    static const char *const managed[] = {"--port 1",  "--port=1",       "--host 0.0.0.0",
                                          "-m x.gguf", "-t 2 --alias x", "--api-key k"};
    static const char *const named[] = {"--port", "--port", "--host", "-m", "--alias", "--api-key"};
    for (size_t i = 0; i < sizeof managed / sizeof managed[0]; i++) {
        int rc = PARSE(&cfg, err, "--llamacpp-args", managed[i]);
        ASSERT_REFUSED(rc, err, named[i]);
        ASSERT_REFUSED(rc, err, "the node manages it");
        config_free(&cfg);
    }

    int rc = PARSE(&cfg, err, "--llamacpp-args", "--x \"unbalanced");
    ASSERT_REFUSED(rc, err, "--llamacpp-args");
    ASSERT_REFUSED(rc, err, "unbalanced");
    assert_null(strstr(err, "manages"));
    config_free(&cfg);

    rc = PARSE(&cfg, err, "--llamacpp-args", "'single");
    ASSERT_REFUSED(rc, err, "--llamacpp-args");
    config_free(&cfg);
}

/* ------------------------------------------------------------------------------------------
 * bad command lines
 * ---------------------------------------------------------------------------------------- */

static void test_unknown_option(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    int rc = PARSE(&cfg, err, "--bogus");
    ASSERT_REFUSED(rc, err, "--bogus");
    config_free(&cfg);

    rc = PARSE(&cfg, err, "--port", "1234", "--no-such-thing", "x");
    ASSERT_REFUSED(rc, err, "--no-such-thing");
    config_free(&cfg);

    rc = PARSE(&cfg, err, "-x");
    ASSERT_REFUSED(rc, err, "-x");
    config_free(&cfg);

    /* A flag that takes no value given one. */
    rc = PARSE(&cfg, err, "--headless=yes");
    ASSERT_REFUSED(rc, err, "--headless");
    config_free(&cfg);
}

/* SUSPECTED BUG (src/node/config.c, `default:` case of the getopt loop): the message uses
 * argv[optind - 1], but getopt only advances optind past an argument once a short-option
 * cluster is finished. For "-xv" the unknown 'x' is reported as "unknown option 'mesh-llm'"
 * (argv[0]). Using optopt (or remembering the argument index) would name '-x'. Left failing
 * on purpose for review. */
static void test_unknown_short_option_in_cluster_named(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    int rc = PARSE(&cfg, err, "-xv");
    assert_int_equal(rc, -EINVAL);
    if (strstr(err, "-x") == NULL && strstr(err, "'x'") == NULL)
        fail_msg("error for \"-xv\" does not name the bad option: \"%s\"", err);
    config_free(&cfg);
}

static void test_missing_value(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    int rc = PARSE(&cfg, err, "--port");
    ASSERT_REFUSED(rc, err, "--port");
    config_free(&cfg);

    rc = PARSE(&cfg, err, "--headless", "--model");
    ASSERT_REFUSED(rc, err, "--model");
    config_free(&cfg);
}

static void test_stray_positional_refused(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    int rc = PARSE(&cfg, err, "stray");
    ASSERT_REFUSED(rc, err, "stray");
    config_free(&cfg);

    /* getopt_long permutes argv: a positional before or after options is still caught. */
    rc = PARSE(&cfg, err, "--port", "1234", "extra");
    ASSERT_REFUSED(rc, err, "extra");
    config_free(&cfg);

    rc = PARSE(&cfg, err, "first", "--port", "1234");
    ASSERT_REFUSED(rc, err, "first");
    config_free(&cfg);

    /* Anything after "--" is positional too. */
    rc = PARSE(&cfg, err, "--port", "1234", "--", "--headless");
    ASSERT_REFUSED(rc, err, "--headless");
    config_free(&cfg);
}

static void test_small_err_buffer_terminated(void **state)
{
    (void)state;
    config_t cfg;
    char err[8];
    int rc = PARSE(&cfg, err, "--port", "70000");
    assert_int_equal(rc, -EINVAL);
    assert_true(strlen(err) > 0);
    assert_true(strlen(err) < sizeof err);
    config_free(&cfg);
}

/* ------------------------------------------------------------------------------------------
 * --help / --version
 * ---------------------------------------------------------------------------------------- */

static void test_help_and_version(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    static char out[16384];

    int rc = parse_capturing_stdout(&cfg, err, sizeof err, "--help", out, sizeof out);
    assert_int_equal(rc, CONFIG_EXIT);
    assert_non_null(strstr(out, "Usage: mesh-llm"));
    assert_non_null(strstr(out, "--model"));
    assert_non_null(strstr(out, "--max-body-size"));
    config_free(&cfg);

    rc = parse_capturing_stdout(&cfg, err, sizeof err, "-h", out, sizeof out);
    assert_int_equal(rc, CONFIG_EXIT);
    assert_non_null(strstr(out, "Usage: mesh-llm"));
    config_free(&cfg);

    rc = parse_capturing_stdout(&cfg, err, sizeof err, "--version", out, sizeof out);
    assert_int_equal(rc, CONFIG_EXIT);
    assert_string_equal(out, "mesh-llm " MESH_VERSION "\n");
    config_free(&cfg);
}

static void test_help_after_other_options(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    fflush(stdout);
    /* Output goes to the test log; only the return value matters here. */
    assert_int_equal(PARSE(&cfg, err, "--port", "1234", "--version"), CONFIG_EXIT);
    config_free(&cfg);
}

/* SUSPECTED BUG (src/node/config.c, `optind = 1;` before the getopt_long loop): glibc getopt keeps
 * a private "next character inside the current short-option cluster" pointer that only
 * `optind = 0` resets. If a previous config_parse returned in the middle of a cluster
 * ("-hv" returns CONFIG_EXIT at 'h'; "-xv" fails at 'x'), the next config_parse resumes
 * from that stale pointer: it applies the leftover 'v' (verbose) from the *previous* argv
 * and then skips argv[1]. Worse, with argc == 1 it reads past the end of argv (argv[2]);
 * that is why this test uses argc == 2. In the daemon config_parse runs once, so this is
 * latent, but it contradicts "config_parse resets optind itself" and makes tests order
 * dependent. Fix: `optind = 0;` (glibc) instead of `optind = 1;`. Left failing on purpose. */
/* Idle mode: nothing names a mesh or a model. Settings (ports, logging, memory) keep it idle;
 * --headless is refused there (idle mode joins through the management API). */
static void test_idle_mode(void **state)
{
    (void)state;
    config_t cfg;
    char err[512];
    int rc0;
    assert_int_equal(PARSE0(&cfg, err), CONFIG_OK);
    assert_true(config_idle(&cfg));
    config_free(&cfg);
    assert_int_equal(PARSE(&cfg, err, "--port", "0", "--console", "0", "--max-vram", "2", "-v",
                           "--listen-all", "--ctx-size", "128"),
                     CONFIG_OK);
    assert_true(config_idle(&cfg));
    config_free(&cfg);
    assert_int_equal(PARSE(&cfg, err, "--mesh-name", "lab"), CONFIG_OK);
    assert_false(config_idle(&cfg));
    config_free(&cfg);
    assert_int_equal(PARSE(&cfg, err, "--own-mesh", "--headless"), CONFIG_OK);
    assert_false(config_idle(&cfg));
    config_free(&cfg);
    rc0 = PARSE(&cfg, err, "--own-mesh", "--client");
    ASSERT_REFUSED(rc0, err, "--own-mesh");
    config_free(&cfg);
    assert_int_equal(PARSE(&cfg, err, "--model", stories_path()), CONFIG_OK);
    assert_false(config_idle(&cfg));
    config_free(&cfg);
    int rc = PARSE(&cfg, err, "--headless", "--port", "0");
    ASSERT_REFUSED(rc, err, "idle");
    if (!strstr(err, "--join") || !strstr(err, "/api/join"))
        fail_msg("refusal does not say how to fix it: %s", err);
    config_free(&cfg);
}

static void test_getopt_state_does_not_leak_between_parses(void **state)
{
    (void)state;
    config_t cfg;
    char err[256];
    int rc = PARSE(&cfg, err, "-xv"); /* fails at 'x' with "v" still pending */
    assert_int_equal(rc, -EINVAL);
    config_free(&cfg);

    rc = PARSE(&cfg, err, "--headless", "--mesh-name", "lab");
    assert_int_equal(rc, CONFIG_OK);
    bool verbose = cfg.verbose, headless = cfg.headless;
    config_free(&cfg);
    if (verbose || !headless)
        fail_msg("second parse of [--headless --mesh-name lab] gave verbose=%d headless=%d: state "
                 "from the "
                 "previous argv leaked into it",
                 verbose, headless);
}

/* ------------------------------------------------------------------------------------------
 * --model
 * ---------------------------------------------------------------------------------------- */

static void test_model_real_file(void **state)
{
    (void)state;
    const char *p = stories_path();
    config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--model", p), CONFIG_OK);
    assert_int_equal(cfg.n_models, 1);
    assert_string_equal(cfg.models[0].name, "stories260K");
    assert_string_equal(cfg.models[0].path, p);
    assert_int_equal(cfg.models[0].type, MODEL_TYPE_AUTO);
    config_free(&cfg);
    assert_int_equal(cfg.n_models, 0);
}

static void test_model_type_suffix(void **state)
{
    (void)state;
    const char *p = stories_path();
    static const struct {
        const char *suffix;
        model_type_t type;
    } cases[] = {
        {":embedding", MODEL_TYPE_EMBEDDING},
        {":reranking", MODEL_TYPE_RERANKING},
        {":llm", MODEL_TYPE_LLM},
    };
    config_t cfg;
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char arg[PATH_MAX + 32];
        snprintf(arg, sizeof arg, "%s%s", p, cases[i].suffix);
        int rc = PARSE(&cfg, err, "--model", arg);
        if (rc != CONFIG_OK) fail_msg("--model %s refused: %s", arg, err);
        assert_int_equal(cfg.n_models, 1);
        assert_int_equal(cfg.models[0].type, cases[i].type);
        assert_string_equal(cfg.models[0].path, p); /* suffix not part of the path */
        assert_string_equal(cfg.models[0].name, "stories260K");
        config_free(&cfg);
    }
    assert_string_equal(model_type_name(MODEL_TYPE_EMBEDDING), "embedding");
    assert_string_equal(model_type_name(MODEL_TYPE_RERANKING), "reranking");
    assert_string_equal(model_type_name(MODEL_TYPE_LLM), "llm");
    assert_string_equal(model_type_name(MODEL_TYPE_AUTO), "llm");
}

static void test_model_unknown_type_suffix_refused(void **state)
{
    (void)state;
    const char *p = stories_path();
    config_t cfg;
    char err[512];
    char arg[PATH_MAX + 32];
    snprintf(arg, sizeof arg, "%s:chat", p);
    int rc = PARSE(&cfg, err, "--model", arg);
    ASSERT_REFUSED(rc, err, arg); /* treated as part of the (missing) file name */
    config_free(&cfg);

    snprintf(arg, sizeof arg, "%s:EMBEDDING", p); /* labels are case-sensitive */
    rc = PARSE(&cfg, err, "--model", arg);
    assert_int_equal(rc, -EINVAL);
    config_free(&cfg);
}

static void test_model_missing_file(void **state)
{
    (void)state;
    config_t cfg;
    char err[512];
    const char *missing = "/nonexistent-mesh-llm-dir/nope.gguf";
    int rc = PARSE(&cfg, err, "--model", missing);
    ASSERT_REFUSED(rc, err, missing);
    assert_int_equal(cfg.n_models, 0);
    config_free(&cfg);

    /* With a type suffix the message names the path without the suffix. */
    rc = PARSE(&cfg, err, "--model", "/nonexistent-mesh-llm-dir/nope.gguf:embedding");
    ASSERT_REFUSED(rc, err, missing);
    config_free(&cfg);

    rc = PARSE(&cfg, err, "--model", "");
    ASSERT_REFUSED(rc, err, "--model");
    config_free(&cfg);
}

static void test_model_missing_after_good_one_frees(void **state)
{
    (void)state;
    const char *p = stories_path();
    config_t cfg;
    char err[512];
    /* The first model is kept in cfg until config_free: ASan checks nothing leaks. */
    int rc = PARSE(&cfg, err, "--model", p, "--model", "/nonexistent-mesh-llm-dir/x.gguf");
    ASSERT_REFUSED(rc, err, "/nonexistent-mesh-llm-dir/x.gguf");
    config_free(&cfg);
}

static void test_model_directory_refused(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    const char *sub = tmp_subdir(&t, "dir.gguf");
    config_t cfg;
    char err[512];
    int rc = PARSE(&cfg, err, "--model", sub);
    ASSERT_REFUSED(rc, err, sub);
    config_free(&cfg);
    tmp_close(&t);
}

static void test_model_bare_name_from_home(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    tmp_subdir(&t, ".models");
    const char *file = tmp_file(&t, ".models/tinymodel.gguf");
    home_set(t.dir);

    /* A bare name (no '/') that is not a file here is looked up as ~/.models/NAME.gguf. */
    config_t cfg;
    char err[512];
    int rc = PARSE(&cfg, err, "--model", "tinymodel:embedding");
    if (rc != CONFIG_OK)
        fail_msg("--model tinymodel with $HOME/.models/tinymodel.gguf refused: %s", err);
    assert_int_equal(cfg.n_models, 1);
    assert_string_equal(cfg.models[0].name, "tinymodel");
    assert_string_equal(cfg.models[0].path, file);
    assert_int_equal(cfg.models[0].type, MODEL_TYPE_EMBEDDING);
    config_free(&cfg);

    /* An unknown bare name is refused and named. */
    rc = PARSE(&cfg, err, "--model", "no-such-model-anywhere");
    ASSERT_REFUSED(rc, err, "no-such-model-anywhere");
    config_free(&cfg);

    home_restore();
    tmp_close(&t);
}

/* --model NAME with no file anywhere: refused alone, asked of the mesh with --join. */
static void test_model_requested_by_name(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    home_set(t.dir);
    token_t tk;
    memset(&tk, 0, sizeof tk);
    memset(tk.id, 'a', ID_HEX_LEN);
    snprintf(tk.mesh_id, sizeof tk.mesh_id, "%s", "0123456789abcdef0123456789abcdef");
    memset(tk.secret, 7, sizeof tk.secret);
    snprintf(tk.addrs[0], TOKEN_ADDR_MAX, "%s", "127.0.0.1:4000");
    tk.n_addrs = 1;
    char tok[TOKEN_MAX_LEN];
    assert_int_equal(token_encode(&tk, tok, sizeof tok), 0);

    config_t cfg;
    char err[512];
    int rc = PARSE(&cfg, err, "--model", "Qwen-Missing", "--join", tok);
    if (rc != CONFIG_OK) fail_msg("--model NAME --join refused: %s", err);
    assert_int_equal(cfg.n_models, 0);
    assert_int_equal(cfg.n_requested, 1);
    assert_string_equal(cfg.requested[0], "Qwen-Missing");
    config_free(&cfg);

    /* the same name twice is asked for once; order of --join does not matter */
    rc = PARSE(&cfg, err, "--join", tok, "--model", "Qwen-Missing", "--model", "Qwen-Missing");
    assert_int_equal(rc, CONFIG_OK);
    assert_int_equal(cfg.n_requested, 1);
    config_free(&cfg);

    /* without a mesh to ask, a missing name is an error that says how to fix it */
    rc = PARSE(&cfg, err, "--model", "Qwen-Missing");
    ASSERT_REFUSED(rc, err, "Qwen-Missing");
    if (!strstr(err, "--join")) fail_msg("message does not mention --join: %s", err);
    config_free(&cfg);

    /* paths, .gguf names and typed names are files: never requests */
    const char *files[] = {"/nonexistent-mesh-llm-dir/x.gguf", "x.gguf", "Qwen-Missing:llm"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        rc = PARSE(&cfg, err, "--model", files[i], "--join", tok);
        if (rc != -EINVAL) fail_msg("--model %s --join accepted", files[i]);
        config_free(&cfg);
    }

    /* --client serves nothing, requested or not */
    rc = PARSE(&cfg, err, "--client", "--model", "Qwen-Missing", "--join", tok);
    ASSERT_REFUSED(rc, err, "--client");
    config_free(&cfg);

    home_restore();
    tmp_close(&t);
}

static void test_model_same_file_twice_dedups(void **state)
{
    (void)state;
    const char *p = stories_path();
    config_t cfg;
    char err[512];
    assert_int_equal(PARSE(&cfg, err, "--model", p, "--model", p), CONFIG_OK);
    assert_int_equal(cfg.n_models, 1);
    assert_string_equal(cfg.models[0].name, "stories260K");
    config_free(&cfg);
}

static void test_model_same_name_different_files_refused(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    tmp_subdir(&t, "a");
    tmp_subdir(&t, "b");
    const char *a = tmp_file(&t, "a/dup.gguf");
    const char *b = tmp_file(&t, "b/dup.GGUF");
    config_t cfg;
    char err[1024];
    int rc = PARSE(&cfg, err, "--model", a, "--model", b);
    ASSERT_REFUSED(rc, err, "dup");
    ASSERT_REFUSED(rc, err, a);
    ASSERT_REFUSED(rc, err, b);
    config_free(&cfg);

    /* Different names from different dirs are fine. */
    const char *c = tmp_file(&t, "b/other.gguf");
    assert_int_equal(PARSE(&cfg, err, "--model", a, "--model", c), CONFIG_OK);
    assert_int_equal(cfg.n_models, 2);
    assert_string_equal(cfg.models[0].name, "dup");
    assert_string_equal(cfg.models[1].name, "other");
    config_free(&cfg);
    tmp_close(&t);
}

/* ------------------------------------------------------------------------------------------
 * --models-dir
 * ---------------------------------------------------------------------------------------- */

static void test_models_dir_lists_sorted(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    const char *expected[8];
    size_t n = 0;
    for (int i = 0; i < 4; i++)
        expected[n++] = tmp_random_file(&t, "m", ".gguf");
    expected[n++] = tmp_file(&t, "Zeta.GGUF");
    expected[n++] = tmp_file(&t, "alpha.gguf");
    /* Not models: */
    tmp_file(&t, "readme.txt");
    tmp_file(&t, ".hidden.gguf");
    tmp_file(&t, "model.gguf.part");
    tmp_file(&t, "gguf");
    qsort(expected, n, sizeof expected[0], cmp_cstr);

    config_t cfg;
    char err[1024];
    int rc = PARSE(&cfg, err, "--models-dir", t.dir);
    if (rc != CONFIG_OK) fail_msg("--models-dir refused: %s", err);
    assert_string_equal(cfg.models_dir, t.dir);
    assert_int_equal(cfg.n_models, n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(cfg.models[i].path, expected[i]);
        char want[MODEL_NAME_MAX];
        const char *base = strrchr(expected[i], '/') + 1;
        snprintf(want, sizeof want, "%.*s", (int)(strlen(base) - 5), base);
        assert_string_equal(cfg.models[i].name, want);
        assert_int_equal(cfg.models[i].type, MODEL_TYPE_AUTO);
    }
    config_free(&cfg);

    /* The same directory twice, or a --model naming a file in it, does not duplicate. */
    rc = PARSE(&cfg, err, "--model", expected[0], "--models-dir", t.dir, "--models-dir", t.dir);
    if (rc != CONFIG_OK) fail_msg("repeated --models-dir refused: %s", err);
    assert_int_equal(cfg.n_models, n);
    config_free(&cfg);
    tmp_close(&t);
}

static void test_models_dir_empty_and_missing(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    config_t cfg;
    char err[1024];
    assert_int_equal(PARSE(&cfg, err, "--models-dir", t.dir), CONFIG_OK);
    assert_int_equal(cfg.n_models, 0);
    config_free(&cfg);
    tmp_close(&t);

    const char *missing = "/nonexistent-mesh-llm-models-dir";
    int rc = PARSE(&cfg, err, "--models-dir", missing);
    ASSERT_REFUSED(rc, err, missing);
    config_free(&cfg);

    /* A regular file is not a directory. */
    const char *p = stories_path();
    rc = PARSE(&cfg, err, "--models-dir", p);
    ASSERT_REFUSED(rc, err, "--models-dir");
    config_free(&cfg);
}

static void test_models_dir_name_clash_refused(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    tmp_file(&t, "same.gguf");
    tmp_file(&t, "same.GGUF");
    config_t cfg;
    char err[1024];
    int rc = PARSE(&cfg, err, "--models-dir", t.dir);
    ASSERT_REFUSED(rc, err, "same");
    config_free(&cfg);
    tmp_close(&t);
}

/* Each kind of bad entry is skipped with one note naming it and why; the good model stays. Any
 * of them used to stop the node (exit 2). */
static void test_models_dir_bad_entries_skipped(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    const char *good = tmp_file(&t, "good.gguf");
    char p[PATH_MAX];
    static const struct {
        const char *name, *why;
    } bad[] = {
        {"dangling.gguf", "dangling symlink"}, {"zero.gguf", "symlink to a character device"},
        {"dir.gguf", "a directory"},           {"fifo.gguf", "a FIFO"},
        {"loop.gguf", "symlink loop"},
    };
    snprintf(p, sizeof p, "%s/dangling.gguf", t.dir);
    assert_int_equal(symlink("/nonexistent-mesh-llm-target.gguf", p), 0);
    tmp_track(&t, p);
    snprintf(p, sizeof p, "%s/zero.gguf", t.dir);
    assert_int_equal(symlink("/dev/zero", p), 0);
    tmp_track(&t, p);
    tmp_subdir(&t, "dir.gguf");
    snprintf(p, sizeof p, "%s/fifo.gguf", t.dir);
    assert_int_equal(mkfifo(p, 0600), 0);
    tmp_track(&t, p);
    char q[PATH_MAX];
    snprintf(p, sizeof p, "%s/loop.gguf", t.dir);
    snprintf(q, sizeof q, "%s/loop2.gguf", t.dir);
    assert_int_equal(symlink(q, p), 0);
    tmp_track(&t, p);
    assert_int_equal(symlink(p, q), 0);
    tmp_track(&t, q);

    config_t cfg;
    char err[1024];
    int rc = PARSE(&cfg, err, "--models-dir", t.dir);
    if (rc != CONFIG_OK) fail_msg("a bad entry stopped the node: %s", err);
    assert_int_equal(cfg.n_models, 1);
    assert_string_equal(cfg.models[0].path, good);
    assert_non_null(cfg.notes);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[PATH_MAX + 64];
        snprintf(want, sizeof want, "%s/%s: %s", t.dir, bad[i].name, bad[i].why);
        if (!strstr(cfg.notes, want)) fail_msg("notes lack '%s':\n%s", want, cfg.notes);
    }
    /* one line per skipped entry (loop2.gguf is a loop too) */
    size_t lines = 0;
    for (const char *c = cfg.notes; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 6);
    config_free(&cfg);
    tmp_close(&t);
}

static void test_models_dir_limit(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    for (int i = 0; i < CONFIG_MAX_MODELS; i++) {
        char name[32];
        snprintf(name, sizeof name, "m%03d.gguf", i);
        tmp_file(&t, name);
    }
    config_t cfg;
    char err[1024];
    int rc = PARSE(&cfg, err, "--models-dir", t.dir);
    if (rc != CONFIG_OK) fail_msg("%d models refused: %s", CONFIG_MAX_MODELS, err);
    assert_int_equal(cfg.n_models, CONFIG_MAX_MODELS);
    assert_string_equal(cfg.models[0].name, "m000");
    assert_string_equal(cfg.models[CONFIG_MAX_MODELS - 1].name, "m063");
    config_free(&cfg);

    /* One more through --model: too many. */
    tmpdir_t t2;
    tmp_open(&t2);
    const char *extra = tmp_file(&t2, "extra.gguf");
    rc = PARSE(&cfg, err, "--models-dir", t.dir, "--model", extra);
    ASSERT_REFUSED(rc, err, "too many");
    config_free(&cfg);
    tmp_close(&t2);

    /* One more in the directory itself: refused as well. */
    tmp_file(&t, "m064.gguf");
    rc = PARSE(&cfg, err, "--models-dir", t.dir);
    ASSERT_REFUSED(rc, err, "--models-dir");
    config_free(&cfg);
    tmp_close(&t);
}

/* ------------------------------------------------------------------------------------------
 * secrets out of argv: --join @FILE, MESH_LLM_JOIN, --api-key-file, MESH_LLM_API_KEY
 * ---------------------------------------------------------------------------------------- */

/* An invite token of mesh `mesh` (32 hex) whose node id is made of `idc`. */
static void make_token(char *out, size_t outlen, char idc, const char *mesh)
{
    token_t tk;
    memset(&tk, 0, sizeof tk);
    memset(tk.id, idc, ID_HEX_LEN);
    snprintf(tk.mesh_id, sizeof tk.mesh_id, "%s", mesh);
    memset(tk.secret, 7, sizeof tk.secret);
    snprintf(tk.addrs[0], TOKEN_ADDR_MAX, "%s", "127.0.0.1:4000");
    tk.n_addrs = 1;
    assert_int_equal(token_encode(&tk, out, outlen), 0);
}

#define MESH_A "0123456789abcdef0123456789abcdef"
#define MESH_B "fedcba9876543210fedcba9876543210"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_join_from_file(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    char t1[TOKEN_MAX_LEN], t2[TOKEN_MAX_LEN], text[3 * TOKEN_MAX_LEN], arg[PATH_MAX + 2];
    make_token(t1, sizeof t1, 'a', MESH_A);
    make_token(t2, sizeof t2, 'b', MESH_A);
    const char *f = tmp_file(&t, "token");
    snprintf(text, sizeof text, "%s\n", t1);
    write_file(f, text);
    snprintf(arg, sizeof arg, "@%s", f);
    config_t cfg;
    char err[512];
    int rc = PARSE(&cfg, err, "--join", arg);
    if (rc != CONFIG_OK) fail_msg("--join @FILE refused: %s", err);
    assert_int_equal(cfg.n_joins, 1);
    assert_string_equal(cfg.joins[0].mesh_id, MESH_A);
    assert_int_equal(cfg.joins[0].id[0], 'a');
    assert_false(cfg.join_in_argv);
    config_free(&cfg);

    /* several tokens, one per line (or space separated), and --join TOKEN after them */
    snprintf(text, sizeof text, "  %s\r\n\n%s \n", t1, t2);
    write_file(f, text);
    assert_int_equal(PARSE(&cfg, err, "--join", arg, "--join", t1), CONFIG_OK);
    assert_int_equal(cfg.n_joins, 3);
    assert_int_equal(cfg.joins[1].id[0], 'b');
    assert_true(cfg.join_in_argv); /* the last one was on the command line */
    config_free(&cfg);

    /* a file of nothing, a missing file, a bad token, another mesh's token */
    write_file(f, "\n  \n");
    ASSERT_REFUSED(PARSE(&cfg, err, "--join", arg), err, "no invite token");
    config_free(&cfg);
    char missing[PATH_MAX + 16];
    snprintf(missing, sizeof missing, "@%s/none", t.dir);
    ASSERT_REFUSED(PARSE(&cfg, err, "--join", missing), err, "none");
    config_free(&cfg);
    write_file(f, "not-a-token\n");
    ASSERT_REFUSED(PARSE(&cfg, err, "--join", arg), err, "--join #1");
    config_free(&cfg);
    make_token(t2, sizeof t2, 'b', MESH_B);
    snprintf(text, sizeof text, "%s\n%s\n", t1, t2);
    write_file(f, text);
    ASSERT_REFUSED(PARSE(&cfg, err, "--join", arg), err, "another mesh");
    config_free(&cfg);
    tmp_close(&t);
}

/* --stun, --turn, --turn-user and the TURN password: from a file or $MESH_LLM_TURN_PASSWORD,
 * never from the command line */
static void test_turn_options(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    const char *f = tmp_file(&t, "turn-password");
    write_file(f, "pa ss:word\n");
    config_t cfg;
    char err[512];
    int rc = PARSE(&cfg, err, "--stun", "11.0.0.10:3478", "--stun", "stun.example.net", "--turn",
                   "turn:11.0.0.10:3478", "--turn-user", "alice", "--turn-password-file", f);
    if (rc != CONFIG_OK) fail_msg("TURN options refused: %s", err);
    assert_int_equal(cfg.n_stun, 2);
    assert_string_equal(cfg.stun[0], "11.0.0.10:3478");
    assert_string_equal(cfg.stun[1], "stun.example.net");
    assert_string_equal(cfg.turn, "turn:11.0.0.10:3478");
    assert_string_equal(cfg.turn_user, "alice");
    assert_string_equal(cfg.turn_password, "pa ss:word"); /* the final newline goes */
    config_free(&cfg);

    /* on the command line: refused, and the message points at the safe ways */
    ASSERT_REFUSED(PARSE(&cfg, err, "--turn-password", "hunter2"), err, "--turn-password-file");
    assert_null(strstr(err, "hunter2"));
    config_free(&cfg);

    /* the environment, unless a file gave it */
    setenv("MESH_LLM_TURN_PASSWORD", "from-env", 1);
    assert_int_equal(PARSE(&cfg, err, "--turn-user", "bob"), CONFIG_OK);
    assert_string_equal(cfg.turn_password, "from-env");
    config_free(&cfg);
    assert_int_equal(PARSE(&cfg, err, "--turn-password-file", f), CONFIG_OK);
    assert_string_equal(cfg.turn_password, "pa ss:word");
    config_free(&cfg);
    unsetenv("MESH_LLM_TURN_PASSWORD");

    /* an empty file, a missing one, more than 4 STUN servers */
    write_file(f, "\n");
    ASSERT_REFUSED(PARSE(&cfg, err, "--turn-password-file", f), err, "TURN password");
    config_free(&cfg);
    char missing[PATH_MAX + 16];
    snprintf(missing, sizeof missing, "%s/none", t.dir);
    ASSERT_REFUSED(PARSE(&cfg, err, "--turn-password-file", missing), err, "none");
    config_free(&cfg);
    ASSERT_REFUSED(PARSE(&cfg, err, "--stun", "a:1", "--stun", "b:1", "--stun", "c:1", "--stun",
                         "d:1", "--stun", "e:1"),
                   err, "at most 4");
    config_free(&cfg);
    tmp_close(&t);
}

static void test_join_file_too_big_refused(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    const char *f = tmp_file(&t, "huge");
    FILE *fp = fopen(f, "w");
    assert_non_null(fp);
    for (int i = 0; i < CONFIG_SECRET_FILE_MAX + 10; i++)
        fputc('a', fp);
    fclose(fp);
    char arg[PATH_MAX + 2];
    snprintf(arg, sizeof arg, "@%s", f);
    config_t cfg;
    char err[512];
    ASSERT_REFUSED(PARSE(&cfg, err, "--join", arg), err, "larger than 64 KiB");
    config_free(&cfg);
    ASSERT_REFUSED(PARSE(&cfg, err, "--api-key-file", f), err, "larger than 64 KiB");
    config_free(&cfg);
    tmp_close(&t);
}

static void test_join_from_env(void **state)
{
    (void)state;
    char t1[TOKEN_MAX_LEN], t2[TOKEN_MAX_LEN], text[3 * TOKEN_MAX_LEN];
    make_token(t1, sizeof t1, 'a', MESH_A);
    make_token(t2, sizeof t2, 'b', MESH_A);
    snprintf(text, sizeof text, "%s,%s", t1, t2);
    setenv("MESH_LLM_JOIN", text, 1);
    config_t cfg;
    char err[512];
    int rc = PARSE0(&cfg, err);
    if (rc != CONFIG_OK) fail_msg("MESH_LLM_JOIN refused: %s", err);
    assert_int_equal(cfg.n_joins, 2);
    assert_int_equal(cfg.joins[1].id[0], 'b');
    assert_false(cfg.join_in_argv);
    config_free(&cfg);
    /* --join wins over the environment */
    snprintf(text, sizeof text, "%s", t2);
    setenv("MESH_LLM_JOIN", text, 1);
    assert_int_equal(PARSE(&cfg, err, "--join", t1), CONFIG_OK);
    assert_int_equal(cfg.n_joins, 1);
    assert_int_equal(cfg.joins[0].id[0], 'a');
    config_free(&cfg);
    /* the env satisfies --client's need for a mesh */
    assert_int_equal(PARSE(&cfg, err, "--client"), CONFIG_OK);
    assert_int_equal(cfg.n_joins, 1);
    config_free(&cfg);
    setenv("MESH_LLM_JOIN", "garbage", 1);
    ASSERT_REFUSED(PARSE0(&cfg, err), err, "--join #1");
    config_free(&cfg);
}

static void test_api_key_from_file_and_env(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    const char *f = tmp_file(&t, "key");
    write_file(f, "s3cret-from-file\n");
    config_t cfg;
    char err[512];
    int rc = PARSE(&cfg, err, "--api-key-file", f);
    if (rc != CONFIG_OK) fail_msg("--api-key-file refused: %s", err);
    assert_string_equal(cfg.api_key, "s3cret-from-file"); /* the newline is not part of it */
    assert_false(cfg.api_key_in_argv);
    config_free(&cfg);
    /* the environment, when no flag gives a key */
    setenv("MESH_LLM_API_KEY", "from-env", 1);
    assert_int_equal(PARSE0(&cfg, err), CONFIG_OK);
    assert_string_equal(cfg.api_key, "from-env");
    assert_false(cfg.api_key_in_argv);
    config_free(&cfg);
    assert_int_equal(PARSE(&cfg, err, "--api-key-file", f), CONFIG_OK);
    assert_string_equal(cfg.api_key, "s3cret-from-file");
    config_free(&cfg);
    assert_int_equal(PARSE(&cfg, err, "--api-key", "in-argv"), CONFIG_OK);
    assert_string_equal(cfg.api_key, "in-argv");
    assert_true(cfg.api_key_in_argv); /* config_log_warnings warns about it */
    config_free(&cfg);
    unsetenv("MESH_LLM_API_KEY");
    /* refused: empty file, two lines, missing file */
    write_file(f, "\n");
    ASSERT_REFUSED(PARSE(&cfg, err, "--api-key-file", f), err, "must not be empty");
    config_free(&cfg);
    write_file(f, "one\ntwo\n");
    ASSERT_REFUSED(PARSE(&cfg, err, "--api-key-file", f), err, "one line");
    config_free(&cfg);
    char missing[PATH_MAX];
    snprintf(missing, sizeof missing, "%s/none", t.dir);
    ASSERT_REFUSED(PARSE(&cfg, err, "--api-key-file", missing), err, "--api-key-file");
    config_free(&cfg);
    tmp_close(&t);
}

static void test_allow_origin(void **state)
{
    (void)state;
    config_t cfg;
    char err[512];
    int rc = PARSE(&cfg, err, "--allow-origin", "http://localhost:5173", "--allow-origin",
                   "https://app.example.com/", "--allow-origin", "HTTP://LOCALHOST:5173");
    if (rc != CONFIG_OK) fail_msg("--allow-origin refused: %s", err);
    assert_int_equal(cfg.n_allow_origins, 2);
    assert_string_equal(cfg.allow_origins[0], "http://localhost:5173");
    assert_string_equal(cfg.allow_origins[1], "https://app.example.com");
    config_free(&cfg);
    const char *bad[] = {"*", "localhost:5173", "http://a/b", "null", "file://x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = PARSE(&cfg, err, "--allow-origin", bad[i]);
        if (rc != -EINVAL) fail_msg("--allow-origin '%s' accepted", bad[i]);
        ASSERT_REFUSED(rc, err, "--allow-origin needs an origin");
        config_free(&cfg);
    }
}

static void test_draft_and_mmproj(void **state)
{
    (void)state;
    config_t cfg;
    char err[512];
    tmpdir_t t;
    tmp_open(&t);
    const char *d = tmp_file(&t, "draft.gguf");
    const char *p = tmp_file(&t, "proj.gguf");
    char mm[PATH_MAX + 16];
    snprintf(mm, sizeof mm, "stories=%s", p);
    assert_int_equal(PARSE(&cfg, err, "--draft", d, "--mmproj", mm), CONFIG_OK);
    assert_string_equal(cfg.draft, d);
    assert_false(cfg.no_draft);
    assert_string_equal(config_mmproj_of(&cfg, "stories"), p);
    assert_null(config_mmproj_of(&cfg, "other"));
    config_free(&cfg);
    assert_int_equal(PARSE(&cfg, err, "--no-draft"), CONFIG_OK);
    assert_true(cfg.no_draft);
    assert_null(cfg.draft);
    config_free(&cfg);
    /* a catalog name is looked up in the models directory */
    const char *dir = tmp_subdir(&t, "models");
    char qwen[PATH_MAX];
    snprintf(qwen, sizeof qwen, "%s/qwen2.5-0.5b-instruct-q4_k_m.gguf", dir);
    ASSERT_REFUSED(PARSE(&cfg, err, "--models-dir", dir, "--draft", "Qwen2.5-0.5B-Instruct-Q4_K_M"),
                   err, "mesh-llm download Qwen2.5-0.5B-Instruct-Q4_K_M");
    config_free(&cfg);
    touch(qwen);
    tmp_track(&t, qwen);
    assert_int_equal(
        PARSE(&cfg, err, "--models-dir", dir, "--draft", "Qwen2.5-0.5B-Instruct-Q4_K_M"),
        CONFIG_OK);
    assert_string_equal(cfg.draft, qwen);
    config_free(&cfg);
    /* refusals, each naming what is wrong */
    ASSERT_REFUSED(PARSE(&cfg, err, "--draft", "/no/such/draft.gguf"), err, "no such file");
    config_free(&cfg);
    ASSERT_REFUSED(PARSE(&cfg, err, "--draft", "no-such-catalog-model"), err,
                   "not a catalog model");
    config_free(&cfg);
    ASSERT_REFUSED(PARSE(&cfg, err, "--draft", d, "--no-draft"), err, "contradict");
    config_free(&cfg);
    ASSERT_REFUSED(PARSE(&cfg, err, "--mmproj", p), err, "MODEL=PATH");
    config_free(&cfg);
    ASSERT_REFUSED(PARSE(&cfg, err, "--mmproj", "m=/no/such/proj.gguf"), err,
                   "not a readable file");
    config_free(&cfg);
    ASSERT_REFUSED(PARSE(&cfg, err, "--mmproj", mm, "--mmproj", mm), err, "two projectors");
    config_free(&cfg);
    tmp_close(&t);
}

/* Without --models-dir, ~/.models (where downloads land) is served: its files are known
 * models loaded on demand; the node stays idle; a name --model took is skipped, not refused. */
static void test_home_models_dir_served_by_default(void **state)
{
    (void)state;
    tmpdir_t t;
    tmp_open(&t);
    tmp_subdir(&t, ".models");
    const char *dl = tmp_file(&t, ".models/downloaded.gguf");
    tmp_file(&t, ".models/other.gguf.part"); /* a download in progress: not a model */
    const char *elsewhere = tmp_subdir(&t, "elsewhere");
    const char *mine = tmp_file(&t, "elsewhere/downloaded.gguf");
    const char *named = tmp_file(&t, "elsewhere/named.gguf");
    home_set(t.dir);
    config_t cfg;
    char err[1024];
    assert_int_equal(PARSE0(&cfg, err), CONFIG_OK);
    assert_int_equal(cfg.n_models, 1);
    assert_string_equal(cfg.models[0].path, dl);
    assert_true(cfg.models[0].from_dir);
    assert_null(cfg.models_dir);
    assert_true(config_idle(&cfg)); /* no arguments: still idle mode */
    config_free(&cfg);

    assert_int_equal(PARSE(&cfg, err, "--model", named), CONFIG_OK);
    assert_int_equal(cfg.n_models, 2);
    assert_false(cfg.models[0].from_dir);
    assert_true(cfg.models[1].from_dir);
    assert_false(config_idle(&cfg));
    config_free(&cfg);

    /* the same name as a --model file: the user's file wins, the other is noted */
    int rc = PARSE(&cfg, err, "--model", mine);
    if (rc != CONFIG_OK) fail_msg("a name clash with ~/.models refused the start: %s", err);
    assert_int_equal(cfg.n_models, 1);
    assert_string_equal(cfg.models[0].path, mine);
    assert_non_null(cfg.notes);
    assert_non_null(strstr(cfg.notes, dl));
    config_free(&cfg);

    /* an explicit --models-dir replaces it */
    assert_int_equal(PARSE(&cfg, err, "--models-dir", elsewhere), CONFIG_OK);
    assert_int_equal(cfg.n_models, 2);
    for (size_t i = 0; i < cfg.n_models; i++)
        assert_null(strstr(cfg.models[i].path, "/.models/"));
    config_free(&cfg);
    home_restore();
    tmp_close(&t);
}

int main(void)
{
    /* an empty HOME: the user's ~/.models (served by default) never shows up in a test */
    char home[] = "/tmp/mesh-llm-ut-home-XXXXXX";
    if (!mkdtemp(home)) return 1;
    setenv("HOME", home, 1);
#define T(f) cmocka_unit_test_setup_teardown(f, reset_getopt, cleanup)
    const struct CMUnitTest tests[] = {
        T(test_home_models_dir_served_by_default),
        T(test_defaults),
        T(test_boolean_flags),
        T(test_idle_mode),
        T(test_string_options),
        T(test_api_key_empty_refused),
        T(test_ctx_size),
        T(test_port_values),
        T(test_port_refused),
        T(test_port_equal_console_refused),
        T(test_max_body_size),
        T(test_max_body_size_refused),
        T(test_log_format),
        T(test_llamacpp_args),
        T(test_unknown_option),
        T(test_unknown_short_option_in_cluster_named),
        T(test_missing_value),
        T(test_stray_positional_refused),
        T(test_small_err_buffer_terminated),
        T(test_help_and_version),
        T(test_help_after_other_options),
        T(test_getopt_state_does_not_leak_between_parses),
        T(test_model_real_file),
        T(test_model_type_suffix),
        T(test_model_unknown_type_suffix_refused),
        T(test_model_missing_file),
        T(test_model_missing_after_good_one_frees),
        T(test_model_directory_refused),
        T(test_model_bare_name_from_home),
        T(test_model_requested_by_name),
        T(test_model_same_file_twice_dedups),
        T(test_model_same_name_different_files_refused),
        T(test_models_dir_lists_sorted),
        T(test_models_dir_empty_and_missing),
        T(test_models_dir_name_clash_refused),
        T(test_models_dir_limit),
        T(test_join_from_file),
        T(test_turn_options),
        T(test_join_file_too_big_refused),
        T(test_join_from_env),
        T(test_api_key_from_file_and_env),
        T(test_allow_origin),
        T(test_models_dir_bad_entries_skipped),
        T(test_draft_and_mmproj),
    };
#undef T
    int rc = cmocka_run_group_tests_name("config", tests, NULL, NULL);
    rmdir(home);
    return rc;
}

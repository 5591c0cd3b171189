/* Unit tests for the pure parts of child supervision: what a failed llama.cpp child's output
 * says (child_log.h), what /proc says about a child (procfs.h: CPU time, who holds a port) and
 * whether a file starts like a GGUF (model_file.h). Sample lines are llama.cpp's own (pinned
 * release), copied from real runs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "child_log.h"
#include "model_file.h"
#include "platform.h"
#include "procfs.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

typedef struct {
    const char *lines[8];
    child_fail_t kind;
    const char *reason; /* exact */
} case_t;

static const case_t CASES[] = {
    {{"0.00.000.517 I srv  llama_server: initializing ...",
      "0.00.003.585 E srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, "
      "port: 46413",
      "0.00.003.607 I srv    operator(): operator(): cleaning up before exit...",
      "0.00.003.853 E srv  llama_server: exiting due to HTTP server error"},
     CHILD_FAIL_PORT,
     "srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 46413"},
    {{"Starting RPC server v7.0.0", "  endpoint       : 127.0.0.1:46413",
      " Failed to create server socket"},
     CHILD_FAIL_PORT,
     " Failed to create server socket"},
    {{"error: invalid argument: --bogus-one", "0.00.000.265 I srv  llama_server: initializing ..."},
     CHILD_FAIL_ARGS,
     "error: invalid argument: --bogus-one"},
    {{"0.00.000.567 I srv  llama_server: initializing ...",
      "error while handling argument \"-np\": error: invalid value for n_parallel", "usage:",
      "-np,   --parallel N                     number of server slots (default: -1, -1 = auto)"},
     CHILD_FAIL_ARGS,
     "error while handling argument \"-np\": error: invalid value for n_parallel"},
    {{"0.00.004.080 E gguf_init_from_reader: invalid magic characters: 'XXXX', expected 'GGUF'",
      "0.00.004.140 E llama_model_load: error loading model: llama_model_loader: failed to load "
      "model from badmagic.gguf",
      "0.00.004.144 E llama_model_load_from_file_impl: failed to load model"},
     CHILD_FAIL_FILE,
     "gguf_init_from_reader: invalid magic characters: 'XXXX', expected 'GGUF'"},
    {{"0.00.004.002 E llama_model_load: error loading model: unknown model architecture: "
      "'fooarch'",
      "0.00.004.020 E llama_model_load_from_file_impl: failed to load model",
      "0.00.004.432 E srv  llama_server: exiting due to model loading error"},
     CHILD_FAIL_FILE,
     "unknown model architecture: 'fooarch'"},
    {{"0.00.004.197 E llama_model_load: error loading model: tensor 'blk.1.ffn_down.weight' data "
      "is not within the file bounds, model is corrupted or incomplete"},
     CHILD_FAIL_FILE,
     "tensor 'blk.1.ffn_down.weight' data is not within the file bounds, model is corrupted or "
     "incomplete"},
    /* unknown: the first error-level line is the cause, later ones its consequences */
    {{"0.00.004.187 I srv    load_model: loading model 'x.gguf'",
      "0.00.005.407 E llama_init_from_model: quantized V cache requires flash_attn to be enabled",
      "0.00.005.884 E common_fit_params: encountered an error while trying to fit params",
      "0.00.028.534 E srv  llama_server: exiting due to model loading error"},
     CHILD_FAIL_OTHER,
     "llama_init_from_model: quantized V cache requires flash_attn to be enabled"},
    {{"some output", "/src/llama-context.cpp:2260: GGML_ASSERT(n_outputs_max <= x) failed"},
     CHILD_FAIL_OTHER,
     "/src/llama-context.cpp:2260: GGML_ASSERT(n_outputs_max <= x) failed"},
    {{"0.00.000.1 I nothing to see", "all good"}, CHILD_FAIL_OTHER, ""},
    {{NULL}, CHILD_FAIL_OTHER, ""},
};

static void test_classify(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(CASES); i++) {
        size_t n = 0;
        while (n < 8 && CASES[i].lines[n])
            n++;
        char reason[512];
        child_fail_t k = child_log_classify(CASES[i].lines, n, reason, sizeof reason);
        if (k != CASES[i].kind)
            fail_msg("case %zu: %s, want %s", i, child_fail_name(k),
                     child_fail_name(CASES[i].kind));
        if (strcmp(reason, CASES[i].reason) != 0)
            fail_msg("case %zu: reason '%s', want '%s'", i, reason, CASES[i].reason);
    }
}

static void test_strip(void **state)
{
    (void)state;
    assert_string_equal(child_log_strip("0.00.118.628 E foo"), "foo");
    assert_string_equal(child_log_strip("0.00.118.628 I srv  x"), "srv  x");
    assert_string_equal(child_log_strip("plain line"), "plain line");
    assert_string_equal(child_log_strip("12 "), "12 ");
    assert_string_equal(child_log_strip(""), "");
}

/* ---- procfs ---- */

static void test_parse_stat(void **state)
{
    (void)state;
    uint64_t ticks = 0;
    char st = 0;
    /* a comm with spaces and parentheses */
    const char *s = "1234 (llama (srv) x) T 1 1234 1234 0 -1 4194304 2519 0 0 0 150 27 0 0 20 0 "
                    "5 0 100 0 0";
    assert_int_equal(procfs_parse_stat(s, &ticks, &st), 0);
    assert_int_equal(ticks, 177);
    assert_int_equal(st, 'T');
    assert_int_equal(procfs_parse_stat("garbage", &ticks, &st), -EINVAL);
    assert_int_equal(procfs_parse_stat("1 (x) R 1", &ticks, &st), -EINVAL);
    /* ourselves: running, some CPU time */
    assert_int_equal(plat_proc_cpu_ticks(getpid(), &ticks, &st), 0);
    assert_true(st == 'R' || st == 'S');
    assert_int_equal(plat_proc_cpu_ticks(-5, &ticks, &st), -ENOENT);
}

static const char NET_TCP[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n"
    "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 "
    "23456 1 0000000000000000 100 0 0 10 0\n"
    "   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 "
    "777 1 0000000000000000 20 4 30 10 -1\n"
    "   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 "
    "999 1 0000000000000000 100 0 0 10 0\n";

static void test_parse_listen_inode(void **state)
{
    (void)state;
    uint64_t ino = 0;
    assert_int_equal(procfs_parse_listen_inode(NET_TCP, 8080, &ino), 0);
    assert_int_equal(ino, 23456);
    assert_int_equal(procfs_parse_listen_inode(NET_TCP, 80, &ino), 0);
    assert_int_equal(ino, 999);
    /* 54321 is only a connected (not listening) socket */
    assert_int_equal(procfs_parse_listen_inode(NET_TCP, 0xD431, &ino), -ENOENT);
    assert_int_equal(procfs_parse_listen_inode(NET_TCP, 9, &ino), -ENOENT);
    assert_int_equal(procfs_parse_listen_inode("nonsense", 9, &ino), -EINVAL);
}

static void test_port_held_by(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    uint16_t port = ntohs(sa.sin_port);
    /* bound, not listening: nobody holds it */
    assert_int_equal(plat_port_held_by(getpid(), port), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(plat_port_held_by(getpid(), port), 1);
    assert_int_equal(plat_port_held_by(1, port), 0); /* not init's */
    close(fd);
    assert_int_equal(plat_port_held_by(getpid(), port), 0);
}

/* ---- model files ---- */

static void test_header(void **state)
{
    (void)state;
    char why[256];
    const uint8_t v3[] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    assert_int_equal(model_file_check_header(v3, sizeof v3, why, sizeof why), 0);
    const uint8_t bad[] = {'X', 'X', 'X', 'X', 3, 0, 0, 0};
    assert_int_equal(model_file_check_header(bad, sizeof bad, why, sizeof why), -EINVAL);
    assert_non_null(strstr(why, "not a GGUF file (it starts with 'XXXX'"));
    const uint8_t bin[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
    assert_int_equal(model_file_check_header(bin, sizeof bin, why, sizeof why), -EINVAL);
    assert_non_null(strstr(why, "\\x7fELF"));
    const uint8_t v1[] = {'G', 'G', 'U', 'F', 1, 0, 0, 0};
    assert_int_equal(model_file_check_header(v1, sizeof v1, why, sizeof why), -EINVAL);
    assert_non_null(strstr(why, "version 1"));
    assert_int_equal(model_file_check_header(v3, 3, why, sizeof why), -EINVAL);
    assert_non_null(strstr(why, "only 3 bytes"));
}

static void test_check_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/mesh-llm-mf-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p[256], why[256];
    file_id_t id, id2;
    /* missing */
    snprintf(p, sizeof p, "%s/none.gguf", dir);
    assert_int_equal(model_file_check(p, &id, why, sizeof why), -ENOENT);
    /* a FIFO: refused without waiting for a writer */
    snprintf(p, sizeof p, "%s/fifo.gguf", dir);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(model_file_check(p, &id, why, sizeof why), -EINVAL);
    assert_string_equal(why, "not a regular file");
    unlink(p);
    /* a directory */
    assert_int_equal(model_file_check(dir, &id, why, sizeof why), -EINVAL);
    /* a real model */
    const char *models = getenv("MESH_LLM_TEST_MODELS");
    char real[512];
    snprintf(real, sizeof real, "%s/stories260K.gguf", models ? models : "../shared/models");
    assert_int_equal(model_file_check(real, &id, why, sizeof why), 0);
    assert_int_equal(file_id_of(real, &id2), 0);
    assert_true(file_id_same(&id, &id2));
    /* a change of content is a change */
    snprintf(p, sizeof p, "%s/x.gguf", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(write(fd, "XXXX\3\0\0\0", 8) == 8);
    close(fd);
    assert_int_equal(model_file_check(p, &id, why, sizeof why), -EINVAL);
    assert_int_equal(file_id_of(p, &id2), 0);
    assert_true(file_id_same(&id, &id2));
    fd = open(p, O_WRONLY | O_APPEND);
    assert_true(write(fd, "x", 1) == 1);
    close(fd);
    assert_int_equal(file_id_of(p, &id2), 0);
    assert_false(file_id_same(&id, &id2)); /* its size moved */
    unlink(p);
    rmdir(dir);
}

static void test_degraded(void **state)
{
    (void)state;
    /* the lines llama-server prints when a draft cannot be used (it goes on without one) */
    assert_true(child_log_degraded("0.00.287.178 E spec common_specu: the target and draft vocabs "
                                   "are not compatible"));
    assert_true(child_log_degraded("0.00.287.331 E srv    load_model: failed to initialize "
                                   "speculative decoding context: draft model vocab type must "
                                   "match target model to use speculation"));
    /* info lines, unprefixed lines and other errors are not */
    assert_false(child_log_degraded("0.00.195.071 I common_speculative_init_result: loading draft "
                                    "model 'x.gguf'"));
    assert_false(child_log_degraded("failed to initialize speculative decoding context"));
    assert_false(child_log_degraded("0.00.100.000 E srv  load_model: failed to load model"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_strip),
        cmocka_unit_test(test_degraded),
        cmocka_unit_test(test_parse_stat),
        cmocka_unit_test(test_parse_listen_inode),
        cmocka_unit_test(test_port_held_by),
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_check_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

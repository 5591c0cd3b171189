/* Unit tests for src/base/devices.h: parsing `llama-server --list-devices`, and running it with a
 * timeout (fake executables written by the test). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices.h"

#define MIB (1024ULL * 1024)

static void parse(const char *text, int want_rc, uint64_t want_free, unsigned want_n)
{
    uint64_t fr = 99;
    unsigned n = 99;
    assert_int_equal(devices_parse(text, strlen(text), &fr, &n), want_rc);
    assert_int_equal(fr, want_free);
    assert_int_equal(n, want_n);
}

static void test_parse(void **state)
{
    (void)state;
    parse("Available devices:\n  (none)\n", 0, 0, 0);
    parse("ggml_cuda_init: found 2 CUDA devices\nAvailable devices:\n"
          "  CUDA0: NVIDIA GeForce RTX 4090 (24080 MiB, 23570 MiB free)\n"
          "  CUDA1: NVIDIA GeForce RTX 3090 (Ti) (24268 MiB, 1000 MiB free)\n",
          0, (23570 + 1000) * MIB, 2);
    parse("Available devices:\n  Metal: Apple M2 Max (98304 MiB, 98303 MiB free)", 0, 98303 * MIB,
          1);
    /* malformed lines are skipped; absurd figures ignored */
    parse("Available devices:\n  X: (lots MiB, some MiB free)\n  Y: y (1 MiB, 99999999999999 MiB "
          "free)\n  Z: z (10 MiB, 5 MiB free)\n",
          0, 5 * MIB, 1);
    parse("error: unknown argument: --list-devices\n", -EINVAL, 0, 0);
    parse("", -EINVAL, 0, 0);
}

static char dir[] = "/tmp/mesh-devices-XXXXXX";

static const char *script(const char *name, const char *body)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    chmod(path, 0755);
    return path;
}

static void test_detect(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    uint64_t fr;
    unsigned n;
    const char *ok = script("ok", "[ \"$1\" = --list-devices ] || exit 3\n"
                                  "echo noise >&2\necho 'Available devices:'\n"
                                  "echo '  Vulkan0: AMD (16368 MiB, 16000 MiB free)'");
    assert_int_equal(devices_detect(ok, 5000, &fr, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(fr, 16000 * MIB);
    /* a llama-server that hangs is killed at the timeout */
    const char *hang = script("hang", "exec sleep 30");
    assert_int_equal(devices_detect(hang, 200, &fr, &n), -ETIMEDOUT);
    assert_int_equal(devices_detect("/nonexistent/llama-server", 1000, &fr, &n), -ENOENT);
    unlink(ok);
    unlink(hang);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

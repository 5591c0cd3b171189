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
    devices_t d;
    d.n = 99;
    assert_int_equal(devices_parse(text, strlen(text), &d), want_rc);
    assert_int_equal(devices_free(&d), want_free);
    assert_int_equal(d.n, want_n);
}

static void dev_is(const devices_t *d, unsigned i, const char *name, const char *backend,
                   const char *desc, uint64_t total_mib, uint64_t free_mib)
{
    assert_true(i < d->n);
    assert_string_equal(d->dev[i].name, name);
    assert_string_equal(d->dev[i].backend, backend);
    assert_string_equal(d->dev[i].desc, desc);
    assert_int_equal(d->dev[i].total_bytes, total_mib * MIB);
    assert_int_equal(d->dev[i].free_bytes, free_mib * MIB);
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
    /* malformed lines are skipped; absurd figures ignored; a name must be a word */
    parse("Available devices:\n  X: (lots MiB, some MiB free)\n  Y: y (1 MiB, 99999999999999 MiB "
          "free)\n  Z: z (10 MiB, 5 MiB free)\n  bad name: w (10 MiB, 5 MiB free)\n"
          "  no colon (10 MiB, 5 MiB free)\n",
          0, 5 * MIB, 1);
    parse("error: unknown argument: --list-devices\n", -EINVAL, 0, 0);
    parse("", -EINVAL, 0, 0);
}

/* What each device is: name, backend, description and memory, from recorded listings */
static void test_parse_fields(void **state)
{
    (void)state;
    devices_t d;
    /* the pinned llama-server's stdout with the Vulkan flavour on Mesa's lavapipe
     * (GGML_VK_VISIBLE_DEVICES=0), recorded on this project's test machine */
    const char *lavapipe = "Available devices:\n  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 "
                           "MiB, 2048 MiB free)\n";
    assert_int_equal(devices_parse(lavapipe, strlen(lavapipe), &d), 0);
    assert_int_equal(d.n, 1);
    dev_is(&d, 0, "Vulkan0", "Vulkan", "llvmpipe (LLVM 15.0.6, 256 bits)", 2048, 2048);
    const char *cuda = "Available devices:\n"
                       "  CUDA0: NVIDIA H200 (143156 MiB, 142500 MiB free)\n"
                       "  CUDA1: NVIDIA GeForce RTX 3090 (Ti) (24268 MiB, 1000 MiB free)\n"
                       "  ROCm0: AMD Radeon RX 7900 XTX (24560 MiB, 24000 MiB free)\n"
                       "  Metal: Apple M2 Max (98304 MiB, 98303 MiB free)\n";
    assert_int_equal(devices_parse(cuda, strlen(cuda), &d), 0);
    assert_int_equal(d.n, 4);
    dev_is(&d, 0, "CUDA0", "CUDA", "NVIDIA H200", 143156, 142500);
    dev_is(&d, 1, "CUDA1", "CUDA", "NVIDIA GeForce RTX 3090 (Ti)", 24268, 1000);
    dev_is(&d, 2, "ROCm0", "ROCm", "AMD Radeon RX 7900 XTX", 24560, 24000);
    dev_is(&d, 3, "Metal", "Metal", "Apple M2 Max", 98304, 98303);
    /* bounded: more than DEVICES_MAX devices keep the first; a long description is cut, control
     * characters in it replaced */
    char big[8192];
    size_t off = (size_t)snprintf(big, sizeof big, "Available devices:\n");
    for (unsigned i = 0; i < DEVICES_MAX + 4; i++)
        off += (size_t)snprintf(big + off, sizeof big - off,
                                "  CUDA%u: G\x01%0120u (100 MiB, %u MiB free)\n", i, i, i + 1);
    assert_int_equal(devices_parse(big, off, &d), 0);
    assert_int_equal(d.n, DEVICES_MAX);
    assert_int_equal(strlen(d.dev[0].desc), DEVICE_DESC_MAX - 1);
    assert_int_equal(d.dev[0].desc[1], '?');
    assert_string_equal(d.dev[DEVICES_MAX - 1].name, "CUDA15");
    assert_int_equal(d.dev[DEVICES_MAX - 1].free_bytes, DEVICES_MAX * MIB);
}

/* --device: which lists are valid, and what selecting keeps (table) */
static void test_select(void **state)
{
    (void)state;
    static const struct {
        const char *list;
        int valid;
    } lists[] = {
        {"none", 0},
        {"Vulkan0", 0},
        {"CUDA0,CUDA1", 0},
        {"Metal", 0},
        {"a_b-c", 0},
        {"", -EINVAL},
        {",", -EINVAL},
        {"CUDA0,", -EINVAL},
        {",CUDA0", -EINVAL},
        {"CUDA0,,CUDA1", -EINVAL},
        {"CUDA 0", -EINVAL},
        {"CUDA0;rm", -EINVAL},
        {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", -EINVAL}, /* a name of 33 bytes */
    };
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        if (devices_list_valid(lists[i].list) != lists[i].valid)
            fail_msg("list %zu '%s'", i, lists[i].list);
    char many[256] = "";
    for (int i = 0; i <= DEVICES_MAX; i++) /* DEVICES_MAX + 1 names */
        snprintf(many + strlen(many), sizeof many - strlen(many), "%sD%d", i ? "," : "", i);
    assert_int_equal(devices_list_valid(many), -EINVAL);

    const char *listing = "Available devices:\n"
                          "  CUDA0: A (100 MiB, 90 MiB free)\n"
                          "  CUDA1: B (200 MiB, 190 MiB free)\n"
                          "  Vulkan0: C (300 MiB, 290 MiB free)\n";
    static const struct {
        const char *list;
        int rc;
        const char *kept; /* names, comma-separated, in the listing's order */
    } rows[] = {
        {"CUDA1", 0, "CUDA1"},
        {"Vulkan0,CUDA0", 0, "CUDA0,Vulkan0"},
        {"none", 0, ""},
        {"CUDA0,CUDA1,Vulkan0", 0, "CUDA0,CUDA1,Vulkan0"},
        {"CUDA2", -ENOENT, NULL},
        {"CUDA0,ROCm0", -ENOENT, NULL},
        {"bad list", -EINVAL, NULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        devices_t d;
        char err[512] = "";
        assert_int_equal(devices_parse(listing, strlen(listing), &d), 0);
        int rc = devices_select(&d, rows[i].list, err, sizeof err);
        if (rc != rows[i].rc) fail_msg("row %zu: rc %d", i, rc);
        if (rc) {
            assert_true(err[0] != '\0');
            continue;
        }
        char got[256] = "";
        for (unsigned k = 0; k < d.n; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", k ? "," : "",
                     d.dev[k].name);
        if (strcmp(got, rows[i].kept) != 0) fail_msg("row %zu: kept '%s'", i, got);
    }
    /* the error names the missing device and what is there */
    devices_t d;
    char err[512];
    assert_int_equal(devices_parse(listing, strlen(listing), &d), 0);
    assert_int_equal(devices_select(&d, "CUDA7", err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "CUDA7"));
    assert_non_null(strstr(err, "Vulkan0 (C)"));
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
    devices_t d;
    const char *ok = script("ok", "[ \"$1\" = --list-devices ] || exit 3\n"
                                  "echo noise >&2\necho 'Available devices:'\n"
                                  "echo '  Vulkan0: AMD (16368 MiB, 16000 MiB free)'");
    assert_int_equal(devices_detect(ok, 5000, &d), 0);
    assert_int_equal(d.n, 1);
    dev_is(&d, 0, "Vulkan0", "Vulkan", "AMD", 16368, 16000);
    /* a llama-server that hangs is killed at the timeout */
    const char *hang = script("hang", "exec sleep 30");
    assert_int_equal(devices_detect(hang, 200, &d), -ETIMEDOUT);
    assert_int_equal(devices_detect("/nonexistent/llama-server", 1000, &d), -ENOENT);
    unlink(ok);
    unlink(hang);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_parse_fields),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

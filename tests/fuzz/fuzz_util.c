/* libFuzzer target: the util.c helpers that parse outside input — argv_split (llamacpp_args
 * arrive in API bodies), llama_args_check (the allowlist applied to them), parse_u64 (numbers
 * from the CLI and the environment), model_name_from_path (paths from the API and the CLI).
 *
 * Oracles besides the sanitizers: argv_split round-trips (re-quoting its output and splitting
 * again gives the same argv); an accepted llamacpp_args string's normalized form is accepted
 * again and normalizes to itself; parse_u64 agrees with a plain reference implementation;
 * model_name_from_path never overruns a small output buffer and ends it with a NUL;
 * devices_parse keeps at most DEVICES_MAX devices, each with a word for a name and backend, a
 * description without control characters, and free <= 1 EiB. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "devices.h"
#include "llama_args.h"
#include "util.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static void check_devices(const uint8_t *data, size_t size)
{
    devices_t d;
    if (devices_parse((const char *)data, size, &d) != 0) {
        CHECK(d.n == 0);
        return;
    }
    CHECK(d.n <= DEVICES_MAX);
    for (unsigned i = 0; i < d.n; i++) {
        CHECK(d.dev[i].name[0] && strlen(d.dev[i].name) < DEVICE_NAME_MAX);
        CHECK(strlen(d.dev[i].backend) < DEVICE_BACKEND_MAX);
        size_t n = strlen(d.dev[i].desc);
        CHECK(n < DEVICE_DESC_MAX);
        for (size_t k = 0; k < n; k++)
            CHECK((unsigned char)d.dev[i].desc[k] >= 0x20 && d.dev[i].desc[k] != 0x7f);
        CHECK(d.dev[i].free_bytes <= (1ULL << 40) * 1024 * 1024);
    }
}

static int ref_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!*s) return -EINVAL;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -EINVAL;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -EINVAL;
        v = v * 10 + d;
    }
    if (v < min || v > max) return -EINVAL;
    *out = v;
    return 0;
}

static void check_parse_u64(const char *s, uint64_t min, uint64_t max)
{
    uint64_t a = 0, b = 0;
    int ra = parse_u64(s, min, max, &a), rb = ref_parse_u64(s, min, max, &b);
    CHECK(ra == rb);
    if (ra == 0) CHECK(a == b && a >= min && a <= max);
}

/* Quote one argument so that argv_split reads it back verbatim: '...' with ' written '\''. */
static void quote_arg(buf_t *b, const char *a)
{
    buf_append(b, "'", 1);
    for (const char *p = a; *p; p++) {
        if (*p == '\'')
            buf_append(b, "'\\''", 4);
        else
            buf_append(b, p, 1);
    }
    buf_append(b, "' ", 2);
}

static void check_argv_split(const char *s)
{
    char **av = NULL;
    int n = argv_split(s, &av);
    CHECK(n >= 0 || n == -EINVAL || n == -ENOMEM);
    if (n < 0) return;
    size_t slen = strlen(s);
    buf_t q;
    buf_init(&q, SIZE_MAX / 8);
    for (int i = 0; i < n; i++) {
        CHECK(av[i] != NULL);
        CHECK(strlen(av[i]) <= slen);
        quote_arg(&q, av[i]);
    }
    CHECK(av[n] == NULL);
    char **av2 = NULL;
    int n2 = argv_split(q.data ? q.data : "", &av2);
    CHECK(n2 == n);
    for (int i = 0; i < n; i++)
        CHECK(strcmp(av[i], av2[i]) == 0);
    argv_free(av2);
    argv_free(av);
    buf_free(&q);
}

static void check_name_from_path(const char *s, size_t outlen)
{
    char *out = malloc(outlen);
    if (!out) return;
    int rc = model_name_from_path(s, out, outlen);
    CHECK(rc == 0 || rc == -EINVAL);
    if (rc == 0) {
        CHECK(memchr(out, '\0', outlen) != NULL);
        CHECK(out[0] != '\0' && strchr(out, '/') == NULL);
    }
    free(out);
}

static void check_llama_args(const char *s)
{
    char err[512] = "", *canon = NULL;
    int rc = llama_args_check(s, LLAMA_ARGS_CLIENT, &canon, err, sizeof err);
    CHECK(rc == 0 || rc == -EPERM || rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
    if (rc == 0) {
        char *again = NULL;
        CHECK(llama_args_check(canon, LLAMA_ARGS_CLIENT, &again, err, sizeof err) == 0);
        CHECK(strcmp(again, canon) == 0);
        free(again);
        free(canon);
    } else {
        CHECK(canon == NULL && err[0] != '\0');
    }
    rc = llama_args_check(s, LLAMA_ARGS_OPERATOR, NULL, err, sizeof err);
    CHECK(rc == 0 || rc == -EPERM || rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_devices(data, size); /* the raw bytes: NULs and all */
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = '\0'; /* the helpers take C strings: the input up to its first NUL */

    check_argv_split(s);
    check_llama_args(s);

    check_parse_u64(s, 0, UINT64_MAX);
    check_parse_u64(s, 1, 65535);
    check_parse_u64(s, 1, 1u << 24);

    check_name_from_path(s, 1);
    check_name_from_path(s, 8);
    check_name_from_path(s, MODEL_NAME_MAX);

    CHECK(slice_ieq(s, strlen(s), s));
    free(s);
    return 0;
}

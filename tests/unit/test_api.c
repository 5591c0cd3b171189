/* Unit tests for the pure helpers of src/app/api_openai.h (api_key_ok, the paths a tunnel may
 * reach) and the API's reading of a body's "model" (core/request.h's model_rc / model / err,
 * what api_body_model answered before the body was parsed once). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api_openai.h"
#include "request.h"
#include "status_doc.h"

/* ------------------------------------------------------------------------------------------
 * the body's "model" (request_parse)
 * ---------------------------------------------------------------------------------------- */

static void copy(char *dst, size_t dl, const char *src)
{
    size_t n = strlen(src);
    if (dl == 0) return;
    if (n >= dl) n = dl - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int model_of(const char *body, size_t len, char *out, size_t outlen, char *err,
                    size_t errlen)
{
    request_t rq;
    request_parse(&rq, "/v1/chat/completions", body, len);
    if (rq.model_rc == REQUEST_MODEL_FOUND) copy(out, outlen, rq.model);
    copy(err, errlen, rq.err);
    return rq.model_rc;
}

/* Run model_of on a heap copy of exactly strlen(body) bytes (no NUL terminator), so
 * ASan catches any read past the length. */
static int body_model(const char *body, char *out, size_t outlen, char *err, size_t errlen)
{
    size_t len = strlen(body);
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, body, len);
    memset(out, 'Z', outlen);
    if (outlen) out[outlen - 1] = '\0';
    memset(err, 0, errlen);
    int rc = model_of(copy, len, out, outlen, err, errlen);
    free(copy);
    return rc;
}

static void expect_found(const char *body, const char *want)
{
    char out[128], err[256];
    int rc = body_model(body, out, sizeof out, err, sizeof err);
    if (rc != REQUEST_MODEL_FOUND)
        fail_msg("model_of(%s) returned %d (%s), expected FOUND '%s'", body, rc, err, want);
    assert_string_equal(out, want);
}

static void expect_absent(const char *body)
{
    char out[128], err[256];
    int rc = body_model(body, out, sizeof out, err, sizeof err);
    if (rc != REQUEST_MODEL_ABSENT)
        fail_msg("model_of(%s) returned %d (%s), expected ABSENT", body, rc, err);
}

static void expect_invalid(const char *body)
{
    char out[128], err[256];
    int rc = body_model(body, out, sizeof out, err, sizeof err);
    if (rc != -EINVAL) fail_msg("model_of(%s) returned %d, expected -EINVAL", body, rc);
    if (err[0] == '\0') fail_msg("model_of(%s) failed without a message", body);
    assert_true(strlen(err) < sizeof err);
}

static void test_body_model_found(void **state)
{
    (void)state;
    expect_found("{\"model\":\"stories260K\",\"messages\":[]}", "stories260K");
    expect_found("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"model\":\"m\"}", "m");
    expect_found("  {\n \"model\" : \"a b c\" }\n ", "a b c");
    expect_found("{\"model\":\"caf\\u00e9\"}", "caf\xc3\xa9"); /* escapes are decoded */
    expect_found("{\"model\":\"x/y:z\"}", "x/y:z");
    /* A nested "model" does not shadow the top-level one. */
    expect_found("{\"extra\":{\"model\":\"inner\"},\"model\":\"outer\"}", "outer");
}

static void test_body_model_absent(void **state)
{
    (void)state;
    expect_absent("{}");
    expect_absent("{\"messages\":[]}");
    expect_absent("{\"model\":null}");
    expect_absent("{\"Model\":\"case-matters\"}");
    expect_absent("{\"extra\":{\"model\":\"nested only\"}}");
}

static void test_body_model_wrong_type(void **state)
{
    (void)state;
    expect_invalid("{\"model\":\"\"}");
    expect_invalid("{\"model\":1}");
    expect_invalid("{\"model\":0}");
    expect_invalid("{\"model\":1.5}");
    expect_invalid("{\"model\":true}");
    expect_invalid("{\"model\":false}");
    expect_invalid("{\"model\":{}}");
    expect_invalid("{\"model\":[\"a\"]}");
    expect_invalid("{\"model\":{\"name\":\"a\"}}");

    char out[64], err[256];
    assert_int_equal(body_model("{\"model\":42}", out, sizeof out, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "model"));
}

static void test_body_model_not_json(void **state)
{
    (void)state;
    expect_invalid("");
    expect_invalid(" ");
    expect_invalid("not json");
    expect_invalid("{");
    expect_invalid("{\"model\":\"a\"");
    expect_invalid("{\"model\":\"a\",}");
    expect_invalid("{'model':'a'}");
    expect_invalid("{model:\"a\"}");
    expect_invalid("{\"model\":\"a\"} trailing");
    expect_invalid("{\"model\":\"a\"}{}");
    expect_invalid("{\"model\":\"unterminated}");
    expect_invalid("{\"model\":\"bad \\x escape\"}");
    expect_invalid("{\"model\":\"\xff\xfe\"}"); /* invalid UTF-8 */
    /* An embedded NUL must not truncate the name silently. */
    expect_invalid("{\"model\":\"a\\u0000b\"}");

    char out[64], err[256];
    assert_int_equal(body_model("nope", out, sizeof out, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "JSON"));
}

static void test_body_model_not_object(void **state)
{
    (void)state;
    expect_invalid("[]");
    expect_invalid("[{\"model\":\"a\"}]");
    expect_invalid("\"model\"");
    expect_invalid("42");
    expect_invalid("null");
    expect_invalid("true");
}

static void test_body_model_duplicate_keys(void **state)
{
    (void)state;
    expect_invalid("{\"model\":\"a\",\"model\":\"b\"}");
    expect_invalid("{\"model\":\"a\",\"model\":\"a\"}");
    expect_invalid("{\"model\":\"a\",\"stream\":true,\"stream\":false}");
    expect_invalid("{\"model\":\"a\",\"x\":{\"k\":1,\"k\":2}}");
}

static void test_body_model_length_respected(void **state)
{
    (void)state;
    /* Only the first len bytes count: the rest of the buffer is ignored. */
    const char buf[] = "{\"model\":\"a\"}GARBAGE";
    char out[16], err[128];
    size_t len = strlen("{\"model\":\"a\"}");
    assert_int_equal(model_of(buf, len, out, sizeof out, err, sizeof err), REQUEST_MODEL_FOUND);
    assert_string_equal(out, "a");
    assert_int_equal(model_of(buf, len - 1, out, sizeof out, err, sizeof err), -EINVAL);
    assert_int_equal(model_of(buf, 0, out, sizeof out, err, sizeof err), -EINVAL);
    assert_true(err[0] != '\0');
}

/* a name of n bytes: m... (n - tail bytes) then tail */
static const char *named(char *buf, size_t n, const char *tail)
{
    size_t t = strlen(tail);
    strcpy(buf, "{\"model\":\"");
    memset(buf + 10, 'm', n - t);
    strcpy(buf + 10 + n - t, tail);
    strcat(buf, "\"}");
    return buf;
}

static void test_body_model_too_long(void **state)
{
    (void)state;
    char out[CATALOG_NAME_MAX], err[256], body[400], want[CATALOG_NAME_MAX];
    /* CATALOG_NAME_MAX - 1 bytes + NUL fit exactly. */
    assert_int_equal(
        body_model(named(body, CATALOG_NAME_MAX - 1, ""), out, sizeof out, err, sizeof err),
        REQUEST_MODEL_FOUND);
    memset(want, 'm', CATALOG_NAME_MAX - 1);
    want[CATALOG_NAME_MAX - 1] = '\0';
    assert_string_equal(out, want);

    memset(err, 0, sizeof err);
    assert_int_equal(
        body_model(named(body, CATALOG_NAME_MAX, ""), out, sizeof out, err, sizeof err), -EINVAL);
    assert_string_equal(err, "'model' is too long");
    assert_int_equal(out[0], 'Z'); /* nothing written on failure */

    /* Multi-byte UTF-8 counts in bytes: "\u00e9" is two bytes. */
    assert_int_equal(
        body_model(named(body, CATALOG_NAME_MAX + 4, "\\u00e9"), out, sizeof out, err, sizeof err),
        -EINVAL);
    assert_int_equal(
        body_model(named(body, CATALOG_NAME_MAX + 3, "\\u00e9"), out, sizeof out, err, sizeof err),
        REQUEST_MODEL_FOUND);
    assert_string_equal(out + CATALOG_NAME_MAX - 3, "\xc3\xa9");

    /* A very long name. */
    size_t n = 5000;
    char *big = malloc(n + 32);
    assert_non_null(big);
    assert_int_equal(body_model(named(big, n, ""), out, sizeof out, err, sizeof err), -EINVAL);
    free(big);
}

static void test_body_model_deep_nesting(void **state)
{
    (void)state;
    /* Deeply nested input must fail cleanly (no stack exhaustion). */
    size_t depth = 100000;
    char *body = malloc(2 * depth + 32);
    assert_non_null(body);
    char *p = body;
    p += sprintf(p, "{\"model\":\"m\",\"x\":");
    memset(p, '[', depth);
    p += depth;
    memset(p, ']', depth);
    p += depth;
    strcpy(p, "}");
    char out[16], err[256];
    assert_int_equal(body_model(body, out, sizeof out, err, sizeof err), -EINVAL);
    assert_true(err[0] != '\0');
    free(body);

    /* Moderate nesting is fine. */
    expect_found("{\"model\":\"m\",\"x\":[[[[[[[[[[{\"a\":[1,2,{\"b\":null}]}]]]]]]]]]]}", "m");
}

/* ------------------------------------------------------------------------------------------
 * api_key_ok
 * ---------------------------------------------------------------------------------------- */

static void test_key_ok_correct(void **state)
{
    (void)state;
    assert_true(api_key_ok("Bearer s3cr3t-key", "s3cr3t-key"));
    assert_true(api_key_ok("bearer s3cr3t-key", "s3cr3t-key"));
    assert_true(api_key_ok("BEARER s3cr3t-key", "s3cr3t-key"));
    assert_true(api_key_ok("BeArEr s3cr3t-key", "s3cr3t-key"));
    /* Extra spaces between the scheme and the token are tolerated. */
    assert_true(api_key_ok("Bearer   s3cr3t-key", "s3cr3t-key"));
}

static void test_key_ok_wrong(void **state)
{
    (void)state;
    const char *key = "s3cr3t-key";
    assert_false(api_key_ok("Bearer wrong", key));
    assert_false(api_key_ok("Bearer S3CR3T-KEY", key)); /* the key itself is case-sensitive */
    assert_false(api_key_ok("Bearer s3cr3t-ke", key));  /* prefix */
    assert_false(api_key_ok("Bearer s", key));
    assert_false(api_key_ok("Bearer s3cr3t-keyX", key)); /* key plus extra chars */
    assert_false(api_key_ok("Bearer s3cr3t-key s3cr3t-key", key));
    assert_false(api_key_ok("Bearer Xs3cr3t-key", key));
    assert_false(api_key_ok("Bearer ", key));
    assert_false(api_key_ok("Bearer", key));
    assert_false(api_key_ok("", key));
}

static void test_key_ok_scheme_required(void **state)
{
    (void)state;
    const char *key = "s3cr3t-key";
    assert_false(api_key_ok("s3cr3t-key", key)); /* missing "Bearer " */
    assert_false(api_key_ok("Bearers3cr3t-key", key));
    assert_false(api_key_ok("Basic s3cr3t-key", key));
    assert_false(api_key_ok("Token s3cr3t-key", key));
    assert_false(api_key_ok(" Bearer s3cr3t-key", key));
    assert_false(api_key_ok("Bear s3cr3t-key", key));
}

static void test_key_ok_null_header(void **state)
{
    (void)state;
    assert_false(api_key_ok(NULL, "s3cr3t-key"));
}

static void test_key_ok_long_keys(void **state)
{
    (void)state;
    size_t n = 10000;
    char *key = malloc(n + 1);
    char *hdr = malloc(n + 8);
    assert_non_null(key);
    assert_non_null(hdr);
    for (size_t i = 0; i < n; i++)
        key[i] = (char)('a' + (i % 26));
    key[n] = '\0';
    strcpy(hdr, "Bearer ");
    strcat(hdr, key);
    assert_true(api_key_ok(hdr, key));
    hdr[7 + n - 1] ^= 1; /* differ only in the last byte */
    assert_false(api_key_ok(hdr, key));
    hdr[7 + n - 1] ^= 1;
    hdr[7] ^= 1; /* differ only in the first byte */
    assert_false(api_key_ok(hdr, key));
    free(key);
    free(hdr);
}

/* ------------------------------------------------------------------------------------------
 * What a request may reach, by where it comes from
 * ---------------------------------------------------------------------------------------- */

/* A mesh member's tunnel: the inference API only, whatever the request (each request of a
 * pipelined connection is checked, see test_security_http.py). */
static void test_tunnel_paths(void **state)
{
    (void)state;
    const char *ok[] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                        "/v1/models",           "/v1/rerank",      "/health"};
    const char *refused[] = {"/api/v1/load",
                             "/api/v1/unload",
                             "/api/v0/load",
                             "/api/v1/models",
                             "/api/v1/stats",
                             "/api/status",
                             "/api/assign",
                             "/api/unassign",
                             "/v1",
                             "/healthz",
                             "/health/x",
                             "/V1/models",
                             ""};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!api_path_allowed(HTTPD_PEER_TUNNEL, ok[i])) fail_msg("tunnel refused %s", ok[i]);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (api_path_allowed(HTTPD_PEER_TUNNEL, refused[i]))
            fail_msg("tunnel allowed '%s'", refused[i]);
        /* local and network clients reach everything (API key and web guard apply) */
        assert_true(api_path_allowed(HTTPD_PEER_LOOPBACK, refused[i]));
        assert_true(api_path_allowed(HTTPD_PEER_NETWORK, refused[i]));
    }
}

/* The invite token (mesh secret) in /api/status: loopback clients naming a loopback host. */
static void test_secrets_only_for_loopback(void **state)
{
    (void)state;
    assert_true(mgmt_may_see_secrets(HTTPD_PEER_LOOPBACK, "127.0.0.1:3131"));
    assert_true(mgmt_may_see_secrets(HTTPD_PEER_LOOPBACK, "localhost:3131"));
    assert_true(mgmt_may_see_secrets(HTTPD_PEER_LOOPBACK, "[::1]:3131"));
    assert_false(mgmt_may_see_secrets(HTTPD_PEER_NETWORK, "127.0.0.1:3131"));
    assert_false(mgmt_may_see_secrets(HTTPD_PEER_NETWORK, "192.168.1.5:3131"));
    assert_false(mgmt_may_see_secrets(HTTPD_PEER_TUNNEL, "127.0.0.1:3131"));
    /* DNS rebinding: a page's own name resolving to 127.0.0.1 */
    assert_false(mgmt_may_see_secrets(HTTPD_PEER_LOOPBACK, "evil.example:3131"));
    assert_false(mgmt_may_see_secrets(HTTPD_PEER_LOOPBACK, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_body_model_found),
        cmocka_unit_test(test_body_model_absent),
        cmocka_unit_test(test_body_model_wrong_type),
        cmocka_unit_test(test_body_model_not_json),
        cmocka_unit_test(test_body_model_not_object),
        cmocka_unit_test(test_body_model_duplicate_keys),
        cmocka_unit_test(test_body_model_length_respected),
        cmocka_unit_test(test_body_model_too_long),
        cmocka_unit_test(test_body_model_deep_nesting),
        cmocka_unit_test(test_key_ok_correct),
        cmocka_unit_test(test_key_ok_wrong),
        cmocka_unit_test(test_key_ok_scheme_required),
        cmocka_unit_test(test_key_ok_null_header),
        cmocka_unit_test(test_key_ok_long_keys),
        cmocka_unit_test(test_tunnel_paths),
        cmocka_unit_test(test_secrets_only_for_loopback),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}

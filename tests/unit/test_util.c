/* Unit tests for the pure helpers in src/base/util.h. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ------------------------------------------------------------------------------------------
 * buf_t
 * ---------------------------------------------------------------------------------------- */

static void test_buf_init_is_empty(void **state)
{
    (void)state;
    buf_t b;
    memset(&b, 0xAB, sizeof b);
    buf_init(&b, 100);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap_alloc, 0);
    assert_int_equal(b.limit, 100);
    buf_free(&b);
}

static void test_buf_append_basic(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 1024);
    assert_int_equal(buf_append(&b, "hello", 5), 0);
    assert_int_equal(b.len, 5);
    assert_non_null(b.data);
    assert_memory_equal(b.data, "hello", 5);
    assert_int_equal(b.data[5], '\0'); /* always NUL-terminated */
    assert_true(b.cap_alloc >= 6);

    assert_int_equal(buf_append(&b, ", world", 7), 0);
    assert_int_equal(b.len, 12);
    assert_string_equal(b.data, "hello, world");
    buf_free(&b);
}

static void test_buf_append_zero_len(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 16);
    assert_int_equal(buf_append(&b, "", 0), 0);
    assert_int_equal(b.len, 0);
    assert_non_null(b.data);
    assert_string_equal(b.data, "");
    buf_free(&b);

    /* Zero-length append into a zero-limit buffer is still allowed. */
    buf_init(&b, 0);
    assert_int_equal(buf_append(&b, "", 0), 0);
    assert_int_equal(b.len, 0);
    assert_int_equal(buf_append(&b, "x", 1), -E2BIG);
    assert_int_equal(b.len, 0);
    buf_free(&b);
}

static void test_buf_append_binary_with_nul(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 64);
    const char bin[] = {'a', '\0', 'b', '\0', 'c'};
    assert_int_equal(buf_append(&b, bin, sizeof bin), 0);
    assert_int_equal(b.len, sizeof bin);
    assert_memory_equal(b.data, bin, sizeof bin);
    assert_int_equal(b.data[sizeof bin], '\0');
    buf_free(&b);
}

static void test_buf_append_grows_across_many_reallocs(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 1 << 20);
    char chunk[97];
    for (size_t i = 0; i < sizeof chunk; i++)
        chunk[i] = (char)('A' + (i % 26));
    size_t total = 0;
    for (int i = 0; i < 200; i++) {
        assert_int_equal(buf_append(&b, chunk, sizeof chunk), 0);
        total += sizeof chunk;
        assert_int_equal(b.len, total);
        assert_true(b.cap_alloc > b.len);
    }
    for (size_t off = 0; off < total; off += sizeof chunk)
        assert_memory_equal(b.data + off, chunk, sizeof chunk);
    assert_int_equal(b.data[total], '\0');
    buf_free(&b);
}

static void test_buf_limit_exact_fit(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 10);
    assert_int_equal(buf_append(&b, "0123456789", 10), 0); /* exactly the limit */
    assert_int_equal(b.len, 10);
    assert_string_equal(b.data, "0123456789");
    /* Even one more byte is refused. */
    assert_int_equal(buf_append(&b, "x", 1), -E2BIG);
    /* A zero-length append at the limit is fine. */
    assert_int_equal(buf_append(&b, "", 0), 0);
    assert_int_equal(b.len, 10);
    buf_free(&b);
}

static void test_buf_limit_refusal_leaves_buffer_unchanged(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 8);
    assert_int_equal(buf_append(&b, "abcde", 5), 0);
    char *data_before = b.data;
    size_t cap_before = b.cap_alloc;

    assert_int_equal(buf_append(&b, "fghi", 4), -E2BIG); /* 9 > 8 */
    assert_ptr_equal(b.data, data_before);
    assert_int_equal(b.cap_alloc, cap_before);
    assert_int_equal(b.len, 5);
    assert_string_equal(b.data, "abcde");
    assert_int_equal(b.limit, 8);

    /* Something that fits still works afterwards. */
    assert_int_equal(buf_append(&b, "fgh", 3), 0);
    assert_string_equal(b.data, "abcdefgh");
    buf_free(&b);
}

static void test_buf_limit_huge_append_refused(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 1000);
    assert_int_equal(buf_append(&b, "ab", 2), 0);
    /* A length that would overflow len + extra must be refused, not wrap around. The data
     * pointer is never read on refusal. */
    assert_int_equal(buf_append(&b, "x", SIZE_MAX), -E2BIG);
    assert_int_equal(buf_append(&b, "x", SIZE_MAX - 1), -E2BIG);
    static char big[999];
    assert_int_equal(buf_append(&b, big, sizeof big), -E2BIG); /* 2 + 999 > 1000 */
    assert_int_equal(b.len, 2);
    assert_string_equal(b.data, "ab");
    buf_free(&b);
}

static void test_buf_limit_refusal_on_fresh_buffer(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 3);
    assert_int_equal(buf_append(&b, "abcd", 4), -E2BIG);
    assert_null(b.data); /* nothing allocated */
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap_alloc, 0);
    buf_free(&b);
}

static void test_buf_printf(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 1024);
    assert_int_equal(buf_printf(&b, "%d-%s", 42, "x"), 0);
    assert_string_equal(b.data, "42-x");
    assert_int_equal(b.len, 4);
    assert_int_equal(buf_printf(&b, " %05.1f|%c", 3.14159, 'z'), 0);
    assert_string_equal(b.data, "42-x 003.1|z");
    assert_int_equal(b.len, strlen("42-x 003.1|z"));
    /* Empty output is fine. */
    assert_int_equal(buf_printf(&b, "%s", ""), 0);
    assert_int_equal(b.len, strlen("42-x 003.1|z"));
    buf_free(&b);
}

static void test_buf_printf_on_empty_buffer_with_empty_output(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 4);
    assert_int_equal(buf_printf(&b, "%s", ""), 0);
    assert_int_equal(b.len, 0);
    assert_non_null(b.data);
    assert_string_equal(b.data, "");
    buf_free(&b);
}

static void test_buf_printf_large_output(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 10000);
    assert_int_equal(buf_printf(&b, "%*s", 5000, "end"), 0);
    assert_int_equal(b.len, 5000);
    assert_int_equal(strlen(b.data), 5000);
    assert_string_equal(b.data + 4997, "end");
    assert_int_equal(b.data[0], ' ');
    buf_free(&b);
}

static void test_buf_printf_limit(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 6);
    assert_int_equal(buf_printf(&b, "%s", "abc"), 0);
    char *data_before = b.data;
    /* "defg" would make 7 > 6: refused, nothing written. */
    assert_int_equal(buf_printf(&b, "%s", "defg"), -E2BIG);
    assert_ptr_equal(b.data, data_before);
    assert_int_equal(b.len, 3);
    assert_string_equal(b.data, "abc");
    /* Exactly filling up to the limit works. */
    assert_int_equal(buf_printf(&b, "%d", 123), 0);
    assert_string_equal(b.data, "abc123");
    assert_int_equal(buf_printf(&b, "%s", "!"), -E2BIG);
    assert_string_equal(b.data, "abc123");
    buf_free(&b);
}

static void test_buf_consume(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 100);
    assert_int_equal(buf_append(&b, "abcdefgh", 8), 0);

    buf_consume(&b, 0);
    assert_int_equal(b.len, 8);
    assert_string_equal(b.data, "abcdefgh");

    buf_consume(&b, 3);
    assert_int_equal(b.len, 5);
    assert_string_equal(b.data, "defgh");

    buf_consume(&b, 4);
    assert_int_equal(b.len, 1);
    assert_string_equal(b.data, "h");

    buf_consume(&b, 1); /* exactly everything */
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");

    /* The buffer stays usable and the space is reclaimed for the limit. */
    assert_int_equal(buf_append(&b, "xyz", 3), 0);
    assert_string_equal(b.data, "xyz");
    buf_free(&b);
}

static void test_buf_consume_more_than_len(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 100);
    assert_int_equal(buf_append(&b, "abc", 3), 0);
    buf_consume(&b, 1000);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    buf_consume(&b, SIZE_MAX);
    assert_int_equal(b.len, 0);
    buf_free(&b);
}

static void test_buf_consume_on_unallocated(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 100);
    buf_consume(&b, 0);
    buf_consume(&b, 5);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    buf_free(&b);
}

static void test_buf_consume_frees_room_under_limit(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 4);
    assert_int_equal(buf_append(&b, "abcd", 4), 0);
    assert_int_equal(buf_append(&b, "e", 1), -E2BIG);
    buf_consume(&b, 2);
    assert_int_equal(buf_append(&b, "ef", 2), 0);
    assert_string_equal(b.data, "cdef");
    assert_int_equal(buf_append(&b, "g", 1), -E2BIG);
    buf_free(&b);
}

static void test_buf_reset(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 100);
    buf_reset(&b); /* no allocation yet: must not crash */
    assert_int_equal(b.len, 0);
    assert_null(b.data);

    assert_int_equal(buf_append(&b, "abcdef", 6), 0);
    size_t cap = b.cap_alloc;
    buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_non_null(b.data);
    assert_string_equal(b.data, "");
    assert_int_equal(b.cap_alloc, cap); /* keeps its memory */
    assert_int_equal(b.limit, 100);
    assert_int_equal(buf_append(&b, "zz", 2), 0);
    assert_string_equal(b.data, "zz");
    buf_free(&b);
}

static void test_buf_free_and_reuse(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 50);
    assert_int_equal(buf_append(&b, "abc", 3), 0);
    buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap_alloc, 0);
    buf_free(&b); /* double free must be harmless */
    /* Reusable after free, with the same limit. */
    assert_int_equal(buf_append(&b, "defg", 4), 0);
    assert_string_equal(b.data, "defg");
    char big[47];
    memset(big, 'q', sizeof big);
    assert_int_equal(buf_append(&b, big, sizeof big), -E2BIG); /* 4 + 47 > 50 */
    assert_string_equal(b.data, "defg");
    buf_free(&b);
}

/* ------------------------------------------------------------------------------------------
 * argv_split / argv_free
 * ---------------------------------------------------------------------------------------- */

/* Split s and compare against the expected NULL-terminated list. */
static void check_split(const char *s, const char *const *expected)
{
    char **av = NULL;
    int n = argv_split(s, &av);
    int want = 0;
    while (expected[want])
        want++;
    if (n != want)
        fail_msg("argv_split(\"%s\") returned %d, expected %d", s, n, want);
    assert_non_null(av);
    for (int i = 0; i < want; i++) {
        assert_non_null(av[i]);
        if (strcmp(av[i], expected[i]) != 0)
            fail_msg("argv_split(\"%s\")[%d] = \"%s\", expected \"%s\"", s, i, av[i],
                     expected[i]);
    }
    assert_null(av[want]);
    argv_free(av);
}

static void test_argv_split_empty(void **state)
{
    (void)state;
    check_split("", (const char *const[]){NULL});
    check_split("   ", (const char *const[]){NULL});
    check_split(" \t \t\n ", (const char *const[]){NULL});
}

static void test_argv_split_plain(void **state)
{
    (void)state;
    check_split("a", (const char *const[]){"a", NULL});
    check_split("--ctx-size 512", (const char *const[]){"--ctx-size", "512", NULL});
    check_split("  a   b  c  ", (const char *const[]){"a", "b", "c", NULL});
    check_split("a\tb\t\tc", (const char *const[]){"a", "b", "c", NULL});
    check_split("\ta \t b\t", (const char *const[]){"a", "b", NULL});
}

static void test_argv_split_many_args_grows(void **state)
{
    (void)state;
    /* More than the initial capacity (8) to exercise growth. */
    char s[512] = "";
    for (int i = 0; i < 50; i++) {
        char w[16];
        snprintf(w, sizeof w, "w%d ", i);
        strcat(s, w);
    }
    char **av = NULL;
    int n = argv_split(s, &av);
    assert_int_equal(n, 50);
    for (int i = 0; i < 50; i++) {
        char w[16];
        snprintf(w, sizeof w, "w%d", i);
        assert_string_equal(av[i], w);
    }
    assert_null(av[50]);
    argv_free(av);
}

static void test_argv_split_double_quotes(void **state)
{
    (void)state;
    check_split("\"a b\" c", (const char *const[]){"a b", "c", NULL});
    check_split("--chat-template \"{{ x }}\"", (const char *const[]){"--chat-template", "{{ x }}", NULL});
    check_split("\"\"", (const char *const[]){"", NULL}); /* an explicit empty argument */
    check_split("a \"\" b", (const char *const[]){"a", "", "b", NULL});
    check_split("pre\"mid dle\"post", (const char *const[]){"premid dlepost", NULL});
    check_split("\"it's\"", (const char *const[]){"it's", NULL});
    check_split("\"tab\there\"", (const char *const[]){"tab\there", NULL});
}

static void test_argv_split_single_quotes(void **state)
{
    (void)state;
    check_split("'a b' c", (const char *const[]){"a b", "c", NULL});
    check_split("''", (const char *const[]){"", NULL});
    check_split("'say \"hi\"'", (const char *const[]){"say \"hi\"", NULL});
    /* Backslashes are literal inside single quotes. */
    check_split("'a\\b'", (const char *const[]){"a\\b", NULL});
    check_split("'a\\'", (const char *const[]){"a\\", NULL});
    check_split("'a\\\\b'", (const char *const[]){"a\\\\b", NULL}); /* 'a\\b' keeps both */
    check_split("'a\\\"b'", (const char *const[]){"a\\\"b", NULL});  /* 'a\"b' keeps both */
    check_split("x'y'z", (const char *const[]){"xyz", NULL});
}

static void test_argv_split_backslash(void **state)
{
    (void)state;
    /* Outside quotes: a backslash escapes the next character, including space and quotes. */
    check_split("a\\ b", (const char *const[]){"a b", NULL});
    check_split("\\\"x", (const char *const[]){"\"x", NULL});
    check_split("\\'x", (const char *const[]){"'x", NULL});
    check_split("a\\\\b", (const char *const[]){"a\\b", NULL});
    check_split("\\n", (const char *const[]){"n", NULL});
    /* A trailing lone backslash is kept literally. */
    check_split("a\\", (const char *const[]){"a\\", NULL});
    /* Inside double quotes only \" and \\ are escapes; others stay as written. */
    check_split("\"a\\\"b\"", (const char *const[]){"a\"b", NULL});
    check_split("\"a\\\\b\"", (const char *const[]){"a\\b", NULL});
    check_split("\"a\\nb\"", (const char *const[]){"a\\nb", NULL});
    /* An escaped quote does not open a quoted section, so this is balanced. */
    check_split("\\\"a b", (const char *const[]){"\"a", "b", NULL});
}

static void test_argv_split_unbalanced(void **state)
{
    (void)state;
    const char *bad[] = {
        "\"",        "'",           "\"abc",        "abc'",       "a \"b c",
        "a 'b c",    "\"a\" \"b",   "\"a\\\"",    "x \"'\"'",
        "ok 'fine' \"broken",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char **av = (char **)(uintptr_t)0x1; /* sentinel: must not be written on failure */
        int n = argv_split(bad[i], &av);
        if (n != -EINVAL)
            fail_msg("argv_split(\"%s\") returned %d, expected -EINVAL", bad[i], n);
        assert_ptr_equal(av, (char **)(uintptr_t)0x1);
    }
}

static void test_argv_split_mixed_quotes_nested(void **state)
{
    (void)state;
    /* A different quote character inside a quoted section is literal. */
    check_split("\"'\" '\"'", (const char *const[]){"'", "\"", NULL});
    check_split("--x='a b'\"c d\"e", (const char *const[]){"--x=a bc de", NULL});
}

static void test_argv_free_null(void **state)
{
    (void)state;
    argv_free(NULL); /* must be a no-op */
}

/* ------------------------------------------------------------------------------------------
 * backoff_ms
 * ---------------------------------------------------------------------------------------- */

static void test_backoff_doubles(void **state)
{
    (void)state;
    assert_int_equal(backoff_ms(0, 100, 30000), 100);
    assert_int_equal(backoff_ms(1, 100, 30000), 200);
    assert_int_equal(backoff_ms(2, 100, 30000), 400);
    assert_int_equal(backoff_ms(3, 100, 30000), 800);
    assert_int_equal(backoff_ms(8, 100, 30000), 25600);
}

static void test_backoff_caps(void **state)
{
    (void)state;
    assert_int_equal(backoff_ms(9, 100, 30000), 30000); /* 51200 capped */
    assert_int_equal(backoff_ms(10, 100, 30000), 30000);
    assert_int_equal(backoff_ms(0, 500, 300), 300);   /* base above cap */
    assert_int_equal(backoff_ms(3, 100, 800), 800);   /* exactly the cap */
    assert_int_equal(backoff_ms(5, 0, 1000), 0);      /* zero base stays zero */
    assert_int_equal(backoff_ms(5, 100, 0), 0);       /* zero cap */
}

static void test_backoff_large_attempts_do_not_overflow(void **state)
{
    (void)state;
    assert_int_equal(backoff_ms(63, 1000, 60000), 60000);
    assert_int_equal(backoff_ms(64, 1000, 60000), 60000);
    assert_int_equal(backoff_ms(1000, 1000, 60000), 60000);
    assert_int_equal(backoff_ms(UINT32_MAX, 1000, 60000), 60000);
    assert_int_equal(backoff_ms(UINT32_MAX, 1, UINT64_MAX / 2), UINT64_MAX / 2);
    /* Monotonic non-decreasing with a realistic cap. */
    uint64_t prev = 0;
    for (unsigned a = 0; a < 200; a++) {
        uint64_t d = backoff_ms(a, 250, 120000);
        assert_true(d >= prev);
        assert_true(d <= 120000);
        prev = d;
    }
}

/* SUSPECTED BUG (src/base/util.c backoff_ms): when max_ms > 2^63 the doubling `d *= 2` wraps to 0
 * and stays 0, so backoff_ms(64, 1, UINT64_MAX) returns 0 instead of the cap. The project's
 * own callers use small caps, so this is latent; left failing on purpose for review. */
static void test_backoff_huge_cap_does_not_wrap(void **state)
{
    (void)state;
    assert_int_equal(backoff_ms(63, 1, UINT64_MAX), (uint64_t)1 << 63);
    uint64_t prev = 0;
    for (unsigned a = 0; a < 80; a++) {
        uint64_t d = backoff_ms(a, 1, UINT64_MAX);
        if (d < prev)
            fail_msg("backoff_ms(%u, 1, UINT64_MAX) = %llu, less than attempt %u's %llu", a,
                     (unsigned long long)d, a - 1, (unsigned long long)prev);
        prev = d;
    }
}

/* ------------------------------------------------------------------------------------------
 * model_name_from_path
 * ---------------------------------------------------------------------------------------- */

static void check_name(const char *path, const char *want)
{
    char out[128];
    memset(out, 'Z', sizeof out);
    int rc = model_name_from_path(path, out, sizeof out);
    if (rc != 0)
        fail_msg("model_name_from_path(\"%s\") returned %d", path, rc);
    assert_string_equal(out, want);
}

static void test_model_name_basic(void **state)
{
    (void)state;
    check_name("stories260K.gguf", "stories260K");
    check_name("/a/b/c/stories260K.gguf", "stories260K");
    check_name("./x.gguf", "x");
    check_name("rel/dir/Qwen2.5-0.5B-Q4_K_M.gguf", "Qwen2.5-0.5B-Q4_K_M");
}

static void test_model_name_case_insensitive_suffix(void **state)
{
    (void)state;
    check_name("/m/Model.GGUF", "Model");
    check_name("/m/Model.GgUf", "Model");
}

static void test_model_name_other_extensions_kept(void **state)
{
    (void)state;
    check_name("/m/model.bin", "model.bin");
    check_name("/m/model", "model");
    check_name("/m/model.gguf.bak", "model.gguf.bak");
    check_name("/m/model.gguf.gguf", "model.gguf"); /* only one suffix stripped */
    check_name("/m/modelgguf", "modelgguf");
    check_name("/m.gguf/model", "model"); /* directory suffix is irrelevant */
}

static void test_model_name_empty_fails(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(model_name_from_path("", out, sizeof out), -EINVAL);
    assert_int_equal(model_name_from_path("/", out, sizeof out), -EINVAL);
    assert_int_equal(model_name_from_path("/some/dir/", out, sizeof out), -EINVAL);
}

static void test_model_name_bare_suffix_is_not_stripped_to_empty(void **state)
{
    (void)state;
    /* A file literally named ".gguf" never yields an empty name: either it is refused or
     * kept as-is. Current behaviour keeps it. */
    char out[64];
    int rc = model_name_from_path("/d/.gguf", out, sizeof out);
    if (rc == 0)
        assert_true(strlen(out) > 0);
    else
        assert_int_equal(rc, -EINVAL);
}

static void test_model_name_too_long(void **state)
{
    (void)state;
    char out[8];
    /* "1234567" fits in 8 (7 + NUL). */
    memset(out, 'Z', sizeof out);
    assert_int_equal(model_name_from_path("/x/1234567.gguf", out, sizeof out), 0);
    assert_string_equal(out, "1234567");
    /* "12345678" does not. */
    memset(out, 'Z', sizeof out);
    assert_int_equal(model_name_from_path("/x/12345678.gguf", out, sizeof out), -EINVAL);
    /* Must not have written past the buffer; it should not even have started. */
    assert_int_equal(out[0], 'Z');
    /* outlen of 0 or 1 can hold nothing. */
    assert_int_equal(model_name_from_path("a", out, 1), -EINVAL);
    assert_int_equal(model_name_from_path("a", out, 0), -EINVAL);
    assert_int_equal(model_name_from_path("a", out, 2), 0);
    assert_string_equal(out, "a");
}

static void test_model_name_very_long_path(void **state)
{
    (void)state;
    char path[600];
    memset(path, 'd', sizeof path);
    path[100] = '/';
    path[sizeof path - 1] = '\0';
    char out[128];
    /* base name is 498 chars: too long for 128. */
    assert_int_equal(model_name_from_path(path, out, sizeof out), -EINVAL);
    /* Long directory, short name: fine. */
    strcpy(path + 500, "/short.gguf");
    assert_int_equal(model_name_from_path(path, out, sizeof out), 0);
    assert_string_equal(out, "short");
}

/* ------------------------------------------------------------------------------------------
 * slice_ieq
 * ---------------------------------------------------------------------------------------- */

static void test_slice_ieq(void **state)
{
    (void)state;
    assert_true(slice_ieq("Content-Type", 12, "content-type"));
    assert_true(slice_ieq("CONTENT-TYPE", 12, "Content-Type"));
    assert_true(slice_ieq("abc", 3, "abc"));
    assert_false(slice_ieq("abc", 3, "abd"));
    assert_false(slice_ieq("abc", 3, "ab"));
    assert_false(slice_ieq("abc", 2, "abc"));
    assert_false(slice_ieq("ab", 2, "abc"));
    /* The slice need not be NUL-terminated at n. */
    assert_true(slice_ieq("Hostname", 4, "HOST"));
    assert_false(slice_ieq("Hostname", 4, "hostn"));
    /* Empty slices. */
    assert_true(slice_ieq("", 0, ""));
    assert_true(slice_ieq("xyz", 0, ""));
    assert_false(slice_ieq("", 0, "x"));
    /* Non-letters compare exactly. */
    assert_false(slice_ieq("a-b", 3, "a_b"));
    assert_false(slice_ieq("a b", 3, "a\tb"));
}

/* ------------------------------------------------------------------------------------------
 * parse_u64
 * ---------------------------------------------------------------------------------------- */

static void test_parse_u64_valid(void **state)
{
    (void)state;
    uint64_t v = 777;
    assert_int_equal(parse_u64("0", 0, 10, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(parse_u64("10", 0, 10, &v), 0);
    assert_int_equal(v, 10);
    assert_int_equal(parse_u64("5", 5, 5, &v), 0);
    assert_int_equal(v, 5);
    assert_int_equal(parse_u64("0009", 0, 10, &v), 0); /* leading zeros are decimal, not octal */
    assert_int_equal(v, 9);
    assert_int_equal(parse_u64("65535", 0, 65535, &v), 0);
    assert_int_equal(v, 65535);
    assert_int_equal(parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
    assert_true(v == UINT64_MAX);
}

static void test_parse_u64_range(void **state)
{
    (void)state;
    uint64_t v = 777;
    assert_int_equal(parse_u64("11", 0, 10, &v), -EINVAL);
    assert_int_equal(parse_u64("4", 5, 10, &v), -EINVAL);
    assert_int_equal(parse_u64("0", 1, 10, &v), -EINVAL);
    assert_int_equal(parse_u64("65536", 0, 65535, &v), -EINVAL);
    assert_int_equal(v, 777); /* untouched on failure */
}

static void test_parse_u64_sign(void **state)
{
    (void)state;
    uint64_t v = 777;
    assert_int_equal(parse_u64("-1", 0, UINT64_MAX, &v), -EINVAL);
    assert_int_equal(parse_u64("-0", 0, UINT64_MAX, &v), -EINVAL);
    assert_int_equal(parse_u64("+1", 0, UINT64_MAX, &v), -EINVAL);
    assert_int_equal(parse_u64("+0", 0, 10, &v), -EINVAL);
    assert_int_equal(v, 777);
}

static void test_parse_u64_garbage(void **state)
{
    (void)state;
    uint64_t v = 777;
    const char *bad[] = {"", "abc", "12abc", "1 ", "1.5", "0x10", "1e3", "--1", "\xd9\xa1", "12\n",
                         "9 9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (parse_u64(bad[i], 0, UINT64_MAX, &v) != -EINVAL)
            fail_msg("parse_u64(\"%s\") accepted", bad[i]);
    }
    assert_int_equal(parse_u64(NULL, 0, 10, &v), -EINVAL);
    assert_int_equal(v, 777);
}

static void test_parse_u64_overflow(void **state)
{
    (void)state;
    uint64_t v = 777;
    assert_int_equal(parse_u64("18446744073709551616", 0, UINT64_MAX, &v), -EINVAL);
    assert_int_equal(parse_u64("99999999999999999999999999", 0, UINT64_MAX, &v), -EINVAL);
    assert_int_equal(v, 777);
    /* A previous ERANGE must not poison the next parse (errno is reset). */
    assert_int_equal(parse_u64("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
}

/* SUSPECTED BUG (src/base/util.c parse_u64): the sign check only looks at s[0], but strtoull skips
 * leading whitespace and then accepts a sign. So " -1" with max UINT64_MAX parses as
 * 18446744073709551615 (negation wraps), and " 5" / "\t5" are accepted although the contract
 * is "a decimal unsigned integer". Callers in config.c/env_ms use small maxima, so " -1" is
 * refused there by the range check, but " 80" is accepted as a port. Left failing on purpose
 * for review. */
static void test_parse_u64_leading_whitespace_and_hidden_sign(void **state)
{
    (void)state;
    uint64_t v = 777;
    int rc = parse_u64(" -1", 0, UINT64_MAX, &v);
    if (rc == 0)
        fail_msg("parse_u64(\" -1\") accepted and returned %llu", (unsigned long long)v);
    assert_int_equal(parse_u64(" +1", 0, UINT64_MAX, &v), -EINVAL);
    assert_int_equal(parse_u64(" 5", 0, 10, &v), -EINVAL);
    assert_int_equal(parse_u64("\t5", 0, 10, &v), -EINVAL);
    assert_int_equal(v, 777);
}

/* ------------------------------------------------------------------------------------------
 * env_ms
 * ---------------------------------------------------------------------------------------- */

#define ENV_NAME "MESH_LLM_UNIT_TEST_ENV_MS"

static void test_env_ms(void **state)
{
    (void)state;
    unsetenv(ENV_NAME);
    assert_int_equal(env_ms(ENV_NAME, 1234), 1234);

    setenv(ENV_NAME, "250", 1);
    assert_int_equal(env_ms(ENV_NAME, 1234), 250);

    setenv(ENV_NAME, "1", 1);
    assert_int_equal(env_ms(ENV_NAME, 1234), 1);

    setenv(ENV_NAME, "604800000", 1); /* 7 days: the maximum */
    assert_int_equal(env_ms(ENV_NAME, 1234), 604800000ULL);

    const char *bad[] = {"", "0", "604800001", "-5", "+5", "abc", "5ms", "1.5", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(ENV_NAME, bad[i], 1);
        uint64_t got = env_ms(ENV_NAME, 1234);
        if (got != 1234)
            fail_msg("env_ms with %s=\"%s\" returned %llu, expected the default", ENV_NAME,
                     bad[i], (unsigned long long)got);
    }
    unsetenv(ENV_NAME);
    assert_int_equal(env_ms(ENV_NAME, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_init_is_empty),
        cmocka_unit_test(test_buf_append_basic),
        cmocka_unit_test(test_buf_append_zero_len),
        cmocka_unit_test(test_buf_append_binary_with_nul),
        cmocka_unit_test(test_buf_append_grows_across_many_reallocs),
        cmocka_unit_test(test_buf_limit_exact_fit),
        cmocka_unit_test(test_buf_limit_refusal_leaves_buffer_unchanged),
        cmocka_unit_test(test_buf_limit_huge_append_refused),
        cmocka_unit_test(test_buf_limit_refusal_on_fresh_buffer),
        cmocka_unit_test(test_buf_printf),
        cmocka_unit_test(test_buf_printf_on_empty_buffer_with_empty_output),
        cmocka_unit_test(test_buf_printf_large_output),
        cmocka_unit_test(test_buf_printf_limit),
        cmocka_unit_test(test_buf_consume),
        cmocka_unit_test(test_buf_consume_more_than_len),
        cmocka_unit_test(test_buf_consume_on_unallocated),
        cmocka_unit_test(test_buf_consume_frees_room_under_limit),
        cmocka_unit_test(test_buf_reset),
        cmocka_unit_test(test_buf_free_and_reuse),
        cmocka_unit_test(test_argv_split_empty),
        cmocka_unit_test(test_argv_split_plain),
        cmocka_unit_test(test_argv_split_many_args_grows),
        cmocka_unit_test(test_argv_split_double_quotes),
        cmocka_unit_test(test_argv_split_single_quotes),
        cmocka_unit_test(test_argv_split_backslash),
        cmocka_unit_test(test_argv_split_unbalanced),
        cmocka_unit_test(test_argv_split_mixed_quotes_nested),
        cmocka_unit_test(test_argv_free_null),
        cmocka_unit_test(test_backoff_doubles),
        cmocka_unit_test(test_backoff_caps),
        cmocka_unit_test(test_backoff_large_attempts_do_not_overflow),
        cmocka_unit_test(test_backoff_huge_cap_does_not_wrap),
        cmocka_unit_test(test_model_name_basic),
        cmocka_unit_test(test_model_name_case_insensitive_suffix),
        cmocka_unit_test(test_model_name_other_extensions_kept),
        cmocka_unit_test(test_model_name_empty_fails),
        cmocka_unit_test(test_model_name_bare_suffix_is_not_stripped_to_empty),
        cmocka_unit_test(test_model_name_too_long),
        cmocka_unit_test(test_model_name_very_long_path),
        cmocka_unit_test(test_slice_ieq),
        cmocka_unit_test(test_parse_u64_valid),
        cmocka_unit_test(test_parse_u64_range),
        cmocka_unit_test(test_parse_u64_sign),
        cmocka_unit_test(test_parse_u64_garbage),
        cmocka_unit_test(test_parse_u64_overflow),
        cmocka_unit_test(test_parse_u64_leading_whitespace_and_hidden_sign),
        cmocka_unit_test(test_env_ms),
    };
    return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}

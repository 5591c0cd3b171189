/* Unit tests for the SSE parser (src/core/sse.h): framing, line ends, splitting, bounds. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "sse.h"

typedef struct {
    char out[4096];
} acc_t;

static void on_ev(void *ud, const char *event, const char *data, size_t len)
{
    acc_t *a = ud;
    size_t o = strlen(a->out);
    snprintf(a->out + o, sizeof a->out - o, "[%s|%.*s]", event, (int)len, data);
}

/* Feed `in` in pieces of `step` bytes (0: whole) and return the events as "[event|data]...". */
static const char *run(const char *in, size_t step, size_t max)
{
    static acc_t a;
    a.out[0] = '\0';
    sse_parser_t p;
    sse_init(&p, max);
    size_t n = strlen(in);
    if (!step) step = n ? n : 1;
    for (size_t i = 0; i < n; i += step)
        assert_int_equal(sse_feed(&p, in + i, i + step <= n ? step : n - i, on_ev, &a), 0);
    sse_free(&p);
    return a.out;
}

static void test_table(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
        size_t max;
    } t[] = {
        {"data: {\"a\":1}\n\n", "[|{\"a\":1}]", 0},
        {"data:x\n\ndata: [DONE]\n\n", "[|x][|[DONE]]", 0},
        {"data: a\ndata: b\n\n", "[|a\nb]", 0},        /* multi-line data */
        {"data: a\r\n\r\ndata: b\r\r", "[|a][|b]", 0}, /* CRLF and lone CR */
        {": comment\nid: 7\nretry: 5\ndata: v\n\n", "[|v]", 0},
        {"event: ping\n\n", "", 0}, /* no data: not dispatched */
        {"event: message_start\ndata: {}\n\n", "[message_start|{}]", 0},
        {"data: incomplete", "", 0},                          /* no blank line yet */
        {"data:  two spaces\n\n", "[| two spaces]", 0},       /* only one space removed */
        {"data\n\n", "[|]", 0},                               /* field without colon */
        {"data: 0123456789\n\ndata: ok\n\n", "[|ok]", 8},     /* oversized event dropped */
        {"data: 0123\ndata: 4567\n\ndata: z\n\n", "[|z]", 8}, /* grows past the cap */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        for (size_t step = 0; step < 4; step++) {
            const char *got = run(t[i].in, step, t[i].max);
            if (strcmp(got, t[i].want) != 0)
                fail_msg("case %zu step %zu: got '%s' want '%s'", i, step, got, t[i].want);
        }
    }
}

static void test_bounded_long_line(void **state)
{
    (void)state;
    sse_parser_t p;
    sse_init(&p, 64);
    acc_t a = {{0}};
    char junk[1000];
    memset(junk, 'x', sizeof junk);
    assert_int_equal(sse_feed(&p, "data: ", 6, on_ev, &a), 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(sse_feed(&p, junk, sizeof junk, on_ev, &a), 0);
    assert_true(sse_pending(&p) <= 64 + 16 + 1); /* the parser held no more than its cap */
    assert_int_equal(sse_feed(&p, "\n\ndata: y\n\n", 11, on_ev, &a), 0);
    assert_string_equal(a.out, "[|y]");
    assert_int_equal(p.dropped, 1);
    assert_int_equal(p.events, 1);
    sse_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_bounded_long_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

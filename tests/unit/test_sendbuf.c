/* sendbuf: the stream send queue (bytes stay put until acknowledged) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "sendbuf.h"

static size_t gather(const sendbuf_t *b, uint8_t *out, size_t max)
{
    sendbuf_vec_t v[64];
    size_t nv = sendbuf_peek(b, v, 64), n = 0;
    for (size_t i = 0; i < nv && n < max; i++) {
        memcpy(out + n, v[i].base, v[i].len);
        n += v[i].len;
    }
    return n;
}

static void test_append_send_ack_in_pieces(void **state)
{
    enum { N = 300000 };
    uint8_t *src = malloc(N), *got = malloc(N);
    for (size_t i = 0; i < N; i++)
        src[i] = (uint8_t)(i * 31 + 7);
    sendbuf_t b = {0};
    /* uneven writes spanning chunk boundaries */
    size_t off = 0, step = 1;
    while (off < N) {
        size_t n = step < N - off ? step : N - off;
        assert_int_equal(sendbuf_append(&b, src + off, n), 0);
        off += n;
        step = step * 3 + 1;
    }
    assert_int_equal(b.unsent, N);
    assert_int_equal(b.unacked, N);
    /* send in odd pieces; what peek shows is always the next unsent bytes */
    size_t sent = 0, acked = 0;
    while (sent < N) {
        size_t n = gather(&b, got, N);
        assert_int_equal(n, N - sent);
        assert_memory_equal(got, src + sent, n < 4096 ? n : 4096);
        size_t take = n < 12345 ? n : 12345;
        sendbuf_sent(&b, take);
        sent += take;
        if (sent - acked > 50000) { /* acknowledge lagging behind */
            sendbuf_acked(&b, 30000);
            acked += 30000;
            assert_int_equal(b.unacked, N - acked);
        }
    }
    assert_int_equal(b.unsent, 0);
    sendbuf_vec_t v[4];
    assert_int_equal(sendbuf_peek(&b, v, 4), 0);
    sendbuf_acked(&b, N - acked);
    assert_int_equal(b.unacked, 0);
    assert_null(b.head); /* every chunk freed */
    /* and the queue is reusable */
    assert_int_equal(sendbuf_append(&b, "abc", 3), 0);
    assert_int_equal(gather(&b, got, N), 3);
    assert_memory_equal(got, "abc", 3);
    sendbuf_free(&b);
    free(src);
    free(got);
}

static void test_append_after_everything_sent(void **state)
{
    sendbuf_t b = {0};
    uint8_t got[16];
    assert_int_equal(sendbuf_append(&b, "hello", 5), 0);
    sendbuf_sent(&b, 5);
    assert_int_equal(sendbuf_append(&b, "world", 5), 0); /* lands in the same chunk */
    assert_int_equal(gather(&b, got, sizeof got), 5);
    assert_memory_equal(got, "world", 5);
    sendbuf_acked(&b, 5);
    assert_non_null(b.head); /* "world" still unacknowledged */
    sendbuf_sent(&b, 5);
    sendbuf_acked(&b, 5);
    assert_int_equal(b.unacked, 0);
    sendbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_send_ack_in_pieces),
        cmocka_unit_test(test_append_after_everything_sent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

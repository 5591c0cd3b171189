/* Unit tests for the RPC stream cutter (src/core/rpc_frame.h), pure: llama.cpp RPC byte
 * streams as a relay reads them (in chunks that split messages anywhere), and the bytes that
 * must be forwarded after each chunk. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "rpc_frame.h"

/* command numbers of the pinned ggml-rpc.cpp */
enum {
    ALLOC_BUFFER = 0,
    FREE_BUFFER = 4,
    BUFFER_CLEAR = 5,
    SET_TENSOR = 6,
    SET_TENSOR_HASH = 7,
    GET_TENSOR = 8,
    COPY_TENSOR = 9,
    GRAPH_COMPUTE = 10,
    GET_DEVICE_MEMORY = 11,
    INIT_TENSOR = 12,
    GET_ALLOC_SIZE = 13,
    HELLO = 14,
    DEVICE_COUNT = 15,
    GRAPH_RECOMPUTE = 16,
    MEMSET_TENSOR = 17,
};

static uint8_t stream[1 << 20];
static size_t stream_len;

static size_t put_req(uint8_t cmd, uint64_t size)
{
    stream[stream_len++] = cmd;
    for (int i = 0; i < 8; i++)
        stream[stream_len++] = (uint8_t)(size >> (8 * i));
    memset(stream + stream_len, 0xab, size);
    stream_len += size;
    return stream_len;
}

static size_t put_rsp(uint64_t size)
{
    for (int i = 0; i < 8; i++)
        stream[stream_len++] = (uint8_t)(size >> (8 * i));
    memset(stream + stream_len, 0xcd, size);
    stream_len += size;
    return stream_len;
}

/* Feed stream[0..stream_len) in chunks ending at cuts[] (the last chunk ends at stream_len) and
 * return the total released after each chunk in out[]. */
static void feed_cuts(rpc_frame_t *f, const size_t *cuts, size_t ncuts, size_t *out)
{
    size_t at = 0, total = 0;
    for (size_t k = 0; k <= ncuts; k++) {
        size_t end = k < ncuts ? cuts[k] : stream_len;
        total += rpc_frame_feed(f, stream + at, end - at);
        out[k] = total;
        at = end;
    }
}

static void test_decode_step_is_one_burst(void **state)
{
    (void)state;
    /* a decode step as llama.cpp's RPC backend writes it: three send()s per command */
    stream_len = 0;
    size_t a = put_req(SET_TENSOR, 570);
    size_t b = put_req(SET_TENSOR, 318);
    size_t c = put_req(GRAPH_RECOMPUTE, 13);
    size_t d = put_req(GET_TENSOR, 321);
    size_t cuts[] = {1, 9, a, a + 1, a + 9, b, b + 1, b + 9, c, c + 1, c + 9};
    size_t out[12];
    rpc_frame_t f;
    rpc_frame_init(&f, RPC_FRAME_REQUESTS);
    feed_cuts(&f, cuts, 11, out);
    for (int k = 0; k < 11; k++)
        assert_int_equal(out[k], 0); /* nothing the peer could use */
    assert_int_equal(out[11], d);    /* all of it, once it waits */
    assert_int_equal(f.held, 0);
    assert_int_equal(f.computes, 1); /* the one GRAPH_RECOMPUTE, counted once it ended */
}

/* computes counts the graph computations that ended, split anywhere, and nothing else. */
static void test_computes_counted(void **state)
{
    (void)state;
    stream_len = 0;
    put_req(GRAPH_COMPUTE, 40);
    size_t half = stream_len - 20;
    put_req(GET_TENSOR, 8);
    put_req(SET_TENSOR, 100);
    put_req(GRAPH_RECOMPUTE, 0);
    put_req(COPY_TENSOR, 16);
    rpc_frame_t f;
    rpc_frame_init(&f, RPC_FRAME_REQUESTS);
    rpc_frame_feed(&f, stream, half);
    assert_int_equal(f.computes, 0); /* its payload is not all there */
    rpc_frame_feed(&f, stream + half, stream_len - half);
    assert_int_equal(f.computes, 2);
    assert_true(rpc_frame_cmd_computes(GRAPH_COMPUTE) && rpc_frame_cmd_computes(GRAPH_RECOMPUTE));
    assert_false(rpc_frame_cmd_computes(GET_TENSOR));
    /* responses never count */
    stream_len = 0;
    put_rsp(10);
    stream[0] = GRAPH_COMPUTE;
    rpc_frame_init(&f, RPC_FRAME_RESPONSES);
    rpc_frame_feed(&f, stream, stream_len);
    assert_int_equal(f.computes, 0);
}

static void test_every_reply_command_releases(void **state)
{
    (void)state;
    static const struct {
        uint8_t cmd;
        bool replies;
    } CMDS[] = {
        {ALLOC_BUFFER, true},
        {SET_TENSOR_HASH, true},
        {GET_TENSOR, true},
        {COPY_TENSOR, true},
        {GET_DEVICE_MEMORY, true},
        {GET_ALLOC_SIZE, true},
        {HELLO, true},
        {DEVICE_COUNT, true},
        {1, true},
        {2, true},
        {3, true},
        {18, true}, /* unknown */
        {200, true},
        {FREE_BUFFER, false},
        {BUFFER_CLEAR, false},
        {SET_TENSOR, false},
        {GRAPH_COMPUTE, false},
        {INIT_TENSOR, false},
        {GRAPH_RECOMPUTE, false},
        {MEMSET_TENSOR, false},
    };
    for (size_t i = 0; i < sizeof CMDS / sizeof CMDS[0]; i++) {
        assert_int_equal(rpc_frame_cmd_replies(CMDS[i].cmd), CMDS[i].replies);
        stream_len = 0;
        size_t end = put_req(CMDS[i].cmd, 40);
        rpc_frame_t f;
        rpc_frame_init(&f, RPC_FRAME_REQUESTS);
        /* a command the client waits on goes at once; one it does not wait on is held */
        assert_int_equal(rpc_frame_feed(&f, stream, end), CMDS[i].replies ? end : 0);
        assert_int_equal(rpc_frame_release_all(&f), CMDS[i].replies ? 0 : end);
        assert_int_equal(rpc_frame_release_all(&f), 0);
    }
}

static void test_bytes_after_the_reply_command_wait(void **state)
{
    (void)state;
    /* one read holds a whole GET_TENSOR and the start of the next step */
    stream_len = 0;
    size_t a = put_req(GET_TENSOR, 321);
    put_req(SET_TENSOR, 570);
    rpc_frame_t f;
    rpc_frame_init(&f, RPC_FRAME_REQUESTS);
    assert_int_equal(rpc_frame_feed(&f, stream, a + 20), a);
    assert_int_equal(f.held, 20);
    assert_int_equal(rpc_frame_feed(&f, stream + a + 20, stream_len - a - 20), 0);
    assert_int_equal(rpc_frame_release_all(&f), stream_len - a);
}

static void test_large_messages_stream(void **state)
{
    (void)state;
    /* a weight upload: a SET_TENSOR bigger than the hold cap goes as it comes */
    stream_len = 0;
    size_t big = RPC_FRAME_HOLD_MAX + 1000;
    size_t end = put_req(SET_TENSOR, big);
    rpc_frame_t f;
    rpc_frame_init(&f, RPC_FRAME_REQUESTS);
    assert_int_equal(rpc_frame_feed(&f, stream, 5), 0); /* size not known yet */
    assert_int_equal(rpc_frame_feed(&f, stream + 5, 100), 105);
    assert_int_equal(rpc_frame_feed(&f, stream + 105, end - 105), end - 105);
    assert_int_equal(f.held, 0);
    /* many small silent commands: never more than the cap held */
    stream_len = 0;
    rpc_frame_init(&f, RPC_FRAME_REQUESTS);
    size_t released = 0, at = 0;
    for (int i = 0; i < 400; i++) {
        size_t e = put_req(INIT_TENSOR, 300);
        released += rpc_frame_feed(&f, stream + at, e - at);
        at = e;
        assert_true(f.held <= RPC_FRAME_HOLD_MAX);
    }
    assert_true(released > 0);
    assert_int_equal(released + f.held, stream_len);
}

static void test_responses(void **state)
{
    (void)state;
    /* rpc-server answers with two send()s: the size, then the payload */
    stream_len = 0;
    size_t a = put_rsp(2048);
    size_t b = put_rsp(0);
    size_t c = put_rsp(16);
    size_t cuts[] = {8, a, a + 4, b, b + 8};
    size_t out[6];
    rpc_frame_t f;
    rpc_frame_init(&f, RPC_FRAME_RESPONSES);
    feed_cuts(&f, cuts, 5, out);
    const size_t want[] = {0, a, a, b, b, c};
    for (int k = 0; k < 6; k++)
        assert_int_equal(out[k], want[k]);
    /* a response bigger than the cap streams */
    stream_len = 0;
    size_t end = put_rsp(RPC_FRAME_HOLD_MAX * 2);
    rpc_frame_init(&f, RPC_FRAME_RESPONSES);
    assert_int_equal(rpc_frame_feed(&f, stream, 8), 8);
    assert_int_equal(rpc_frame_feed(&f, stream + 8, end - 8), end - 8);
}

/* Any stream cut anywhere: nothing lost, nothing duplicated, the cap holds, and every byte
 * up to the end of the last reply-command is out. */
static void test_random_streams(void **state)
{
    (void)state;
    srand(7);
    for (int round = 0; round < 300; round++) {
        stream_len = 0;
        size_t last_reply_end = 0;
        int nmsg = 1 + rand() % 20;
        for (int m = 0; m < nmsg; m++) {
            uint8_t cmd = (uint8_t)(rand() % 20);
            uint64_t size =
                rand() % 8 == 0 ? (uint64_t)(rand() % 100000) : (uint64_t)(rand() % 600);
            size_t e = put_req(cmd, size);
            if (rpc_frame_cmd_replies(cmd) || size > RPC_FRAME_HOLD_MAX) last_reply_end = e;
        }
        rpc_frame_t f;
        rpc_frame_init(&f, RPC_FRAME_REQUESTS);
        size_t at = 0, released = 0;
        while (at < stream_len) {
            size_t n = 1 + (size_t)rand() % 3000;
            if (n > stream_len - at) n = stream_len - at;
            size_t r = rpc_frame_feed(&f, stream + at, n);
            at += n;
            released += r;
            assert_int_equal(released + f.held, at);
            assert_true(f.held <= RPC_FRAME_HOLD_MAX);
        }
        assert_true(released >= last_reply_end);
        released += rpc_frame_release_all(&f);
        assert_int_equal(released, stream_len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_step_is_one_burst),
        cmocka_unit_test(test_computes_counted),
        cmocka_unit_test(test_every_reply_command_releases),
        cmocka_unit_test(test_bytes_after_the_reply_command_wait),
        cmocka_unit_test(test_large_messages_stream),
        cmocka_unit_test(test_responses),
        cmocka_unit_test(test_random_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

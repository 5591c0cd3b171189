/* libFuzzer target: the node-to-node stream reader (wire_read: type byte, length-prefixed JSON
 * control frames with caps), which reads bytes from peers.
 *
 * Input: byte 0 is a control byte (bit 0: the stream starts with a type byte; bits 1-4: k, the
 * second reader gets the bytes in chunks of k*k, or all at once for k = 0); the rest is what
 * the peer sends.
 * Oracles besides the sanitizers: the reader always makes progress and never consumes more than
 * it was given; feeding the same bytes at once or in chunks gives the same frames and the same
 * error; every frame is a JSON object with "v":1 and survives wire_write → wire_read. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

#define MAX_FRAMES 64

typedef struct {
    json_t *frames[MAX_FRAMES];
    size_t n;
    int err; /* 0 or the reader's error */
    int type;
} result_t;

static void roundtrip(json_t *frame, int type)
{
    buf_t out;
    buf_init(&out, 2 * WIRE_MAX_FRAME);
    CHECK(wire_write(&out, type, frame) == 0);
    wire_reader_t r;
    wire_reader_init(&r, type >= 0);
    json_t *back = NULL;
    ssize_t used = wire_read(&r, (const uint8_t *)out.data, out.len, &back);
    CHECK(used == (ssize_t)out.len && back != NULL);
    CHECK(json_equal(frame, back));
    CHECK(type < 0 || r.type == type);
    json_decref(back);
    wire_reader_free(&r);
    buf_free(&out);
}

static void feed(const uint8_t *p, size_t n, int expect_type, size_t chunk, result_t *res)
{
    wire_reader_t r;
    wire_reader_init(&r, expect_type);
    memset(res, 0, sizeof *res);
    size_t off = 0;
    while (off < n && !res->err) {
        size_t end = chunk && n - off > chunk ? off + chunk : n;
        /* hand over [off, end) until the reader has taken all of it */
        while (off < end && !res->err) {
            json_t *frame = NULL;
            ssize_t used = wire_read(&r, p + off, end - off, &frame);
            if (used < 0) {
                CHECK(frame == NULL);
                CHECK(used == -EPROTO || used == -EMSGSIZE || used == -EBADMSG || used == -ENOMEM);
                res->err = (int)used;
                break;
            }
            CHECK((size_t)used <= end - off);
            CHECK(used > 0 || frame != NULL);
            off += (size_t)used;
            if (frame) {
                CHECK(json_is_object(frame));
                CHECK(json_integer_value(json_object_get(frame, "v")) == 1);
                if (res->n < MAX_FRAMES)
                    res->frames[res->n++] = frame;
                else
                    json_decref(frame);
            }
        }
    }
    res->type = r.type;
    CHECK(r.frames >= res->n);
    wire_reader_free(&r);
}

static void result_free(result_t *res)
{
    for (size_t i = 0; i < res->n; i++)
        json_decref(res->frames[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int expect_type = data[0] & 1;
    unsigned k = (data[0] >> 1) & 0x0f;
    data++;
    size--;
    uint8_t *p = malloc(size ? size : 1); /* exact size: reads past the end are caught */
    if (!p) return 0;
    memcpy(p, data, size);

    result_t whole, chunked;
    feed(p, size, expect_type, 0, &whole);
    feed(p, size, expect_type, k ? (size_t)k * k : 0, &chunked);
    CHECK(whole.err == chunked.err && whole.n == chunked.n && whole.type == chunked.type);
    for (size_t i = 0; i < whole.n; i++) {
        CHECK(json_equal(whole.frames[i], chunked.frames[i]));
        roundtrip(whole.frames[i], i == 0 && expect_type ? whole.type : -1);
    }
    result_free(&whole);
    result_free(&chunked);
    free(p);
    return 0;
}

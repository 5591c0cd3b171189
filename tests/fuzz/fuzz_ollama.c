/* libFuzzer target: the Ollama translation (src/core/ollama.h) — a client's body and what a
 * host answers.
 *
 * Byte 0 picks the endpoint (chat, generate, embed, embeddings) and the piece size. The rest is
 * fed as an Ollama request body, then as a streamed answer (SSE, whole and in pieces) and as a
 * whole answer. Oracles besides the sanitizers: a translated request is a JSON object naming the
 * model, on the path of its endpoint; a refused one says why and has no body; whole and
 * piecewise feeding write the same lines; every line written is one JSON object; the stream
 * always ends with a done or an error line. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ollama.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static void check_lines(const buf_t *b)
{
    CHECK(b->len > 0 && b->data[b->len - 1] == '\n');
    size_t start = 0;
    for (size_t i = 0; i < b->len; i++) {
        if (b->data[i] != '\n') continue;
        json_t *o = json_loadb(b->data + start, i - start, 0, NULL);
        CHECK(json_is_object(o));
        json_decref(o);
        start = i + 1;
    }
}

static void stream(const ollama_req_t *rq, const char *in, size_t n, size_t step, bool complete,
                   buf_t *out)
{
    ollama_resp_t r;
    ollama_resp_init(&r, rq, "T", 0);
    for (size_t i = 0; i < n; i += step)
        if (ollama_stream_feed(&r, in + i, i + step <= n ? step : n - i, 1, out) < 0) break;
    CHECK(ollama_stream_end(&r, complete, 2, out) == 0);
    ollama_resp_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const ollama_ep_t EPS[] = {OL_CHAT, OL_GENERATE, OL_EMBED, OL_EMBEDDINGS};
    ollama_ep_t ep = EPS[data[0] & 3];
    size_t step = (size_t)((data[0] >> 2) % 13) + 1;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;

    ollama_req_t rq;
    int rc = ollama_request(&rq, ep, in, n);
    CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    if (rc == 0) {
        json_t *o = json_loadb(rq.body, rq.body_len, 0, NULL);
        CHECK(json_is_object(o));
        CHECK(strcmp(json_string_value(json_object_get(o, "model")), rq.model) == 0);
        json_decref(o);
        CHECK(ep == OL_EMBED || ep == OL_EMBEDDINGS ? strcmp(rq.path, "/v1/embeddings") == 0
                                                    : strncmp(rq.path, "/v1/", 4) == 0);
    } else {
        CHECK(rq.body == NULL && (rc == -ENOMEM || rq.err[0]));
        rq.ep = ep;
        rq.raw = data[0] & 0x80;
        strcpy(rq.model, "m");
    }
    if (ep == OL_CHAT || ep == OL_GENERATE) {
        buf_t a, b;
        buf_init(&a, 1 << 22);
        buf_init(&b, 1 << 22);
        bool complete = data[0] & 0x40;
        stream(&rq, in, n, n ? n : 1, complete, &a);
        stream(&rq, in, n, step, complete, &b);
        CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
        check_lines(&a);
        buf_free(&a);
        buf_free(&b);
    }
    ollama_resp_t r;
    ollama_resp_init(&r, &rq, "T", 0);
    buf_t w;
    buf_init(&w, 1 << 22);
    int status = 0;
    CHECK(ollama_whole(&r, (data[0] & 0x20) ? 400 : 200, in, n, 1, &w, &status) == 0);
    json_t *o = json_loadb(w.data, w.len, 0, NULL);
    CHECK(json_is_object(o));
    json_decref(o);
    buf_free(&w);
    ollama_resp_free(&r);
    ollama_req_free(&rq);
    return 0;
}

/* libFuzzer target: the SSE parser (src/core/sse.h) and stream continuation (src/core/resume.h)
 * on what a host streams back.
 *
 * Oracles besides the sanitizers: feeding the input whole and in pieces (sizes from byte 0)
 * dispatches the same events; the parser never holds more than its cap; every event goes
 * through resume_track_event and resume_splice_event; a stream that is not blocked always
 * yields a continuation request that is valid JSON (or "nothing left"). */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "resume.h"
#include "sse.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

#define MAX_EV 512

typedef struct {
    uint64_t hash;
    size_t n;
    resume_track_t *t;
    buf_t *out;
} acc_t;

static void on_ev(void *ud, const char *event, const char *data, size_t len)
{
    acc_t *a = ud;
    CHECK(len <= MAX_EV);
    a->n++;
    uint64_t h = a->hash ^ 0x9e3779b97f4a7c15ULL;
    for (const char *e = event; *e; e++)
        h = (h ^ (uint8_t)*e) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)data[i]) * 1099511628211ULL;
    a->hash = h;
    if (a->t) {
        resume_track_event(a->t, data, len);
        int rc = resume_splice_event(a->t, data, len, a->out);
        CHECK(rc == 0 || rc == 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t step = (size_t)(data[0] % 17) + 1;
    resume_kind_t kind = (data[0] & 0x80) ? RESUME_COMPLETION : RESUME_CHAT;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;

    resume_track_t t;
    resume_track_init(&t, kind);
    buf_t out;
    buf_init(&out, 1 << 20);
    sse_parser_t p1, p2;
    sse_init(&p1, MAX_EV);
    sse_init(&p2, MAX_EV);
    acc_t a1 = {0, 0, &t, &out}, a2 = {0, 0, NULL, NULL};
    CHECK(sse_feed(&p1, in, n, on_ev, &a1) == 0);
    for (size_t i = 0; i < n; i += step) {
        CHECK(sse_feed(&p2, in + i, i + step <= n ? step : n - i, on_ev, &a2) == 0);
        CHECK(p2.line_len <= MAX_EV + 16 && p2.data_len <= MAX_EV);
    }
    CHECK(a1.n == a2.n && a1.hash == a2.hash && p1.dropped == p2.dropped);
    CHECK(sse_pending(&p1) == sse_pending(&p2));

    static const char *const bodies[] = {
        "{\"stream\":true,\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
        "{\"stream\":true,\"n_predict\":4,\"prompt\":\"p\"}",
    };
    const char *body = bodies[kind];
    char *cont = NULL;
    size_t cl = 0;
    char why[160];
    int rc = resume_build(&t, body, strlen(body), &cont, &cl, why, sizeof why);
    CHECK(t.blocked ? rc == -EINVAL : (rc == 0 || rc == RESUME_NOTHING_LEFT));
    if (rc == 0) {
        json_t *o = json_loadb(cont, cl, 0, NULL);
        CHECK(json_is_object(o));
        json_decref(o);
    }
    free(cont);
    CHECK(resume_length_chunk(&t, &out) == 0);
    buf_free(&out);
    resume_track_free(&t);
    sse_free(&p1);
    sse_free(&p2);
    return 0;
}

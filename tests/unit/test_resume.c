/* Unit tests for stream continuation (src/core/resume.h): tracking, continuation requests,
 * splicing, refusals, the first-byte deadline. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "resume.h"

#define EV(s) resume_track_event(&t, s, strlen(s))

static const char *CHAT_BODY = "{\"model\":\"m\",\"stream\":true,\"max_tokens\":10,"
                               "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

static void chat_chunks(resume_track_t *tp)
{
    resume_track_t t;
    resume_track_init(&t, RESUME_CHAT);
    EV("{\"id\":\"chatcmpl-A\",\"created\":111,\"model\":\"m\",\"choices\":[{\"index\":0,"
       "\"delta\":{\"role\":\"assistant\",\"content\":null},\"finish_reason\":null}]}");
    EV("{\"id\":\"chatcmpl-A\",\"created\":111,\"choices\":[{\"index\":0,\"delta\":"
       "{\"content\":\"Once\"},\"finish_reason\":null}]}");
    EV("{\"id\":\"chatcmpl-A\",\"created\":111,\"choices\":[{\"index\":0,\"delta\":"
       "{\"content\":\" upon\"},\"finish_reason\":null}]}");
    *tp = t;
}

static void test_track_and_build_chat(void **state)
{
    (void)state;
    resume_track_t t;
    chat_chunks(&t);
    assert_false(t.blocked);
    assert_string_equal(t.id, "chatcmpl-A");
    assert_int_equal(t.created, 111);
    assert_string_equal(t.text, "Once upon");
    assert_int_equal(t.n_tokens, 2);
    char *out;
    size_t ol;
    char why[160];
    assert_int_equal(resume_build(&t, CHAT_BODY, strlen(CHAT_BODY), &out, &ol, why, sizeof why), 0);
    json_t *o = json_loads(out, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(o, "max_tokens")), 8);
    json_t *msgs = json_object_get(o, "messages");
    assert_int_equal(json_array_size(msgs), 2);
    json_t *last = json_array_get(msgs, 1);
    assert_string_equal(json_string_value(json_object_get(last, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(last, "content")), "Once upon");
    json_decref(o);
    free(out);

    /* the request's own prefill is extended, not duplicated */
    const char *pre = "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
                      "{\"role\":\"assistant\",\"content\":\"Tale: \"}]}";
    assert_int_equal(resume_build(&t, pre, strlen(pre), &out, &ol, why, sizeof why), 0);
    o = json_loads(out, 0, NULL);
    msgs = json_object_get(o, "messages");
    assert_int_equal(json_array_size(msgs), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 1), "content")),
                        "Tale: Once upon");
    json_decref(o);
    free(out);
    resume_track_free(&t);
}

static void test_completion_and_budget(void **state)
{
    (void)state;
    resume_track_t t;
    resume_track_init(&t, RESUME_COMPLETION);
    EV("{\"id\":\"cmpl-1\",\"created\":5,\"choices\":[{\"index\":0,\"text\":\" the\"}]}");
    EV("{\"id\":\"cmpl-1\",\"created\":5,\"choices\":[{\"index\":0,\"text\":\" end\"}]}");
    const char *b = "{\"stream\":true,\"prompt\":\"At\",\"n_predict\":2}";
    char *out;
    size_t ol;
    char why[160];
    assert_int_equal(resume_build(&t, b, strlen(b), &out, &ol, why, sizeof why),
                     RESUME_NOTHING_LEFT);
    assert_null(out);
    b = "{\"stream\":true,\"prompt\":\"At\",\"n_predict\":5,\"max_tokens\":-1}";
    assert_int_equal(resume_build(&t, b, strlen(b), &out, &ol, why, sizeof why), 0);
    json_t *o = json_loads(out, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(o, "prompt")), "At the end");
    assert_int_equal(json_integer_value(json_object_get(o, "n_predict")), 3);
    assert_int_equal(json_integer_value(json_object_get(o, "max_tokens")), -1);
    json_decref(o);
    free(out);
    resume_track_free(&t);
}

static void test_blocked(void **state)
{
    (void)state;
    static const char *const evs[] = {
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}",
        "{\"choices\":[{\"index\":1,\"delta\":{\"content\":\"x\"}}]}",
        "{\"error\":{\"message\":\"boom\"}}",
        "not json",
        "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hmm\"}}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":[{\"type\":\"image\"}]}}]}",
    };
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
        resume_track_t t;
        resume_track_init(&t, RESUME_CHAT);
        EV(evs[i]);
        assert_true(t.blocked);
        char *out;
        size_t ol;
        char why[160] = "";
        assert_int_equal(resume_build(&t, CHAT_BODY, strlen(CHAT_BODY), &out, &ol, why, sizeof why),
                         -EINVAL);
        assert_true(why[0]);
        resume_track_free(&t);
    }
    static const struct {
        int kind;
        const char *body;
    } bad[] = {
        {RESUME_CHAT, "{\"messages\":[]}"},                                   /* not streamed */
        {RESUME_CHAT, "{\"stream\":true,\"n\":2,\"messages\":[]}"},           /* n > 1 */
        {RESUME_CHAT, "{\"stream\":true,\"grammar\":\"x\",\"messages\":[]}"}, /* constrained */
        {RESUME_COMPLETION, "{\"stream\":true,\"prompt\":[1,2,3]}"},          /* token prompt */
        {RESUME_CHAT, "[1]"},
    };
    /* refused up front (request_resumable, the body parsed once), and by resume_build */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *path =
            bad[i].kind == RESUME_COMPLETION ? "/v1/completions" : "/v1/chat/completions";
        request_t rq;
        request_parse(&rq, path, bad[i].body, strlen(bad[i].body));
        char why[160] = "", why2[160] = "";
        assert_false(request_resumable(&rq, why, sizeof why));
        assert_true(why[0]);
        resume_track_t bt;
        resume_track_init(&bt, (resume_kind_t)bad[i].kind);
        char *out;
        size_t ol;
        assert_int_equal(
            resume_build(&bt, bad[i].body, strlen(bad[i].body), &out, &ol, why2, sizeof why2),
            -EINVAL);
        assert_string_equal(why, why2);
        resume_track_free(&bt);
    }
    request_t ok;
    request_parse(&ok, "/v1/chat/completions", CHAT_BODY, strlen(CHAT_BODY));
    assert_true(request_resumable(&ok, NULL, 0));
    assert_int_equal(resume_kind_for_path("/v1/chat/completions"), RESUME_CHAT);
    assert_int_equal(resume_kind_for_path("/v1/completions"), RESUME_COMPLETION);
    assert_int_equal(resume_kind_for_path("/v1/messages"), -1);
}

static void test_splice(void **state)
{
    (void)state;
    resume_track_t t;
    chat_chunks(&t);
    buf_t out;
    buf_init(&out, 1 << 20);
    const char *role = "{\"id\":\"chatcmpl-B\",\"created\":999,\"choices\":[{\"index\":0,"
                       "\"delta\":{\"role\":\"assistant\",\"content\":null},"
                       "\"finish_reason\":null}]}";
    assert_int_equal(resume_splice_event(&t, role, strlen(role), &out), 0);
    const char *tok = "{\"id\":\"chatcmpl-B\",\"created\":999,\"choices\":[{\"index\":0,"
                      "\"delta\":{\"content\":\" a\"},\"finish_reason\":null}]}";
    assert_int_equal(resume_splice_event(&t, tok, strlen(tok), &out), 1);
    json_t *o = json_loadb(out.data, out.len, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(o, "id")), "chatcmpl-A");
    assert_int_equal(json_integer_value(json_object_get(o, "created")), 111);
    json_decref(o);
    assert_int_equal(resume_splice_event(&t, "[DONE]", 6, &out), 1);
    assert_int_equal(out.len, 6);
    assert_int_equal(resume_length_chunk(&t, &out), 0);
    o = json_loadb(out.data, out.len, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(o, "id")), "chatcmpl-A");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(o, "choices"), 0), "finish_reason")),
                        "length");
    json_decref(o);
    buf_free(&out);
    resume_track_free(&t);
}

static void test_first_byte(void **state)
{
    (void)state;
    assert_int_equal(resume_first_byte_ms(30000, 2000, 0), 30000);
    assert_int_equal(resume_first_byte_ms(30000, 2000, 1023), 30000);
    assert_int_equal(resume_first_byte_ms(30000, 2000, 8192), 46000);
    assert_int_equal(resume_first_byte_ms(30000, 2000, (size_t)1 << 40), 30 * 60 * 1000);
    assert_int_equal(resume_first_byte_ms(UINT64_MAX, 0, 0), 30 * 60 * 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_track_and_build_chat),
        cmocka_unit_test(test_completion_and_budget),
        cmocka_unit_test(test_blocked),
        cmocka_unit_test(test_splice),
        cmocka_unit_test(test_first_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

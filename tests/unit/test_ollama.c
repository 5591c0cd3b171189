/* Unit tests for the Ollama translation (src/core/ollama.h): endpoints, request bodies (a table
 * of Ollama bodies and the OpenAI fields they become, and of the 400s), and the answers: SSE
 * events to NDJSON lines (whole and split), whole answers, errors, a stream cut short. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "ollama.h"

static void test_endpoints(void **state)
{
    (void)state;
    assert_int_equal(ollama_endpoint("/api/chat"), OL_CHAT);
    assert_int_equal(ollama_endpoint("/api/generate"), OL_GENERATE);
    assert_int_equal(ollama_endpoint("/api/embed"), OL_EMBED);
    assert_int_equal(ollama_endpoint("/api/embeddings"), OL_EMBEDDINGS);
    assert_int_equal(ollama_endpoint("/api/tags"), OL_TAGS);
    assert_int_equal(ollama_endpoint("/api/copy"), OL_UNKNOWN);
    assert_int_equal(ollama_endpoint("/api/v1/models"), OL_NONE);
    assert_int_equal(ollama_endpoint("/api/v0/health"), OL_NONE);
    assert_int_equal(ollama_endpoint("/v1/chat/completions"), OL_NONE);
    assert_int_equal(ollama_endpoint(NULL), OL_NONE);
    assert_string_equal(ollama_method(OL_DELETE), "DELETE");
    assert_string_equal(ollama_method(OL_TAGS), "GET");
    assert_null(ollama_method(OL_UNKNOWN));
    /* the path the request log shows and the metrics label of each inference endpoint */
    assert_string_equal(ollama_path(OL_CHAT), "/api/chat");
    assert_string_equal(ollama_path(OL_EMBEDDINGS), "/api/embeddings");
    assert_null(ollama_path(OL_UNKNOWN));
    assert_string_equal(ollama_label(OL_CHAT), "ollama_chat");
    assert_string_equal(ollama_label(OL_GENERATE), "ollama_generate");
    assert_string_equal(ollama_label(OL_EMBED), "ollama_embed");
    assert_string_equal(ollama_label(OL_EMBEDDINGS), "ollama_embeddings");
    assert_null(ollama_label(OL_TAGS));
    assert_null(ollama_label(OL_NONE));
    assert_true(ollama_is_inference(OL_EMBED));
    assert_false(ollama_is_inference(OL_SHOW));
    assert_string_equal(ollama_quant_name(7), "Q8_0");
    assert_string_equal(ollama_quant_name(15), "Q4_K_M");
    assert_string_equal(ollama_quant_name(5), "unknown");
    assert_string_equal(ollama_quant_name(-1), "unknown");
    assert_string_equal(ollama_quant_name(1000), "unknown");
}

/* Translate body and return the OpenAI body as a JSON object (the caller decrefs). */
static json_t *xlate(ollama_ep_t ep, const char *body, ollama_req_t *rq)
{
    int rc = ollama_request(rq, ep, body, strlen(body));
    if (rc) {
        print_message("%s: %s\n", body, rq->err);
        fail();
    }
    json_t *o = json_loadb(rq->body, rq->body_len, 0, NULL);
    assert_non_null(o);
    return o;
}

static void test_chat_request(void **state)
{
    (void)state;
    ollama_req_t rq;
    json_t *o = xlate(OL_CHAT,
                      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                      "\"options\":{\"temperature\":0.5,\"num_predict\":7,\"top_k\":3,"
                      "\"num_ctx\":4096,\"stop\":\"END\",\"repeat_penalty\":1.1},"
                      "\"format\":\"json\",\"keep_alive\":0}",
                      &rq);
    assert_string_equal(rq.path, "/v1/chat/completions");
    assert_true(rq.stream && rq.keep_alive_zero && !rq.images && !rq.load_only);
    assert_string_equal(rq.model, "m");
    assert_true(json_is_true(json_object_get(o, "stream")));
    assert_true(
        json_is_true(json_object_get(json_object_get(o, "stream_options"), "include_usage")));
    assert_int_equal(json_integer_value(json_object_get(o, "max_tokens")), 7);
    assert_int_equal(json_integer_value(json_object_get(o, "top_k")), 3);
    assert_null(json_object_get(o, "num_ctx"));
    assert_string_equal(json_string_value(json_array_get(json_object_get(o, "stop"), 0)), "END");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(o, "response_format"), "type")),
        "json_object");
    json_t *m = json_array_get(json_object_get(o, "messages"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "content")), "hi");
    json_decref(o);
    ollama_req_free(&rq);

    /* images become image_url parts, tool calls OpenAI's, a schema json_schema, no stream */
    o = xlate(OL_CHAT,
              "{\"model\":\"v\",\"stream\":false,\"format\":{\"type\":\"object\"},"
              "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
              "\"messages\":[{\"role\":\"user\",\"content\":\"look\",\"images\":[\"iVBORw0\"]},"
              "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":"
              "{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},"
              "{\"role\":\"tool\",\"content\":\"42\",\"tool_name\":\"f\"}]}",
              &rq);
    assert_true(rq.images && !rq.stream && !rq.keep_alive_zero);
    assert_null(json_object_get(o, "stream"));
    json_t *msgs = json_object_get(o, "messages");
    json_t *parts = json_object_get(json_array_get(msgs, 0), "content");
    assert_int_equal(json_array_size(parts), 2);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_array_get(parts, 1), "image_url"), "url")),
                        "data:image/png;base64,iVBORw0");
    json_t *call = json_array_get(json_object_get(json_array_get(msgs, 1), "tool_calls"), 0);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
        "{\"a\":1}");
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 2), "name")), "f");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(o, "response_format"), "type")),
        "json_schema");
    assert_int_equal(json_array_size(json_object_get(o, "tools")), 1);
    json_decref(o);
    ollama_req_free(&rq);
}

static void test_generate_embed_request(void **state)
{
    (void)state;
    ollama_req_t rq;
    json_t *o = xlate(OL_GENERATE, "{\"model\":\"m\",\"prompt\":\"p\",\"system\":\"s\"}", &rq);
    assert_string_equal(rq.path, "/v1/chat/completions");
    json_t *msgs = json_object_get(o, "messages");
    assert_int_equal(json_array_size(msgs), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 0), "role")),
                        "system");
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 1), "content")),
                        "p");
    json_decref(o);
    ollama_req_free(&rq);

    o = xlate(OL_GENERATE, "{\"model\":\"m\",\"prompt\":\"p\",\"raw\":true,\"stream\":false}", &rq);
    assert_string_equal(rq.path, "/v1/completions");
    assert_true(rq.raw);
    assert_string_equal(json_string_value(json_object_get(o, "prompt")), "p");
    json_decref(o);
    ollama_req_free(&rq);

    /* a raw generate's format: llama.cpp's json_schema (/v1/completions ignores
     * response_format) */
    o = xlate(OL_GENERATE, "{\"model\":\"m\",\"prompt\":\"p\",\"raw\":true,\"format\":\"json\"}",
              &rq);
    assert_null(json_object_get(o, "response_format"));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(o, "json_schema"), "type")), "object");
    json_decref(o);
    ollama_req_free(&rq);
    o = xlate(OL_GENERATE,
              "{\"model\":\"m\",\"prompt\":\"p\",\"raw\":true,\"format\":{\"enum\":[\"a\"]}}", &rq);
    assert_null(json_object_get(o, "response_format"));
    assert_int_equal(json_array_size(json_object_get(json_object_get(o, "json_schema"), "enum")),
                     1);
    json_decref(o);
    ollama_req_free(&rq);

    o = xlate(OL_GENERATE, "{\"model\":\"m\"}", &rq);
    assert_true(rq.load_only);
    json_decref(o);
    ollama_req_free(&rq);

    o = xlate(OL_EMBED, "{\"model\":\"e\",\"input\":[\"a\",\"b\"]}", &rq);
    assert_string_equal(rq.path, "/v1/embeddings");
    assert_false(rq.stream);
    assert_int_equal(json_array_size(json_object_get(o, "input")), 2);
    json_decref(o);
    ollama_req_free(&rq);

    o = xlate(OL_EMBEDDINGS, "{\"model\":\"e\",\"prompt\":\"a\"}", &rq);
    assert_string_equal(json_string_value(json_object_get(o, "input")), "a");
    json_decref(o);
    ollama_req_free(&rq);
}

static void test_bad_requests(void **state)
{
    (void)state;
    static const struct {
        ollama_ep_t ep;
        const char *body, *err;
    } T[] = {
        {OL_CHAT, "nope", "the body must be a JSON object"},
        {OL_CHAT, "[]", "the body must be a JSON object"},
        {OL_CHAT, "{\"messages\":[]}", "model is required"},
        {OL_CHAT, "{\"model\":\"m\",\"stream\":1}", "stream must be a boolean"},
        {OL_CHAT, "{\"model\":\"m\",\"messages\":{}}", "messages must be an array"},
        {OL_CHAT, "{\"model\":\"m\",\"messages\":[1]}", "messages[0] must be an object"},
        {OL_CHAT, "{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}",
         "messages[0].role must be a string"},
        {OL_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"images\":[1]}]}",
         "images must be base64 strings"},
        {OL_CHAT, "{\"model\":\"m\",\"options\":3}", "options must be an object"},
        {OL_CHAT, "{\"model\":\"m\",\"options\":{\"temperature\":\"hot\"}}",
         "options.temperature must be a number"},
        {OL_CHAT, "{\"model\":\"m\",\"options\":{\"num_predict\":1.5}}",
         "options.num_predict must be an integer"},
        {OL_CHAT, "{\"model\":\"m\",\"options\":{\"stop\":[1]}}",
         "options.stop must be an array of strings"},
        {OL_CHAT, "{\"model\":\"m\",\"format\":\"yaml\"}",
         "format must be \"json\" or a JSON schema object"},
        {OL_CHAT, "{\"model\":\"m\",\"tools\":{}}", "tools must be an array"},
        {OL_GENERATE, "{\"model\":\"m\",\"prompt\":3}", "prompt must be a string"},
        {OL_GENERATE, "{\"model\":\"m\",\"prompt\":\"p\",\"raw\":true,\"images\":[\"x\"]}",
         "images cannot be sent with raw: true"},
        {OL_EMBED, "{\"model\":\"m\"}", "input must be a string or an array of strings"},
        {OL_EMBED, "{\"model\":\"m\",\"input\":[]}", "input must not be empty"},
        {OL_EMBEDDINGS, "{\"model\":\"m\",\"prompt\":[\"a\"]}", "prompt must be a string"},
        {OL_SHOW, "{\"model\":\"m\"}", "not an inference endpoint"},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        ollama_req_t rq;
        int rc = ollama_request(&rq, T[i].ep, T[i].body, strlen(T[i].body));
        if (rc != -EINVAL || strcmp(rq.err, T[i].err) != 0) {
            print_message("row %zu: rc %d err '%s', want '%s'\n", i, rc, rq.err, T[i].err);
            fail();
        }
        assert_null(rq.body);
        ollama_req_free(&rq);
    }
    char model[64], err[OLLAMA_ERR_MAX];
    bool stream = false;
    assert_int_equal(
        ollama_model_of("{\"name\":\"x\"}", 12, model, sizeof model, &stream, err, sizeof err), 0);
    assert_string_equal(model, "x");
    assert_true(stream);
    assert_int_equal(ollama_model_of("{\"model\":\"y\",\"stream\":false}", 28, model, sizeof model,
                                     &stream, err, sizeof err),
                     0);
    assert_false(stream);
    assert_int_equal(ollama_model_of("{}", 2, model, sizeof model, NULL, err, sizeof err), -EINVAL);
    assert_string_equal(err, "model is required");
}

#define CHUNK(c) "data: {\"choices\":[{\"delta\":{\"content\":\"" c "\"}}]}\n\n"

static const char STREAM[] =
    "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n" CHUNK("Once") CHUNK(
        " upon") "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
                 "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2},"
                 "\"timings\":{\"prompt_ms\":1.5,\"predicted_ms\":2.0}}\n\n"
                 "data: [DONE]\n\n";

static void run_stream(ollama_ep_t ep, const char *in, size_t step, bool complete, buf_t *out)
{
    ollama_req_t rq = {.ep = ep};
    snprintf(rq.model, sizeof rq.model, "m");
    ollama_resp_t r;
    ollama_resp_init(&r, &rq, "T", 1000);
    size_t n = strlen(in);
    for (size_t i = 0; i < n; i += step)
        assert_int_equal(ollama_stream_feed(&r, in + i, i + step <= n ? step : n - i, 5000, out),
                         0);
    assert_int_equal(ollama_stream_end(&r, complete, 6000, out), 0);
    ollama_resp_free(&r);
}

static void test_stream(void **state)
{
    (void)state;
    const char *want = "{\"model\":\"m\",\"created_at\":\"T\",\"message\":{\"role\":\"assistant\","
                       "\"content\":\"Once\"},\"done\":false}\n"
                       "{\"model\":\"m\",\"created_at\":\"T\",\"message\":{\"role\":\"assistant\","
                       "\"content\":\" upon\"},\"done\":false}\n"
                       "{\"model\":\"m\",\"created_at\":\"T\",\"message\":{\"role\":\"assistant\","
                       "\"content\":\"\"},\"done\":true,\"done_reason\":\"length\","
                       "\"total_duration\":4000,\"load_duration\":0,\"prompt_eval_count\":5,"
                       "\"prompt_eval_duration\":1500000,\"eval_count\":2,"
                       "\"eval_duration\":2000000}\n";
    size_t steps[] = {1, 7, sizeof STREAM};
    for (size_t s = 0; s < 3; s++) {
        buf_t out;
        buf_init(&out, 1 << 20);
        run_stream(OL_CHAT, STREAM, steps[s], true, &out);
        assert_non_null(out.data);
        assert_string_equal(out.data, want);
        buf_free(&out);
    }
    /* generate: "response"; cut short: an error line last */
    buf_t out;
    buf_init(&out, 1 << 20);
    run_stream(OL_GENERATE, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", 3, false,
               &out);
    assert_string_equal(out.data,
                        "{\"model\":\"m\",\"created_at\":\"T\",\"response\":\"a\",\"done\":false}\n"
                        "{\"error\":\"the answer broke off: its model server failed\"}\n");
    buf_reset(&out);
    /* an error event mid-stream */
    run_stream(OL_CHAT,
               "data: {\"error\":{\"message\":\"boom\",\"type\":\"x\"}}\n\ndata: [DONE]\n\n", 100,
               true, &out);
    assert_string_equal(out.data, "{\"error\":\"boom\"}\n");
    buf_reset(&out);
    /* streamed tool calls are gathered into one line before the done line */
    run_stream(OL_CHAT,
               "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
               "{\"name\":\"get\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n"
               "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
               "{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n"
               "data: [DONE]\n\n",
               5, true, &out);
    assert_non_null(strstr(out.data, "\"tool_calls\":[{\"function\":{\"name\":\"get\","
                                     "\"arguments\":{\"a\":1}}}]"));
    assert_non_null(strstr(out.data, "\"done\":true,\"done_reason\":\"stop\""));
    buf_free(&out);
}

static void test_whole(void **state)
{
    (void)state;
    ollama_req_t rq = {.ep = OL_CHAT};
    snprintf(rq.model, sizeof rq.model, "m");
    ollama_resp_t r;
    buf_t out;
    buf_init(&out, 1 << 20);
    int status;
    const char *ok = "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},"
                     "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,"
                     "\"completion_tokens\":1}}";
    ollama_resp_init(&r, &rq, "T", 0);
    assert_int_equal(ollama_whole(&r, 200, ok, strlen(ok), 10, &out, &status), 0);
    assert_int_equal(status, 200);
    assert_string_equal(out.data,
                        "{\"model\":\"m\",\"created_at\":\"T\",\"message\":{\"role\":\"assistant\","
                        "\"content\":\"hi\"},\"done\":true,\"done_reason\":\"stop\","
                        "\"total_duration\":10,\"load_duration\":0,\"prompt_eval_count\":3,"
                        "\"prompt_eval_duration\":0,\"eval_count\":1,\"eval_duration\":0}");
    ollama_resp_free(&r);
    buf_reset(&out);

    const char *e = "{\"error\":{\"message\":\"model 'x' not found\",\"type\":\"t\"}}";
    ollama_resp_init(&r, &rq, "T", 0);
    assert_int_equal(ollama_whole(&r, 404, e, strlen(e), 10, &out, &status), 0);
    assert_int_equal(status, 404);
    assert_string_equal(out.data, "{\"error\":\"model 'x' not found\"}");
    ollama_resp_free(&r);
    buf_reset(&out);

    ollama_resp_init(&r, &rq, "T", 0);
    assert_int_equal(ollama_whole(&r, 500, "oops", 4, 10, &out, &status), 0);
    assert_string_equal(out.data, "{\"error\":\"the model server answered 500\"}");
    ollama_resp_free(&r);
    buf_reset(&out);

    ollama_resp_init(&r, &rq, "T", 0);
    assert_int_equal(ollama_whole(&r, 200, "oops", 4, 10, &out, &status), 0);
    assert_int_equal(status, 502);
    ollama_resp_free(&r);
    buf_reset(&out);

    const char *emb = "{\"data\":[{\"embedding\":[0.5,1]},{\"embedding\":[2,3]}],"
                      "\"usage\":{\"prompt_tokens\":4}}";
    rq.ep = OL_EMBED;
    ollama_resp_init(&r, &rq, "T", 0);
    assert_int_equal(ollama_whole(&r, 200, emb, strlen(emb), 7, &out, &status), 0);
    assert_string_equal(out.data, "{\"model\":\"m\",\"embeddings\":[[0.5,1],[2,3]],"
                                  "\"total_duration\":7,\"load_duration\":0,"
                                  "\"prompt_eval_count\":4}");
    ollama_resp_free(&r);
    buf_reset(&out);

    rq.ep = OL_EMBEDDINGS;
    ollama_resp_init(&r, &rq, "T", 0);
    assert_int_equal(ollama_whole(&r, 200, emb, strlen(emb), 7, &out, &status), 0);
    assert_string_equal(out.data, "{\"embedding\":[0.5,1]}");
    ollama_resp_free(&r);
    buf_free(&out);
}

/* keep_alive: seconds, Go durations, negatives (no limit); what is not one is refused */
static void test_keep_alive(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int rc;
        int64_t ms;
    } rows[] = {
        {"0", 0, 0},
        {"300", 0, 300000},
        {"1.5", 0, 1500},
        {"-1", 0, -1},
        {"\"0\"", 0, 0},
        {"\"0s\"", 0, 0},
        {"\"5m\"", 0, 300000},
        {"\"1h30m\"", 0, 5400000},
        {"\"250ms\"", 0, 250},
        {"\"1.5h\"", 0, 5400000},
        {"\"2m30s\"", 0, 150000},
        {"\"1500us\"", 0, 2},
        {"\"-1m\"", 0, -1},
        {"\"-1\"", 0, -1},
        {"\"300\"", 0, 300000},
        {"\"1000000h\"", 0, -1}, /* beyond the cap: no limit */
        {"\"5\"", 0, 5000},
        {"\"5x\"", -EINVAL, 0},
        {"\"m\"", -EINVAL, 0},
        {"\"\"", -EINVAL, 0},
        {"\"5m junk\"", -EINVAL, 0},
        {"\"1h-5m\"", -EINVAL, 0},
        {"true", -EINVAL, 0},
        {"[1]", -EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        json_t *v = json_loads(rows[i].json, JSON_DECODE_ANY, NULL);
        assert_non_null(v);
        int64_t ms = 12345;
        int rc = ollama_keep_alive(v, &ms);
        if (rc != rows[i].rc || (rc == 0 && ms != rows[i].ms))
            fail_msg("keep_alive %s: rc %d ms %lld, want rc %d ms %lld", rows[i].json, rc,
                     (long long)ms, rows[i].rc, (long long)rows[i].ms);
        json_decref(v);
    }
    /* in a request: set, zero, refused */
    ollama_req_t rq;
    const char *b = "{\"model\":\"m\",\"prompt\":\"hi\",\"keep_alive\":\"10m\"}";
    assert_int_equal(ollama_request(&rq, OL_GENERATE, b, strlen(b)), 0);
    assert_true(rq.keep_alive_set && !rq.keep_alive_zero);
    assert_int_equal(rq.keep_alive_ms, 600000);
    ollama_req_free(&rq);
    b = "{\"model\":\"m\",\"prompt\":\"hi\"}";
    assert_int_equal(ollama_request(&rq, OL_GENERATE, b, strlen(b)), 0);
    assert_false(rq.keep_alive_set || rq.keep_alive_zero);
    ollama_req_free(&rq);
    b = "{\"model\":\"m\",\"prompt\":\"hi\",\"keep_alive\":\"soon\"}";
    assert_int_equal(ollama_request(&rq, OL_GENERATE, b, strlen(b)), -EINVAL);
    assert_non_null(strstr(rq.err, "keep_alive"));
    ollama_req_free(&rq);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_chat_request),
        cmocka_unit_test(test_generate_embed_request),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_whole),
        cmocka_unit_test(test_keep_alive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

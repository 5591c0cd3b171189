/* Unit tests for the route table (src/core/api_routes.h) and the metrics registry
 * (src/core/metrics.h): table tests, bounded labels, the exposition text, usage parsing. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api_routes.h"
#include "metrics.h"
#include "ollama.h"

static void test_route_table(void **state)
{
    (void)state;
    static const struct {
        const char *path;
        int needs;
        api_err_shape_t shape;
    } rows[] = {
        {"/v1/chat/completions", API_NEEDS_LLM, API_ERR_OPENAI},
        {"/v1/messages", API_NEEDS_LLM, API_ERR_ANTHROPIC},
        {"/v1/messages/count_tokens", API_NEEDS_LLM, API_ERR_ANTHROPIC},
        {"/v1/responses", API_NEEDS_LLM, API_ERR_OPENAI},
        {"/tokenize", API_NEEDS_ANY, API_ERR_OPENAI},
        {"/detokenize", API_NEEDS_ANY, API_ERR_OPENAI},
        {"/apply-template", API_NEEDS_LLM, API_ERR_OPENAI},
        {"/infill", API_NEEDS_LLM, API_ERR_OPENAI},
        {"/v1/embeddings", API_NEEDS_EMBEDDING, API_ERR_OPENAI},
        {"/v1/rerank", API_NEEDS_RERANKING, API_ERR_OPENAI},
        {"/v1/reranking", API_NEEDS_RERANKING, API_ERR_OPENAI},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const api_route_t *r = api_route_find(rows[i].path);
        if (!r) fail_msg("no route for %s", rows[i].path);
        assert_int_equal(r->needs, rows[i].needs);
        assert_int_equal(r->errors, rows[i].shape);
        assert_string_equal(r->model_field, "model");
        assert_int_equal(api_route_err_shape(rows[i].path), rows[i].shape);
    }
    const char *none[] = {"/v1/models",    "/props",     "/slots",    "/metrics", "/v1/messages/",
                          "/v1/messagesX", "/tokenize/", "/TOKENIZE", "",         "/api/v1/load"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (api_route_find(none[i])) fail_msg("route for '%s'", none[i]);
    assert_int_equal(api_route_err_shape("/v1/messagesX"), API_ERR_OPENAI);
    assert_int_equal(api_route_err_shape("/v1/messages/other"), API_ERR_ANTHROPIC);
    /* every label is one the registry knows (bounded endpoint label) */
    for (size_t i = 0; i < api_route_count(); i++)
        assert_non_null(api_route_at(i)->label);
}

static void test_tunnel_allowlist(void **state)
{
    (void)state;
    assert_true(api_route_tunnel_allowed("POST", "/v1/messages"));
    assert_true(api_route_tunnel_allowed("POST", "/tokenize"));
    assert_true(api_route_tunnel_allowed("GET", "/v1/models"));
    assert_true(api_route_tunnel_allowed("GET", "/health"));
    assert_false(api_route_tunnel_allowed("GET", "/tokenize"));
    assert_false(api_route_tunnel_allowed("POST", "/props"));
    assert_false(api_route_tunnel_allowed("POST", "/v1/unknown"));
    assert_false(api_route_tunnel_allowed("DELETE", "/v1/models"));
    static const struct {
        const char *line;
        bool ok;
    } lines[] = {
        {"POST /v1/messages HTTP/1.1", true},
        {"POST /v1/messages?beta=true HTTP/1.1", true},
        {"GET /health HTTP/1.1", true},
        {"GET /v1/models HTTP/1.0", true},
        {"POST /props HTTP/1.1", false},
        {"POST /slots/0?action=save HTTP/1.1", false},
        {"POST /api/v1/load HTTP/1.1", false},
        {"POST /v1/messages", false},
        {"POST  /v1/messages HTTP/1.1", false},
        {"POST /v1/messages/../../props HTTP/1.1", false},
        {"POSTPOSTPOST /tokenize HTTP/1.1", false},
        {"", false},
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        if (api_route_tunnel_line_allowed(lines[i].line, strlen(lines[i].line)) != lines[i].ok)
            fail_msg("'%s' should be %s", lines[i].line, lines[i].ok ? "allowed" : "refused");
}

static void test_anthropic_types(void **state)
{
    (void)state;
    assert_string_equal(api_anthropic_error_type(400), "invalid_request_error");
    assert_string_equal(api_anthropic_error_type(401), "authentication_error");
    assert_string_equal(api_anthropic_error_type(403), "permission_error");
    assert_string_equal(api_anthropic_error_type(404), "not_found_error");
    assert_string_equal(api_anthropic_error_type(413), "request_too_large");
    assert_string_equal(api_anthropic_error_type(429), "rate_limit_error");
    assert_string_equal(api_anthropic_error_type(500), "api_error");
    assert_string_equal(api_anthropic_error_type(502), "api_error");
    assert_string_equal(api_anthropic_error_type(503), "overloaded_error");
}

static char *render(const metrics_t *m)
{
    buf_t b;
    buf_init(&b, 8u << 20);
    assert_int_equal(metrics_render(m, "abc", "1.0", &b), 0);
    char *s = strndup(b.data, b.len);
    buf_free(&b);
    return s;
}

static void done(metrics_t *m, const char *model, const char *ep, int status, metrics_route_t rt)
{
    metrics_req_t r;
    metrics_req_init(&r, 1000000000ull);
    snprintf(r.model, sizeof r.model, "%s", model);
    r.endpoint = ep;
    r.status = status;
    r.route = rt;
    r.dispatch_ns = 1100000000ull;
    r.first_body_ns = 1300000000ull; /* TTFT 0.3 s */
    metrics_request_done(m, &r, 2000000000ull);
    metrics_request_done(m, &r, 3000000000ull); /* counted once */
}

static void test_requests_and_histograms(void **state)
{
    (void)state;
    static metrics_t m;
    metrics_init(&m);
    done(&m, "a", "chat", 200, METRICS_ROUTE_LOCAL);
    done(&m, "a", "chat", 200, METRICS_ROUTE_LOCAL);
    done(&m, "a", "messages", 404, METRICS_ROUTE_TUNNEL);
    done(&m, "b", NULL, 418, METRICS_ROUTE_LOCAL);  /* unknown endpoint, unlisted code */
    done(&m, "", "chat", 200, METRICS_ROUTE_LOCAL); /* not a model request: not counted */
    char *s = render(&m);
    assert_non_null(strstr(
        s,
        "mesh_llm_requests_total{model=\"a\",endpoint=\"chat\",code=\"200\",route=\"local\"} 2\n"));
    assert_non_null(strstr(s, "mesh_llm_requests_total{model=\"a\",endpoint=\"messages\",code="
                              "\"404\",route=\"tunnel\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_requests_total{model=\"b\",endpoint=\"other\",code="
                              "\"other\",route=\"local\"} 1\n"));
    /* TTFT 0.3 s: in le=0.5, not in le=0.25; only the two local successes */
    assert_non_null(
        strstr(s, "mesh_llm_time_to_first_token_seconds_bucket{model=\"a\",le=\"0.25\"} 0\n"));
    assert_non_null(
        strstr(s, "mesh_llm_time_to_first_token_seconds_bucket{model=\"a\",le=\"0.5\"} 2\n"));
    assert_non_null(
        strstr(s, "mesh_llm_time_to_first_token_seconds_bucket{model=\"a\",le=\"+Inf\"} 2\n"));
    assert_non_null(strstr(s, "mesh_llm_time_to_first_token_seconds_count{model=\"a\"} 2\n"));
    assert_non_null(strstr(s, "mesh_llm_node_info{id=\"abc\",version=\"1.0\"} 1\n"));
    assert_non_null(strstr(s, "# TYPE mesh_llm_requests_total counter\n"));
    free(s);
}

/* Every label the API sets (api_routes.h's, Ollama's) is one of the registry's, not "other". */
static void test_endpoint_labels_are_known(void **state)
{
    (void)state;
    static metrics_t m;
    metrics_init(&m);
    const char *labels[METRICS_N_ENDPOINTS * 2];
    size_t n = 0;
    for (size_t i = 0; i < api_route_count(); i++)
        labels[n++] = api_route_at(i)->label;
    const ollama_ep_t ol[] = {OL_CHAT, OL_GENERATE, OL_EMBED, OL_EMBEDDINGS};
    for (size_t i = 0; i < sizeof ol / sizeof ol[0]; i++)
        labels[n++] = ollama_label(ol[i]);
    for (size_t i = 0; i < n; i++)
        done(&m, "a", labels[i], 200, METRICS_ROUTE_LOCAL);
    char *s = render(&m);
    for (size_t i = 0; i < n; i++) {
        char want[160];
        snprintf(want, sizeof want, "{model=\"a\",endpoint=\"%s\",code=\"200\"", labels[i]);
        if (!strstr(s, want)) fail_msg("label %s is not the registry's", labels[i]);
    }
    assert_null(strstr(s, "endpoint=\"other\""));
    free(s);
}

static void test_model_labels_are_bounded(void **state)
{
    (void)state;
    static metrics_t m;
    metrics_init(&m);
    char name[32];
    for (int i = 0; i < METRICS_MAX_MODELS + 10; i++) {
        snprintf(name, sizeof name, "m%d", i);
        done(&m, name, "chat", 200, METRICS_ROUTE_LOCAL);
    }
    assert_int_equal(m.n_models, METRICS_MAX_MODELS);
    char *s = render(&m);
    assert_non_null(strstr(s, "mesh_llm_requests_total{model=\"_other\",endpoint=\"chat\",code="
                              "\"200\",route=\"local\"} 10\n"));
    free(s);
    /* label values are escaped */
    metrics_init(&m);
    done(&m, "q\"uo\\te\nx", "chat", 200, METRICS_ROUTE_LOCAL);
    s = render(&m);
    assert_non_null(strstr(s, "model=\"q\\\"uo\\\\te\\nx\""));
    free(s);
}

static void test_loads_queue_peers_tunnel(void **state)
{
    (void)state;
    static metrics_t m;
    metrics_init(&m);
    metrics_load_begin(&m, "a", 1000000000ull);
    metrics_load_end(&m, "a", true, 3000000000ull); /* 2 s */
    metrics_load_begin(&m, "a", 4000000000ull);
    metrics_load_end(&m, "a", false, 5000000000ull);
    metrics_unload(&m, "a");
    metrics_queue_depth_set(&m, "a", 2);
    metrics_queue_wait(&m, "a", 0.2);
    metrics_queue_rejected(&m, "a");
    metrics_in_flight_add(&m, "a", 1);
    metrics_tunnel_bytes(&m, false, 100);
    metrics_tunnel_bytes(&m, true, 7);
    metrics_set_rpc_tunnel(&m, 4096, 512, 33);
    m.request_parses = 5; /* meshstat_parse_body counts one per inference request */
    metrics_peer_t p[2] = {{"p1", "alive", 0.0125, "relayed"}, {"p2", "dead", -1, ""}};
    metrics_set_peers(&m, p, 2);
    char *s = render(&m);
    assert_non_null(strstr(s, "mesh_llm_model_loads_total{model=\"a\",result=\"ok\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_model_loads_total{model=\"a\",result=\"failed\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_model_load_seconds_bucket{model=\"a\",le=\"1\"} 0\n"));
    assert_non_null(strstr(s, "mesh_llm_model_load_seconds_bucket{model=\"a\",le=\"2.5\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_model_load_seconds_count{model=\"a\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_model_unloads_total{model=\"a\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_queue_depth{model=\"a\"} 2\n"));
    assert_non_null(strstr(s, "mesh_llm_queue_rejected_total{model=\"a\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_queue_wait_seconds_count{model=\"a\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_requests_in_flight{model=\"a\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_tunnel_bytes_total{direction=\"rx\"} 100\n"));
    assert_non_null(strstr(s, "mesh_llm_tunnel_bytes_total{direction=\"tx\"} 7\n"));
    assert_non_null(strstr(s, "mesh_llm_tunnel_rpc_bytes_total{direction=\"to_worker\"} 4096\n"));
    assert_non_null(strstr(s, "mesh_llm_tunnel_rpc_bytes_total{direction=\"from_worker\"} 512\n"));
    assert_non_null(strstr(s, "mesh_llm_tunnel_rpc_turns_total 33\n"));
    assert_non_null(strstr(s, "# TYPE mesh_llm_request_parses_total counter\n"));
    assert_non_null(strstr(s, "mesh_llm_request_parses_total 5\n"));
    assert_non_null(strstr(s, "mesh_llm_peer_rtt_seconds{peer=\"p1\"} 0.012500\n"));
    assert_null(strstr(s, "mesh_llm_peer_rtt_seconds{peer=\"p2\"}"));
    assert_non_null(strstr(s, "mesh_llm_peer_state{peer=\"p2\",state=\"dead\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_peers_by_path{path=\"relayed\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_peers_by_path{path=\"direct\"} 0\n"));
    free(s);
}

static void test_relay_and_key_rejections(void **state)
{
    (void)state;
    static metrics_t m;
    metrics_init(&m);
    metrics_relay(&m, "a", METRICS_RELAY_RETRY);
    metrics_relay(&m, "a", METRICS_RELAY_RETRY);
    metrics_relay(&m, "a", METRICS_RELAY_FIRST_BYTE_TIMEOUT);
    metrics_relay(&m, "b", METRICS_RELAY_FAILOVER);
    metrics_relay(&m, "b", METRICS_RELAY_FAILOVER);
    metrics_relay(&m, "b", METRICS_RELAY_RESUMED);
    metrics_relay(&m, "b", METRICS_RELAY_FAILED);
    metrics_relay(&m, "b", METRICS_N_RELAY); /* out of range: ignored */
    metrics_queue_depth_set(&m, "a", 5);
    metrics_key_rejected(&m, "alice", "gold", "queue_full");
    metrics_key_rejected(&m, "alice", "gold", "queue_full");
    metrics_key_rejected(&m, "bob", "free", "tokens_per_minute_exceeded");
    metrics_key_rejected(&m, "bob", "free", "something new");  /* unknown reason: the catch-all */
    metrics_key_rejected(&m, "q\"x", "free", "queue_timeout"); /* escaped in the label */
    for (int i = 0; i < METRICS_MAX_KEYS; i++) {               /* bounded: the rest is _other */
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        metrics_key_rejected(&m, k, "t", "queue_full");
    }
    char *s = render(&m);
    assert_non_null(strstr(s, "mesh_llm_relay_retries_total{model=\"a\"} 2\n"));
    assert_null(strstr(s, "mesh_llm_relay_retries_total{model=\"b\"}"));
    assert_non_null(strstr(s, "mesh_llm_relay_first_byte_timeouts_total{model=\"a\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_relay_failovers_total{model=\"b\"} 2\n"));
    assert_non_null(
        strstr(s, "mesh_llm_relay_failover_results_total{model=\"b\",result=\"resumed\"} 1\n"));
    assert_non_null(
        strstr(s, "mesh_llm_relay_failover_results_total{model=\"b\",result=\"failed\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_queue_depth{model=\"a\"} 5\n"));
    assert_non_null(strstr(
        s, "mesh_llm_key_rejected_total{key=\"alice\",tier=\"gold\",reason=\"queue_full\"} 2\n"));
    assert_non_null(strstr(s, "mesh_llm_key_rejected_total{key=\"bob\",tier=\"free\",reason="
                              "\"tokens_per_minute_exceeded\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_key_rejected_total{key=\"bob\",tier=\"free\",reason="
                              "\"too_many_requests\"} 1\n"));
    assert_non_null(strstr(s, "mesh_llm_key_rejected_total{key=\"q\\\"x\",tier=\"free\""));
    /* 3 named keys above + 61 of the loop fill the table; 3 more go to _other */
    assert_non_null(strstr(s, "mesh_llm_key_rejected_total{key=\"_other\",tier=\"_other\",reason="
                              "\"queue_full\"} 3\n"));
    assert_non_null(strstr(s, "key=\"k60\""));
    assert_null(strstr(s, "key=\"k61\""));
    free(s);
}

static void test_usage_parsing(void **state)
{
    (void)state;
    metrics_req_t r;
    /* a streamed OpenAI answer's last chunk: llama-server timings win */
    const char *sse = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":"
                      "4},\"timings\":{\"prompt_n\":7,\"predicted_n\":4,\"predicted_per_token_ms\":"
                      "2.5}}\n\ndata: [DONE]\n\n";
    metrics_req_init(&r, 0);
    assert_true(metrics_parse_usage(sse, strlen(sse), &r));
    assert_int_equal(r.tokens_in, 7);
    assert_int_equal(r.tokens_out, 4);
    assert_true(r.per_token_s > 0.0024 && r.per_token_s < 0.0026);
    /* Anthropic: usage {input_tokens, output_tokens}; the last object wins */
    const char *ant = "{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}} "
                      "{\"type\":\"message\",\"usage\":{\"input_tokens\":42,\"output_tokens\":5}}";
    metrics_req_init(&r, 0);
    assert_true(metrics_parse_usage(ant, strlen(ant), &r));
    assert_int_equal(r.tokens_in, 42);
    assert_int_equal(r.tokens_out, 5);
    /* a tail cut inside the object, no usage at all, garbage */
    const char *bad[] = {"{\"usage\":{\"prompt_tokens\":3", "{\"choices\":[]}", "\"usage\":[1]",
                         "\"usage\":"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        metrics_req_init(&r, 0);
        assert_false(metrics_parse_usage(bad[i], strlen(bad[i]), &r));
        assert_int_equal(r.tokens_in, -1);
    }
}

static void test_response_headers(void **state)
{
    (void)state;
    metrics_req_t r;
    metrics_req_init(&r, 1000000000ull);
    r.queue_ns = 50000000ull;      /* 50 ms queued */
    r.dispatch_ns = 1250000000ull; /* 250 ms before dispatch: 200 ms of load */
    char out[512];
    int n = metrics_resp_headers(&r, "node1", "local", 0, 1300000000ull, out, sizeof out);
    assert_true(n > 0);
    assert_string_equal(out, "X-Mesh-Node: node1\r\nX-Mesh-Route: local\r\nServer-Timing: "
                             "queue;dur=50.0, load;dur=200.0, fb;dur=50.0, hops;desc=\"0\"\r\n");
    n = metrics_resp_headers(&r, "node1", NULL, 1, 1300000000ull, out, sizeof out);
    assert_true(n > 0 && !strstr(out, "X-Mesh-Route"));
    assert_int_equal(metrics_resp_headers(&r, "node1", "local", 0, 0, out, 16), -ENOSPC);
}

static void test_stream_error_shapes(void **state)
{
    (void)state;
    assert_int_equal(api_stream_kind("/v1/messages"), API_STREAM_ANTHROPIC);
    assert_int_equal(api_stream_kind("/v1/responses"), API_STREAM_RESPONSES);
    assert_int_equal(api_stream_kind("/v1/chat/completions"), API_STREAM_OPENAI);
    assert_int_equal(api_stream_kind(NULL), API_STREAM_OPENAI);
    char *s = api_stream_error(API_STREAM_ANTHROPIC, "host_failed", "gone \"x\"");
    assert_string_equal(s, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
                           "\"api_error\",\"message\":\"gone \\\"x\\\"\"}}\n\n");
    free(s);
    s = api_stream_error(API_STREAM_RESPONSES, "host_failed", "gone");
    assert_string_equal(s, "event: response.failed\ndata: {\"type\":\"response.failed\","
                           "\"response\":{\"status\":\"failed\",\"error\":{\"code\":"
                           "\"host_failed\",\"message\":\"gone\"}}}\n\n");
    free(s);
    s = api_stream_error(API_STREAM_OPENAI, "upstream_closed", "gone");
    assert_string_equal(s, "data: {\"error\":{\"message\":\"gone\",\"type\":\"upstream_error\","
                           "\"code\":\"upstream_closed\"}}\n\ndata: [DONE]\n\n");
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_table),
        cmocka_unit_test(test_tunnel_allowlist),
        cmocka_unit_test(test_anthropic_types),
        cmocka_unit_test(test_requests_and_histograms),
        cmocka_unit_test(test_endpoint_labels_are_known),
        cmocka_unit_test(test_model_labels_are_bounded),
        cmocka_unit_test(test_loads_queue_peers_tunnel),
        cmocka_unit_test(test_relay_and_key_rejections),
        cmocka_unit_test(test_usage_parsing),
        cmocka_unit_test(test_response_headers),
        cmocka_unit_test(test_stream_error_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the admission driver (src/node/admission.c) on a real loop: requests arrive
 * through the real HTTP server (httpd_serve_fd on socketpairs, no network), pass
 * admission_enter, and the "resume" hook (the API's routing in the node) records the requests
 * admission starts; the test answers them itself. The node serves no local model in most tests,
 * so every request is admitted as routed to the mesh, where only its key's limits apply
 * (admission.h); the last one registers a local model (a shared test GGUF, never started).
 *
 * What is pinned: a key's max_concurrent queues the next request and starts it (FIFO) when the
 * first ends; the queue's refusal (429, Retry-After, OpenAI-shaped error with the limit's code);
 * a queued request whose client leaves is cancelled; a routed request's tokens are counted from
 * the tail of its response (tokens_per_minute, then 429 with the tier's limit in the text); a
 * request with an unknown key is counted as key 0; a request through a tunnel that asks for the
 * queued signal gets its byte while it waits; a queue wait that runs out is answered 503
 * queue_timeout; a local model's cap is its -np, and while no node serves it (has_host) what would
 * queue is refused 503 no_host. Every loop is bounded; nothing asserts a duration. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admission.h"
#include "meshstat.h"
#include "tunables.h"
#include "httpd.h"
#include "models.h"
#include "supervisor.h"
#include "tunnel.h"

#define MAX_CLIENTS 8

typedef struct {
    uv_loop_t loop;
    httpd_t srv;
    config_t cfg;
    meshstat_t stat;
    supervisor_t sv;
    models_t ms;
    admission_t ad;
    char keyfile[64];
    httpd_req_t *resumed[MAX_CLIENTS]; /* in the order admission started them */
    unsigned n_resumed;
    unsigned not_admitted; /* admission_enter returned false */
    int fd[MAX_CLIENTS];   /* the clients' ends */
    char *out[MAX_CLIENTS];
    size_t out_len[MAX_CLIENTS];
} fx_t;

static fx_t *g; /* the fixture the handlers see */

static void on_resume(void *data, httpd_req_t *req, int needs)
{
    fx_t *f = data;
    (void)needs;
    assert_true(f->n_resumed < MAX_CLIENTS);
    f->resumed[f->n_resumed++] = req;
}

static void handler(httpd_req_t *req)
{
    if (!admission_enter(&g->ad, req, 0)) {
        g->not_admitted++;
        httpd_respond_error(req, 400, "invalid_request_error", "bad", "not admitted");
    }
}

/* What main does at exit: close every handle left (the supervisor's, admission's timer). */
static void close_handle(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* keys: a keys file's text (lines format), NULL: none. local_args: the node serves one local
 * model (a shared test GGUF, from --models-dir) with these llama-server arguments; NULL: none. */
static fx_t *setup_local(const char *keys, unsigned queue_len, const char *local_args)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    g = f;
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->cfg.queue_len = queue_len;
    f->cfg.max_loaded[0] = f->cfg.max_loaded[1] = f->cfg.max_loaded[2] = 1;
    if (keys) {
        snprintf(f->keyfile, sizeof f->keyfile, "/tmp/test_admission_keysXXXXXX");
        int fd = mkstemp(f->keyfile); /* mode 0600: admission refuses keys others can read */
        assert_true(fd >= 0);
        assert_int_equal(write(fd, keys, strlen(keys)), (ssize_t)strlen(keys));
        close(fd);
        f->cfg.api_keys_file = f->keyfile;
    }
    char err[256] = "";
    if (local_args) {
        const char *dir = getenv("MESH_LLM_TEST_MODELS");
        char path[1024];
        snprintf(path, sizeof path, "%s/stories260K.gguf", dir ? dir : "../shared/models");
        assert_int_equal(config_parse_model_arg(path, &f->cfg.models[0], err, sizeof err), 0);
        f->cfg.models[0].from_dir = true;
        f->cfg.n_models = 1;
        f->cfg.llamacpp_args = (char *)local_args;
    }
    /* the tunables as the node reads them at start (a test may have set one) */
    assert_int_equal(tunables_load(&f->cfg.tun, NULL, err, sizeof err), 0);
    meshstat_init(&f->stat, NULL);
    assert_int_equal(sv_init(&f->sv, &f->loop, "/bin/true", false, &f->cfg.tun, NULL), 0);
    assert_int_equal(models_init(&f->ms, &f->loop, &f->cfg, &f->sv, &f->stat, err, sizeof err), 0);
    admission_deps_t dep = {.resume = on_resume, .data = f};
    int rc = admission_init(&f->ad, &f->loop, &f->cfg, &f->ms, &f->stat, &dep, err, sizeof err);
    if (rc) fail_msg("admission_init: %s", err);
    httpd_opts_t o = {.host = "127.0.0.1", .handler = handler};
    assert_int_equal(httpd_start(&f->srv, &f->loop, &o), 0);
    for (int i = 0; i < MAX_CLIENTS; i++)
        f->fd[i] = -1;
    return f;
}

static fx_t *setup(const char *keys, unsigned queue_len)
{
    return setup_local(keys, queue_len, NULL);
}

static void teardown(fx_t *f)
{
    admission_close(&f->ad);
    httpd_stop(&f->srv);
    uv_walk(&f->loop, close_handle, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT); /* every handle is closing: returns when they are closed */
    assert_int_equal(uv_loop_close(&f->loop), 0);
    sv_close(&f->sv);
    free(f->cfg.models[0].path);
    for (int i = 0; i < MAX_CLIENTS; i++) {
        if (f->fd[i] >= 0) close(f->fd[i]);
        free(f->out[i]);
    }
    models_free(&f->ms);
    free(f->ad.a);
    if (f->keyfile[0]) unlink(f->keyfile);
    free(f);
    g = NULL;
}

static void drain_clients(fx_t *f)
{
    for (int i = 0; i < MAX_CLIENTS; i++) {
        if (f->fd[i] < 0) continue;
        if (!f->out[i]) f->out[i] = calloc(1, 1 << 16);
        ssize_t n;
        while ((n = recv(f->fd[i], f->out[i] + f->out_len[i], (1 << 16) - 1 - f->out_len[i],
                         MSG_DONTWAIT)) > 0)
            f->out_len[i] += (size_t)n;
    }
}

/* Turn the loop (bounded, without blocking) until cond holds; false if it never did. */
#define SPIN_UNTIL(f, cond)                                                                        \
    ({                                                                                             \
        bool ok_ = false;                                                                          \
        for (int i_ = 0; i_ < 20000 && !(ok_ = (cond)); i_++) {                                    \
            uv_run(&(f)->loop, UV_RUN_NOWAIT);                                                     \
            drain_clients(f);                                                                      \
        }                                                                                          \
        ok_;                                                                                       \
    })

/* A request from client i (a connection of its own) for model "m", with extra headers. */
static void send_req(fx_t *f, int i, httpd_peer_t peer, const char *headers)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(httpd_serve_fd(&f->srv, sv[0], peer), 0);
    f->fd[i] = sv[1];
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"messages\":[]}",
             f->cfg.n_models ? f->cfg.models[0].name : "m");
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n"
                     "%sContent-Length: %zu\r\n\r\n%s",
                     headers ? headers : "", strlen(body), body);
    assert_int_equal(send(sv[1], req, (size_t)n, MSG_NOSIGNAL), n);
}

static json_t *status_of(fx_t *f)
{
    json_t *st = json_object();
    json_object_set_new(st, "admission", admission_status(&f->ad));
    return st;
}

static json_int_t key_stat(fx_t *f, const char *key, const char *what)
{
    json_t *st = status_of(f);
    json_t *v = json_object_get(
        json_object_get(json_object_get(json_object_get(st, "admission"), "keys"), key), what);
    assert_non_null(v);
    json_int_t n = json_integer_value(v);
    json_decref(st);
    return n;
}

static json_int_t routed_stat(fx_t *f, const char *what)
{
    json_t *st = status_of(f);
    json_t *m = json_object_get(json_object_get(json_object_get(st, "admission"), "models"),
                                "(routed to the mesh)");
    assert_non_null(m);
    json_int_t n = json_integer_value(json_object_get(m, what));
    json_decref(st);
    return n;
}

static const char *OK_BODY = "{\"choices\":[],\"usage\":{\"completion_tokens\":7}}";

static void answer(httpd_req_t *req)
{
    httpd_respond(req, 200, "application/json", OK_BODY, strlen(OK_BODY), NULL);
}

#define BRONZE_KEYS                                                                                \
    "tier bronze max_concurrent=1\n"                                                               \
    "key alice bronze sk-alice-secret\n"
#define AUTH_ALICE "Authorization: Bearer sk-alice-secret\r\n"

/* Client 0 of key alice runs, client 1 waits behind it (alice's max_concurrent is 1). */
static void alice_running_and_queued(fx_t *f)
{
    send_req(f, 0, HTTPD_PEER_LOOPBACK, AUTH_ALICE);
    assert_true(SPIN_UNTIL(f, f->n_resumed == 1));
    send_req(f, 1, HTTPD_PEER_LOOPBACK, AUTH_ALICE);
    assert_true(SPIN_UNTIL(f, key_stat(f, "alice", "queued") == 1));
}

/* Answer the running request; the queued one starts; answer it; key has nothing in flight. */
static void finish_both(fx_t *f, const char *key)
{
    answer(f->resumed[0]);
    assert_true(SPIN_UNTIL(f, f->n_resumed == 2));
    answer(f->resumed[1]);
    assert_true(SPIN_UNTIL(f, key_stat(f, key, "in_flight") == 0));
}

/* A key at its max_concurrent: the next request waits; when the first ends the waiting one starts
 * (on a later loop turn) and both clients get their answers. */
static void test_key_cap_queues_then_starts(void **state)
{
    (void)state;
    fx_t *f = setup(BRONZE_KEYS, 4);
    alice_running_and_queued(f);
    assert_int_equal(f->n_resumed, 1);
    assert_int_equal(key_stat(f, "alice", "in_flight"), 1);
    assert_int_not_equal(f->resumed[0]->tag, 0); /* admitted: tagged */

    answer(f->resumed[0]);
    assert_true(SPIN_UNTIL(f, f->n_resumed == 2));
    assert_int_equal(key_stat(f, "alice", "queued"), 0);
    assert_int_equal(key_stat(f, "alice", "in_flight"), 1);
    assert_int_equal(key_stat(f, "alice", "admitted"), 2);
    answer(f->resumed[1]);
    assert_true(SPIN_UNTIL(f, f->out_len[1] > 0 && key_stat(f, "alice", "in_flight") == 0));
    assert_non_null(strstr(f->out[0], "HTTP/1.1 200"));
    assert_non_null(strstr(f->out[1], "HTTP/1.1 200"));
    assert_int_equal(f->not_admitted, 0);
    teardown(f);
}

/* A full queue: 429, Retry-After, {"error":{"type":"rate_limit_error","code":"queue_full"}} and a
 * message that names the model and the numbers. */
static void test_queue_full_refusal(void **state)
{
    (void)state;
    fx_t *f = setup(BRONZE_KEYS, 1);
    alice_running_and_queued(f);
    send_req(f, 2, HTTPD_PEER_LOOPBACK, AUTH_ALICE);
    assert_true(SPIN_UNTIL(f, f->out_len[2] > 0 && strstr(f->out[2], "}")));
    const char *o = f->out[2];
    assert_non_null(strstr(o, "HTTP/1.1 429"));
    assert_non_null(strstr(o, "Retry-After: "));
    assert_non_null(strstr(o, "\"type\":\"rate_limit_error\""));
    assert_non_null(strstr(o, "\"code\":\"queue_full\""));
    assert_non_null(strstr(o, "model '(routed to the mesh)' is busy: 1 requests in flight and 1 "
                              "waiting (the queue holds 1)"));
    assert_int_equal(key_stat(f, "alice", "rejected"), 1);
    assert_int_equal(routed_stat(f, "rejected"), 1);
    assert_int_equal(f->n_resumed, 1);
    finish_both(f, "alice");
    teardown(f);
}

/* A queued request whose client goes away leaves the queue at once (cancelled), and is never
 * started when the slot frees. */
static void test_queued_client_gone(void **state)
{
    (void)state;
    fx_t *f = setup(BRONZE_KEYS, 4);
    alice_running_and_queued(f);
    close(f->fd[1]);
    f->fd[1] = -1;
    assert_true(SPIN_UNTIL(f, routed_stat(f, "cancelled") == 1));
    assert_int_equal(key_stat(f, "alice", "queued"), 0);
    assert_int_equal(f->ad.n_tickets, 1);
    answer(f->resumed[0]);
    assert_true(SPIN_UNTIL(f, key_stat(f, "alice", "in_flight") == 0));
    for (int i = 0; i < 50; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->n_resumed, 1); /* the gone one never started */
    assert_int_equal(f->ad.n_tickets, 0);
    teardown(f);
}

/* A routed request's tokens come from the tail of its response (usage.completion_tokens): over
 * the tier's tokens_per_minute the next request is refused 429 with the limit in its text. */
static void test_routed_tokens_counted_tpm(void **state)
{
    (void)state;
    fx_t *f = setup("tier small tokens_per_minute=5\nkey bob small sk-bob-secret-1\n", 4);
    send_req(f, 0, HTTPD_PEER_LOOPBACK, "Authorization: Bearer sk-bob-secret-1\r\n");
    assert_true(SPIN_UNTIL(f, f->n_resumed == 1));
    assert_true(f->resumed[0]->keep_tail); /* keys configured: tokens per key */
    answer(f->resumed[0]);                 /* completion_tokens 7 */
    assert_true(SPIN_UNTIL(f, key_stat(f, "bob", "in_flight") == 0));
    assert_int_equal(key_stat(f, "bob", "tokens_last_minute"), 7);

    send_req(f, 1, HTTPD_PEER_LOOPBACK, "x-api-key: sk-bob-secret-1\r\n"); /* Anthropic's */
    assert_true(SPIN_UNTIL(f, f->out_len[1] > 0 && strstr(f->out[1], "}")));
    assert_non_null(strstr(f->out[1], "HTTP/1.1 429"));
    assert_non_null(strstr(f->out[1], "\"code\":\"tokens_per_minute_exceeded\""));
    assert_non_null(strstr(f->out[1], "key 'bob' (tier small) used its 5 tokens per minute"));
    assert_int_equal(f->n_resumed, 1);
    assert_int_equal(key_stat(f, "bob", "rejected"), 1);
    teardown(f);
}

/* With keys configured, a request with no known key is counted as key 0 (its tier's limits), not
 * as the key it pretends to be. */
static void test_unknown_key_is_key0(void **state)
{
    (void)state;
    fx_t *f = setup(BRONZE_KEYS, 4);
    assert_true(admission_has_keys(&f->ad));
    send_req(f, 0, HTTPD_PEER_LOOPBACK, "Authorization: Bearer sk-not-a-key\r\n");
    assert_true(SPIN_UNTIL(f, f->n_resumed == 1));
    const char *k0 = f->ad.a->keys[0].name;
    assert_string_not_equal(k0, "alice");
    assert_int_equal(key_stat(f, k0, "in_flight"), 1);
    assert_int_equal(key_stat(f, "alice", "admitted"), 0);
    answer(f->resumed[0]);
    assert_true(SPIN_UNTIL(f, key_stat(f, k0, "in_flight") == 0));
    teardown(f);
}

/* A tunnelled request is counted as key "anonymous" whatever its headers say (its key was checked
 * by the node it entered); one that waits in the queue and asks for the queued signal
 * (TUNNEL_QUEUED_HEADER) gets TUNNEL_QUEUED_BYTE at once, before any response. */
static void test_tunnel_key0_and_queued_signal(void **state)
{
    (void)state;
    fx_t *f = setup("tier default max_concurrent=1\n"
                    "tier gold\nkey alice gold sk-alice-secret\n",
                    4);
    send_req(f, 0, HTTPD_PEER_TUNNEL, AUTH_ALICE);
    assert_true(SPIN_UNTIL(f, f->n_resumed == 1));
    assert_int_equal(key_stat(f, "alice", "admitted"), 0);
    assert_int_equal(key_stat(f, "anonymous", "in_flight"), 1);
    send_req(f, 1, HTTPD_PEER_TUNNEL, AUTH_ALICE TUNNEL_QUEUED_HEADER ": 1\r\n");
    assert_true(SPIN_UNTIL(f, f->out_len[1] > 0));
    assert_int_equal(f->out_len[1], 1);
    assert_int_equal((unsigned char)f->out[1][0], (unsigned char)TUNNEL_QUEUED_BYTE);
    assert_int_equal(key_stat(f, "anonymous", "queued"), 1);
    finish_both(f, "anonymous");
    assert_non_null(strstr(f->out[1], "HTTP/1.1 200"));
    teardown(f);
}

/* A queue wait that runs out (MESH_LLM_QUEUE_WAIT_MS): 503, "type":"unavailable",
 * "code":"queue_timeout"; the request never started. The loop blocks for the 1 ms timer. */
static void test_queue_wait_runs_out(void **state)
{
    (void)state;
    setenv("MESH_LLM_QUEUE_WAIT_MS", "1", 1);
    fx_t *f = setup(BRONZE_KEYS, 4);
    unsetenv("MESH_LLM_QUEUE_WAIT_MS");
    send_req(f, 0, HTTPD_PEER_LOOPBACK, AUTH_ALICE);
    assert_true(SPIN_UNTIL(f, f->n_resumed == 1));
    send_req(f, 1, HTTPD_PEER_LOOPBACK, AUTH_ALICE);
    for (int i = 0; i < 1000 && !(f->out[1] && strstr(f->out[1], "}")); i++) {
        uv_run(&f->loop, UV_RUN_ONCE);
        drain_clients(f);
    }
    assert_non_null(f->out[1]);
    assert_non_null(strstr(f->out[1], "HTTP/1.1 503"));
    assert_non_null(strstr(f->out[1], "Retry-After: "));
    assert_non_null(strstr(f->out[1], "\"type\":\"unavailable\""));
    assert_non_null(strstr(f->out[1], "\"code\":\"queue_timeout\""));
    assert_non_null(strstr(f->out[1], "stayed busy without a free slot"));
    assert_int_equal(routed_stat(f, "expired"), 1);
    assert_int_equal(f->n_resumed, 1);
    answer(f->resumed[0]);
    assert_true(SPIN_UNTIL(f, key_stat(f, "alice", "in_flight") == 0));
    teardown(f);
}

static bool no_host(void *data, const char *model)
{
    (void)data;
    (void)model;
    return false;
}

/* A local model's cap is its llama-server's parallel slots (-np 1): the second request would
 * queue; while no node serves the model (has_host false) it is refused 503 "no_host" at once
 * instead, with a text that says why; what may start at once still goes. */
static void test_local_cap_and_no_host(void **state)
{
    (void)state;
    fx_t *f = setup_local(NULL, 4, "-np 1");
    f->ad.dep.has_host = no_host;
    send_req(f, 0, HTTPD_PEER_LOOPBACK, NULL);
    assert_true(SPIN_UNTIL(f, f->n_resumed == 1));
    send_req(f, 1, HTTPD_PEER_LOOPBACK, NULL);
    assert_true(SPIN_UNTIL(f, f->out[1] && strstr(f->out[1], "}")));
    assert_non_null(strstr(f->out[1], "HTTP/1.1 503"));
    assert_non_null(strstr(f->out[1], "\"code\":\"no_host\""));
    assert_non_null(strstr(f->out[1], "has no host in the mesh now, so its queue cannot drain"));
    json_t *st = status_of(f);
    json_t *m =
        json_object_get(json_object_get(json_object_get(st, "admission"), "models"), "stories260K");
    assert_non_null(m);
    assert_int_equal(json_integer_value(json_object_get(m, "cap")), 1);
    assert_int_equal(json_integer_value(json_object_get(m, "in_flight")), 1);
    assert_true(json_is_true(json_object_get(m, "no_host")));
    json_decref(st);
    assert_int_equal(f->n_resumed, 1);
    answer(f->resumed[0]);
    assert_true(SPIN_UNTIL(f, f->ad.n_tickets == 0));
    teardown(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_cap_queues_then_starts),
        cmocka_unit_test(test_queue_full_refusal),
        cmocka_unit_test(test_queued_client_gone),
        cmocka_unit_test(test_routed_tokens_counted_tpm),
        cmocka_unit_test(test_unknown_key_is_key0),
        cmocka_unit_test(test_tunnel_key0_and_queued_signal),
        cmocka_unit_test(test_queue_wait_runs_out),
        cmocka_unit_test(test_local_cap_and_no_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

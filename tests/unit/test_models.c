/* Unit tests of the model manager's driver (src/node/models.c) with a fake supervisor: the
 * models_t seams child_start/child_stop record what the driver starts and stops instead of
 * spawning llama-server, and the test plays the supervisor's part (the child becomes ready on
 * the port of a stand-in llama-server, an httpd on 127.0.0.1; a stopped child is reported
 * stopped). The mm policy's clock is the models_t clock seam: a counter the test sets.
 *
 * Pinned: with two LLM slots full, loading a third model evicts the least recently used one
 * (the one a request used last stays); a request for a model not loaded parks, evicts, waits for
 * the load and is then proxied to the model's server. Models are the shared test GGUF files
 * (MESH_LLM_TEST_MODELS), registered as --models-dir entries (no preload). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "httpd.h"
#include "models_fixture.h"

static models_fixture_t fx;
static httpd_t llama; /* the stand-in llama-server of every child */
static httpd_t front; /* the node's API: its handler routes to the model named in the path */
static uint64_t clock_ms;
static char events[512]; /* "start X;stop Y;" */
static int llama_requests;

static uint64_t fake_clock(void *data)
{
    (void)data;
    return clock_ms;
}

static void note(const char *what, const sv_child_t *c)
{
    size_t l = strlen(events);
    snprintf(events + l, sizeof events - l, "%s %s;", what, c->name);
}

static int fake_start(sv_child_t *c)
{
    note("start", c);
    c->state = CHILD_STARTING;
    return 0;
}

static void fake_stop(sv_child_t *c, uint64_t grace_ms)
{
    (void)grace_ms;
    note("stop", c);
    c->state = CHILD_STOPPING;
}

static void llama_handler(httpd_req_t *req)
{
    llama_requests++;
    static const char body[] = "{\"choices\":[{\"message\":{\"content\":\"ok\"}}]}";
    httpd_respond(req, 200, "application/json", body, strlen(body), NULL);
}

/* /m/INDEX: route to entry INDEX. */
static void front_handler(httpd_req_t *req)
{
    size_t i = (size_t)atoi(req->path + 3);
    assert_true(i < fx.ms.n);
    models_route(&fx.ms, &fx.ms.entries[i], req);
}

static model_entry_t *E(size_t i)
{
    return &fx.ms.entries[i];
}

/* The supervisor's part: the child's server answers on the stand-in's port. */
static void ready(size_t i)
{
    sv_child_t *c = E(i)->child;
    assert_int_equal(c->state, CHILD_STARTING);
    c->state = CHILD_READY;
    c->port = (uint16_t)llama.port;
    fx.sv.on_ready(&fx.sv, c);
}

static void stopped(size_t i)
{
    sv_child_t *c = E(i)->child;
    assert_int_equal(c->state, CHILD_STOPPING);
    c->state = CHILD_STOPPED;
    fx.sv.on_stopped(&fx.sv, c);
}

static void turn(int n)
{
    for (int i = 0; i < n; i++)
        uv_run(&fx.loop, UV_RUN_NOWAIT);
}

/* Turn the loop until model i's child is in state st (bounded). UV_RUN_ONCE: a load's file check
 * runs on the thread pool, whose completion wakes the loop. */
static void wait_state(size_t i, child_state_t st)
{
    for (int k = 0; k < 1000 && E(i)->child->state != st; k++)
        uv_run(&fx.loop, UV_RUN_ONCE);
    assert_int_equal(E(i)->child->state, st);
}

/* Load model i at time t and let it become ready (the file check runs on the thread pool). */
static void load_ready(size_t i, uint64_t t)
{
    clock_ms = t;
    models_load(&fx.ms, E(i), false);
    wait_state(i, CHILD_STARTING);
    ready(i);
    turn(10);
    assert_int_equal(models_state(E(i)), MODEL_READY);
}

static int client_open(size_t i)
{
    int sv2[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv2), 0);
    assert_int_equal(httpd_serve_fd(&front, sv2[0], HTTPD_PEER_LOOPBACK), 0);
    static const char body[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /m/%zu HTTP/1.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     i, strlen(body), body);
    assert_int_equal(send(sv2[1], req, (size_t)n, MSG_NOSIGNAL), n);
    return sv2[1];
}

/* Turn the loop (bounded) until the client's answer is complete; returns it (static). */
static const char *answer_of(int fd)
{
    static char out[8192];
    size_t len = 0;
    memset(out, 0, sizeof out);
    for (int k = 0; k < 200000 && !strstr(out, "}]}"); k++) {
        uv_run(&fx.loop, UV_RUN_NOWAIT);
        ssize_t r;
        while ((r = recv(fd, out + len, sizeof out - 1 - len, MSG_DONTWAIT)) > 0)
            len += (size_t)r;
    }
    close(fd);
    return out;
}

static int setup(void **state)
{
    (void)state;
    if (models_fixture_init(&fx, 0, fake_start, fake_stop) != 0) return -1;
    fx.ms.clock = fake_clock;
    httpd_opts_t lo = {.host = "127.0.0.1", .handler = llama_handler};
    httpd_opts_t fo = {.host = "127.0.0.1", .handler = front_handler};
    if (httpd_start(&llama, &fx.loop, &lo) != 0 || httpd_start(&front, &fx.loop, &fo) != 0)
        return -1;
    events[0] = '\0';
    llama_requests = 0;
    clock_ms = 1000;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    httpd_stop(&front);
    httpd_stop(&llama);
    return models_fixture_free(&fx);
}

/* Models 0 and 1 were loaded (0 first); at time t model 2 is loaded: model `gone` leaves and,
 * once it stopped, model 2 starts. */
static void load_third_evicts(uint64_t t, size_t gone)
{
    clock_ms = t;
    models_load(&fx.ms, E(2), false);
    turn(10);
    char want[1024];
    snprintf(want, sizeof want, "start %s;start %s;stop %s;", E(0)->mm->name, E(1)->mm->name,
             E(gone)->mm->name);
    assert_string_equal(events, want);
    stopped(gone);
    wait_state(2, CHILD_STARTING);
    snprintf(want + strlen(want), sizeof want - strlen(want), "start %s;", E(2)->mm->name);
    assert_string_equal(events, want);
    assert_int_equal(models_state(E(gone)), MODEL_UNLOADED);
    assert_int_equal(models_state(E(1 - gone)), MODEL_READY);
}

/* Slots full of idle models: loading a third evicts the least recently loaded one. */
static void test_load_evicts_lru(void **state)
{
    (void)state;
    load_ready(0, 1000);
    load_ready(1, 2000);
    load_third_evicts(3000, 0);
}

/* A request uses the older model: now the other one is the least recently used and leaves. */
static void test_request_refreshes_lru(void **state)
{
    (void)state;
    load_ready(0, 1000);
    load_ready(1, 2000);
    clock_ms = 3000;
    const char *out = answer_of(client_open(0));
    assert_non_null(strstr(out, "HTTP/1.1 200"));
    assert_int_equal(llama_requests, 1);
    load_third_evicts(4000, 1);
}

/* A request for a model not loaded: it waits (no answer) while the LRU model leaves and its
 * model loads, then it is proxied to the model's server. */
static void test_request_parks_until_ready(void **state)
{
    (void)state;
    load_ready(0, 1000);
    load_ready(1, 2000);
    clock_ms = 3000;
    int fd = client_open(2);
    wait_state(0, CHILD_STOPPING);
    assert_int_equal(models_state(E(2)), MODEL_LOADING);
    stopped(0);
    wait_state(2, CHILD_STARTING);
    assert_int_equal(llama_requests, 0);
    ready(2);
    const char *out = answer_of(fd);
    assert_non_null(strstr(out, "HTTP/1.1 200"));
    assert_int_equal(llama_requests, 1);
    char want[1024];
    snprintf(want, sizeof want, "start %s;start %s;stop %s;start %s;", E(0)->mm->name,
             E(1)->mm->name, E(0)->mm->name, E(2)->mm->name);
    assert_string_equal(events, want);
}

/* DELETE /api/delete's registry part (models_delete): the model is gone from models_find,
 * models_next and models_count at once and is unloaded (the stop is reported for its slot); a
 * request routed to it anyway answers 404; its file added again (a re-download) brings it back
 * in the same slot, and it loads again. */
static void test_delete_then_add_again(void **state)
{
    (void)state;
    load_ready(0, 1000);
    model_entry_t *e = E(0);
    char name[MM_NAME_MAX], path[1024], err[256];
    snprintf(name, sizeof name, "%s", e->mm->name);
    snprintf(path, sizeof path, "%s", e->path);
    assert_int_equal(models_count(&fx.ms), 3);
    assert_null(models_only(&fx.ms));
    clock_ms = 2000;
    models_delete(&fx.ms, e);
    assert_null(models_find(&fx.ms, name));
    assert_int_equal(models_count(&fx.ms), 2);
    for (model_entry_t *x = NULL; (x = models_next(&fx.ms, x));)
        assert_ptr_not_equal(x, e);
    turn(10);
    char want[512];
    snprintf(want, sizeof want, "start %s;stop %s;", name, name);
    assert_string_equal(events, want);
    stopped(0);
    assert_int_equal(e->mm->state, MM_UNLOADED);
    models_load(&fx.ms, e, false); /* a stale pointer (the planner's) loads nothing */
    turn(10);
    assert_string_equal(events, want);
    const char *out = answer_of(client_open(0));
    assert_non_null(strstr(out, "HTTP/1.1 404"));
    assert_non_null(strstr(out, "not found"));
    models_delete(&fx.ms, E(1));
    assert_ptr_equal(models_only(&fx.ms), E(2));
    model_entry_t *back = NULL;
    assert_int_equal(models_add_file(&fx.ms, path, &back, err, sizeof err), 0);
    assert_ptr_equal(back, e);
    assert_false(e->deleted);
    assert_ptr_equal(models_find(&fx.ms, name), e);
    assert_int_equal(models_count(&fx.ms), 2);
    assert_int_equal(fx.ms.n, 3); /* no new slot */
    load_ready(0, 3000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_load_evicts_lru, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_refreshes_lru, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_parks_until_ready, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_then_add_again, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

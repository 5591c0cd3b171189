/* Unit tests for sv_child.c, the pure part of child supervision (supervisor_int.h): the
 * verdicts of sv_watch.c's checks (a starting child's /health check, a ready child's liveness
 * tick), the load deadline, and a child's name in logs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "supervisor_int.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define GIB (1024ull * 1024 * 1024)

static void test_probe_verdict(void **state)
{
    (void)state;
    static const struct {
        bool answered;
        int port_held; /* plat_port_held_by */
        svw_verdict_t want;
    } rows[] = {
        {false, 1, SVW_WAIT},
        {false, 0, SVW_WAIT}, /* no answer: nobody asked /proc */
        {true, 1, SVW_READY},
        {true, 0, SVW_PORT_TAKEN},  /* another process answers on the child's port */
        {true, -ENOENT, SVW_READY}, /* /proc cannot tell: the port is trusted */
        {true, -EACCES, SVW_READY},
    };
    for (size_t i = 0; i < N(rows); i++)
        if (svw_probe_verdict(rows[i].answered, rows[i].port_held) != rows[i].want)
            fail_msg("row %zu: answered %d, port_held %d", i, rows[i].answered, rows[i].port_held);
}

static void test_tick(void **state)
{
    (void)state;
    const uint64_t H = 30000; /* hang_ms */
    static const struct {
        uint64_t now, last_alive, progress;
        bool busy, cpu_advanced;
        svw_verdict_t want;
        uint64_t progress_after;
    } rows[] = {
        /* idle: only /health counts, and progress follows the clock */
        {10000, 9000, 0, false, false, SVW_WAIT, 10000},
        {39999, 10000, 0, false, false, SVW_WAIT, 39999},
        {40000, 10000, 0, false, false, SVW_WEDGED, 40000}, /* unanswered for hang_ms */
        {90000, 10000, 0, false, false, SVW_WEDGED, 90000},
        /* busy: unanswered and no CPU progress, both for hang_ms */
        {40000, 10000, 10000, true, false, SVW_WEDGED, 10000},
        {40000, 10000, 10000, true, true, SVW_WAIT, 40000},    /* computing: spared */
        {40000, 10000, 10001, true, false, SVW_WAIT, 10001},   /* progress within hang_ms */
        {40000, 39000, 0, true, false, SVW_WAIT, 0},           /* answers /health: spared */
        {40000, 10001, 0, true, false, SVW_WAIT, 0},           /* answered within hang_ms */
        {70000, 10000, 40000, true, false, SVW_WEDGED, 40000}, /* progress stopped at 40 s */
    };
    for (size_t i = 0; i < N(rows); i++) {
        svw_tick_t t = {.now_ms = rows[i].now,
                        .last_alive_ms = rows[i].last_alive,
                        .progress_ms = rows[i].progress,
                        .hang_ms = H,
                        .busy = rows[i].busy,
                        .cpu_advanced = rows[i].cpu_advanced};
        svw_verdict_t v = svw_tick(&t);
        if (v != rows[i].want || t.progress_ms != rows[i].progress_after)
            fail_msg("row %zu: verdict %d (want %d), progress %llu (want %llu)", i, v, rows[i].want,
                     (unsigned long long)t.progress_ms, (unsigned long long)rows[i].progress_after);
    }
}

static void test_load_limit(void **state)
{
    (void)state;
    static const struct {
        uint64_t bytes, want;
    } defaults[] = {
        {0, 120000}, {1, 180000}, {GIB, 180000}, {GIB + 1, 240000}, {10 * GIB, 720000},
    };
    for (size_t i = 0; i < N(defaults); i++)
        assert_int_equal(sv_default_load_timeout_ms(defaults[i].bytes), defaults[i].want);
    static const struct {
        uint64_t env, child, want; /* MESH_LLM_LOAD_TIMEOUT_MS, the child's (0: unset) */
    } rows[] = {
        {0, 0, 120000},
        {0, 300000, 300000},
        {5000, 0, 5000},
        {5000, 300000, 5000}, /* the variable wins over every child's */
    };
    for (size_t i = 0; i < N(rows); i++) {
        supervisor_t sv = {.load_timeout_ms = rows[i].env};
        sv_child_t c = {.sv = &sv, .load_timeout_ms = rows[i].child};
        assert_int_equal(svw_load_limit(&c), rows[i].want);
    }
}

static void test_names(void **state)
{
    (void)state;
    supervisor_t sv = {0};
    sv_child_t c = {.sv = &sv, .kind = SV_KIND_LLAMA};
    snprintf(c.name, sizeof c.name, "tiny");
    assert_string_equal(sv_prog_name(&c), "llama-server for model tiny");
    c.kind = SV_KIND_RPC;
    assert_string_equal(sv_prog_name(&c), "rpc-server");
    assert_false(sv_running(&c)); /* no process */
    c.proc_open = true;
    assert_true(sv_running(&c)); /* its exit not seen yet (the handle is not closing) */
    assert_string_equal(child_state_name(CHILD_STARTING), "loading");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_verdict),
        cmocka_unit_test(test_tick),
        cmocka_unit_test(test_load_limit),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for src/core/portmap_sched.h: the order (NAT-PMP, then UPnP), renewal at half the
 * lease, the backoff after rounds with no answer, giving up, losing a mapping whose renewals
 * fail, and which external addresses count as private. Scripts of steps, time passed in. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>

#include "portmap_sched.h"

enum { N = PMS_NATPMP, U = PMS_UPNP, TRY = PMS_ACT_TRY, WAIT = PMS_ACT_WAIT, IDLE = PMS_ACT_IDLE };
enum { NONE = PMS_EV_NONE, MAPPED = PMS_EV_MAPPED, RENEWED = PMS_EV_RENEWED, LOST = PMS_EV_LOST };
enum { NOROUTER = PMS_EV_NO_ROUTER, GAVEUP = PMS_EV_GAVE_UP };

/* At now: pms_next must say kind (method for TRY, at for WAIT); then, for a TRY, the attempt's
 * outcome (ok, granted) is handed to pms_result, which must return ev. */
typedef struct {
    uint64_t now;
    int kind;
    int method;
    uint64_t at;
    int ok;
    uint32_t granted;
    int ev;
} step_t;

static void run(const char *name, const pms_cfg_t *cfg, const step_t *steps, size_t n)
{
    pms_t s;
    pms_init(&s, cfg, 0);
    for (size_t i = 0; i < n; i++) {
        const step_t *st = &steps[i];
        pms_action_t a = pms_next(&s, st->now);
        if ((int)a.kind != st->kind || (st->kind == TRY && (int)a.method != st->method) ||
            (st->kind == WAIT && a.at_ms != st->at)) {
            fail_msg("%s step %zu (now %llu): got kind %d method %d at %llu", name, i,
                     (unsigned long long)st->now, a.kind, a.method, (unsigned long long)a.at_ms);
        }
        if (st->kind != TRY) continue;
        pms_event_t ev = pms_result(&s, st->now, a.method, st->ok, st->granted);
        if ((int)ev != st->ev)
            fail_msg("%s step %zu (now %llu): event %d, want %d", name, i,
                     (unsigned long long)st->now, ev, st->ev);
    }
}

#define RUN(cfg, steps) run(#steps, cfg, steps, sizeof steps / sizeof steps[0])

static void test_natpmp_first_then_renew(void **state)
{
    (void)state;
    /* default lease 3600 s: mapped at 0, renew due at 1800 s, then at 1800 + 1800 */
    static const step_t steps[] = {
        {0, TRY, N, 0, 1, 0, MAPPED},         {1, WAIT, 0, 1800000, 0, 0, 0},
        {1799999, WAIT, 0, 1800000, 0, 0, 0}, {1800000, TRY, N, 0, 1, 0, RENEWED},
        {1800001, WAIT, 0, 3600000, 0, 0, 0}, {3600000, TRY, N, 0, 1, 0, RENEWED},
    };
    RUN(NULL, steps);
}

static void test_upnp_after_natpmp_fails(void **state)
{
    (void)state;
    /* NAT-PMP fails, UPnP at once; the UPnP mapping is renewed by UPnP; a shorter grant (600 s)
     * sets the renewal at 300 s */
    static const step_t steps[] = {
        {0, TRY, N, 0, 0, 0, NONE},
        {0, TRY, U, 0, 1, 600, MAPPED},
        {10, WAIT, 0, 300000, 0, 0, 0},
        {300000, TRY, U, 0, 1, 0, RENEWED},
        {300000, WAIT, 0, 300000 + 1800000, 0, 0, 0},
    };
    RUN(NULL, steps);
}

static void test_no_router_backoff_give_up(void **state)
{
    (void)state;
    /* base 1 s, cap 4 s, 4 rounds: NO_ROUTER once (the first round), then waits of 1, 2, 4 s,
     * each round NAT-PMP then UPnP, and after the 4th failed round nothing more */
    pms_cfg_t cfg = {.retry_base_ms = 1000, .retry_max_ms = 4000, .max_rounds = 4};
    static const step_t steps[] = {
        {0, TRY, N, 0, 0, 0, NONE},      {5, TRY, U, 0, 0, 0, NOROUTER},
        {6, WAIT, 0, 1005, 0, 0, 0},     {1005, TRY, N, 0, 0, 0, NONE},
        {1010, TRY, U, 0, 0, 0, NONE},   {1011, WAIT, 0, 3010, 0, 0, 0},
        {3010, TRY, N, 0, 0, 0, NONE},   {3010, TRY, U, 0, 0, 0, NONE},
        {3011, WAIT, 0, 7010, 0, 0, 0},  {7010, TRY, N, 0, 0, 0, NONE},
        {7010, TRY, U, 0, 0, 0, GAVEUP}, {7011, IDLE, 0, 0, 0, 0, 0},
        {99999999, IDLE, 0, 0, 0, 0, 0},
    };
    RUN(&cfg, steps);
}

static void test_one_round(void **state)
{
    (void)state;
    /* max_rounds 1: the first failed round gives up (no NO_ROUTER before it) */
    pms_cfg_t cfg = {.max_rounds = 1};
    static const step_t steps[] = {
        {0, TRY, N, 0, 0, 0, NONE},
        {0, TRY, U, 0, 0, 0, GAVEUP},
        {1, IDLE, 0, 0, 0, 0, 0},
    };
    RUN(&cfg, steps);
}

static void test_router_comes_late(void **state)
{
    (void)state;
    /* no answer in the first round; the second round's UPnP maps: the failures are forgotten */
    pms_cfg_t cfg = {.retry_base_ms = 1000, .retry_max_ms = 8000, .max_rounds = 2};
    static const step_t steps[] = {
        {0, TRY, N, 0, 0, 0, NONE},          {0, TRY, U, 0, 0, 0, NOROUTER},
        {1000, TRY, N, 0, 0, 0, NONE},       {1000, TRY, U, 0, 1, 100, MAPPED},
        {51000, TRY, U, 0, 1, 100, RENEWED},
    };
    RUN(&cfg, steps);
}

static void test_renew_fails_then_lost(void **state)
{
    (void)state;
    /* lease 60 s: renewal due at 30 s; failed retries after 5, 10 s (capped at half what is
     * left: 15 s left at 45 s -> 7.5 s), ...; lost once a retry would come within 1 s of the
     * expiry (60 s); then a fresh round at once (NAT-PMP first), and no second NO_ROUTER */
    pms_cfg_t cfg = {.lease_s = 60};
    static const step_t steps[] = {
        {0, TRY, N, 0, 1, 0, MAPPED},
        {29999, WAIT, 0, 30000, 0, 0, 0},
        {30000, TRY, N, 0, 0, 0, NONE}, /* 30 s left: retry in 5 s */
        {30001, WAIT, 0, 35000, 0, 0, 0},
        {35000, TRY, N, 0, 0, 0, NONE}, /* 25 s left: retry in 10 s */
        {35001, WAIT, 0, 45000, 0, 0, 0},
        {45000, TRY, N, 0, 0, 0, NONE}, /* 15 s left: 20 s capped at 7.5 s */
        {45001, WAIT, 0, 52500, 0, 0, 0},
        {52500, TRY, N, 0, 0, 0, NONE}, /* 7.5 s left: 3.75 s */
        {52501, WAIT, 0, 56250, 0, 0, 0},
        {56250, TRY, N, 0, 0, 0, NONE}, /* 3.75 s: 1.875 s */
        {58125, TRY, N, 0, 0, 0, LOST}, /* 1.875 s left: 0.94 s < 1 s */
        {58125, TRY, N, 0, 0, 0, NONE},
        {58125, TRY, U, 0, 1, 0, MAPPED},
        {58126, WAIT, 0, 58125 + 30000, 0, 0, 0},
    };
    RUN(&cfg, steps);
}

static void test_renew_recovers(void **state)
{
    (void)state;
    /* a renewal that fails once and then succeeds keeps the mapping (no event but RENEWED) */
    pms_cfg_t cfg = {.lease_s = 100};
    static const step_t steps[] = {
        {0, TRY, N, 0, 0, 0, NONE},        {0, TRY, U, 0, 1, 0, MAPPED},
        {50000, TRY, U, 0, 0, 0, NONE},    {55000, TRY, U, 0, 1, 0, RENEWED},
        {56000, WAIT, 0, 105000, 0, 0, 0},
    };
    RUN(&cfg, steps);
}

static void test_tiny_lease(void **state)
{
    (void)state;
    /* a lease below the minimum (asked or granted) counts as PMS_MIN_LEASE_S */
    pms_cfg_t cfg = {.lease_s = 1};
    static const step_t steps[] = {
        {0, TRY, N, 0, 1, 1, MAPPED},
        {1, WAIT, 0, PMS_MIN_LEASE_S * 500, 0, 0, 0},
    };
    RUN(&cfg, steps);
    pms_t s;
    pms_init(&s, &cfg, 0);
    assert_int_equal(s.cfg.lease_s, PMS_MIN_LEASE_S);
}

static void test_backoff(void **state)
{
    (void)state;
    pms_t s;
    pms_init(&s, NULL, 0);
    static const struct {
        uint32_t rounds;
        uint64_t want;
    } rows[] = {
        {0, 30000},  {1, 30000},  {2, 60000},  {3, 120000},  {4, 240000},
        {5, 480000}, {6, 900000}, {7, 900000}, {40, 900000}, {UINT32_MAX, 900000},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        assert_int_equal(pms_backoff_ms(&s.cfg, rows[i].rounds), rows[i].want);
    assert_int_equal(s.cfg.lease_s, 3600);
    assert_int_equal(s.cfg.max_rounds, PMS_DEFAULT_MAX_ROUNDS);
}

#define IP(a, b, c, d) ((uint32_t)(a) << 24 | (uint32_t)(b) << 16 | (uint32_t)(c) << 8 | (d))

static void test_private(void **state)
{
    (void)state;
    static const struct {
        uint32_t ip;
        bool want;
    } rows[] = {
        {IP(10, 0, 0, 1), true},         {IP(10, 255, 255, 255), true},
        {IP(11, 0, 0, 1), false},        {IP(9, 255, 255, 255), false},
        {IP(172, 15, 255, 255), false},  {IP(172, 16, 0, 0), true},
        {IP(172, 31, 255, 255), true},   {IP(172, 32, 0, 0), false},
        {IP(192, 168, 0, 1), true},      {IP(192, 169, 0, 1), false},
        {IP(192, 167, 255, 1), false},   {IP(100, 63, 255, 255), false},
        {IP(100, 64, 0, 0), true},       {IP(100, 127, 255, 255), true},
        {IP(100, 128, 0, 0), false},     {IP(169, 254, 1, 1), true},
        {IP(127, 0, 0, 1), true},        {IP(0, 0, 0, 0), true},
        {IP(203, 0, 113, 1), false},     {IP(8, 8, 8, 8), false},
        {IP(255, 255, 255, 255), false},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (pms_addr_private(rows[i].ip) != rows[i].want) fail_msg("row %zu: %08x", i, rows[i].ip);
    }
    assert_string_equal(pms_method_name(PMS_NATPMP), "natpmp");
    assert_string_equal(pms_method_name(PMS_UPNP), "upnp");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_natpmp_first_then_renew),
        cmocka_unit_test(test_upnp_after_natpmp_fails),
        cmocka_unit_test(test_no_router_backoff_give_up),
        cmocka_unit_test(test_one_round),
        cmocka_unit_test(test_router_comes_late),
        cmocka_unit_test(test_renew_fails_then_lost),
        cmocka_unit_test(test_renew_recovers),
        cmocka_unit_test(test_tiny_lease),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_private),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

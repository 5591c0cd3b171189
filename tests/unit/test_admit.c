/* Unit tests for admission control (src/core/admit.h) and the model manager's anti-thrash and
 * pin rules (src/core/mm.h), both pure: time is a counter passed in by the test.
 *
 * The last tests simulate the node's driver (admission in front of mm, loads and unloads that
 * finish at once) on an interleaved workload and count the switches. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "admit.h"
#include "mm.h"

static admit_t g_a; /* large: off the stack */
static mm_t g_mm;

static admit_t *fresh(unsigned qlen, uint64_t wait)
{
    admit_init(&g_a, qlen, wait);
    return &g_a;
}

static int tier(admit_t *a, const char *name, unsigned maxc, unsigned share, uint64_t tpm)
{
    admit_tier_t t = {.max_concurrent = maxc, .queue_share = share, .tpm = tpm};
    snprintf(t.name, sizeof t.name, "%s", name);
    int i = admit_add_tier(a, &t);
    assert_true(i >= 0);
    return i;
}

/* ---- admit: table of arrivals against a cap and a queue ---- */

static void test_cap_queue_reject(void **state)
{
    (void)state;
    static const struct {
        unsigned cap, qlen, arrivals;
        unsigned go, queued, rejected;
    } rows[] = {
        {2, 50, 100, 2, 50, 48}, {2, 50, 52, 2, 50, 0},
        {1, 0, 3, 1, 0, 2},      {0, 5, 20, 20, 0, 0}, /* no cap: everything goes */
        {4, 1, 6, 4, 1, 1},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        admit_t *a = fresh(rows[r].qlen, 1000);
        int m = admit_model(a, "A", rows[r].cap);
        unsigned go = 0, q = 0, rej = 0;
        for (unsigned i = 0; i < rows[r].arrivals; i++) {
            uint64_t id;
            admit_reject_t why;
            admit_verdict_t v = admit_try(a, m, 0, 10, &id, &why);
            if (v == ADMIT_GO) go++;
            if (v == ADMIT_QUEUED) q++;
            if (v == ADMIT_REJECT) {
                rej++;
                assert_int_equal(why.why, ADMIT_WHY_QUEUE_FULL);
                assert_true(why.retry_after_s >= 1);
                assert_int_equal(id, 0);
            }
        }
        assert_int_equal(go, rows[r].go);
        assert_int_equal(q, rows[r].queued);
        assert_int_equal(rej, rows[r].rejected);
        assert_int_equal(a->models[m].in_flight, rows[r].go);
        assert_int_equal(a->models[m].queued, rows[r].queued);
        assert_int_equal(a->models[m].rejected, rows[r].rejected);
    }
}

/* Releasing a running request starts the oldest queued one (FIFO); nothing else starts. */
static void test_fifo_release(void **state)
{
    (void)state;
    admit_t *a = fresh(10, 100000);
    int m = admit_model(a, "A", 1);
    uint64_t ids[6];
    admit_reject_t why;
    for (int i = 0; i < 6; i++)
        admit_try(a, m, 0, (uint64_t)i, &ids[i], &why);
    admit_action_t act;
    assert_false(admit_next(a, 10, &act)); /* the cap is used: nothing starts */
    for (int i = 0; i < 5; i++) {
        admit_release(a, ids[i], 20 + (uint64_t)i);
        assert_true(admit_next(a, 20 + (uint64_t)i, &act));
        assert_int_equal(act.kind, ADMIT_ACT_GO);
        assert_int_equal(act.id, ids[i + 1]);
        assert_false(admit_next(a, 20 + (uint64_t)i, &act));
    }
}

/* A newcomer never overtakes the queue, even at the moment a slot frees. */
static void test_no_overtaking(void **state)
{
    (void)state;
    admit_t *a = fresh(10, 100000);
    int m = admit_model(a, "A", 1);
    uint64_t a1, a2, a3;
    admit_reject_t why;
    assert_int_equal(admit_try(a, m, 0, 0, &a1, &why), ADMIT_GO);
    assert_int_equal(admit_try(a, m, 0, 1, &a2, &why), ADMIT_QUEUED);
    admit_release(a, a1, 2);
    assert_int_equal(admit_try(a, m, 0, 3, &a3, &why), ADMIT_QUEUED);
    admit_action_t act;
    assert_true(admit_next(a, 3, &act));
    assert_int_equal(act.id, a2);
}

/* A queued request whose client left is gone at once: the next one moves up, counts drop. */
static void test_cancel_queued(void **state)
{
    (void)state;
    admit_t *a = fresh(10, 100000);
    int m = admit_model(a, "A", 1);
    uint64_t id[4];
    admit_reject_t why;
    for (int i = 0; i < 4; i++)
        admit_try(a, m, 0, 0, &id[i], &why);
    assert_int_equal(a->models[m].queued, 3);
    admit_release(a, id[1], 5); /* queued, client gone */
    assert_int_equal(a->models[m].queued, 2);
    assert_int_equal(a->models[m].cancelled, 1);
    assert_int_equal(a->models[m].in_flight, 1);
    admit_release(a, id[0], 6);
    admit_action_t act;
    assert_true(admit_next(a, 6, &act));
    assert_int_equal(act.id, id[2]);
    admit_release(a, 999999, 7); /* unknown: nothing */
    assert_int_equal(a->models[m].queued, 1);
}

/* The wait is bounded: an expired request is handed out as EXPIRE (oldest first), the
 * deadline says when. */
static void test_wait_expires(void **state)
{
    (void)state;
    admit_t *a = fresh(10, 500);
    int m = admit_model(a, "A", 1);
    uint64_t id[3];
    admit_reject_t why;
    admit_try(a, m, 0, 0, &id[0], &why);
    admit_try(a, m, 0, 100, &id[1], &why);
    admit_try(a, m, 0, 200, &id[2], &why);
    assert_int_equal(admit_deadline(a), 600);
    admit_action_t act;
    assert_false(admit_next(a, 599, &act));
    assert_true(admit_next(a, 650, &act));
    assert_int_equal(act.kind, ADMIT_ACT_EXPIRE);
    assert_int_equal(act.id, id[1]);
    assert_int_equal(act.waited_ms, 550);
    assert_int_equal(act.why, ADMIT_WHY_QUEUE_TIMEOUT);
    assert_true(act.retry_after_s >= 1);
    assert_false(admit_next(a, 650, &act));
    assert_int_equal(admit_deadline(a), 700);
    assert_int_equal(a->models[m].expired, 1);
    assert_null(admit_entry(a, id[1]));
}

/* Round-robin between keys: key x queues 4, then key y queues 2; releases alternate x y x y. */
static void test_round_robin_keys(void **state)
{
    (void)state;
    admit_t *a = fresh(20, 100000);
    int t = tier(a, "gold", 0, 0, 0);
    int x = admit_add_key(a, "x", t), y = admit_add_key(a, "y", t);
    int m = admit_model(a, "A", 1);
    uint64_t first, id;
    admit_reject_t why;
    admit_try(a, m, x, 0, &first, &why); /* runs */
    uint64_t xs[4], ys[2];
    for (int i = 0; i < 4; i++)
        admit_try(a, m, x, 1, &xs[i], &why);
    for (int i = 0; i < 2; i++)
        admit_try(a, m, y, 2, &ys[i], &why);
    const uint64_t want[] = {ys[0], xs[0], ys[1], xs[1], xs[2], xs[3]};
    id = first;
    admit_action_t act;
    for (size_t i = 0; i < 6; i++) {
        admit_release(a, id, 10 + i);
        assert_true(admit_next(a, 10 + i, &act));
        assert_int_equal(act.id, want[i]);
        id = act.id;
    }
}

/* A tier's max_concurrent: a key at its cap waits while another key's request goes ahead. */
static void test_key_cap_skips(void **state)
{
    (void)state;
    admit_t *a = fresh(20, 100000);
    int bronze = tier(a, "bronze", 1, 0, 0);
    int gold = tier(a, "gold", 0, 0, 0);
    int b = admit_add_key(a, "b", bronze), g = admit_add_key(a, "g", gold);
    int m = admit_model(a, "A", 3);
    uint64_t b1, b2, g1;
    admit_reject_t why;
    assert_int_equal(admit_try(a, m, b, 0, &b1, &why), ADMIT_GO);
    assert_int_equal(admit_try(a, m, b, 1, &b2, &why), ADMIT_QUEUED); /* its own cap */
    assert_int_equal(admit_try(a, m, g, 2, &g1, &why), ADMIT_GO);     /* not behind b2 */
    admit_action_t act;
    assert_false(admit_next(a, 3, &act));
    admit_release(a, b1, 4);
    assert_true(admit_next(a, 4, &act));
    assert_int_equal(act.id, b2);
}

/* Queue share: a bronze key may hold 20 % of a queue of 10 (2 places), gold the rest. */
static void test_queue_share(void **state)
{
    (void)state;
    admit_t *a = fresh(10, 100000);
    int bronze = tier(a, "bronze", 0, 20, 0);
    int gold = tier(a, "gold", 0, 80, 0);
    int b = admit_add_key(a, "b", bronze), g = admit_add_key(a, "g", gold);
    int m = admit_model(a, "A", 1);
    uint64_t id;
    admit_reject_t why;
    assert_int_equal(admit_try(a, m, g, 0, &id, &why), ADMIT_GO);
    unsigned bq = 0, br = 0, gq = 0, gr = 0;
    for (int i = 0; i < 10; i++) {
        admit_verdict_t v = admit_try(a, m, b, 1, &id, &why);
        if (v == ADMIT_QUEUED) bq++;
        if (v == ADMIT_REJECT) {
            br++;
            assert_int_equal(why.why, ADMIT_WHY_KEY_QUEUE_FULL);
        }
        v = admit_try(a, m, g, 1, &id, &why);
        if (v == ADMIT_QUEUED) gq++;
        if (v == ADMIT_REJECT) gr++;
    }
    assert_int_equal(bq, 2);
    assert_int_equal(br, 8);
    assert_int_equal(gq, 8);
    assert_int_equal(gr, 2);
    assert_int_equal(a->keys[b].rejected, 8);
}

/* Tokens per minute: over the limit → 429 until the window frees (Retry-After = seconds to it). */
static void test_tpm(void **state)
{
    (void)state;
    admit_t *a = fresh(10, 100000);
    int t = tier(a, "small", 0, 0, 100);
    int k = admit_add_key(a, "k", t);
    int m = admit_model(a, "A", 0);
    uint64_t id;
    admit_reject_t why;
    assert_int_equal(admit_try(a, m, k, 1000, &id, &why), ADMIT_GO);
    admit_release(a, id, 1500);
    admit_tokens(a, k, 60, 1500);  /* second 1 */
    admit_tokens(a, k, 50, 10500); /* second 10: 110 in the window */
    assert_int_equal(admit_key_tokens(a, k, 10500), 110);
    assert_int_equal(admit_try(a, m, k, 11000, &id, &why), ADMIT_REJECT);
    assert_int_equal(why.why, ADMIT_WHY_TPM);
    /* second 1's tokens leave at second 61: 50 s from second 11 */
    assert_int_equal(why.retry_after_s, 50);
    assert_int_equal(admit_try(a, m, k, 60999, &id, &why), ADMIT_REJECT);
    assert_int_equal(admit_try(a, m, k, 61000, &id, &why), ADMIT_GO);
    assert_int_equal(admit_key_tokens(a, k, 61000), 50);
}

/* A blocked model starts nothing; unblocked, its queue moves again. */
static void test_blocked(void **state)
{
    (void)state;
    admit_t *a = fresh(10, 100000);
    int m = admit_model(a, "A", 2);
    admit_set_blocked(a, m, true);
    uint64_t id;
    admit_reject_t why;
    assert_int_equal(admit_try(a, m, 0, 0, &id, &why), ADMIT_QUEUED);
    admit_action_t act;
    assert_false(admit_next(a, 1, &act));
    admit_set_blocked(a, m, false);
    assert_true(admit_next(a, 2, &act));
    assert_int_equal(act.id, id);
}

/* A model no host serves: what would queue is refused (503 no_host), what waits leaves oldest
 * first, what may start at once still goes; once a host is back, requests queue again. */
static void test_no_host(void **state)
{
    (void)state;
    admit_t *a = fresh(10, 100000);
    int m = admit_model(a, "A", 1), other = admit_model(a, "B", 1);
    uint64_t id[4], ido;
    admit_reject_t why;
    assert_int_equal(admit_try(a, m, 0, 0, &id[0], &why), ADMIT_GO);
    assert_int_equal(admit_try(a, m, 0, 10, &id[1], &why), ADMIT_QUEUED);
    assert_int_equal(admit_try(a, m, 0, 20, &id[2], &why), ADMIT_QUEUED);
    assert_int_equal(admit_try(a, other, 0, 25, &ido, &why), ADMIT_GO);
    assert_int_equal(admit_try(a, other, 0, 26, &ido, &why), ADMIT_QUEUED);
    assert_true(admit_set_no_host(a, m, true));
    assert_false(admit_set_no_host(a, m, true)); /* unchanged */
    assert_int_equal(admit_try(a, m, 0, 30, &id[3], &why), ADMIT_REJECT);
    assert_int_equal(why.why, ADMIT_WHY_NO_HOST);
    assert_int_equal(why.retry_after_s, ADMIT_NO_HOST_RETRY_S);
    assert_int_equal(id[3], 0);
    admit_action_t act;
    for (int i = 1; i <= 2; i++) {
        assert_true(admit_next(a, 40, &act));
        assert_int_equal(act.kind, ADMIT_ACT_EXPIRE);
        assert_int_equal(act.why, ADMIT_WHY_NO_HOST);
        assert_int_equal(act.id, id[i]);
        assert_int_equal(act.waited_ms, 40 - 10 * (uint64_t)i);
        assert_int_equal(act.retry_after_s, ADMIT_NO_HOST_RETRY_S);
    }
    assert_false(admit_next(a, 40, &act)); /* model B's queue is not touched */
    assert_int_equal(a->models[other].queued, 1);
    assert_int_equal(a->models[m].queued, 0);
    admit_release(a, id[0], 50);
    assert_int_equal(admit_try(a, m, 0, 60, &id[3], &why), ADMIT_GO); /* a free slot: goes */
    assert_true(admit_set_no_host(a, m, false));
    assert_int_equal(admit_try(a, m, 0, 70, &id[1], &why), ADMIT_QUEUED);
    assert_false(admit_next(a, 80, &act));
}

/* 429: the client's own limits and a full queue; 503: a queue that cannot drain. */
static void test_why_status(void **state)
{
    (void)state;
    static const struct {
        admit_why_t why;
        unsigned status;
        const char *code;
    } rows[] = {
        {ADMIT_WHY_QUEUE_FULL, 429, "queue_full"},
        {ADMIT_WHY_KEY_QUEUE_FULL, 429, "key_queue_share_exceeded"},
        {ADMIT_WHY_TPM, 429, "tokens_per_minute_exceeded"},
        {ADMIT_WHY_NO_SPACE, 429, "too_many_requests"},
        {ADMIT_WHY_QUEUE_TIMEOUT, 503, "queue_timeout"},
        {ADMIT_WHY_NO_HOST, 503, "no_host"},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        assert_int_equal(admit_why_status(rows[r].why), rows[r].status);
        assert_string_equal(admit_why_code(rows[r].why), rows[r].code);
    }
}

/* A queue that is slow to drain is not a failure: 64 arrivals at 4 slots all start, in order,
 * when each request takes far longer than the old 30 s bound, under the default wait. */
static void test_default_wait_drains(void **state)
{
    (void)state;
    admit_t *a = fresh(256, ADMIT_DEFAULT_WAIT_MS);
    int m = admit_model(a, "A", 4);
    uint64_t ids[64], now = 0;
    admit_reject_t why;
    for (int i = 0; i < 64; i++)
        assert_int_not_equal(admit_try(a, m, 0, now, &ids[i], &why), ADMIT_REJECT);
    unsigned started = 4;
    admit_action_t act;
    for (int i = 0; started < 64; i++) {
        now += 9000; /* each request runs 9 s: the last of 64 starts after 9 min */
        admit_release(a, ids[i], now);
        assert_true(admit_next(a, now, &act));
        assert_int_equal(act.kind, ADMIT_ACT_GO);
        assert_int_equal(act.id, ids[started]);
        started++;
    }
    assert_true(now > 30000 * 4);
    assert_int_equal(a->models[m].expired, 0);
    assert_int_equal(a->models[m].rejected, 0);
    assert_int_equal(admit_oldest_queued(a, m), UINT64_MAX);
}

static void test_tiers_keys_errors(void **state)
{
    (void)state;
    admit_t *a = fresh(10, 1000);
    admit_tier_t t = {.name = "x", .queue_share = 101};
    assert_int_equal(admit_add_tier(a, &t), -EINVAL);
    t.queue_share = 50;
    assert_int_equal(admit_add_tier(a, &t), 1);
    assert_int_equal(admit_add_tier(a, &t), -EEXIST);
    assert_int_equal(admit_add_key(a, "k", 7), -EINVAL);
    admit_tier_t d = {.name = "default", .max_concurrent = 3};
    assert_int_equal(admit_add_tier(a, &d), 0);
    assert_int_equal(a->tiers[0].max_concurrent, 3);
    assert_string_equal(admit_why_code(ADMIT_WHY_QUEUE_FULL), "queue_full");
}

/* ---- mm: anti-thrash and pins ---- */

static mm_t *mm_fresh(unsigned llm)
{
    const unsigned max[MM_N_TYPES] = {llm, 1, 1};
    mm_init(&g_mm, max);
    return &g_mm;
}

static unsigned drain_loads(mm_t *mm, char *log, size_t cap)
{
    unsigned loads = 0;
    mm_action_t a;
    while (mm_next_action(mm, &a)) {
        size_t n = strlen(log);
        snprintf(log + n, cap - n, "%s%s %s", n ? "; " : "",
                 a.kind == MM_ACT_LOAD     ? "LOAD"
                 : a.kind == MM_ACT_UNLOAD ? "UNLOAD"
                 : a.kind == MM_ACT_SERVE  ? "SERVE"
                                           : "FAIL",
                 a.model->name);
        if (a.kind == MM_ACT_LOAD) loads++;
    }
    return loads;
}

/* Pending requests keep a loaded idle model while the waiting load is within its bound. */
static void test_mm_pending_protects(void **state)
{
    (void)state;
    mm_t *mm = mm_fresh(1);
    mm_set_fair_ms(mm, 1000);
    mm_model_t *A = mm_add(mm, "A", MM_LLM, 0), *B = mm_add(mm, "B", MM_LLM, 0);
    char log[512] = "";
    mm_request_begin(mm, A, 0);
    drain_loads(mm, log, sizeof log);
    mm_load_done(mm, A, true, MM_LOAD_ERR_RETRY, 10);
    drain_loads(mm, log, sizeof log);
    assert_int_equal(mm_request_begin(mm, B, 20), MM_WAIT);
    mm_set_pending(mm, A, 1, 20);
    log[0] = '\0';
    mm_request_end(mm, A, 30); /* A idle but has a pending request: B waits */
    drain_loads(mm, log, sizeof log);
    assert_string_equal(log, "");
    assert_false(mm_hold(mm, A, 30));
    assert_int_equal(mm_deadline(mm), 1020);
    assert_int_equal(mm_request_begin(mm, A, 40), MM_SERVE_NOW);
    mm_set_pending(mm, A, 0, 40);
    mm_request_end(mm, A, 50);
    drain_loads(mm, log, sizeof log);
    assert_string_equal(log, "UNLOAD A");
    assert_int_equal(mm->switches, 1);
}

/* Past the bound, pending requests protect nothing and mm_hold says so. */
static void test_mm_fairness_bound(void **state)
{
    (void)state;
    mm_t *mm = mm_fresh(1);
    mm_set_fair_ms(mm, 100);
    mm_model_t *A = mm_add(mm, "A", MM_LLM, 0), *B = mm_add(mm, "B", MM_LLM, 0);
    char log[512] = "";
    mm_request_begin(mm, A, 0);
    mm_load_done(mm, A, true, MM_LOAD_ERR_RETRY, 0);
    drain_loads(mm, log, sizeof log);
    mm_request_begin(mm, B, 10);
    mm_set_pending(mm, A, 5, 10);
    assert_false(mm_hold(mm, A, 109));
    assert_true(mm_hold(mm, A, 110)); /* the admission driver stops feeding A */
    assert_false(mm_hold(mm, B, 110));
    log[0] = '\0';
    mm_request_end(mm, A, 120); /* idle; pending no longer protects it */
    drain_loads(mm, log, sizeof log);
    assert_string_equal(log, "UNLOAD A");
}

/* A pinned model is never evicted: the other model of its type takes the free slot, and a
 * third waits for it, not for the pinned one. With every slot pinned, a load fails at once. */
static void test_mm_pin(void **state)
{
    (void)state;
    mm_t *mm = mm_fresh(2);
    mm_model_t *P = mm_add(mm, "P", MM_LLM, 0), *A = mm_add(mm, "A", MM_LLM, 0);
    mm_model_t *B = mm_add(mm, "B", MM_LLM, 0);
    mm_set_pinned(mm, P, true);
    char log[512] = "";
    mm_load(mm, P, 0);
    mm_load_done(mm, P, true, MM_LOAD_ERR_RETRY, 1);
    mm_request_begin(mm, A, 2);
    mm_load_done(mm, A, true, MM_LOAD_ERR_RETRY, 3);
    mm_request_end(mm, A, 4);
    drain_loads(mm, log, sizeof log);
    log[0] = '\0';
    /* P is the least recently used, but pinned: A goes */
    mm_request_begin(mm, B, 5);
    drain_loads(mm, log, sizeof log);
    assert_string_equal(log, "UNLOAD A");

    mm = mm_fresh(1);
    P = mm_add(mm, "P", MM_LLM, 0);
    A = mm_add(mm, "A", MM_LLM, 0);
    mm_set_pinned(mm, P, true);
    mm_load(mm, P, 0);
    mm_load_done(mm, P, true, MM_LOAD_ERR_RETRY, 1);
    log[0] = '\0';
    drain_loads(mm, log, sizeof log);
    log[0] = '\0';
    mm_request_begin(mm, A, 2);
    mm_action_t act;
    assert_true(mm_next_action(mm, &act));
    assert_int_equal(act.kind, MM_ACT_FAIL);
    assert_int_equal(act.status, 503);
    assert_int_equal(act.reason, MM_FAIL_PINNED);
    assert_false(mm_next_action(mm, &act));
}

/* ---- the two together: the driver's loop on an interleaved workload ---- */

typedef struct {
    int model;
    uint64_t id;
    int state; /* 0 queued (admission), 1 waiting for a load (mm), 2 running, 3 done */
} sim_req_t;

static unsigned g_loads;
static char g_order[64];

static void sim_mm(mm_t *mm, sim_req_t *r, size_t n, mm_model_t **mmm)
{
    mm_action_t a;
    bool again = true;
    while (again) {
        again = false;
        mm_model_t *load = NULL;
        while (mm_next_action(mm, &a)) {
            if (a.kind == MM_ACT_LOAD) {
                g_loads++;
                load = a.model;
            } else if (a.kind == MM_ACT_UNLOAD) {
                mm_unload_done(mm, a.model, 0);
            } else if (a.kind == MM_ACT_SERVE) {
                unsigned c = a.count;
                for (size_t i = 0; i < n && c; i++)
                    if (mmm[r[i].model] == a.model && r[i].state == 1) {
                        r[i].state = 2;
                        c--;
                    }
            }
        }
        if (load) {
            mm_load_done(mm, load, true, MM_LOAD_ERR_RETRY, 0);
            again = true;
        }
    }
}

static void sim_pending(admit_t *a, mm_t *mm, mm_model_t **mmm, int nm, uint64_t now)
{
    for (int i = 0; i < nm; i++)
        mm_set_pending(mm, mmm[i], a->models[i].queued, now);
}

static void sim_pump(admit_t *a, mm_t *mm, sim_req_t *r, size_t n, mm_model_t **mmm, int nm,
                     uint64_t now)
{
    admit_action_t act;
    while (admit_next(a, now, &act)) {
        for (size_t i = 0; i < n; i++) {
            if (r[i].id != act.id) continue;
            /* begin before the pending count drops, as the driver does */
            r[i].state = mm_request_begin(mm, mmm[r[i].model], now) == MM_SERVE_NOW ? 2 : 1;
            sim_pending(a, mm, mmm, nm, now);
            sim_mm(mm, r, n, mmm);
        }
    }
    sim_pending(a, mm, mmm, nm, now);
    sim_mm(mm, r, n, mmm);
}

/* A B C A B C arriving together, one llm slot, a cap of 1 request per model: with the
 * anti-thrash rule each model loads once (2 switches); without it (fair_ms 0) the second
 * request of each model reloads it (5 switches). Completion order shows the batching. */
static unsigned sim_interleaved(uint64_t fair_ms)
{
    admit_t *a = fresh(64, 1000000);
    mm_t *mm = mm_fresh(1);
    mm_set_fair_ms(mm, fair_ms);
    const char *names[] = {"A", "B", "C"};
    mm_model_t *mmm[3];
    for (int i = 0; i < 3; i++) {
        mmm[i] = mm_add(mm, names[i], MM_LLM, 0);
        assert_int_equal(admit_model(a, names[i], 1), i);
    }
    sim_req_t r[6];
    g_loads = 0;
    g_order[0] = '\0';
    uint64_t now = 0;
    for (int i = 0; i < 6; i++) {
        r[i].model = i % 3;
        admit_reject_t why;
        admit_verdict_t v = admit_try(a, r[i].model, 0, now, &r[i].id, &why);
        assert_int_not_equal(v, ADMIT_REJECT);
        r[i].state = 0;
        if (v == ADMIT_GO) {
            sim_pending(a, mm, mmm, 3, now);
            r[i].state = mm_request_begin(mm, mmm[r[i].model], now) == MM_SERVE_NOW ? 2 : 1;
        }
        sim_mm(mm, r, 6, mmm);
    }
    sim_pending(a, mm, mmm, 3, now);
    sim_mm(mm, r, 6, mmm);
    for (int step = 0; step < 100; step++) {
        int run = -1;
        for (int i = 0; i < 6; i++)
            if (r[i].state == 2) {
                run = i;
                break;
            }
        if (run < 0) break;
        now += 10;
        r[run].state = 3;
        size_t n = strlen(g_order);
        g_order[n] = names[r[run].model][0];
        g_order[n + 1] = '\0';
        admit_release(a, r[run].id, now);
        mm_request_end(mm, mmm[r[run].model], now);
        sim_mm(mm, r, 6, mmm);
        sim_pump(a, mm, r, 6, mmm, 3, now);
    }
    for (int i = 0; i < 6; i++)
        assert_int_equal(r[i].state, 3);
    return g_loads;
}

static void test_interleaved_switches(void **state)
{
    (void)state;
    assert_int_equal(sim_interleaved(60000), 3); /* A, B, C: 2 switches */
    assert_string_equal(g_order, "AABBCC");
    assert_int_equal(sim_interleaved(0), 6); /* without the rule: 5 switches */
    assert_string_equal(g_order, "ABCABC");
}

static uint64_t tail_tokens(const char *t, unsigned choices)
{
    return admit_tail_tokens(t, strlen(t), choices);
}

static void test_tail_tokens(void **state)
{
    (void)state;
    /* a streamed chat's last chunk: only llama-server's timings */
    assert_int_equal(tail_tokens("data: {\"timings\":{\"prompt_n\":43,\"predicted_n\":6}}\n\n"
                                 "data: [DONE]\n\n",
                                 1),
                     6);
    /* n: 4 -- llama-server reports one choice */
    assert_int_equal(
        tail_tokens("{\"usage\":{\"completion_tokens\":3},\"timings\":{\"predicted_n\":3}}", 4),
        12);
    /* Anthropic and Responses */
    assert_int_equal(
        tail_tokens("event: message_delta\ndata: {\"usage\":{\"output_tokens\":7}}\n\n", 1), 7);
    assert_int_equal(tail_tokens("{\"tokens_predicted\":9,\"x\":1}", 1), 9);
    /* the last value wins, the largest kind */
    assert_int_equal(tail_tokens("\"predicted_n\":2 \"predicted_n\":5 \"completion_tokens\":4", 1),
                     5);
    /* a stream cut short: one token per event */
    assert_int_equal(tail_tokens("data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: {\"a", 1), 3);
    assert_int_equal(tail_tokens("", 1), 0);
    assert_int_equal(admit_tail_tokens(NULL, 0, 1), 0);
    /* a number cut at the end of the tail is read as far as it goes */
    assert_int_equal(admit_tail_tokens("\"predicted_n\":123456", 17, 1), 123);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cap_queue_reject),
        cmocka_unit_test(test_fifo_release),
        cmocka_unit_test(test_no_overtaking),
        cmocka_unit_test(test_cancel_queued),
        cmocka_unit_test(test_wait_expires),
        cmocka_unit_test(test_round_robin_keys),
        cmocka_unit_test(test_key_cap_skips),
        cmocka_unit_test(test_queue_share),
        cmocka_unit_test(test_tpm),
        cmocka_unit_test(test_blocked),
        cmocka_unit_test(test_no_host),
        cmocka_unit_test(test_why_status),
        cmocka_unit_test(test_default_wait_drains),
        cmocka_unit_test(test_tiers_keys_errors),
        cmocka_unit_test(test_mm_pending_protects),
        cmocka_unit_test(test_mm_fairness_bound),
        cmocka_unit_test(test_mm_pin),
        cmocka_unit_test(test_interleaved_switches),
        cmocka_unit_test(test_tail_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for the model manager's policy (src/core/mm.h): a pure, sans-I/O state machine.
 *
 * The helper drain() pulls every pending action out of mm_next_action() and renders them as a
 * single string ("UNLOAD A; LOAD B; SERVE B 2; FAIL C 404"), so each test asserts the exact
 * sequence of actions an event produced. Time is a plain counter passed in by the test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm.h"

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------------- */

static mm_t g_mm; /* ~100 KiB: keep it off the stack */

static mm_t *fresh(unsigned llm, unsigned emb, unsigned rr)
{
    const unsigned max[MM_N_TYPES] = {llm, emb, rr};
    mm_init(&g_mm, max);
    return &g_mm;
}

static mm_model_t *add(mm_t *mm, const char *name, mm_type_t type, unsigned dev)
{
    mm_model_t *m = mm_add(mm, name, type, dev);
    assert_non_null(m);
    return m;
}

static void render(const mm_action_t *a, char *out, size_t cap)
{
    switch (a->kind) {
    case MM_ACT_LOAD:
        snprintf(out, cap, "LOAD %s", a->model->name);
        break;
    case MM_ACT_UNLOAD:
        snprintf(out, cap, "UNLOAD %s", a->model->name);
        break;
    case MM_ACT_SERVE:
        snprintf(out, cap, "SERVE %s %u", a->model->name, a->count);
        break;
    case MM_ACT_FAIL:
        if (a->count == 1)
            snprintf(out, cap, "FAIL %s %d", a->model->name, a->status);
        else
            snprintf(out, cap, "FAIL %s %d x%u", a->model->name, a->status, a->count);
        break;
    default:
        snprintf(out, cap, "NONE");
        break;
    }
}

/* Every pending action, in order, joined with "; ". Empty string when there is none. */
static const char *drain(mm_t *mm)
{
    static char buf[16384];
    size_t len = 0;
    buf[0] = '\0';
    mm_action_t a;
    while (mm_next_action(mm, &a)) {
        char one[MM_NAME_MAX + 64];
        render(&a, one, sizeof one);
        int n = snprintf(buf + len, sizeof buf - len, "%s%s", len ? "; " : "", one);
        assert_true(n > 0 && (size_t)n < sizeof buf - len);
        len += (size_t)n;
    }
    return buf;
}

#define EXPECT(mm, s) assert_string_equal(drain(mm), (s))

/* Load m explicitly at t, t+1 and check that it needed no eviction. */
static void preload(mm_t *mm, mm_model_t *m, uint64_t t)
{
    mm_load(mm, m, t);
    char want[MM_NAME_MAX + 16];
    snprintf(want, sizeof want, "LOAD %s", m->name);
    EXPECT(mm, want);
    mm_load_done(mm, m, true, MM_LOAD_ERR_RETRY, t + 1);
    EXPECT(mm, "");
    assert_int_equal(m->state, MM_LOADED);
}

/* A request that is served at once and ends at once. */
static void touch(mm_t *mm, mm_model_t *m, uint64_t t)
{
    assert_int_equal(mm_request_begin(mm, m, t), MM_SERVE_NOW);
    mm_request_end(mm, m, t);
}

/* ------------------------------------------------------------------------------------------
 * Requests and auto-load
 * ---------------------------------------------------------------------------------------- */

static void test_request_loaded_model_serves_now(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);

    assert_int_equal(mm_request_begin(mm, a, 10), MM_SERVE_NOW);
    EXPECT(mm, "");
    assert_int_equal(a->in_flight, 1);
    assert_int_equal(a->waiters, 0);
    assert_int_equal(mm_request_begin(mm, a, 11), MM_SERVE_NOW);
    assert_int_equal(a->in_flight, 2);
    mm_request_end(mm, a, 12);
    assert_int_equal(a->in_flight, 1);
    mm_request_end(mm, a, 13);
    assert_int_equal(a->in_flight, 0);
    EXPECT(mm, "");
    assert_int_equal(a->state, MM_LOADED);
}

static void test_request_unloaded_model_waits_and_loads(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);

    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    assert_int_equal(a->state, MM_LOADING);
    assert_int_equal(a->waiters, 1);
    assert_int_equal(a->in_flight, 0);

    /* a second request while loading waits too, without a second load */
    assert_int_equal(mm_request_begin(mm, a, 2), MM_WAIT);
    EXPECT(mm, "");
    assert_int_equal(a->waiters, 2);

    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 5);
    EXPECT(mm, "SERVE A 2");
    assert_int_equal(a->state, MM_LOADED);
    assert_int_equal(a->waiters, 0);
    assert_int_equal(a->in_flight, 2); /* the served requests are in flight */
    assert_int_equal(a->loaded_at, 5);
    assert_null(mm->current);

    mm_request_end(mm, a, 6);
    mm_request_end(mm, a, 7);
    assert_int_equal(a->in_flight, 0);
    EXPECT(mm, "");
}

static void test_concurrent_autoloads_same_model_one_load(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);

    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    assert_int_equal(mm->qlen, 0);
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 2);
    EXPECT(mm, "SERVE A 2");
    assert_int_equal(a->in_flight, 2);
}

static void test_concurrent_autoloads_while_queued_one_load(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);

    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    /* B is queued behind A: two requests, one queue entry */
    assert_int_equal(mm_request_begin(mm, b, 2), MM_WAIT);
    assert_int_equal(mm_request_begin(mm, b, 3), MM_WAIT);
    EXPECT(mm, "");
    assert_int_equal(mm->qlen, 1);
    assert_true(b->queued);
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 4);
    EXPECT(mm, "SERVE A 1; LOAD B");
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 5);
    EXPECT(mm, "SERVE B 2");
}

static void test_request_cancel_decrements_waiters(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);

    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    assert_int_equal(a->waiters, 3);
    mm_request_cancel(mm, a);
    assert_int_equal(a->waiters, 2);
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 2);
    EXPECT(mm, "SERVE A 2");
    assert_int_equal(a->in_flight, 2);
}

static void test_request_cancel_all_waiters_no_serve(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);

    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    mm_request_cancel(mm, a);
    assert_int_equal(a->waiters, 0);
    mm_request_cancel(mm, a); /* extra cancel does not underflow */
    assert_int_equal(a->waiters, 0);
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 2);
    EXPECT(mm, ""); /* no SERVE with count 0 */
    assert_int_equal(a->state, MM_LOADED);
    assert_int_equal(a->in_flight, 0);
}

static void test_request_end_without_in_flight_does_not_underflow(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    mm_request_end(mm, a, 5);
    assert_int_equal(a->in_flight, 0);
    EXPECT(mm, "");
}

/* ------------------------------------------------------------------------------------------
 * Slots and LRU
 * ---------------------------------------------------------------------------------------- */

static void test_free_slot_loads_without_evicting(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *e = add(mm, "E", MM_EMBEDDING, MM_DEV_GPU);
    mm_model_t *r = add(mm, "R", MM_RERANKING, MM_DEV_GPU);

    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 2);
    EXPECT(mm, "SERVE A 1");
    mm_request_end(mm, a, 3);
    assert_int_equal(mm_request_begin(mm, b, 4), MM_WAIT);
    EXPECT(mm, "LOAD B"); /* second llm slot is free */
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 5);
    EXPECT(mm, "SERVE B 1");
    /* other types have their own slots */
    assert_int_equal(mm_request_begin(mm, e, 6), MM_WAIT);
    EXPECT(mm, "LOAD E");
    mm_load_done(mm, e, true, MM_LOAD_ERR_RETRY, 7);
    EXPECT(mm, "SERVE E 1");
    assert_int_equal(mm_request_begin(mm, r, 8), MM_WAIT);
    EXPECT(mm, "LOAD R");
    mm_load_done(mm, r, true, MM_LOAD_ERR_RETRY, 9);
    EXPECT(mm, "SERVE R 1");
    assert_int_equal(mm_count_loaded(mm, MM_LLM), 2);
    assert_int_equal(mm_count_loaded(mm, MM_EMBEDDING), 1);
    assert_int_equal(mm_count_loaded(mm, MM_RERANKING), 1);
}

/* max {2,1,1}: requests A, B, B, C (each ended after served) -> C evicts A (LRU). */
static void test_full_type_evicts_lru(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_LLM, MM_DEV_GPU);

    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 2);
    EXPECT(mm, "SERVE A 1");
    mm_request_end(mm, a, 3);

    assert_int_equal(mm_request_begin(mm, b, 4), MM_WAIT);
    EXPECT(mm, "LOAD B");
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 5);
    EXPECT(mm, "SERVE B 1");
    mm_request_end(mm, b, 6);

    assert_int_equal(mm_request_begin(mm, b, 7), MM_SERVE_NOW);
    EXPECT(mm, "");
    mm_request_end(mm, b, 8);

    assert_int_equal(mm_request_begin(mm, c, 9), MM_WAIT);
    EXPECT(mm, "UNLOAD A");
    assert_int_equal(a->state, MM_UNLOADING);
    assert_int_equal(c->state, MM_UNLOADED); /* waits for the unload to finish */
    mm_unload_done(mm, a, 10);
    EXPECT(mm, "LOAD C");
    mm_load_done(mm, c, true, MM_LOAD_ERR_RETRY, 11);
    EXPECT(mm, "SERVE C 1");
    mm_request_end(mm, c, 12);
    EXPECT(mm, "");

    assert_int_equal(a->state, MM_UNLOADED);
    assert_int_equal(b->state, MM_LOADED);
    assert_int_equal(c->state, MM_LOADED);
    assert_int_equal(mm_count_loaded(mm, MM_LLM), 2);
}

static void test_lru_tie_broken_by_name(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *z = add(mm, "Z", MM_LLM, MM_DEV_GPU);
    mm_model_t *y = add(mm, "Y", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_LLM, MM_DEV_GPU);
    preload(mm, z, 1);
    preload(mm, y, 3);
    z->last_use = y->last_use = 7; /* same access time */
    assert_int_equal(mm_request_begin(mm, c, 9), MM_WAIT);
    EXPECT(mm, "UNLOAD Y");
}

static void test_last_use_updated_on_every_access(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);

    assert_int_equal(mm_request_begin(mm, a, 5), MM_WAIT);
    EXPECT(mm, "LOAD A");
    assert_int_equal(a->last_use, 5); /* load start */
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 9);
    EXPECT(mm, "SERVE A 1");
    assert_int_equal(a->last_use, 9); /* load end */
    assert_int_equal(mm_request_begin(mm, a, 12), MM_SERVE_NOW);
    assert_int_equal(a->last_use, 12); /* request start */
    mm_request_end(mm, a, 20);
    assert_int_equal(a->last_use, 20); /* request end (even with one still in flight) */
    mm_request_end(mm, a, 25);
    assert_int_equal(a->last_use, 25);

    /* explicit load of a loaded model counts as an access too */
    mm_load(mm, a, 30);
    EXPECT(mm, "");
    assert_int_equal(a->last_use, 30);
}

/* The LRU choice flips when a request end touches a model. */
static void test_lru_flips_on_request_end(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    preload(mm, b, 3);

    assert_int_equal(mm_request_begin(mm, a, 10), MM_SERVE_NOW); /* A: start 10 */
    assert_int_equal(mm_request_begin(mm, b, 20), MM_SERVE_NOW); /* B: start 20 */
    mm_request_end(mm, b, 21);                                   /* B: end 21 */
    mm_request_end(mm, a, 30);                                   /* A: end 30 */
    assert_int_equal(a->last_use, 30);
    assert_int_equal(b->last_use, 21);
    /* by request start alone A (10) would be the LRU; the end at 30 makes it B */
    assert_int_equal(mm_request_begin(mm, c, 40), MM_WAIT);
    EXPECT(mm, "UNLOAD B");
}

/* Same setup as above without the request-end touch: the LRU is A. */
static void test_lru_without_flip_control(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    preload(mm, b, 3);
    touch(mm, a, 10);
    touch(mm, b, 20);
    assert_int_equal(mm_request_begin(mm, c, 40), MM_WAIT);
    EXPECT(mm, "UNLOAD A");
}

/* Load start and load end both count: a model loaded long ago but whose load just finished
 * is more recent than one touched in between. */
static void test_lru_load_end_counts_as_access(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    mm_load(mm, b, 2); /* load start 2 */
    EXPECT(mm, "LOAD B");
    touch(mm, a, 5);                                 /* A touched at 5 */
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 9); /* B's load ends at 9 */
    EXPECT(mm, "");
    assert_int_equal(mm_request_begin(mm, c, 10), MM_WAIT);
    EXPECT(mm, "UNLOAD A");
}

/* A full type evicts only its own models: idle models of other types stay, even older ones. */
static void test_eviction_only_within_type(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *e = add(mm, "E", MM_EMBEDDING, MM_DEV_GPU);
    mm_model_t *r = add(mm, "R", MM_RERANKING, MM_DEV_GPU);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    preload(mm, e, 1); /* the oldest of all */
    preload(mm, r, 3);
    preload(mm, a, 5);
    assert_int_equal(mm_request_begin(mm, b, 7), MM_WAIT);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 8);
    EXPECT(mm, "LOAD B");
    assert_int_equal(e->state, MM_LOADED);
    assert_int_equal(r->state, MM_LOADED);
}

/* ------------------------------------------------------------------------------------------
 * Busy models are never evicted
 * ---------------------------------------------------------------------------------------- */

static void test_busy_model_never_evicted(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);

    assert_int_equal(mm_request_begin(mm, a, 3), MM_SERVE_NOW);
    assert_int_equal(mm_request_begin(mm, b, 4), MM_WAIT);
    EXPECT(mm, ""); /* no UNLOAD of busy A */
    assert_int_equal(a->state, MM_LOADED);
    assert_ptr_equal(mm->current, b);

    /* unrelated events do not evict A either */
    assert_int_equal(mm_request_begin(mm, b, 5), MM_WAIT);
    mm_load(mm, b, 6);
    EXPECT(mm, "");
    /* a new request for A is still served */
    assert_int_equal(mm_request_begin(mm, a, 7), MM_SERVE_NOW);
    mm_request_end(mm, a, 8);
    EXPECT(mm, ""); /* one still in flight */

    mm_request_end(mm, a, 9);
    EXPECT(mm, "UNLOAD A");
    assert_int_equal(b->state, MM_UNLOADED);
    mm_unload_done(mm, a, 10);
    EXPECT(mm, "LOAD B");
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 11);
    EXPECT(mm, "SERVE B 2");
}

static void test_long_stream_never_evicted(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    assert_int_equal(mm_request_begin(mm, a, 3), MM_SERVE_NOW);
    assert_int_equal(mm_request_begin(mm, b, 4), MM_WAIT);
    /* a stream running for a long time while many things happen */
    for (uint64_t t = 5; t < 1000; t++) {
        if (t % 3 == 0) {
            assert_int_equal(mm_request_begin(mm, b, t), MM_WAIT);
        } else if (t % 3 == 1) {
            mm_request_cancel(mm, b);
        } else {
            mm_load(mm, b, t);
        }
        EXPECT(mm, "");
        assert_int_equal(a->state, MM_LOADED);
    }
    mm_request_end(mm, a, 2000);
    EXPECT(mm, "UNLOAD A");
}

/* max 2: one busy (and LRU), one idle -> the idle one goes. */
static void test_idle_preferred_over_busy_lru(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    preload(mm, b, 3);
    assert_int_equal(mm_request_begin(mm, a, 5), MM_SERVE_NOW); /* A busy, last_use 5 */
    touch(mm, b, 10);                                           /* B idle, last_use 10 */
    assert_true(a->last_use < b->last_use);
    assert_int_equal(mm_request_begin(mm, c, 11), MM_WAIT);
    EXPECT(mm, "UNLOAD B");
    mm_unload_done(mm, b, 12);
    EXPECT(mm, "LOAD C");
    assert_int_equal(a->state, MM_LOADED);
    assert_int_equal(a->in_flight, 1);
}

/* ------------------------------------------------------------------------------------------
 * Serialized loads
 * ---------------------------------------------------------------------------------------- */

static void test_loads_serialized(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *e = add(mm, "E", MM_EMBEDDING, MM_DEV_GPU);

    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    assert_int_equal(mm_request_begin(mm, e, 2), MM_WAIT);
    EXPECT(mm, ""); /* different type, free slot: still waits its turn */
    assert_int_equal(mm_request_begin(mm, b, 3), MM_WAIT);
    EXPECT(mm, "");
    assert_int_equal(e->state, MM_UNLOADED);
    assert_int_equal(b->state, MM_UNLOADED);
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 4);
    EXPECT(mm, "SERVE A 1; LOAD E"); /* FIFO */
    mm_load_done(mm, e, true, MM_LOAD_ERR_RETRY, 5);
    EXPECT(mm, "SERVE E 1; LOAD B");
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 6);
    EXPECT(mm, "SERVE B 1");
}

static void test_stale_load_done_ignored(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    assert_int_equal(mm_request_begin(mm, b, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 2); /* B is not loading */
    EXPECT(mm, "");
    assert_int_equal(b->state, MM_UNLOADED);
    mm_unload_done(mm, a, 3); /* A is not unloading */
    EXPECT(mm, "");
    assert_int_equal(a->state, MM_LOADING);
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 4);
    EXPECT(mm, "SERVE A 1; LOAD B");
}

/* The eviction choice is made when the load leaves the queue, not when it is queued. */
static void test_eviction_choice_at_dequeue(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *x = add(mm, "X", MM_LLM, MM_DEV_GPU);
    mm_model_t *y = add(mm, "Y", MM_LLM, MM_DEV_GPU);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *e = add(mm, "E", MM_EMBEDDING, MM_DEV_GPU);
    preload(mm, x, 1); /* X: 2 */
    preload(mm, y, 3); /* Y: 4 */

    assert_int_equal(mm_request_begin(mm, e, 5), MM_WAIT);
    EXPECT(mm, "LOAD E"); /* keeps the load pipeline busy */
    assert_int_equal(mm_request_begin(mm, a, 6), MM_WAIT);
    EXPECT(mm, ""); /* queued; X is the LRU right now */
    assert_true(a->queued);
    assert_true(x->last_use < y->last_use);

    touch(mm, x, 7); /* now Y is the LRU */
    EXPECT(mm, "");
    assert_true(y->last_use < x->last_use);

    mm_load_done(mm, e, true, MM_LOAD_ERR_RETRY, 8);
    EXPECT(mm, "SERVE E 1; UNLOAD Y");
    mm_unload_done(mm, y, 9);
    EXPECT(mm, "LOAD A");
    assert_int_equal(x->state, MM_LOADED);
}

/* The victim is re-evaluated while the load waits for busy models, and the first to become
 * idle goes (not the strict LRU). */
static void test_waiting_load_takes_first_idle(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    preload(mm, b, 3);
    assert_int_equal(mm_request_begin(mm, a, 5), MM_SERVE_NOW);
    assert_int_equal(mm_request_begin(mm, b, 6), MM_SERVE_NOW);
    assert_int_equal(mm_request_begin(mm, c, 7), MM_WAIT);
    EXPECT(mm, "");
    mm_request_end(mm, b, 8); /* B idle first, although A is older */
    EXPECT(mm, "UNLOAD B");
    mm_request_end(mm, a, 9);
    EXPECT(mm, ""); /* one eviction is enough */
    mm_unload_done(mm, b, 10);
    EXPECT(mm, "LOAD C");
    assert_int_equal(a->state, MM_LOADED);
}

/* ------------------------------------------------------------------------------------------
 * Auto-loaded models serve their request before they can be evicted
 * ---------------------------------------------------------------------------------------- */

static void test_autoload_serves_before_eviction(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);

    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    assert_int_equal(mm_request_begin(mm, b, 2), MM_WAIT);
    EXPECT(mm, "");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 3);
    EXPECT(mm, "SERVE A 1"); /* and no UNLOAD A for B's load */
    assert_int_equal(a->in_flight, 1);
    assert_int_equal(a->state, MM_LOADED);
    assert_ptr_equal(mm->current, b);

    /* other events while A's request is running do not evict it */
    assert_int_equal(mm_request_begin(mm, b, 4), MM_WAIT);
    EXPECT(mm, "");
    assert_int_equal(a->state, MM_LOADED);

    mm_request_end(mm, a, 5);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 6);
    EXPECT(mm, "LOAD B");
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 7);
    EXPECT(mm, "SERVE B 2");
}

/* ------------------------------------------------------------------------------------------
 * Failed loads
 * ---------------------------------------------------------------------------------------- */

/* A failed load evicts every idle model of every type, then retries once; a second failure
 * fails the waiters with 500. Busy models are spared. */
static void test_failed_load_nuclear_then_500(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *e = add(mm, "E", MM_EMBEDDING, MM_DEV_GPU);
    mm_model_t *r = add(mm, "R", MM_RERANKING, MM_DEV_GPU);
    preload(mm, a, 1);
    preload(mm, e, 3);
    preload(mm, r, 5);
    assert_int_equal(mm_request_begin(mm, r, 7), MM_SERVE_NOW); /* R busy */

    assert_int_equal(mm_request_begin(mm, b, 8), MM_WAIT);
    EXPECT(mm, "LOAD B"); /* free llm slot */
    assert_int_equal(mm_request_begin(mm, b, 9), MM_WAIT);
    mm_load_done(mm, b, false, MM_LOAD_ERR_RETRY, 10);
    EXPECT(mm, "UNLOAD A; UNLOAD E"); /* not R: busy */
    assert_int_equal(b->state, MM_UNLOADED);
    assert_int_equal(b->waiters, 2);
    assert_int_equal(r->state, MM_LOADED);

    mm_unload_done(mm, a, 11);
    EXPECT(mm, ""); /* waits for every unload */
    mm_unload_done(mm, e, 12);
    EXPECT(mm, "LOAD B");
    assert_int_equal(b->state, MM_LOADING);

    mm_load_done(mm, b, false, MM_LOAD_ERR_RETRY, 13);
    EXPECT(mm, "FAIL B 500 x2");
    assert_int_equal(b->state, MM_UNLOADED);
    assert_int_equal(b->waiters, 0);
    assert_null(mm->current);
    assert_int_equal(r->state, MM_LOADED);
    assert_int_equal(r->in_flight, 1);

    /* a later request starts afresh (one more retry allowed) */
    assert_int_equal(mm_request_begin(mm, b, 14), MM_WAIT);
    EXPECT(mm, "LOAD B");
    mm_load_done(mm, b, false, MM_LOAD_ERR_RETRY, 15);
    EXPECT(mm, "LOAD B"); /* nothing idle left to evict: retried at once */
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 16);
    EXPECT(mm, "SERVE B 1");
}

/* A failure a retry cannot fix (an unusable file, refused arguments) fails the waiters at once
 * and evicts nothing: a request for a corrupt model used to unload every idle model, every
 * time. */
static void test_failed_load_final_evicts_nothing(void **state)
{
    (void)state;
    mm_t *mm = fresh(3, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_CPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_CPU);
    mm_model_t *e = add(mm, "E", MM_EMBEDDING, MM_DEV_CPU);
    mm_model_t *x = add(mm, "X", MM_LLM, MM_DEV_CPU);
    preload(mm, a, 1);
    preload(mm, b, 3);
    preload(mm, e, 5);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(mm_request_begin(mm, x, 10 + round * 10), MM_WAIT);
        assert_int_equal(mm_request_begin(mm, x, 11 + round * 10), MM_WAIT);
        EXPECT(mm, "LOAD X");
        mm_load_done(mm, x, false, MM_LOAD_ERR_FINAL, 12 + round * 10);
        EXPECT(mm, "FAIL X 500 x2");
        assert_int_equal(x->state, MM_UNLOADED);
        assert_int_equal(x->waiters, 0);
        assert_null(mm->current);
        assert_false(mm->drain_all);
        assert_int_equal(a->state, MM_LOADED);
        assert_int_equal(b->state, MM_LOADED);
        assert_int_equal(e->state, MM_LOADED);
    }
    /* an explicit load of it fails the same way, and the next load in the queue goes on */
    mm_model_t *c = add(mm, "C", MM_LLM, MM_DEV_CPU);
    mm_load(mm, x, 40);
    assert_int_equal(mm_request_begin(mm, c, 41), MM_WAIT);
    EXPECT(mm, "LOAD X");
    mm_load_done(mm, x, false, MM_LOAD_ERR_FINAL, 42);
    EXPECT(mm, "LOAD C");
}

static void test_failed_load_retry_succeeds(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    assert_int_equal(mm_request_begin(mm, b, 3), MM_WAIT);
    EXPECT(mm, "LOAD B");
    mm_load_done(mm, b, false, MM_LOAD_ERR_RETRY, 4);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 5);
    EXPECT(mm, "LOAD B");
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 6);
    EXPECT(mm, "SERVE B 1");
    assert_int_equal(b->in_flight, 1);
}

/* Busy models are not evicted by the nuclear policy: with nothing idle, the retry is at once. */
static void test_failed_load_spares_busy(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *e = add(mm, "E", MM_EMBEDDING, MM_DEV_GPU);
    mm_model_t *f = add(mm, "F", MM_EMBEDDING, MM_DEV_GPU);
    preload(mm, a, 1);
    preload(mm, e, 3);
    assert_int_equal(mm_request_begin(mm, a, 5), MM_SERVE_NOW); /* A busy */
    assert_int_equal(mm_request_begin(mm, f, 6), MM_WAIT);
    EXPECT(mm, "UNLOAD E");
    mm_unload_done(mm, e, 7);
    EXPECT(mm, "LOAD F");
    mm_load_done(mm, f, false, MM_LOAD_ERR_RETRY, 8);
    EXPECT(mm, "LOAD F"); /* A is busy: nothing to evict, retry at once */
    assert_int_equal(a->state, MM_LOADED);
    mm_load_done(mm, f, false, MM_LOAD_ERR_RETRY, 9);
    EXPECT(mm, "FAIL F 500");
    assert_int_equal(a->state, MM_LOADED);
}

/* The retry waits for every unload in progress, including one that was already under way
 * before the failure; requests arriving meanwhile share the outcome. */
static void test_failed_load_retry_waits_for_all_unloads(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *e = add(mm, "E", MM_EMBEDDING, MM_DEV_GPU);
    preload(mm, a, 1);
    preload(mm, e, 3);
    assert_int_equal(mm_unload(mm, a, 5), 0);
    EXPECT(mm, "UNLOAD A"); /* explicit unload, not finished yet */
    assert_int_equal(mm_request_begin(mm, b, 6), MM_WAIT);
    EXPECT(mm, ""); /* a slot is leaving: wait for it */
    mm_unload_done(mm, a, 7);
    EXPECT(mm, "LOAD B");
    mm_load(mm, a, 8); /* A queued behind B */
    EXPECT(mm, "");
    mm_load_done(mm, b, false, MM_LOAD_ERR_RETRY, 9);
    EXPECT(mm, "UNLOAD E");
    assert_int_equal(mm_request_begin(mm, b, 10), MM_WAIT); /* arrives during the retry */
    EXPECT(mm, "");
    assert_int_equal(b->waiters, 2);
    mm_unload_done(mm, e, 11);
    EXPECT(mm, "LOAD B");
    mm_load_done(mm, b, false, MM_LOAD_ERR_RETRY, 12);
    EXPECT(mm, "FAIL B 500 x2; LOAD A"); /* the queue moves on */
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 13);
    EXPECT(mm, "");
}

static void test_reload_while_loading(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    mm_reload(mm, a, 2); /* new options while the old ones load */
    EXPECT(mm, "");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 3);
    EXPECT(mm, "SERVE A 1"); /* the request still gets served first */
    mm_request_end(mm, a, 4);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 5);
    EXPECT(mm, "LOAD A");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 6);
    EXPECT(mm, "");
}

static void test_reload_while_unloading(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    assert_int_equal(mm_unload(mm, a, 3), 0);
    EXPECT(mm, "UNLOAD A");
    mm_reload(mm, a, 4);
    EXPECT(mm, "");
    mm_unload_done(mm, a, 5);
    EXPECT(mm, "LOAD A");
}

/* A busy model whose explicit unload is pending still counts as present: a load for its
 * type evicts an idle model rather than wait for it. */
static void test_unload_pending_model_counts_as_present(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    preload(mm, b, 3);
    assert_int_equal(mm_request_begin(mm, a, 5), MM_SERVE_NOW);
    assert_int_equal(mm_unload(mm, a, 6), 0);
    EXPECT(mm, "");
    assert_int_equal(mm_request_begin(mm, c, 7), MM_WAIT);
    EXPECT(mm, "UNLOAD B");
    mm_unload_done(mm, b, 8);
    EXPECT(mm, "LOAD C");
    mm_request_end(mm, a, 9);
    EXPECT(mm, "UNLOAD A");
}

static void test_file_missing_404_no_eviction_no_retry(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *e = add(mm, "E", MM_EMBEDDING, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_RERANKING, MM_DEV_GPU);
    preload(mm, a, 1);
    preload(mm, e, 3);
    assert_int_equal(mm_request_begin(mm, b, 5), MM_WAIT);
    assert_int_equal(mm_request_begin(mm, b, 5), MM_WAIT);
    EXPECT(mm, "LOAD B");
    assert_int_equal(mm_request_begin(mm, c, 6), MM_WAIT); /* queued behind B */
    EXPECT(mm, "");
    mm_load_done(mm, b, false, MM_LOAD_ERR_MISSING, 7);
    EXPECT(mm, "FAIL B 404 x2; LOAD C"); /* nothing evicted, no retry, next load goes */
    assert_int_equal(b->state, MM_UNLOADED);
    assert_int_equal(b->waiters, 0);
    assert_int_equal(a->state, MM_LOADED);
    assert_int_equal(e->state, MM_LOADED);
    assert_ptr_equal(mm->current, c);
    assert_false(mm->drain_all);
}

/* ------------------------------------------------------------------------------------------
 * NPU: one model at a time on the device, whatever its type
 * ---------------------------------------------------------------------------------------- */

static void test_npu_evicts_holder_of_other_type(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 2, 2);
    mm_model_t *n1 = add(mm, "N1", MM_LLM, MM_DEV_NPU);
    mm_model_t *g = add(mm, "G", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_EMBEDDING, MM_DEV_CPU);
    mm_model_t *n2 = add(mm, "N2", MM_EMBEDDING, MM_DEV_NPU);
    preload(mm, n1, 1);
    preload(mm, g, 3);
    preload(mm, c, 5);

    /* embedding has a free slot; N2 still evicts the NPU holder N1 (an llm) */
    assert_int_equal(mm_request_begin(mm, n2, 7), MM_WAIT);
    EXPECT(mm, "UNLOAD N1");
    assert_int_equal(n2->state, MM_UNLOADED);
    mm_unload_done(mm, n1, 8);
    EXPECT(mm, "LOAD N2");
    mm_load_done(mm, n2, true, MM_LOAD_ERR_RETRY, 9);
    EXPECT(mm, "SERVE N2 1");
    assert_int_equal(g->state, MM_LOADED); /* GPU/CPU models untouched */
    assert_int_equal(c->state, MM_LOADED);
    assert_int_equal(n1->state, MM_UNLOADED);
}

static void test_npu_evicts_holder_of_same_type_with_free_slot(void **state)
{
    (void)state;
    mm_t *mm = fresh(3, 1, 1);
    mm_model_t *n1 = add(mm, "N1", MM_LLM, MM_DEV_NPU);
    mm_model_t *n2 = add(mm, "N2", MM_LLM, MM_DEV_NPU | MM_DEV_CPU);
    mm_model_t *g = add(mm, "G", MM_LLM, MM_DEV_GPU);
    preload(mm, g, 1);
    preload(mm, n1, 3);
    assert_int_equal(mm_request_begin(mm, n2, 5), MM_WAIT);
    EXPECT(mm, "UNLOAD N1"); /* not G, although G is the LRU */
    mm_unload_done(mm, n1, 6);
    EXPECT(mm, "LOAD N2");
    assert_int_equal(g->state, MM_LOADED);
}

static void test_npu_waits_for_busy_holder(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 2, 2);
    mm_model_t *n1 = add(mm, "N1", MM_RERANKING, MM_DEV_NPU);
    mm_model_t *n2 = add(mm, "N2", MM_LLM, MM_DEV_NPU);
    preload(mm, n1, 1);
    assert_int_equal(mm_request_begin(mm, n1, 3), MM_SERVE_NOW);
    assert_int_equal(mm_request_begin(mm, n2, 4), MM_WAIT);
    EXPECT(mm, "");
    mm_request_end(mm, n1, 5);
    EXPECT(mm, "UNLOAD N1");
    mm_unload_done(mm, n1, 6);
    EXPECT(mm, "LOAD N2");
}

static void test_non_npu_load_ignores_npu_holder(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *n1 = add(mm, "N1", MM_LLM, MM_DEV_NPU);
    mm_model_t *g = add(mm, "G", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_EMBEDDING, MM_DEV_CPU);
    preload(mm, n1, 1);
    assert_int_equal(mm_request_begin(mm, g, 3), MM_WAIT);
    EXPECT(mm, "LOAD G"); /* free llm slot: N1 stays */
    mm_load_done(mm, g, true, MM_LOAD_ERR_RETRY, 4);
    EXPECT(mm, "SERVE G 1");
    assert_int_equal(mm_request_begin(mm, c, 5), MM_WAIT);
    EXPECT(mm, "LOAD C");
    assert_int_equal(n1->state, MM_LOADED);
}

/* The NPU holder leaving frees a slot of its type too: when the holder is busy and of the
 * same type, the load should wait for it rather than evict another model of that type as
 * well (after the holder is gone, the type has a free slot). */
static void test_npu_busy_holder_same_type_no_extra_eviction(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *y = add(mm, "Y", MM_LLM, MM_DEV_CPU);
    mm_model_t *n1 = add(mm, "N1", MM_LLM, MM_DEV_NPU);
    mm_model_t *n2 = add(mm, "N2", MM_LLM, MM_DEV_NPU);
    preload(mm, y, 1);
    preload(mm, n1, 3);
    assert_int_equal(mm_request_begin(mm, n1, 5), MM_SERVE_NOW); /* N1 busy */
    assert_int_equal(mm_request_begin(mm, n2, 6), MM_WAIT);
    EXPECT(mm, ""); /* wait for N1; Y need not go */
    mm_request_end(mm, n1, 7);
    EXPECT(mm, "UNLOAD N1");
    mm_unload_done(mm, n1, 8);
    EXPECT(mm, "LOAD N2");
    assert_int_equal(y->state, MM_LOADED);
}

/* ------------------------------------------------------------------------------------------
 * Explicit unload, reload, load
 * ---------------------------------------------------------------------------------------- */

static void test_unload_idle_immediately(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    assert_int_equal(mm_unload(mm, a, 3), 0);
    EXPECT(mm, "UNLOAD A");
    assert_int_equal(a->state, MM_UNLOADING);
    assert_int_equal(mm_count_loaded(mm, MM_LLM), 1);
    mm_unload_done(mm, a, 4);
    EXPECT(mm, ""); /* no reload */
    assert_int_equal(a->state, MM_UNLOADED);
    assert_int_equal(mm_count_loaded(mm, MM_LLM), 0);
    assert_int_equal(mm->qlen, 0);
}

/* keep-alive (Ollama's keep_alive): idle that long after the last use, the model is unloaded */
static void test_keep_alive_expires_idle(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    preload(mm, b, 3);
    assert_int_equal(mm_deadline(mm), UINT64_MAX); /* none set: no expiry */
    mm_set_keep_alive(mm, a, 100, 10);
    EXPECT(mm, "");
    assert_int_equal(mm_deadline(mm), 10 + 100); /* setting it is a use */
    /* a request in flight holds it; its end restarts the clock */
    assert_int_equal(mm_request_begin(mm, a, 50), MM_SERVE_NOW);
    assert_int_equal(mm_deadline(mm), UINT64_MAX);
    mm_tick(mm, 500);
    EXPECT(mm, "");
    mm_request_end(mm, a, 600);
    assert_int_equal(mm_deadline(mm), 700);
    /* requests queued outside mm hold it too */
    mm_set_pending(mm, a, 1, 650);
    assert_int_equal(mm_deadline(mm), UINT64_MAX);
    mm_set_pending(mm, a, 0, 660);
    mm_tick(mm, 699);
    EXPECT(mm, "");
    mm_tick(mm, 700);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 701);
    EXPECT(mm, "");
    assert_int_equal(b->state, MM_LOADED); /* the other one has none */
    /* the unload cleared it: loaded again, A stays */
    assert_int_equal(a->keep_alive, 0);
    assert_int_equal(mm_request_begin(mm, a, 800), MM_WAIT);
    EXPECT(mm, "LOAD A");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 801);
    EXPECT(mm, "SERVE A 1");
    mm_request_end(mm, a, 802);
    assert_int_equal(mm_deadline(mm), UINT64_MAX);
    mm_tick(mm, 100000);
    EXPECT(mm, "");
    /* set, then cleared (keep_alive -1): no expiry */
    mm_set_keep_alive(mm, b, 5, 900);
    mm_set_keep_alive(mm, b, 0, 901);
    mm_tick(mm, 100000);
    EXPECT(mm, "");
    /* long idle, then set: its clock starts when it is set */
    mm_set_keep_alive(mm, b, 5, 100001);
    EXPECT(mm, "");
    assert_int_equal(mm_deadline(mm), 100006);
    mm_tick(mm, 100006);
    EXPECT(mm, "UNLOAD B");
}

static void test_unload_busy_waits_for_in_flight(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    assert_int_equal(mm_request_begin(mm, a, 3), MM_SERVE_NOW);
    assert_int_equal(mm_request_begin(mm, a, 3), MM_SERVE_NOW);
    assert_int_equal(mm_unload(mm, a, 4), 0);
    EXPECT(mm, "");
    assert_true(a->unload_pending);
    mm_request_end(mm, a, 5);
    EXPECT(mm, "");
    mm_request_end(mm, a, 6);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 7);
    EXPECT(mm, "");
    assert_int_equal(a->state, MM_UNLOADED);
}

static void test_unload_not_loaded_enoent(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    assert_int_equal(mm_unload(mm, a, 1), -ENOENT);
    EXPECT(mm, "");
    preload(mm, a, 2);
    assert_int_equal(mm_unload(mm, a, 4), 0);
    EXPECT(mm, "UNLOAD A");
    assert_int_equal(mm_unload(mm, a, 5), -ENOENT); /* already going */
    EXPECT(mm, "");
    mm_unload_done(mm, a, 6);
    assert_int_equal(mm_unload(mm, a, 7), -ENOENT);
    EXPECT(mm, "");
}

static void test_unload_while_loading(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    assert_int_equal(mm_unload(mm, a, 2), 0);
    EXPECT(mm, "");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 3);
    EXPECT(mm, "SERVE A 1"); /* the waiting request is served first */
    mm_request_end(mm, a, 4);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 5);
    EXPECT(mm, "");
}

/* An unload of a model that is only queued drops the load and fails its waiters. */
static void test_unload_queued_fails_waiters(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    assert_int_equal(mm_request_begin(mm, a, 1), MM_WAIT);
    assert_int_equal(mm_request_begin(mm, b, 1), MM_WAIT);
    EXPECT(mm, "LOAD A");
    assert_int_equal(mm_unload(mm, b, 2), 0);
    EXPECT(mm, "FAIL B 503");
    assert_false(b->queued);
    assert_int_equal(mm->qlen, 0);
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 3);
    EXPECT(mm, "SERVE A 1");
}

/* Requests arriving during a pending unload wait, and reload the model afterwards. */
static void test_requests_during_pending_unload_reload(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    assert_int_equal(mm_request_begin(mm, a, 3), MM_SERVE_NOW);
    assert_int_equal(mm_unload(mm, a, 4), 0);
    EXPECT(mm, "");
    assert_int_equal(mm_request_begin(mm, a, 5), MM_WAIT);
    assert_int_equal(mm_request_begin(mm, a, 6), MM_WAIT);
    EXPECT(mm, "");
    assert_int_equal(a->waiters, 2);
    assert_int_equal(a->in_flight, 1);
    mm_request_end(mm, a, 7);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 8);
    EXPECT(mm, "LOAD A");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 9);
    EXPECT(mm, "SERVE A 2");
    assert_false(a->unload_pending);
}

/* Requests for a model that is being unloaded (evicted) wait and bring it back. */
static void test_request_during_unloading_reloads(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    assert_int_equal(mm_request_begin(mm, b, 3), MM_WAIT);
    EXPECT(mm, "UNLOAD A");
    assert_int_equal(mm_request_begin(mm, a, 4), MM_WAIT);
    EXPECT(mm, "");
    mm_unload_done(mm, a, 5);
    EXPECT(mm, "LOAD B"); /* A is queued behind B */
    assert_true(a->queued);
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 6);
    EXPECT(mm, "SERVE B 1"); /* A waits for B's request */
    mm_request_end(mm, b, 7);
    EXPECT(mm, "UNLOAD B");
    mm_unload_done(mm, b, 8);
    EXPECT(mm, "LOAD A");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 9);
    EXPECT(mm, "SERVE A 1");
}

static void test_reload_loaded_unloads_then_loads(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    mm_reload(mm, a, 3);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 4);
    EXPECT(mm, "LOAD A");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 5);
    EXPECT(mm, "");
    assert_int_equal(a->state, MM_LOADED);
    assert_false(a->reload);
    assert_false(a->unload_pending);
}

static void test_reload_busy_waits_for_in_flight(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    assert_int_equal(mm_request_begin(mm, a, 3), MM_SERVE_NOW);
    mm_reload(mm, a, 4);
    EXPECT(mm, "");
    assert_int_equal(mm_request_begin(mm, a, 5), MM_WAIT); /* waits for the reload */
    mm_request_end(mm, a, 6);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 7);
    EXPECT(mm, "LOAD A");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 8);
    EXPECT(mm, "SERVE A 1");
}

static void test_reload_unloaded_loads(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_reload(mm, a, 1);
    EXPECT(mm, "LOAD A");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 2);
    EXPECT(mm, "");
}

static void test_unload_cancels_pending_reload(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    assert_int_equal(mm_request_begin(mm, a, 3), MM_SERVE_NOW);
    mm_reload(mm, a, 4);
    assert_int_equal(mm_unload(mm, a, 5), 0);
    mm_request_end(mm, a, 6);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 7);
    EXPECT(mm, ""); /* the unload won: no reload */
}

static void test_load_loaded_is_noop(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    mm_load(mm, a, 3);
    EXPECT(mm, "");
    assert_int_equal(a->state, MM_LOADED);
    assert_int_equal(mm->qlen, 0);
}

static void test_load_evicts_like_autoload(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    preload(mm, a, 1);
    mm_load(mm, b, 3);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 4);
    EXPECT(mm, "LOAD B");
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 5);
    EXPECT(mm, ""); /* no waiters: nothing to serve */
}

static void test_load_queued_is_noop(void **state)
{
    (void)state;
    mm_t *mm = fresh(2, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_load(mm, a, 1);
    EXPECT(mm, "LOAD A");
    mm_load(mm, b, 2);
    mm_load(mm, b, 3);
    EXPECT(mm, "");
    assert_int_equal(mm->qlen, 1);
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 4);
    EXPECT(mm, "LOAD B");
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 5);
    EXPECT(mm, "");
}

/* "Queue a load unless loaded, loading or queued already": a second mm_load while the model
 * is loading must be a no-op, and must not make the model come back after a later eviction. */
static void test_load_while_loading_is_noop(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_load(mm, a, 1);
    EXPECT(mm, "LOAD A");
    mm_load(mm, a, 2); /* duplicate API call while loading */
    EXPECT(mm, "");
    mm_load_done(mm, a, true, MM_LOAD_ERR_RETRY, 3);
    EXPECT(mm, "");

    assert_int_equal(mm_request_begin(mm, b, 4), MM_WAIT);
    EXPECT(mm, "UNLOAD A");
    mm_unload_done(mm, a, 5);
    EXPECT(mm, "LOAD B");
    assert_false(a->queued); /* an evicted model is not reloaded on its own */
    mm_load_done(mm, b, true, MM_LOAD_ERR_RETRY, 6);
    EXPECT(mm, "SERVE B 1");
    mm_request_end(mm, b, 7);
    EXPECT(mm, ""); /* B must not be evicted to bring A back */
    assert_int_equal(a->state, MM_UNLOADED);
    assert_int_equal(b->state, MM_LOADED);
}

/* ------------------------------------------------------------------------------------------
 * Registry, init, counters, names
 * ---------------------------------------------------------------------------------------- */

static void test_count_loaded(void **state)
{
    (void)state;
    mm_t *mm = fresh(3, 1, 1);
    mm_model_t *a = add(mm, "A", MM_LLM, MM_DEV_GPU);
    mm_model_t *b = add(mm, "B", MM_LLM, MM_DEV_GPU);
    mm_model_t *c = add(mm, "C", MM_LLM, MM_DEV_GPU);
    mm_model_t *e = add(mm, "E", MM_EMBEDDING, MM_DEV_GPU);
    assert_int_equal(mm_count_loaded(mm, MM_LLM), 0);
    preload(mm, a, 1);
    preload(mm, b, 3);
    mm_load(mm, c, 5);
    EXPECT(mm, "LOAD C");
    assert_int_equal(mm_count_loaded(mm, MM_LLM), 3); /* LOADED + LOADING */
    assert_int_equal(mm_unload(mm, a, 6), 0);
    EXPECT(mm, "UNLOAD A");
    assert_int_equal(mm_count_loaded(mm, MM_LLM), 3); /* + UNLOADING */
    mm_unload_done(mm, a, 7);
    assert_int_equal(mm_count_loaded(mm, MM_LLM), 2);
    assert_int_equal(mm_count_loaded(mm, MM_EMBEDDING), 0);
    assert_int_equal(mm_count_loaded(mm, MM_RERANKING), 0);
    (void)e;
}

static void test_add_and_find(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    mm_model_t *a = mm_add(mm, "A", MM_EMBEDDING, 0);
    assert_non_null(a);
    assert_string_equal(a->name, "A");
    assert_int_equal(a->type, MM_EMBEDDING);
    assert_int_equal(a->device, MM_DEV_CPU); /* default device */
    assert_int_equal(a->state, MM_UNLOADED);
    assert_int_equal(a->in_flight, 0);
    assert_int_equal(a->waiters, 0);
    assert_false(a->queued);
    assert_null(mm_add(mm, "A", MM_LLM, MM_DEV_GPU)); /* duplicate name */
    assert_int_equal(mm->n_models, 1);
    assert_ptr_equal(mm_find(mm, "A"), a);
    assert_null(mm_find(mm, "a"));
    assert_null(mm_find(mm, "B"));
    mm_model_t *n = mm_add(mm, "N", MM_RERANKING, MM_DEV_NPU);
    assert_non_null(n);
    assert_int_equal(n->device, MM_DEV_NPU);
    assert_null(mm_add(mm, "T", (mm_type_t)MM_N_TYPES, MM_DEV_CPU)); /* bad type */
}

static void test_add_name_length(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    char name[MM_NAME_MAX + 1];
    memset(name, 'x', MM_NAME_MAX);
    name[MM_NAME_MAX] = '\0'; /* 128 chars: too long */
    assert_null(mm_add(mm, name, MM_LLM, MM_DEV_CPU));
    assert_int_equal(mm->n_models, 0);
    name[MM_NAME_MAX - 1] = '\0'; /* 127 chars: fits */
    mm_model_t *m = mm_add(mm, name, MM_LLM, MM_DEV_CPU);
    assert_non_null(m);
    assert_string_equal(m->name, name);
    assert_ptr_equal(mm_find(mm, name), m);
}

static void test_add_full(void **state)
{
    (void)state;
    mm_t *mm = fresh(1, 1, 1);
    char name[32];
    for (int i = 0; i < MM_MAX_MODELS; i++) {
        snprintf(name, sizeof name, "m%d", i);
        assert_non_null(mm_add(mm, name, (mm_type_t)(i % MM_N_TYPES), MM_DEV_CPU));
    }
    assert_null(mm_add(mm, "one-too-many", MM_LLM, MM_DEV_CPU));
    assert_int_equal(mm->n_models, MM_MAX_MODELS);
}

static void test_init_default_max(void **state)
{
    (void)state;
    mm_t *mm = &g_mm;
    mm_init(mm, NULL);
    assert_int_equal(mm->max_loaded[MM_LLM], 1);
    assert_int_equal(mm->max_loaded[MM_EMBEDDING], 1);
    assert_int_equal(mm->max_loaded[MM_RERANKING], 1);
    assert_int_equal(mm->n_models, 0);
    assert_int_equal(mm->qlen, 0);
    assert_null(mm->current);
    mm_action_t a;
    assert_false(mm_next_action(mm, &a));

    const unsigned partial[MM_N_TYPES] = {0, 3, 0}; /* zeros padded to 1 */
    mm_init(mm, partial);
    assert_int_equal(mm->max_loaded[MM_LLM], 1);
    assert_int_equal(mm->max_loaded[MM_EMBEDDING], 3);
    assert_int_equal(mm->max_loaded[MM_RERANKING], 1);

    /* behaviour with the defaults: a second llm evicts the first */
    mm_init(mm, NULL);
    mm_model_t *x = add(mm, "X", MM_LLM, MM_DEV_GPU);
    mm_model_t *y = add(mm, "Y", MM_LLM, MM_DEV_GPU);
    preload(mm, x, 1);
    mm_load(mm, y, 3);
    EXPECT(mm, "UNLOAD X");
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(mm_type_name(MM_LLM), "llm");
    assert_string_equal(mm_type_name(MM_EMBEDDING), "embedding");
    assert_string_equal(mm_type_name(MM_RERANKING), "reranking");
    assert_string_equal(mm_state_name(MM_UNLOADED), "unloaded");
    assert_string_equal(mm_state_name(MM_LOADING), "loading");
    assert_string_equal(mm_state_name(MM_LOADED), "loaded");
    assert_string_equal(mm_state_name(MM_UNLOADING), "unloading");
}

/* ------------------------------------------------------------------------------------------
 * Randomized property test
 * ---------------------------------------------------------------------------------------- */

#define RN 5
#define TRACE 40

typedef struct {
    mm_t *mm;
    mm_model_t *m[RN];
    unsigned waiting[RN];  /* requests the driver sees waiting */
    unsigned inflight[RN]; /* requests the driver is serving */
    bool unloading[RN];    /* UNLOAD issued, unload_done not yet sent */
    mm_model_t *loading;   /* LOAD issued, load_done not yet sent */
    /* "no spontaneous loads": someone asked for the model since its last LOAD */
    bool check_asked;
    bool req_ask[RN]; /* a request waited for it */
    bool api_ask[RN]; /* mm_load / mm_reload that should bring it (back) */
    bool retry[RN];   /* its load failed once: one retry is due */
    uint64_t now;
    unsigned n_load, n_unload, n_serve, n_fail, n_fail404, n_fail500, n_fail503, n_npu_load;
    unsigned n_served_reqs;
    char trace[TRACE][MM_NAME_MAX + 160]; /* the last events and actions, printed on failure */
    unsigned n_trace;
} rdrv_t;

static uint64_t rng_state;

static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static unsigned rnd_below(unsigned n)
{
    return rnd() % n;
}

static void tr(rdrv_t *d, const char *what, const mm_model_t *m)
{
    snprintf(d->trace[d->n_trace++ % TRACE], sizeof d->trace[0], "t=%llu %s %s -> %s%s%s",
             (unsigned long long)d->now, what, m->name, mm_state_name(m->state),
             m->queued ? " queued" : "", d->mm->current == m ? " current" : "");
}

static void dump_trace(const rdrv_t *d)
{
    unsigned from = d->n_trace > TRACE ? d->n_trace - TRACE : 0;
    print_error("last events:\n");
    for (unsigned k = from; k < d->n_trace; k++)
        print_error("  %s\n", d->trace[k % TRACE]);
}

#define RFAIL(d, ...)                                                                              \
    do {                                                                                           \
        dump_trace(d);                                                                             \
        fail_msg(__VA_ARGS__);                                                                     \
    } while (0)

static int idx_of(const rdrv_t *d, const mm_model_t *m)
{
    for (int i = 0; i < RN; i++)
        if (d->m[i] == m) return i;
    fail_msg("action for an unknown model");
    return -1;
}

static unsigned non_unloaded(const rdrv_t *d, mm_type_t type, const mm_model_t *except)
{
    unsigned n = 0;
    for (int i = 0; i < RN; i++)
        if (d->m[i] != except && d->m[i]->type == type && d->m[i]->state != MM_UNLOADED) n++;
    return n;
}

/* Execute every action the policy hands out, checking each one. */
static void r_actions(rdrv_t *d)
{
    mm_action_t a;
    while (mm_next_action(d->mm, &a)) {
        int i = idx_of(d, a.model);
        mm_model_t *m = a.model;
        char what[MM_NAME_MAX + 64];
        render(&a, what, sizeof what);
        snprintf(d->trace[d->n_trace++ % TRACE], sizeof d->trace[0], "t=%llu   action %s",
                 (unsigned long long)d->now, what);
        switch (a.kind) {
        case MM_ACT_LOAD: {
            if (d->loading) /* serialized */
                RFAIL(d, "LOAD %s while %s is loading", m->name, d->loading->name);
            if (m->state != MM_LOADING)
                RFAIL(d, "LOAD %s in state %s", m->name, mm_state_name(m->state));
            unsigned others = non_unloaded(d, m->type, m);
            if (others >= d->mm->max_loaded[m->type])
                RFAIL(d, "LOAD %s with %u other %s models present (max %u)", m->name, others,
                      mm_type_name(m->type), d->mm->max_loaded[m->type]);
            if (m->device & MM_DEV_NPU) {
                d->n_npu_load++;
                for (int j = 0; j < RN; j++)
                    if (j != i && (d->m[j]->device & MM_DEV_NPU) && d->m[j]->state != MM_UNLOADED)
                        RFAIL(d, "LOAD %s while NPU holds %s", m->name, d->m[j]->name);
            }
            if (d->retry[i]) {
                d->retry[i] = false;
            } else {
                if (d->check_asked && !d->req_ask[i] && !d->api_ask[i])
                    RFAIL(d, "LOAD %s that nobody asked for since its last load", m->name);
                d->req_ask[i] = d->api_ask[i] = false;
            }
            d->loading = m;
            d->n_load++;
            break;
        }
        case MM_ACT_UNLOAD:
            if (m->state != MM_UNLOADING)
                RFAIL(d, "UNLOAD %s in state %s", m->name, mm_state_name(m->state));
            if (d->inflight[i] || m->in_flight)
                RFAIL(d, "UNLOAD %s with %u requests in flight", m->name, d->inflight[i]);
            if (d->unloading[i]) RFAIL(d, "UNLOAD %s twice", m->name);
            d->unloading[i] = true;
            d->n_unload++;
            break;
        case MM_ACT_SERVE:
            if (m->state != MM_LOADED)
                RFAIL(d, "SERVE %s in state %s", m->name, mm_state_name(m->state));
            if (a.count == 0 || a.count > d->waiting[i])
                RFAIL(d, "SERVE %s %u with %u waiting", m->name, a.count, d->waiting[i]);
            d->waiting[i] -= a.count;
            d->inflight[i] += a.count;
            d->req_ask[i] = false;
            d->n_serve++;
            d->n_served_reqs += a.count;
            break;
        case MM_ACT_FAIL:
            if (a.count == 0 || a.count > d->waiting[i])
                RFAIL(d, "FAIL %s %u with %u waiting", m->name, a.count, d->waiting[i]);
            if (a.status != 404 && a.status != 500 && a.status != 503)
                RFAIL(d, "FAIL %s with status %d", m->name, a.status);
            d->waiting[i] -= a.count;
            d->req_ask[i] = false;
            d->n_fail++;
            if (a.status == 404)
                d->n_fail404++;
            else if (a.status == 500)
                d->n_fail500++;
            else
                d->n_fail503++;
            break;
        default:
            RFAIL(d, "bad action kind %d", (int)a.kind);
        }
    }
}

static void r_check(rdrv_t *d)
{
    mm_t *mm = d->mm;
    unsigned loading = 0;
    for (int i = 0; i < RN; i++) {
        mm_model_t *m = d->m[i];
        if (m->in_flight != d->inflight[i])
            RFAIL(d, "%s: in_flight %u, driver %u", m->name, m->in_flight, d->inflight[i]);
        if (m->waiters != d->waiting[i])
            RFAIL(d, "%s: waiters %u, driver %u", m->name, m->waiters, d->waiting[i]);
        if ((m->state == MM_LOADING) != (d->loading == m))
            RFAIL(d, "%s: state %s, driver loading %s", m->name, mm_state_name(m->state),
                  d->loading ? d->loading->name : "-");
        if ((m->state == MM_UNLOADING) != d->unloading[i])
            RFAIL(d, "%s: state %s, driver unloading %d", m->name, mm_state_name(m->state),
                  (int)d->unloading[i]);
        if (m->state == MM_LOADING) loading++;
        if (m->in_flight && m->state != MM_LOADED)
            RFAIL(d, "%s: %u in flight in state %s", m->name, m->in_flight,
                  mm_state_name(m->state));
        /* a waiting request has a way forward */
        if (m->waiters) {
            bool way = m->state == MM_LOADING || m->state == MM_UNLOADING || m->queued ||
                       mm->current == m || (m->state == MM_LOADED && m->unload_pending);
            if (!way)
                RFAIL(d, "%s: %u waiters stranded (state %s)", m->name, m->waiters,
                      mm_state_name(m->state));
        }
    }
    if (loading > 1) RFAIL(d, "%u models loading at once", loading);
    for (int t = 0; t < MM_N_TYPES; t++)
        if (non_unloaded(d, (mm_type_t)t, NULL) > mm->max_loaded[t])
            RFAIL(d, "type %s over its slots", mm_type_name((mm_type_t)t));
    unsigned npu = 0;
    for (int i = 0; i < RN; i++)
        if ((d->m[i]->device & MM_DEV_NPU) && d->m[i]->state != MM_UNLOADED) npu++;
    if (npu > 1) RFAIL(d, "%u models on the NPU", npu);
}

static int pick(const rdrv_t *d, int kind)
{
    int cand[RN], n = 0;
    for (int i = 0; i < RN; i++) {
        bool ok = kind == 0 ? d->inflight[i] > 0 : kind == 1 ? d->waiting[i] > 0 : d->unloading[i];
        if (ok) cand[n++] = i;
    }
    return n ? cand[rnd_below((unsigned)n)] : -1;
}

static void r_load_done(rdrv_t *d, bool ok, bool missing)
{
    mm_model_t *l = d->loading;
    int i = idx_of(d, l);
    unsigned attempt = l->attempt;
    d->loading = NULL;
    mm_load_done(d->mm, l, ok, missing, d->now);
    tr(d, ok ? "load_done ok" : missing ? "load_done missing" : "load_done fail", l);
    if (!ok && !missing && attempt == 0) d->retry[i] = true;
    if (!ok && d->mm->current != l) /* final failure: no reload either */
        d->req_ask[i] = d->api_ask[i] = false;
}

static void r_event(rdrv_t *d)
{
    mm_t *mm = d->mm;
    d->now++;
    unsigned r = rnd_below(100);
    int i = (int)rnd_below(RN);
    mm_model_t *m = d->m[i];
    if (r < 25) {
        if (mm_request_begin(mm, m, d->now) == MM_SERVE_NOW) {
            tr(d, "request SERVE_NOW", m);
            if (m->state != MM_LOADED)
                RFAIL(d, "SERVE_NOW for %s in state %s", m->name, mm_state_name(m->state));
            d->inflight[i]++;
        } else {
            tr(d, "request WAIT", m);
            d->waiting[i]++;
            d->req_ask[i] = true;
        }
    } else if (r < 55) {
        int j = pick(d, 0);
        if (j >= 0) {
            d->inflight[j]--;
            mm_request_end(mm, d->m[j], d->now);
            tr(d, "request_end", d->m[j]);
        }
    } else if (r < 70) {
        if (d->loading) {
            unsigned o = rnd_below(100);
            r_load_done(d, o < 85, o >= 95);
        }
    } else if (r < 85) {
        int j = pick(d, 2);
        if (j >= 0) {
            d->unloading[j] = false;
            mm_unload_done(mm, d->m[j], d->now);
            tr(d, "unload_done", d->m[j]);
        }
    } else if (r < 89) {
        int j = pick(d, 1);
        if (j >= 0) {
            d->waiting[j]--;
            mm_request_cancel(mm, d->m[j]);
            tr(d, "cancel", d->m[j]);
        }
    } else if (r < 93) {
        /* spec: queue a load unless loaded, loading or queued already; an unload in
         * progress or pending means "come back afterwards" */
        if (m->state == MM_UNLOADED || m->state == MM_UNLOADING || m->unload_pending)
            d->api_ask[i] = true;
        mm_load(mm, m, d->now);
        tr(d, "mm_load", m);
    } else if (r < 97) {
        bool queued = m->queued && m->state == MM_UNLOADED;
        bool expect_ok = m->state == MM_LOADED || m->state == MM_LOADING || queued;
        if (queued) d->req_ask[i] = false;
        if (queued || m->state != MM_UNLOADED) d->api_ask[i] = false;
        int rc = mm_unload(mm, m, d->now);
        tr(d, rc == 0 ? "mm_unload ok" : "mm_unload ENOENT", m);
        if (rc != (expect_ok ? 0 : -ENOENT)) RFAIL(d, "mm_unload(%s) = %d", m->name, rc);
    } else {
        d->api_ask[i] = true;
        mm_reload(mm, m, d->now);
        tr(d, "mm_reload", m);
    }
    r_actions(d);
    r_check(d);
}

/* End every request and complete every pending load/unload until nothing moves. */
static void r_quiesce(rdrv_t *d)
{
    for (int round = 0; round < 10000; round++) {
        bool moved = false;
        for (int i = 0; i < RN; i++) {
            while (d->inflight[i]) {
                d->inflight[i]--;
                d->now++;
                mm_request_end(d->mm, d->m[i], d->now);
                tr(d, "request_end", d->m[i]);
                r_actions(d);
                r_check(d);
                moved = true;
            }
        }
        if (d->loading) {
            d->now++;
            r_load_done(d, true, false);
            r_actions(d);
            r_check(d);
            moved = true;
        }
        for (int i = 0; i < RN; i++) {
            if (d->unloading[i]) {
                d->unloading[i] = false;
                d->now++;
                mm_unload_done(d->mm, d->m[i], d->now);
                tr(d, "unload_done", d->m[i]);
                r_actions(d);
                r_check(d);
                moved = true;
            }
        }
        if (!moved) break;
    }
    for (int i = 0; i < RN; i++) {
        mm_model_t *m = d->m[i];
        if (d->waiting[i] || m->waiters)
            RFAIL(d, "%s: %u requests never served nor failed", m->name, d->waiting[i]);
        assert_int_equal(d->inflight[i], 0);
        assert_false(d->unloading[i]);
        assert_false(m->queued);
        assert_int_equal(m->in_flight, 0);
        assert_true(m->state == MM_LOADED || m->state == MM_UNLOADED);
        if (m->state == MM_LOADED) assert_false(m->unload_pending);
    }
    assert_null(d->loading);
    assert_null(d->mm->current);
    assert_int_equal(d->mm->qlen, 0);
    mm_action_t a;
    assert_false(mm_next_action(d->mm, &a));
}

static void run_random(uint64_t seed, unsigned events, const unsigned max[MM_N_TYPES],
                       bool check_asked)
{
    static rdrv_t d;
    memset(&d, 0, sizeof d);
    d.mm = &g_mm;
    d.check_asked = check_asked;
    mm_init(d.mm, max);
    d.m[0] = add(d.mm, "A", MM_LLM, MM_DEV_GPU);
    d.m[1] = add(d.mm, "B", MM_LLM, MM_DEV_CPU);
    d.m[2] = add(d.mm, "C", MM_EMBEDDING, MM_DEV_CPU);
    d.m[3] = add(d.mm, "D", MM_RERANKING, MM_DEV_NPU);
    d.m[4] = add(d.mm, "E", MM_LLM, MM_DEV_NPU);
    rng_state = seed;
    for (unsigned k = 0; k < events; k++)
        r_event(&d);
    r_quiesce(&d);
    if (events >= 10000)
        print_message("seed %016llx: %u loads (%u npu), %u unloads, %u serves (%u requests), "
                      "%u fails (404: %u, 500: %u, 503: %u)\n",
                      (unsigned long long)seed, d.n_load, d.n_npu_load, d.n_unload, d.n_serve,
                      d.n_served_reqs, d.n_fail, d.n_fail404, d.n_fail500, d.n_fail503);
    /* the run was not vacuous */
    assert_true(d.n_load > events / 50);
    assert_true(d.n_unload > events / 100);
    assert_true(d.n_serve > events / 50);
    assert_true(d.n_npu_load > 0);
    if (events >= 10000) { /* rare paths: only required of the long runs */
        assert_true(d.n_fail404 > 0);
        assert_true(d.n_fail500 > 0);
        assert_true(d.n_fail503 > 0);
    }
}

static const unsigned m211[MM_N_TYPES] = {2, 1, 1};
static const unsigned m111[MM_N_TYPES] = {1, 1, 1};
static const unsigned m321[MM_N_TYPES] = {3, 2, 1};

/* Safety and liveness invariants after every event (see r_actions, r_check, r_quiesce). */
static void test_random_property(void **state)
{
    (void)state;
    run_random(0x9E3779B97F4A7C15ull, 10000, m211, false);
    run_random(0x0123456789ABCDEFull, 10000, m111, false);
    run_random(0xDEADBEEFCAFEF00Dull, 10000, m321, false);
    for (uint64_t s = 1; s <= 20; s++)
        run_random(s * 0x2545F4914F6CDD1Dull, 2000, m211, false);
}

/* Same runs, also checking that no model is loaded without anyone asking for it (a waiting
 * request, mm_load, mm_reload, or the one retry after a failure). */
static void test_random_no_spontaneous_loads(void **state)
{
    (void)state;
    run_random(0x9E3779B97F4A7C15ull, 10000, m211, true);
    run_random(0x0123456789ABCDEFull, 10000, m111, true);
    run_random(0xDEADBEEFCAFEF00Dull, 10000, m321, true);
    for (uint64_t s = 1; s <= 20; s++)
        run_random(s * 0x2545F4914F6CDD1Dull, 2000, m211, true);
}

/* Seed 003's device classes on llama.cpp's backends (table), and their names */
static void test_device_classes(void **state)
{
    (void)state;
    static const struct {
        const char *backend;
        unsigned want;
    } rows[] = {
        {"CUDA", MM_DEV_GPU}, {"ROCm", MM_DEV_GPU}, {"Vulkan", MM_DEV_GPU}, {"Metal", MM_DEV_GPU},
        {"SYCL", MM_DEV_GPU}, {"CPU", MM_DEV_CPU},  {"cpu", MM_DEV_CPU},    {"", MM_DEV_CPU},
        {NULL, MM_DEV_CPU},   {"CANN", MM_DEV_NPU}, {"HTP", MM_DEV_NPU},    {"zdnn", MM_DEV_NPU},
        {"NPU", MM_DEV_NPU},  {"NPUx", MM_DEV_NPU},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (mm_device_class(rows[i].backend) != rows[i].want)
            fail_msg("row %zu: %s", i, rows[i].backend ? rows[i].backend : "NULL");
    char b[32];
    assert_string_equal(mm_device_name(MM_DEV_CPU, b, sizeof b), "cpu");
    assert_string_equal(mm_device_name(MM_DEV_GPU, b, sizeof b), "gpu");
    assert_string_equal(mm_device_name(MM_DEV_GPU | MM_DEV_NPU, b, sizeof b), "gpu|npu");
    assert_string_equal(mm_device_name(0, b, sizeof b), "cpu");
    char tiny[4];
    mm_device_name(MM_DEV_GPU | MM_DEV_NPU, tiny, sizeof tiny); /* cut, never overrun */
    assert_int_equal(strlen(tiny), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_loaded_model_serves_now),
        cmocka_unit_test(test_request_unloaded_model_waits_and_loads),
        cmocka_unit_test(test_concurrent_autoloads_same_model_one_load),
        cmocka_unit_test(test_concurrent_autoloads_while_queued_one_load),
        cmocka_unit_test(test_request_cancel_decrements_waiters),
        cmocka_unit_test(test_request_cancel_all_waiters_no_serve),
        cmocka_unit_test(test_request_end_without_in_flight_does_not_underflow),
        cmocka_unit_test(test_free_slot_loads_without_evicting),
        cmocka_unit_test(test_full_type_evicts_lru),
        cmocka_unit_test(test_lru_tie_broken_by_name),
        cmocka_unit_test(test_last_use_updated_on_every_access),
        cmocka_unit_test(test_lru_flips_on_request_end),
        cmocka_unit_test(test_lru_without_flip_control),
        cmocka_unit_test(test_lru_load_end_counts_as_access),
        cmocka_unit_test(test_eviction_only_within_type),
        cmocka_unit_test(test_busy_model_never_evicted),
        cmocka_unit_test(test_long_stream_never_evicted),
        cmocka_unit_test(test_idle_preferred_over_busy_lru),
        cmocka_unit_test(test_loads_serialized),
        cmocka_unit_test(test_stale_load_done_ignored),
        cmocka_unit_test(test_eviction_choice_at_dequeue),
        cmocka_unit_test(test_waiting_load_takes_first_idle),
        cmocka_unit_test(test_autoload_serves_before_eviction),
        cmocka_unit_test(test_failed_load_nuclear_then_500),
        cmocka_unit_test(test_failed_load_retry_succeeds),
        cmocka_unit_test(test_failed_load_spares_busy),
        cmocka_unit_test(test_failed_load_final_evicts_nothing),
        cmocka_unit_test(test_failed_load_retry_waits_for_all_unloads),
        cmocka_unit_test(test_file_missing_404_no_eviction_no_retry),
        cmocka_unit_test(test_npu_evicts_holder_of_other_type),
        cmocka_unit_test(test_npu_evicts_holder_of_same_type_with_free_slot),
        cmocka_unit_test(test_npu_waits_for_busy_holder),
        cmocka_unit_test(test_non_npu_load_ignores_npu_holder),
        cmocka_unit_test(test_npu_busy_holder_same_type_no_extra_eviction),
        cmocka_unit_test(test_unload_idle_immediately),
        cmocka_unit_test(test_keep_alive_expires_idle),
        cmocka_unit_test(test_unload_busy_waits_for_in_flight),
        cmocka_unit_test(test_unload_not_loaded_enoent),
        cmocka_unit_test(test_unload_while_loading),
        cmocka_unit_test(test_unload_queued_fails_waiters),
        cmocka_unit_test(test_requests_during_pending_unload_reload),
        cmocka_unit_test(test_request_during_unloading_reloads),
        cmocka_unit_test(test_reload_loaded_unloads_then_loads),
        cmocka_unit_test(test_reload_busy_waits_for_in_flight),
        cmocka_unit_test(test_reload_unloaded_loads),
        cmocka_unit_test(test_reload_while_loading),
        cmocka_unit_test(test_reload_while_unloading),
        cmocka_unit_test(test_unload_pending_model_counts_as_present),
        cmocka_unit_test(test_unload_cancels_pending_reload),
        cmocka_unit_test(test_load_loaded_is_noop),
        cmocka_unit_test(test_load_evicts_like_autoload),
        cmocka_unit_test(test_load_queued_is_noop),
        cmocka_unit_test(test_load_while_loading_is_noop),
        cmocka_unit_test(test_count_loaded),
        cmocka_unit_test(test_add_and_find),
        cmocka_unit_test(test_add_name_length),
        cmocka_unit_test(test_add_full),
        cmocka_unit_test(test_init_default_max),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_random_property),
        cmocka_unit_test(test_random_no_spontaneous_loads),
        cmocka_unit_test(test_device_classes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

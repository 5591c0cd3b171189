/* Unit tests for models.h's model state: the model manager's state (with its load queue and
 * waiting requests) and the child server's state give one model_state_t, and that state one
 * word, the word /v1/models, /health, /api/status and the gossip announcement have always
 * carried ("unloaded" | "loading" | "ready"). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "catalog.h"
#include "models.h"
#include "view.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const child_state_t CHILD_STATES[] = {CHILD_STOPPED, CHILD_STARTING, CHILD_READY,
                                             CHILD_BACKOFF, CHILD_STOPPING};

static model_state_t state_of(mm_state_t mm_state, bool queued, unsigned waiters,
                              child_state_t child)
{
    mm_model_t mm = {.state = mm_state, .queued = queued, .waiters = waiters};
    sv_child_t c = {.state = child};
    model_entry_t e = {.mm = &mm, .child = &c};
    return models_state(&e);
}

/* model manager state × load queue × child state → state → word */
static void test_table(void **state)
{
    (void)state;
    static const struct {
        mm_state_t mm;
        bool queued;
        unsigned waiters;
        child_state_t child;
        model_state_t want;
        const char *word;
    } rows[] = {
        /* loaded: ready once its server answers /health, loading before */
        {MM_LOADED, false, 0, CHILD_READY, MODEL_READY, "ready"},
        {MM_LOADED, false, 0, CHILD_STARTING, MODEL_LOADING, "loading"},
        {MM_LOADED, false, 0, CHILD_BACKOFF, MODEL_LOADING, "loading"}, /* restarting */
        {MM_LOADED, false, 0, CHILD_STOPPED, MODEL_LOADING, "loading"},
        {MM_LOADED, false, 0, CHILD_STOPPING, MODEL_LOADING, "loading"},
        {MM_LOADED, false, 3, CHILD_READY, MODEL_READY, "ready"},
        /* loading: whatever the child (a split host's server may not be spawned yet) */
        {MM_LOADING, false, 0, CHILD_STOPPED, MODEL_LOADING, "loading"},
        {MM_LOADING, false, 0, CHILD_STARTING, MODEL_LOADING, "loading"},
        {MM_LOADING, false, 0, CHILD_READY, MODEL_LOADING, "loading"},
        /* not loaded: loading while a load is queued or requests wait for one */
        {MM_UNLOADED, false, 0, CHILD_STOPPED, MODEL_UNLOADED, "unloaded"},
        {MM_UNLOADED, true, 0, CHILD_STOPPED, MODEL_LOADING, "loading"},
        {MM_UNLOADED, false, 1, CHILD_STOPPED, MODEL_LOADING, "loading"},
        {MM_UNLOADED, false, 0, CHILD_READY, MODEL_UNLOADED, "unloaded"},
        /* being stopped: as unloaded (a reload queued after it: loading) */
        {MM_UNLOADING, false, 0, CHILD_STOPPING, MODEL_UNLOADED, "unloaded"},
        {MM_UNLOADING, false, 0, CHILD_READY, MODEL_UNLOADED, "unloaded"},
        {MM_UNLOADING, true, 0, CHILD_STOPPING, MODEL_LOADING, "loading"},
        {MM_UNLOADING, false, 2, CHILD_STOPPING, MODEL_LOADING, "loading"},
    };
    for (size_t i = 0; i < N(rows); i++) {
        model_state_t got = state_of(rows[i].mm, rows[i].queued, rows[i].waiters, rows[i].child);
        if (got != rows[i].want)
            fail_msg("row %zu: mm %s, queued %d, waiters %u, child %s: state %d, want %d", i,
                     mm_state_name(rows[i].mm), rows[i].queued, rows[i].waiters,
                     child_state_name(rows[i].child), (int)got, (int)rows[i].want);
        assert_string_equal(model_state_name(got), rows[i].word);
    }
}

/* Only a loaded model looks at its child: for every other manager state the child's state
 * changes nothing. */
static void test_child_only_when_loaded(void **state)
{
    (void)state;
    static const mm_state_t MM[] = {MM_UNLOADED, MM_LOADING, MM_UNLOADING};
    for (size_t m = 0; m < N(MM); m++)
        for (int q = 0; q < 4; q++) {
            model_state_t first = state_of(MM[m], q & 1, (unsigned)(q >> 1), CHILD_STATES[0]);
            for (size_t c = 1; c < N(CHILD_STATES); c++)
                if (state_of(MM[m], q & 1, (unsigned)(q >> 1), CHILD_STATES[c]) != first)
                    fail_msg("mm %s, queue %d: child %s changes the state", mm_state_name(MM[m]), q,
                             child_state_name(CHILD_STATES[c]));
        }
}

/* The words are the ones peers decode (view.h) and passive route tables carry (catalog.h). */
static void test_words_shared(void **state)
{
    (void)state;
    static const struct {
        model_state_t s;
        view_state_t view;
        catalog_status_t cat;
    } rows[] = {
        {MODEL_UNLOADED, VIEW_STATE_UNLOADED, CATALOG_UNLOADED},
        {MODEL_LOADING, VIEW_STATE_LOADING, CATALOG_LOADING},
        {MODEL_READY, VIEW_STATE_READY, CATALOG_READY},
    };
    for (size_t i = 0; i < N(rows); i++) {
        assert_string_equal(model_state_name(rows[i].s), view_state_name(rows[i].view));
        assert_string_equal(model_state_name(rows[i].s), catalog_status_name(rows[i].cat));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_child_only_when_loaded),
        cmocka_unit_test(test_words_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

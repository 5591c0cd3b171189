/* Unit tests for the change bus (src/base/changes.h): any number of listeners up to the cap,
 * listening and unlistening from inside a notification, the generation. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "changes.h"

typedef struct {
    changes_t *bus;
    int calls;
    uint64_t gen_seen;     /* changes_gen when last called */
    int order;             /* position in the last notification (1-based) */
    void *remove_data;     /* on its call: unlisten (counter_fn, remove_data) */
    bool add_self_on_call; /* on its call: listen (counter_fn, add_target) */
    void *add_target;
    int renotify; /* on its call: notify again, this many times in all */
} counter_t;

static int g_order; /* the test's own call counter (per notification) */

static void counter_fn(void *data)
{
    counter_t *c = data;
    c->calls++;
    c->gen_seen = changes_gen(c->bus);
    c->order = ++g_order;
    if (c->remove_data) changes_unlisten(c->bus, counter_fn, c->remove_data);
    if (c->add_self_on_call) {
        c->add_self_on_call = false;
        assert_int_equal(changes_listen(c->bus, counter_fn, c->add_target), 0);
    }
    if (c->renotify > 0) {
        c->renotify--;
        changes_notify(c->bus);
    }
}

static void test_every_listener_once_in_order(void **state)
{
    (void)state;
    changes_t bus;
    memset(&bus, 0, sizeof bus);
    counter_t c[CHANGES_MAX_LISTENERS];
    memset(c, 0, sizeof c);
    for (int i = 0; i < CHANGES_MAX_LISTENERS; i++) {
        c[i].bus = &bus;
        assert_int_equal(changes_listen(&bus, counter_fn, &c[i]), 0);
    }
    g_order = 0;
    changes_notify(&bus);
    for (int i = 0; i < CHANGES_MAX_LISTENERS; i++) {
        assert_int_equal(c[i].calls, 1);
        assert_int_equal(c[i].order, i + 1);
        assert_int_equal(c[i].gen_seen, 1); /* bumped before the listeners run */
    }
    /* one more is refused, and nothing changes for the others */
    counter_t extra = {.bus = &bus};
    assert_int_equal(changes_listen(&bus, counter_fn, &extra), -ENOSPC);
    changes_notify(&bus);
    assert_int_equal(extra.calls, 0);
    assert_int_equal(c[CHANGES_MAX_LISTENERS - 1].calls, 2);
    /* unlisten frees a slot */
    changes_unlisten(&bus, counter_fn, &c[3]);
    assert_int_equal(changes_listen(&bus, counter_fn, &extra), 0);
    changes_notify(&bus);
    assert_int_equal(c[3].calls, 2);
    assert_int_equal(extra.calls, 1);
    assert_int_equal(c[0].calls, 3);
}

/* The same function with another data pointer is another listener. */
static void test_listener_is_fn_and_data(void **state)
{
    (void)state;
    changes_t bus;
    memset(&bus, 0, sizeof bus);
    counter_t a = {.bus = &bus}, b = {.bus = &bus};
    assert_int_equal(changes_listen(&bus, counter_fn, &a), 0);
    assert_int_equal(changes_listen(&bus, counter_fn, &b), 0);
    changes_unlisten(&bus, counter_fn, &a);
    changes_unlisten(&bus, counter_fn, &bus); /* not listening: no-op */
    changes_notify(&bus);
    assert_int_equal(a.calls, 0);
    assert_int_equal(b.calls, 1);
}

/* A listener removing itself, or one later in the list, inside a notification: the later one
 * is not called, every other one is called once; the list is whole afterwards. */
static void test_unlisten_inside_notify(void **state)
{
    (void)state;
    changes_t bus;
    memset(&bus, 0, sizeof bus);
    counter_t a = {.bus = &bus}, b = {.bus = &bus}, c = {.bus = &bus}, d = {.bus = &bus};
    a.remove_data = &c; /* a removes c before c's turn */
    b.remove_data = &b; /* b removes itself */
    assert_int_equal(changes_listen(&bus, counter_fn, &a), 0);
    assert_int_equal(changes_listen(&bus, counter_fn, &b), 0);
    assert_int_equal(changes_listen(&bus, counter_fn, &c), 0);
    assert_int_equal(changes_listen(&bus, counter_fn, &d), 0);
    g_order = 0;
    changes_notify(&bus);
    assert_int_equal(a.calls, 1);
    assert_int_equal(b.calls, 1);
    assert_int_equal(c.calls, 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.order, 3);
    assert_int_equal(bus.n, 2); /* compacted once the notification ended */
    a.remove_data = NULL;
    changes_notify(&bus);
    assert_int_equal(a.calls, 2);
    assert_int_equal(b.calls, 1);
    assert_int_equal(c.calls, 0);
    assert_int_equal(d.calls, 2);
}

/* A listener added inside a notification is called from the next one on. */
static void test_listen_inside_notify(void **state)
{
    (void)state;
    changes_t bus;
    memset(&bus, 0, sizeof bus);
    counter_t late = {.bus = &bus};
    counter_t a = {.bus = &bus, .add_self_on_call = true, .add_target = &late};
    assert_int_equal(changes_listen(&bus, counter_fn, &a), 0);
    changes_notify(&bus);
    assert_int_equal(a.calls, 1);
    assert_int_equal(late.calls, 0);
    changes_notify(&bus);
    assert_int_equal(a.calls, 2);
    assert_int_equal(late.calls, 1);
}

/* The generation only grows, by one per notification, also for nested ones and with no
 * listener; NULL is no bus. */
static void test_gen_monotonic(void **state)
{
    (void)state;
    changes_t bus;
    memset(&bus, 0, sizeof bus);
    assert_int_equal(changes_gen(&bus), 0);
    changes_notify(&bus);
    assert_int_equal(changes_gen(&bus), 1);
    counter_t a = {.bus = &bus, .renotify = 2}; /* notifies twice more from inside */
    assert_int_equal(changes_listen(&bus, counter_fn, &a), 0);
    uint64_t before = changes_gen(&bus);
    changes_notify(&bus);
    assert_int_equal(changes_gen(&bus), before + 3);
    assert_int_equal(a.calls, 3);
    assert_true(a.gen_seen > before);
    changes_notify(NULL); /* no bus: nothing */
    assert_int_equal(changes_gen(NULL), 0);
    assert_int_equal(changes_gen(&bus), before + 3);
}

/* Two buses are independent (no process state). */
static void test_buses_independent(void **state)
{
    (void)state;
    changes_t x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    counter_t a = {.bus = &x}, b = {.bus = &y};
    assert_int_equal(changes_listen(&x, counter_fn, &a), 0);
    assert_int_equal(changes_listen(&y, counter_fn, &b), 0);
    changes_notify(&x);
    changes_notify(&x);
    assert_int_equal(a.calls, 2);
    assert_int_equal(b.calls, 0);
    assert_int_equal(changes_gen(&x), 2);
    assert_int_equal(changes_gen(&y), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_listener_once_in_order),
        cmocka_unit_test(test_listener_is_fn_and_data),
        cmocka_unit_test(test_unlisten_inside_notify),
        cmocka_unit_test(test_listen_inside_notify),
        cmocka_unit_test(test_gen_monotonic),
        cmocka_unit_test(test_buses_independent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* changes — see changes.h. */
#include "changes.h"

#include <errno.h>

/* Drop the entries removed during a notification, keeping the order of the others. */
static void compact(changes_t *c)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->l[i].fn) c->l[k++] = c->l[i];
    c->n = k;
}

void changes_notify(changes_t *c)
{
    if (!c) return;
    c->gen++;
    c->depth++;
    size_t n = c->n; /* listeners added by a listener are called from the next notification */
    for (size_t i = 0; i < n; i++)
        if (c->l[i].fn) c->l[i].fn(c->l[i].data);
    if (--c->depth == 0) compact(c);
}

uint64_t changes_gen(const changes_t *c)
{
    return c ? c->gen : 0;
}

int changes_listen(changes_t *c, void (*fn)(void *data), void *data)
{
    if (c->depth == 0) compact(c);
    if (c->n == CHANGES_MAX_LISTENERS) return -ENOSPC;
    c->l[c->n].fn = fn;
    c->l[c->n].data = data;
    c->n++;
    return 0;
}

void changes_unlisten(changes_t *c, void (*fn)(void *data), void *data)
{
    if (!fn) return;
    for (size_t i = 0; i < c->n; i++)
        if (c->l[i].fn == fn && c->l[i].data == data) {
            c->l[i].fn = NULL; /* the loop of a notification under way skips it */
            break;
        }
    if (c->depth == 0) compact(c);
}

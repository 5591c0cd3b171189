/* statgen — see statgen.h. */
#include "statgen.h"

#include <stddef.h>

static uint64_t g_gen;
static void (*g_fn)(void *data);
static void *g_data;

void status_changed(void)
{
    g_gen++;
    if (g_fn) g_fn(g_data);
}

uint64_t status_gen(void)
{
    return g_gen;
}

void status_listen(void (*fn)(void *data), void *data)
{
    g_fn = fn;
    g_data = data;
}

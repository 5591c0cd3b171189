/* demand — requests per model, counted where they are served (pure: no I/O, time passed in).
 *
 * Every node counts the requests its own llama-servers take (direct ones and those that arrive
 * through a mesh tunnel: both pass models_route) in fixed windows (DEMAND_WINDOW_MS, one
 * minute; MESH_LLM_DEMAND_WINDOW_MS in tests). When a window closes, each model's count becomes
 * its published rate, scaled to requests per minute; a window with no request publishes 0 (the
 * last request time stays).
 * The rates and last request times go into the node's announcement (request_rates,
 * last_request: view.h), and the mesh sums them per model (demand_sum).
 *
 * The table holds DEMAND_MAX_MODELS models; a new model replaces the one whose last request is
 * oldest (its rate is lost: a node serves far fewer models than that). */
#ifndef MESH_DEMAND_H
#define MESH_DEMAND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "view.h"

#define DEMAND_MAX_MODELS 32
#define DEMAND_WINDOW_MS 60000

typedef struct {
    char name[CATALOG_NAME_MAX];
    uint32_t count;     /* requests in the current window */
    uint64_t rate;      /* per minute, from the last closed window */
    uint64_t last_ms;   /* last request, caller's monotonic clock (0 none) */
    uint64_t last_unix; /* last request, unix seconds */
} demand_entry_t;

typedef struct {
    uint64_t window_ms;
    uint64_t win_start; /* start of the current window (caller's clock) */
    bool started;
    demand_entry_t e[DEMAND_MAX_MODELS];
    size_t n;
} demand_t;

/* window_ms 0: DEMAND_WINDOW_MS. */
void demand_init(demand_t *d, uint64_t window_ms);
/* One request for model at now_ms (monotonic) / now_unix. -EINVAL for an invalid name. */
int demand_record(demand_t *d, const char *model, uint64_t now_ms, uint64_t now_unix);
/* Close the windows that ended by now_ms. True when a published rate changed. */
bool demand_tick(demand_t *d, uint64_t now_ms);
const demand_entry_t *demand_find(const demand_t *d, const char *model);
/* The published rate (per minute) of model, 0 when unknown. */
uint64_t demand_rate(const demand_t *d, const char *model);

/* ---- the mesh's demand: the announced figures summed per model ---- */

typedef struct {
    const char *model; /* borrowed from a node's view */
    uint64_t rate;     /* sum of the nodes' request_rates, per minute */
    uint64_t last_unix;
    size_t n_hosts; /* nodes whose server for it runs (loading or ready) */
    size_t n_ready; /* of which ready */
    bool requested; /* in some node's requested_models */
    bool loading;   /* some host is not ready yet */
} demand_sum_t;

/* Sum nodes[0..n) (and self when not NULL) into out (max entries, one per model that some node
 * announces demand for, serves, or requests). Returns the number written. */
size_t demand_sum(const view_node_t *nodes, size_t n, const view_node_t *self, demand_sum_t *out,
                  size_t max);
const demand_sum_t *demand_sum_find(const demand_sum_t *s, size_t n, const char *model);

#endif

/* speed — this node's compute-speed calibration at start (base/calib.h on the libuv thread
 * pool, so the event loop never waits on it), announced in gossip as speed_mflops and used by
 * the election's speed-aware layer split (core/layer_split.h).
 *
 * MESH_LLM_SPEED_MFLOPS overrides it: a positive integer is announced as is (tests of the
 * placement rules); 0 turns it off (no speed announced: splits stay memory-proportional). */
#ifndef MESH_SPEED_H
#define MESH_SPEED_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "calib.h"

typedef struct node_speed node_speed_t;
typedef void (*node_speed_cb)(node_speed_t *s);

struct node_speed {
    uv_work_t work;
    calib_result_t res;
    int rc;
    unsigned threads;
    bool running;       /* the measurement is on the thread pool */
    uint32_t mflops;    /* the result, 0 unknown */
    const char *source; /* "measured", "env", "off", "failed" */
    node_speed_cb done;
    void *data;
    bool cancelled; /* node_speed_cancel: the measurement ends silently */
};

/* Start. Returns 1 when the value is known at once (the override), 0 when done(s) will be
 * called from the loop once the measurement ends, -errno when it cannot start (then mflops is
 * 0: unknown). */
struct tunables;
/* tun: MESH_LLM_SPEED_MFLOPS, when given, decides instead of a measurement */
int node_speed_start(node_speed_t *s, uv_loop_t *loop, const struct tunables *tun,
                     node_speed_cb done, void *data);

/* A startup that failed: a measurement still queued never runs, one running ends without a log
 * line or done(s). */
void node_speed_cancel(node_speed_t *s);

#endif

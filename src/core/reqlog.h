/* reqlog — the last REQLOG_MAX model requests through this node (pure: a fixed ring, no I/O,
 * times passed in). Each entry says when the request ended, which model it named, the path the
 * client called (Ollama's for Ollama's API, not the OpenAI one it became), which node served it,
 * the HTTP status, the route (served here, or forwarded through a tunnel), the time to the first
 * byte of the answer and, when the answer said so or it can be measured, tokens/s.
 * Shown in /api/status ("requests", newest first) and thus in the console. */
#ifndef MESH_REQLOG_H
#define MESH_REQLOG_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "metrics.h"

#define REQLOG_MAX 200
#define REQLOG_PATH_LEN 48 /* the longest routed path is 33 bytes */

typedef struct {
    uint64_t wall_ms; /* unix time (ms) when the request ended */
    char model[METRICS_MODEL_LEN];
    char path[REQLOG_PATH_LEN];  /* the path the client called ("" unknown) */
    char node[METRICS_PEER_LEN]; /* the node that served it ("" unknown) */
    metrics_route_t route;
    int status;          /* HTTP status sent; 499 when the client went away before any */
    double ttft_ms;      /* request received -> first answer byte; < 0 unknown */
    double duration_ms;  /* request received -> ended */
    int64_t tokens_out;  /* -1 unknown */
    double tokens_per_s; /* generation speed; < 0 unknown */
} reqlog_entry_t;

typedef struct {
    reqlog_entry_t e[REQLOG_MAX];
    size_t next;    /* slot the next entry goes to */
    size_t n;       /* entries held (<= REQLOG_MAX) */
    uint64_t total; /* entries ever added */
} reqlog_t;

void reqlog_init(reqlog_t *l);
/* Append (the oldest entry goes once REQLOG_MAX are held). */
void reqlog_add(reqlog_t *l, const reqlog_entry_t *e);
/* i = 0 is the newest; NULL past the end. */
const reqlog_entry_t *reqlog_get(const reqlog_t *l, size_t i);

/* The entry of a finished request: self_id names this node (the server of a local route; a
 * tunnelled one was served by r->peer); now_ns is the monotonic end time, wall_ms the same
 * instant on the wall clock. Returns 0, or -ENOENT when r is not a model request. */
int reqlog_entry_from(reqlog_entry_t *out, const metrics_req_t *r, const char *self_id,
                      uint64_t now_ns, uint64_t wall_ms);

/* [{"time_ms","model","path","node","route","status","ttft_ms","duration_ms","tokens",
 * "tokens_per_s"}] newest first; unknown numbers (and path) are null. NULL on allocation failure.
 */
json_t *reqlog_json(const reqlog_t *l);

#endif

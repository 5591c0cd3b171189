/* Internals shared by supervisor.c (spawn, exit, restart), sv_watch.c (health checks, load
 * deadline, liveness) and sv_child.c (pure: what a child's fields say). Calls go one way:
 * supervisor.c → sv_watch.c → sv_child.c (and supervisor.c → sv_child.c); sv_watch.c reports
 * what it found through supervisor_t.on_verdict, and supervisor.c acts on it. */
#ifndef MESH_SUPERVISOR_INT_H
#define MESH_SUPERVISOR_INT_H

#include "supervisor.h"

/* sv_child.c */
/* The process is there and its exit has not been seen yet. */
bool sv_running(const sv_child_t *c);
/* "llama-server for model NAME" or "rpc-server", for logs. */
const char *sv_prog_name(const sv_child_t *c);
/* How long a start of c may take (MESH_LLM_LOAD_TIMEOUT_MS, else c's, else the default). */
uint64_t svw_load_limit(const sv_child_t *c);
/* A finished /health check of a starting child: answered (200, or an rpc-server accepted the
 * connection) and port_held (plat_port_held_by: 1, 0 another process holds the port, -errno
 * unknown: trusted) → SVW_READY, SVW_PORT_TAKEN or SVW_WAIT (not answered). */
svw_verdict_t svw_probe_verdict(bool answered, int port_held);
/* One liveness tick of a ready child. */
typedef struct {
    uint64_t now_ms;
    uint64_t last_alive_ms; /* its last /health answer */
    uint64_t progress_ms;   /* its last sign of work; the tick moves it to now_ms when the child
                               is idle (nothing to make progress on) or its CPU time advanced */
    uint64_t hang_ms;
    bool busy;         /* requests in flight */
    bool cpu_advanced; /* its CPU time moved since the last tick */
} svw_tick_t;
/* SVW_WEDGED when /health has gone unanswered for hang_ms and, if busy, the child made no CPU
 * progress for as long; else SVW_WAIT. Updates t->progress_ms. */
svw_verdict_t svw_tick(svw_tick_t *t);

/* sv_watch.c */
void svw_init(sv_child_t *c);
/* A child was spawned: poll /health until it answers, kill it at the load deadline. */
void svw_spawned(sv_child_t *c);
/* The child is ready (SVW_READY applied): liveness ticks from now on (none for an
 * rpc-server). */
void svw_ready(sv_child_t *c);
/* Check /health right away (llama-server logged that it listens). */
void svw_check_now(sv_child_t *c);
/* The child exited or is being stopped: no more deadline or liveness ticks. */
void svw_stop(sv_child_t *c);
/* Shutdown: close every health check in flight. */
void svw_cancel_all(supervisor_t *sv);

#endif

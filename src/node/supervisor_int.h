/* Internals shared by supervisor.c (spawn, exit, restart) and sv_watch.c (health checks, load
 * deadline, liveness). */
#ifndef MESH_SUPERVISOR_INT_H
#define MESH_SUPERVISOR_INT_H

#include "supervisor.h"

/* The process is there and its exit has not been seen yet. */
bool sv_running(const sv_child_t *c);
void sv_set_state(sv_child_t *c, child_state_t s);
/* "llama-server for model NAME" or "rpc-server", for logs. */
const char *sv_prog_name(const sv_child_t *c);

/* sv_watch.c */
void svw_init(sv_child_t *c);
/* A child was spawned: poll /health until it answers, kill it at the load deadline. */
void svw_spawned(sv_child_t *c);
/* How long a start of c may take (MESH_LLM_LOAD_TIMEOUT_MS, else c's, else the default). */
uint64_t svw_load_limit(const sv_child_t *c);
/* Check /health right away (llama-server logged that it listens). */
void svw_check_now(sv_child_t *c);
/* The child exited or is being stopped: no more deadline or liveness ticks. */
void svw_stop(sv_child_t *c);
/* Shutdown: close every health check in flight. */
void svw_cancel_all(supervisor_t *sv);

#endif

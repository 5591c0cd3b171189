/* Internals shared by models.c (registry, loads, serving) and models_api.c (/api/v1/...). */
#ifndef MESH_MODELS_INT_H
#define MESH_MODELS_INT_H

#include "models.h"

enum { PARK_REQUEST, PARK_LOAD, PARK_UNLOAD };

uint64_t models_now(models_t *ms);
/* Keep req waiting on e (kind PARK_*) until the load or unload it waits for ends. */
int models_park(models_t *ms, model_entry_t *e, httpd_req_t *req, int kind);
/* Execute what mm decided (loads, unloads, serving or failing waiting requests). */
void models_run(models_t *ms);
/* An unloaded model whose file is gone (404 before anything is evicted for it). */
bool models_file_missing(model_entry_t *e);
/* Its file failed in a way no retry fixes and is unchanged since, or (a version not checked
 * yet) is not a complete GGUF now: answer with models_respond_bad, evict nothing. */
bool models_known_bad(models_t *ms, model_entry_t *e);
void models_respond_bad(model_entry_t *e, httpd_req_t *req);
/* The memory e's next load needs (ledger), after its options changed. */
void models_update_bytes(models_t *ms, model_entry_t *e);

/* Decide e's serving features (draft model, vision projector: models_serve.c) and store the
 * llama-server arguments that turn them on in e->serve_args, with e->serve_bytes, e->vision and
 * e->draft. Only computes: the caller updates e's memory need (models_update_bytes). 0 or
 * -ENOMEM / -E2BIG. */
int models_serve_setup(const models_t *ms, model_entry_t *e);

#endif

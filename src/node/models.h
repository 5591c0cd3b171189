/* models — the node's local model manager: the registry of known models, the mm policy driven
 * by real llama-server children, requests parked while their model loads, and the model-manager
 * API (/api/v1/{health,load,unload,stats,models}). */
#ifndef MESH_MODELS_H
#define MESH_MODELS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "demand.h"
#include "ledger.h"
#include "httpd.h"
#include "mm.h"
#include "model_file.h"
#include "supervisor.h"

typedef struct parked parked_t;
typedef struct flight flight_t;

struct models;

typedef struct {
    struct models *ms;
    char *path;
    uint64_t size;
    uint32_t n_layers;    /* GGUF block_count, 0 unknown */
    uint32_t train_ctx;   /* GGUF context_length (llama-server's context when none is set) */
    ledger_shape_t shape; /* for the KV cache estimate */
    uint64_t host_share;  /* split host: the bytes of its layers (0: a whole model) */
    unsigned preload : 1; /* given with --model: loaded at startup when a slot is free */
    unsigned preload_done : 1;
    /* a --model that did not fit beside the ones given before it (models_preload): the planner
     * loads it when its memory frees (planner.c: it takes the flag) */
    unsigned waits_memory : 1;
    /* options of the running (or next) load */
    uint32_t ctx_size;   /* per slot (models_slots.h); 0: the model's own */
    uint32_t want_slots; /* --slots (or its config entry); 0: as many as fit */
    /* the running (or starting) llama-server's parallel slots, and the context of each when the
     * node sized them (models_slots_size); 0 when stopped / llama.cpp's own sizing */
    unsigned slots;
    uint32_t slot_ctx;
    char *llamacpp_args;
    char *serve_args;     /* serving features (models_serve.c: draft, mmproj), before the others */
    char draft[512];      /* the draft model's file, "" none */
    uint64_t serve_bytes; /* the draft's and the projector's files: loaded with the model */
    uint64_t input_bytes, output_bytes; /* its input and output layers' tensors (GGUF table) */
    bool vision;                        /* has a vision projector (--mmproj): takes images */
    char *mesh_args; /* set by the mesh (split host: --rpc, --tensor-split, -ngl), appended */
    char backend[16];
    sv_child_t *child;
    mm_model_t *mm;
    parked_t *waiting;        /* requests waiting for the load, FIFO */
    parked_t *load_waiters;   /* POST load calls waiting for the outcome */
    parked_t *unload_waiters; /* POST unload calls waiting for the unload */
    flight_t *flights;        /* requests being proxied to its server */
    /* the load in progress checked the file (model_file.h) before starting llama-server */
    file_id_t checked;
    /* the file failed in a way no retry can fix: requests fail at once until it changes */
    bool bad;
    file_id_t bad_id;
    char bad_reason[CHILD_LINE_MAX];
    /* the file version found complete before a load (vetted before anything is evicted) */
    bool vetted;
    file_id_t vetted_id;
    /* deleted (DELETE /api/delete, models_delete): gone for every listing, the announcement,
     * routing and loading; its slot stays (pointers to it stay valid) until models_add_file of
     * the same name brings it back */
    bool deleted;
} model_entry_t;

typedef struct models {
    uv_loop_t *loop;
    const config_t *cfg;
    supervisor_t *sv;
    meshstat_t *stat; /* the node's metrics (loads, in flight, drafts); NULL: not counted */
    mm_t mm;
    ledger_t ledger;       /* this node's memory: what it offers, what each model and shard holds */
    uint64_t device_bytes; /* the part of the offer on accelerators (the rest: --offload-ram) */
    unsigned device_class; /* MM_DEV_* of the devices the models run on (models_set_devices) */
    demand_t demand;       /* requests per model this node served (models_route counts them) */
    model_entry_t entries[MM_MAX_MODELS];
    size_t n;
    bool running_actions;
    bool rerun;
    unsigned preload_pending;
    void (*on_preload_done)(void *data);
    void (*on_change)(void *data); /* a model started or finished loading or unloading */
    bool state_changed;
    void *data;
    /* stats of the most recent finished request */
    char last_model[MODEL_NAME_MAX];
    char *last_stats_json; /* llama-server's "timings" object of that request */
    char *last_usage_json;
    /* A proxied request ended: the last bytes of its response (admission counts tokens);
     * tag is the request's httpd tag. */
    void (*on_flight_tail)(void *data, uint64_t tag, int status, const char *tail, size_t len);
    void *tail_data;
    /* /api/v1/load of a name no model has: a model reference (catalog name, hf://…,
     * ORG/REPO:QUANT, URL)? Returns -1 (not one: 404 as before), 0 (its model is name: load
     * it) or 1 (answered: its download started, or a clear error). NULL: no downloads. */
    int (*load_ref)(void *data, const char *ref, char *name, size_t len, httpd_req_t *req);
    void *load_ref_data;
    /* Seams for tests (NULL: the real ones): start and stop a model's llama-server (sv_start,
     * sv_stop), and the clock of the mm policy (ms; uv_now of the loop). */
    int (*child_start)(sv_child_t *c);
    void (*child_stop)(sv_child_t *c, uint64_t grace_ms);
    uint64_t (*clock)(void *data);
    void *clock_data;
    /* the mm policy's deadline (mm_deadline) may have moved outside a request: whoever drives
     * mm_tick re-arms its timer (admission.c) */
    void (*on_deadline)(void *data);
    void *deadline_data;
} models_t;

int models_init(models_t *ms, uv_loop_t *loop, const config_t *cfg, supervisor_t *sv,
                meshstat_t *stat, char *err, size_t errlen);
/* The memory this node offers (before models_preload); every load is checked against it:
 * device_bytes of it on its accelerators (0: none, or all of it RAM; less than offered:
 * --offload-ram, models beyond the devices load with partial offload). */
void models_set_offer(models_t *ms, uint64_t offered, uint64_t device_bytes);
/* The devices every model runs on (offer_detect's): their classes (mm_device_class; none: the
 * CPU) set each model's mm device, so an NPU-type device holds one model at a time (mm.h). */
void models_set_devices(models_t *ms, const devices_t *devs);
/* The node's callbacks; data is the one both are called with (the last one given). done: the
 * preload (models_preload) finished. on_change: a model started or finished loading or
 * unloading (the node sets it when it joins a mesh). */
void models_on_preload_done(models_t *ms, void (*done)(void *data), void *data);
void models_watch(models_t *ms, void (*on_change)(void *data), void *data);
/* Downloads work: /api/v1/load of an unknown name asks load_ref (see models_t.load_ref). */
void models_set_loader(models_t *ms,
                       int (*load_ref)(void *data, const char *ref, char *name, size_t len,
                                       httpd_req_t *req),
                       void *data);
/* What e needs loaded whole here: its file and the KV cache of the context it loads with. */
uint64_t models_need_bytes(const models_t *ms, const model_entry_t *e);
/* What this node holds only as e's split host (ledger_host_bytes; --split-private from cfg). */
uint64_t models_host_bytes(const models_t *ms, const model_entry_t *e);
/* A split host holds only its layers: `bytes` of them (0: back to the whole model). */
void models_set_host_share(models_t *ms, model_entry_t *e, uint64_t bytes);
/* Whether e can ever load here whole (its need fits what the node offers minus worker shards). */
bool models_fits(const models_t *ms, const model_entry_t *e);
/* "model 'X' needs N; this node offers M with F free…" for errors and logs. */
void models_memory_msg(const models_t *ms, const model_entry_t *e, char *buf, size_t len);

/* A model file that arrived while the node runs (a download): add it to the registry (not loaded;
 * the caller loads it). An entry of that name already there is returned as is; a deleted one
 * (models_delete) comes back in its slot, with this file's facts. */
int models_add_file(models_t *ms, const char *path, model_entry_t **out, char *err, size_t errlen);
/* Queue the preloads (models given with --model, while slots are free). */
void models_preload(models_t *ms);
/* After the preloads settled: true when models were given with --model and every one of them
 * failed to load (a start-up error: the node would serve nothing it was asked to); why names
 * each file and its error. */
bool models_preload_all_failed(const models_t *ms, char *why, size_t len);
void models_free(models_t *ms);

/* The model of that name (NULL: none, or deleted). */
model_entry_t *models_find(models_t *ms, const char *name);
/* The models this node has, in order, skipping deleted ones: the one way to walk them,
 *   for (model_entry_t *e = NULL; (e = models_next(ms, e));)
 * (NULL after the last; prev NULL: the first). */
model_entry_t *models_next(const models_t *ms, const model_entry_t *prev);
/* How many models models_next walks, and the only one of them (NULL unless exactly one). */
size_t models_count(const models_t *ms);
model_entry_t *models_only(const models_t *ms);
/* DELETE /api/delete (its files were removed): e stops existing as far as every listing, the
 * announcement, routing and loading go (models_find and models_next skip it; a request routed
 * to it anyway answers 404) and it is unloaded once its requests in flight end (a queued load
 * is dropped, its waiting requests answered 503). Its slot, its mm model and its child stay, so
 * whatever points at them (mm, planner, admission, parked requests) stays valid; a file of the
 * same name added again (models_add_file: a re-download) brings the entry back. */
void models_delete(models_t *ms, model_entry_t *e);
/* Route an inference request to model e (auto-loading it). Answers the request either way. */
void models_route(models_t *ms, model_entry_t *e, httpd_req_t *req);
/* /api/v1/... and /api/v0/... ; returns false if path is not a model-manager path. */
bool models_api(models_t *ms, httpd_req_t *req, const char *sub);
/* Arguments the mesh adds to the model's llama-server (NULL: none); used by the next load. */
int models_set_mesh_args(models_t *ms, model_entry_t *e, const char *args);
/* Load e (queued like POST /api/v1/load); with reload, a loaded model restarts with the current
 * options once its requests finished. */
void models_load(models_t *ms, model_entry_t *e, bool reload);
/* Unload e if it is loaded or loading. */
void models_unload(models_t *ms, model_entry_t *e);
/* Ollama's keep_alive for e: unloaded once idle that long after its last request (ms > 0), or
 * kept until evicted (ms < 0: the default); 0 unloads it now (models_unload). */
void models_keep_alive(models_t *ms, model_entry_t *e, int64_t ms_idle);
/* When e's keep-alive runs out, on the clock of the Unix epoch (ms; 0: it has none). */
uint64_t models_expires_unix_ms(models_t *ms, const model_entry_t *e);

/* A model's state on this node: what the planner, the announcement and the listings (/v1/models,
 * /health, /api/status, /api/v1/models) go by. Loading covers a load that is queued or has
 * requests waiting for it, and a started server not yet answering /health. */
typedef enum { MODEL_UNLOADED, MODEL_LOADING, MODEL_READY } model_state_t;
model_state_t models_state(const model_entry_t *e);
/* "unloaded" | "loading" | "ready": the one place these words are written. */
const char *model_state_name(model_state_t s);

#endif

/* mm — the local model manager's policy (seed 003), pure: no I/O, time passed in.
 *
 * Models have a type (llm, embedding, reranking) and a device set. Each type has a number of
 * slots (--max-loaded-models). The driver feeds events in (requests starting and ending, load and
 * unload requests, loads and unloads finishing) and executes the actions that mm_next_action()
 * hands out (start a load, unload a model, serve or fail waiting requests).
 *
 * Rules:
 *  - a request for a known model that is not loaded queues a load (auto-load); the request
 *    waits and is served when the load completes;
 *  - loads are serialized (one at a time, FIFO); the eviction choice is made when a load leaves
 *    the queue;
 *  - a type with a free slot loads without evicting; a full type evicts its least-recently-used
 *    idle model (access = load start, load end, request start, request end);
 *  - a model with requests in flight is never evicted: when every candidate is busy, the load
 *    waits until one becomes idle (like Ollama's scheduler, an idle model is preferred over
 *    waiting for the strict LRU one to finish);
 *  - requests waiting for a load count as in flight the moment it completes, so a model
 *    auto-loaded for a request serves it before it can be evicted;
 *  - a load that fails evicts every loaded idle model and is retried once — unless the file does
 *    not exist, which evicts nothing and fails the waiting requests with "not found", or the
 *    failure is one a retry cannot fix (an unusable file, refused arguments), which evicts
 *    nothing and fails them at once;
 *  - a device that holds one model at a time (npu) evicts its holder whatever its type;
 *  - memory (when mm.ledger is set): a model holds `bytes` in the node's ledger from the moment
 *    its load starts until its unload finishes. A load that does not fit in what the node
 *    offers minus what worker shards hold fails its waiting requests with 503 (reason
 *    MM_FAIL_MEMORY) at once; one that fits once other models are gone unloads idle models of
 *    any type, least recently used first, and waits for busy ones to become idle (never
 *    evicting them);
 *  - an explicit unload waits for in-flight requests to end; requests arriving meanwhile wait
 *    for a reload. Unloading a model that is only queued drops the load and fails its waiting
 *    requests with 503.
 *  - anti-thrash: requests queued for a model outside mm (admission control, mm_set_pending)
 *    keep a loaded model from being evicted while the load that wants its slot has waited less
 *    than fair_ms (mm_set_fair_ms): the loaded model's queued requests are served before the
 *    switch, so an interleaved A B C A B C costs 2 switches, not 5. Once a load has waited
 *    fair_ms, pending requests no longer protect the models of its type, and mm_hold() tells
 *    the admission driver to start no new request on them so they drain and the load goes on
 *    (no request waits much more than fair_ms plus the requests in flight for fairness).
 *  - a pinned model (mm_set_pinned, --pin) is never evicted to make room (explicit unloads
 *    still apply); a load whose type's slots are all held by pinned models fails with 503
 *    (reason MM_FAIL_PINNED) instead of waiting forever.
 *  - keep-alive (Ollama's keep_alive, mm_set_keep_alive): a loaded model with one set is
 *    unloaded once it has been idle (no request in flight, waiting or queued outside mm) for
 *    that long after its last use (setting it counts as one); mm_deadline says when the next one is
 * due, mm_tick unloads it. Without one (the default) a model stays loaded until evicted or
 * unloaded. Its unload clears it: a keep-alive lasts for the load it was set on (or the next, set
 * before it).
 */
#ifndef MESH_MM_H
#define MESH_MM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger.h"

#define MM_MAX_MODELS 256
#define MM_NAME_MAX 128

typedef enum { MM_LLM = 0, MM_EMBEDDING = 1, MM_RERANKING = 2, MM_N_TYPES = 3 } mm_type_t;

enum { MM_DEV_CPU = 1, MM_DEV_GPU = 2, MM_DEV_NPU = 4 };

typedef enum {
    MM_UNLOADED = 0,
    MM_LOADING, /* the driver is starting it */
    MM_LOADED,
    MM_UNLOADING, /* the driver is stopping it */
} mm_state_t;

typedef struct {
    char name[MM_NAME_MAX];
    mm_type_t type;
    unsigned device; /* MM_DEV_* bits */
    mm_state_t state;
    uint64_t last_use; /* caller's clock (ms) */
    uint64_t loaded_at;
    unsigned in_flight;  /* requests being served */
    unsigned waiters;    /* requests waiting for this model to load */
    bool queued;         /* in the load queue */
    bool unload_pending; /* explicit unload waiting for in-flight requests to end */
    bool reload;         /* load again once unloaded (new options) */
    unsigned attempt;    /* 0 = first try of the current load, 1 = the retry */
    uint64_t bytes;      /* memory it holds when loaded (0: unknown, not accounted) */
    unsigned pending;    /* requests queued for it outside mm (admission), see anti-thrash */
    bool pinned;         /* never evicted to make room */
    uint64_t wait_since; /* when its load was queued (fairness) */
    uint64_t keep_alive; /* unloaded after this long idle (ms; 0: no expiry) */
    void *data;          /* the driver's */
} mm_model_t;

typedef enum {
    MM_ACT_NONE = 0,
    MM_ACT_LOAD,   /* start the model's server; answer with mm_load_done */
    MM_ACT_UNLOAD, /* stop the model's server; answer with mm_unload_done */
    MM_ACT_SERVE,  /* dispatch `count` waiting requests (already counted in flight) */
    MM_ACT_FAIL,   /* fail `count` waiting requests with `status` (404 missing file, 500 load) */
} mm_action_kind_t;

typedef enum { MM_FAIL_LOAD = 0, MM_FAIL_MEMORY = 1, MM_FAIL_PINNED = 2 } mm_fail_reason_t;

typedef struct {
    mm_action_kind_t kind;
    mm_model_t *model;
    unsigned count;
    int status;
    mm_fail_reason_t reason; /* MM_ACT_FAIL */
} mm_action_t;

#define MM_MAX_ACTIONS 1024

typedef struct {
    mm_model_t models[MM_MAX_MODELS];
    size_t n_models;
    unsigned max_loaded[MM_N_TYPES];
    mm_model_t *queue[MM_MAX_MODELS]; /* loads waiting to start, FIFO */
    size_t qlen;
    mm_model_t *current;  /* the load that left the queue and is in progress */
    bool current_started; /* MM_ACT_LOAD issued for current */
    bool drain_all;       /* retry after a failed load: wait until every unload finished */
    ledger_t *ledger;     /* the node's memory account (NULL: memory is not accounted) */
    uint64_t fair_ms;     /* anti-thrash bound (0: pending requests never protect a model) */
    unsigned switches;    /* loads that evicted a model of the same type to make room */
    mm_action_t actions[MM_MAX_ACTIONS];
    size_t act_head, act_len;
} mm_t;

void mm_init(mm_t *mm, const unsigned max_loaded[MM_N_TYPES]);
/* Account memory in `l` (see the rules above); NULL turns accounting off. */
void mm_set_ledger(mm_t *mm, ledger_t *l);
/* The memory m holds once loaded (takes effect at its next load). */
void mm_set_bytes(mm_model_t *m, uint64_t bytes);
/* Whether m could ever load here: its bytes fit in what the node offers minus worker shards. */
bool mm_can_fit(const mm_t *mm, const mm_model_t *m);
/* Whether m fits beside `beside` bytes of other models (what the loads queued before it hold). */
bool mm_fits_beside(const mm_t *mm, const mm_model_t *m, uint64_t beside);
/* Register a known model; returns it or NULL when full / duplicate name. */
mm_model_t *mm_add(mm_t *mm, const char *name, mm_type_t type, unsigned device);
mm_model_t *mm_find(mm_t *mm, const char *name);

typedef enum { MM_SERVE_NOW = 0, MM_WAIT = 1 } mm_req_result_t;
/* A request for model m begins. MM_SERVE_NOW: it is loaded and now counted in flight.
 * MM_WAIT: it waits; a later MM_ACT_SERVE or MM_ACT_FAIL for m covers it. */
mm_req_result_t mm_request_begin(mm_t *mm, mm_model_t *m, uint64_t now);
/* A served request ends (stream finished, client gone, or error). */
void mm_request_end(mm_t *mm, mm_model_t *m, uint64_t now);
/* A waiting request gave up (client went away before the load finished). */
void mm_request_cancel(mm_t *mm, mm_model_t *m);

/* Explicit load (API): queue a load unless loaded, loading or queued already. */
void mm_load(mm_t *mm, mm_model_t *m, uint64_t now);
/* Explicit reload with new options: unload (after in-flight requests end), then load. */
void mm_reload(mm_t *mm, mm_model_t *m, uint64_t now);
/* Explicit unload (API). Returns -ENOENT if m is not loaded or loading. */
int mm_unload(mm_t *mm, mm_model_t *m, uint64_t now);

/* Why a load failed, as far as the driver can tell. */
typedef enum {
    MM_LOAD_ERR_RETRY = 0, /* unknown (maybe memory): evict every idle model, retry once */
    MM_LOAD_ERR_MISSING,   /* the model file does not exist: 404 */
    MM_LOAD_ERR_FINAL,     /* a retry cannot fix it (unusable file, refused arguments): 500 now */
} mm_load_err_t;

/* Driver reports. why is ignored when ok. */
void mm_load_done(mm_t *mm, mm_model_t *m, bool ok, mm_load_err_t why, uint64_t now);
void mm_unload_done(mm_t *mm, mm_model_t *m, uint64_t now);

/* Next action to execute, or false when there is none. */
bool mm_next_action(mm_t *mm, mm_action_t *out);

/* Anti-thrash (see the rules): the bound, and how many requests wait for m outside mm. */
void mm_set_fair_ms(mm_t *mm, uint64_t fair_ms);
void mm_set_pending(mm_t *mm, mm_model_t *m, unsigned pending, uint64_t now);
void mm_set_pinned(mm_t *mm, mm_model_t *m, bool pinned);
/* Whether new requests for the loaded model m should wait (a switch is overdue). */
bool mm_hold(const mm_t *mm, const mm_model_t *m, uint64_t now);
/* m is unloaded after ms of idleness past its last use (0: no expiry); setting one is a use. */
void mm_set_keep_alive(mm_t *mm, mm_model_t *m, uint64_t ms, uint64_t now);
/* When m's keep-alive runs out (UINT64_MAX: it has none, or it is not idle and loaded). */
uint64_t mm_expiry(const mm_model_t *m);
/* When the waiting load's fairness bound runs out (UINT64_MAX: none); call mm_tick then. */
uint64_t mm_deadline(const mm_t *mm);
void mm_tick(mm_t *mm, uint64_t now);

unsigned mm_count_loaded(const mm_t *mm, mm_type_t type); /* LOADED + LOADING + UNLOADING */
const char *mm_type_name(mm_type_t t);

/* Seed 003's device classes on llama.cpp's backends (a device's name without its index, as
 * --list-devices gives it): the NPU-type backends (CANN: Ascend; HTP: Hexagon; ZDNN; any name
 * starting "NPU") hold one model at a time, MM_DEV_NPU; "CPU" or "" is MM_DEV_CPU; every other
 * backend (CUDA, ROCm, Vulkan, Metal, SYCL, ...) a GPU, MM_DEV_GPU. Case-insensitive. */
unsigned mm_device_class(const char *backend);
/* bits as "cpu", "gpu", "npu" or "gpu|npu" (the order cpu, gpu, npu; 0: "cpu") into buf. */
const char *mm_device_name(unsigned bits, char *buf, size_t len);
const char *mm_state_name(mm_state_t s);

#endif

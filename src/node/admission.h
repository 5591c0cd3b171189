/* admission — the driver of admission control (core/admit.h) and of the model manager's
 * anti-thrash rule (core/mm.h): every inference request passes here before it is served or
 * routed. Per local model a cap on requests in flight (llama-server's parallel slots, -np, 4
 * when not given) and a FIFO queue (--queue-len, wait bounded by MESH_LLM_QUEUE_WAIT_MS);
 * requests for models served elsewhere are capped at the node that serves them (here only their
 * key's limits apply). A request waits in the queue as long as a client would (10 min by
 * default). Over a limit of the client's key or a full queue: 429 with Retry-After and an
 * OpenAI-shaped error ("type":"rate_limit_error", the code names the limit); a queue that cannot
 * drain (the wait ran out, or no node serves the model: has_host): 503 with Retry-After
 * ("type":"unavailable", "code":"queue_timeout" or "no_host"). A queued request whose client
 * goes away leaves the queue at once.
 *
 * API keys (--api-keys FILE, see README): a key has a name and a tier; only digests of the keys
 * are kept. --api-key KEY is one more key of tier "default". Requests through a mesh tunnel are
 * counted as key "anonymous" (their key was checked by the node they entered).
 *
 * The queue is event-driven: a request that ends frees its slot for the next one on the next
 * loop turn; a timer runs only for deadlines (queue waits, the switch fairness bound). */
#ifndef MESH_ADMISSION_H
#define MESH_ADMISSION_H

#include <jansson.h>
#include <stdbool.h>
#include <uv.h>

#include "admit.h"
#include "config.h"
#include "httpd.h"
#include "models.h"

typedef struct ticket ticket_t;

/* What the node gives admission (admission_init). */
typedef struct {
    /* Serve an admitted request: the rest of the API's handling (routing, local serving). */
    void (*resume)(void *data, httpd_req_t *req, int needs);
    void *data;
    /* Whether a model of this node has a host now (here or elsewhere; NULL: always): requests
     * that would wait for one that has none are answered 503 (core/admit.h). */
    bool (*has_host)(void *data, const char *model);
    /* Whether a request for a model of this node whose server has no free slot goes to a peer
     * replica that has one (route_decide.h's LOCAL SPILL; NULL: never): it is then admitted as
     * routed elsewhere instead of queued here. */
    bool (*spills)(void *data, const char *model, httpd_req_t *req);
    void *host_data;
} admission_deps_t;

typedef struct {
    uv_loop_t *loop;
    const config_t *cfg;
    models_t *ms;
    meshstat_t *stat; /* the node's metrics (queue depth and waits); NULL: not counted */
    admit_t *a;
    model_entry_t *local[ADMIT_MAX_MODELS];    /* admit model index -> local model, NULL: remote */
    int remote;                                /* the admit model of requests routed elsewhere */
    unsigned char digests[ADMIT_MAX_KEYS][32]; /* key index -> digest of the secret */
    bool has_digest[ADMIT_MAX_KEYS];
    size_t n_secret_keys;
    ticket_t *tickets;
    unsigned n_tickets;
    uv_timer_t timer;
    bool timer_init, kick, closing;
    bool in_timer;        /* inside the timer's callback: see schedule() */
    uint64_t signal_due;  /* the next queued signal (UINT64_MAX: none waits for one) */
    admission_deps_t dep; /* admission_init's */
} admission_t;

/* Read --api-keys, --queue-len, --pin; refuses (err) unknown pins, pins that cannot all fit
 * their type's slots, and a keys file that is malformed or readable by other users. */
int admission_init(admission_t *ad, uv_loop_t *loop, const config_t *cfg, models_t *ms,
                   meshstat_t *stat, const admission_deps_t *dep, char *err, size_t errlen);
/* Load the pinned models (after models_preload). */
void admission_start(admission_t *ad);
void admission_close(admission_t *ad);

/* Whether keys are configured (--api-keys or --api-key). */
bool admission_has_keys(const admission_t *ad);
/* The key an "Authorization: Bearer KEY" header names: its index, or -1. Constant time per key. */
int admission_key_of(const admission_t *ad, const char *authorization);

/* The key of a request: "Authorization: Bearer KEY" or (Anthropic clients) "x-api-key: KEY";
 * its index, or -1. */
int admission_req_key(const admission_t *ad, const httpd_req_t *req);

/* An inference request for `needs` (mm_type_t). true: admission took it (it was started through
 * resume, queued, or answered 429); false: not for admission (the caller goes on itself). */
bool admission_enter(admission_t *ad, httpd_req_t *req, int needs);
/* Whether req (admitted) was admitted to spill away from this node's full server (deps.spills):
 * the API routes it with route_local_t.full. */
bool admission_spilled(const admission_t *ad, const httpd_req_t *req);

/* "admission": {"queue_len","queue_wait_ms","switch_fair_ms","model_switches",
 * "models":{NAME:{cap,in_flight,queued,admitted,rejected,expired,cancelled,wait_ms_total,
 * oldest_wait_ms,held,no_host}},
 * "keys":{NAME:{tier,in_flight,queued,admitted,rejected,tokens_last_minute}}} (a new value;
 * NULL when there is no admission state) */
json_t *admission_status(admission_t *ad);

/* Parse a keys file (JSON or lines, README) into a; digests of the secrets go to digests
 * (by key index). Returns 0 or -EINVAL with err. */
int admission_parse_keys(admit_t *a, char *text, unsigned char (*digests)[32], bool *has, char *err,
                         size_t errlen);

#endif

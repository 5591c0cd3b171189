/* admit — admission control for inference requests (seed 004 throttling), pure: no I/O, time
 * passed in (ms, the caller's clock).
 *
 * Per model: a cap on requests in flight (0: no cap) and one FIFO queue bounded in length
 * (queue_len) and in wait (max_wait_ms). Per API key: a tier, which sets the key's own cap on
 * requests in flight (0: none), its share of a model's queue (percent of queue_len, 0: all of
 * it) and its tokens per minute (0: no limit; tokens are reported after the fact with
 * admit_tokens and counted in a sliding window of 60 one-second buckets).
 *
 * admit_try decides at once: GO (counted in flight), QUEUED, or REJECT with the limit that
 * said no and a Retry-After. A queue is a place to wait, not a failure: the wait is bounded by
 * what a client waits (ADMIT_DEFAULT_WAIT_MS, like the usual SDK timeouts of several minutes),
 * and only a limit of the client's own (its key's tier: share of the queue, tokens per minute)
 * or a full queue says no at once (HTTP 429). A queue that cannot drain says so instead of
 * letting its requests wait: a wait that ran out, or a model that no host serves now
 * (admit_set_no_host: nothing new queues for it and what waits leaves), is HTTP 503
 * (admit_why_status). admit_release ends a request (running: its slot frees; queued: it
 * leaves the queue — a client that went away). admit_next hands out what the driver does next:
 * start a queued request (GO) or answer one whose wait ran out (EXPIRE, a 429). A model the
 * driver blocks (admit_set_blocked: its slot is about to be switched to another model) starts
 * nothing new until unblocked.
 *
 * Order: a queue is FIFO per key; between keys waiting for the same model it is round-robin
 * (the key served least recently goes first; ties: the earliest request), so one key's burst
 * cannot starve another key of the same tier. A key at its own cap is skipped, not blocking
 * the others behind it.
 */
#ifndef MESH_ADMIT_H
#define MESH_ADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ADMIT_MAX_MODELS 256
#define ADMIT_MAX_KEYS 256
#define ADMIT_MAX_TIERS 16
#define ADMIT_MAX_ENTRIES 8192 /* requests running or queued, every model together */
#define ADMIT_NAME_MAX 128
#define ADMIT_TPM_BUCKETS 60         /* one-second buckets of the tokens-per-minute window */
#define ADMIT_DEFAULT_WAIT_MS 600000 /* 10 min: the OpenAI SDK's own request timeout */
#define ADMIT_NO_HOST_RETRY_S 5      /* Retry-After when no host serves the model */

typedef struct {
    char name[ADMIT_NAME_MAX];
    unsigned max_concurrent; /* per key of this tier; 0: no cap of its own */
    unsigned queue_share;    /* percent of a model's queue one key may fill; 0: 100 */
    uint64_t tpm;            /* completion tokens per minute per key; 0: unlimited */
} admit_tier_t;

typedef struct {
    char name[ADMIT_NAME_MAX];
    int tier;
    unsigned in_flight, queued;
    uint64_t last_served; /* round-robin stamp (0: never) */
    uint64_t admitted, rejected;
    uint64_t tok[ADMIT_TPM_BUCKETS]; /* tokens per second bucket */
    uint64_t tok_sec[ADMIT_TPM_BUCKETS];
} admit_key_t;

typedef struct {
    char name[ADMIT_NAME_MAX];
    unsigned cap; /* requests in flight; 0: no cap */
    unsigned in_flight, queued;
    bool blocked;
    bool no_host; /* nothing serves the model now: its queue cannot drain */
    uint64_t admitted, rejected, expired, cancelled;
    uint64_t wait_ms_total; /* time queued requests waited before they started */
    uint64_t service_ms;    /* moving average of a request's time in flight (Retry-After) */
} admit_model_t;

typedef enum { ADMIT_FREE = 0, ADMIT_QUEUED_E, ADMIT_RUNNING } admit_estate_t;

typedef struct {
    uint64_t id; /* 0: free */
    admit_estate_t state;
    int model, key;
    uint64_t seq;   /* arrival order */
    uint64_t since; /* enqueued or started */
} admit_entry_t;

typedef enum { ADMIT_GO = 0, ADMIT_QUEUED = 1, ADMIT_REJECT = 2 } admit_verdict_t;

/* Which limit said no (the error's code). */
typedef enum {
    ADMIT_WHY_NONE = 0,
    ADMIT_WHY_QUEUE_FULL,     /* the model's queue is full */
    ADMIT_WHY_KEY_QUEUE_FULL, /* the key's share of the queue is used up */
    ADMIT_WHY_TPM,            /* the key's tokens per minute are used up */
    ADMIT_WHY_QUEUE_TIMEOUT,  /* waited max_wait_ms without a slot */
    ADMIT_WHY_NO_SPACE,       /* ADMIT_MAX_ENTRIES */
    ADMIT_WHY_NO_HOST,        /* no host serves the model now (admit_set_no_host) */
} admit_why_t;

typedef struct {
    admit_why_t why;
    unsigned retry_after_s; /* >= 1 */
} admit_reject_t;

typedef enum { ADMIT_ACT_GO = 1, ADMIT_ACT_EXPIRE = 2 } admit_act_kind_t;

typedef struct {
    admit_act_kind_t kind;
    uint64_t id;
    int model, key;
    uint64_t waited_ms;
    admit_why_t why;        /* EXPIRE: ADMIT_WHY_QUEUE_TIMEOUT or ADMIT_WHY_NO_HOST */
    unsigned retry_after_s; /* EXPIRE */
} admit_action_t;

typedef struct {
    unsigned queue_len; /* per model */
    uint64_t max_wait_ms;
    admit_tier_t tiers[ADMIT_MAX_TIERS];
    size_t n_tiers;
    admit_key_t keys[ADMIT_MAX_KEYS];
    size_t n_keys;
    admit_model_t models[ADMIT_MAX_MODELS];
    size_t n_models;
    admit_entry_t entries[ADMIT_MAX_ENTRIES];
    uint64_t next_id, next_seq, serve_stamp;
} admit_t;

/* Tier 0 "default" (no limits) and key 0 "anonymous" of tier 0 exist from the start. */
void admit_init(admit_t *a, unsigned queue_len, uint64_t max_wait_ms);
/* Returns the tier's index, or -EEXIST / -ENOSPC / -EINVAL. Adding "default" redefines tier 0. */
int admit_add_tier(admit_t *a, const admit_tier_t *t);
int admit_find_tier(const admit_t *a, const char *name);
/* Returns the key's index, or -ENOSPC / -EINVAL (unknown tier). */
int admit_add_key(admit_t *a, const char *name, int tier);
/* The model's index (added on first use with cap), or -ENOSPC. An existing model's cap is
 * updated to cap. */
int admit_model(admit_t *a, const char *name, unsigned cap);
int admit_find_model(const admit_t *a, const char *name);

/* A request of key for model. GO: *id is counted in flight; QUEUED: *id waits (a later
 * ADMIT_ACT_GO or ADMIT_ACT_EXPIRE names it); REJECT: *rej says why, *id is 0. */
admit_verdict_t admit_try(admit_t *a, int model, int key, uint64_t now, uint64_t *id,
                          admit_reject_t *rej);
/* A request ends (running), or leaves the queue (its client went away). Unknown ids: nothing. */
void admit_release(admit_t *a, uint64_t id, uint64_t now);
/* Completion tokens a key used (its TPM window). */
void admit_tokens(admit_t *a, int key, uint64_t tokens, uint64_t now);
/* The tokens a response generated, from the last bytes of its body (tail): the largest of the
 * last "predicted_n" (llama-server's timings, on every endpoint, streamed or not),
 * "completion_tokens", "output_tokens" (Anthropic, Responses) and "tokens_predicted", times
 * `choices` (the request's "n": llama-server reports one choice). A stream cut before its end
 * reports none: then each "data:" event of the tail counts as one token. */
uint64_t admit_tail_tokens(const char *tail, size_t len, unsigned choices);
/* A blocked model starts nothing from its queue (expiry still applies). */
void admit_set_blocked(admit_t *a, int model, bool blocked);
/* A model that no host serves now: a request that would queue is refused (ADMIT_WHY_NO_HOST)
 * and admit_next expires the queued ones; one that may start at once still goes (its own route
 * answers it). Returns whether the flag changed. */
bool admit_set_no_host(admit_t *a, int model, bool no_host);
/* The next thing to do, or false. Call until false after every event. */
bool admit_next(admit_t *a, uint64_t now, admit_action_t *out);
/* When the earliest queued request's wait runs out (UINT64_MAX: nothing queued). */
uint64_t admit_deadline(const admit_t *a);
/* When the model's oldest queued request arrived (UINT64_MAX: none queued). */
uint64_t admit_oldest_queued(const admit_t *a, int model);
/* The key's tokens in the current window. */
uint64_t admit_key_tokens(const admit_t *a, int key, uint64_t now);
const char *admit_why_code(admit_why_t w);
/* The HTTP status of a refusal: 429 for the client's own limits and a full queue, 503 for a
 * queue that cannot drain (its wait ran out, no host). */
unsigned admit_why_status(admit_why_t w);
/* The entry of id, or NULL. */
const admit_entry_t *admit_entry(const admit_t *a, uint64_t id);

#endif

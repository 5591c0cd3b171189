/* metrics — the node's Prometheus registry (pure: no I/O, no clock; times are passed in).
 *
 * Typed families with fixed label sets and bounded cardinality: at most METRICS_MAX_MODELS
 * distinct model labels (later ones are counted under model="_other"), METRICS_MAX_PEERS peers,
 * a fixed list of endpoint labels (api_routes.h's, and ollama.h's for Ollama's API) and status
 * codes. Drivers report events (a request finished, a load began or ended, queue changes,
 * tunnel bytes) and metrics_render writes the text exposition format (version 0.0.4) with
 * mesh_llm_ names, base units (_seconds, _bytes) and _total counters.
 *
 * A request's facts travel with it (metrics_req_t, embedded in the HTTP request): the API sets
 * the model, endpoint and path, the proxy or tunnel the route, timings and token counts, and the
 * HTTP server reports it once when the response ends. */
#ifndef MESH_METRICS_H
#define MESH_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define METRICS_MAX_MODELS 32
#define METRICS_MAX_PEERS 64
#define METRICS_MODEL_LEN 128
#define METRICS_PEER_LEN 65
#define METRICS_N_ENDPOINTS 17 /* api_routes.h labels, ollama.h's, "other" */
#define METRICS_N_CODES 17     /* the usual statuses + "other" */
#define METRICS_HIST_MAX 16

typedef enum { METRICS_ROUTE_LOCAL = 0, METRICS_ROUTE_TUNNEL = 1 } metrics_route_t;

/* What the relay (node/relay.h) did for a routed request. */
typedef enum {
    METRICS_RELAY_RETRY = 0,          /* re-sent whole to another host */
    METRICS_RELAY_FIRST_BYTE_TIMEOUT, /* a host sent nothing in time */
    METRICS_RELAY_FAILOVER,           /* a stream's host died mid-stream */
    METRICS_RELAY_RESUMED,            /* ... the stream went on on another replica */
    METRICS_RELAY_FAILED,             /* ... it ended with an error event instead */
    METRICS_N_RELAY
} metrics_relay_t;

#define METRICS_MAX_KEYS 64 /* API key labels (admission); later keys count as "_other" */
#define METRICS_KEY_LEN 64
#define METRICS_N_REASONS 5 /* admission rejection reasons (admit_why_code) */

/* One request, as it is handled (all times are monotonic ns, 0 = did not happen). */
typedef struct {
    char model[METRICS_MODEL_LEN]; /* "" = not a model request: not counted */
    const char *endpoint;          /* api_routes.h or ollama.h label, NULL = "other" */
    const char *path;              /* the path the client called (a static string), NULL unknown */
    metrics_route_t route;
    char peer[METRICS_PEER_LEN];     /* tunnel: the node it went to */
    int status;                      /* HTTP status sent to the client, 0 none (cut off) */
    uint64_t start_ns;               /* request received */
    uint64_t queue_ns;               /* total time spent in admission queues */
    uint64_t dispatch_ns;            /* handed to llama-server or to the tunnel */
    uint64_t head_ns;                /* upstream response head arrived */
    uint64_t first_body_ns;          /* first upstream body byte */
    int64_t tokens_in, tokens_out;   /* -1 unknown */
    double per_token_s;              /* generation time per output token, 0 unknown */
    int64_t draft_n, draft_accepted; /* speculative decoding (llama-server timings), -1 none */
    bool reported;
} metrics_req_t;

typedef struct {
    uint64_t counts[METRICS_HIST_MAX + 1]; /* per bucket (not cumulative); last = +Inf */
    double sum;
    uint64_t count;
} metrics_hist_t;

typedef struct {
    char id[METRICS_PEER_LEN];
    char state[16]; /* bounded set of the mesh's peer states */
    double rtt_s;   /* < 0 unknown */
    char path[12];  /* how it is reached: direct | mapped | punched | relayed ("" none) */
} metrics_peer_t;

typedef struct {
    char models[METRICS_MAX_MODELS][METRICS_MODEL_LEN];
    size_t n_models;
    /* index METRICS_MAX_MODELS = "_other" */
    uint64_t requests[METRICS_MAX_MODELS + 1][METRICS_N_ENDPOINTS][METRICS_N_CODES][2];
    uint64_t tokens[METRICS_MAX_MODELS + 1][2]; /* in, out */
    uint64_t draft[METRICS_MAX_MODELS + 1][2];  /* drafted, accepted (speculative decoding) */
    metrics_hist_t ttft[METRICS_MAX_MODELS + 1];
    metrics_hist_t per_token[METRICS_MAX_MODELS + 1];
    metrics_hist_t duration[METRICS_MAX_MODELS + 1];
    int64_t in_flight[METRICS_MAX_MODELS + 1];
    int64_t queue_depth[METRICS_MAX_MODELS + 1];
    metrics_hist_t queue_wait[METRICS_MAX_MODELS + 1];
    uint64_t queue_rejected[METRICS_MAX_MODELS + 1];
    uint64_t loads[METRICS_MAX_MODELS + 1][2]; /* ok, failed */
    uint64_t load_started_ns[METRICS_MAX_MODELS + 1];
    metrics_hist_t load_time[METRICS_MAX_MODELS + 1];
    uint64_t unloads[METRICS_MAX_MODELS + 1];
    metrics_peer_t peers[METRICS_MAX_PEERS];
    size_t n_peers;
    uint64_t relay[METRICS_MAX_MODELS + 1][METRICS_N_RELAY];
    /* 429s by API key (name, tier) and reason; index METRICS_MAX_KEYS = "_other" */
    char keys[METRICS_MAX_KEYS][2][METRICS_KEY_LEN];
    size_t n_keys;
    uint64_t key_rejected[METRICS_MAX_KEYS + 1][METRICS_N_REASONS];
    uint64_t tunnel_bytes[2]; /* rx, tx */
    uint64_t download_bytes;
    uint64_t rpc_bytes[2];   /* TUNNEL_RPC, host side: to workers, from workers */
    uint64_t rpc_turns;      /* TUNNEL_RPC request/response turns, host side */
    uint64_t request_parses; /* inference request bodies parsed (meshstat_parse_body) */
} metrics_t;

void metrics_init(metrics_t *m);
/* Every call that counts takes m NULL as "no registry": nothing is counted (a module run
 * without a node's meshstat, in tests). */
/* A fresh request record (start: when it arrived). */
void metrics_req_init(metrics_req_t *r, uint64_t start_ns);

/* The request ended at now_ns (status in r->status); counted once, only if r->model is set. */
void metrics_request_done(metrics_t *m, metrics_req_t *r, uint64_t now_ns);

/* Token counts and per-token time from the end of a response body (llama-server's "timings",
 * with its speculative decoding counts draft_n and draft_n_accepted when a draft model runs,
 * else OpenAI "usage" {prompt_tokens, completion_tokens} or Anthropic/Responses "usage"
 * {input_tokens, output_tokens}); the last object in tail wins. Returns true if found. */
bool metrics_parse_usage(const char *tail, size_t len, metrics_req_t *r);

/* The speculative decoding totals of a model served here: tokens drafted and accepted. */
void metrics_draft_totals(const metrics_t *m, const char *model, uint64_t *drafted,
                          uint64_t *accepted);

/* Admission (fed by the queue): requests in flight and waiting per model, each wait, each
 * rejection. */
void metrics_in_flight_add(metrics_t *m, const char *model, int delta);
void metrics_queue_depth_set(metrics_t *m, const char *model, unsigned depth);
void metrics_queue_wait(metrics_t *m, const char *model, double seconds);
void metrics_queue_rejected(metrics_t *m, const char *model);
/* A 429 for API key `key` of `tier`; reason is admit_why_code's string (queue_full,
 * key_queue_share_exceeded, tokens_per_minute_exceeded, queue_timeout, too_many_requests;
 * anything else counts as too_many_requests). */
void metrics_key_rejected(metrics_t *m, const char *key, const char *tier, const char *reason);
/* The relay's retries, first-byte timeouts and mid-stream failovers, per model. */
void metrics_relay(metrics_t *m, const char *model, metrics_relay_t what);

/* Model servers: a load began / ended (its time is observed), an unload was decided. */
void metrics_load_begin(metrics_t *m, const char *model, uint64_t now_ns);
void metrics_load_end(metrics_t *m, const char *model, bool ok, uint64_t now_ns);
void metrics_unload(metrics_t *m, const char *model);

/* The mesh's peers as of now (replaces the previous list; at most METRICS_MAX_PEERS). */
void metrics_set_peers(metrics_t *m, const metrics_peer_t *peers, size_t n);
/* Bytes through TUNNEL_HTTP streams: rx = answers received for forwarded requests, tx =
 * answers sent for tunnelled requests served here. */
void metrics_tunnel_bytes(metrics_t *m, bool tx, uint64_t n);
/* The split host's llama.cpp RPC through TUNNEL_RPC streams, as of now (totals since start):
 * bytes to and from its workers and request/response turns (round trips waited for). */
void metrics_set_rpc_tunnel(metrics_t *m, uint64_t to_workers, uint64_t from_workers,
                            uint64_t turns);

/* The text exposition; node_id labels mesh_llm_node_info. 0 or -ENOSPC/-ENOMEM. */
int metrics_render(const metrics_t *m, const char *node_id, const char *version, buf_t *out);

/* Response headers of a proxied answer: X-Mesh-Node, X-Mesh-Route (unless route is NULL) and
 * Server-Timing (queue, load, first byte, hops) as "Name: value\r\n" lines. now_ns: when the
 * head is sent. Returns the length written, or -ENOSPC. */
int metrics_resp_headers(const metrics_req_t *r, const char *node_id, const char *route, int hops,
                         uint64_t now_ns, char *out, size_t outlen);

#endif

/* router — where a request for a model this node does not serve goes (pure: no I/O, no clock).
 *
 * Input: what each live peer says about the model (typed facts, read from its verified
 * announcement by the planner's view), whether this node itself asked for the model, and the
 * request's facts (the model type the endpoint needs, a stickiness key, a rotation counter).
 * Output: a verdict and, to forward, the candidates in the order to try them:
 *  - peers whose llama-server for the model is ready; when none is, the peers that would take
 *    it — a host still starting it (it holds the request until ready, bounded) or a node with
 *    the file (it loads it on demand);
 *  - the first candidate is picked by the stickiness key (the request's "user", else
 *    "session_id", else its first message: one conversation stays on one host for its KV
 *    cache), else by rotation; the others follow in ring order, so the second is the retry
 *    candidate for a failure before the first response byte.
 * A request with images goes only to peers that serve the model with a vision projector.
 * Verdicts: not known in the mesh (the caller answers 404), the endpoint needs another model type
 * (400), images for a model no node serves with a vision projector (400), known but no node can
 * serve it now (503, with the status: loading / unloaded / requested without a file), or
 * forward. */
#ifndef MESH_ROUTER_H
#define MESH_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ROUTER_MAX_CANDIDATES 16

typedef struct {
    const char *id;
    bool ready;    /* serves the model and its llama-server answers (http_ready) */
    bool starting; /* runs the model's llama-server (solo or split host), not ready yet */
    bool member;   /* serves the model in some other role (worker, waiting) */
    bool has_file; /* has the GGUF on disk: would load it on request */
    bool requested;
    const char *type; /* "llm" | "embedding" | "reranking" from its file, NULL unknown */
    bool vision;      /* serves it with a vision projector (announced) */
} router_peer_t;

typedef enum {
    ROUTER_UNKNOWN = 0,   /* no node knows the model */
    ROUTER_TYPE_MISMATCH, /* the endpoint needs another type (out->type says which it is) */
    ROUTER_NO_FILE,       /* requested in the mesh, but no node has its file */
    ROUTER_UNAVAILABLE,   /* known, nobody can take it now (out->loading says why) */
    ROUTER_NO_VISION,     /* the request has images and no node serves the model with a
                             vision projector (400) */
    ROUTER_FORWARD,       /* out->order: peers to try, in order */
} router_verdict_t;

typedef struct {
    router_verdict_t verdict;
    bool loading;     /* some node is loading it */
    const char *type; /* the model's type when known (borrowed from a peer fact) */
    size_t order[ROUTER_MAX_CANDIDATES]; /* indexes into peers */
    size_t n;
} router_result_t;

typedef struct {
    int needs;         /* mm_type_t the endpoint needs, -1 any */
    bool has_key;      /* a stickiness key (request.h's router_key); else rotate */
    uint64_t key;      /* its FNV-1a hash */
    uint64_t rotation; /* the caller's counter for requests without a key */
    bool images;       /* the request carries images (vision.h): only peers with vision */
} router_request_t;

/* Decide. peers may be NULL when n_peers is 0; self_requested: this node asked for the model. */
void router_route(const router_peer_t *peers, size_t n_peers, bool self_requested,
                  const router_request_t *rq, router_result_t *out);

#endif

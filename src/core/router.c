/* router — see router.h. */
#include "router.h"

#include <stdio.h>
#include <string.h>

static const char *const TYPES[] = {"llm", "embedding", "reranking"};

void router_route(const router_peer_t *peers, size_t n_peers, bool self_requested,
                  const router_request_t *rq, router_result_t *out)
{
    memset(out, 0, sizeof *out);
    bool known = self_requested, requested = self_requested;
    size_t ready[ROUTER_MAX_CANDIDATES], take[ROUTER_MAX_CANDIDATES];
    size_t n_ready = 0, n_take = 0;
    bool blind = false;
    for (size_t i = 0; i < n_peers; i++) {
        const router_peer_t *p = &peers[i];
        known |= p->ready || p->starting || p->member || p->has_file || p->requested;
        requested |= p->requested;
        out->loading |= (p->starting || p->member) && !p->ready;
        if (p->has_file && p->type) out->type = p->type;
        bool candidate = p->ready || p->starting || p->has_file;
        if (candidate && rq && rq->images && !p->vision) {
            blind = true; /* it would serve the model, but cannot read images */
            continue;
        }
        if (p->ready) {
            if (n_ready < ROUTER_MAX_CANDIDATES) ready[n_ready++] = i;
        } else if (p->starting || p->has_file) {
            /* a host still starting holds the request until it is ready (bounded); a node with
             * the file loads it on demand */
            if (n_take < ROUTER_MAX_CANDIDATES) take[n_take++] = i;
        }
    }
    if (!known) {
        out->verdict = ROUTER_UNKNOWN;
        return;
    }
    if (out->type && rq && rq->needs >= 0 && rq->needs < 3 &&
        strcmp(out->type, TYPES[rq->needs]) != 0) {
        out->verdict = ROUTER_TYPE_MISMATCH;
        return;
    }
    const size_t *cand = n_ready ? ready : take;
    size_t nc = n_ready ? n_ready : n_take;
    if (nc == 0 && blind) {
        out->verdict = ROUTER_NO_VISION;
        return;
    }
    if (nc == 0) {
        out->verdict =
            requested && !out->loading && !out->type ? ROUTER_NO_FILE : ROUTER_UNAVAILABLE;
        return;
    }
    size_t first =
        rq && rq->has_key ? (size_t)(rq->key % nc) : (size_t)((rq ? rq->rotation : 0) % nc);
    for (size_t k = 0; k < nc; k++)
        out->order[out->n++] = cand[(first + k) % nc];
    out->verdict = ROUTER_FORWARD;
}

/* relay — a routed request's exchange with its host, with failure semantics (DESIGN §4 routing).
 *
 * route.c picks the hosts (core/route_decide.h); the relay sends the request through a
 * TUNNEL_HTTP stream (net/tunnel_call.h) and answers the client:
 *  - first byte: a ready host that sends nothing within resume_first_byte_ms(
 *    MESH_LLM_FIRST_BYTE_MS [30000], MESH_LLM_FIRST_BYTE_MS_PER_KB [2000], body size) is given
 *    up (its stream reset, so it stops) and the request goes to the next host, once; a host
 *    that fails before answering is also retried once; a host whose admission queue holds the
 *    request says so (the queued signal, net/tunnel.h) and each signal starts the deadline again;
 *  - a streamed /v1/chat/completions or /v1/completions (core/resume.h) is parsed event by
 *    event (core/sse.h, bounded) and re-sent to the client as a chunked text/event-stream;
 *    when its host dies before "[DONE]" the request goes to another replica with the text
 *    generated so far appended and its events are spliced in with the first stream's id, once;
 *    where that is impossible (no other replica, a tool call streamed, n > 1, ...) the client
 *    gets an SSE error event and a proper end ("data: [DONE]", last chunk) — never a silent cut;
 *  - other streamed responses pass through byte for byte (cut when the host dies);
 *  - a response that is not streamed is held (up to RELAY_WHOLE_MAX) until complete, so a host
 *    that dies in the middle costs one whole retry on another host instead of a broken answer.
 * Counters: relay_status_json() (in /api/status under "routing"). */
#ifndef MESH_RELAY_H
#define MESH_RELAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "httpd.h"
#include "identity.h"
#include "affinity.h"
#include "mesh.h"
#include "route_decide.h"

#define RELAY_MAX_HOSTS 16
#define RELAY_WHOLE_MAX (8u << 20)

typedef struct {
    char id[ID_HEX_LEN + 1];
    bool ready; /* its llama-server answers: the first-byte deadline applies */
} relay_host_t;

typedef struct {
    uint64_t requests;            /* routed through a relay */
    uint64_t first_byte_timeouts; /* a host sent nothing in time */
    uint64_t retries;             /* re-sent whole to another host (before the first byte or
                                     a non-streamed answer cut in the middle) */
    uint64_t failovers;           /* a stream whose host died mid-stream */
    uint64_t failovers_resumed;   /* ... continued on another replica */
    uint64_t failovers_refused;   /* ... ended with an error event instead */
    uint64_t tokens_resumed;      /* content chunks received from continuations */
    uint64_t spilled; /* sent past the hashed host, or away from this node's full server, by load */
} relay_stats_t;

struct tunables;

/* What the node's relays share: their counters, the prefix-affinity memory and their settings.
 * Owned by the node (app/main.c), handed to the routing drivers; zeroed is ready (tun NULL: the
 * defaults). */
#define RELAY_FLIGHT_HOSTS 64 /* hosts with this node's requests in flight, counted */

typedef struct {
    char id[ID_HEX_LEN + 1];
    uint32_t n; /* this node's requests there, not finished yet (0: a free entry) */
} relay_flight_t;

typedef struct {
    relay_stats_t stats;
    affinity_t affinity;
    relay_flight_t flight[RELAY_FLIGHT_HOSTS]; /* the spill-over's facts (route_decide) */
    /* MESH_LLM_FIRST_BYTE_MS, _FIRST_BYTE_MS_PER_KB, _RETRY_DIAL_MS, _PREFIX_AFFINITY (the node's
     * config_t.tun, borrowed) */
    const struct tunables *tun;
} relay_ctx_t;

/* Send req to hosts[0] (then the others, in order, for retries). Returns 0 when the relay took
 * the request (it answers it), or a negative errno when no host could be reached (req not
 * answered). With no host connected yet (the mesh dials them: a member that just came up, a
 * hole punch or a relay under way) the relay takes it and waits MESH_LLM_CONNECT_WAIT_MS for the
 * first connection (then 503 host_unreachable), unless no_wait (relay_io_t). Counted in rc. */
int relay_start(relay_ctx_t *rc, mesh_t *mesh, const char *model, httpd_req_t *req,
                const relay_host_t *hosts, size_t n, bool no_wait);

/* How the relay reaches hosts: the connection to a host now (NULL: none; the mesh starts a dial)
 * and a host that failed (checked at once). relay_start uses the mesh's; tests give their own. */
typedef struct {
    tp_conn_t *(*conn)(void *data, const char *id);
    void (*suspect)(void *data, const char *id);
    void *data;
    /* no host connected: answer at once (the caller waits for its dials itself) instead of
     * waiting MESH_LLM_CONNECT_WAIT_MS for the first connection */
    bool no_wait;
} relay_io_t;
int relay_start_io(relay_ctx_t *rc, const relay_io_t *io, const char *model, httpd_req_t *req,
                   const relay_host_t *hosts, size_t n);

/* Count req in flight at host id until it finishes (httpd's on_finish, chained: whoever
 * watched it before is told after); call before handing it over (a relay may end it at once).
 * Not counted when RELAY_FLIGHT_HOSTS other hosts have requests in flight or out of memory. */
void relay_track(relay_ctx_t *rc, httpd_req_t *req, const char *id);
/* Not handed over after all (relay_start refused it): req no longer counted in flight (a no-op
 * when relay_track did not count it). */
void relay_untrack(httpd_req_t *req);
/* This node's requests in flight at host id (relay_track). */
uint32_t relay_inflight(const relay_ctx_t *rc, const char *id);
/* Call f(id, n, data) for each host with this node's requests in flight (n > 0). */
void relay_each_inflight(const relay_ctx_t *rc, void (*f)(const char *id, uint32_t n, void *data),
                         void *data);

/* Whether prefix affinity (core/affinity.h, rc's memory; route.c applies it) is on
 * (MESH_LLM_PREFIX_AFFINITY, tunables.h's 0/1 rule; default on). */
bool relay_prefix_affinity(const relay_ctx_t *rc);
/* Prefix affinity's facts of a decision, for active and passive nodes alike: in->no_affinity
 * (rc NULL or affinity off) and in->affinity_host (where in->rq's prefix went last, among at
 * least two hosts). Reads in->rq and in->n_hosts. */
void relay_affinity_input(relay_ctx_t *rc, rd_input_t *in);
/* A forward decided by route_decide (d): count its affinity hit or miss and its spill, and
 * remember order[0] for in->rq's prefix (d->remember). rc NULL: nothing. */
void relay_affinity_note(relay_ctx_t *rc, const rd_input_t *in, const rd_decision_t *d);

void relay_stats(const relay_ctx_t *rc, relay_stats_t *out);
/* The "routing" object of /api/status (rc NULL: zeros). */
json_t *relay_status_json(const relay_ctx_t *rc);

#endif

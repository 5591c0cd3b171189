/* Port mapping of the node's QUIC UDP port on the home router: NAT-PMP first (to the default
 * gateway, libnatpmp), then UPnP-IGD (SSDP discovery, libminiupnpc). The external port asked for
 * is the local one; whatever the router grants is reported. The mapping is renewed at half its
 * lease, retried with backoff while no router answers (bounded, core/portmap_sched.h), and
 * deleted by portmap_stop. Every library call (they block) runs in libuv's threadpool, one at a
 * time per portmap; results come back on the loop thread. */
#ifndef MESH_PORTMAP_H
#define MESH_PORTMAP_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct portmap portmap_t;

/* On the loop thread, each time the mapping changes:
 *  - external "a.b.c.d:port" and via "natpmp" | "upnp": a mapping was made, or its address
 *    changed at a renewal; private_ext: the router's external address is itself not public
 *    (RFC 1918, 100.64/10, ...): the router is behind another NAT, the address is not reachable
 *    from the internet;
 *  - external NULL, via "natpmp" | "upnp": the mapping made by that method was lost (its
 *    renewals failed until the lease ran out); a new round follows;
 *  - external NULL, via NULL: no router answered (once, after the first round in which none
 *    did; retries go on unless that round was the last of max_rounds).
 * Never after portmap_stop. */
typedef void (*portmap_change_cb)(void *data, const char *external, const char *via,
                                  bool private_ext);

typedef struct {
    uint16_t port;          /* the local UDP port to map (required) */
    uint32_t lease_s;       /* asked for; 0: 3600 */
    uint32_t discover_ms;   /* UPnP SSDP discovery, at most; 0: 2000 */
    uint32_t retry_base_ms; /* after a round with no answer, doubling; 0: 30 s (cap 15 min) */
    uint32_t max_rounds;    /* rounds with no answer in a row before giving up; 0: 8 */
    portmap_change_cb on_change;
    void *data;
} portmap_opts_t;

/* 0 and *out, or -EINVAL (no port, no callback), -ENOMEM. The first attempt starts at once. */
int portmap_start(portmap_t **out, uv_loop_t *loop, const portmap_opts_t *o);
/* Deletes the mapping (if any) and frees pm. done(data) is called once: when the deletion is
 * answered, or after about 2 s whichever comes first (pm is freed when its last threadpool job
 * returns, which keeps the loop alive until then). Call it once; pm is not to be used after. */
void portmap_stop(portmap_t *pm, void (*done)(void *data), void *data);

#endif

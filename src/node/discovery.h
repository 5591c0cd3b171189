/* discovery — public mesh listings on Nostr relays (issue 16): what `mesh-llm discover`,
 * GET /api/discover, --auto and the publish watchdog read, and how --publish writes.
 *
 * One relay pool (nostr_pool.h) subscribed to every mesh-llm listing (kind 31990, #t
 * mesh-llm); each verified event that decodes as a live listing (listing.h) enters a set that
 * keeps the newest listing per mesh; expired listings leave it. Publishing signs a listing with
 * this node's Nostr key and hands it to the pool (sent now and on every reconnect). */
#ifndef MESH_DISCOVERY_H
#define MESH_DISCOVERY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "listing.h"

typedef struct discovery discovery_t;

struct tunables;
/* Start listening on the relays. on_change: a listing arrived or a relay settled. tun:
 * MESH_LLM_NOSTR_* (borrowed until discovery_close). */
int discovery_start(discovery_t **out, uv_loop_t *loop, const char *const *urls, size_t n,
                    const struct tunables *tun, void (*on_change)(void *data), void *data);
void discovery_stop(discovery_t *d);
/* Every relay answered (EOSE) or failed at least once since the start. */
bool discovery_settled(const discovery_t *d);
/* Ask the relays again for the stored listings (nostr_pool_refresh), as of now_s. */
void discovery_refresh(discovery_t *d, int64_t now_s);
/* At least one relay answered a subscription (EOSE) since the start. */
bool discovery_reached(const discovery_t *d);
/* The live listings (expired dropped at now_s), filtered by region and model ("" or NULL: any),
 * newest first; returns how many were written to out (at most max). */
size_t discovery_list(discovery_t *d, int64_t now_s, const char *region, const char *model,
                      mesh_listing_t *out, size_t max);
/* The newest live listing of mesh_id (copied into out), false when none. */
bool discovery_find(discovery_t *d, int64_t now_s, const char *mesh_id, mesh_listing_t *out);
/* {"meshes":[listing…],"searching":bool,"relays":[…]} */
json_t *discovery_json(discovery_t *d, int64_t now_s, const char *region, const char *model);
/* One listing as JSON (API and CLI). */
json_t *listing_json(const mesh_listing_t *l, int64_t now_s);
/* Sign l with seckey (created now_s, expiring now_s + ttl_s) and publish it. */
int discovery_publish(discovery_t *d, const mesh_listing_t *l, const uint8_t seckey[32],
                      int64_t now_s, int64_t ttl_s);
void discovery_unpublish(discovery_t *d);
/* Relays that accepted the published listing on their current connection; *open: relays
 * connected now, *total: relays configured. */
size_t discovery_accepted(const discovery_t *d, size_t *open, size_t *total);

#endif

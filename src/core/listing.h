/* listing — a mesh's public listing on Nostr (pure).
 *
 * A NIP-89 "handler information" event, kind 31990, parameterized-replaceable on its "d" tag,
 * which is the mesh id. Tags: ["d", mesh id], ["t", "mesh-llm"] (what discovery filters on),
 * ["region", R] when set, ["expiration", unix s] (NIP-40). Content: a JSON object
 *   {"v":1,"name","mesh_id","region","node_count","mem_total","mem_free",
 *    "models":[{"name","status","served"}],"version","token","node"}
 * with mem_* in bytes, status ready|loading|unloaded|on_disk|needs_capacity, token the mesh's
 * invite token (its mesh must be the listing's), node the publishing node's id (the watchdog's
 * one-publisher rule).
 *
 * listing_from_event checks all of it (and refuses listings created more than 10 minutes in the
 * future or living more than a day); a listing set keeps the newest live listing per mesh. */
#ifndef MESH_LISTING_H
#define MESH_LISTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "identity.h"
#include "nostr_event.h"

#define LISTING_KIND 31990
#define LISTING_TAG "mesh-llm"
#define LISTING_MAX_MODELS 16
#define LISTING_NAME_MAX 128
#define LISTING_REGION_MAX 32
#define LISTING_MODEL_MAX 128
#define LISTING_VERSION_MAX 32
#define LISTING_MAX_SKEW_S 600  /* created_at at most this far in the future */
#define LISTING_MAX_TTL_S 86400 /* expiration at most this long after created_at */

typedef struct {
    char name[LISTING_MODEL_MAX];
    char status[16];
    bool served; /* some node serves it (status ready or loading) */
} listing_model_t;

typedef struct {
    char mesh_id[MESH_ID_MAX + 1];
    char name[LISTING_NAME_MAX + 1];
    char region[LISTING_REGION_MAX + 1];
    char version[LISTING_VERSION_MAX + 1];
    char token[TOKEN_MAX_LEN + 1];
    char node[ID_HEX_LEN + 1]; /* the publishing node */
    uint32_t node_count;
    uint64_t mem_total, mem_free;
    listing_model_t models[LISTING_MAX_MODELS];
    size_t n_models;
    /* from the event */
    int64_t created_at, expires_at;
    char publisher[NOSTR_HEX32]; /* the publisher's Nostr public key */
    char event_id[NOSTR_HEX32];
} mesh_listing_t;

/* The unsigned event of a listing: created_at = now_s, expiration = now_s + ttl_s. */
int listing_to_event(const mesh_listing_t *l, int64_t now_s, int64_t ttl_s, nostr_event_t *ev);
/* Decode and validate a (signature-checked) event at time now_s: -EINVAL with err for a listing
 * that is not ours, malformed, or expired (-ETIME). */
int listing_from_event(const nostr_event_t *ev, int64_t now_s, mesh_listing_t *l, char *err,
                       size_t errlen);
/* Whether the listing serves or holds model (empty: any). */
bool listing_has_model(const mesh_listing_t *l, const char *model);

#define LISTING_SET_MAX 256

/* The live listings seen, newest per mesh id (the collection discovery answers with). */
typedef struct {
    mesh_listing_t *items; /* LISTING_SET_MAX, allocated by listing_set_init */
    size_t n;
} listing_set_t;

int listing_set_init(listing_set_t *s);
void listing_set_free(listing_set_t *s);
/* Keep l if its mesh is new or it is newer than the one kept; false when dropped (older, or
 * the set is full). */
bool listing_set_add(listing_set_t *s, const mesh_listing_t *l);
/* Drop listings expired at now_s. */
void listing_set_expire(listing_set_t *s, int64_t now_s);
/* The listing of mesh_id, or NULL. */
const mesh_listing_t *listing_set_find(const listing_set_t *s, const char *mesh_id);

#endif

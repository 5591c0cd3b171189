/* nostr_pool — connections to several Nostr relays at once, on the libuv loop.
 *
 * Each relay is a WebSocket (ws_client.h) that reconnects with backoff (1 s doubling to 60 s;
 * MESH_LLM_NOSTR_RETRY_MS sets the base). The pool holds one subscription (a REQ, sent again on
 * every reconnect) and one event to publish (sent on every connect until replaced: a listing
 * republished by its owner). Every message is parsed by nostr_msg (bounded); events reach the
 * owner only when their id and signature check out and their subscription is ours. A relay that
 * sends more than NOSTR_POOL_MAX_BAD malformed messages or badly signed events, or more than
 * NOSTR_POOL_MAX_EVENTS events on one connection, is dropped (and retried later).
 *
 * The relay list: --nostr-relay URL (repeatable), else $MESH_LLM_NOSTR_RELAYS (comma-separated;
 * "none" = no relays), else the built-in default list of public relays. */
#ifndef MESH_NOSTR_POOL_H
#define MESH_NOSTR_POOL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "nostr_msg.h"

#define NOSTR_POOL_MAX 16
#define NOSTR_POOL_MAX_BAD 32
#define NOSTR_POOL_MAX_EVENTS 4096

typedef struct nostr_pool nostr_pool_t;

typedef struct {
    /* a verified event of our subscription */
    void (*on_event)(void *data, const nostr_event_t *ev);
    /* a relay finished its stored events (EOSE) or failed: nostr_pool_settled may have changed */
    void (*on_progress)(void *data);
    void *data;
} nostr_pool_cb_t;

/* The relays to use: cli (the --nostr-relay URLs, may be empty), else env (the value of
 * $MESH_LLM_NOSTR_RELAYS read at start, NULL when unset: split into buf; "" or "none": no
 * relay), else the defaults. Returns the count (0: none configured) and fills urls with
 * pointers into cli, buf or static strings. */
size_t nostr_pool_relays(const char *const *cli, size_t n_cli, const char *env, char *buf,
                         size_t buflen, const char **urls, size_t max);

struct tunables;
/* tun: MESH_LLM_NOSTR_* (borrowed until nostr_pool_close) */
int nostr_pool_start(nostr_pool_t **out, uv_loop_t *loop, const char *const *urls, size_t n,
                     const struct tunables *tun, const nostr_pool_cb_t *cb);
/* Subscribe (replaces the previous subscription). */
int nostr_pool_subscribe(nostr_pool_t *p, const char *sub_id, const nostr_filter_t *f);
/* Ask every open relay again for the stored events, with filter f, under the same subscription
 * id (NIP-01: a REQ replaces the subscription of its id; no CLOSE first, so the live part never
 * lapses). A relay may answer a REQ from a cache older than its newest events (the @nostr-relay
 * relay keeps a filter's result for 1 s, keyed by the filter), or register the live part only
 * after its EOSE: an event stored in between reaches neither part. Relays asked again count as
 * unsettled until they answer. */
int nostr_pool_refresh(nostr_pool_t *p, const nostr_filter_t *f);
/* Publish ev to every relay now and on every reconnect (replaces the previous event). */
int nostr_pool_publish(nostr_pool_t *p, const nostr_event_t *ev);
/* Stop publishing (the last event stays on the relays until it expires). */
void nostr_pool_unpublish(nostr_pool_t *p);
/* Relays that answered the subscription (EOSE) or failed since it was made, and the total. */
size_t nostr_pool_settled(const nostr_pool_t *p, size_t *total);
/* Relays that accepted (OK true) the published event on their current connection; *open (may
 * be NULL): relays connected now. */
size_t nostr_pool_accepted(const nostr_pool_t *p, size_t *open);
/* Relays that answered the subscription (EOSE) at least once since the start. */
size_t nostr_pool_answered(const nostr_pool_t *p);
/* Per relay: url, state, answered, last error, counters. */
json_t *nostr_pool_status(const nostr_pool_t *p);
/* Close every connection; the pool is freed once libuv has let go of it. */
void nostr_pool_stop(nostr_pool_t *p);

#endif

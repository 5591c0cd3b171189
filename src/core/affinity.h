/* affinity — prefix-affinity routing (pure: no I/O, no clock).
 *
 * Requests that share a long prompt prefix (an agent's scaffold, the earlier turns of a
 * conversation) should go to the replica that already holds that prefix in its prompt cache
 * (llama-server reuses the longest common prefix of a slot's last prompt, and keeps prompts in
 * its host-memory cache), instead of prefilling it again on another replica.
 *  - the prefix key (request.h's prefix, read when the body is parsed): a 64-bit key from the first
 * AFFINITY_PREFIX_BYTES bytes of the prompt: the "prompt" string of /v1/completions, the compact
 * JSON of the "messages" of chat (so turn N+1 of a conversation, which repeats turns 1..N, has the
 * key of turn N as soon as those bytes are longer than the prefix). Prompts shorter than
 * AFFINITY_MIN_BYTES get no key (0): short requests keep the router's spreading.
 *  - affinity_t: a bounded LRU table key → host id. affinity_pick() moves the remembered host
 *    of a key to the front of the router's candidate order when it is still a candidate, and
 *    remembers the host the request goes to. */
#ifndef MESH_AFFINITY_H
#define MESH_AFFINITY_H

#include <stddef.h>
#include <stdint.h>

#define AFFINITY_PREFIX_BYTES 1024
#define AFFINITY_MIN_BYTES 512
#define AFFINITY_MAX 1024
#define AFFINITY_ID_MAX 65

typedef struct {
    uint64_t key;
    uint64_t used; /* LRU tick */
    char host[AFFINITY_ID_MAX];
} affinity_entry_t;

typedef struct {
    affinity_entry_t e[AFFINITY_MAX];
    size_t n;
    uint64_t tick;
    uint64_t hits, misses;
} affinity_t;

/* The host remembered for key (NULL when none); counts as a use. */
const char *affinity_get(affinity_t *t, uint64_t key);
/* Remember key → host (the least recently used entry makes room). */
void affinity_put(affinity_t *t, uint64_t key, const char *host);

/* Reorder order[0..n) (indexes into ids) so the remembered host of key comes first, and
 * remember the first one. Returns 1 when the remembered host was a candidate (a hit). */
int affinity_pick(affinity_t *t, uint64_t key, const char *const *ids, size_t *order, size_t n);

#endif

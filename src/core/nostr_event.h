/* nostr_event — Nostr events (NIP-01): typed, bounded, signed and verified (pure).
 *
 * An event is {id, pubkey, created_at, kind, tags, content, sig}. Its id is the SHA-256 of the
 * canonical serialization [0,pubkey,created_at,kind,tags,content] (compact JSON, UTF-8, the
 * escapes JSON.stringify makes); sig is a BIP-340 Schnorr signature of the id by the x-only
 * secp256k1 key pubkey (libsecp256k1's schnorrsig and extrakeys modules).
 *
 * Everything read from a relay goes through nostr_event_from_json, which enforces the caps below
 * and the shapes of every field; nostr_event_verify then checks the id and the signature. */
#ifndef MESH_NOSTR_EVENT_H
#define MESH_NOSTR_EVENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NOSTR_MAX_TAGS 64       /* tags per event */
#define NOSTR_TAG_MAX_VALS 8    /* strings per tag */
#define NOSTR_TAG_VAL_MAX 1024  /* bytes per tag string */
#define NOSTR_CONTENT_MAX 65536 /* bytes of content */
#define NOSTR_HEX32 65          /* 64 hex chars + NUL */
#define NOSTR_HEX64 129         /* 128 hex chars + NUL */

typedef struct {
    size_t n;
    char *v[NOSTR_TAG_MAX_VALS];
} nostr_tag_t;

typedef struct {
    char id[NOSTR_HEX32];
    char pubkey[NOSTR_HEX32];
    char sig[NOSTR_HEX64];
    int64_t created_at;
    uint32_t kind;
    nostr_tag_t tags[NOSTR_MAX_TAGS];
    size_t n_tags;
    char *content;
} nostr_event_t;

/* Free the strings an event owns (tags, content); the struct itself is the caller's. */
void nostr_event_free(nostr_event_t *ev);
/* Append a tag of n strings (copied). -E2BIG past the caps, -ENOMEM. */
int nostr_event_add_tag(nostr_event_t *ev, size_t n, const char *const *vals);
/* The first value of the first tag named name (["name", value, …]), or NULL. */
const char *nostr_event_tag(const nostr_event_t *ev, const char *name);
/* Set the content (copied). */
int nostr_event_set_content(nostr_event_t *ev, const char *content);

/* The canonical serialization (malloc'd, NUL-terminated), NULL on allocation failure. */
char *nostr_event_serialize(const nostr_event_t *ev);
/* id = hex(sha256(canonical serialization)). */
int nostr_event_compute_id(const nostr_event_t *ev, char id[NOSTR_HEX32]);

/* The x-only public key (hex) of a 32-byte secret key; -EINVAL if the key is not valid. */
int nostr_pubkey(const uint8_t seckey[32], char pubkey[NOSTR_HEX32]);
/* Fill pubkey, id and sig from the secret key (aux randomness from libsodium). */
int nostr_event_sign(nostr_event_t *ev, const uint8_t seckey[32]);
/* Whether the id is the hash of the event and sig is a valid signature of it by pubkey. */
bool nostr_event_verify(const nostr_event_t *ev);

/* The event as a JSON object (for the relay messages); NULL on allocation failure. */
json_t *nostr_event_to_json(const nostr_event_t *ev);
/* Read an event object: shapes and caps checked (hex lengths, integer ranges, tag counts, string
 * sizes), not the signature. On error ev is left empty and err says why. */
int nostr_event_from_json(const json_t *j, nostr_event_t *ev, char *err, size_t errlen);

#endif

/* Nostr events: canonical serialization, ids, BIP-340 signatures, strict JSON reading. */
#include "nostr_event.h"

#include <errno.h>
#include <secp256k1.h>
#include <secp256k1_extrakeys.h>
#include <secp256k1_schnorrsig.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "identity.h"

void nostr_event_free(nostr_event_t *ev)
{
    for (size_t i = 0; i < ev->n_tags; i++)
        for (size_t k = 0; k < ev->tags[i].n; k++)
            free(ev->tags[i].v[k]);
    free(ev->content);
    ev->content = NULL;
    ev->n_tags = 0;
}

static char *dup_capped(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap + 1);
    if (n > cap) return NULL;
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

int nostr_event_add_tag(nostr_event_t *ev, size_t n, const char *const *vals)
{
    if (ev->n_tags >= NOSTR_MAX_TAGS || n == 0 || n > NOSTR_TAG_MAX_VALS) return -E2BIG;
    nostr_tag_t *t = &ev->tags[ev->n_tags];
    t->n = 0;
    for (size_t i = 0; i < n; i++) {
        char *d = dup_capped(vals[i], NOSTR_TAG_VAL_MAX);
        if (!d) {
            for (size_t k = 0; k < t->n; k++)
                free(t->v[k]);
            t->n = 0;
            return -E2BIG;
        }
        t->v[t->n++] = d;
    }
    ev->n_tags++;
    return 0;
}

const char *nostr_event_tag(const nostr_event_t *ev, const char *name)
{
    for (size_t i = 0; i < ev->n_tags; i++)
        if (ev->tags[i].n >= 2 && strcmp(ev->tags[i].v[0], name) == 0) return ev->tags[i].v[1];
    return NULL;
}

int nostr_event_set_content(nostr_event_t *ev, const char *content)
{
    char *d = dup_capped(content, NOSTR_CONTENT_MAX);
    if (!d) return -E2BIG;
    free(ev->content);
    ev->content = d;
    return 0;
}

static json_t *tags_json(const nostr_event_t *ev)
{
    json_t *tags = json_array();
    for (size_t i = 0; tags && i < ev->n_tags; i++) {
        json_t *t = json_array();
        for (size_t k = 0; t && k < ev->tags[i].n; k++)
            json_array_append_new(t, json_string(ev->tags[i].v[k]));
        json_array_append_new(tags, t);
    }
    return tags;
}

/* Compact JSON with UTF-8 as is: jansson escapes exactly what JSON.stringify escapes for valid
 * UTF-8 (", \, and control characters, with the short forms \b \f \n \r \t). */
char *nostr_event_serialize(const nostr_event_t *ev)
{
    json_t *a = json_pack("[i,s,I,I,o,s]", 0, ev->pubkey, (json_int_t)ev->created_at,
                          (json_int_t)ev->kind, tags_json(ev), ev->content ? ev->content : "");
    if (!a) return NULL;
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

int nostr_event_compute_id(const nostr_event_t *ev, char id[NOSTR_HEX32])
{
    char *s = nostr_event_serialize(ev);
    if (!s) return -ENOMEM;
    uint8_t h[32];
    crypto_hash_sha256(h, (const uint8_t *)s, strlen(s));
    free(s);
    hex_encode(h, 32, id);
    return 0;
}

int nostr_pubkey(const uint8_t seckey[32], char pubkey[NOSTR_HEX32])
{
    secp256k1_context *ctx = secp256k1_context_create(SECP256K1_CONTEXT_NONE);
    if (!ctx) return -ENOMEM;
    secp256k1_keypair kp;
    secp256k1_xonly_pubkey xpk;
    uint8_t out[32];
    int rc = -EINVAL;
    if (secp256k1_keypair_create(ctx, &kp, seckey) &&
        secp256k1_keypair_xonly_pub(ctx, &xpk, NULL, &kp) &&
        secp256k1_xonly_pubkey_serialize(ctx, out, &xpk)) {
        hex_encode(out, 32, pubkey);
        rc = 0;
    }
    sodium_memzero(&kp, sizeof kp);
    secp256k1_context_destroy(ctx);
    return rc;
}

int nostr_event_sign(nostr_event_t *ev, const uint8_t seckey[32])
{
    int rc = nostr_pubkey(seckey, ev->pubkey);
    if (rc) return rc;
    if ((rc = nostr_event_compute_id(ev, ev->id))) return rc;
    uint8_t msg[32], aux[32], sig[64];
    hex_decode(ev->id, 64, msg, 32);
    randombytes_buf(aux, sizeof aux);
    secp256k1_context *ctx = secp256k1_context_create(SECP256K1_CONTEXT_NONE);
    if (!ctx) return -ENOMEM;
    secp256k1_keypair kp;
    rc = -EINVAL;
    if (secp256k1_keypair_create(ctx, &kp, seckey) &&
        secp256k1_schnorrsig_sign32(ctx, sig, msg, &kp, aux)) {
        hex_encode(sig, 64, ev->sig);
        rc = 0;
    }
    sodium_memzero(&kp, sizeof kp);
    secp256k1_context_destroy(ctx);
    return rc;
}

bool nostr_event_verify(const nostr_event_t *ev)
{
    char id[NOSTR_HEX32];
    if (nostr_event_compute_id(ev, id) != 0 || strcmp(id, ev->id) != 0) return false;
    uint8_t msg[32], sig[64], pk[32];
    if (hex_decode(ev->id, 64, msg, 32) || hex_decode(ev->sig, 128, sig, 64) ||
        hex_decode(ev->pubkey, 64, pk, 32))
        return false;
    secp256k1_xonly_pubkey xpk;
    if (!secp256k1_xonly_pubkey_parse(secp256k1_context_static, &xpk, pk)) return false;
    return secp256k1_schnorrsig_verify(secp256k1_context_static, sig, msg, 32, &xpk) == 1;
}

json_t *nostr_event_to_json(const nostr_event_t *ev)
{
    return json_pack("{s:s,s:s,s:I,s:I,s:o,s:s,s:s}", "id", ev->id, "pubkey", ev->pubkey,
                     "created_at", (json_int_t)ev->created_at, "kind", (json_int_t)ev->kind, "tags",
                     tags_json(ev), "content", ev->content ? ev->content : "", "sig", ev->sig);
}

/* A lowercase hex string of exactly n chars into out (n+1 bytes). */
static bool read_hex(const json_t *j, size_t n, char *out)
{
    if (!json_is_string(j) || json_string_length(j) != n) return false;
    const char *s = json_string_value(j);
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    memcpy(out, s, n + 1);
    return true;
}

/* A string without NUL bytes (C strings) of at most cap bytes. */
static bool plain_string(const json_t *j, size_t cap)
{
    return json_is_string(j) && json_string_length(j) <= cap &&
           strlen(json_string_value(j)) == json_string_length(j);
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        goto fail;                                                                                 \
    } while (0)

int nostr_event_from_json(const json_t *j, nostr_event_t *ev, char *err, size_t errlen)
{
    memset(ev, 0, sizeof *ev);
    if (!json_is_object(j)) FAIL("event is not an object");
    if (!read_hex(json_object_get(j, "id"), 64, ev->id)) FAIL("id is not 64 hex chars");
    if (!read_hex(json_object_get(j, "pubkey"), 64, ev->pubkey)) FAIL("pubkey is not 64 hex chars");
    if (!read_hex(json_object_get(j, "sig"), 128, ev->sig)) FAIL("sig is not 128 hex chars");
    json_t *ca = json_object_get(j, "created_at"), *k = json_object_get(j, "kind");
    if (!json_is_integer(ca) || json_integer_value(ca) < 0 ||
        json_integer_value(ca) > ((json_int_t)1 << 40))
        FAIL("created_at is not a time");
    if (!json_is_integer(k) || json_integer_value(k) < 0 || json_integer_value(k) > 65535)
        FAIL("kind is not in 0..65535");
    ev->created_at = json_integer_value(ca);
    ev->kind = (uint32_t)json_integer_value(k);
    json_t *content = json_object_get(j, "content");
    if (!plain_string(content, NOSTR_CONTENT_MAX)) FAIL("content is not a string within the cap");
    if (!(ev->content = strdup(json_string_value(content)))) FAIL("out of memory");
    json_t *tags = json_object_get(j, "tags");
    if (!json_is_array(tags) || json_array_size(tags) > NOSTR_MAX_TAGS)
        FAIL("tags is not an array of at most %d tags", NOSTR_MAX_TAGS);
    size_t i;
    json_t *t;
    json_array_foreach(tags, i, t)
    {
        if (!json_is_array(t) || json_array_size(t) == 0 || json_array_size(t) > NOSTR_TAG_MAX_VALS)
            FAIL("tag %zu is not an array of 1..%d strings", i, NOSTR_TAG_MAX_VALS);
        const char *vals[NOSTR_TAG_MAX_VALS];
        size_t x;
        json_t *v;
        json_array_foreach(t, x, v)
        {
            if (!plain_string(v, NOSTR_TAG_VAL_MAX)) FAIL("tag %zu has a bad value", i);
            vals[x] = json_string_value(v);
        }
        if (nostr_event_add_tag(ev, json_array_size(t), vals) != 0) FAIL("out of memory");
    }
    return 0;
fail:
    nostr_event_free(ev);
    return -EINVAL;
}

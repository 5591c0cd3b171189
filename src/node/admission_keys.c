/* admission_keys — the --api-keys file: tiers and keys, as JSON or as lines (README).
 *
 * JSON:  {"tiers": {"gold": {"max_concurrent": 4, "queue_share": 80, "tokens_per_minute": 0}},
 *         "keys": [{"name": "alice", "tier": "gold", "key": "sk-..."}]}
 * Lines: "tier NAME [max_concurrent=N] [queue_share=PCT] [tokens_per_minute=N]"
 *        "key NAME TIER SECRET";  '#' starts a comment.
 * Only digests of the secrets are kept; the text is wiped by the caller. */
#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admission.h"
#include "util.h"

#define SECRET_MIN 8

static int add_key(admit_t *a, const char *name, const char *tier, const char *secret, size_t slen,
                   unsigned char (*digests)[32], bool *has, char *err, size_t errlen)
{
    int t = admit_find_tier(a, tier);
    if (t < 0) {
        snprintf(err, errlen, "key '%.64s': unknown tier '%.64s'", name, tier);
        return -EINVAL;
    }
    if (!name[0] || strlen(name) >= ADMIT_NAME_MAX) {
        snprintf(err, errlen, "a key needs a name (at most %d bytes)", ADMIT_NAME_MAX - 1);
        return -EINVAL;
    }
    if (slen < SECRET_MIN) {
        snprintf(err, errlen, "key '%.64s': the secret must be at least %d characters", name,
                 SECRET_MIN);
        return -EINVAL;
    }
    unsigned char d[32];
    crypto_generichash(d, sizeof d, (const unsigned char *)secret, slen, NULL, 0);
    for (size_t i = 0; i < a->n_keys; i++) {
        if (strcmp(a->keys[i].name, name) == 0) {
            snprintf(err, errlen, "key '%.64s' is given twice", name);
            return -EINVAL;
        }
        if (has[i] && sodium_memcmp(digests[i], d, sizeof d) == 0) {
            snprintf(err, errlen, "key '%.64s' has the same secret as key '%.64s'", name,
                     a->keys[i].name);
            return -EINVAL;
        }
    }
    int k = admit_add_key(a, name, t);
    if (k < 0) {
        snprintf(err, errlen, "too many keys (at most %d)", ADMIT_MAX_KEYS - 1);
        return -EINVAL;
    }
    memcpy(digests[k], d, sizeof d);
    has[k] = true;
    sodium_memzero(d, sizeof d);
    return 0;
}

static int add_tier(admit_t *a, const char *name, uint64_t maxc, uint64_t share, uint64_t tpm,
                    char *err, size_t errlen)
{
    admit_tier_t t = {.max_concurrent = (unsigned)maxc, .queue_share = (unsigned)share, .tpm = tpm};
    if (!name[0] || strlen(name) >= sizeof t.name || maxc > 100000 || share > 100) {
        snprintf(err, errlen,
                 "tier '%.64s': needs a name, max_concurrent 0-100000, queue_share 0-100", name);
        return -EINVAL;
    }
    snprintf(t.name, sizeof t.name, "%s", name);
    int rc = admit_add_tier(a, &t);
    if (rc < 0) {
        snprintf(err, errlen, "tier '%.64s': %s", name,
                 rc == -EEXIST ? "given twice" : "too many tiers");
        return -EINVAL;
    }
    return 0;
}

static int json_u64(json_t *o, const char *k, uint64_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, k);
    *out = 0;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        snprintf(err, errlen, "'%s' must be a non-negative integer", k);
        return -EINVAL;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_json(admit_t *a, const char *text, unsigned char (*digests)[32], bool *has,
                      char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "not valid JSON: %s (line %d)", je.text, je.line);
        return -EINVAL;
    }
    int rc = 0;
    json_t *tiers = json_object_get(root, "tiers"), *keys = json_object_get(root, "keys");
    if (!json_is_object(root) || (tiers && !json_is_object(tiers)) || !json_is_array(keys)) {
        snprintf(err, errlen, "expected {\"tiers\": {NAME: {...}}, \"keys\": [{...}]}");
        rc = -EINVAL;
        goto out;
    }
    const char *tn;
    json_t *tv;
    json_object_foreach(tiers, tn, tv)
    {
        uint64_t mc, qs, tpm;
        if (!json_is_object(tv) || (rc = json_u64(tv, "max_concurrent", &mc, err, errlen)) ||
            (rc = json_u64(tv, "queue_share", &qs, err, errlen)) ||
            (rc = json_u64(tv, "tokens_per_minute", &tpm, err, errlen)) ||
            (rc = add_tier(a, tn, mc, qs, tpm, err, errlen))) {
            if (!rc) snprintf(err, errlen, "tier '%.64s' must be an object", tn);
            rc = -EINVAL;
            goto out;
        }
    }
    size_t i;
    json_t *kv;
    json_array_foreach(keys, i, kv)
    {
        json_t *n = json_object_get(kv, "name"), *t = json_object_get(kv, "tier"),
               *s = json_object_get(kv, "key");
        if (!json_is_string(n) || !json_is_string(s) || (t && !json_is_string(t))) {
            snprintf(err, errlen, "keys[%zu] needs \"name\" and \"key\" strings (and a \"tier\")",
                     i);
            rc = -EINVAL;
            goto out;
        }
        rc = add_key(a, json_string_value(n), t ? json_string_value(t) : "default",
                     json_string_value(s), json_string_length(s), digests, has, err, errlen);
        if (rc) goto out;
    }
out:
    /* the secrets in jansson's strings: wipe them before they are freed */
    if (json_is_array(keys)) {
        json_array_foreach(keys, i, kv)
        {
            json_t *s = json_object_get(kv, "key");
            if (json_is_string(s))
                sodium_memzero((char *)json_string_value(s), json_string_length(s));
        }
    }
    json_decref(root);
    return rc;
}

static int parse_lines(admit_t *a, char *text, unsigned char (*digests)[32], bool *has, char *err,
                       size_t errlen)
{
    unsigned line = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        line++;
        char *hash = strchr(l, '#');
        if (hash) *hash = '\0';
        char *w[8];
        int n = 0;
        for (char *s2 = NULL, *t = strtok_r(l, " \t\r", &s2); t && n < 8;
             t = strtok_r(NULL, " \t\r", &s2))
            w[n++] = t;
        if (n == 0) continue;
        char e2[256];
        int rc = 0;
        if (strcmp(w[0], "tier") == 0 && n >= 2) {
            uint64_t v[3] = {0, 0, 0};
            static const char *const names[3] = {
                "max_concurrent=", "queue_share=", "tokens_per_minute="};
            for (int i = 2; i < n && !rc; i++) {
                int j = 0;
                while (j < 3 && strncmp(w[i], names[j], strlen(names[j])) != 0)
                    j++;
                if (j == 3 || parse_u64(w[i] + strlen(names[j]), 0, UINT32_MAX, &v[j])) {
                    snprintf(e2, sizeof e2, "bad setting '%.64s'", w[i]);
                    rc = -EINVAL;
                }
            }
            if (!rc) rc = add_tier(a, w[1], v[0], v[1], v[2], e2, sizeof e2);
        } else if (strcmp(w[0], "key") == 0 && n == 4) {
            rc = add_key(a, w[1], w[2], w[3], strlen(w[3]), digests, has, e2, sizeof e2);
        } else {
            snprintf(e2, sizeof e2,
                     "expected 'tier NAME [SETTING=N]...' or 'key NAME TIER SECRET'");
            rc = -EINVAL;
        }
        if (rc) {
            snprintf(err, errlen, "line %u: %s", line, e2);
            return rc;
        }
    }
    return 0;
}

int admission_parse_keys(admit_t *a, char *text, unsigned char (*digests)[32], bool *has, char *err,
                         size_t errlen)
{
    const char *p = text;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return *p == '{' ? parse_json(a, text, digests, has, err, errlen)
                     : parse_lines(a, text, digests, has, err, errlen);
}

/* The body-taking functions request_parse (src/core/request.h) replaced, verbatim as they were
 * before the body was parsed once (issue 30 S15: core/route_table.c, core/router.c,
 * core/affinity.c, core/vision.c, core/resume.c, app/api_openai.c), kept only as the oracle of
 * the differential tests (test_request.c, tests/fuzz/fuzz_request.c): each parsed the body
 * again, with its own flags, which is what the node no longer does. Header-only (static
 * inline). */
#ifndef MESH_TEST_BODY_ORACLE_H
#define MESH_TEST_BODY_ORACLE_H

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "affinity.h"
#include "request.h"
#include "resume.h"
#include "vision.h"

/* core/route_table.c:rt_sticky_key — "user", else "session_id", copied into buf; NULL when
 * none (passive.c used a 256-byte buffer) */
static inline const char *rt_sticky_key(const char *body, size_t len, char *buf, size_t buflen)
{
    if (!body || !buf || buflen == 0) return NULL;
    json_t *o = json_loadb(body, len, 0, NULL);
    const char *key = json_string_value(json_object_get(o, "user"));
    if (!key) key = json_string_value(json_object_get(o, "session_id"));
    const char *res = NULL;
    if (key && *key) {
        snprintf(buf, buflen, "%s", key);
        res = buf;
    }
    json_decref(o);
    return res;
}

/* core/affinity.c:affinity_prefix_key — 0: no key */
static inline uint64_t affinity_prefix_key(const char *body, size_t len)
{
    if (!body || !len) return 0;
    json_t *o = json_loadb(body, len, 0, NULL);
    uint64_t key = 0;
    const char *prompt = json_string_value(json_object_get(o, "prompt"));
    json_t *msgs = json_object_get(o, "messages");
    char *dump = NULL;
    if (!prompt && json_is_array(msgs)) prompt = dump = json_dumps(msgs, JSON_COMPACT);
    if (prompt) {
        size_t pl = strlen(prompt);
        if (pl >= AFFINITY_MIN_BYTES) {
            size_t n = pl < AFFINITY_PREFIX_BYTES ? pl : AFFINITY_PREFIX_BYTES;
            uint64_t h = 1469598103934665603ULL;
            for (size_t i = 0; i < n; i++)
                h = (h ^ (uint8_t)prompt[i]) * 1099511628211ULL;
            key = h ? h : 1;
        }
    }
    free(dump);
    json_decref(o);
    return key;
}

/* core/vision.c:vision_has_image */
static inline bool vision_has_image(const char *body, size_t len)
{
    if (!body || (!memmem(body, len, "image", 5) && !memmem(body, len, "multimodal_data", 15)))
        return false;
    json_error_t je;
    json_t *root = body && len ? json_loadb(body, len, 0, &je) : NULL;
    bool found = vision_json_has_image(root);
    json_decref(root);
    return found;
}

/* core/resume.c:resume_request_ok (now resume_build's own check, static there) */
static inline bool resume_request_ok(resume_kind_t kind, const char *body, size_t len, char *why,
                                     size_t wl)
{
    json_t *o = json_loadb(body, len, 0, NULL);
    const char *no = NULL;
    if (!json_is_object(o))
        no = "the request is not a JSON object";
    else if (!json_is_true(json_object_get(o, "stream")))
        no = "not a streamed request";
    else if (json_object_get(o, "n") && json_integer_value(json_object_get(o, "n")) != 1)
        no = "more than one choice (n > 1)";
    else if (json_object_get(o, "grammar") || json_object_get(o, "json_schema") ||
             json_object_get(o, "response_format"))
        no = "constrained output (grammar, json_schema, response_format)";
    else if (kind == RESUME_COMPLETION && !json_is_string(json_object_get(o, "prompt")))
        no = "the prompt is not a single string";
    else if (kind == RESUME_CHAT && !json_is_array(json_object_get(o, "messages")))
        no = "no messages";
    if (no && why && wl) snprintf(why, wl, "%s", no);
    json_decref(o);
    return !no;
}

/* app/api_openai.c:api_body_model — REQUEST_MODEL_FOUND (name in out), _ABSENT, -EINVAL (err) */
static inline int api_body_model(const char *body, size_t len, char *out, size_t outlen, char *err,
                                 size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "request body is not valid JSON: %s (line %d, column %d)", je.text,
                 je.line, je.column);
        return -EINVAL;
    }
    int rc;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "request body must be a JSON object");
        rc = -EINVAL;
    } else {
        json_t *m = json_object_get(root, "model");
        if (!m || json_is_null(m)) {
            rc = REQUEST_MODEL_ABSENT;
        } else if (!json_is_string(m) || json_string_length(m) == 0) {
            snprintf(err, errlen, "'model' must be a non-empty string");
            rc = -EINVAL;
        } else if (json_string_length(m) >= outlen) {
            snprintf(err, errlen, "'model' is too long");
            rc = -EINVAL;
        } else {
            snprintf(out, outlen, "%s", json_string_value(m));
            rc = REQUEST_MODEL_FOUND;
        }
    }
    json_decref(root);
    return rc;
}

/* app/api_openai.c:api_anthropic_body_check — 0, or -EINVAL with a message in err */
static inline int api_anthropic_body_check(const char *body, size_t len, char *err, size_t errlen)
{
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    int rc = 0;
    json_t *msgs = json_object_get(root, "messages");
    json_t *mt = json_object_get(root, "max_tokens");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(err, errlen, "messages: field required (a non-empty array of messages)");
        rc = -EINVAL;
    } else if (mt && !(json_is_integer(mt) && json_integer_value(mt) > 0)) {
        snprintf(err, errlen, "max_tokens: must be a positive integer");
        rc = -EINVAL;
    } else {
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m)
        {
            json_t *c = json_object_get(m, "content");
            if (json_is_object(m) && json_is_string(json_object_get(m, "role")) &&
                (json_is_string(c) || json_is_array(c)))
                continue;
            snprintf(err, errlen,
                     "messages.%zu: each message needs a string 'role' and a 'content' that is a "
                     "string or an array",
                     i);
            rc = -EINVAL;
            break;
        }
    }
    json_decref(root);
    return rc;
}

#endif

/* request — see request.h. */
#include "request.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "affinity.h"
#include "resume.h"
#include "vision.h"

#define FNV_BASIS 1469598103934665603ULL

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = FNV_BASIS;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h;
}

/* ---- compact JSON, written only as far as needed ---- */

typedef struct {
    char *buf;
    size_t cap, len;
} head_t;

static int head_cb(const char *s, size_t n, void *data)
{
    head_t *h = data;
    size_t k = n < h->cap - h->len ? n : h->cap - h->len;
    memcpy(h->buf + h->len, s, k);
    h->len += k;
    return k < n ? -1 : 0; /* full: stop writing (the rest is not needed) */
}

/* The first cap bytes of v's compact JSON (what json_dumps(v, JSON_COMPACT) starts with) into
 * buf; the count written. v must be an array or an object. */
static size_t dump_head(const json_t *v, char *buf, size_t cap)
{
    head_t h = {.buf = buf, .cap = cap};
    json_dump_callback(v, head_cb, &h, JSON_COMPACT);
    return h.len;
}

/* ---- images (vision.h's rule) ---- */

static bool has_images(const json_t *root, const char *body, size_t len)
{
    /* every image part names one of these: most bodies are judged without a walk */
    if (!memmem(body, len, "image", 5) && !memmem(body, len, "multimodal_data", 15)) return false;
    return vision_json_has_image(root);
}

/* ---- model, Anthropic fields (app/api_openai.c's rules and texts) ---- */

static void read_model(request_t *rq, const json_t *root)
{
    json_t *m = json_object_get(root, "model");
    if (!m || json_is_null(m)) {
        rq->model_rc = REQUEST_MODEL_ABSENT;
    } else if (!json_is_string(m) || json_string_length(m) == 0) {
        snprintf(rq->err, sizeof rq->err, "'model' must be a non-empty string");
        rq->model_rc = -EINVAL;
    } else if (json_string_length(m) >= sizeof rq->model) {
        snprintf(rq->err, sizeof rq->err, "'model' is too long");
        rq->model_rc = -EINVAL;
    } else {
        snprintf(rq->model, sizeof rq->model, "%s", json_string_value(m));
        rq->model_rc = REQUEST_MODEL_FOUND;
    }
}

/* One message of an Anthropic body: an object with a string "role" and a "content" that is a
 * string or an array. */
static bool anthropic_message_ok(const json_t *m)
{
    json_t *c = json_object_get(m, "content");
    return json_is_object(m) && json_is_string(json_object_get(m, "role")) &&
           (json_is_string(c) || json_is_array(c));
}

/* root may be NULL (a body that did not parse: "messages" is missing, as the API says). */
static void check_anthropic(request_t *rq, const json_t *root)
{
    json_t *msgs = json_object_get(root, "messages");
    json_t *mt = json_object_get(root, "max_tokens");
    char *err = rq->anthropic_err;
    size_t el = sizeof rq->anthropic_err;
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(err, el, "messages: field required (a non-empty array of messages)");
        rq->anthropic_rc = -EINVAL;
    } else if (mt && !(json_is_integer(mt) && json_integer_value(mt) > 0)) {
        snprintf(err, el, "max_tokens: must be a positive integer");
        rq->anthropic_rc = -EINVAL;
    } else {
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m)
        {
            if (anthropic_message_ok(m)) continue;
            snprintf(err, el,
                     "messages.%zu: each message needs a string 'role' and a 'content' that is a "
                     "string or an array",
                     i);
            rq->anthropic_rc = -EINVAL;
            break;
        }
    }
}

/* ---- keys ---- */

/* A non-empty string field, NULL otherwise. */
static const char *nonempty(const json_t *root, const char *k)
{
    const char *s = json_string_value(json_object_get(root, k));
    return s && *s ? s : NULL;
}

static void read_sticky(request_t *rq, const json_t *root)
{
    const char *key = nonempty(root, "user");
    if (!key) key = nonempty(root, "session_id");
    if (!key) return;
    rq->has_sticky = true;
    rq->sticky = fnv1a(key, strlen(key));
}

/* affinity_prefix_key: never 0 for a key (0 says none). */
static void read_prefix(request_t *rq, const json_t *root)
{
    const char *prompt = json_string_value(json_object_get(root, "prompt"));
    json_t *msgs = json_object_get(root, "messages");
    char head[AFFINITY_PREFIX_BYTES];
    size_t n;
    if (prompt) {
        n = strlen(prompt);
        if (n > AFFINITY_PREFIX_BYTES) n = AFFINITY_PREFIX_BYTES;
    } else if (json_is_array(msgs)) {
        n = dump_head(msgs, head, sizeof head);
        prompt = head;
    } else {
        return;
    }
    if (n < AFFINITY_MIN_BYTES) return;
    uint64_t h = fnv1a(prompt, n);
    rq->prefix = h ? h : 1;
}

static int64_t read_max_tokens(const json_t *root)
{
    static const char *const KEYS[] = {"max_tokens", "max_completion_tokens", "n_predict"};
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        json_t *v = json_object_get(root, KEYS[i]);
        if (json_is_integer(v) && json_integer_value(v) >= 0) return json_integer_value(v);
    }
    return -1;
}

/* ---- the request ---- */

int request_parse(request_t *rq, const char *path, const char *body, size_t len)
{
    memset(rq, 0, sizeof *rq);
    rq->kind = resume_kind_for_path(path);
    rq->shape = API_STREAM_OPENAI;
    rq->choices = 1;
    rq->max_tokens = -1;
    if (!body) { /* no body: as an empty one */
        body = "";
        len = 0;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (api_route_err_shape(path) == API_ERR_ANTHROPIC) check_anthropic(rq, root);
    if (!root) {
        snprintf(rq->err, sizeof rq->err, "request body is not valid JSON: %s (line %d, column %d)",
                 je.text, je.line, je.column);
        rq->rc = rq->model_rc = -EINVAL;
        return rq->rc;
    }
    if (!json_is_object(root)) {
        snprintf(rq->err, sizeof rq->err, "request body must be a JSON object");
        rq->rc = rq->model_rc = -EINVAL;
        json_decref(root);
        return rq->rc;
    }
    read_model(rq, root);
    rq->stream = json_is_true(json_object_get(root, "stream"));
    if (rq->stream) rq->shape = api_stream_kind(path);
    json_t *n = json_object_get(root, "n");
    rq->n_not_one = n && !(json_is_integer(n) && json_integer_value(n) == 1);
    json_int_t nc = json_integer_value(n);
    rq->choices = nc < 1 ? 1 : nc > REQUEST_MAX_CHOICES ? REQUEST_MAX_CHOICES : (unsigned)nc;
    rq->constrained = json_object_get(root, "grammar") || json_object_get(root, "json_schema") ||
                      json_object_get(root, "response_format");
    rq->prompt_is_string = json_is_string(json_object_get(root, "prompt"));
    rq->messages_is_array = json_is_array(json_object_get(root, "messages"));
    rq->images = has_images(root, body, len);
    read_sticky(rq, root);
    read_prefix(rq, root);
    rq->max_tokens = read_max_tokens(root);
    json_decref(root);
    return 0;
}

static bool why_not(char *why, size_t wl, const char *msg)
{
    if (why && wl) snprintf(why, wl, "%s", msg);
    return false;
}

bool request_resumable(const request_t *rq, char *why, size_t wl)
{
    /* resume_request_ok's tests, in its order and words */
    if (rq->kind < 0) return why_not(why, wl, "the endpoint has no continuation");
    if (rq->rc < 0) return why_not(why, wl, "the request is not a JSON object");
    if (!rq->stream) return why_not(why, wl, "not a streamed request");
    if (rq->n_not_one) return why_not(why, wl, "more than one choice (n > 1)");
    if (rq->constrained)
        return why_not(why, wl, "constrained output (grammar, json_schema, response_format)");
    if (rq->kind == RESUME_COMPLETION && !rq->prompt_is_string)
        return why_not(why, wl, "the prompt is not a single string");
    if (rq->kind == RESUME_CHAT && !rq->messages_is_array) return why_not(why, wl, "no messages");
    return true;
}

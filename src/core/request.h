/* request — an inference request body, parsed once into the facts every stage reads (pure: no
 * I/O, no clock).
 *
 * Today a routed streamed chat body is parsed by jansson up to seven times, each stage reading
 * its own field with its own flags: the API's validation (app/api_openai.c:api_body_model,
 * api_anthropic_body_check), admission (node/admission.c:body_model: the model and "n"), the
 * image check (vision.h), the stickiness keys (router.h:router_request_key,
 * route_table.h:rt_sticky_key), prefix affinity (affinity.h:affinity_prefix_key), the relay
 * ("stream") and the continuation check (resume.h:resume_request_ok). request_parse() reads
 * the body once (json_loadb with JSON_REJECT_DUPLICATES: the API answers 400 to duplicate keys
 * anyway) and keeps only typed facts — no JSON tree outlives the call — computed by the same
 * rules as those functions:
 *  - rc / err: 0, or -EINVAL when the body is not JSON or not an object (api_body_model's
 *    texts, err), and then nothing else is read from it;
 *  - model_rc / model: REQUEST_MODEL_FOUND with the name (1..CATALOG_NAME_MAX-1 bytes),
 *    REQUEST_MODEL_ABSENT ("model" missing or null), -EINVAL with err ("model" not a
 *    non-empty string, too long, or rc < 0) — api_body_model's contract and texts;
 *  - kind (resume_kind_for_path: chat, completion, -1) and shape (api_stream_kind of the path
 *    for a streamed request, else API_STREAM_OPENAI: how the relay ends a broken stream);
 *  - stream ("stream": true), and what a continuation elsewhere needs (request_resumable,
 *    resume_request_ok's tests): "n" other than the integer 1, grammar / json_schema /
 *    response_format present, a string "prompt", an array "messages";
 *  - choices: "n" when an integer, clamped to 1..REQUEST_MAX_CHOICES (admission counts that
 *    many completions per token of the answer's tail);
 *  - images: vision_has_image's rule (image parts in messages | input | prompt, at most
 *    VISION_MAX_ITEMS elements looked at; a body naming neither "image" nor
 *    "multimodal_data" has none);
 *  - anthropic_rc / anthropic_err: on an Anthropic-shaped path (api_route_err_shape), what
 *    api_anthropic_body_check says (0 elsewhere);
 *  - sticky: the stickiness key of the one rule (route_decide.h): a non-empty string "user",
 *    else a non-empty string "session_id", FNV-1a of all its bytes (rt_sticky_key's key and
 *    route_table's hash, without the 255-byte cut; jansson refuses "\u0000" in strings);
 *  - prefix: affinity_prefix_key's key (the first AFFINITY_PREFIX_BYTES of the "prompt" string
 *    or of the compact JSON of "messages"; 0 below AFFINITY_MIN_BYTES), the JSON written only
 *    as far as the key needs it;
 *  - max_tokens: "max_tokens", else "max_completion_tokens", else "n_predict", when a
 *    non-negative integer; -1 when none is.
 * Where today's functions disagree with each other (duplicate keys, "model": null at
 * admission, "user": ""), this module keeps the API's reading; tests/unit/test_request.c lists
 * each case against the function it replaces. */
#ifndef MESH_REQUEST_H
#define MESH_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api_routes.h"
#include "catalog.h"

#define REQUEST_ERR_MAX 256
#define REQUEST_ANTHROPIC_ERR_MAX 160
#define REQUEST_MAX_CHOICES 128 /* choices counted per request at most (admission.c) */

/* the values of app/api_openai.h's API_MODEL_FOUND / API_MODEL_ABSENT */
enum { REQUEST_MODEL_FOUND = 0, REQUEST_MODEL_ABSENT = 1 };

typedef struct {
    int rc; /* 0, -EINVAL: not JSON or not an object (err) */
    char err[REQUEST_ERR_MAX];
    int model_rc; /* REQUEST_MODEL_FOUND | REQUEST_MODEL_ABSENT | -EINVAL (err) */
    char model[CATALOG_NAME_MAX];
    int kind;           /* resume_kind_t of the path, -1: no continuation there */
    api_stream_t shape; /* how a broken stream ends (API_STREAM_OPENAI when not streamed) */
    bool stream;
    bool constrained;       /* grammar, json_schema or response_format */
    bool n_not_one;         /* "n" present and not the integer 1 */
    bool prompt_is_string;  /* "prompt" is a string */
    bool messages_is_array; /* "messages" is an array */
    unsigned choices;       /* "n" clamped to 1..REQUEST_MAX_CHOICES */
    bool images;
    int anthropic_rc; /* Anthropic-shaped path: 0 or -EINVAL (anthropic_err); else 0 */
    char anthropic_err[REQUEST_ANTHROPIC_ERR_MAX];
    bool has_sticky;
    uint64_t sticky;    /* FNV-1a of the stickiness key (has_sticky) */
    uint64_t prefix;    /* affinity key, 0: none */
    int64_t max_tokens; /* -1: not given */
} request_t;

/* Parse body (len bytes; it need not be NUL-terminated) of a request to path (exact, no query
 * string; NULL: no path facts). rq is fully written whatever the body; returns rq->rc. */
int request_parse(request_t *rq, const char *path, const char *body, size_t len);

/* Whether a stream of this request can be continued on another replica after its host died:
 * resume_request_ok's answer (and why not, in why, when why is not NULL), false for a path
 * without a continuation (kind -1). */
bool request_resumable(const request_t *rq, char *why, size_t wl);

#endif

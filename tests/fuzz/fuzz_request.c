/* libFuzzer target: the typed request (src/core/request.h), parsed once from a client's body,
 * against the functions it replaced (verbatim in tests/unit/body_oracle.h), each of which
 * parsed the body again.
 *
 * Each input is a request body, parsed as one to each of four paths (chat, completions,
 * Anthropic messages, Responses). Oracles besides the sanitizers:
 *  - the documented ranges: rc, model_rc, choices, kind, shape, max_tokens; messages
 *    NUL-terminated and non-empty where an error is said;
 *  - api_body_model: the same answer, name and message; api_anthropic_body_check: the same on
 *    the Anthropic path, 0 elsewhere;
 *  - for a body that parses (no duplicate keys): vision_has_image, affinity_prefix_key,
 *    admission's choices (node/admission.c's rule, restated here) and resume_request_ok
 *    (answer and reason) agree exactly; when rt_sticky_key returns a key under its 255-byte
 *    cut, it is the sticky key, and a
 *    sticky key it does not return is a non-empty "session_id" behind an empty "user";
 *  - for a body that does not: no images, no keys, one choice, not resumable.
 * The body is handed over in an exact-size buffer with no NUL after it (request_parse reads len
 * bytes). */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/body_oracle.h"
#include "request.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static const char *const PATHS[] = {"/v1/chat/completions", "/v1/completions", "/v1/messages",
                                    "/v1/responses"};

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h;
}

static bool terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

/* admission.c:body_model's choices: "n" when an integer, clamped to 1..128 */
static unsigned ref_choices(const char *body, size_t len)
{
    json_t *root = json_loadb(body, len, 0, NULL);
    json_int_t nc = json_integer_value(json_object_get(root, "n"));
    json_decref(root);
    return nc < 1 ? 1 : nc > REQUEST_MAX_CHOICES ? REQUEST_MAX_CHOICES : (unsigned)nc;
}

static void one(const char *path, const char *body, size_t len)
{
    request_t rq;
    CHECK(request_parse(&rq, path, body, len) == rq.rc);
    CHECK(rq.rc == 0 || rq.rc == -EINVAL);
    CHECK(rq.model_rc == REQUEST_MODEL_FOUND || rq.model_rc == REQUEST_MODEL_ABSENT ||
          rq.model_rc == -EINVAL);
    CHECK(rq.rc == 0 || rq.model_rc == -EINVAL);
    CHECK(terminated(rq.err, sizeof rq.err) && terminated(rq.model, sizeof rq.model));
    CHECK(terminated(rq.anthropic_err, sizeof rq.anthropic_err));
    CHECK(rq.model_rc != -EINVAL || rq.err[0]);
    CHECK(rq.model_rc != REQUEST_MODEL_FOUND || rq.model[0]);
    CHECK(rq.choices >= 1 && rq.choices <= REQUEST_MAX_CHOICES);
    CHECK(rq.kind == resume_kind_for_path(path));
    CHECK(rq.stream ? rq.shape == api_stream_kind(path) : rq.shape == API_STREAM_OPENAI);
    CHECK(rq.max_tokens >= -1);
    CHECK(rq.anthropic_rc == 0 || rq.anthropic_rc == -EINVAL);
    CHECK(rq.anthropic_rc == 0 || rq.anthropic_err[0]);

    /* the API's validation, message for message */
    char name[CATALOG_NAME_MAX], err[REQUEST_ERR_MAX] = "";
    int rc = api_body_model(body, len, name, sizeof name, err, sizeof err);
    CHECK(rc == rq.model_rc);
    if (rc == REQUEST_MODEL_FOUND) CHECK(strcmp(name, rq.model) == 0);
    if (rc < 0) CHECK(strcmp(err, rq.err) == 0);
    if (api_route_err_shape(path) == API_ERR_ANTHROPIC) {
        char aerr[REQUEST_ANTHROPIC_ERR_MAX] = "";
        CHECK(api_anthropic_body_check(body, len, aerr, sizeof aerr) == rq.anthropic_rc);
        if (rq.anthropic_rc < 0) CHECK(strcmp(aerr, rq.anthropic_err) == 0);
    } else {
        CHECK(rq.anthropic_rc == 0);
    }

    char why[160] = "", why_today[160] = "";
    bool ok = request_resumable(&rq, why, sizeof why);
    CHECK(ok || why[0]);
    char tiny[4];
    CHECK(request_resumable(&rq, tiny, sizeof tiny) == ok);
    CHECK(request_resumable(&rq, NULL, 0) == ok);
    if (rq.rc < 0) {
        CHECK(!rq.images && !rq.has_sticky && rq.prefix == 0);
        CHECK(rq.choices == 1 && !rq.stream && !ok);
        return;
    }
    /* a body that parses with duplicate keys rejected parses the same without */
    CHECK(rq.images == vision_has_image(body, len));
    CHECK(rq.prefix == affinity_prefix_key(body, len));
    CHECK(rq.choices == ref_choices(body, len));
    if (rq.kind >= 0) {
        CHECK(resume_request_ok((resume_kind_t)rq.kind, body, len, why_today, sizeof why_today) ==
              ok);
        if (!ok) CHECK(strcmp(why, why_today) == 0);
    }
    char sbuf[256];
    const char *sk = rt_sticky_key(body, len, sbuf, sizeof sbuf);
    if (sk && strlen(sk) < sizeof sbuf - 1)
        CHECK(rq.has_sticky && rq.sticky == fnv(sk, strlen(sk)));
    if (sk) CHECK(rq.has_sticky);
    if (!sk && rq.has_sticky) { /* "user": "" shadows session_id there, not here */
        json_t *root = json_loadb(body, len, 0, NULL);
        const char *u = json_string_value(json_object_get(root, "user"));
        const char *s = json_string_value(json_object_get(root, "session_id"));
        CHECK(u && !*u && s && *s && rq.sticky == fnv(s, strlen(s)));
        json_decref(root);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body = malloc(size ? size : 1); /* no NUL after it: only size bytes are the body */
    if (!body) return 0;
    memcpy(body, data, size);
    for (size_t i = 0; i < sizeof PATHS / sizeof PATHS[0]; i++)
        one(PATHS[i], body, size);
    free(body);
    return 0;
}

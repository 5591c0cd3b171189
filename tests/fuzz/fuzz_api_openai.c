/* libFuzzer target: request-body validation on the inference API (the body parsed once,
 * core/request.h: its "model" routes it), the image check made before routing (request_t's
 * images) and the Authorization header check (api_key_ok).
 *
 * Oracles besides the sanitizers: the documented return codes; on success the name is the
 * body's "model" string exactly (jansson parses the same bytes independently); an error always
 * comes with a message. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_openai.h"
#include "request.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static void body_model(const request_t *rq, const char *body, size_t len)
{
    int rc = rq->model_rc;
    CHECK(rc == REQUEST_MODEL_FOUND || rc == REQUEST_MODEL_ABSENT || rc == -EINVAL);
    CHECK(memchr(rq->err, '\0', sizeof rq->err) != NULL);
    if (rc == -EINVAL) CHECK(rq->err[0] != '\0');
    if (rc == REQUEST_MODEL_FOUND) {
        CHECK(memchr(rq->model, '\0', sizeof rq->model) != NULL);
        CHECK(rq->model[0] != '\0');
        json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
        CHECK(root != NULL);
        json_t *m = json_object_get(root, "model");
        CHECK(json_is_string(m));
        CHECK(json_string_length(m) == strlen(rq->model));
        CHECK(strcmp(json_string_value(m), rq->model) == 0);
        json_decref(root);
    }
}

static bool ref_key_ok(const char *header, const char *key)
{
    if (strncasecmp(header, "Bearer ", 7) != 0) return false;
    header += 7;
    while (*header == ' ')
        header++;
    return strcmp(header, key) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The body exactly as the server hands it over: body_len bytes, NUL-terminated. */
    char *body = malloc(size + 1);
    if (!body) return 0;
    memcpy(body, data, size);
    body[size] = '\0';

    request_t rq;
    request_parse(&rq, "/v1/chat/completions", body, size);
    body_model(&rq, body, size);

    /* images are only ever found in a JSON object that names an image part */
    if (rq.images) {
        json_t *root = json_loadb(body, size, 0, NULL);
        CHECK(json_is_object(root));
        json_decref(root);
        CHECK(memmem(body, size, "image", 5) || memmem(body, size, "multimodal_data", 15));
    }

    /* The same bytes as an Authorization header value (the server NUL-terminates it). */
    if (!memchr(body, '\0', size)) {
        CHECK(api_key_ok(body, "sk-secret") == ref_key_ok(body, "sk-secret"));
        const char *given = size > 7 ? body + 7 : "";
        CHECK(api_key_ok(body, given) == ref_key_ok(body, given));
    }
    free(body);
    return 0;
}

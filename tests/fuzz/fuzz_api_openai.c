/* libFuzzer target: request-body validation on the inference API (api_body_model reads the
 * client's JSON body to route it by "model"), the image check made before routing
 * (vision_has_image) and the Authorization header check (api_key_ok).
 *
 * Oracles besides the sanitizers: the documented return codes; on success the name is the
 * body's "model" string exactly (jansson parses the same bytes independently); an error always
 * comes with a message; small output buffers are never overrun. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_openai.h"
#include "vision.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static void body_model(const char *body, size_t len, size_t outlen, size_t errlen)
{
    /* Exact-size heap buffers so ASan catches a write past outlen/errlen. */
    char *out = malloc(outlen), *err = malloc(errlen);
    if (!out || !err) goto done;
    memset(out, 0x7f, outlen);
    err[0] = '\0';
    int rc = api_body_model(body, len, out, outlen, err, errlen);
    CHECK(rc == API_MODEL_FOUND || rc == API_MODEL_ABSENT || rc == -EINVAL);
    if (rc == -EINVAL) {
        CHECK(memchr(err, '\0', errlen) != NULL);
        CHECK(errlen == 1 || err[0] != '\0');
    }
    if (rc == API_MODEL_FOUND) {
        CHECK(memchr(out, '\0', outlen) != NULL);
        CHECK(out[0] != '\0');
        json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
        CHECK(root != NULL);
        json_t *m = json_object_get(root, "model");
        CHECK(json_is_string(m));
        CHECK(json_string_length(m) == strlen(out));
        CHECK(strcmp(json_string_value(m), out) == 0);
        json_decref(root);
    }
done:
    free(out);
    free(err);
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

    body_model(body, size, MODEL_NAME_MAX, 512);
    body_model(body, size, 4, 16);
    body_model(body, size, 1, 1);

    /* images are only ever found in a JSON object that names an image part */
    if (vision_has_image(body, size)) {
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

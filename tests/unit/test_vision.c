/* Unit tests for the image check made before routing (src/core/vision.h, read through
 * request_parse): image content in the OpenAI chat, Responses, Anthropic and llama-server shapes,
 * and what is not an image. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "vision.h"

/* vision.h's rule as the node reads it: request_t.images of the body parsed once */
static bool images_of(const char *body, size_t len)
{
    request_t rq;
    request_parse(&rq, "/v1/chat/completions", body, len);
    return rq.images;
}

static bool has(const char *body)
{
    return images_of(body, strlen(body));
}

static void test_images_found(void **state)
{
    (void)state;
    /* OpenAI chat: an image_url part */
    assert_true(has("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                    "\"text\",\"text\":\"what is it\"},{\"type\":\"image_url\",\"image_url\":{"
                    "\"url\":\"data:image/png;base64,AAAA\"}}]}]}"));
    /* Anthropic: an image block, and one inside a tool_result */
    assert_true(has("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
                    "\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":"
                    "\"AAAA\"}}]}]}"));
    assert_true(has("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
                    "\"tool_use_id\":\"t\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}]}"));
    /* Responses: an input_image part of an input message, and an input item of that type */
    assert_true(has("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\","
                    "\"image_url\":\"data:image/png;base64,AAAA\"}]}]}"));
    assert_true(has("{\"input\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}"));
    /* llama-server's /completion with multimodal data */
    assert_true(
        has("{\"prompt\":{\"prompt_string\":\"<__media__>\",\"multimodal_data\":[\"A\"]}}"));
    assert_true(has("{\"prompt\":[{\"prompt_string\":\"x\",\"multimodal_data\":[\"A\"]}]}"));
}

static void test_no_images(void **state)
{
    (void)state;
    /* text, even text that talks about images */
    assert_false(has("{\"messages\":[{\"role\":\"user\",\"content\":\"draw an image_url\"}]}"));
    assert_false(has("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                     "\"text\":\"image\"}]}]}"));
    assert_false(has("{\"input\":\"describe the image\"}"));
    assert_false(has("{\"prompt\":\"an image of a cat\"}"));
    /* a type field elsewhere (a tool schema) is not a message part */
    assert_false(has("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
                     "\"image\"}]}"));
    /* not JSON, not an object, empty, wrong shapes: not judged here */
    assert_false(has("not json image"));
    assert_false(has("[{\"type\":\"image\"}]"));
    assert_false(images_of(NULL, 0));
    assert_false(has("{\"messages\":{\"type\":\"image_url\"}}"));
    assert_false(has("{\"messages\":[1,\"image\",null,[{\"type\":\"image\"}]]}"));
}

static void test_scan_bounded(void **state)
{
    (void)state;
    /* an image after VISION_MAX_ITEMS text parts is beyond the scan */
    size_t cap = (VISION_MAX_ITEMS + 8) * 32 + 256, len = 0;
    char *b = malloc(cap);
    assert_non_null(b);
    len += (size_t)snprintf(b + len, cap - len, "{\"messages\":[{\"content\":[");
    for (int i = 0; i < VISION_MAX_ITEMS; i++)
        len += (size_t)snprintf(b + len, cap - len, "{\"type\":\"text\"},");
    len += (size_t)snprintf(b + len, cap - len, "{\"type\":\"image\"}]}]}");
    assert_false(images_of(b, len));
    /* ... and found when it is the last one looked at */
    len = (size_t)snprintf(b, cap, "{\"messages\":[{\"content\":[");
    for (int i = 0; i < VISION_MAX_ITEMS - 2; i++) /* the message itself counts once */
        len += (size_t)snprintf(b + len, cap - len, "{\"type\":\"text\"},");
    len += (size_t)snprintf(b + len, cap - len, "{\"type\":\"image\"}]}]}");
    assert_true(images_of(b, len));
    free(b);
}

static void test_refusal_message(void **state)
{
    (void)state;
    char msg[512];
    vision_refusal("tiny", msg, sizeof msg);
    assert_non_null(strstr(msg, "model 'tiny' cannot read images"));
    assert_non_null(strstr(msg, "--mmproj tiny="));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_images_found),
        cmocka_unit_test(test_no_images),
        cmocka_unit_test(test_scan_bounded),
        cmocka_unit_test(test_refusal_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

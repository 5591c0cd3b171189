/* vision — whether an inference request carries images, decided before it is routed (pure: no
 * I/O). A model without a vision projector (--mmproj) cannot read them: the node answers 400
 * and says so rather than letting llama-server fail or, worse, ignore them.
 *
 * Image content, per API:
 *  - OpenAI chat: messages[].content[] parts {"type":"image_url"} (also "input_image", and
 *    "input_audio"/"file" are not images and pass);
 *  - OpenAI Responses: input[].content[] parts {"type":"input_image"}, also input[] items of that
 *    type;
 *  - Anthropic messages: messages[].content[] blocks {"type":"image"}, also inside a
 *    tool_result block's content[];
 *  - llama-server's /completion: prompt objects with "multimodal_data".
 * Scanning is bounded: at most VISION_MAX_ITEMS list elements are looked at (a larger body is
 * judged by its first ones; llama-server sees the rest). */
#ifndef MESH_VISION_H
#define MESH_VISION_H

#include <stdbool.h>
#include <stddef.h>

#define VISION_MAX_ITEMS 4096

/* Whether a parsed request body (its root object; anything else has no image) has image
 * content: request.h's images, for the body parsed once. No prefilter: the caller's. */
struct json_t;
bool vision_json_has_image(const struct json_t *root);

/* The error code and message of a refusal (400): model cannot read the request's images. */
#define VISION_ERR_CODE "model_not_multimodal"
void vision_refusal(const char *model, char *out, size_t len);

#endif

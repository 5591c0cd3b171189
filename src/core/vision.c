/* vision — see vision.h. */
#include "vision.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static bool is_image_part(const json_t *part)
{
    const char *t = json_string_value(json_object_get(part, "type"));
    if (t &&
        (strcmp(t, "image_url") == 0 || strcmp(t, "image") == 0 || strcmp(t, "input_image") == 0))
        return true;
    return json_object_get(part, "multimodal_data") != NULL;
}

/* content: a string (no image) or a list of parts; a tool_result's own content is looked at
 * once more (depth 1). *budget bounds the elements looked at. */
static bool content_has_image(const json_t *content, int depth, size_t *budget)
{
    if (!json_is_array(content)) return false;
    size_t i;
    const json_t *part;
    json_array_foreach(content, i, part)
    {
        if (*budget == 0) return false;
        (*budget)--;
        if (!json_is_object(part)) continue;
        if (is_image_part(part)) return true;
        if (depth == 0 && content_has_image(json_object_get(part, "content"), 1, budget))
            return true;
    }
    return false;
}

/* messages, input or prompt: a list of items (prompt may also be one object) */
static bool list_has_image(const json_t *list, bool may_be_object, size_t *budget)
{
    if (may_be_object && json_is_object(list)) return is_image_part(list);
    if (!json_is_array(list)) return false;
    size_t i;
    const json_t *m;
    json_array_foreach(list, i, m)
    {
        if (*budget == 0) return false;
        (*budget)--;
        if (!json_is_object(m)) continue;
        if (is_image_part(m) || content_has_image(json_object_get(m, "content"), 0, budget))
            return true;
    }
    return false;
}

bool vision_json_has_image(const json_t *root)
{
    size_t budget = VISION_MAX_ITEMS;
    return json_is_object(root) &&
           (list_has_image(json_object_get(root, "messages"), false, &budget) ||
            list_has_image(json_object_get(root, "input"), false, &budget) ||
            list_has_image(json_object_get(root, "prompt"), true, &budget));
}

void vision_refusal(const char *model, char *out, size_t len)
{
    snprintf(out, len,
             "model '%s' cannot read images: it is not served with a vision projector (start "
             "its node with --mmproj %s=PROJECTOR.gguf, or send text only)",
             model, model);
}

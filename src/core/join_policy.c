#include "join_policy.h"

#include <string.h>

join_decision_t join_decide(const char *own_id, const char *cur_mesh, bool stuck,
                            const char *tok_id, const char *tok_mesh)
{
    if (own_id && own_id[0] && strcmp(own_id, tok_id) == 0) return JOIN_OWN_TOKEN;
    if (!cur_mesh) return JOIN_START;
    if (stuck) return JOIN_REPLACE;
    return strcmp(cur_mesh, tok_mesh) == 0 ? JOIN_ALREADY : JOIN_OTHER_MESH;
}

int join_http_status(join_decision_t d)
{
    switch (d) {
    case JOIN_START:
    case JOIN_REPLACE:
        return 202;
    case JOIN_ALREADY:
        return 200;
    case JOIN_OTHER_MESH:
        return 409;
    default:
        return 400;
    }
}

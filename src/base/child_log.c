#include "child_log.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const char *child_fail_name(child_fail_t f)
{
    switch (f) {
    case CHILD_FAIL_PORT:
        return "port";
    case CHILD_FAIL_ARGS:
        return "arguments";
    case CHILD_FAIL_FILE:
        return "file";
    default:
        return "other";
    }
}

const char *child_log_strip(const char *l)
{
    const char *q = l;
    while (*q == '.' || (*q >= '0' && *q <= '9'))
        q++;
    if (q != l && q[0] == ' ' && q[1] && q[2] == ' ') return q + 3;
    return l;
}

static bool has_any(const char *l, const char *const *pats)
{
    for (; *pats; pats++)
        if (strstr(l, *pats)) return true;
    return false;
}

/* tools/server/server-context.cpp and common/speculative.cpp of the pinned release */
static const char *const DEGRADED_PATS[] = {"speculative decoding", "draft vocabs", NULL};

bool child_log_degraded(const char *line)
{
    const char *l = child_log_strip(line);
    return l != line && l[-2] == 'E' && has_any(l, DEGRADED_PATS);
}

/* From llama.cpp (tools/server/server-http.cpp, tools/rpc, common/arg.cpp, ggml/src/gguf.cpp,
 * src/llama-model-loader.cpp, src/llama-model.cpp) of the pinned release. */
static const char *const PORT_PATS[] = {"couldn't bind HTTP server socket",
                                        "Failed to create server socket", NULL};
static const char *const ARGS_PATS[] = {"error while handling argument", "invalid argument:", NULL};
static const char *const FILE_PATS[] = {"invalid magic characters",
                                        "unknown model architecture",
                                        "data is not within the file bounds",
                                        "model is corrupted or incomplete",
                                        "gguf_init_from_",
                                        "failed to open GGUF file",
                                        NULL};
static const char *const ERROR_PATS[] = {"error", "failed", "invalid", NULL};

child_fail_t child_log_classify(const char *const *lines, size_t n, char *reason, size_t len)
{
    static const struct {
        child_fail_t kind;
        const char *const *pats;
    } order[] = {{CHILD_FAIL_PORT, PORT_PATS},
                 {CHILD_FAIL_ARGS, ARGS_PATS},
                 {CHILD_FAIL_FILE, FILE_PATS},
                 {CHILD_FAIL_OTHER, ERROR_PATS}};
    if (len) reason[0] = '\0';
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        if (order[k].kind == CHILD_FAIL_OTHER) {
            /* the first line llama.cpp logged at error level ("0.00.028.079 E ...") */
            for (size_t i = 0; i < n; i++) {
                const char *l = lines[i] ? child_log_strip(lines[i]) : NULL;
                if (l && l != lines[i] && l[-2] == 'E' && l[-3] == ' ') {
                    if (len) snprintf(reason, len, "%s", l);
                    return CHILD_FAIL_OTHER;
                }
            }
        }
        /* the first such line is the cause; later ones are its consequences */
        for (size_t i = 0; i < n; i++) {
            if (!lines[i] || !has_any(lines[i], order[k].pats)) continue;
            const char *l = child_log_strip(lines[i]);
            const char *why = strstr(l, "error loading model: ");
            if (why && order[k].kind == CHILD_FAIL_FILE) l = why + strlen("error loading model: ");
            if (len) snprintf(reason, len, "%s", l);
            return order[k].kind;
        }
    }
    return CHILD_FAIL_OTHER;
}

/* child_log — what a llama.cpp child's last output lines say about why it failed (pure).
 *
 * A load can fail for reasons a retry cannot fix: the file is not a GGUF model llama.cpp can
 * read (bad magic, corrupt or truncated data, an architecture this build does not know), or an
 * argument llama-server refuses. Or the child lost its port to another process between the
 * node picking it and the child binding it: a new port fixes that. Anything else (out of
 * memory, a crash) may go away once other models are unloaded. */
#ifndef MESH_CHILD_LOG_H
#define MESH_CHILD_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    CHILD_FAIL_OTHER = 0, /* unknown: maybe memory; worth a retry after unloading others */
    CHILD_FAIL_PORT,      /* could not bind its port: start again on another one */
    CHILD_FAIL_ARGS,      /* llama-server refused its arguments */
    CHILD_FAIL_FILE,      /* the model file is unusable (magic, corrupt, unknown architecture) */
} child_fail_t;

const char *child_fail_name(child_fail_t f);

/* Classify the output of a child that exited while starting. lines: its last lines, oldest
 * first. reason receives the most telling line without llama.cpp's "0.00.004.402 E " prefix
 * ("" when no line says anything). */
child_fail_t child_log_classify(const char *const *lines, size_t n, char *reason, size_t len);

/* An error line of a running child that says a feature the node configured is off while the
 * server goes on without it (a draft model whose vocabulary does not match the target's:
 * no speculative decoding). The node logs it as a warning: without -v it would go unseen. */
bool child_log_degraded(const char *line);

/* A line without llama.cpp's log prefix ("0.00.118.628 E "). */
const char *child_log_strip(const char *line);

#endif

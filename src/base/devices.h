/* devices — the memory this node's accelerators have, as the installed llama-server reports it
 * (`llama-server --list-devices`), so that a node offers what its llama.cpp build can use. */
#ifndef MESH_DEVICES_H
#define MESH_DEVICES_H

#include <stddef.h>
#include <stdint.h>

/* Parse the output of `llama-server --list-devices`: lines "  NAME: DESC (T MiB, F MiB free)".
 * Sets *free_bytes to the free memory of every listed device together and *n_devices to their
 * count ("(none)" → 0 devices). Pure; bounded (lines past 64 are ignored). 0, or -EINVAL when
 * the text is not such a listing. */
int devices_parse(const char *text, size_t len, uint64_t *free_bytes, unsigned *n_devices);

/* Run `llama_server --list-devices` (no shell; killed after timeout_ms) and parse its output.
 * For startup only: it blocks the caller for at most timeout_ms. 0 or a negative errno. */
int devices_detect(const char *llama_server, unsigned timeout_ms, uint64_t *free_bytes,
                   unsigned *n_devices);

#endif

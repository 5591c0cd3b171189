/* devices — the accelerators this node's llama.cpp build can use, as the installed llama-server
 * reports them (`llama-server --list-devices`): name, backend, description, total and free
 * memory per device, so that a node offers and announces what its build can use. */
#ifndef MESH_DEVICES_H
#define MESH_DEVICES_H

#include <stddef.h>
#include <stdint.h>

#define DEVICES_MAX 16        /* devices kept (a listing with more keeps the first) */
#define DEVICE_NAME_MAX 32    /* "Vulkan0", "CUDA1", "Metal", bytes including the NUL */
#define DEVICE_BACKEND_MAX 16 /* "Vulkan", "CUDA", "ROCm", "Metal", ... */
#define DEVICE_DESC_MAX 96    /* "NVIDIA GeForce RTX 4090", "llvmpipe (LLVM 15.0.6, 256 bits)" */

typedef struct {
    char name[DEVICE_NAME_MAX];       /* llama.cpp's device name, as --device takes it */
    char backend[DEVICE_BACKEND_MAX]; /* the name without its index */
    char desc[DEVICE_DESC_MAX];
    uint64_t total_bytes, free_bytes;
} device_t;

typedef struct {
    unsigned n;
    device_t dev[DEVICES_MAX];
} devices_t;

/* Parse the output of `llama-server --list-devices`: lines "  NAME: DESC (T MiB, F MiB free)"
 * after "Available devices:" ("(none)" → 0 devices). Pure; bounded (lines past 64 are ignored,
 * devices past DEVICES_MAX dropped, longer names and descriptions cut; a name must be
 * [A-Za-z0-9_-]+ and a figure above 1 EiB is not a real reading: such lines are skipped).
 * 0, or -EINVAL when the text is not such a listing. */
int devices_parse(const char *text, size_t len, devices_t *out);

/* A --device list: "none", or 1..DEVICES_MAX names of [A-Za-z0-9_-]+ (< DEVICE_NAME_MAX bytes)
 * separated by commas, at most 511 bytes. 0 or -EINVAL. */
int devices_list_valid(const char *list);

/* Keep only the devices `list` names (devices_list_valid; "none": none), in d's order. 0, or
 * -ENOENT for a name d does not list, with err saying which and what d lists. */
int devices_select(devices_t *d, const char *list, char *err, size_t errlen);

/* The free memory of every device together. */
uint64_t devices_free(const devices_t *d);

/* Run `llama_server --list-devices` (no shell; killed after timeout_ms) and parse its output.
 * For startup only: it blocks the caller for at most timeout_ms. 0 or a negative errno. */
int devices_detect(const char *llama_server, unsigned timeout_ms, devices_t *out);

#endif

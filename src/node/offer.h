/* offer — how much memory this node offers the mesh: --max-vram; else the free memory of the
 * accelerators the installed llama-server lists (base/devices.h); else, on a CPU-only build,
 * half of the available RAM. Logs which. The devices are listed in every case (the status and
 * the announcement show them). For startup only (it runs llama-server --list-devices once). */
#ifndef MESH_OFFER_H
#define MESH_OFFER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "devices.h"

#include <jansson.h>

/* *devs (may be NULL): the accelerators llama-server lists (none: a CPU-only build). With
 * devices, --offload-ram adds RAM for the layers that do not fit on them (partial offload):
 * *device_bytes (may be NULL) receives the part of the offer that is the devices' memory (0:
 * no device; the offer is RAM). */
int offer_detect(const config_t *cfg, const char *llama_server, devices_t *devs, uint64_t *offer,
                 uint64_t *device_bytes, char *err, size_t errlen);
/* The same without logging (mesh-llm models list): max_vram when set (bytes, 0 unset); else
 * the devices llama_server lists (NULL: none looked for); else half of the available RAM. how
 * receives which, for the user. */
uint64_t offer_compute(uint64_t max_vram, const char *device, const char *llama_server,
                       devices_t *devs, char *how, size_t len, int *select_rc);

/* For the status: {"flavour": the llama.cpp flavour of llama_server's directory (the FLAVOUR
 * file scripts/llama.sh writes; null when absent), "devices": [{name, backend, description,
 * total_bytes, free_bytes}]} (free as detected at start). */
json_t *offer_devices_json(const devices_t *devs, const char *llama_server);

#endif

/* offer — how much memory this node offers the mesh: --max-vram; else the free memory of the
 * accelerators the installed llama-server lists (base/devices.h); else, on a CPU-only build,
 * half of the available RAM. Logs which. For startup only (it may run llama-server once). */
#ifndef MESH_OFFER_H
#define MESH_OFFER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* *n_accel (may be NULL): the accelerators whose memory is offered (0: the CPU's RAM, or
 * --max-vram, which runs no detection). */
uint64_t offer_detect(const config_t *cfg, const char *llama_server, unsigned *n_accel);
/* The same without logging (mesh-llm models list): max_vram when set (bytes, 0 unset); else
 * the devices llama_server lists (NULL: none looked for); else half of the available RAM. how
 * receives which, for the user. */
uint64_t offer_compute(uint64_t max_vram, const char *llama_server, unsigned *n_accel, char *how,
                       size_t len);

#endif

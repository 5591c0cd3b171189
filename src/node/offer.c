/* offer — see offer.h. */
#include "offer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "devices.h"
#include "ledger.h"
#include "log.h"
#include "platform.h"

/* Memory this node offers: --max-vram; else the free memory of the accelerators the installed
 * llama-server reports (--list-devices); else (a CPU-only build) half of the available RAM. */
uint64_t offer_compute(uint64_t max_vram, const char *llama_server, unsigned *n_accel, char *how,
                       size_t len)
{
    if (n_accel) *n_accel = 0;
    if (max_vram) {
        snprintf(how, len, "--max-vram");
        return max_vram;
    }
    uint64_t dev = 0;
    unsigned n_dev = 0;
    int rc = llama_server ? devices_detect(llama_server, 15000, &dev, &n_dev) : -ENOENT;
    if (rc == 0 && n_dev > 0 && dev > 0) {
        if (n_accel) *n_accel = n_dev;
        snprintf(how, len, "free on %u device(s) llama-server reports", n_dev);
        return dev;
    }
    if (rc != 0 && llama_server)
        snprintf(how, len, "llama-server --list-devices failed (%s): half of the available RAM",
                 strerror(-rc));
    else
        snprintf(how, len, "half of the available RAM: no accelerator; --max-vram GB sets it");
    return plat_mem_available() / 2;
}

uint64_t offer_detect(const config_t *cfg, const char *llama_server, unsigned *n_accel)
{
    char b[32], how[256];
    uint64_t offer = offer_compute(cfg->max_vram_bytes, llama_server, n_accel, how, sizeof how);
    if (strstr(how, "failed"))
        LOGW("node", "offering %s of memory: %s", ledger_fmt(offer, b, sizeof b), how);
    else
        LOGI("node", "offering %s of memory: %s", ledger_fmt(offer, b, sizeof b), how);
    return offer;
}

/* offer — see offer.h. */
#include "offer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "devices.h"
#include "ledger.h"
#include "log.h"

/* Memory this node offers: --max-vram; else the free memory of the accelerators the installed
 * llama-server reports (--list-devices); else (a CPU-only build) half of the available RAM. */
uint64_t offer_detect(const config_t *cfg, const char *llama_server, unsigned *n_accel)
{
    char b[32];
    if (n_accel) *n_accel = 0;
    if (cfg->max_vram_bytes) {
        LOGI("node", "offering %s of memory (--max-vram)",
             ledger_fmt(cfg->max_vram_bytes, b, sizeof b));
        return cfg->max_vram_bytes;
    }
    uint64_t dev = 0;
    unsigned n_dev = 0;
    int rc = devices_detect(llama_server, 15000, &dev, &n_dev);
    if (rc == 0 && n_dev > 0 && dev > 0) {
        if (n_accel) *n_accel = n_dev;
        LOGI("node", "offering %s of memory: free on %u device(s) llama-server reports",
             ledger_fmt(dev, b, sizeof b), n_dev);
        return dev;
    }
    if (rc != 0)
        LOGW("node", "llama-server --list-devices failed (%s): offering half of the RAM",
             strerror(-rc));
    uint64_t avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = (uint64_t)kb * 1024;
                break;
            }
        }
        fclose(f);
    }
    if (!avail) avail = uv_get_free_memory();
    LOGI("node",
         "offering %s of memory: half of the available RAM (no accelerator; --max-vram "
         "GB sets it)",
         ledger_fmt(avail / 2, b, sizeof b));
    return avail / 2;
}

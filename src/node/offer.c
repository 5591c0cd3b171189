/* offer — see offer.h. */
#include "offer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "devices.h"
#include "ledger.h"
#include "view.h"
#include "log.h"
#include "platform.h"

/* Memory this node offers: --max-vram; else the free memory of the accelerators the installed
 * llama-server reports (--list-devices); else (a CPU-only build) half of the available RAM. */
uint64_t offer_compute(uint64_t max_vram, const char *device, const char *llama_server,
                       devices_t *devs, char *how, size_t len, int *select_rc)
{
    devices_t none;
    if (!devs) devs = &none;
    memset(devs, 0, sizeof *devs);
    if (select_rc) *select_rc = 0;
    /* the devices are listed even under --max-vram: they are shown and announced */
    int rc = llama_server ? devices_detect(llama_server, 15000, devs) : -ENOENT;
    if (rc != 0) memset(devs, 0, sizeof *devs);
    if (device && rc == 0) { /* --device: those alone */
        int src = devices_select(devs, device, how, len);
        if (src) {
            if (select_rc) *select_rc = src;
            memset(devs, 0, sizeof *devs);
            return 0;
        }
    }
    if (max_vram) {
        snprintf(how, len, "--max-vram");
        return max_vram;
    }
    uint64_t dev = devices_free(devs);
    if (rc == 0 && devs->n > 0 && dev > 0) {
        size_t off =
            (size_t)snprintf(how, len, "free on %u device(s) llama-server reports:", devs->n);
        for (unsigned i = 0; i < devs->n && off < len; i++)
            off += (size_t)snprintf(how + off, len - off, "%s %s (%s)", i ? "," : "",
                                    devs->dev[i].name, devs->dev[i].desc);
        return dev;
    }
    if (rc != 0 && llama_server)
        snprintf(how, len, "llama-server --list-devices failed (%s): half of the available RAM",
                 strerror(-rc));
    else
        snprintf(how, len, "half of the available RAM: no accelerator; --max-vram GB sets it");
    return plat_mem_available() / 2;
}

json_t *offer_devices_json(const devices_t *devs, const char *llama_server)
{
    json_t *list = view_devices_json(devs ? devs->dev : NULL, devs ? devs->n : 0);
    char path[4096], flavour[32] = "";
    const char *slash = llama_server ? strrchr(llama_server, '/') : NULL;
    if (slash && (size_t)(slash - llama_server) < sizeof path - 16) {
        snprintf(path, sizeof path, "%.*s/FLAVOUR", (int)(slash - llama_server), llama_server);
        FILE *f = fopen(path, "re");
        if (f) {
            if (!fgets(flavour, sizeof flavour, f)) flavour[0] = '\0';
            fclose(f);
            flavour[strcspn(flavour, "\r\n")] = '\0';
        }
    }
    json_t *fl = flavour[0] ? json_string(flavour) : NULL; /* NULL: not UTF-8 either */
    return json_pack("{s:o,s:o}", "flavour", fl ? fl : json_null(), "devices", list);
}

int offer_detect(const config_t *cfg, const char *llama_server, devices_t *devs, uint64_t *out,
                 uint64_t *device_bytes, char *err, size_t errlen)
{
    char b[32], r[32], how[1024];
    devices_t mine;
    if (!devs) devs = &mine;
    int src = 0;
    uint64_t offer =
        offer_compute(cfg->max_vram_bytes, cfg->device, llama_server, devs, how, sizeof how, &src);
    if (src) {
        snprintf(err, errlen, "--device %s: %s", cfg->device, how);
        return src;
    }
    if (device_bytes) *device_bytes = devs->n ? offer : 0;
    if (strstr(how, "failed"))
        LOGW("node", "offering %s of memory: %s", ledger_fmt(offer, b, sizeof b), how);
    else
        LOGI("node", "offering %s of memory: %s", ledger_fmt(offer, b, sizeof b), how);
    if (cfg->offload_ram_bytes && !devs->n) {
        LOGW("node", "--offload-ram is ignored: llama-server lists no accelerator, so the models "
                     "run from RAM already (the offer above)");
    } else if (cfg->offload_ram_bytes) {
        offer =
            offer + cfg->offload_ram_bytes < offer ? UINT64_MAX : offer + cfg->offload_ram_bytes;
        LOGI("node",
             "and %s of RAM for the layers that do not fit on the devices "
             "(--offload-ram): %s in all",
             ledger_fmt(cfg->offload_ram_bytes, r, sizeof r), ledger_fmt(offer, b, sizeof b));
    }
    *out = offer;
    return 0;
}

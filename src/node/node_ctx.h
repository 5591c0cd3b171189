/* node_ctx — the parts a running node owns that are not a module of their own (issue 30 S12):
 * its configuration (the command line merged with the config file and the environment, parsed
 * once), the --model REFs the node downloads, the change bus, metrics and request log, the HTTP
 * buffer budget, the relays' shared state and the RPC tunnels' counters. app/main.c builds one
 * with node_ctx_init and hands its parts to each module's init; nothing here is a process
 * global, so a test builds as many as it likes. */
#ifndef MESH_NODE_CTX_H
#define MESH_NODE_CTX_H

#include <stddef.h>

#include "bin_find.h"
#include "changes.h"
#include "config.h"
#include "devices.h"
#include "httpd.h"
#include "meshstat.h"
#include "node_dl.h"
#include "relay.h"
#include "tunnel_rpc.h"

typedef struct {
    config_t cfg;                 /* the options and cfg.tun, the tunables */
    node_dl_args_t dl_args;       /* the --model REFs taken off the command line (node_dl.h) */
    changes_t changes;            /* the change bus: what /api/status shows changed */
    meshstat_t stat;              /* metrics and the request log: /metrics, the status */
    httpd_budget_t http_budget;   /* request bytes the API and console servers buffer together */
    relay_ctx_t relay;            /* what the node's relays share: counters, prefix affinity */
    tunnel_rpc_stats_t rpc_stats; /* the RPC tunnels' counters, both sides (tunnel_rpc.h) */
    bin_env_t bins;               /* where llama.cpp's binaries are looked for (bin_find.h) */
    devices_t devices;            /* the accelerators llama-server lists (offer_detect) */
} node_ctx_t;

/* Parse argc/argv (with the config file and the MESH_LLM_* environment, config_file.h) into a
 * zeroed ctx and set up its parts. argv's --model REFs are taken off it (node_dl_take_args), so
 * argv is rearranged. Returns CONFIG_OK, CONFIG_EXIT when --help/--version printed what was
 * asked (nothing to free), or a negative errno with err saying why (nothing to free). */
int node_ctx_init(node_ctx_t *ctx, int argc, char **argv, char *err, size_t errlen);
/* Free what node_ctx_init gave ctx (after CONFIG_OK). */
void node_ctx_free(node_ctx_t *ctx);

#endif

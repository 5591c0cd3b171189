/* node_ctx — a node's owned parts, built from its command line (node_ctx.h). */
#include "node_ctx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_file.h"

int node_ctx_init(node_ctx_t *ctx, int argc, char **argv, char *err, size_t errlen)
{
    memset(ctx, 0, sizeof *ctx);
    config_src_t *src = calloc(1, sizeof *src); /* large: the command line merged with the file */
    if (!src) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int rc = config_src_load(src, argc, argv, err, errlen);
    if (rc == 0) {
        node_dl_take_args(&ctx->dl_args, &src->argc, src->argv); /* downloaded by the node */
        rc = config_parse_src(&ctx->cfg, src, err, errlen);
        config_src_free(src);
    }
    free(src);
    if (rc != CONFIG_OK) return rc;
    meshstat_init(&ctx->stat, &ctx->changes); /* a logged request changes the status */
    /* MESH_LLM_HTTP_MAX_BUFFERED: bytes of requests the node's HTTP connections (the API and
     * console servers, sharing the budget) may buffer together */
    ctx->http_budget.cap = (size_t)ctx->cfg.tun.http_max_buffered;
    ctx->relay.tun = &ctx->cfg.tun; /* the relay's deadlines and prefix affinity */
    ctx->bins = (bin_env_t){.env_dir = ctx->cfg.bin_dir_env, .cache = ctx->cfg.tun.cache};
    return CONFIG_OK;
}

void node_ctx_free(node_ctx_t *ctx)
{
    config_free(&ctx->cfg);
}

/* config_nostr — the public-discovery flags (see config_int.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_int.h"
#include "listing.h"
#include "options.h"
#include "ws_client.h"

int config_nostr_opt(config_t *cfg, int opt, const char *arg, char *err, size_t errlen)
{
    switch (opt) {
    case OPT_AUTO:
        cfg->auto_join = true;
        return 0;
    case OPT_PUBLISH:
        cfg->publish = true;
        return 0;
    case OPT_REGION:
        if (!*arg || strlen(arg) > LISTING_REGION_MAX) {
            snprintf(err, errlen, "--region needs a name of 1 to %d characters, like eu or us",
                     LISTING_REGION_MAX);
            return -EINVAL;
        }
        free(cfg->region);
        cfg->region = strdup(arg);
        return cfg->region ? 0 : -ENOMEM;
    case OPT_NOSTR_RELAY: {
        int tls, port;
        char host[256], path[WS_URL_MAX];
        if (ws_parse_url(arg, &tls, host, sizeof host, &port, path, sizeof path) != 0) {
            snprintf(err, errlen,
                     "--nostr-relay needs a ws:// or wss:// URL, like wss://relay.damus.io, got "
                     "'%s'",
                     arg);
            return -EINVAL;
        }
        if (cfg->n_nostr_relays >= CONFIG_MAX_RELAYS) {
            snprintf(err, errlen, "at most %d --nostr-relay", CONFIG_MAX_RELAYS);
            return -EINVAL;
        }
        cfg->nostr_relays[cfg->n_nostr_relays] = strdup(arg);
        return cfg->nostr_relays[cfg->n_nostr_relays++] ? 0 : -ENOMEM;
    }
    }
    return -EINVAL;
}

const char *config_env_nostr_relays(void)
{
    return getenv("MESH_LLM_NOSTR_RELAYS");
}

int config_nostr_check(config_t *cfg, char *err, size_t errlen)
{
    const char *env = config_env_nostr_relays();
    if (env && !(cfg->nostr_relays_env = strdup(env))) return -ENOMEM;
    if (cfg->auto_join && cfg->n_joins > 0) {
        snprintf(err, errlen, "--auto finds a mesh to join; it cannot be combined with --join");
        return -EINVAL;
    }
    if (cfg->client && (cfg->publish || cfg->auto_join)) {
        snprintf(err, errlen,
                 "--client cannot be combined with %s: a client routes through the mesh given "
                 "with --join",
                 cfg->publish ? "--publish" : "--auto");
        return -EINVAL;
    }
    return 0;
}

void config_nostr_free(config_t *cfg)
{
    free(cfg->region);
    for (size_t i = 0; i < cfg->n_nostr_relays; i++)
        free(cfg->nostr_relays[i]);
    cfg->n_nostr_relays = 0;
    free(cfg->nostr_relays_env);
    cfg->nostr_relays_env = NULL;
}

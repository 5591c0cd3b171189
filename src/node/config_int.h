/* config_int — what config.c (the CLI parser) and config_secrets.c (secrets from files and the
 * environment, allowed origins, startup warnings) share. Private to config. */
#ifndef MESH_CONFIG_INT_H
#define MESH_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

/* --join TOKEN | @FILE (tokens separated by whitespace) */
int config_join_arg(config_t *cfg, const char *arg, char *err, size_t errlen);
/* --api-key KEY (from says where it came from, for messages) */
int config_set_api_key(config_t *cfg, const char *key, size_t len, const char *from, char *err,
                       size_t errlen);
/* --api-key-file FILE */
int config_api_key_file(config_t *cfg, const char *path, char *err, size_t errlen);
/* --allow-origin ORIGIN */
int config_allow_origin(config_t *cfg, const char *arg, char *err, size_t errlen);
/* --stun, --turn, --turn-user, --turn-password-file, the config file's turn_password (from_file:
 * refused on the command line) */
int config_nat_server(config_t *cfg, int opt, const char *arg, bool from_file, char *err,
                      size_t errlen);
void config_nat_servers_free(config_t *cfg);
/* MESH_LLM_JOIN, MESH_LLM_API_KEY and MESH_LLM_TURN_PASSWORD, when the flags did not set them */
int config_secrets_from_env(config_t *cfg, char *err, size_t errlen);

/* config_nostr.c: --auto, --publish, --region, --nostr-relay; their combination with the rest;
 * freeing what they hold */
int config_nostr_opt(config_t *cfg, int opt, const char *arg, char *err, size_t errlen);
int config_nostr_check(config_t *cfg, char *err, size_t errlen);
void config_nostr_free(config_t *cfg);
/* config_serve.c: --draft NAME|PATH, --mmproj MODEL=PATH; finish: checks once every option is
 * read (a catalog --draft resolved to its file in the models directory); free: their memory */
int config_draft_arg(config_t *cfg, const char *arg, char *err, size_t errlen);
int config_mmproj_arg(config_t *cfg, const char *arg, char *err, size_t errlen);
int config_serve_finish(config_t *cfg, char *err, size_t errlen);
void config_serve_free(config_t *cfg);

#endif

/* Command line and environment → a validated, immutable configuration. */
#ifndef MESH_CONFIG_H
#define MESH_CONFIG_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "identity.h"
#include "log.h"
#include "tunables.h"

typedef enum {
    MODEL_TYPE_AUTO = 0,
    MODEL_TYPE_LLM,
    MODEL_TYPE_EMBEDDING,
    MODEL_TYPE_RERANKING
} model_type_t;

const char *model_type_name(model_type_t t);

#define CONFIG_MAX_MODELS 64
#define MODEL_NAME_MAX 128
#define CONFIG_MAX_JOIN 16
#define CONFIG_MAX_ORIGINS 16
#define CONFIG_MAX_RELAYS 16
#define CONFIG_MAX_STUN 4
#define CONFIG_SECRET_FILE_MAX 65536 /* --join @FILE, --api-key-file: larger files are refused */

typedef struct {
    char *path;
    char name[MODEL_NAME_MAX];
    model_type_t type; /* MODEL_TYPE_AUTO unless labelled with a ":type" suffix */
    bool from_dir;     /* found in --models-dir (loaded on demand) rather than --model */
} config_model_t;

/* Per-model settings from the config file's models list (by model name). */
typedef struct {
    char name[MODEL_NAME_MAX];
    uint32_t ctx_size;   /* 0: the node's --ctx-size */
    uint32_t slots;      /* 0: the node's --slots */
    char *llamacpp_args; /* NULL: the node's --llamacpp-args */
} config_model_opts_t;

typedef struct {
    config_model_t models[CONFIG_MAX_MODELS];
    size_t n_models;
    /* --model NAME with no such file: asked of the mesh (announced in requested_models; needs
     * --join). No downloads: the node serves it only as a split worker of a peer's group. */
    char requested[CONFIG_MAX_MODELS][MODEL_NAME_MAX];
    size_t n_requested;
    char *models_dir;
    int port;         /* API port, 0 = pick a free one */
    int console_port; /* management port, 0 = pick a free one */
    int ollama_port;  /* the inference API again on this port (--ollama-port), -1 = off */
    bool headless;
    bool listen_all;
    uint32_t ctx_size; /* per slot; 0 = the model's own */
    uint32_t slots;    /* --slots; 0 = as many as fit (slots.h) */
    char *llamacpp_args;
    char *bin_dir;
    char *bin_dir_env; /* $MESH_LLM_BIN_DIR as read at start (NULL: unset), searched first */
    char *api_key;
    size_t max_body_bytes;
    unsigned max_connections; /* API client connections at once (0: httpd's default, 4096) */
    unsigned max_loaded[3];   /* --max-loaded-models LLM EMBEDDING RERANKING */
    log_format_t log_format;
    bool verbose;
    token_t joins[CONFIG_MAX_JOIN]; /* --join, decoded and validated */
    size_t n_joins;
    char *mesh_name;
    int bind_port;              /* QUIC UDP port, 0 = any free */
    uint64_t max_vram_bytes;    /* --max-vram, 0 = detect */
    uint64_t offload_ram_bytes; /* --offload-ram: RAM for layers beyond the devices, 0 = none */
    char *device;       /* --device LIST (devices_select): the accelerators used; NULL: every one */
    bool split;         /* --split: force split groups for this node's models */
    bool split_private; /* --split-private: a split it hosts keeps input and output here */
    bool client;        /* --client: route only, serve nothing, lend nothing */
    bool relay;         /* --relay: forward packets for members that cannot reach each other */
    bool no_portmap;    /* --no-portmap */
    bool own_mesh;      /* --own-mesh: form its own mesh even without a model (not idle) */
    /* NAT traversal servers (mesh.h mesh_servers_start): --stun HOST:PORT (repeatable),
     * --turn turn:HOST:PORT, --turn-user NAME and the password (--turn-password-file FILE,
     * $MESH_LLM_TURN_PASSWORD or the config file's mesh.turn_password; never argv). */
    char *stun[CONFIG_MAX_STUN];
    size_t n_stun;
    char *turn, *turn_user, *turn_password;
    /* --allow-origin ORIGIN (repeatable): web pages of these origins may call the APIs. */
    char *allow_origins[CONFIG_MAX_ORIGINS];
    size_t n_allow_origins;
    /* A secret was given on the command line (--join TOKEN, --api-key KEY), where every local
     * user can read it (ps, /proc): config_log_warnings says so. */
    bool join_in_argv, api_key_in_argv;
    /* Admission control (node/admission.h): --api-keys FILE (keys with tiers, read at startup),
     * --queue-len N (per model, default 64), --pin MODEL (repeatable). */
    char *api_keys_file;
    unsigned queue_len;
    char pins[CONFIG_MAX_MODELS][MODEL_NAME_MAX];
    size_t n_pins;
    /* Public discovery over Nostr (config_nostr.c): --auto, --publish, --region R,
     * --nostr-relay URL (repeatable). */
    bool auto_join;
    bool publish;
    char *region;
    char *nostr_relays[CONFIG_MAX_RELAYS];
    size_t n_nostr_relays;
    char *nostr_relays_env; /* $MESH_LLM_NOSTR_RELAYS as read at start (NULL: unset) */
    /* Serving features (config_serve.c): --draft FILE (a catalog name is resolved to its file
     * in the models directory), --no-draft (not even the catalog's pairing), --mmproj
     * MODEL=PATH (repeatable: a vision projector per model). */
    char *draft;
    bool no_draft;
    struct {
        char model[MODEL_NAME_MAX];
        char *path;
    } mmproj[CONFIG_MAX_MODELS];
    size_t n_mmproj;
    config_model_opts_t model_opts[CONFIG_MAX_MODELS]; /* from the config file */
    size_t n_model_opts;
    char *config_path;      /* the config file read, or NULL */
    bool config_has_secret; /* it holds a join token or an API key */
    char *notes;    /* warnings found while parsing, one per line, for the log (skipped entries) */
    tunables_t tun; /* the MESH_LLM_* environment, read once by config_parse (tunables.h) */
} config_t;

enum { CONFIG_OK = 0, CONFIG_EXIT = 1 };

/* Parse argv. Returns CONFIG_OK, CONFIG_EXIT when --help/--version printed what was asked,
 * or -EINVAL with a human message in err. */
int config_parse(config_t *cfg, int argc, char **argv, char *err, size_t errlen);
struct config_src;
/* The same on a command line merged with the config file and the environment
 * (config_file.h): secrets from the file do not count as given in argv. */
int config_parse_src(config_t *cfg, struct config_src *src, char *err, size_t errlen);
void config_free(config_t *cfg);
/* $MESH_LLM_API_KEY (NULL when unset or empty): what the node requires, and what 'mesh-llm
 * status' and the other commands send. Read here, with the options it stands for. */
const char *config_env_api_key(void);
/* $MESH_LLM_BIN_DIR (NULL: unset), for the commands (the node's is cfg->bin_dir_env). */
const char *config_env_bin_dir(void);
/* $MESH_LLM_NOSTR_RELAYS (NULL: unset), for the commands (the node's is cfg->nostr_relays_env). */
const char *config_env_nostr_relays(void);
/* The config file's settings for model name, or NULL. */
const config_model_opts_t *config_model_opts_of(const config_t *cfg, const char *name);
/* A model's context size (per slot), slot count (0: as many as fit) and llama-server
 * arguments: the config file's for that model, else --ctx-size, --slots and --llamacpp-args. */
uint32_t config_ctx_of(const config_t *cfg, const char *name);
uint32_t config_slots_of(const config_t *cfg, const char *name);
const char *config_llamacpp_args_of(const config_t *cfg, const char *name);
/* Startup warnings about the configuration (stderr, through the log): --listen-all without an
 * API key, secrets given in argv. */
void config_log_warnings(const config_t *cfg);
/* Idle mode: nothing on the command line puts the node in a mesh or gives it a model (no
 * --model, --models-dir, --join, --client, --own-mesh, --mesh-name). The node then runs its
 * management API only and waits for POST /api/join. */
bool config_idle(const config_t *cfg);
/* The models given with --model (not found in a models directory). */
size_t config_named_models(const config_t *cfg);

/* The --mmproj file of a model, or NULL. */
const char *config_mmproj_of(const config_t *cfg, const char *model);

/* Parse a "PATH[:llm|:embedding|:reranking]" model argument. */
int config_parse_model_arg(const char *arg, config_model_t *out, char *err, size_t errlen);

#endif

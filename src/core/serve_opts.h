/* serve_opts — the serving features the node configures on a model's llama-server (pure: no
 * I/O): speculative decoding with a draft model (--draft) and a vision projector (--mmproj).
 * They are llama.cpp features, configured here and not re-implemented: this module decides
 * which draft a model gets and writes the arguments that turn the features on. */
#ifndef MESH_SERVE_OPTS_H
#define MESH_SERVE_OPTS_H

#include <stdbool.h>
#include <stddef.h>

#include "util.h"

/* Defaults for speculative decoding (llama.cpp's own n_max of 3 leaves most of the gain on the
 * table; 16 with a 0.75 probability floor is what llama-server's documentation suggests). The
 * operator's --llamacpp-args come later on the command line and override them. */
#define SERVE_DRAFT_N_MAX 16
#define SERVE_DRAFT_N_MIN 0
#define SERVE_DRAFT_P_MIN "0.75"
#define SERVE_DRAFT_TYPE "draft-simple" /* --spec-type: a separate draft model */

/* A split host's draft stays on the host's own CPU: llama-server gives the draft model the
 * target's devices by default, the --rpc ones included, with all its layers offloaded (every
 * drafted token would then cost network round trips, the very cost speculation is there to
 * share out). "--spec-draft-device none" leaves the draft context no device but the CPU (not
 * even for offloaded operations); "--spec-draft-ngl 0" says the same of its layers. */
#define SERVE_DRAFT_LOCAL_ARGS "--spec-draft-device none --spec-draft-ngl 0"

typedef struct {
    bool jinja;         /* --jinja: the model's own chat template, with tool calling (llm models;
                           llama-server's default in the pinned release, said explicitly) */
    const char *draft;  /* draft model file, NULL: none */
    const char *mmproj; /* multimodal projector file, NULL: none */
} serve_opts_t;

/* Append the llama-server arguments of o to out ("" when nothing is on), each path escaped so
 * that argv_split (util.h) gives it back unchanged. 0, -E2BIG (out's cap) or -ENOMEM. */
int serve_opts_args(const serve_opts_t *o, buf_t *out);

/* The arguments that place a model's draft, appended after every other argument of its
 * llama-server (so that neither --llamacpp-args nor a request moves the draft onto the RPC
 * devices): SERVE_DRAFT_LOCAL_ARGS when the model has a draft and is started as a split host
 * (its llama-server gets --rpc), "" otherwise (solo: llama.cpp's own placement, a local GPU
 * included). A split worker runs only rpc-server and never a draft. */
const char *serve_draft_placement(bool has_draft, bool split_host);

/* The catalog's draft for a target file: when target_file's name (its last path component,
 * case-insensitive) is a catalog model's file and that model names a draft, the draft's file
 * name (no directory); else NULL. */
const char *serve_catalog_draft(const char *target_file);

/* Which draft a model gets, in order: none for a model that is not an llm, or with --no-draft;
 * the --draft file (explicit); the catalog pairing when its file is on disk (catalog_on_disk:
 * the caller found serve_catalog_draft's file next to the target or in the models directory,
 * NULL if not). Never the target itself. */
const char *serve_pick_draft(bool is_llm, bool no_draft, const char *explicit_draft,
                             const char *catalog_on_disk, const char *target_path);

#endif

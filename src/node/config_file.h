/* config_file — the config file (libconfig format, docs/config.md) and the environment, merged
 * with the command line into one argument list for config_parse_src (config.h).
 *
 * Precedence: command-line flags, then MESH_LLM_* environment variables, then the file, then the
 * defaults. An option given by a higher source replaces all of it (a repeatable option given on
 * the command line drops the file's list). The file is --config FILE, else
 * $MESH_LLM_HOME/config (~/.mesh-llm/config) when it exists. */
#ifndef MESH_CONFIG_FILE_H
#define MESH_CONFIG_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"

#define CONFIG_FILE_MAX (1024 * 1024) /* a larger config file is refused */
#define CONFIG_SRC_MAX_ARGS 1024

typedef struct config_src {
    int argc;
    char **argv; /* argv[0], the file's options, then the command line's (NULL-ended) */
    char *owned[CONFIG_SRC_MAX_ARGS]; /* the strings made from the file */
    size_t n_owned;
    char path[4096]; /* the file read, "" when none */
    bool has_secret; /* it gives a secret (a join token, an API key) */
    config_model_opts_t model_opts[CONFIG_MAX_MODELS];
    size_t n_model_opts;
} config_src_t;

/* Read the config file (if any) and merge it with argv. err gets "FILE:LINE: message" on a
 * bad file. Returns 0 or -EINVAL/-ENOMEM. */
int config_src_load(config_src_t *src, int argc, char **argv, char *err, size_t errlen);
void config_src_free(config_src_t *src);
/* Whether s is a string made from the file (its secrets were not in argv). */
bool config_src_owns(const config_src_t *src, const char *s);

/* mesh-llm config check FILE: every problem as "FILE:LINE: message" on out; 0 when FILE is
 * valid, 2 when it is not. */
int config_file_check(const char *path, FILE *out);

#endif

/* Where llama.cpp's binaries (llama-server, ggml-rpc-server) are found. */
#ifndef MESH_BIN_FIND_H
#define MESH_BIN_FIND_H

#include <stddef.h>

#define BIN_DIRS_MAX 6

/* The directories searched before PATH, in order: $MESH_LLM_BIN_DIR; the installed copy,
 * PREFIX/libexec/mesh-llm/<flavour> next to this binary's PREFIX/bin (so a relocated prefix
 * works); the directory the build used for this machine's flavour (recorded by CMake from
 * scripts/llama.sh) and then, for a GPU flavour, the CPU flavour's (the setup falls back to it
 * when the GPU one cannot be built); the cache ($MESH_LLM_CACHE, default ~/.cache/mesh-llm)
 * under the same pinned names. */
/* The environment's say, read at start (config_t.bin_dir_env, tunables_t.cache): NULL or ""
 * for unset. */
typedef struct {
    const char *env_dir; /* $MESH_LLM_BIN_DIR */
    const char *cache;   /* $MESH_LLM_CACHE */
} bin_env_t;

typedef struct {
    size_t n;
    const char *what[BIN_DIRS_MAX];
    char dir[BIN_DIRS_MAX][4096];
} bin_dirs_t;

void bin_dirs(bin_dirs_t *d, const bin_env_t *e);

/* Find name: only in bin_dir when given (an explicit --bin-dir), else in bin_dirs() order,
 * then PATH. Returns a malloc'd real path or NULL. */
char *sv_find_binary(const char *bin_dir, const char *name, const bin_env_t *e);

/* The "not found" message: the places searched and how to fix it. */
void bin_not_found(char *out, size_t outlen, const char *name, const bin_env_t *e);

#endif

/* rpc_cache — fill a ggml-rpc-server tensor cache from a local GGUF (DESIGN.md §5 Pipeline).
 *
 * llama.cpp's RPC client offers each weight tensor of more than RPC_CACHE_THRESHOLD bytes by
 * the FNV-1a-64 hash of its data (RPC_CMD_SET_TENSOR_HASH); `ggml-rpc-server -c` loads the file
 * named "%016llx" of that hash from its cache directory instead of receiving the bytes. A
 * worker that has the model on disk copies the tensors of the layers it will hold there before
 * the host loads the model, so no weights cross the network.
 *
 * Cache files are written under a temporary name and renamed, so a cache file under a hash
 * name is always complete. Hashes are remembered per GGUF (by real path, size and mtime) in
 * cache_dir/mesh-llm-index/, so a model is hashed once. */
#ifndef MESH_RPC_CACHE_H
#define MESH_RPC_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gguf_tensors.h"

#define RPC_CACHE_THRESHOLD (10u * 1024 * 1024) /* HASH_THRESHOLD: sizes strictly above it */
#define RPC_CACHE_FNV_BASIS 0xcbf29ce484222325ull
#define RPC_CACHE_INDEX_DIR "mesh-llm-index"

typedef struct {
    uint32_t n_seeded;        /* cache files written */
    uint32_t n_present;       /* cache files already there with the right size */
    uint32_t n_skipped_small; /* tensors of the chosen layers of <= RPC_CACHE_THRESHOLD bytes */
    uint64_t bytes_seeded, bytes_present;
    uint32_t n_hashed; /* tensors whose hash was computed (not found in the index) */
    uint64_t bytes_hashed;
} rpc_cache_result_t;

/* Fill cache_dir with the tensors > RPC_CACHE_THRESHOLD of the GGUF at gguf_path that belong to
 * repeating layers [layer_first, layer_end) ("blk.N.", "enc.blk.N.", "dec.blk.N." names) and,
 * when output is true, the output layer (every tensor without a layer number that is not an
 * input-layer tensor: output.weight, output_norm.*, cls.*, ...); token_embd and the other
 * input-layer tensors are never seeded. Creates cache_dir (mkdir -p) if needed. Runs on the
 * libuv thread pool (uv_queue_work), where up to four threads (one per CPU) read, hash and
 * write tensors at once, so one's hashing overlaps another's writing; cb runs on the loop
 * thread with status 0 or a negative errno (then r holds what was done before the failure).
 * gguf_path and cache_dir are copied. Returns 0 (cb will run) or a negative errno (it won't). */
int rpc_cache_seed(uv_loop_t *loop, const char *gguf_path, const char *cache_dir,
                   uint32_t layer_first, uint32_t layer_end, bool output,
                   void (*cb)(void *data, int status, const rpc_cache_result_t *r), void *data);

/* The same work, synchronously: the calling thread and up to three more (tools and tests). */
int rpc_cache_seed_sync(const char *gguf_path, const char *cache_dir, uint32_t layer_first,
                        uint32_t layer_end, bool output, rpc_cache_result_t *r);

/* $LLAMA_CACHE/rpc/ resolved like tools/rpc/rpc-server.cpp's fs_get_cache_directory on Linux:
 * $LLAMA_CACHE, else $XDG_CACHE_HOME/llama.cpp, else $HOME/.cache/llama.cpp (else the passwd
 * home), with a trailing '/', then "rpc/". Returns 0, -ENAMETOOLONG, or -ENOENT (no home); an
 * empty LLAMA_CACHE or XDG_CACHE_HOME is -EINVAL (rpc-server's behaviour there is undefined). */
int rpc_cache_dir(char *buf, size_t len);

/* Pure helpers for tests: */
uint64_t rpc_cache_fnv1a64(const void *p, size_t n, uint64_t h); /* h = basis to start */

/* Which layer a tensor belongs to (gguf_tensor_layer): >= 0 the repeating layer,
 * RPC_LAYER_INPUT, RPC_LAYER_OUTPUT. */
#define RPC_LAYER_INPUT GGUF_LAYER_INPUT
#define RPC_LAYER_OUTPUT GGUF_LAYER_OUTPUT
int64_t rpc_cache_tensor_layer(const char *name);

#endif

/* llama_args — which llama-server flags may come from where (pure: no I/O).
 *
 * A client of the API (POST /api/v1/load "llamacpp_args") may only tune a model: context,
 * batch, threads, slots, KV cache types, flash attention, GPU layers, sampling defaults,
 * rope/yarn scaling, load mode (mmap/mlock), the draft length of speculative decoding and
 * similar. Every flag is looked up in an allowlist with its exact arity (so a value can never be
 * mistaken for a flag, or the other way round, by llama-server), and every value is validated:
 * numbers are numbers, choices are one of the choices llama.cpp accepts. Numbers that decide
 * memory have bounds (context up to 2^24 like ctx_size, batch and micro-batch up to 8192, slots
 * up to 64, the prompt cache in RAM up to llama.cpp's default 8192 MiB, checkpoints and draft
 * lengths up to 64, threads up to 1024), and what they cost is counted by the ledger
 * (llama_args_memory: context, K/V cache types, micro-batch). Nothing that names a
 * file, a directory, a URL or a network address, and nothing the node manages (--port, --host,
 * -m, --alias, --api-key, ...), is accepted.
 *
 * The operator (the --llamacpp-args command-line option) is trusted: only the flags the node
 * manages are refused, since giving them would make the node lose track of its child.
 *
 * Spellings follow llama.cpp's common/arg.cpp (pinned release): short and long names, and
 * underscores for dashes in long names (llama.cpp folds them). "--flag=value" is accepted from
 * clients and rewritten to "--flag value" (llama-server itself does not understand '='). */
#ifndef MESH_LLAMA_ARGS_H
#define MESH_LLAMA_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#include <stdint.h>

typedef enum {
    LLAMA_ARGS_CLIENT = 0, /* allowlist: API requests */
    LLAMA_ARGS_OPERATOR,   /* only node-managed flags refused: the command line */
} llama_args_trust_t;

/* Longest llamacpp_args string accepted (bytes). */
#define LLAMA_ARGS_MAX 65536

/* Validate args (a shell-like string, as argv_split reads it). On success returns 0 and, when
 * canon is not NULL, stores a malloc'd string to hand to llama-server: for clients a normalized
 * form ("--flag value", values quoted when needed), for the operator args unchanged.
 * Errors (err names the offending flag or value):
 *   -EPERM   a flag that may not come from there (node-managed, or not on the allowlist)
 *   -EINVAL  unbalanced quotes, a value that is missing or invalid, a stray non-flag word
 *   -E2BIG   longer than LLAMA_ARGS_MAX
 *   -ENOMEM */
int llama_args_check(const char *args, llama_args_trust_t trust, char **canon, char *err,
                     size_t errlen);

/* Whether flag (one argv word, "=value" allowed) is one the node manages (--port, -m, ...). */
bool llama_args_is_managed(const char *flag);

/* Whether args (NULL = none) set the option `flag` names, in any of its spellings ("-cram",
 * "--cache-ram", "--cache_ram=0" all set --cache-ram). Only options of the allowlist. */
bool llama_args_sets(const char *args, const char *flag);

/* What a set of llama-server args does to the memory a load takes (ledger.h counts it). */
typedef struct {
    bool has_ctx;           /* -c given: ctx is the context (0: the model's own) */
    uint32_t ctx;           /* tokens */
    uint32_t k_x32, v_x32;  /* bytes per 32 elements of the K and V cache (F16: 64) */
    uint32_t batch, ubatch; /* -b, -ub; 0: llama.cpp's defaults (2048, 512) */
    uint32_t np;            /* -np: parallel slots; 0: not given, or -1 (llama.cpp's auto) */
} llama_mem_t;

#define LLAMA_MEM_INIT                                                                             \
    {                                                                                              \
        .k_x32 = 64, .v_x32 = 64                                                                   \
    }
/* The flags of args (NULL = none) that change memory, over what m holds already (the last
 * value wins, as in llama-server: call it on the args in the order they are given). */
void llama_args_memory(const char *args, llama_mem_t *m);
/* The micro-batch llama-server computes with (-ub, at most -b; defaults 512 and 2048). */
uint32_t llama_mem_ubatch(const llama_mem_t *m);

#endif

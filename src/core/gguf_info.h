/* gguf_info — a bounded reader of GGUF metadata (pure: reads a byte buffer or a file, never
 * trusts a length). Enough to classify a model: architecture, pooling, layers, context. */
#ifndef MESH_GGUF_INFO_H
#define MESH_GGUF_INFO_H

#include <stddef.h>
#include <stdint.h>

#include "mm.h"

typedef struct {
    uint32_t version;
    uint64_t n_tensors;
    uint64_t n_kv;
    char architecture[64];
    char name[128];
    int32_t pooling_type; /* -1 = absent; llama.cpp: 0 none, 1 mean, 2 cls, 3 last, 4 rank */
    uint32_t block_count; /* 0 = absent */
    uint32_t context_length;
    uint32_t embedding_length; /* 0 = absent (and the four below) */
    uint32_t head_count;
    uint32_t head_count_kv; /* scalar only; per-layer arrays are read as absent */
    uint32_t key_length, value_length;
    int has_classifier; /* <arch>.classifier.output_labels present (reranker head) */
    int32_t file_type;  /* general.file_type (llama_ftype), -1 = absent */
    uint64_t file_size;
} gguf_info_t;

/* Parse the metadata at the start of a GGUF image. len may be a prefix of the file: parsing
 * stops at the end of the key/value section. Returns 0, -EINVAL for a malformed or hostile
 * header, -ENODATA if len is too short to hold all metadata. */
int gguf_info_parse(const uint8_t *data, size_t len, gguf_info_t *out);
/* Read a file's metadata (at most 64 MiB of it). Returns 0, -errno, -EINVAL or -ENODATA. */
int gguf_info_read(const char *path, gguf_info_t *out);

/* Model type from metadata: reranking for rank pooling or a classifier head, embedding for
 * encoder architectures (bert family, t5encoder) or pooled models, llm otherwise. */
mm_type_t gguf_info_type(const gguf_info_t *info);

#endif

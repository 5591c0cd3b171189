/* gguf_tensors — a bounded reader of a GGUF file's tensor-info table: for each tensor its name,
 * ggml type, shape, byte size (ggml_nbytes) and the absolute file offset of its data. GGUF files
 * are untrusted: every count, length, offset and size is checked (against the buffer, the file
 * size and overflow) with the rules llama.cpp's gguf reader applies. */
#ifndef MESH_GGUF_TENSORS_H
#define MESH_GGUF_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#define GGUF_NAME_MAX 64 /* GGML_MAX_NAME: a name has at most 63 bytes */
#define GGUF_MAX_DIMS 4  /* GGML_MAX_DIMS */
#define GGUF_MAX_TENSORS (1u << 20)
#define GGUF_DEFAULT_ALIGN 32u     /* GGUF_DEFAULT_ALIGNMENT */
#define GGUF_META_MAX (128u << 20) /* gguf_tensors_read reads at most this much metadata */

/* GGUF value types */
enum {
    GGUF_T_U8 = 0,
    GGUF_T_I8,
    GGUF_T_U16,
    GGUF_T_I16,
    GGUF_T_U32,
    GGUF_T_I32,
    GGUF_T_F32,
    GGUF_T_BOOL,
    GGUF_T_STR,
    GGUF_T_ARR,
    GGUF_T_U64,
    GGUF_T_I64,
    GGUF_T_F64,
    GGUF_T_COUNT
};

/* Some ggml tensor types (values of gguf_tensor_t.type) */
enum {
    GGML_T_F32 = 0,
    GGML_T_F16 = 1,
    GGML_T_Q4_0 = 2,
    GGML_T_Q8_0 = 8,
    GGML_T_BF16 = 30,
    GGML_T_COUNT = 43
};

typedef struct {
    char name[GGUF_NAME_MAX]; /* NUL-terminated, no control characters */
    uint32_t type;            /* ggml_type */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* elements per dimension; 1 past n_dims */
    uint64_t size;              /* bytes of data (ggml_nbytes) */
    uint64_t offset;            /* absolute file offset of the data */
} gguf_tensor_t;

typedef struct {
    uint32_t version;
    uint32_t alignment; /* general.alignment or 32 */
    uint64_t n_kv;
    uint64_t data_offset; /* absolute offset of the data section */
    uint64_t file_size;
    size_t n_tensors;
    gguf_tensor_t *tensors; /* in file order; free with gguf_tensors_free */
} gguf_tensors_t;

/* Parse the tensor table of a GGUF image whose first len bytes are data and whose total size
 * is file_size (>= len). Tensor data need not be in data: offsets and sizes are checked against
 * file_size. Returns 0; -EINVAL for a malformed or hostile file (bad magic, version, types,
 * counts, names, duplicate names, shapes, unknown ggml type, data offsets not laid out as
 * llama.cpp requires or past the end of the file); -ENODATA if len is too short to hold the
 * whole table (and file_size > len); -ENOMEM. On success free out with gguf_tensors_free. */
int gguf_tensors_parse(const uint8_t *data, size_t len, uint64_t file_size, gguf_tensors_t *out);
/* Read and parse a file's tensor table (reading at most GGUF_META_MAX bytes of it). */
int gguf_tensors_read(const char *path, gguf_tensors_t *out);
/* Same, from an open file descriptor (read with pread; the offset is not moved). */
int gguf_tensors_read_fd(int fd, gguf_tensors_t *out);
void gguf_tensors_free(gguf_tensors_t *t);

/* ggml type traits: 0 and the block size (elements) and type size (bytes per block), or
 * -EINVAL for an unknown or removed type. */
int gguf_type_traits(uint32_t type, uint32_t *blck_size, uint32_t *type_size);
/* Name of a ggml type ("f32", "q8_0", ...) or "?" */
const char *gguf_type_name(uint32_t type);
/* ggml_nbytes of a contiguous tensor: 0 and *out, or -EINVAL (unknown type, ne[0] not a multiple
 * of the block size, element count >= INT64_MAX, size overflow). */
int gguf_tensor_nbytes(uint32_t type, const uint64_t ne[GGUF_MAX_DIMS], uint64_t *out);

/* Which layer a tensor belongs to, by name, as llama.cpp places it: >= 0 the repeating layer
 * ("blk.N.", "enc.blk.N.", "dec.blk.N."; rope_freqs goes with layer 0), GGUF_LAYER_INPUT
 * (llama-arch.cpp's LLM_TENSOR_LAYER_INPUT tensors: token_embd, position_embd, …; llama.cpp
 * keeps them on the CPU of the node running llama-server) or GGUF_LAYER_OUTPUT (every other
 * tensor without a layer number: output, output_norm, cls, …). */
#define GGUF_LAYER_INPUT (-1)
#define GGUF_LAYER_OUTPUT (-2)
int64_t gguf_tensor_layer(const char *name);

/* A model's tensor bytes by layer (ggml_nbytes of each tensor in the table, saturating): the
 * input layer, the output layer and the repeating layers. A tied output (no output.weight:
 * llama.cpp reuses token_embd) adds nothing to `output`. */
typedef struct {
    uint64_t input, output, repeating;
} gguf_layer_bytes_t;
void gguf_tensors_layer_bytes(const gguf_tensors_t *t, gguf_layer_bytes_t *out);

/* One key/value pair as stored: key is not NUL-terminated; val points at the value's bytes
 * (after the type), val_len bytes long (for an array: its element type, count and elements). */
typedef struct {
    const uint8_t *key;
    size_t key_len;
    uint32_t type;
    const uint8_t *val;
    size_t val_len;
} gguf_kv_t;

/* Walk the key/value section of a GGUF image (after the 24-byte header), calling fn for each
 * pair in order; stops early when fn returns nonzero and returns that value. Nested arrays
 * are rejected, as llama.cpp does. Returns 0, -EINVAL, -ENODATA (len too short), fn's value.
 * On 0, *end (if not NULL) is the offset just past the section. */
int gguf_kv_foreach(const uint8_t *data, size_t len, int (*fn)(void *ctx, const gguf_kv_t *kv),
                    void *ctx, size_t *end);

#endif

#include "gguf_tensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ggml's type_traits (ggml.c) for the types a GGUF may hold: elements per block and bytes per
 * block. Zero = removed or unknown. */
static const struct {
    uint16_t blck, size;
    const char *name;
} TYPES[GGML_T_COUNT] = {
    [0] = {1, 4, "f32"},         [1] = {1, 2, "f16"},         [2] = {32, 18, "q4_0"},
    [3] = {32, 20, "q4_1"},      [6] = {32, 22, "q5_0"},      [7] = {32, 24, "q5_1"},
    [8] = {32, 34, "q8_0"},      [9] = {32, 36, "q8_1"},      [10] = {256, 84, "q2_K"},
    [11] = {256, 110, "q3_K"},   [12] = {256, 144, "q4_K"},   [13] = {256, 176, "q5_K"},
    [14] = {256, 210, "q6_K"},   [15] = {256, 292, "q8_K"},   [16] = {256, 66, "iq2_xxs"},
    [17] = {256, 74, "iq2_xs"},  [18] = {256, 98, "iq3_xxs"}, [19] = {256, 50, "iq1_s"},
    [20] = {32, 18, "iq4_nl"},   [21] = {256, 110, "iq3_s"},  [22] = {256, 82, "iq2_s"},
    [23] = {256, 136, "iq4_xs"}, [24] = {1, 1, "i8"},         [25] = {1, 2, "i16"},
    [26] = {1, 4, "i32"},        [27] = {1, 8, "i64"},        [28] = {1, 8, "f64"},
    [29] = {256, 56, "iq1_m"},   [30] = {1, 2, "bf16"},       [34] = {256, 54, "tq1_0"},
    [35] = {256, 66, "tq2_0"},   [39] = {32, 17, "mxfp4"},    [40] = {64, 36, "nvfp4"},
    [41] = {128, 18, "q1_0"},    [42] = {64, 18, "q2_0"},
};

int gguf_type_traits(uint32_t type, uint32_t *blck_size, uint32_t *type_size)
{
    if (type >= GGML_T_COUNT || TYPES[type].blck == 0) return -EINVAL;
    if (blck_size) *blck_size = TYPES[type].blck;
    if (type_size) *type_size = TYPES[type].size;
    return 0;
}

const char *gguf_type_name(uint32_t type)
{
    return type < GGML_T_COUNT && TYPES[type].name ? TYPES[type].name : "?";
}

int gguf_tensor_nbytes(uint32_t type, const uint64_t ne[GGUF_MAX_DIMS], uint64_t *out)
{
    uint32_t blck, tsize;
    if (gguf_type_traits(type, &blck, &tsize)) return -EINVAL;
    for (int i = 0; i < GGUF_MAX_DIMS; i++)
        if (ne[i] > (uint64_t)INT64_MAX) return -EINVAL;
    if (ne[0] % blck) return -EINVAL;
    /* the element count must stay below INT64_MAX (llama.cpp's rule) */
    uint64_t n = 1;
    bool zero = false;
    for (int i = 0; i < GGUF_MAX_DIMS; i++)
        zero |= ne[i] == 0;
    if (zero) {
        *out = 0;
        return 0;
    }
    for (int i = 0; i < GGUF_MAX_DIMS; i++)
        if (__builtin_mul_overflow(n, ne[i], &n) || n >= (uint64_t)INT64_MAX) return -EINVAL;
    uint64_t bytes;
    if (__builtin_mul_overflow(n / blck, (uint64_t)tsize, &bytes) || bytes > SIZE_MAX)
        return -EINVAL;
    *out = bytes;
    return 0;
}

/* A bounded reader over a prefix [0,len) of a file of file_size bytes. Running past len is
 * "short" (more bytes may fix it) unless it also runs past file_size ("bad"). */
typedef struct {
    const uint8_t *p;
    size_t len, off;
    uint64_t file_size;
    int err; /* 0, -ENODATA or -EINVAL */
} rd_t;

static int fail(rd_t *r, int e)
{
    if (!r->err || e == -EINVAL) r->err = e;
    return -1;
}

/* the error of a failed read (every failure sets one; be safe anyway) */
static int err_of(const rd_t *r)
{
    return r->err ? r->err : -EINVAL;
}

/* Can n more bytes be read? Sets err when not. */
static int avail(rd_t *r, uint64_t n)
{
    if (n <= r->len - r->off) return 0;
    return fail(r, n > r->file_size - r->off ? -EINVAL : -ENODATA);
}

static int take(rd_t *r, void *out, uint64_t n)
{
    if (avail(r, n)) return -1;
    if (out) memcpy(out, r->p + r->off, (size_t)n);
    r->off += (size_t)n;
    return 0;
}

static int u32(rd_t *r, uint32_t *v)
{
    return take(r, v, 4); /* GGUF is little-endian; so are the hosts we support */
}

static int u64(rd_t *r, uint64_t *v)
{
    return take(r, v, 8);
}

static size_t scalar_size(uint32_t t)
{
    switch (t) {
    case GGUF_T_U8:
    case GGUF_T_I8:
    case GGUF_T_BOOL:
        return 1;
    case GGUF_T_U16:
    case GGUF_T_I16:
        return 2;
    case GGUF_T_U32:
    case GGUF_T_I32:
    case GGUF_T_F32:
        return 4;
    case GGUF_T_U64:
    case GGUF_T_I64:
    case GGUF_T_F64:
        return 8;
    default:
        return 0;
    }
}

static int skip_str(rd_t *r)
{
    uint64_t n;
    return u64(r, &n) || take(r, NULL, n) ? -1 : 0;
}

/* Skip one value of a type; arrays hold scalars or strings (no nesting, as in llama.cpp). */
static int skip_value(rd_t *r, uint32_t type)
{
    size_t sz = scalar_size(type);
    if (sz) return take(r, NULL, sz);
    if (type == GGUF_T_STR) return skip_str(r);
    if (type != GGUF_T_ARR) return fail(r, -EINVAL);
    uint32_t et;
    uint64_t n;
    if (u32(r, &et) || u64(r, &n)) return -1;
    size_t esz = scalar_size(et);
    if (esz) {
        if (n > UINT64_MAX / esz) return fail(r, -EINVAL);
        return take(r, NULL, n * esz);
    }
    if (et != GGUF_T_STR) return fail(r, -EINVAL);
    /* each string takes at least 8 bytes: a hostile count fails before the loop */
    if (n > UINT64_MAX / 8) return fail(r, -EINVAL);
    if (avail(r, n * 8)) return -1;
    for (uint64_t i = 0; i < n; i++)
        if (skip_str(r)) return -1;
    return 0;
}

static int header(rd_t *r, uint32_t *version, uint64_t *n_tensors, uint64_t *n_kv)
{
    uint8_t magic[4];
    if (take(r, magic, 4)) return -1;
    if (memcmp(magic, "GGUF", 4) != 0) return fail(r, -EINVAL);
    if (u32(r, version) || u64(r, n_tensors) || u64(r, n_kv)) return -1;
    if (*version < 2 || *version > 3) return fail(r, -EINVAL);
    /* a pair takes at least 13 bytes (empty key, type, one byte), a tensor info 24 */
    if (*n_kv > (r->file_size - r->off) / 13 || *n_tensors > GGUF_MAX_TENSORS ||
        *n_tensors > (r->file_size - r->off) / 24)
        return fail(r, -EINVAL);
    return 0;
}

typedef int (*kv_fn)(void *ctx, const gguf_kv_t *kv);

/* Returns -1 on a read failure (r->err says why), else 0 with *stop = fn's nonzero value or 0 */
static int walk_kv(rd_t *r, uint64_t n_kv, kv_fn fn, void *ctx, int *stop)
{
    *stop = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t kl;
        uint32_t type;
        gguf_kv_t kv;
        if (u64(r, &kl) || avail(r, kl)) return -1;
        kv.key = r->p + r->off;
        kv.key_len = (size_t)kl;
        r->off += (size_t)kl;
        if (u32(r, &type)) return -1;
        kv.type = type;
        kv.val = r->p + r->off;
        size_t start = r->off;
        if (skip_value(r, type)) return -1;
        kv.val_len = r->off - start;
        if (fn && (*stop = fn(ctx, &kv)) != 0) return 0;
    }
    return 0;
}

int gguf_kv_foreach(const uint8_t *data, size_t len, int (*fn)(void *ctx, const gguf_kv_t *kv),
                    void *ctx, size_t *end)
{
    rd_t r = {.p = data, .len = len, .file_size = UINT64_MAX};
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (header(&r, &version, &n_tensors, &n_kv)) return err_of(&r);
    int stop;
    if (walk_kv(&r, n_kv, fn, ctx, &stop)) return err_of(&r);
    if (stop == 0 && end) *end = r.off;
    return stop;
}

typedef struct {
    uint32_t alignment;
    int seen;
    int bad;
} align_ctx_t;

static int find_alignment(void *vctx, const gguf_kv_t *kv)
{
    align_ctx_t *a = vctx;
    if (kv->key_len == 17 && memcmp(kv->key, "general.alignment", 17) == 0) {
        /* llama.cpp: must be a u32 and a power of two; a second copy is a duplicate key */
        if (kv->type != GGUF_T_U32 || a->seen++) {
            a->bad = 1;
            return 1;
        }
        memcpy(&a->alignment, kv->val, 4);
        if (a->alignment == 0 || (a->alignment & (a->alignment - 1)) != 0) {
            a->bad = 1;
            return 1;
        }
    }
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    const gguf_tensor_t *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int has_duplicate_names(const gguf_tensors_t *t)
{
    if (t->n_tensors < 2) return 0;
    const gguf_tensor_t **v = malloc(t->n_tensors * sizeof *v);
    if (!v) return -ENOMEM;
    for (size_t i = 0; i < t->n_tensors; i++)
        v[i] = &t->tensors[i];
    qsort(v, t->n_tensors, sizeof *v, name_cmp);
    int dup = 0;
    for (size_t i = 1; i < t->n_tensors && !dup; i++)
        dup = strcmp(v[i - 1]->name, v[i]->name) == 0;
    free(v);
    return dup;
}

static int read_tensor_info(rd_t *r, gguf_tensor_t *t, uint64_t *rel_offset)
{
    uint64_t nl;
    if (u64(r, &nl)) return -1;
    if (nl == 0 || nl >= GGUF_NAME_MAX) return fail(r, -EINVAL);
    if (take(r, t->name, nl)) return -1;
    t->name[nl] = '\0';
    for (uint64_t i = 0; i < nl; i++)
        if ((unsigned char)t->name[i] < 0x20 || t->name[i] == 0x7f) return fail(r, -EINVAL);
    if (u32(r, &t->n_dims)) return -1;
    if (t->n_dims > GGUF_MAX_DIMS) return fail(r, -EINVAL);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d < t->n_dims && u64(r, &t->ne[d])) return -1;
    }
    if (u32(r, &t->type) || u64(r, rel_offset)) return -1;
    if (gguf_tensor_nbytes(t->type, t->ne, &t->size)) return fail(r, -EINVAL);
    return 0;
}

int gguf_tensors_parse(const uint8_t *data, size_t len, uint64_t file_size, gguf_tensors_t *out)
{
    memset(out, 0, sizeof *out);
    if (file_size < len) return -EINVAL;
    rd_t r = {.p = data, .len = len, .file_size = file_size};
    uint64_t n_tensors;
    if (header(&r, &out->version, &n_tensors, &out->n_kv)) return err_of(&r);
    align_ctx_t a = {.alignment = GGUF_DEFAULT_ALIGN};
    int rc;
    if (walk_kv(&r, out->n_kv, find_alignment, &a, &rc)) return err_of(&r);
    if (a.bad) return -EINVAL;
    out->alignment = a.alignment;
    out->file_size = file_size;
    if (n_tensors == 0) {
        out->data_offset = r.off;
        return 0;
    }
    /* every info takes at least 24 bytes: don't allocate for what the buffer cannot hold */
    if (avail(&r, n_tensors * 24)) return err_of(&r);
    out->tensors = calloc((size_t)n_tensors, sizeof *out->tensors);
    if (!out->tensors) return -ENOMEM;
    out->n_tensors = (size_t)n_tensors;
    uint64_t *rel = calloc((size_t)n_tensors, sizeof *rel);
    if (!rel) {
        gguf_tensors_free(out);
        return -ENOMEM;
    }
    for (size_t i = 0; i < out->n_tensors; i++) {
        if (read_tensor_info(&r, &out->tensors[i], &rel[i])) {
            rc = err_of(&r);
            goto fail;
        }
    }
    rc = has_duplicate_names(out);
    if (rc) {
        rc = rc < 0 ? rc : -EINVAL;
        goto fail;
    }
    /* The data section starts at the next multiple of the alignment; each tensor's offset
     * (relative to it) is the running sum of the padded sizes before it (llama.cpp's rule,
     * which also rules out overlaps), and its data must lie inside the file. */
    uint64_t align = out->alignment, start = r.off, sum = 0;
    if (start > UINT64_MAX - (align - 1)) {
        rc = -EINVAL;
        goto fail;
    }
    out->data_offset = (start + align - 1) & ~(align - 1);
    for (size_t i = 0; i < out->n_tensors; i++) {
        gguf_tensor_t *t = &out->tensors[i];
        uint64_t padded;
        if (rel[i] != sum || __builtin_add_overflow(t->size, align - 1, &padded) ||
            __builtin_add_overflow(out->data_offset, rel[i], &t->offset) || t->offset > file_size ||
            t->size > file_size - t->offset) {
            rc = -EINVAL;
            goto fail;
        }
        padded &= ~(align - 1);
        if (__builtin_add_overflow(sum, padded, &sum)) {
            rc = -EINVAL;
            goto fail;
        }
    }
    free(rel);
    return 0;
fail:
    free(rel);
    gguf_tensors_free(out);
    return rc;
}

void gguf_tensors_free(gguf_tensors_t *t)
{
    free(t->tensors);
    t->tensors = NULL;
    t->n_tensors = 0;
}

int gguf_tensors_read_fd(int fd, gguf_tensors_t *out)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (fstat(fd, &st) != 0) return -errno;
    if (!S_ISREG(st.st_mode)) return -EINVAL;
    uint64_t fsize = (uint64_t)st.st_size;
    size_t want = fsize < GGUF_META_MAX ? (size_t)fsize : GGUF_META_MAX;
    /* The table is usually small: try 1 MiB first, grow only if needed. */
    size_t chunk = want < (1u << 20) ? want : (1u << 20);
    uint8_t *buf = NULL;
    int rc;
    for (;;) {
        uint8_t *nb = realloc(buf, chunk ? chunk : 1);
        if (!nb) {
            rc = -ENOMEM;
            break;
        }
        buf = nb;
        size_t got = 0;
        rc = 0;
        while (got < chunk) {
            ssize_t n = pread(fd, buf + got, chunk - got, (off_t)got);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                rc = -errno;
                break;
            }
            if (n == 0) break;
            got += (size_t)n;
        }
        if (rc) break;
        if (got < chunk) { /* the file shrank under us */
            rc = -EIO;
            break;
        }
        rc = gguf_tensors_parse(buf, got, fsize, out);
        if (rc != -ENODATA) break;
        if (chunk >= want) { /* needs more metadata than we are willing to read */
            rc = -EFBIG;
            break;
        }
        chunk = chunk > want / 4 ? want : chunk * 4;
    }
    free(buf);
    return rc;
}

/* ---- which layer a tensor belongs to ---- */

static int64_t layer_number(const char *s)
{
    /* s points after "blk.": digits then '.' */
    uint64_t n = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        n = n * 10 + (uint64_t)(s[i] - '0');
        if (n > UINT32_MAX) return -1;
    }
    return i > 0 && s[i] == '.' ? (int64_t)n : -1;
}

/* a name or a name followed by ".suffix" */
static bool is_base(const char *s, const char *base)
{
    size_t n = strlen(base);
    return strncmp(s, base, n) == 0 && (s[n] == '\0' || s[n] == '.');
}

int64_t gguf_tensor_layer(const char *name)
{
    static const char *const layered[] = {"blk.", "enc.blk.", "dec.blk."};
    for (size_t i = 0; i < sizeof layered / sizeof layered[0]; i++)
        if (strncmp(name, layered[i], strlen(layered[i])) == 0) {
            int64_t n = layer_number(name + strlen(layered[i]));
            if (n >= 0) return n;
        }
    /* llama-arch.cpp: the tensors mapped to LLM_TENSOR_LAYER_INPUT; llama.cpp keeps them on the
     * CPU of the host */
    static const char *const input[] = {
        "token_embd",   "position_embd",         "token_types",         "per_layer_token_embd",
        "hrm.z_l_init", "masked_embd_centroids", "masked_embd_ordering"};
    for (size_t i = 0; i < sizeof input / sizeof input[0]; i++)
        if (is_base(name, input[i])) return GGUF_LAYER_INPUT;
    /* a repeating tensor without a layer number: loaded with layer 0 (and duplicated) */
    if (is_base(name, "rope_freqs")) return 0;
    /* everything else without a layer number is on the output layer (output, output_norm,
     * cls, cls_out, ...) */
    return GGUF_LAYER_OUTPUT;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

void gguf_tensors_layer_bytes(const gguf_tensors_t *t, gguf_layer_bytes_t *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; t && i < t->n_tensors; i++) {
        int64_t l = gguf_tensor_layer(t->tensors[i].name);
        uint64_t *acc = l == GGUF_LAYER_INPUT    ? &out->input
                        : l == GGUF_LAYER_OUTPUT ? &out->output
                                                 : &out->repeating;
        *acc = sat_add(*acc, t->tensors[i].size);
    }
}

int gguf_tensors_read(const char *path, gguf_tensors_t *out)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = gguf_tensors_read_fd(fd, out);
    close(fd);
    return rc;
}

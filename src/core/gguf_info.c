#include "gguf_info.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_KEY 65536
#define MAX_STR (16u << 20)
#define MAX_KV 1000000
#define MAX_READ (64u << 20)
#define MAX_DEPTH 4

enum {
    T_U8 = 0,
    T_I8,
    T_U16,
    T_I16,
    T_U32,
    T_I32,
    T_F32,
    T_BOOL,
    T_STR,
    T_ARR,
    T_U64,
    T_I64,
    T_F64,
};

typedef struct {
    const uint8_t *p;
    size_t len, off;
    int short_read;
} rd_t;

static int take(rd_t *r, void *out, size_t n)
{
    if (n > r->len - r->off) {
        r->short_read = 1;
        return -1;
    }
    if (out) memcpy(out, r->p + r->off, n);
    r->off += n;
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

static int str(rd_t *r, const uint8_t **s, uint64_t *n, uint64_t cap)
{
    if (u64(r, n) || *n > cap) return -1;
    *s = r->p + r->off;
    return take(r, NULL, (size_t)*n);
}

static size_t scalar_size(uint32_t t)
{
    switch (t) {
    case T_U8:
    case T_I8:
    case T_BOOL:
        return 1;
    case T_U16:
    case T_I16:
        return 2;
    case T_U32:
    case T_I32:
    case T_F32:
        return 4;
    case T_U64:
    case T_I64:
    case T_F64:
        return 8;
    default:
        return 0;
    }
}

static int skip_value(rd_t *r, uint32_t type, int depth)
{
    if (depth > MAX_DEPTH) return -1;
    size_t sz = scalar_size(type);
    if (sz) return take(r, NULL, sz);
    if (type == T_STR) {
        const uint8_t *s;
        uint64_t n;
        return str(r, &s, &n, MAX_STR);
    }
    if (type == T_ARR) {
        uint32_t et;
        uint64_t n;
        if (u32(r, &et) || u64(r, &n)) return -1;
        size_t esz = scalar_size(et);
        if (esz) {
            if (n > (r->len - r->off) / esz) {
                r->short_read = 1;
                return -1;
            }
            return take(r, NULL, (size_t)(n * esz));
        }
        if (et != T_STR && et != T_ARR) return -1;
        /* each element takes at least 8 bytes: a hostile count fails fast */
        if (n > (r->len - r->off) / 8) {
            r->short_read = 1;
            return -1;
        }
        for (uint64_t i = 0; i < n; i++)
            if (skip_value(r, et, depth + 1)) return -1;
        return 0;
    }
    return -1;
}

static int read_int(rd_t *r, uint32_t type, int64_t *v)
{
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
    } x;
    size_t sz = scalar_size(type);
    if (!sz || type == T_F32 || type == T_F64 || take(r, &x, sz)) return -1;
    switch (type) {
    case T_U8:
    case T_BOOL:
        *v = x.u8;
        break;
    case T_I8:
        *v = x.i8;
        break;
    case T_U16:
        *v = x.u16;
        break;
    case T_I16:
        *v = x.i16;
        break;
    case T_U32:
        *v = x.u32;
        break;
    case T_I32:
        *v = x.i32;
        break;
    case T_U64:
        *v = (int64_t)x.u64;
        break;
    default:
        *v = x.i64;
        break;
    }
    return 0;
}

/* A scalar integer in [0, 2^24] (dimensions, head counts), else left as it is (absent). */
static void read_u32(rd_t *r, uint32_t type, uint32_t *out)
{
    int64_t x;
    if (!read_int(r, type, &x) && x >= 0 && x <= (1 << 24)) *out = (uint32_t)x;
}

static int key_is(const uint8_t *k, uint64_t kl, const char *arch, const char *suffix)
{
    size_t al = strlen(arch), sl = strlen(suffix);
    return arch[0] && kl == al + 1 + sl && memcmp(k, arch, al) == 0 && k[al] == '.' &&
           memcmp(k + al + 1, suffix, sl) == 0;
}

int gguf_info_parse(const uint8_t *data, size_t len, gguf_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->pooling_type = -1;
    out->file_type = -1;
    rd_t r = {.p = data, .len = len};
    uint8_t magic[4];
    if (take(&r, magic, 4) || memcmp(magic, "GGUF", 4) != 0)
        return r.short_read ? -ENODATA : -EINVAL;
    if (u32(&r, &out->version) || u64(&r, &out->n_tensors) || u64(&r, &out->n_kv)) return -ENODATA;
    if (out->version < 2 || out->version > 3 || out->n_kv > MAX_KV || out->n_tensors > (1u << 24))
        return -EINVAL;
    /* Keys may come in any order: pass 1 checks the whole key/value section and finds the
     * architecture and name; pass 2 reads the keys named after the architecture. */
    size_t kv_start = r.off;
    for (int pass = 1; pass <= 2; pass++) {
        r.off = kv_start;
        for (uint64_t i = 0; i < out->n_kv; i++) {
            const uint8_t *k;
            uint64_t kl;
            uint32_t type;
            if (str(&r, &k, &kl, MAX_KEY) || u32(&r, &type))
                return r.short_read ? -ENODATA : -EINVAL;
            rd_t v = {.p = data, .len = len, .off = r.off};
            if (skip_value(&r, type, 0)) return r.short_read ? -ENODATA : -EINVAL;
            const uint8_t *s;
            uint64_t n;
            int64_t x;
            const char *a = out->architecture;
            if (pass == 1) {
                if (kl == 20 && memcmp(k, "general.architecture", 20) == 0 && type == T_STR &&
                    !str(&v, &s, &n, MAX_STR)) {
                    if (n >= sizeof out->architecture) return -EINVAL;
                    memcpy(out->architecture, s, n);
                    out->architecture[n] = '\0';
                } else if (kl == 12 && memcmp(k, "general.name", 12) == 0 && type == T_STR &&
                           !str(&v, &s, &n, MAX_STR)) {
                    size_t c = n < sizeof out->name - 1 ? (size_t)n : sizeof out->name - 1;
                    memcpy(out->name, s, c);
                    out->name[c] = '\0';
                } else if (kl == 17 && memcmp(k, "general.file_type", 17) == 0 &&
                           !read_int(&v, type, &x) && x >= 0 && x <= INT32_MAX) {
                    out->file_type = (int32_t)x;
                }
            } else if (key_is(k, kl, a, "pooling_type")) {
                if (!read_int(&v, type, &x) && x >= INT32_MIN && x <= INT32_MAX)
                    out->pooling_type = (int32_t)x;
            } else if (key_is(k, kl, a, "block_count")) {
                if (!read_int(&v, type, &x) && x >= 0 && x <= UINT32_MAX)
                    out->block_count = (uint32_t)x;
            } else if (key_is(k, kl, a, "context_length")) {
                if (!read_int(&v, type, &x) && x >= 0 && x <= UINT32_MAX)
                    out->context_length = (uint32_t)x;
            } else if (key_is(k, kl, a, "embedding_length")) {
                read_u32(&v, type, &out->embedding_length);
            } else if (key_is(k, kl, a, "attention.head_count")) {
                read_u32(&v, type, &out->head_count);
            } else if (key_is(k, kl, a, "attention.head_count_kv")) {
                read_u32(&v, type, &out->head_count_kv);
            } else if (key_is(k, kl, a, "attention.key_length")) {
                read_u32(&v, type, &out->key_length);
            } else if (key_is(k, kl, a, "attention.value_length")) {
                read_u32(&v, type, &out->value_length);
            } else if (key_is(k, kl, a, "classifier.output_labels")) {
                out->has_classifier = 1;
            }
        }
    }
    return 0;
}

int gguf_info_read(const char *path, gguf_info_t *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    size_t want = (size_t)st.st_size < MAX_READ ? (size_t)st.st_size : MAX_READ;
    /* Metadata is usually small: try 1 MiB first, grow only if needed. */
    size_t chunk = want < (1u << 20) ? want : (1u << 20);
    uint8_t *buf = NULL;
    int rc = -ENODATA;
    for (;;) {
        uint8_t *nb = realloc(buf, chunk ? chunk : 1);
        if (!nb) {
            rc = -ENOMEM;
            break;
        }
        buf = nb;
        ssize_t got = pread(fd, buf, chunk, 0);
        if (got < 0) {
            rc = -errno;
            break;
        }
        rc = gguf_info_parse(buf, (size_t)got, out);
        if (rc != -ENODATA || chunk >= want) break;
        chunk = chunk * 4 < want ? chunk * 4 : want;
    }
    free(buf);
    close(fd);
    if (rc == 0) out->file_size = (uint64_t)st.st_size;
    return rc;
}

mm_type_t gguf_info_type(const gguf_info_t *info)
{
    if (info->pooling_type == 4 || info->has_classifier) return MM_RERANKING;
    static const char *const encoders[] = {
        "bert",     "nomic-bert",  "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3",
        "neo-bert", "modern-bert", "t5encoder",      "gte",          "eurobert"};
    for (size_t i = 0; i < sizeof encoders / sizeof encoders[0]; i++)
        if (strcmp(info->architecture, encoders[i]) == 0) return MM_EMBEDDING;
    if (info->pooling_type >= 1 && info->pooling_type <= 3) return MM_EMBEDDING;
    return MM_LLM;
}

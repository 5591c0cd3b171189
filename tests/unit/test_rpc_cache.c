/* Unit tests for the GGUF tensor-table reader (src/core/gguf_tensors.h) and the RPC tensor-cache
 * seeding (src/net/rpc_cache.h): hand-built and hostile tables, the shared test models, and
 * seeding a synthesized GGUF with tensors around the 10 MiB threshold into a temp dir. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "gguf_tensors.h"
#include "rpc_cache.h"
#include "util.h"

#define MIB (1024u * 1024u)

/* ---- a small GGUF writer ---- */

static void put_u32(buf_t *b, uint32_t v)
{
    assert_int_equal(buf_append(b, &v, 4), 0); /* little-endian hosts only, like the reader */
}

static void put_u64(buf_t *b, uint64_t v)
{
    assert_int_equal(buf_append(b, &v, 8), 0);
}

static void put_str(buf_t *b, const char *s)
{
    put_u64(b, strlen(s));
    assert_int_equal(buf_append(b, s, strlen(s)), 0);
}

static void begin(buf_t *b, uint64_t n_tensors, uint64_t n_kv)
{
    buf_init(b, 64 << 20);
    assert_int_equal(buf_append(b, "GGUF", 4), 0);
    put_u32(b, 3);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}

static void kv_str(buf_t *b, const char *k, const char *v)
{
    put_str(b, k);
    put_u32(b, GGUF_T_STR);
    put_str(b, v);
}

static void kv_u32(buf_t *b, const char *k, uint32_t type, uint32_t v)
{
    put_str(b, k);
    put_u32(b, type);
    put_u32(b, v);
}

static void tinfo(buf_t *b, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                  uint64_t offset)
{
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        put_u64(b, ne[i]);
    put_u32(b, type);
    put_u64(b, offset);
}

static void pad_to(buf_t *b, size_t align)
{
    static const uint8_t zeros[64];
    size_t n = (align - b->len % align) % align;
    assert_int_equal(buf_append(b, zeros, n), 0);
}

static int parse(const buf_t *b, gguf_tensors_t *t)
{
    return gguf_tensors_parse((const uint8_t *)b->data, b->len, b->len, t);
}

/* ---- FNV and type sizes ---- */

static void test_fnv_vectors(void **state)
{
    assert_true(rpc_cache_fnv1a64("", 0, RPC_CACHE_FNV_BASIS) == 0xcbf29ce484222325ull);
    assert_true(rpc_cache_fnv1a64("a", 1, RPC_CACHE_FNV_BASIS) == 0xaf63dc4c8601ec8cull);
    assert_true(rpc_cache_fnv1a64("foobar", 6, RPC_CACHE_FNV_BASIS) == 0x85944171f73967e8ull);
    /* streaming = one shot */
    uint64_t h = rpc_cache_fnv1a64("foo", 3, RPC_CACHE_FNV_BASIS);
    assert_true(rpc_cache_fnv1a64("bar", 3, h) == 0x85944171f73967e8ull);
}

static void test_type_sizes(void **state)
{
    struct {
        uint32_t type;
        uint64_t ne0, ne1, bytes;
    } cases[] = {
        {0, 64, 512, 131072},      /* f32 */
        {1, 8, 32000, 512000},     /* f16 */
        {2, 1664, 512, 479232},    /* q4_0: 18 bytes / 32 */
        {8, 128, 2048, 278528},    /* q8_0: 34 / 32 */
        {12, 4096, 4096, 9437184}, /* q4_K: 144 / 256 */
        {14, 256, 1, 210},         /* q6_K */
        {23, 256, 2, 272},         /* iq4_xs */
        {30, 3, 3, 18},            /* bf16 */
        {39, 32, 1, 17},           /* mxfp4 */
        {28, 1, 1, 8},             /* f64 */
        {24, 7, 1, 7},             /* i8 */
        {35, 256, 0, 0},           /* tq2_0, empty */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t ne[4] = {cases[i].ne0, cases[i].ne1, 1, 1}, n = 1;
        assert_int_equal(gguf_tensor_nbytes(cases[i].type, ne, &n), 0);
        assert_true(n == cases[i].bytes);
    }
    uint64_t n, ne[4] = {32, 1, 1, 1};
    assert_int_equal(gguf_tensor_nbytes(4, ne, &n), -EINVAL);  /* removed Q4_2 */
    assert_int_equal(gguf_tensor_nbytes(31, ne, &n), -EINVAL); /* removed Q4_0_4_4 */
    assert_int_equal(gguf_tensor_nbytes(43, ne, &n), -EINVAL); /* past the end */
    ne[0] = 33;
    assert_int_equal(gguf_tensor_nbytes(2, ne, &n), -EINVAL); /* not a multiple of the block */
    uint64_t big[4] = {1ull << 31, 1ull << 31, 1ull << 2, 1};
    assert_int_equal(gguf_tensor_nbytes(0, big, &n), -EINVAL); /* 2^64 elements */
    uint64_t neg[4] = {(uint64_t)-1, 1, 1, 1};
    assert_int_equal(gguf_tensor_nbytes(0, neg, &n), -EINVAL);
    assert_int_equal(gguf_type_traits(15, NULL, NULL), 0);
    assert_string_equal(gguf_type_name(8), "q8_0");
}

/* ---- the tensor table ---- */

/* A valid two-tensor image with a custom alignment. */
static void small_image(buf_t *b)
{
    begin(b, 2, 2);
    kv_str(b, "general.architecture", "llama");
    kv_u32(b, "general.alignment", GGUF_T_U32, 64);
    uint64_t ne0[2] = {32, 3}, ne1[1] = {10};
    tinfo(b, "a.weight", 8, 2, ne0, 0);   /* q8_0: 3 blocks of 34 = 102 bytes */
    tinfo(b, "b.weight", 0, 1, ne1, 128); /* f32: 40 bytes at the next 64 */
    pad_to(b, 64);
    static uint8_t data[168];
    assert_int_equal(buf_append(b, data, sizeof data), 0);
}

static void test_parse_small(void **state)
{
    buf_t b;
    small_image(&b);
    gguf_tensors_t t;
    assert_int_equal(parse(&b, &t), 0);
    assert_int_equal(t.alignment, 64);
    assert_int_equal(t.n_tensors, 2);
    assert_int_equal(t.data_offset % 64, 0);
    assert_string_equal(t.tensors[0].name, "a.weight");
    assert_int_equal(t.tensors[0].type, GGML_T_Q8_0);
    assert_int_equal(t.tensors[0].size, 102);
    assert_int_equal(t.tensors[0].offset, t.data_offset);
    assert_int_equal(t.tensors[1].size, 40);
    assert_int_equal(t.tensors[1].offset, t.data_offset + 128);
    assert_int_equal(t.tensors[1].n_dims, 1);
    assert_int_equal(t.tensors[1].ne[1], 1);
    /* A prefix of the file: "need more" until the table is complete, then the same result. */
    int complete = 0;
    for (size_t n = 0; n < b.len; n++) {
        gguf_tensors_t p;
        int rc = gguf_tensors_parse((const uint8_t *)b.data, n, b.len, &p);
        if (rc == 0) {
            complete = 1;
            assert_int_equal(p.n_tensors, 2);
            assert_int_equal(p.data_offset, t.data_offset);
            assert_true(p.tensors[1].offset == t.data_offset + 128);
            gguf_tensors_free(&p);
        } else {
            assert_false(complete);
            assert_int_equal(rc, -ENODATA);
        }
        /* the same prefix as a whole (truncated) file: the data is missing */
        assert_int_equal(gguf_tensors_parse((const uint8_t *)b.data, n, n, &p), -EINVAL);
    }
    assert_true(complete);
    gguf_tensors_free(&t);
    /* the file cut inside the data: the tensor that no longer fits makes it invalid */
    assert_int_equal(gguf_tensors_parse((const uint8_t *)b.data, b.len - 1, b.len - 1, &t),
                     -EINVAL);
    buf_free(&b);
}

/* Build a one-tensor image, letting the caller break one field. */
typedef struct {
    uint64_t n_tensors, n_kv;
    uint32_t version, n_dims, type, align_type, align;
    uint64_t ne[5], offset, data_len;
    const char *name, *name2;
} spec_t;

static spec_t good_spec(void)
{
    spec_t s = {.n_tensors = 1,
                .n_kv = 1,
                .version = 3,
                .n_dims = 2,
                .type = 0,
                .align_type = GGUF_T_U32,
                .align = 32,
                .ne = {4, 2},
                .offset = 0,
                .data_len = 32,
                .name = "t.weight"};
    return s;
}

static int parse_spec(const spec_t *s)
{
    buf_t b;
    buf_init(&b, 1 << 20);
    assert_int_equal(buf_append(&b, "GGUF", 4), 0);
    put_u32(&b, s->version);
    put_u64(&b, s->n_tensors);
    put_u64(&b, s->n_kv);
    put_str(&b, "general.alignment");
    put_u32(&b, s->align_type);
    put_u32(&b, s->align);
    tinfo(&b, s->name, s->type, s->n_dims, s->ne, s->offset);
    if (s->name2) tinfo(&b, s->name2, s->type, s->n_dims, s->ne, 32);
    pad_to(&b, 32);
    for (uint64_t i = 0; i < s->data_len; i++)
        assert_int_equal(buf_append(&b, "x", 1), 0);
    gguf_tensors_t t;
    int rc = parse(&b, &t);
    if (rc == 0) gguf_tensors_free(&t);
    buf_free(&b);
    return rc;
}

static void test_malformed(void **state)
{
    spec_t s = good_spec();
    assert_int_equal(parse_spec(&s), 0);
    s = good_spec(), s.version = 1;
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.n_tensors = 1ull << 40; /* huge counts */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.n_tensors = 3; /* more infos than the file holds */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.n_kv = 1ull << 60;
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.data_len = 31; /* data past EOF */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.offset = 32; /* offset past EOF (and not where llama.cpp wants it) */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.offset = 8, s.data_len = 64; /* misplaced */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.offset = UINT64_MAX - 7; /* offset overflow */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.type = 4; /* removed type */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.type = 1000;
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.type = 2; /* q4_0 with 4 elements per row */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.n_dims = 5;
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.ne[1] = (uint64_t)-2; /* negative */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.ne[0] = 1ull << 40, s.ne[1] = 1ull << 40; /* element count overflow */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.ne[0] = 1ull << 60, s.ne[1] = 1; /* size past EOF */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.align = 24;
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.align = 0;
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.align_type = GGUF_T_I32;
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.name = "";
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.name = "0123456789012345678901234567890123456789012345678901234567890123";
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.name = "a\nb";
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.n_tensors = 2, s.name2 = "t.weight", s.data_len = 64; /* duplicate */
    assert_int_equal(parse_spec(&s), -EINVAL);
    s = good_spec(), s.n_tensors = 2, s.name2 = "u.weight", s.data_len = 64;
    assert_int_equal(parse_spec(&s), 0);
    s = good_spec(), s.ne[0] = 0; /* an empty tensor is fine */
    assert_int_equal(parse_spec(&s), 0);

    /* nested arrays and unknown value types are rejected (llama.cpp does) */
    buf_t b;
    begin(&b, 0, 1);
    put_str(&b, "x");
    put_u32(&b, GGUF_T_ARR);
    put_u32(&b, GGUF_T_ARR);
    put_u64(&b, 0);
    gguf_tensors_t t;
    assert_int_equal(parse(&b, &t), -EINVAL);
    buf_free(&b);
    begin(&b, 0, 1);
    put_str(&b, "x");
    put_u32(&b, 13);
    put_u32(&b, 0);
    assert_int_equal(parse(&b, &t), -EINVAL);
    buf_free(&b);
    /* a string array whose count cannot fit */
    begin(&b, 0, 1);
    put_str(&b, "x");
    put_u32(&b, GGUF_T_ARR);
    put_u32(&b, GGUF_T_STR);
    put_u64(&b, 1ull << 62);
    assert_int_equal(parse(&b, &t), -EINVAL);
    assert_int_equal(gguf_tensors_parse((const uint8_t *)b.data, b.len, 1ull << 62, &t), -EINVAL);
    buf_free(&b);
    /* one that could fit in a larger file: "need more" if the file is larger than the buffer */
    begin(&b, 0, 1);
    put_str(&b, "x");
    put_u32(&b, GGUF_T_ARR);
    put_u32(&b, GGUF_T_STR);
    put_u64(&b, 1000);
    assert_int_equal(parse(&b, &t), -EINVAL);
    assert_int_equal(gguf_tensors_parse((const uint8_t *)b.data, b.len, 1ull << 62, &t), -ENODATA);
    buf_free(&b);
    assert_int_equal(gguf_tensors_parse((const uint8_t *)"GGML", 4, 4, &t), -EINVAL);
    assert_int_equal(gguf_tensors_parse((const uint8_t *)"GGUF", 4, 4, &t), -EINVAL);
    assert_int_equal(gguf_tensors_parse((const uint8_t *)"GGUF", 4, 100, &t), -ENODATA);
}

static void models_dir(char *out, size_t len)
{
    const char *env = getenv("MESH_LLM_TEST_MODELS");
    if (env) {
        snprintf(out, len, "%s", env);
        return;
    }
    /* ../shared/models relative to the source tree (this file is tests/unit/ in it) */
    snprintf(out, len, "%s", __FILE__);
    char *s = strrchr(out, '/');
    if (s) *s = '\0';
    size_t n = strlen(out);
    snprintf(out + n, len - n, "/../../../shared/models");
}

static int read_model(const char *file, gguf_tensors_t *t)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    models_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return gguf_tensors_read(path, t);
}

static void check_table(const gguf_tensors_t *t)
{
    uint64_t sum = 0, prev_end = t->data_offset;
    for (size_t i = 0; i < t->n_tensors; i++) {
        const gguf_tensor_t *x = &t->tensors[i];
        assert_true(x->name[0] != '\0' && strlen(x->name) < GGUF_NAME_MAX);
        assert_int_equal(x->offset % t->alignment, 0);
        assert_true(x->offset >= prev_end);
        assert_true(x->offset + x->size <= t->file_size);
        prev_end = x->offset + x->size;
        sum += x->size;
        uint64_t n;
        assert_int_equal(gguf_tensor_nbytes(x->type, x->ne, &n), 0);
        assert_true(n == x->size);
    }
    assert_true(sum <= t->file_size);
    assert_true(t->data_offset % t->alignment == 0);
}

static const gguf_tensor_t *find(const gguf_tensors_t *t, const char *name)
{
    for (size_t i = 0; i < t->n_tensors; i++)
        if (strcmp(t->tensors[i].name, name) == 0) return &t->tensors[i];
    return NULL;
}

static void test_shared_models(void **state)
{
    gguf_tensors_t t;
    int rc = read_model("stories260K.gguf", &t);
    if (rc == -ENOENT) {
        print_message("skipping: stories260K.gguf not found in the shared models\n");
        skip();
    }
    assert_int_equal(rc, 0);
    assert_int_equal(t.n_tensors, 3 + 5 * 9);
    assert_int_equal(t.file_size, 1185376);
    check_table(&t);
    const gguf_tensor_t *x = find(&t, "token_embd.weight");
    assert_non_null(x);
    assert_int_equal(x->type, GGML_T_F32);
    assert_true(x->ne[0] == 64 && x->ne[1] == 512 && x->size == 64 * 512 * 4);
    assert_non_null(find(&t, "blk.4.ffn_down.weight"));
    assert_non_null(find(&t, "output.weight"));
    /* F32 and tightly packed: the data is the rest of the file */
    const gguf_tensor_t *last = &t.tensors[t.n_tensors - 1];
    assert_true(last->offset + last->size == t.file_size);
    /* by layer (what a split host keeps: election.h "Host bytes"): the input layer is
     * token_embd, the output layer output.weight (64 x 512 F32) and output_norm (64 F32) */
    gguf_layer_bytes_t lb;
    gguf_tensors_layer_bytes(&t, &lb);
    assert_int_equal(lb.input, 64 * 512 * 4);
    assert_int_equal(lb.output, 64 * 512 * 4 + 64 * 4);
    uint64_t all = 0;
    for (size_t i = 0; i < t.n_tensors; i++)
        all += t.tensors[i].size;
    assert_int_equal(lb.input + lb.output + lb.repeating, all);
    assert_int_equal(lb.repeating, t.file_size - t.data_offset - lb.input - lb.output);
    gguf_tensors_free(&t);

    assert_int_equal(read_model("TinyStories-656K-Q8_0.gguf", &t), 0);
    assert_int_equal(t.n_tensors, 2 + 2 * 9);
    check_table(&t);
    x = find(&t, "blk.1.ffn_up.weight");
    assert_non_null(x);
    assert_int_equal(x->type, GGML_T_Q8_0);
    assert_true(x->size == 128 * 384 / 32 * 34);
    assert_null(find(&t, "output.weight")); /* tied embeddings */
    /* a tied output adds nothing: the output layer is output_norm alone (128 F32) */
    gguf_tensors_layer_bytes(&t, &lb);
    assert_int_equal(lb.output, 128 * 4);
    assert_int_equal(lb.input, find(&t, "token_embd.weight")->size);
    gguf_tensors_free(&t);

    /* a tokenizer-only GGUF has no tensors */
    assert_int_equal(read_model("vocab/ggml-vocab-phi-3.gguf", &t), 0);
    assert_int_equal(t.n_tensors, 0);
    gguf_tensors_free(&t);
}

/* Every truncation of a real model is rejected or, once the table is complete, parsed the same
 * way (as a prefix of the full file). */
static void test_truncated_models(void **state)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    models_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/TinyStories-656K-Q8_0.gguf", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        print_message("skipping: %s not found\n", path);
        skip();
    }
    static uint8_t img[1 << 20];
    size_t n = fread(img, 1, sizeof img, f);
    fclose(f);
    gguf_tensors_t full, t;
    assert_int_equal(gguf_tensors_parse(img, n, n, &full), 0);
    const gguf_tensor_t *last = &full.tensors[full.n_tensors - 1];
    for (size_t cut = 0; cut < n; cut += cut < 60000 ? 97 : 9973) {
        int rc = gguf_tensors_parse(img, cut, cut, &t);
        if (cut < last->offset + last->size)
            assert_int_equal(rc, -EINVAL); /* data or table past EOF */
        rc = gguf_tensors_parse(img, cut, n, &t);
        if (rc == 0) {
            assert_int_equal(t.n_tensors, full.n_tensors);
            assert_memory_equal(t.tensors, full.tensors, full.n_tensors * sizeof *t.tensors);
            gguf_tensors_free(&t);
        } else {
            assert_int_equal(rc, -ENODATA);
        }
    }
    gguf_tensors_free(&full);
    /* a file cut in its metadata, on disk */
    char tmp[] = "/tmp/mesh-rpc-cache-trunc-XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, img, 30000), 30000);
    close(fd);
    assert_int_equal(gguf_tensors_read(tmp, &t), -EINVAL);
    unlink(tmp);
    assert_int_equal(gguf_tensors_read("/nonexistent/x.gguf", &t), -ENOENT);
}

/* ---- layers and directories ---- */

static void test_layers(void **state)
{
    assert_int_equal(rpc_cache_tensor_layer("blk.0.attn_q.weight"), 0);
    assert_int_equal(rpc_cache_tensor_layer("blk.17.ffn_down.weight"), 17);
    assert_int_equal(rpc_cache_tensor_layer("enc.blk.3.attn_k.weight"), 3);
    assert_int_equal(rpc_cache_tensor_layer("dec.blk.2.ffn_up.weight"), 2);
    assert_int_equal(rpc_cache_tensor_layer("token_embd.weight"), RPC_LAYER_INPUT);
    assert_int_equal(rpc_cache_tensor_layer("position_embd.weight"), RPC_LAYER_INPUT);
    assert_int_equal(rpc_cache_tensor_layer("per_layer_token_embd.weight"), RPC_LAYER_INPUT);
    assert_int_equal(rpc_cache_tensor_layer("output.weight"), RPC_LAYER_OUTPUT);
    assert_int_equal(rpc_cache_tensor_layer("output_norm.weight"), RPC_LAYER_OUTPUT);
    assert_int_equal(rpc_cache_tensor_layer("output_norm.bias"), RPC_LAYER_OUTPUT);
    assert_int_equal(rpc_cache_tensor_layer("cls.output.weight"), RPC_LAYER_OUTPUT);
    assert_int_equal(rpc_cache_tensor_layer("token_embd_norm.weight"), RPC_LAYER_OUTPUT);
    assert_int_equal(rpc_cache_tensor_layer("rope_freqs.weight"), 0);
    assert_int_equal(rpc_cache_tensor_layer("blk.x.attn_q.weight"), RPC_LAYER_OUTPUT);
    assert_int_equal(rpc_cache_tensor_layer("blk.99999999999.a"), RPC_LAYER_OUTPUT);
    assert_int_equal(rpc_cache_tensor_layer("blk.4"), RPC_LAYER_OUTPUT);
}

static void set_env(const char *k, const char *v)
{
    if (v)
        setenv(k, v, 1);
    else
        unsetenv(k);
}

static void test_cache_dir(void **state)
{
    char *saved[3];
    const char *names[3] = {"LLAMA_CACHE", "XDG_CACHE_HOME", "HOME"};
    for (int i = 0; i < 3; i++)
        saved[i] = getenv(names[i]) ? strdup(getenv(names[i])) : NULL;
    char buf[256];
    set_env("LLAMA_CACHE", "/x/llc");
    assert_int_equal(rpc_cache_dir(buf, sizeof buf), 0);
    assert_string_equal(buf, "/x/llc/rpc/");
    set_env("LLAMA_CACHE", "/x/llc/");
    assert_int_equal(rpc_cache_dir(buf, sizeof buf), 0);
    assert_string_equal(buf, "/x/llc/rpc/");
    set_env("LLAMA_CACHE", "");
    assert_int_equal(rpc_cache_dir(buf, sizeof buf), -EINVAL);
    set_env("LLAMA_CACHE", NULL);
    set_env("XDG_CACHE_HOME", "/xdg");
    assert_int_equal(rpc_cache_dir(buf, sizeof buf), 0);
    assert_string_equal(buf, "/xdg/llama.cpp/rpc/");
    set_env("XDG_CACHE_HOME", NULL);
    set_env("HOME", "/home/u");
    assert_int_equal(rpc_cache_dir(buf, sizeof buf), 0);
    assert_string_equal(buf, "/home/u/.cache/llama.cpp/rpc/");
    assert_int_equal(rpc_cache_dir(buf, 10), -ENAMETOOLONG);
    assert_string_equal(buf, "");
    set_env("HOME", NULL);
    assert_int_equal(rpc_cache_dir(buf, sizeof buf), 0); /* the passwd entry */
    assert_true(strstr(buf, "/.cache/llama.cpp/rpc/") != NULL);
    for (int i = 0; i < 3; i++) {
        set_env(names[i], saved[i]);
        free(saved[i]);
    }
}

/* ---- seeding ---- */

typedef struct {
    const char *name;
    uint64_t bytes; /* an i8 tensor of this many elements (= bytes) */
} synth_t;

/* Deterministic bytes for tensor i */
static void fill(uint8_t *p, size_t n, uint64_t i)
{
    uint64_t s = 0x9e3779b97f4a7c15ull * (i + 1);
    for (size_t k = 0; k < n; k++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        p[k] = (uint8_t)s;
    }
}

static void write_gguf(const char *path, const synth_t *ts, size_t n)
{
    buf_t b;
    begin(&b, n, 1);
    kv_str(&b, "general.architecture", "llama");
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        tinfo(&b, ts[i].name, 24 /* i8 */, 1, &ts[i].bytes, off);
        off += (ts[i].bytes + 31) / 32 * 32;
    }
    pad_to(&b, 32);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b.data, b.len), (ssize_t)b.len);
    buf_free(&b);
    for (size_t i = 0; i < n; i++) {
        size_t len = (size_t)((ts[i].bytes + 31) / 32 * 32);
        uint8_t *p = calloc(1, len);
        assert_non_null(p);
        fill(p, (size_t)ts[i].bytes, i);
        assert_int_equal(write(fd, p, len), (ssize_t)len);
        free(p);
    }
    close(fd);
}

#define BIG (10 * MIB + MIB / 2)

static const synth_t MODEL[] = {
    {"token_embd.weight", BIG}, /* input layer: never seeded */
    {"output_norm.weight", 4096},
    {"output.weight", BIG},
    {"blk.0.attn_norm.weight", 4096},
    {"blk.0.attn_q.weight", BIG},
    {"blk.0.ffn_up.weight", BIG},
    {"blk.1.attn_norm.weight", 4096},
    {"blk.1.attn_q.weight", BIG},
    {"blk.1.ffn_up.weight", 10 * MIB}, /* exactly the threshold: not offered by hash */
    {"blk.2.attn_norm.weight", 4096},
    {"blk.2.attn_q.weight", 10 * MIB + 1},
    {"blk.2.ffn_up.weight", BIG},
};
#define N_MODEL (sizeof MODEL / sizeof MODEL[0])

typedef struct {
    char dir[64], gguf[128], cache[128];
} fixture_t;

static void rm_rf(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            rm_rf(p);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/mesh-rpc-cache-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    snprintf(f->gguf, sizeof f->gguf, "%s/model.gguf", f->dir);
    snprintf(f->cache, sizeof f->cache, "%s/cache/sub/rpc", f->dir); /* mkdir -p */
    write_gguf(f->gguf, MODEL, N_MODEL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    rm_rf(f->dir);
    free(f);
    return 0;
}

/* The cache files in dir (names of 16 hex digits), sorted; everything else must be the index
 * directory: no temporaries. */
static size_t cache_files(const char *dir, char names[][17], size_t max)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            !strcmp(e->d_name, RPC_CACHE_INDEX_DIR))
            continue;
        assert_int_equal(strlen(e->d_name), 16);
        assert_true(strspn(e->d_name, "0123456789abcdef") == 16);
        assert_true(n < max);
        memcpy(names[n++], e->d_name, 17); /* 16 digits and the NUL */
    }
    closedir(d);
    qsort(names, n, 17, (int (*)(const void *, const void *))strcmp);
    return n;
}

/* The hash of MODEL[i] and a check that the cache holds exactly its bytes under that name. */
static uint64_t expect_file(const char *cache, size_t i)
{
    size_t n = (size_t)MODEL[i].bytes;
    uint8_t *want = malloc(n), *got = malloc(n + 1);
    assert_non_null(want);
    assert_non_null(got);
    fill(want, n, i);
    uint64_t h = rpc_cache_fnv1a64(want, n, RPC_CACHE_FNV_BASIS);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%016" PRIx64, cache, h);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_int_equal(fread(got, 1, n + 1, fp), n);
    fclose(fp);
    assert_memory_equal(got, want, n);
    free(want);
    free(got);
    return h;
}

static void test_seed_layers(void **state)
{
    fixture_t *f = *state;
    rpc_cache_result_t r;
    /* layers [1,3), no output: blk.1.attn_q, blk.2.attn_q (10 MiB + 1), blk.2.ffn_up */
    assert_int_equal(rpc_cache_seed_sync(f->gguf, f->cache, 1, 3, false, &r), 0);
    assert_int_equal(r.n_seeded, 3);
    assert_int_equal(r.n_present, 0);
    assert_int_equal(r.n_skipped_small, 3); /* two norms and the tensor of exactly 10 MiB */
    assert_int_equal(r.n_hashed, 3);
    assert_true(r.bytes_seeded == 2ull * BIG + 10 * MIB + 1);
    char names[16][17];
    assert_int_equal(cache_files(f->cache, names, 16), 3);
    uint64_t h7 = expect_file(f->cache, 7), h10 = expect_file(f->cache, 10);
    expect_file(f->cache, 11);
    assert_true(h7 != h10);

    /* again: everything is there, nothing is hashed (the index knows the hashes) */
    assert_int_equal(rpc_cache_seed_sync(f->gguf, f->cache, 1, 3, false, &r), 0);
    assert_int_equal(r.n_seeded, 0);
    assert_int_equal(r.n_present, 3);
    assert_int_equal(r.n_hashed, 0);
    assert_true(r.bytes_present == 2ull * BIG + 10 * MIB + 1);

    /* more layers and the output layer: only the new tensors are hashed */
    assert_int_equal(rpc_cache_seed_sync(f->gguf, f->cache, 0, 3, true, &r), 0);
    assert_int_equal(r.n_seeded, 3); /* output, blk.0.attn_q, blk.0.ffn_up */
    assert_int_equal(r.n_present, 3);
    assert_int_equal(r.n_hashed, 3);
    assert_int_equal(r.n_skipped_small, 5); /* output_norm, 3 attn_norm, blk.1.ffn_up */
    assert_int_equal(cache_files(f->cache, names, 16), 6);
    expect_file(f->cache, 2);
    expect_file(f->cache, 4);
    expect_file(f->cache, 5);

    /* a deleted and a truncated cache file are written again, from the index's hashes */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%016" PRIx64, f->cache, h7);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof path, "%s/%016" PRIx64, f->cache, h10);
    assert_int_equal(truncate(path, 1000), 0);
    assert_int_equal(rpc_cache_seed_sync(f->gguf, f->cache, 0, 100, true, &r), 0);
    assert_int_equal(r.n_seeded, 2);
    assert_int_equal(r.n_present, 4);
    assert_int_equal(r.n_hashed, 0);
    expect_file(f->cache, 7);
    expect_file(f->cache, 10);

    /* an empty range seeds nothing; the input layer never is */
    assert_int_equal(rpc_cache_seed_sync(f->gguf, f->cache, 5, 5, false, &r), 0);
    assert_int_equal(r.n_seeded + r.n_present + r.n_skipped_small, 0);
    char emb[PATH_MAX];
    uint8_t *p = malloc(BIG);
    assert_non_null(p);
    fill(p, BIG, 0);
    snprintf(emb, sizeof emb, "%s/%016" PRIx64, f->cache,
             rpc_cache_fnv1a64(p, BIG, RPC_CACHE_FNV_BASIS));
    free(p);
    assert_int_equal(access(emb, F_OK), -1);
}

static void test_seed_index_invalidation(void **state)
{
    fixture_t *f = *state;
    rpc_cache_result_t r;
    assert_int_equal(rpc_cache_seed_sync(f->gguf, f->cache, 0, 1, false, &r), 0);
    assert_int_equal(r.n_hashed, 2);
    /* a corrupt index is ignored: hashed again, the files are already there */
    char idir[PATH_MAX];
    snprintf(idir, sizeof idir, "%s/" RPC_CACHE_INDEX_DIR, f->cache);
    DIR *d = opendir(idir);
    assert_non_null(d);
    struct dirent *e;
    int n_index = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", idir, e->d_name);
        FILE *fp = fopen(p, "r+");
        assert_non_null(fp);
        fseek(fp, -5, SEEK_END);
        fputc(1, fp); /* a control character in a name: the whole index is invalid */
        fclose(fp);
        n_index++;
    }
    closedir(d);
    assert_int_equal(n_index, 1);
    assert_int_equal(rpc_cache_seed_sync(f->gguf, f->cache, 0, 1, false, &r), 0);
    assert_int_equal(r.n_hashed, 2);
    assert_int_equal(r.n_present, 2);
    assert_int_equal(r.n_seeded, 0);
    assert_int_equal(rpc_cache_seed_sync(f->gguf, f->cache, 0, 1, false, &r), 0);
    assert_int_equal(r.n_hashed, 0);
    /* a new mtime is a different file: hashed again */
    struct timespec ts[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    assert_int_equal(utimensat(AT_FDCWD, f->gguf, ts, 0), 0);
    assert_int_equal(rpc_cache_seed_sync(f->gguf, f->cache, 0, 1, false, &r), 0);
    assert_int_equal(r.n_hashed, 2);
    assert_int_equal(r.n_present, 2);
    /* stale temporaries of dead processes are swept; the cache dir holds only hash files */
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.mesh-llm-tmp.999999999.0", f->cache);
    FILE *fp = fopen(tmp, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(rpc_cache_seed_sync(f->gguf, f->cache, 0, 1, false, &r), 0);
    assert_int_equal(access(tmp, F_OK), -1);
    char names[16][17];
    assert_int_equal(cache_files(f->cache, names, 16), 2);
}

static void test_seed_errors(void **state)
{
    fixture_t *f = *state;
    rpc_cache_result_t r;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/missing.gguf", f->dir);
    assert_int_equal(rpc_cache_seed_sync(p, f->cache, 0, 3, true, &r), -ENOENT);
    snprintf(p, sizeof p, "%s/bad.gguf", f->dir);
    FILE *fp = fopen(p, "w");
    fputs("GGUF not really", fp);
    fclose(fp);
    assert_int_equal(rpc_cache_seed_sync(p, f->cache, 0, 3, true, &r), -EINVAL);
    /* the cache dir is a file */
    assert_int_equal(rpc_cache_seed_sync(f->gguf, p, 0, 3, true, &r), -ENOTDIR);
    assert_int_equal(rpc_cache_seed_sync(f->gguf, "", 0, 3, true, &r), -EINVAL);
    /* a read-only cache dir: the seeding fails and leaves nothing behind */
    if (geteuid() != 0) {
        char ro[PATH_MAX];
        snprintf(ro, sizeof ro, "%s/ro", f->dir);
        assert_int_equal(mkdir(ro, 0755), 0);
        char idx[PATH_MAX + 32];
        snprintf(idx, sizeof idx, "%s/" RPC_CACHE_INDEX_DIR, ro);
        assert_int_equal(mkdir(idx, 0755), 0);
        assert_int_equal(chmod(ro, 0555), 0);
        assert_int_equal(rpc_cache_seed_sync(f->gguf, ro, 0, 3, true, &r), -EACCES);
        chmod(ro, 0755);
    }
}

/* Tied embeddings: without output.weight, llama.cpp puts token_embd on the output layer too. */
static void test_seed_tied(void **state)
{
    fixture_t *f = *state;
    char gguf[PATH_MAX], cache[PATH_MAX];
    snprintf(gguf, sizeof gguf, "%s/tied.gguf", f->dir);
    snprintf(cache, sizeof cache, "%s/tied-cache", f->dir);
    const synth_t tied[] = {{"token_embd.weight", BIG}, {"output_norm.weight", 64}};
    write_gguf(gguf, tied, 2);
    rpc_cache_result_t r;
    assert_int_equal(rpc_cache_seed_sync(gguf, cache, 0, 1, false, &r), 0);
    assert_int_equal(r.n_seeded, 0);
    assert_int_equal(rpc_cache_seed_sync(gguf, cache, 0, 1, true, &r), 0);
    assert_int_equal(r.n_seeded, 1);
    assert_int_equal(r.n_skipped_small, 1);
    char names[4][17];
    assert_int_equal(cache_files(cache, names, 4), 1);
    expect_file(cache, 0); /* MODEL[0] has the same size and fill as tied[0] */
}

typedef struct {
    int calls, status;
    rpc_cache_result_t r;
} async_t;

static void on_seeded(void *data, int status, const rpc_cache_result_t *r)
{
    async_t *a = data;
    a->calls++;
    a->status = status;
    a->r = *r;
}

static void test_seed_async(void **state)
{
    fixture_t *f = *state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    async_t a = {0}, b = {0};
    assert_int_equal(rpc_cache_seed(&loop, f->gguf, f->cache, 2, 3, false, on_seeded, &a), 0);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/missing.gguf", f->dir);
    assert_int_equal(rpc_cache_seed(&loop, p, f->cache, 0, 1, false, on_seeded, &b), 0);
    assert_int_equal(rpc_cache_seed(&loop, f->gguf, f->cache, 0, 1, false, NULL, NULL), -EINVAL);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.status, 0);
    assert_int_equal(a.r.n_seeded, 2);
    assert_int_equal(a.r.n_skipped_small, 1);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.status, -ENOENT);
    assert_int_equal(uv_loop_close(&loop), 0);
    expect_file(f->cache, 10);
    expect_file(f->cache, 11);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv_vectors),
        cmocka_unit_test(test_type_sizes),
        cmocka_unit_test(test_parse_small),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_shared_models),
        cmocka_unit_test(test_truncated_models),
        cmocka_unit_test(test_layers),
        cmocka_unit_test(test_cache_dir),
        cmocka_unit_test_setup_teardown(test_seed_layers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seed_index_invalidation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seed_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seed_tied, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seed_async, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* mesh-gguf-synth: write a llama-architecture GGUF (v3) with random weights of a chosen shape,
 * for tests and benchmarks that need a model of a realistic size (RPC hash-cache thresholds,
 * splits, memory budgets) without downloading one.
 *
 *   mesh-gguf-synth --template stories260K.gguf --out X.gguf --dim 1664 --ffn 1664 --layers 2
 *                   [--heads 13] [--kv-heads N] [--ctx 512] [--seed 1] [--embd-type q4_0]
 *                   [--tied] [--name NAME] [--chat-template FILE]
 *
 * The tokenizer (every tokenizer.* key) is copied from the template; the hyperparameters and
 * the weights are synthesized: matrices uniform in +-0.02 from a seeded PRNG, norms 1.0. The
 * same arguments always give the same bytes. Layer matrices are F32; token_embd and output
 * take --embd-type (f32, f16, q8_0 or q4_0: the small vocabulary-sized tensors are the bytes
 * outside the big matrices, a quantized type shrinks them). --tied leaves out output.weight
 * (llama.cpp then uses token_embd for the output). --chat-template puts FILE's text in
 * tokenizer.chat_template instead of the template's (a model whose template takes tools, for the
 * coding-agent tests). --reply ID,ID,... (F32 embeddings, not tied) makes the model answer
 * exactly those tokens and then its end-of-stream token, whatever the prompt, under greedy and
 * sampled decoding alike: each token's embedding is dominated by a direction (one for every
 * token outside the reply, one per reply token) and output.weight maps each direction to the
 * next token of the reply (REPLY_EMBD and REPLY_OUT dwarf the random weights), so the agents'
 * tests get a short, deterministic answer instead of gibberish until the context is full.
 *
 *   mesh-gguf-synth --mmproj --out P.gguf --dim TEXT_DIM [--vdim 32] [--ffn N] [--layers 2]
 *                   [--heads N] [--image-size 56] [--patch-size 14] [--seed 1] [--name NAME]
 *
 * writes a vision projector instead (llama-server --mmproj; see write_mmproj), with random
 * weights, for a text model of embedding size TEXT_DIM: the vision tests' model pair. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_tensors.h"

#define ALIGN 32u
#define MAX_TENSORS 4096
#define MAX_TEMPLATE (256u << 20)

typedef struct {
    char name[GGUF_NAME_MAX];
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    int norm; /* 1.0 everywhere */
    uint64_t size, offset;
} synth_tensor_t;

typedef struct {
    uint8_t *p;
    size_t len, cap;
    uint64_t n_kv; /* metadata pairs the kv_* helpers wrote */
} out_t;

static void die(const char *msg)
{
    fprintf(stderr, "mesh-gguf-synth: %s\n", msg);
    exit(1);
}

static void emit(out_t *o, const void *p, size_t n)
{
    if (n > o->cap - o->len) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap - o->len < n)
            cap *= 2;
        uint8_t *np = realloc(o->p, cap);
        if (!np) die("out of memory");
        o->p = np;
        o->cap = cap;
    }
    memcpy(o->p + o->len, p, n);
    o->len += n;
}

static void emit_u32(out_t *o, uint32_t v)
{
    emit(o, &v, 4); /* little-endian hosts only, like the readers */
}

static void emit_u64(out_t *o, uint64_t v)
{
    emit(o, &v, 8);
}

static void emit_str(out_t *o, const char *s)
{
    emit_u64(o, strlen(s));
    emit(o, s, strlen(s));
}

static void kv_u32(out_t *o, const char *k, uint32_t v)
{
    o->n_kv++;
    emit_str(o, k);
    emit_u32(o, GGUF_T_U32);
    emit_u32(o, v);
}

static void kv_f32(out_t *o, const char *k, float v)
{
    o->n_kv++;
    emit_str(o, k);
    emit_u32(o, GGUF_T_F32);
    emit(o, &v, 4);
}

static void kv_str(out_t *o, const char *k, const char *v)
{
    o->n_kv++;
    emit_str(o, k);
    emit_u32(o, GGUF_T_STR);
    emit_str(o, v);
}

static void kv_bool(out_t *o, const char *k, bool v)
{
    uint8_t b = v;
    o->n_kv++;
    emit_str(o, k);
    emit_u32(o, GGUF_T_BOOL);
    emit(o, &b, 1);
}

static void kv_f32_arr(out_t *o, const char *k, const float *v, uint64_t n)
{
    o->n_kv++;
    emit_str(o, k);
    emit_u32(o, GGUF_T_ARR);
    emit_u32(o, GGUF_T_F32);
    emit_u64(o, n);
    emit(o, v, 4 * n);
}

/* ---- the template's tokenizer ---- */

typedef struct {
    out_t kvs;
    uint64_t n_kv;
    uint64_t n_vocab;
    bool own_chat_template; /* --chat-template: the template's is left out */
    bool has_eos;
    uint32_t eos; /* tokenizer.ggml.eos_token_id */
} tok_t;

static int take_tokenizer(void *ctx, const gguf_kv_t *kv)
{
    tok_t *t = ctx;
    if (kv->key_len < 10 || memcmp(kv->key, "tokenizer.", 10) != 0) return 0;
    if (t->own_chat_template && kv->key_len == 23 &&
        memcmp(kv->key, "tokenizer.chat_template", 23) == 0)
        return 0;
    emit_u64(&t->kvs, kv->key_len);
    emit(&t->kvs, kv->key, kv->key_len);
    emit_u32(&t->kvs, kv->type);
    emit(&t->kvs, kv->val, kv->val_len);
    t->n_kv++;
    if (kv->key_len == 27 && memcmp(kv->key, "tokenizer.ggml.eos_token_id", 27) == 0 &&
        kv->type == GGUF_T_U32 && kv->val_len == 4) {
        memcpy(&t->eos, kv->val, 4);
        t->has_eos = true;
    }
    if (kv->key_len == 21 && memcmp(kv->key, "tokenizer.ggml.tokens", 21) == 0 &&
        kv->type == GGUF_T_ARR && kv->val_len >= 12)
        memcpy(&t->n_vocab, kv->val + 4, 8);
    return 0;
}

static void read_template(const char *path, tok_t *tok)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("cannot open the template");
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) die("cannot stat the template");
    size_t n = (uint64_t)st.st_size < MAX_TEMPLATE ? (size_t)st.st_size : MAX_TEMPLATE;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) die("out of memory");
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r <= 0) die("cannot read the template");
        got += (size_t)r;
    }
    close(fd);
    if (gguf_kv_foreach(buf, n, take_tokenizer, tok, NULL) != 0)
        die("the template's metadata is malformed");
    free(buf);
    if (tok->n_vocab == 0 || tok->n_vocab > (1u << 24))
        die("the template has no tokenizer.ggml.tokens");
}

/* ---- random data ---- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct {
    uint64_t s[4];
} rng_t;

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next(rng_t *r) /* xoshiro256+ */
{
    uint64_t *s = r->s, res = s[0] + s[3], t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

static void rng_init(rng_t *r, uint64_t seed, uint64_t stream)
{
    uint64_t s = seed * 0x2545f4914f6cdd1dull ^ stream;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&s);
}

/* uniform in [-a, a) */
static float unif(uint32_t bits, float a)
{
    return ((float)(bits >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * a;
}

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    int32_t he = (int32_t)e - 127 + 15;
    if (he >= 31) return (uint16_t)(sign | 0x7c00);
    if (he <= 0) { /* subnormal or zero */
        if (he < -10) return (uint16_t)sign;
        m |= 0x800000;
        uint32_t shift = (uint32_t)(14 - he);
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t hm = m >> 13, rem = m & 0x1fff;
    uint32_t h = sign | ((uint32_t)he << 10) | hm;
    if (rem > 0x1000 || (rem == 0x1000 && (hm & 1)))
        h++; /* may carry into the exponent: still correct */
    return (uint16_t)h;
}

#define AMP 0.02f
#define REPLY_EMBD 1.0f /* vs |random row| ~ AMP * sqrt(dim / 3) */
#define REPLY_OUT 4.0f  /* logit ~ REPLY_OUT * sqrt(dim): far above every other token's */
#define REPLY_MAX 32

/* Fill n bytes of tensor data, continuing at element offset (in blocks for quantized types). */
static size_t fill(uint8_t *buf, size_t cap, const synth_tensor_t *t, rng_t *r)
{
    size_t n = 0;
    switch (t->type) {
    case GGML_T_F32:
        for (; n + 8 <= cap; n += 8) {
            uint64_t v = next(r);
            float f[2] = {t->norm ? 1.0f : unif((uint32_t)v, AMP),
                          t->norm ? 1.0f : unif((uint32_t)(v >> 32), AMP)};
            memcpy(buf + n, f, 8);
        }
        break;
    case GGML_T_F16:
        for (; n + 8 <= cap; n += 8) {
            uint64_t v = next(r);
            uint16_t h[4];
            for (int i = 0; i < 4; i++)
                h[i] = f32_to_f16(unif((uint32_t)(v >> (16 * i)) << 16, AMP));
            memcpy(buf + n, h, 8);
        }
        break;
    case GGML_T_Q8_0: /* f16 scale, 32 x int8 */
        for (; n + 34 <= cap; n += 34) {
            uint16_t d = f32_to_f16(AMP / 127.0f);
            memcpy(buf + n, &d, 2);
            for (int i = 0; i < 32; i += 8) {
                uint64_t v = next(r);
                for (int k = 0; k < 8; k++)
                    buf[n + 2 + (size_t)i + (size_t)k] =
                        (uint8_t)((int)((v >> (8 * k)) % 255) - 127);
            }
        }
        break;
    case GGML_T_Q4_0: /* f16 scale, 32 x 4-bit (value = (q - 8) * d) */
        for (; n + 18 <= cap; n += 18) {
            uint16_t d = f32_to_f16(AMP / 8.0f);
            memcpy(buf + n, &d, 2);
            uint64_t v[2] = {next(r), next(r)};
            memcpy(buf + n + 2, v, 16);
        }
        break;
    default:
        die("unsupported tensor type");
    }
    return n;
}

static uint32_t parse_u32(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s || v > UINT32_MAX || s[0] == '-') {
        fprintf(stderr, "mesh-gguf-synth: bad %s: %s\n", what, s);
        exit(2);
    }
    return (uint32_t)v;
}

/* Overwrite element (row, col) of F32 tensor t (ne0 columns) in the written file. */
static void patch_f32(FILE *f, uint64_t data_off, const synth_tensor_t *t, uint64_t row,
                      uint64_t col, float v)
{
    if (t->type != GGML_T_F32 || row >= t->ne[1] || col >= t->ne[0]) die("bad reply patch");
    if (fseeko(f, (off_t)(data_off + t->offset + (row * t->ne[0] + col) * 4), SEEK_SET) != 0 ||
        fwrite(&v, 4, 1, f) != 1)
        die("write failed");
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: mesh-gguf-synth --template T.gguf --out X.gguf --dim N --ffn N --layers N\n"
        "       [--heads N] [--kv-heads N] [--ctx N] [--seed N] [--embd-type f32|f16|q8_0|q4_0]\n"
        "       [--tied] [--name NAME] [--chat-template FILE] [--reply ID,ID,...]\n"
        "       mesh-gguf-synth --mmproj --out P.gguf --dim TEXT_DIM [--vdim 32] [--ffn N]\n"
        "       [--layers 2] [--heads N] [--image-size 56] [--patch-size 14] [--seed N]\n");
    exit(2);
}

static void add_nd(synth_tensor_t *v, size_t *n, const char *name, uint32_t type, uint32_t n_dims,
                   const uint64_t ne[GGUF_MAX_DIMS], int norm)
{
    if (*n >= MAX_TENSORS) die("too many tensors");
    synth_tensor_t *t = &v[(*n)++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->norm = norm;
    if (gguf_tensor_nbytes(type, t->ne, &t->size)) die("bad tensor shape for its type");
}

static void add(synth_tensor_t *v, size_t *n, const char *name, uint32_t type, uint64_t ne0,
                uint64_t ne1, int norm)
{
    uint64_t ne[GGUF_MAX_DIMS] = {ne0, ne1 ? ne1 : 1, 1, 1};
    add_nd(v, n, name, type, ne1 ? 2 : 1, ne, norm);
}

/* Write outp: the header (n_kv metadata pairs already encoded in kvs, then the tensor infos) and
 * every tensor's data from its own seeded stream. Returns the header's length (where the data
 * starts). */
static uint64_t write_gguf(const char *outp, const out_t *kvs, uint64_t n_kv, synth_tensor_t *ts,
                           size_t nt, uint32_t seed)
{
    out_t h = {0};
    emit(&h, "GGUF", 4);
    emit_u32(&h, 3);
    emit_u64(&h, nt);
    emit_u64(&h, n_kv);
    emit(&h, kvs->p, kvs->len);
    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        synth_tensor_t *t = &ts[i];
        t->offset = off;
        emit_str(&h, t->name);
        emit_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            emit_u64(&h, t->ne[d]);
        emit_u32(&h, t->type);
        emit_u64(&h, t->offset);
        off += (t->size + ALIGN - 1) / ALIGN * ALIGN;
    }
    static const uint8_t zeros[ALIGN];
    emit(&h, zeros, (ALIGN - h.len % ALIGN) % ALIGN);

    FILE *f = fopen(outp, "wb");
    if (!f) die("cannot create the output file");
    if (fwrite(h.p, 1, h.len, f) != h.len) die("write failed");
    size_t cap = 4u << 20;
    cap -= cap % (8 * 34 * 18); /* a whole number of elements for every type */
    uint8_t *buf = malloc(cap);
    if (!buf) die("out of memory");
    for (size_t i = 0; i < nt; i++) {
        synth_tensor_t *t = &ts[i];
        rng_t r;
        rng_init(&r, seed, i + 1);
        uint64_t left = t->size;
        while (left) {
            size_t want = left < cap ? (size_t)left : cap;
            size_t got = fill(buf, want, t, &r);
            if (got != want) die("internal error: tensor size not a whole number of elements");
            if (fwrite(buf, 1, got, f) != got) die("write failed");
            left -= got;
        }
        size_t pad = (size_t)((ALIGN - t->size % ALIGN) % ALIGN);
        if (pad && fwrite(zeros, 1, pad, f) != pad) die("write failed");
    }
    if (fclose(f) != 0) die("write failed");
    free(buf);
    uint64_t len = h.len;
    free(h.p);
    return len;
}

/* --mmproj: a LLaVA-style vision projector (llama.cpp's tools/mtmd/clip.cpp, projector type
 * "mlp") for a text model of embedding size dim: a CLIP ViT of vision width vdim over
 * image_size² pixels in patch² patches (conv patch embedding, learned positions, `layers`
 * pre-norm blocks with biased attention and a GELU FFN of width ffn), then mm.0 (vdim -> dim),
 * GELU, mm.2 (dim -> dim). An image becomes (image_size / patch)² embeddings of size dim, which
 * llama.cpp checks against the text model's. clip.cpp's llava graph runs the first layers - 1
 * blocks (it takes the second-to-last layer's output), so layers >= 2 evaluates at least one. */
static void write_mmproj(const char *outp, const char *name, uint32_t dim, uint32_t vdim,
                         uint32_t ffn, uint32_t layers, uint32_t heads, uint32_t image_size,
                         uint32_t patch, uint32_t seed)
{
    if (!heads) heads = vdim % 16 == 0 ? vdim / 16 : 1;
    if (!patch || image_size % patch || image_size / patch > 64 || vdim % heads || dim > 65536 ||
        vdim > 4096 || ffn > 16384 || layers > 64)
        die("--mmproj: inconsistent shape (image size a multiple of the patch, vdim % heads, "
            "limits)");
    uint64_t n_pos = (uint64_t)(image_size / patch) * (image_size / patch);
    static synth_tensor_t ts[MAX_TENSORS];
    size_t nt = 0;
    char n[GGUF_NAME_MAX];
    uint64_t patch_ne[GGUF_MAX_DIMS] = {patch, patch, 3, vdim};
    add_nd(ts, &nt, "v.patch_embd.weight", GGML_T_F32, 4, patch_ne, 0);
    add(ts, &nt, "v.patch_embd.bias", GGML_T_F32, vdim, 0, 0);
    add(ts, &nt, "v.position_embd.weight", GGML_T_F32, vdim, n_pos, 0);
    for (uint32_t l = 0; l < layers; l++) {
#define T(suffix, ne0, ne1, norm)                                                                  \
    snprintf(n, sizeof n, "v.blk.%u." suffix, l);                                                  \
    add(ts, &nt, n, GGML_T_F32, ne0, ne1, norm)
        T("ln1.weight", vdim, 0, 1);
        T("ln1.bias", vdim, 0, 0);
        T("attn_q.weight", vdim, vdim, 0);
        T("attn_q.bias", vdim, 0, 0);
        T("attn_k.weight", vdim, vdim, 0);
        T("attn_k.bias", vdim, 0, 0);
        T("attn_v.weight", vdim, vdim, 0);
        T("attn_v.bias", vdim, 0, 0);
        T("attn_out.weight", vdim, vdim, 0);
        T("attn_out.bias", vdim, 0, 0);
        T("ln2.weight", vdim, 0, 1);
        T("ln2.bias", vdim, 0, 0);
        T("ffn_up.weight", vdim, ffn, 0);
        T("ffn_up.bias", ffn, 0, 0);
        T("ffn_down.weight", ffn, vdim, 0);
        T("ffn_down.bias", vdim, 0, 0);
#undef T
    }
    add(ts, &nt, "mm.0.weight", GGML_T_F32, vdim, dim, 0);
    add(ts, &nt, "mm.0.bias", GGML_T_F32, dim, 0, 0);
    add(ts, &nt, "mm.2.weight", GGML_T_F32, dim, dim, 0);
    add(ts, &nt, "mm.2.bias", GGML_T_F32, dim, 0, 0);

    static const float mean[3] = {0.5f, 0.5f, 0.5f}, stdv[3] = {0.5f, 0.5f, 0.5f};
    out_t kv = {0};
    kv_str(&kv, "general.architecture", "clip");
    kv_str(&kv, "general.name", name ? name : "mesh-synth-mmproj");
    kv_str(&kv, "clip.projector_type", "mlp");
    kv_bool(&kv, "clip.has_vision_encoder", true);
    kv_bool(&kv, "clip.use_gelu", true);
    kv_u32(&kv, "clip.vision.image_size", image_size);
    kv_u32(&kv, "clip.vision.patch_size", patch);
    kv_u32(&kv, "clip.vision.embedding_length", vdim);
    kv_u32(&kv, "clip.vision.feed_forward_length", ffn);
    kv_u32(&kv, "clip.vision.block_count", layers);
    kv_u32(&kv, "clip.vision.attention.head_count", heads);
    kv_u32(&kv, "clip.vision.projection_dim", dim);
    kv_f32(&kv, "clip.vision.attention.layer_norm_epsilon", 1e-5f);
    kv_f32_arr(&kv, "clip.vision.image_mean", mean, 3);
    kv_f32_arr(&kv, "clip.vision.image_std", stdv, 3);
    write_gguf(outp, &kv, kv.n_kv, ts, nt, seed);
    free(kv.p);
    struct stat st;
    if (stat(outp, &st) == 0)
        fprintf(stderr,
                "mesh-gguf-synth: %s: vision projector, %zu tensors, %" PRIu64
                " image tokens of %u, %lld bytes\n",
                outp, nt, n_pos, dim, (long long)st.st_size);
}

int main(int argc, char **argv)
{
    const char *tmpl = NULL, *outp = NULL, *name = NULL, *chat_tmpl = NULL;
    uint32_t dim = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, ctx = 512, seed = 1;
    uint32_t embd_type = GGML_T_F32;
    uint32_t vdim = 32, image_size = 56, patch = 14;
    bool tied = false, mmproj = false;
    uint32_t reply[REPLY_MAX];
    size_t n_reply = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--tied") == 0 || strcmp(a, "--mmproj") == 0) {
            *(a[2] == 't' ? &tied : &mmproj) = true;
            continue;
        }
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (strcmp(a, "--template") == 0)
            tmpl = v;
        else if (strcmp(a, "--out") == 0)
            outp = v;
        else if (strcmp(a, "--name") == 0)
            name = v;
        else if (strcmp(a, "--chat-template") == 0)
            chat_tmpl = v;
        else if (strcmp(a, "--reply") == 0) {
            char list[512], *save = NULL;
            snprintf(list, sizeof list, "%s", v);
            for (char *w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
                if (n_reply == REPLY_MAX) die("--reply: at most 32 tokens");
                reply[n_reply++] = parse_u32(w, a);
            }
        } else if (strcmp(a, "--dim") == 0)
            dim = parse_u32(v, a);
        else if (strcmp(a, "--ffn") == 0)
            ffn = parse_u32(v, a);
        else if (strcmp(a, "--layers") == 0)
            layers = parse_u32(v, a);
        else if (strcmp(a, "--heads") == 0)
            heads = parse_u32(v, a);
        else if (strcmp(a, "--kv-heads") == 0)
            kv_heads = parse_u32(v, a);
        else if (strcmp(a, "--ctx") == 0)
            ctx = parse_u32(v, a);
        else if (strcmp(a, "--vdim") == 0)
            vdim = parse_u32(v, a);
        else if (strcmp(a, "--image-size") == 0)
            image_size = parse_u32(v, a);
        else if (strcmp(a, "--patch-size") == 0)
            patch = parse_u32(v, a);
        else if (strcmp(a, "--seed") == 0)
            seed = parse_u32(v, a);
        else if (strcmp(a, "--embd-type") == 0) {
            if (strcmp(v, "f32") == 0)
                embd_type = GGML_T_F32;
            else if (strcmp(v, "f16") == 0)
                embd_type = GGML_T_F16;
            else if (strcmp(v, "q8_0") == 0)
                embd_type = GGML_T_Q8_0;
            else if (strcmp(v, "q4_0") == 0)
                embd_type = GGML_T_Q4_0;
            else
                usage();
        } else
            usage();
    }
    if (mmproj) {
        if (!outp || !dim || !vdim || tmpl) usage();
        write_mmproj(outp, name, dim, vdim, ffn ? ffn : 4 * vdim, layers ? layers : 2, heads,
                     image_size, patch, seed);
        return 0;
    }
    if (!tmpl || !outp || !dim || !ffn || !layers) usage();
    if (!heads) heads = dim % 128 == 0 ? dim / 128 : 1;
    if (!kv_heads) kv_heads = heads;
    if (dim % heads || heads % kv_heads || (dim / heads) % 2 || dim > (1u << 16) ||
        ffn > (1u << 18) || layers > 256 || ctx == 0)
        die("inconsistent shape: dim % heads, heads % kv_heads, even head size, limits");
    if (embd_type != GGML_T_F32 && dim % 32) die("a quantized --embd-type needs dim % 32 == 0");
    uint32_t head_dim = dim / heads, kv_dim = head_dim * kv_heads;
    if (n_reply && (tied || embd_type != GGML_T_F32 || n_reply + 1 > dim))
        die("--reply needs --embd-type f32, no --tied and dim > the reply's length");

    tok_t tok = {.own_chat_template = chat_tmpl != NULL};
    read_template(tmpl, &tok);
    char *chat_text = NULL;
    if (chat_tmpl) {
        FILE *cf = fopen(chat_tmpl, "rb");
        if (!cf) die("cannot open the chat template");
        chat_text = calloc(1, 1u << 20);
        if (!chat_text) die("out of memory");
        size_t cn = fread(chat_text, 1, (1u << 20) - 1, cf);
        if (!feof(cf) || cn == 0) die("the chat template is empty or larger than 1 MiB");
        fclose(cf);
    }

    static synth_tensor_t ts[MAX_TENSORS];
    size_t nt = 0;
    add(ts, &nt, "token_embd.weight", embd_type, dim, tok.n_vocab, 0);
    add(ts, &nt, "output_norm.weight", GGML_T_F32, dim, 0, 1);
    if (!tied) add(ts, &nt, "output.weight", embd_type, dim, tok.n_vocab, 0);
    for (uint32_t l = 0; l < layers; l++) {
        char n[GGUF_NAME_MAX];
#define T(suffix, ne0, ne1, norm)                                                                  \
    snprintf(n, sizeof n, "blk.%u." suffix, l);                                                    \
    add(ts, &nt, n, GGML_T_F32, ne0, ne1, norm)
        T("attn_norm.weight", dim, 0, 1);
        T("attn_q.weight", dim, dim, 0);
        T("attn_k.weight", dim, kv_dim, 0);
        T("attn_v.weight", dim, kv_dim, 0);
        T("attn_output.weight", dim, dim, 0);
        T("ffn_norm.weight", dim, 0, 1);
        T("ffn_gate.weight", dim, ffn, 0);
        T("ffn_down.weight", ffn, dim, 0);
        T("ffn_up.weight", dim, ffn, 0);
#undef T
    }

    out_t kv = {0};
    char gname[128];
    snprintf(gname, sizeof gname, "%s", name ? name : "mesh-synth");
    kv_str(&kv, "general.architecture", "llama");
    kv_str(&kv, "general.name", gname);
    kv_u32(&kv, "llama.context_length", ctx);
    kv_u32(&kv, "llama.embedding_length", dim);
    kv_u32(&kv, "llama.feed_forward_length", ffn);
    kv_u32(&kv, "llama.block_count", layers);
    kv_u32(&kv, "llama.attention.head_count", heads);
    kv_u32(&kv, "llama.attention.head_count_kv", kv_heads);
    kv_u32(&kv, "llama.rope.dimension_count", head_dim);
    kv_f32(&kv, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_u32(&kv, "llama.vocab_size", (uint32_t)tok.n_vocab);
    emit(&kv, tok.kvs.p, tok.kvs.len);
    if (chat_text) kv_str(&kv, "tokenizer.chat_template", chat_text);
    free(chat_text);
    uint64_t data_off = write_gguf(outp, &kv, kv.n_kv + tok.n_kv, ts, nt, seed);
    free(kv.p);
    uint64_t big = 0, total = 0;
    for (size_t i = 0; i < nt; i++) {
        total += ts[i].size;
        if (ts[i].size > 10u * 1024 * 1024) big += ts[i].size;
    }
    if (n_reply) {
        /* tensors 0 and 2: token_embd and output (see add() above) */
        if (!tok.has_eos) die("--reply: the template has no tokenizer.ggml.eos_token_id");
        for (size_t k = 0; k < n_reply; k++)
            if (reply[k] >= tok.n_vocab || reply[k] == tok.eos) die("--reply: bad token id");
        FILE *f = fopen(outp, "r+b");
        if (!f) die("cannot reopen the output file");
        for (uint64_t id = 0; id < tok.n_vocab; id++) {
            size_t k = 0;
            while (k < n_reply && reply[k] != id)
                k++;
            patch_f32(f, data_off, &ts[0], id, k < n_reply ? k + 1 : 0, REPLY_EMBD);
        }
        for (size_t k = 0; k < n_reply; k++)
            patch_f32(f, data_off, &ts[2], reply[k], k, REPLY_OUT);
        patch_f32(f, data_off, &ts[2], tok.eos, n_reply, REPLY_OUT);
        if (fclose(f) != 0) die("write failed");
    }
    free(tok.kvs.p);
    struct stat st;
    if (stat(outp, &st) == 0)
        fprintf(stderr,
                "mesh-gguf-synth: %s: %zu tensors, vocab %" PRIu64 ", %lld bytes; %.3f%% of the "
                "tensor bytes (%.3f%% of the file) in tensors > 10 MiB\n",
                outp, nt, tok.n_vocab, (long long)st.st_size, 100.0 * (double)big / (double)total,
                100.0 * (double)big / (double)st.st_size);
    return 0;
}

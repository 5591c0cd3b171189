#include "llama_args.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define FLAG_MAX 64
#define VALUE_MAX 32768

typedef enum {
    V_NONE = 0, /* a switch: no value */
    V_INT,      /* std::stoi in llama.cpp: a 32-bit integer */
    V_FLOAT,    /* std::stof: a finite decimal number */
    V_SEED,     /* std::stoul into a uint32: -1 (random) .. 4294967295 */
    V_LAYERS,   /* -ngl: an integer, "auto" or "all" */
    V_CHOICE,   /* one of choices */
    V_TEXT,     /* free text that is not a path (sampler lists, grammars, templates) */
} vkind_t;

typedef struct {
    const char *names[5];
    vkind_t kind;
    const char *const *choices;
} spec_t;

static const char *const ON_OFF_AUTO[] = {"on",    "off", "auto", "enabled", "disabled", "true",
                                          "false", "1",   "0",    "-1",      NULL};
static const char *const ON_OFF[] = {"on",    "off", "enabled", "disabled", "true",
                                     "false", "1",   "0",       NULL};
static const char *const CACHE_TYPES[] = {"f32",  "f16",    "bf16", "q8_0", "q4_0",
                                          "q4_1", "iq4_nl", "q5_0", "q5_1", NULL};
static const char *const ROPE_SCALING[] = {"none", "linear", "yarn", NULL};
static const char *const LOAD_MODES[] = {"auto",       "none", "mmap", "mlock",
                                         "mmap+mlock", "dio",  NULL};
static const char *const LAZY_MODES[] = {"on", "auto", "off", NULL};
static const char *const NUMA[] = {"distribute", "isolate", "numactl", NULL};
static const char *const REASONING_FORMATS[] = {"none", "auto", "deepseek", "deepseek-legacy",
                                                NULL};

/* What a client may set. Names and arities from llama.cpp's common/arg.cpp. */
static const spec_t ALLOWED[] = {
    /* context, batching, slots, KV cache */
    {{"-c", "--ctx-size"}, V_INT, NULL},
    {{"-n", "--predict", "--n-predict"}, V_INT, NULL},
    {{"-b", "--batch-size"}, V_INT, NULL},
    {{"-ub", "--ubatch-size"}, V_INT, NULL},
    {{"--keep"}, V_INT, NULL},
    {{"--swa-full"}, V_NONE, NULL},
    {{"-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"}, V_INT, NULL},
    {{"-cram", "--cache-ram"}, V_INT, NULL},
    {{"-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"}, V_NONE, NULL},
    {{"--cache-idle-slots", "--no-cache-idle-slots"}, V_NONE, NULL},
    {{"--context-shift", "--no-context-shift"}, V_NONE, NULL},
    {{"--cache-prompt", "--no-cache-prompt"}, V_NONE, NULL},
    {{"--cache-reuse"}, V_INT, NULL},
    {{"-np", "--parallel"}, V_INT, NULL},
    {{"-cb", "--cont-batching", "-nocb", "--no-cont-batching"}, V_NONE, NULL},
    {{"-ctk", "--cache-type-k"}, V_CHOICE, CACHE_TYPES},
    {{"-ctv", "--cache-type-v"}, V_CHOICE, CACHE_TYPES},
    {{"-dt", "--defrag-thold"}, V_FLOAT, NULL},
    {{"-fa", "--flash-attn"}, V_CHOICE, ON_OFF_AUTO},
    /* threads */
    {{"-t", "--threads"}, V_INT, NULL},
    {{"-tb", "--threads-batch"}, V_INT, NULL},
    {{"--threads-http"}, V_INT, NULL},
    /* devices and memory */
    {{"-ngl", "--gpu-layers", "--n-gpu-layers"}, V_LAYERS, NULL},
    {{"-kvo", "--kv-offload", "-nkvo", "--no-kv-offload"}, V_NONE, NULL},
    {{"--repack", "-nr", "--no-repack"}, V_NONE, NULL},
    {{"--no-host"}, V_NONE, NULL},
    {{"--op-offload", "--no-op-offload"}, V_NONE, NULL},
    {{"-cmoe", "--cpu-moe"}, V_NONE, NULL},
    {{"-ncmoe", "--n-cpu-moe"}, V_INT, NULL},
    {{"-lm", "--load-mode"}, V_CHOICE, LOAD_MODES},
    {{"-lzm", "--lazy-mode"}, V_CHOICE, LAZY_MODES},
    {{"--numa"}, V_CHOICE, NUMA},
    {{"-fit", "--fit"}, V_CHOICE, ON_OFF},
    {{"-fitc", "--fit-ctx"}, V_INT, NULL},
    {{"--check-tensors"}, V_NONE, NULL},
    {{"--warmup", "--no-warmup"}, V_NONE, NULL},
    /* sampling defaults */
    {{"-s", "--seed"}, V_SEED, NULL},
    {{"--samplers"}, V_TEXT, NULL},
    {{"--sampler-seq", "--sampling-seq"}, V_TEXT, NULL},
    {{"--ignore-eos"}, V_NONE, NULL},
    {{"--temp", "--temperature"}, V_FLOAT, NULL},
    {{"--top-k"}, V_INT, NULL},
    {{"--top-p"}, V_FLOAT, NULL},
    {{"--min-p"}, V_FLOAT, NULL},
    {{"--top-nsigma", "--top-n-sigma"}, V_FLOAT, NULL},
    {{"--xtc-probability"}, V_FLOAT, NULL},
    {{"--xtc-threshold"}, V_FLOAT, NULL},
    {{"--typical", "--typical-p"}, V_FLOAT, NULL},
    {{"--repeat-last-n"}, V_INT, NULL},
    {{"--repeat-penalty"}, V_FLOAT, NULL},
    {{"--presence-penalty"}, V_FLOAT, NULL},
    {{"--frequency-penalty"}, V_FLOAT, NULL},
    {{"--dry-multiplier"}, V_FLOAT, NULL},
    {{"--dry-base"}, V_FLOAT, NULL},
    {{"--dry-allowed-length"}, V_INT, NULL},
    {{"--dry-penalty-last-n"}, V_INT, NULL},
    {{"--dry-sequence-breaker"}, V_TEXT, NULL},
    {{"--adaptive-target"}, V_FLOAT, NULL},
    {{"--adaptive-decay"}, V_FLOAT, NULL},
    {{"--dynatemp-range"}, V_FLOAT, NULL},
    {{"--dynatemp-exp"}, V_FLOAT, NULL},
    {{"--mirostat"}, V_INT, NULL},
    {{"--mirostat-lr"}, V_FLOAT, NULL},
    {{"--mirostat-ent"}, V_FLOAT, NULL},
    {{"-l", "--logit-bias"}, V_TEXT, NULL},
    {{"--grammar"}, V_TEXT, NULL},
    {{"-j", "--json-schema"}, V_TEXT, NULL},
    {{"-bs", "--backend-sampling"}, V_NONE, NULL},
    /* speculative decoding with the node's draft model (--draft): how many tokens to draft */
    {{"--spec-draft-n-max"}, V_INT, NULL},
    {{"--spec-draft-n-min"}, V_INT, NULL},
    {{"--spec-draft-p-min", "--draft-p-min"}, V_FLOAT, NULL},
    /* rope / yarn */
    {{"--rope-scaling"}, V_CHOICE, ROPE_SCALING},
    {{"--rope-scale"}, V_FLOAT, NULL},
    {{"--rope-freq-base"}, V_FLOAT, NULL},
    {{"--rope-freq-scale"}, V_FLOAT, NULL},
    {{"--yarn-orig-ctx"}, V_INT, NULL},
    {{"--yarn-ext-factor"}, V_FLOAT, NULL},
    {{"--yarn-attn-factor"}, V_FLOAT, NULL},
    {{"--yarn-beta-slow"}, V_FLOAT, NULL},
    {{"--yarn-beta-fast"}, V_FLOAT, NULL},
    /* chat and server behaviour */
    {{"-r", "--reverse-prompt"}, V_TEXT, NULL},
    {{"-sp", "--special"}, V_NONE, NULL},
    {{"--spm-infill"}, V_NONE, NULL},
    {{"--jinja", "--no-jinja"}, V_NONE, NULL},
    {{"--chat-template"}, V_TEXT, NULL}, /* a built-in name or the template text itself */
    {{"--chat-template-kwargs"}, V_TEXT, NULL},
    {{"--reasoning-format"}, V_CHOICE, REASONING_FORMATS},
    {{"-rea", "--reasoning"}, V_CHOICE, ON_OFF_AUTO},
    {{"--reasoning-budget"}, V_INT, NULL},
    {{"--prefill-assistant", "--no-prefill-assistant"}, V_NONE, NULL},
    {{"-sps", "--slot-prompt-similarity"}, V_FLOAT, NULL},
    {{"-to", "--timeout"}, V_INT, NULL},
};

/* Flags the node sets itself: giving them would make it lose track of its child (wrong port,
 * another model, a key it does not send, TLS it does not speak, another URL layout). */
static const char *const MANAGED[] = {
    "-m",
    "--model",
    "-mu",
    "--model-url",
    "-hf",
    "-hfr",
    "--hf-repo",
    "-hff",
    "--hf-file",
    "-hft",
    "--hf-token",
    "-dr",
    "--docker-repo",
    "--host",
    "--port",
    "--reuse-port",
    "-a",
    "--alias",
    "--api-key",
    "--api-key-file",
    "--api-prefix",
    "--ssl-key-file",
    "--ssl-cert-file",
    "--models-dir",
    "--models-preset",
    "--models-max",
    "--models-autoload",
    "--no-models-autoload",
};

/* llama.cpp folds '_' into '-' in flags that start with "--". */
static void normalize(const char *word, size_t len, char out[FLAG_MAX])
{
    if (len >= FLAG_MAX) len = FLAG_MAX - 1;
    memcpy(out, word, len);
    out[len] = '\0';
    if (len > 2 && out[0] == '-' && out[1] == '-')
        for (size_t i = 2; i < len; i++)
            if (out[i] == '_') out[i] = '-';
}

/* The flag part of an argv word ("--temp=0.5" -> "--temp"), normalized. */
static void flag_of(const char *word, char out[FLAG_MAX], const char **inline_value)
{
    const char *eq = strchr(word, '=');
    normalize(word, eq ? (size_t)(eq - word) : strlen(word), out);
    if (inline_value) *inline_value = eq ? eq + 1 : NULL;
}

bool llama_args_is_managed(const char *word)
{
    char flag[FLAG_MAX];
    flag_of(word, flag, NULL);
    for (size_t i = 0; i < sizeof MANAGED / sizeof MANAGED[0]; i++)
        if (strcmp(flag, MANAGED[i]) == 0) return true;
    return false;
}

static const spec_t *lookup(const char *flag)
{
    for (size_t i = 0; i < sizeof ALLOWED / sizeof ALLOWED[0]; i++)
        for (size_t k = 0; k < 5 && ALLOWED[i].names[k]; k++)
            if (strcmp(flag, ALLOWED[i].names[k]) == 0) return &ALLOWED[i];
    return NULL;
}

bool llama_args_sets(const char *args, const char *flag)
{
    char f[FLAG_MAX];
    flag_of(flag, f, NULL);
    const spec_t *want = lookup(f);
    char **av;
    if (!args || !want || argv_split(args, &av) < 0) return false;
    bool found = false;
    for (size_t i = 0; av[i] && !found; i++) {
        flag_of(av[i], f, NULL);
        found = lookup(f) == want;
    }
    argv_free(av);
    return found;
}

static bool parse_long(const char *s, long long lo, long long hi)
{
    if (!*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return errno == 0 && *end == '\0' && v >= lo && v <= hi;
}

static bool parse_float(const char *s)
{
    if (!*s) return false;
    /* decimal only: strtod would also take "inf", "nan" and hex floats */
    for (const char *p = s; *p; p++)
        if (!strchr("0123456789+-.eE", *p)) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    return errno == 0 && *end == '\0' && isfinite(v);
}

static bool valid_value(const spec_t *sp, const char *v, const char **expect)
{
    switch (sp->kind) {
    case V_INT:
        *expect = "an integer";
        return parse_long(v, INT_MIN, INT_MAX);
    case V_FLOAT:
        *expect = "a number";
        return parse_float(v);
    case V_SEED:
        *expect = "an integer from -1 to 4294967295";
        return parse_long(v, -1, UINT32_MAX);
    case V_LAYERS:
        *expect = "an integer, 'auto' or 'all'";
        return strcmp(v, "auto") == 0 || strcmp(v, "all") == 0 || parse_long(v, INT_MIN, INT_MAX);
    case V_CHOICE:
        *expect = NULL;
        for (const char *const *c = sp->choices; *c; c++)
            if (strcmp(v, *c) == 0) return true;
        return false;
    case V_TEXT:
        *expect = "text without control characters";
        for (const unsigned char *p = (const unsigned char *)v; *p; p++)
            if (*p < 0x20 && *p != '\n' && *p != '\t') return false;
        return strlen(v) <= VALUE_MAX;
    default:
        return true;
    }
}

/* Bounds of the numbers that decide memory (or threads): a client gives nothing beyond. */
typedef struct {
    const char *flag; /* the canonical (first) name of its spec */
    long long lo, hi;
} bound_t;

static const bound_t BOUNDS[] = {
    {"-c", 0, 1 << 24},
    {"-b", 1, 8192},
    {"-ub", 1, 8192},
    {"-np", -1, 64},
    {"-cram", 0, 8192},
    {"-ctxcp", 0, 64},
    {"--spec-draft-n-max", 0, 64},
    {"--spec-draft-n-min", 0, 64},
    {"-t", -1, 1024},
    {"-tb", -1, 1024},
    {"--threads-http", -1, 1024},
    {"-fitc", 0, 1 << 24},
    {"--cache-reuse", 0, 1 << 24},
    {"--keep", -1, 1 << 24},
};

static const bound_t *bound_of(const spec_t *sp)
{
    for (size_t i = 0; i < sizeof BOUNDS / sizeof BOUNDS[0]; i++)
        if (strcmp(sp->names[0], BOUNDS[i].flag) == 0) return &BOUNDS[i];
    return NULL;
}

/* bytes per 32 elements of a cache type (ggml's block sizes) */
static uint32_t cache_x32(const char *t)
{
    static const struct {
        const char *name;
        uint32_t x32;
    } T[] = {{"f32", 128}, {"f16", 64},    {"bf16", 64}, {"q8_0", 34}, {"q4_0", 18},
             {"q4_1", 20}, {"iq4_nl", 18}, {"q5_0", 22}, {"q5_1", 24}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (strcmp(t, T[i].name) == 0) return T[i].x32;
    return 64;
}

static uint32_t u32_of(const char *v)
{
    long long x = strtoll(v, NULL, 10);
    return x < 0 ? 0 : x > UINT32_MAX ? UINT32_MAX : (uint32_t)x;
}

void llama_args_memory(const char *args, llama_mem_t *m)
{
    char **av;
    if (!args || argv_split(args, &av) < 0) return;
    for (size_t i = 0; av[i]; i++) {
        char f[FLAG_MAX];
        const char *v;
        flag_of(av[i], f, &v);
        const spec_t *sp = lookup(f);
        if (!sp || sp->kind == V_NONE) continue;
        if (!v && !(v = av[++i])) break;
        const char *n = sp->names[0];
        if (strcmp(n, "-c") == 0) {
            m->has_ctx = true;
            m->ctx = u32_of(v);
        } else if (strcmp(n, "-np") == 0) {
            long long x = strtoll(v, NULL, 10);
            m->np = x > 0 && x <= 4096 ? (uint32_t)x : 0;
        } else if (strcmp(n, "-ctk") == 0) {
            m->k_x32 = cache_x32(v);
        } else if (strcmp(n, "-ctv") == 0) {
            m->v_x32 = cache_x32(v);
        } else if (strcmp(n, "-b") == 0) {
            m->batch = u32_of(v);
        } else if (strcmp(n, "-ub") == 0) {
            m->ubatch = u32_of(v);
        }
    }
    argv_free(av);
}

uint32_t llama_mem_ubatch(const llama_mem_t *m)
{
    uint32_t b = m->batch ? m->batch : 2048, ub = m->ubatch ? m->ubatch : 512;
    return ub < b ? ub : b;
}

static void describe_choices(const spec_t *sp, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    for (const char *const *c = sp->choices; *c && at < len; c++)
        at += (size_t)snprintf(out + at, len - at, "%s%s", at ? ", " : "", *c);
}

/* Append one word to b, quoted when argv_split would otherwise change it. */
static int emit(buf_t *b, const char *w)
{
    static const char plain_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789._,:+-/=@%^";
    bool plain = *w != '\0' && strspn(w, plain_chars) == strlen(w);
    int rc = b->len ? buf_append(b, " ", 1) : 0;
    if (rc || plain) return rc ? rc : buf_append(b, w, strlen(w));
    rc = buf_append(b, "\"", 1);
    for (const char *p = w; *p && !rc; p++) {
        if (*p == '"' || *p == '\\') rc = buf_append(b, "\\", 1);
        if (!rc) rc = buf_append(b, p, 1);
    }
    return rc ? rc : buf_append(b, "\"", 1);
}

static int check_client(char **av, buf_t *out, char *err, size_t errlen)
{
    for (size_t i = 0; av[i]; i++) {
        const char *word = av[i];
        if (word[0] != '-' || word[1] == '\0') {
            snprintf(err, errlen, "llamacpp_args: unexpected '%.64s' (not a flag)", word);
            return -EINVAL;
        }
        char flag[FLAG_MAX];
        const char *value;
        flag_of(word, flag, &value);
        const spec_t *sp = lookup(flag);
        if (!sp) {
            if (llama_args_is_managed(flag))
                snprintf(err, errlen, "llamacpp_args may not set %s: the node manages it", flag);
            else
                snprintf(err, errlen,
                         "llamacpp_args may not set %s: a request may only tune the model "
                         "(context, batch, threads, slots, cache types, flash attention, GPU "
                         "layers, sampling, rope/yarn, load mode)",
                         flag);
            return -EPERM;
        }
        int rc = emit(out, flag);
        if (rc) return rc;
        if (sp->kind == V_NONE) {
            if (value) {
                snprintf(err, errlen, "llamacpp_args: %s takes no value", flag);
                return -EINVAL;
            }
            continue;
        }
        if (!value) {
            value = av[i + 1];
            if (!value) {
                snprintf(err, errlen, "llamacpp_args: %s needs a value", flag);
                return -EINVAL;
            }
            i++;
        }
        const char *expect = NULL;
        const bound_t *bd = bound_of(sp);
        if (bd && valid_value(sp, value, &expect) && !parse_long(value, bd->lo, bd->hi)) {
            snprintf(err, errlen,
                     "llamacpp_args: %s takes %lld to %lld here (it decides the memory or "
                     "threads a load takes), got '%.64s'",
                     flag, bd->lo, bd->hi, value);
            return -EINVAL;
        }
        if (!valid_value(sp, value, &expect)) {
            char choices[256];
            if (!expect) describe_choices(sp, choices, sizeof choices);
            snprintf(err, errlen, "llamacpp_args: %s needs %s%s, got '%.64s'", flag,
                     expect ? expect : "one of ", expect ? "" : choices, value);
            return -EINVAL;
        }
        rc = emit(out, value);
        if (rc) return rc;
    }
    return 0;
}

int llama_args_check(const char *args, llama_args_trust_t trust, char **canon, char *err,
                     size_t errlen)
{
    const char *who = trust == LLAMA_ARGS_CLIENT ? "llamacpp_args" : "--llamacpp-args";
    if (canon) *canon = NULL;
    if (strlen(args) > LLAMA_ARGS_MAX) {
        snprintf(err, errlen, "%s is longer than %d bytes", who, LLAMA_ARGS_MAX);
        return -E2BIG;
    }
    char **av;
    if (argv_split(args, &av) < 0) {
        snprintf(err, errlen, "%s: unbalanced quotes", who);
        return -EINVAL;
    }
    int rc = 0;
    if (trust == LLAMA_ARGS_OPERATOR) {
        for (size_t i = 0; av[i] && !rc; i++) {
            if (llama_args_is_managed(av[i])) {
                char flag[FLAG_MAX];
                flag_of(av[i], flag, NULL);
                snprintf(err, errlen, "--llamacpp-args may not set %s: the node manages it", flag);
                rc = -EPERM;
            }
        }
        if (!rc && canon && !(*canon = strdup(args))) rc = -ENOMEM;
    } else {
        buf_t b;
        buf_init(&b, LLAMA_ARGS_MAX * 2 + 16);
        rc = check_client(av, &b, err, errlen);
        if (rc == -E2BIG) snprintf(err, errlen, "%s is too long", who);
        if (!rc && canon) {
            *canon = b.data ? b.data : strdup("");
            b.data = NULL;
            if (!*canon) rc = -ENOMEM;
        }
        buf_free(&b);
    }
    argv_free(av);
    return rc;
}

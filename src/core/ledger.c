/* ledger — see ledger.h. */
#include "ledger.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

void ledger_init(ledger_t *l, uint64_t offered)
{
    memset(l, 0, sizeof *l);
    l->offered = offered;
}

static ledger_entry_t *find(const ledger_t *l, const char *name, ledger_kind_t kind)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->e[i].kind == kind && strcmp(l->e[i].name, name) == 0)
            return (ledger_entry_t *)&l->e[i];
    return NULL;
}

const ledger_entry_t *ledger_get(const ledger_t *l, const char *name, ledger_kind_t kind)
{
    return name ? find(l, name, kind) : NULL;
}

int ledger_set(ledger_t *l, const char *name, ledger_kind_t kind, uint64_t bytes, bool loading)
{
    if (!name || !name[0] || strlen(name) >= LEDGER_NAME_MAX ||
        (kind != LEDGER_MODEL && kind != LEDGER_WORKER))
        return -EINVAL;
    ledger_entry_t *e = find(l, name, kind);
    if (!e) {
        if (l->n >= LEDGER_MAX) return -ENOSPC;
        e = &l->e[l->n++];
        snprintf(e->name, sizeof e->name, "%s", name);
        e->kind = kind;
    }
    e->bytes = bytes;
    e->loading = loading;
    return 0;
}

void ledger_clear(ledger_t *l, const char *name, ledger_kind_t kind)
{
    ledger_entry_t *e = name ? find(l, name, kind) : NULL;
    if (!e) return;
    *e = l->e[--l->n];
}

uint64_t ledger_held(const ledger_t *l)
{
    uint64_t s = 0;
    for (size_t i = 0; i < l->n; i++)
        s = sat_add(s, l->e[i].bytes);
    return s;
}

uint64_t ledger_held_kind(const ledger_t *l, ledger_kind_t kind)
{
    uint64_t s = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->e[i].kind == kind) s = sat_add(s, l->e[i].bytes);
    return s;
}

uint64_t ledger_held_for(const ledger_t *l, const char *name)
{
    uint64_t s = 0;
    for (size_t i = 0; name && i < l->n; i++)
        if (strcmp(l->e[i].name, name) == 0) s = sat_add(s, l->e[i].bytes);
    return s;
}

uint64_t ledger_free(const ledger_t *l)
{
    uint64_t h = ledger_held(l);
    return h >= l->offered ? 0 : l->offered - h;
}

uint64_t ledger_offer_for(const ledger_t *l, const char *name)
{
    uint64_t o = sat_add(ledger_free(l), ledger_held_for(l, name));
    return o > l->offered ? l->offered : o;
}

uint64_t ledger_kv_bytes(const ledger_shape_t *s, uint32_t n_ctx)
{
    return ledger_kv_bytes_as(s, n_ctx, 64, 64);
}

uint64_t ledger_kv_bytes_as(const ledger_shape_t *s, uint32_t n_ctx, uint32_t k_x32, uint32_t v_x32)
{
    if (!s->n_layers || !s->n_embd || !s->n_head || !n_ctx) return 0;
    uint64_t head_dim = s->n_embd / s->n_head;
    uint64_t kv_heads = s->n_head_kv ? s->n_head_kv : s->n_head;
    uint64_t k = s->key_length ? s->key_length : head_dim;
    uint64_t v = s->value_length ? s->value_length : head_dim;
    /* per token and layer: K and V rows of kv_heads × dim, x32 bytes per 32 elements */
    uint64_t x32 =
        sat_add(sat_mul(sat_mul(k, kv_heads), k_x32), sat_mul(sat_mul(v, kv_heads), v_x32));
    uint64_t all = sat_mul(sat_mul(x32, s->n_layers), n_ctx);
    return all / 32 + (all % 32 != 0);
}

uint64_t ledger_compute_bytes(const ledger_shape_t *s, uint32_t n_ctx, uint32_t ubatch)
{
    if (ubatch > n_ctx) ubatch = n_ctx; /* llama.cpp caps the batch at the context */
    if (ubatch <= LEDGER_UBATCH_DEFAULT || !s->n_head) return 0;
    /* the attention scores of one layer: n_ctx × ubatch × n_head F32 */
    return sat_mul(sat_mul(sat_mul(ubatch - LEDGER_UBATCH_DEFAULT, n_ctx), s->n_head), 4);
}

int ledger_gpu_layers(uint64_t need, uint32_t n_layers, uint64_t on_device)
{
    if (need <= on_device) return -1;
    if (n_layers == 0 || need == 0) return 0;
    /* n_layers x on_device / need, on_device < need: below n_layers, without overflow */
    uint64_t k = (uint64_t)((double)n_layers * ((double)on_device / (double)need));
    return k >= n_layers ? (int)n_layers - 1 : (int)k;
}

uint64_t ledger_need(uint64_t file_bytes, uint64_t kv_bytes)
{
    /* ceil(11 × s / 10) = s + ceil(s / 10) */
    uint64_t margin = file_bytes / 10 + (file_bytes % 10 != 0);
    uint64_t extra = kv_bytes > margin ? kv_bytes : margin;
    return sat_add(file_bytes, extra);
}

uint64_t ledger_host_bytes(uint64_t serve_bytes, uint64_t input_bytes, uint64_t output_bytes,
                           bool split_private)
{
    return sat_add(sat_add(serve_bytes, input_bytes), split_private ? output_bytes : 0);
}

const char *ledger_fmt(uint64_t b, char *buf, size_t len)
{
    if (b >= 1000000000ULL)
        snprintf(buf, len, "%.2f GB", (double)b / 1e9);
    else if (b >= 1000000ULL)
        snprintf(buf, len, "%.2f MB", (double)b / 1e6);
    else
        snprintf(buf, len, "%.1f kB", (double)b / 1e3);
    return buf;
}

/* election — see election.h for the rules. */
#include "election.h"

#include "layer_split.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;

uint64_t election_need_bytes(uint64_t model_bytes)
{
    /* ceil(11 × s / 10) = s + ceil(s / 10) */
    uint64_t extra = model_bytes / 10 + (model_bytes % 10 != 0);
    return model_bytes > UINT64_MAX - extra ? UINT64_MAX : model_bytes + extra;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static bool id_valid(const char *id)
{
    if (!id) return false;
    for (size_t i = 0; i < ELECTION_ID_LEN; i++) {
        char c = id[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return id[ELECTION_ID_LEN] == '\0';
}

/* Working copy of a node: index into the input and the RTT to the host once known. */
typedef struct {
    const election_node_t *n;
    size_t idx;
    int32_t rtt; /* to the host, -1 unknown */
    int32_t key; /* the worker order's RTT: rtt, less the hysteresis for a kept worker */
    bool kept;   /* a worker of the running split */
} cand_t;

static int cmp_id(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    return strcmp(x->n->id, y->n->id);
}

/* Its memory holds what only a split host holds (election.h, "Host bytes"). */
static bool can_host(const election_node_t *n)
{
    return n->vram_bytes >= n->host_bytes;
}

/* A node with the model's file first (llama-server runs on it: it needs the file), then larger
 * memory, then larger id: the replica order. */
static bool better_replica(const cand_t *x, const cand_t *y)
{
    if (x->n->no_file != y->n->no_file) return !x->n->no_file;
    if (x->n->vram_bytes != y->n->vram_bytes) return x->n->vram_bytes > y->n->vram_bytes;
    return strcmp(x->n->id, y->n->id) > 0;
}

/* The host order: the replica order, but among the nodes with the file one whose memory holds
 * its host bytes first. */
static bool better_host(const cand_t *x, const cand_t *y)
{
    if (x->n->no_file == y->n->no_file && can_host(x->n) != can_host(y->n)) return can_host(x->n);
    return better_replica(x, y);
}

static int cmp_replica_order(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    return better_replica(x, y) ? -1 : better_replica(y, x) ? 1 : 0;
}

/* RTT ascending (the key: with the hysteresis of kept workers), unknown last; then the
 * replica order. */
static int cmp_worker_order(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    bool xu = x->key < 0, yu = y->key < 0;
    if (xu != yu) return xu ? 1 : -1;
    if (!xu && x->key != y->key) return x->key < y->key ? -1 : 1;
    return cmp_replica_order(a, b);
}

static int32_t worker_key(int32_t rtt, bool kept)
{
    return rtt < 0 || !kept ? rtt : rtt - rtt / 2;
}

static bool is_kept(const election_input_t *in, const char *id)
{
    for (size_t i = 0; in->keep && i < in->n_keep; i++)
        if (in->keep[i] && strcmp(in->keep[i], id) == 0) return true;
    return false;
}

/* The largest RTT (matrix) from candidate x to the workers w[0..taken), unknown counted as
 * ELECTION_MAX_RTT_MS. */
static int32_t spread_to(const election_input_t *in, const cand_t *x, const cand_t *w, size_t taken)
{
    int32_t worst = 0;
    for (size_t k = 0; k < taken; k++) {
        int32_t r = in->rtt[x->idx * in->n_nodes + w[k].idx];
        if (r < 0) r = in->rtt[w[k].idx * in->n_nodes + x->idx];
        if (r < 0) r = ELECTION_MAX_RTT_MS;
        if (r > worst) worst = r;
    }
    return worst;
}

/* Among the candidates w[taken..nw) with the same key as w[taken] (contiguous: sorted), move the
 * one closest to the workers already taken to w[taken] (matrix only). */
static void pick_tight(const election_input_t *in, cand_t *w, size_t taken, size_t nw)
{
    if (!in->rtt || taken == 0) return;
    size_t best = taken;
    int32_t best_s = spread_to(in, &w[taken], w, taken);
    for (size_t i = taken + 1; i < nw && w[i].key == w[taken].key; i++) {
        int32_t s = spread_to(in, &w[i], w, taken);
        if (s < best_s) best = i, best_s = s;
    }
    if (best == taken) return;
    cand_t x = w[best];
    memmove(&w[taken + 1], &w[taken], (best - taken) * sizeof *w);
    w[taken] = x;
}

static int32_t rtt_to_host(const election_input_t *in, size_t host, size_t j)
{
    int32_t r;
    if (in->rtt) {
        r = in->rtt[host * in->n_nodes + j];
        if (r < 0) r = in->rtt[j * in->n_nodes + host];
    } else {
        r = in->nodes[j].rtt_ms;
    }
    return r < 0 ? -1 : r;
}

static void fill_member(election_member_t *m, const cand_t *c, election_role_t role)
{
    memset(m, 0, sizeof *m);
    memcpy(m->id, c->n->id, ELECTION_ID_LEN + 1);
    m->vram_bytes = c->n->vram_bytes;
    m->role = role;
    m->rtt_ms = role == ELECTION_WORKER ? c->rtt : 0;
    m->speed_mflops = c->n->speed_mflops;
}

/* The memory member j has for layers: its memory, less the host bytes on the host. */
static uint64_t layer_cap(const election_plan_t *p, size_t j)
{
    uint64_t v = p->members[j].vram_bytes;
    if (j != p->host_index) return v;
    return v > p->host_bytes ? v - p->host_bytes : 0;
}

/* ceil(a × b / c) for b <= c (so at most a); 0 when c is 0. b and c may pass 2^64 (a sum of
 * announced memory), then the product is scaled down first so that it fits. */
static uint64_t part_of(uint64_t a, u128 b, u128 c)
{
    while (c >> 64) {
        b >>= 1;
        c >>= 1;
    }
    if (c == 0) return 0;
    return (uint64_t)(((u128)a * b + c - 1) / c);
}

/* Speed-aware slot counts (layer_split.h) into counts: whether they apply. They do only when
 * every member's slots fit the memory it has for layers (layer_split gives every member at
 * least one slot, even one whose memory holds less). */
static bool speed_counts(const election_plan_t *p, uint32_t *counts)
{
    uint64_t slots = (uint64_t)p->n_layers + 1;
    uint64_t slot_bytes = p->layer_bytes / slots + (p->layer_bytes % slots != 0);
    if (slot_bytes == 0) return false;
    ls_node_t *ls = malloc(p->n_members * sizeof *ls);
    if (!ls) return false;
    for (size_t j = 0; j < p->n_members; j++)
        ls[j] =
            (ls_node_t){.cap_bytes = layer_cap(p, j), .speed_mflops = p->members[j].speed_mflops};
    int rc = layer_split_speed(ls, p->n_members, (uint32_t)slots, slot_bytes, counts);
    for (size_t j = 0; rc == 1 && j < p->n_members; j++)
        if ((u128)counts[j] * slot_bytes > ls[j].cap_bytes) rc = 0;
    free(ls);
    return rc == 1;
}

/* Weights, shares, layer ranges and bytes of a split plan (see election.h, "Layers" and "Host
 * bytes"). */
static void plan_layers(election_plan_t *p)
{
    u128 total = 0, cum = 0;
    for (size_t j = 0; j < p->n_members; j++)
        total += layer_cap(p, j);
    uint64_t L = p->n_layers, prev = 0;
    uint32_t *counts = L ? calloc(p->n_members, sizeof *counts) : NULL;
    p->speed_aware = counts && speed_counts(p, counts);
    for (size_t j = 0; j < p->n_members; j++) {
        election_member_t *m = &p->members[j];
        uint64_t cap = layer_cap(p, j);
        m->share = total ? (double)cap / (double)total : 0.0;
        /* total >= layer_bytes (the group's memory covers the need), so bytes <= vram_bytes */
        m->bytes = part_of(p->layer_bytes, cap, total);
        if (j == p->host_index) m->bytes += p->host_bytes;
        if (p->speed_aware) {
            /* the slots the speeds give, laid out in the same order as below */
            uint64_t c = prev + counts[j];
            m->share = (double)counts[j] / (double)(L + 1);
            m->bytes = part_of(p->layer_bytes, counts[j], L + 1) +
                       (j == p->host_index ? p->host_bytes : 0);
            m->weight = counts[j];
            m->layer_first = (uint32_t)(prev < L ? prev : L);
            m->layer_end = (uint32_t)(c < L ? c : L);
            m->output_layer = prev <= L && L < c;
            prev = c;
            continue;
        }
        if (L == 0) {
            uint64_t mib = cap >> 20;
            m->weight = mib == 0 ? 1 : mib > UINT32_MAX ? UINT32_MAX : (uint32_t)mib;
            continue;
        }
        cum += cap;
        uint64_t c;
        if (j + 1 == p->n_members || total == 0) {
            c = L + 1;
        } else {
            u128 num = (u128)(L + 1) * cum;
            c = (uint64_t)((num + total - 1) / total);
        }
        m->weight = (uint32_t)(c - prev);
        m->layer_first = (uint32_t)(prev < L ? prev : L);
        m->layer_end = (uint32_t)(c < L ? c : L);
        m->output_layer = prev <= L && L < c;
        prev = c;
    }
    free(counts);
}

static int run_split(const election_input_t *in, cand_t *c, size_t n, size_t host, bool forced,
                     election_plan_t *out)
{
    uint64_t need = out->need_bytes;
    /* candidates: everyone but the host, with memory, RTT < 80 ms or unknown */
    cand_t *w = malloc(n * sizeof *w);
    if (!w) return -ENOMEM;
    size_t nw = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == host || c[i].n->vram_bytes == 0) continue;
        cand_t x = c[i];
        x.rtt = rtt_to_host(in, c[host].idx, c[i].idx);
        if (x.rtt >= ELECTION_MAX_RTT_MS) continue;
        x.kept = is_kept(in, x.n->id);
        x.key = worker_key(x.rtt, x.kept);
        w[nw++] = x;
    }
    if (forced && nw == 0) {
        free(w);
        return 1; /* no worker: fall back to the normal rules */
    }
    qsort(w, nw, sizeof *w, cmp_worker_order);
    uint64_t acc = c[host].n->vram_bytes;
    size_t taken = 0;
    while (taken < nw && (acc < need || (forced && taken == 0))) {
        pick_tight(in, w, taken, nw);
        acc = sat_add(acc, w[taken++].n->vram_bytes);
    }

    /* the host's memory must hold its host bytes too (the host order puts a node whose memory
     * does so first; when none does, no split works) */
    out->host_bytes = c[host].n->host_bytes < need ? c[host].n->host_bytes : need;
    out->layer_bytes = need - out->host_bytes;
    out->mode = acc >= need && can_host(c[host].n) ? ELECTION_SPLIT : ELECTION_IMPOSSIBLE;
    out->forced = forced && out->mode == ELECTION_SPLIT;
    out->members = calloc(taken + 1, sizeof *out->members);
    if (!out->members) {
        free(w);
        return -ENOMEM;
    }
    out->n_members = taken + 1;
    for (size_t i = 0; i < taken; i++)
        fill_member(&out->members[i], &w[i], ELECTION_WORKER);
    fill_member(&out->members[taken], &c[host], ELECTION_HOST);
    out->host_index = taken;
    out->total_bytes = acc;
    free(w);
    if (out->mode == ELECTION_SPLIT) plan_layers(out);
    return 0;
}

static int run_solo(cand_t *c, size_t n, election_plan_t *out)
{
    qsort(c, n, sizeof *c, cmp_replica_order);
    size_t k = 0;
    while (k < n && c[k].n->vram_bytes >= out->need_bytes)
        k++;
    out->members = calloc(k, sizeof *out->members);
    if (!out->members) return -ENOMEM;
    out->mode = ELECTION_SOLO;
    out->n_members = k;
    for (size_t i = 0; i < k; i++) {
        election_member_t *m = &out->members[i];
        fill_member(m, &c[i], ELECTION_REPLICA);
        m->share = 1.0;
        m->bytes = out->need_bytes;
        m->layer_end = out->n_layers;
        m->output_layer = true;
        out->total_bytes = sat_add(out->total_bytes, m->vram_bytes);
    }
    return 0;
}

int election_run(const election_input_t *in, election_plan_t *out)
{
    if (!out) return -EINVAL;
    memset(out, 0, sizeof *out);
    if (!in || in->model_bytes == 0 || (in->n_nodes && !in->nodes) ||
        in->n_layers > ELECTION_MAX_LAYERS)
        return -EINVAL;
    if (in->n_nodes > ELECTION_MAX_NODES) return -E2BIG;
    size_t n = in->n_nodes;
    for (size_t i = 0; i < n; i++)
        if (!id_valid(in->nodes[i].id)) return -EINVAL;
    out->need_bytes = in->need_bytes ? in->need_bytes : election_need_bytes(in->model_bytes);
    out->n_layers = in->n_layers;
    if (n == 0) return 0;

    cand_t *c = malloc(n * sizeof *c);
    if (!c) return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        c[i] = (cand_t){.n = &in->nodes[i], .idx = i, .rtt = -1};
    qsort(c, n, sizeof *c, cmp_id);
    int rc = 0;
    bool forced = false, fits = false;
    size_t host = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(c[i - 1].n->id, c[i].n->id) == 0) {
            rc = -EINVAL;
            goto out;
        }
        forced |= c[i].n->force_split;
        fits |= c[i].n->vram_bytes >= out->need_bytes;
        if (better_host(&c[i], &c[host])) host = i;
    }
    if (forced) {
        rc = run_split(in, c, n, host, true, out);
        if (rc <= 0) goto out;
        rc = 0;
    }
    rc = fits ? run_solo(c, n, out) : run_split(in, c, n, host, false, out);
out:
    free(c);
    if (rc < 0) election_plan_free(out);
    return rc;
}

void election_plan_free(election_plan_t *plan)
{
    if (!plan) return;
    free(plan->members);
    memset(plan, 0, sizeof *plan);
}

election_role_t election_role_of(const election_plan_t *plan, const char *id)
{
    if (!plan || !id || (plan->mode != ELECTION_SOLO && plan->mode != ELECTION_SPLIT))
        return ELECTION_IDLE;
    for (size_t i = 0; i < plan->n_members; i++)
        if (strcmp(plan->members[i].id, id) == 0) return plan->members[i].role;
    return ELECTION_IDLE;
}

const election_member_t *election_host(const election_plan_t *plan)
{
    if (!plan || (plan->mode != ELECTION_SPLIT && plan->mode != ELECTION_IMPOSSIBLE) ||
        plan->n_members == 0)
        return NULL;
    return &plan->members[plan->host_index];
}

int election_tensor_split(const election_plan_t *plan, char *buf, size_t len)
{
    if (!plan || !buf || plan->mode != ELECTION_SPLIT) return -EINVAL;
    size_t off = 0;
    for (size_t i = 0; i < plan->n_members; i++) {
        int k = snprintf(buf + off, len - off, "%s%u", i ? "," : "", plan->members[i].weight);
        if (k < 0 || (size_t)k >= len - off) {
            if (len) buf[0] = '\0';
            return -ENOSPC;
        }
        off += (size_t)k;
    }
    return (int)off;
}

const char *election_mode_name(election_mode_t mode)
{
    switch (mode) {
    case ELECTION_SOLO:
        return "solo";
    case ELECTION_SPLIT:
        return "split";
    case ELECTION_IMPOSSIBLE:
        return "impossible";
    default:
        return "empty";
    }
}

const char *election_role_name(election_role_t role)
{
    switch (role) {
    case ELECTION_REPLICA:
        return "replica";
    case ELECTION_HOST:
        return "host";
    case ELECTION_WORKER:
        return "worker";
    default:
        return "idle";
    }
}

/* A layout's preconditions: a split with layers, the host last. */
static bool layout_ok(const election_plan_t *plan, const election_range_t *ranges,
                      const uint32_t *ngl)
{
    return plan && ranges && ngl && plan->mode == ELECTION_SPLIT && plan->n_layers > 0 &&
           plan->n_members >= 2 && plan->host_index == plan->n_members - 1;
}

/* Slots [*s, *s + w) of `slots` (the last one the output layer) into r; *s moves past them. */
static void take_slots(election_range_t *r, uint32_t *s, uint32_t w, uint32_t slots)
{
    r->first = *s;
    r->output = w > 0 && *s + w == slots;
    r->end = r->output ? slots - 1 : *s + w;
    r->weight = w;
    *s += w;
}

int election_device_layout(const election_plan_t *plan, election_range_t *ranges, uint32_t *ngl)
{
    if (!layout_ok(plan, ranges, ngl)) return -EINVAL;
    uint32_t slots = plan->n_layers + 1; /* the output layer is slot n_layers */
    uint32_t s = 0;
    for (size_t k = 0; k < plan->n_members; k++) {
        uint32_t w = plan->members[k].weight;
        if (w > slots - s || k == plan->n_members - 1) w = slots - s; /* the host: the rest */
        take_slots(&ranges[k], &s, w, slots);
    }
    *ngl = slots;
    return 0;
}

void election_spread(uint32_t slots, const uint64_t *device_bytes, size_t n, uint32_t *out)
{
    if (n == 0) return;
    long double total = 0;
    for (size_t i = 0; i < n; i++)
        total += (long double)device_bytes[i];
    uint32_t given = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = total > 0 ? (uint32_t)((long double)slots * device_bytes[i] / total)
                           : slots / (uint32_t)n;
        given += out[i];
    }
    for (size_t i = 0; given < slots; i = (i + 1) % n, given++)
        out[i]++;
}

int election_cpu_layout(const election_plan_t *plan, election_range_t *ranges, uint32_t *ngl)
{
    if (!layout_ok(plan, ranges, ngl)) return -EINVAL;
    uint32_t slots = plan->n_layers + 1; /* the output layer is slot n_layers */
    size_t nw = plan->n_members - 1;     /* workers 0..nw-1, then the host */
    uint32_t h = plan->members[nw].weight > slots ? slots : plan->members[nw].weight;
    uint32_t s = 0;
    for (size_t i = 0; i <= nw; i++) {
        size_t k = i == 0 ? nw : i - 1; /* the host first, then the workers in --rpc order */
        uint32_t w = k == nw ? h : plan->members[k].weight;
        if (w > slots - s || (k == nw - 1 && i > 0)) w = slots - s; /* the last takes the rest */
        take_slots(&ranges[k], &s, w, slots);
    }
    *ngl = slots - h;
    return 0;
}

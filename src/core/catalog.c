/* catalog — see catalog.h for the rules. */
#include "catalog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "election.h"

bool catalog_id_valid(const char *id)
{
    if (!id) return false;
    for (size_t i = 0; i < CATALOG_ID_LEN; i++) {
        char c = id[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return id[CATALOG_ID_LEN] == '\0';
}

bool catalog_name_valid(const char *name)
{
    if (!name || !name[0]) return false;
    size_t i = 0;
    for (; name[i]; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f || i + 1 >= CATALOG_NAME_MAX) return false;
    }
    return true;
}

const char *catalog_status_name(catalog_status_t s)
{
    switch (s) {
    case CATALOG_READY:
        return "ready";
    case CATALOG_LOADING:
        return "loading";
    case CATALOG_NEEDS_CAPACITY:
        return "needs_capacity";
    default:
        return "unloaded";
    }
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* One mention of a model by a node. Sorted by (name, rank, kind). */
enum { K_HOLD = 0, K_NAME, K_SERVE, K_REQ };
typedef struct {
    const char *name;
    uint32_t rank; /* position of the node in the id-sorted live list */
    uint8_t kind;
    bool ready, is_host;
    mm_type_t type;
    uint64_t size;
    uint64_t need;
} ref_t;

typedef struct {
    const catalog_node_t *n;
    size_t idx;
} live_t;

static int cmp_live(const void *a, const void *b)
{
    const live_t *x = a, *y = b;
    int c = strcmp(x->n->id, y->n->id);
    return c ? c : (x->idx < y->idx ? -1 : x->idx > y->idx);
}

static int cmp_ref(const void *a, const void *b)
{
    const ref_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return (int)x->kind - (int)y->kind;
}

/* Entries of a list that are looked at (the rest is rejected). */
static size_t list_len(const void *list, size_t n)
{
    if (!list) return 0;
    return n > CATALOG_MAX_NODE_MODELS ? CATALOG_MAX_NODE_MODELS : n;
}

/* Upper bound of the mentions collect() produces. */
static size_t count_refs(const live_t *live, size_t n_live)
{
    size_t k = 0;
    for (size_t r = 0; r < n_live; r++) {
        const catalog_node_t *n = live[r].n;
        k += list_len(n->available, n->n_available) + list_len(n->requested, n->n_requested);
        if (n->role != CATALOG_ROLE_CLIENT) k += list_len(n->serving, n->n_serving);
    }
    return k;
}

static bool take(const char *name, size_t *rejected)
{
    if (catalog_name_valid(name)) return true;
    (*rejected)++;
    return false;
}

/* Every valid mention of a model by the kept live nodes; returns the count. */
static size_t collect(const live_t *live, size_t n_live, ref_t *refs, size_t *rejected)
{
    size_t k = 0;
    for (size_t r = 0; r < n_live; r++) {
        const catalog_node_t *n = live[r].n;
        bool client = n->role == CATALOG_ROLE_CLIENT;
        size_t na = list_len(n->available, n->n_available);
        size_t ns = client ? 0 : list_len(n->serving, n->n_serving);
        size_t nr = list_len(n->requested, n->n_requested);
        *rejected += (n->available ? n->n_available : 0) - na +
                     (n->requested ? n->n_requested : 0) - nr +
                     (client || !n->serving ? 0 : n->n_serving - ns);
        for (size_t i = 0; i < na; i++) {
            const catalog_avail_t *a = &n->available[i];
            if (!take(a->name, rejected)) continue;
            refs[k++] = (ref_t){.name = a->name,
                                .rank = (uint32_t)r,
                                .kind = client ? K_NAME : K_HOLD,
                                .size = a->size_bytes,
                                .need = a->need_bytes,
                                .type = a->type};
        }
        for (size_t i = 0; i < ns; i++) {
            const catalog_serving_t *sv = &n->serving[i];
            if (!take(sv->model, rejected)) continue;
            refs[k++] = (ref_t){.name = sv->model,
                                .rank = (uint32_t)r,
                                .kind = K_SERVE,
                                .ready = sv->state == CATALOG_SERVE_READY,
                                .is_host = sv->is_host};
        }
        for (size_t i = 0; i < nr; i++) {
            if (!take(n->requested[i], rejected)) continue;
            refs[k++] = (ref_t){.name = n->requested[i],
                                .rank = (uint32_t)r,
                                .kind = K_REQ,
                                .size = n->requested_size ? n->requested_size[i] : 0};
        }
    }
    return k;
}

/* First mention of its (node, kind) in a sorted run. */
static bool first_of_node(const ref_t *refs, size_t a, size_t i)
{
    return i == a || refs[i - 1].rank != refs[i].rank || refs[i - 1].kind != refs[i].kind;
}

/* Fill entry e from refs[a..b) (one name). */
static void fill_entry(catalog_entry_t *e, const ref_t *refs, size_t a, size_t b,
                       const live_t *live, catalog_id_t **pool, uint64_t capacity)
{
    memcpy(e->name, refs[a].name, strlen(refs[a].name) + 1);
    e->type = MM_LLM;
    bool sized = false, ready_host = false;
    e->holders = *pool;
    for (size_t i = a; i < b; i++) {
        const ref_t *r = &refs[i];
        if (r->kind == K_REQ) e->requested = true;
        if (r->kind != K_HOLD && r->kind != K_NAME && !(r->kind == K_REQ && r->size)) continue;
        if (!sized || r->size > e->size_bytes) {
            e->size_bytes = r->size;
            e->type = r->type;
            sized = true;
        } else if (r->size == e->size_bytes && r->type < e->type) {
            e->type = r->type;
        }
        if (r->need > e->need_bytes) e->need_bytes = r->need;
        if (r->kind == K_HOLD && first_of_node(refs, a, i))
            memcpy(e->holders[e->n_holders++], live[r->rank].n->id, sizeof(catalog_id_t));
    }
    *pool += e->n_holders;
    uint64_t rule = election_need_bytes(e->size_bytes);
    if (e->size_bytes > 0 && e->need_bytes < rule) e->need_bytes = rule;
    e->servers = *pool;
    *pool += b - a; /* room for the servers, then the hosts after them */
    e->hosts = *pool;
    for (size_t i = a; i < b; i++) {
        if (refs[i].kind != K_SERVE || !first_of_node(refs, a, i)) continue;
        bool ready = false, host = false; /* merge a node's duplicate mentions */
        for (size_t j = i; j < b && refs[j].rank == refs[i].rank && refs[j].kind == K_SERVE; j++) {
            ready |= refs[j].ready;
            host |= refs[j].is_host;
        }
        const catalog_node_t *n = live[refs[i].rank].n;
        memcpy(e->servers[e->n_servers++], n->id, sizeof(catalog_id_t));
        if (host) memcpy(e->hosts[e->n_hosts++], n->id, sizeof(catalog_id_t));
        e->n_ready += ready;
        e->servers_vram = sat_add(e->servers_vram, n->vram_bytes);
        if (n->vram_bytes > e->max_server_vram) e->max_server_vram = n->vram_bytes;
        ready_host |= ready && host;
    }
    *pool += e->n_hosts;

    if (ready_host)
        e->status = CATALOG_READY;
    else if (e->n_servers > 0)
        e->status = CATALOG_LOADING;
    else if (e->size_bytes > 0 && capacity < e->need_bytes)
        e->status = CATALOG_NEEDS_CAPACITY;
    else
        e->status = CATALOG_UNLOADED;
}

int catalog_build(const catalog_node_t *nodes, size_t n_nodes, catalog_t *out)
{
    if (!out) return -EINVAL;
    memset(out, 0, sizeof *out);
    if (!nodes && n_nodes) return -EINVAL;
    if (n_nodes > CATALOG_MAX_NODES) return -E2BIG;
    int rc = -ENOMEM;
    ref_t *refs = NULL;
    live_t *live = malloc((n_nodes ? n_nodes : 1) * sizeof *live);
    if (!live) goto out;

    /* live nodes with a valid id, sorted by id; duplicates after the first are dropped */
    size_t n_live = 0;
    for (size_t i = 0; i < n_nodes; i++) {
        if (!nodes[i].alive) continue;
        if (!catalog_id_valid(nodes[i].id)) {
            out->n_rejected++;
            continue;
        }
        live[n_live++] = (live_t){.n = &nodes[i], .idx = i};
    }
    qsort(live, n_live, sizeof *live, cmp_live);
    size_t kept = 0;
    for (size_t i = 0; i < n_live; i++) {
        if (kept > 0 && strcmp(live[kept - 1].n->id, live[i].n->id) == 0) {
            out->n_rejected++;
            continue;
        }
        live[kept++] = live[i];
    }
    n_live = kept;
    for (size_t i = 0; i < n_live; i++) {
        if (live[i].n->role == CATALOG_ROLE_CLIENT) continue;
        out->n_live++;
        out->capacity_bytes = sat_add(out->capacity_bytes, live[i].n->vram_bytes);
    }

    refs = malloc((count_refs(live, n_live) + 1) * sizeof *refs);
    if (!refs) goto out;
    size_t n_refs = collect(live, n_live, refs, &out->n_rejected);
    qsort(refs, n_refs, sizeof *refs, cmp_ref);

    size_t n_names = 0;
    for (size_t i = 0; i < n_refs; i++)
        if (i == 0 || strcmp(refs[i - 1].name, refs[i].name) != 0) n_names++;
    size_t n_entries = n_names > CATALOG_MAX_MODELS ? CATALOG_MAX_MODELS : n_names;
    out->truncated = n_names > n_entries;
    out->entries = calloc(n_entries ? n_entries : 1, sizeof *out->entries);
    /* ids: per entry at most one holder per ref, then room for one server and one host per ref */
    out->pool_ = calloc(2 * n_refs + 1, sizeof *out->pool_);
    if (!out->entries || !out->pool_) goto out;
    catalog_id_t *pool = out->pool_;
    size_t a = 0;
    for (size_t e = 0; e < n_entries; e++) {
        size_t b = a + 1;
        while (b < n_refs && strcmp(refs[b].name, refs[a].name) == 0)
            b++;
        fill_entry(&out->entries[e], refs, a, b, live, &pool, out->capacity_bytes);
        a = b;
    }
    out->n = n_entries;
    rc = 0;
out:
    free(refs);
    free(live);
    if (rc < 0) catalog_free(out);
    return rc;
}

void catalog_free(catalog_t *cat)
{
    if (!cat) return;
    free(cat->entries);
    free(cat->pool_);
    memset(cat, 0, sizeof *cat);
}

static int cmp_entry_name(const void *key, const void *elem)
{
    return strcmp(key, ((const catalog_entry_t *)elem)->name);
}

const catalog_entry_t *catalog_find(const catalog_t *cat, const char *name)
{
    if (!cat || !name || cat->n == 0) return NULL;
    return bsearch(name, cat->entries, cat->n, sizeof *cat->entries, cmp_entry_name);
}

static int cmp_id_key(const void *key, const void *elem)
{
    return strcmp(key, *(const catalog_id_t *)elem);
}

bool catalog_has_id(const catalog_id_t *ids, size_t n, const char *id)
{
    if (!ids || !id || n == 0) return false;
    return bsearch(id, ids, n, sizeof *ids, cmp_id_key) != NULL;
}

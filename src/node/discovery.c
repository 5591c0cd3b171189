/* Public mesh listings: the subscription, the newest-per-mesh set, publishing. */
#include "discovery.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "tunables.h"
#include "nostr_pool.h"

struct discovery {
    nostr_pool_t *pool;
    listing_set_t set;
    void (*on_change)(void *data);
    void *data;
};

static void on_event(void *data, const nostr_event_t *ev)
{
    discovery_t *d = data;
    mesh_listing_t *l = malloc(sizeof *l);
    if (!l) return;
    char err[160];
    int rc = listing_from_event(ev, (int64_t)time(NULL), l, err, sizeof err);
    if (rc == 0 && listing_set_add(&d->set, l)) {
        LOGD("nostr", "listing of mesh %s (%s, region %s, %u nodes) from %.16s", l->mesh_id,
             l->name, l->region[0] ? l->region : "-", l->node_count, ev->pubkey);
        if (d->on_change) d->on_change(d->data);
    } else if (rc && rc != -ETIME) {
        LOGD("nostr", "event %.16s is not a usable listing: %s", ev->id, err);
    }
    free(l);
}

static void on_progress(void *data)
{
    discovery_t *d = data;
    if (d->on_change) d->on_change(d->data);
}

/* Every mesh-llm listing created since now_s - LISTING_MAX_TTL_S (older ones have expired):
 * the filter changes every second, so a relay that caches a filter's answer answers a later
 * query afresh. */
static nostr_filter_t listing_filter(int64_t now_s)
{
    return (nostr_filter_t){.kinds = {LISTING_KIND},
                            .n_kinds = 1,
                            .t_tags = {LISTING_TAG},
                            .n_t = 1,
                            .since = now_s - LISTING_MAX_TTL_S,
                            .limit = LISTING_SET_MAX};
}

int discovery_start(discovery_t **out, uv_loop_t *loop, const char *const *urls, size_t n,
                    const tunables_t *tun, void (*on_change)(void *data), void *data)
{
    discovery_t *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    if (listing_set_init(&d->set) != 0) {
        free(d);
        return -ENOMEM;
    }
    d->on_change = on_change;
    d->data = data;
    nostr_pool_cb_t cb = {.on_event = on_event, .on_progress = on_progress, .data = d};
    int rc = nostr_pool_start(&d->pool, loop, urls, n, tun, &cb);
    if (rc) {
        listing_set_free(&d->set);
        free(d);
        return rc;
    }
    nostr_filter_t f = listing_filter((int64_t)time(NULL));
    nostr_pool_subscribe(d->pool, "mesh-llm-listings", &f);
    *out = d;
    return 0;
}

void discovery_stop(discovery_t *d)
{
    if (!d) return;
    nostr_pool_stop(d->pool);
    listing_set_free(&d->set);
    free(d);
}

bool discovery_settled(const discovery_t *d)
{
    size_t total;
    size_t k = nostr_pool_settled(d->pool, &total);
    return k == total;
}

void discovery_refresh(discovery_t *d, int64_t now_s)
{
    nostr_filter_t f = listing_filter(now_s);
    nostr_pool_refresh(d->pool, &f);
}

size_t discovery_accepted(const discovery_t *d, size_t *open, size_t *total)
{
    nostr_pool_settled(d->pool, total);
    return nostr_pool_accepted(d->pool, open);
}

bool discovery_reached(const discovery_t *d)
{
    return nostr_pool_answered(d->pool) > 0;
}

size_t discovery_list(discovery_t *d, int64_t now_s, const char *region, const char *model,
                      mesh_listing_t *out, size_t max)
{
    listing_set_expire(&d->set, now_s);
    size_t n = 0;
    for (size_t i = 0; i < d->set.n && n < max; i++) {
        const mesh_listing_t *l = &d->set.items[i];
        if (region && region[0] && strcmp(region, l->region) != 0) continue;
        if (!listing_has_model(l, model)) continue;
        size_t k = n++;
        while (k > 0 && out[k - 1].created_at < l->created_at) { /* newest first */
            out[k] = out[k - 1];
            k--;
        }
        out[k] = *l;
    }
    return n;
}

bool discovery_find(discovery_t *d, int64_t now_s, const char *mesh_id, mesh_listing_t *out)
{
    listing_set_expire(&d->set, now_s);
    const mesh_listing_t *l = listing_set_find(&d->set, mesh_id);
    if (l) *out = *l;
    return l != NULL;
}

json_t *listing_json(const mesh_listing_t *l, int64_t now_s)
{
    json_t *models = json_array();
    for (size_t i = 0; models && i < l->n_models; i++)
        json_array_append_new(models,
                              json_pack("{s:s,s:s,s:b}", "name", l->models[i].name, "status",
                                        l->models[i].status, "served", l->models[i].served));
    return json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:o,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I}", "mesh_id",
                     l->mesh_id, "name", l->name, "region", l->region, "node_count",
                     (json_int_t)l->node_count, "mem_total", (json_int_t)l->mem_total, "mem_free",
                     (json_int_t)l->mem_free, "models", models, "version", l->version, "token",
                     l->token, "node", l->node, "publisher", l->publisher, "event_id", l->event_id,
                     "created_at", (json_int_t)l->created_at, "expires_at",
                     (json_int_t)l->expires_at, "age_s", (json_int_t)(now_s - l->created_at));
}

json_t *discovery_json(discovery_t *d, int64_t now_s, const char *region, const char *model)
{
    mesh_listing_t *ls = malloc(LISTING_SET_MAX * sizeof *ls);
    json_t *meshes = json_array();
    if (ls && meshes) {
        size_t n = discovery_list(d, now_s, region, model, ls, LISTING_SET_MAX);
        for (size_t i = 0; i < n; i++)
            json_array_append_new(meshes, listing_json(&ls[i], now_s));
    }
    free(ls);
    return json_pack("{s:o,s:b,s:o}", "meshes", meshes, "searching", !discovery_settled(d),
                     "relays", nostr_pool_status(d->pool));
}

int discovery_publish(discovery_t *d, const mesh_listing_t *l, const uint8_t seckey[32],
                      int64_t now_s, int64_t ttl_s)
{
    nostr_event_t ev;
    int rc = listing_to_event(l, now_s, ttl_s, &ev);
    if (rc) return rc;
    rc = nostr_event_sign(&ev, seckey);
    if (rc == 0) rc = nostr_pool_publish(d->pool, &ev);
    nostr_event_free(&ev);
    return rc;
}

void discovery_unpublish(discovery_t *d)
{
    nostr_pool_unpublish(d->pool);
}

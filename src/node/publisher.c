/* Publishing the mesh's listing, and the watchdog that takes it over. */
#include "publisher.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "tunables.h"
#include "options.h"
#include "util.h"

pub_action_t publisher_decide(bool active, bool listed, const char *lister, const char *self,
                              bool seen, bool smallest, bool due)
{
    bool other = listed && lister && strcmp(lister, self) != 0;
    if (active) {
        if (other && strcmp(lister, self) < 0) return PUB_YIELD;
        return due ? PUB_PUBLISH : PUB_NOTHING;
    }
    if (!listed && seen && smallest) return PUB_TAKE_OVER;
    return PUB_NOTHING;
}

typedef struct {
    const char *self;
    const char *lister;
    bool smallest;
    bool lister_live;
} members_t;

/* The newest live listing of the mesh (by anyone), and whether its publisher is this node or a
 * live member (anyone can sign a listing with the mesh's id: a stranger's never makes the
 * publisher yield). */
static bool mesh_listing(publisher_t *p, mesh_listing_t *l, members_t *m)
{
    bool found = discovery_find(p->disc, (int64_t)time(NULL), mesh_id(p->mesh), l);
    m->self = mesh_node_id(p->mesh);
    m->lister = found ? l->node : NULL;
    m->smallest = true;
    m->lister_live = false;
    const view_node_t *peers;
    size_t n = mesh_peers(p->mesh, &peers);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(peers[i].id, m->self) < 0) m->smallest = false;
        if (m->lister && strcmp(peers[i].id, m->lister) == 0) m->lister_live = true;
    }
    if (found && strcmp(l->node, m->self) == 0) m->lister_live = true;
    return found;
}

static uint64_t now_ms(publisher_t *p)
{
    return uv_now(p->loop);
}

static void publish_now(publisher_t *p)
{
    mesh_listing_t *l = calloc(1, sizeof *l);
    if (!l) return;
    planner_listing(p->plan, l);
    if (p->passive) {
        uint64_t vram = 0;
        l->node_count += (uint32_t)p->passive(p->passive_data, &vram);
        l->mem_total += vram;
        l->mem_free += vram; /* a standby holds nothing */
    }
    snprintf(l->mesh_id, sizeof l->mesh_id, "%s", mesh_id(p->mesh));
    snprintf(l->name, sizeof l->name, "%s", p->name);
    snprintf(l->region, sizeof l->region, "%s", p->region);
    snprintf(l->version, sizeof l->version, "%s", MESH_VERSION);
    snprintf(l->token, sizeof l->token, "%s", mesh_token(p->mesh));
    snprintf(l->node, sizeof l->node, "%s", mesh_node_id(p->mesh));
    int64_t ttl_s = (int64_t)((p->ttl_ms + 999) / 1000);
    int rc = discovery_publish(p->disc, l, p->sk, (int64_t)time(NULL), ttl_s);
    if (rc)
        LOGW("nostr", "cannot publish the listing: %s", strerror(-rc));
    else
        p->publishes++;
    p->seen = true;
    p->last_ms = now_ms(p);
    free(l);
}

/* Say whether the listing is on a relay, once per change: published when a relay accepted it
 * (OK), not published while no relay is connected (the pool reconnects with backoff and sends
 * the listing again on every connect). */
static void check_listed(publisher_t *p)
{
    if (!p->active || p->publishes == 0) return;
    size_t open, total, ok = discovery_accepted(p->disc, &open, &total);
    p->relays_ok = ok;
    if (ok && p->listed != 1) {
        p->listed = 1;
        LOGI("nostr",
             "mesh %s ('%s', region %s) is published: %zu of %zu relay(s) accepted its "
             "listing; republished every %llu ms, expires after %llu s",
             mesh_id(p->mesh), p->name, p->region[0] ? p->region : "-", ok, total,
             (unsigned long long)p->interval_ms, (unsigned long long)((p->ttl_ms + 999) / 1000));
    } else if (!ok && open == 0 && p->listed != 0) {
        p->listed = 0;
        LOGW("nostr",
             "mesh %s is NOT published: none of the %zu Nostr relay(s) can be reached (GET "
             "/api/discover shows why); retrying with backoff",
             mesh_id(p->mesh), total);
    }
}

static void tick(uv_timer_t *t)
{
    publisher_t *p = t->data;
    mesh_listing_t *l = malloc(sizeof *l);
    if (!l) return;
    members_t s;
    bool listed = mesh_listing(p, l, &s);
    const char *self = s.self;
    if (listed) {
        p->seen = true;
        if (!p->active) { /* remember what the listing says, for a takeover */
            snprintf(p->name, sizeof p->name, "%s", l->name);
            snprintf(p->region, sizeof p->region, "%s", l->region);
        }
    }
    bool due = !p->last_ms || now_ms(p) - p->last_ms >= p->interval_ms;
    switch (publisher_decide(p->active, listed, s.lister_live ? l->node : NULL, self, p->seen,
                             s.smallest, due)) {
    case PUB_PUBLISH:
        publish_now(p);
        break;
    case PUB_TAKE_OVER:
        p->takeovers++;
        p->active = true;
        LOGI("nostr",
             "the listing of mesh %s expired and this node has the smallest id of the live "
             "members: taking over publishing",
             mesh_id(p->mesh));
        publish_now(p);
        break;
    case PUB_YIELD:
        p->yields++;
        p->active = false;
        discovery_unpublish(p->disc);
        LOGI("nostr", "node %.16s publishes mesh %s: this node stops publishing and watches",
             l->node, mesh_id(p->mesh));
        break;
    case PUB_NOTHING:
        break;
    }
    check_listed(p);
    free(l);
}

/* The first decision of a --publish node: publish unless another node already does. */
static void first(uv_timer_t *t)
{
    publisher_t *p = t->data;
    mesh_listing_t *l = malloc(sizeof *l);
    if (!l) return;
    members_t m;
    bool other = mesh_listing(p, l, &m) && strcmp(l->node, m.self) != 0;
    if (other && discovery_settled(p->disc)) {
        p->seen = true;
        LOGI("nostr", "node %.16s already publishes mesh %s: this node watches the listing",
             l->node, mesh_id(p->mesh));
    } else if (!discovery_settled(p->disc) && now_ms(p) - p->last_ms < p->interval_ms) {
        free(l);
        return; /* relays still answering: decide at the next tick (bounded by an interval) */
    } else {
        p->active = true;
        p->last_ms = 0;
    }
    free(l);
    uv_timer_start(&p->timer, tick, 0, p->interval_ms / 8 ? p->interval_ms / 8 : 1);
}

void publisher_start(publisher_t *p, uv_loop_t *loop, discovery_t *disc, planner_t *plan,
                     mesh_t *mesh, const uint8_t sk[32], const char *name, const char *region,
                     bool want)
{
    memset(p, 0, sizeof *p);
    p->loop = loop;
    p->disc = disc;
    p->plan = plan;
    p->mesh = mesh;
    memcpy(p->sk, sk, 32);
    snprintf(p->name, sizeof p->name, "%s", name && *name ? name : "mesh-llm");
    snprintf(p->region, sizeof p->region, "%s", region ? region : "");
    const tunables_t *t = &plan->cfg->tun;
    p->interval_ms = t->publish_interval_ms;
    p->ttl_ms = t->publish_ttl_ms ? t->publish_ttl_ms : 2 * p->interval_ms; /* 0: twice */
    uv_timer_init(loop, &p->timer);
    p->timer.data = p;
    p->timer_open = true;
    p->started = true;
    p->listed = -1;         /* not said yet */
    p->last_ms = now_ms(p); /* first(): how long it has waited for the relays */
    if (want)
        uv_timer_start(&p->timer, first, 0, 200);
    else
        uv_timer_start(&p->timer, tick, p->interval_ms / 8,
                       p->interval_ms / 8 ? p->interval_ms / 8 : 1);
}

void publisher_stop(publisher_t *p)
{
    if (!p->started) return;
    p->started = false;
    if (p->timer_open) {
        p->timer_open = false;
        uv_close((uv_handle_t *)&p->timer, NULL);
    }
    sodium_memzero(p->sk, sizeof p->sk);
}

json_t *publisher_status(const publisher_t *p)
{
    return json_pack("{s:b,s:b,s:b,s:I,s:s,s:s,s:I,s:I,s:I,s:I}", "publishing", p->active,
                     "published", p->active && p->relays_ok > 0, "relays_accepted",
                     (json_int_t)p->relays_ok, "watching", p->started, "name", p->name, "region",
                     p->region, "interval_ms", (json_int_t)p->interval_ms, "publishes",
                     (json_int_t)p->publishes, "takeovers", (json_int_t)p->takeovers, "yields",
                     (json_int_t)p->yields);
}

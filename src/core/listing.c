/* Mesh listings: typed struct <-> kind 31990 event, and the newest-per-mesh set. */
#include "listing.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int listing_to_event(const mesh_listing_t *l, int64_t now_s, int64_t ttl_s, nostr_event_t *ev)
{
    memset(ev, 0, sizeof *ev);
    ev->kind = LISTING_KIND;
    ev->created_at = now_s;
    char exp[32];
    snprintf(exp, sizeof exp, "%lld", (long long)(now_s + ttl_s));
    int rc = nostr_event_add_tag(ev, 2, (const char *[]){"d", l->mesh_id});
    if (!rc) rc = nostr_event_add_tag(ev, 2, (const char *[]){"t", LISTING_TAG});
    if (!rc && l->region[0]) rc = nostr_event_add_tag(ev, 2, (const char *[]){"region", l->region});
    if (!rc) rc = nostr_event_add_tag(ev, 2, (const char *[]){"expiration", exp});
    json_t *models = json_array();
    for (size_t i = 0; models && i < l->n_models; i++)
        json_array_append_new(models,
                              json_pack("{s:s,s:s,s:b}", "name", l->models[i].name, "status",
                                        l->models[i].status, "served", l->models[i].served));
    json_t *c = json_pack("{s:i,s:s,s:s,s:s,s:I,s:I,s:I,s:o,s:s,s:s,s:s}", "v", 1, "name", l->name,
                          "mesh_id", l->mesh_id, "region", l->region, "node_count",
                          (json_int_t)l->node_count, "mem_total", (json_int_t)l->mem_total,
                          "mem_free", (json_int_t)l->mem_free, "models", models, "version",
                          l->version, "token", l->token, "node", l->node);
    char *s = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    if (!rc) rc = s ? nostr_event_set_content(ev, s) : -ENOMEM;
    free(s);
    if (rc) nostr_event_free(ev);
    return rc;
}

static bool get_str(const json_t *o, const char *key, char *out, size_t cap)
{
    json_t *j = json_object_get(o, key);
    if (!json_is_string(j) || json_string_length(j) >= cap) return false;
    memcpy(out, json_string_value(j), json_string_length(j) + 1);
    return strlen(out) == json_string_length(j);
}

static bool get_u64(const json_t *o, const char *key, uint64_t max, uint64_t *out)
{
    json_t *j = json_object_get(o, key);
    if (!json_is_integer(j) || json_integer_value(j) < 0 || (uint64_t)json_integer_value(j) > max)
        return false;
    *out = (uint64_t)json_integer_value(j);
    return true;
}

#define FAIL(code, ...)                                                                            \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        rc = code;                                                                                 \
        goto out;                                                                                  \
    } while (0)

int listing_from_event(const nostr_event_t *ev, int64_t now_s, mesh_listing_t *l, char *err,
                       size_t errlen)
{
    int rc = 0;
    json_t *c = NULL;
    memset(l, 0, sizeof *l);
    bool ours = false;
    for (size_t i = 0; i < ev->n_tags; i++)
        if (ev->tags[i].n >= 2 && strcmp(ev->tags[i].v[0], "t") == 0 &&
            strcmp(ev->tags[i].v[1], LISTING_TAG) == 0)
            ours = true;
    if (ev->kind != LISTING_KIND || !ours) FAIL(-EINVAL, "not a mesh-llm listing");
    const char *d = nostr_event_tag(ev, "d"), *exp = nostr_event_tag(ev, "expiration");
    if (!d || !d[0] || strlen(d) > MESH_ID_MAX) FAIL(-EINVAL, "no mesh id (d tag)");
    char *end;
    long long e = exp ? strtoll(exp, &end, 10) : 0;
    if (!exp || !exp[0] || *end || e <= 0) FAIL(-EINVAL, "no expiration tag");
    l->expires_at = e;
    l->created_at = ev->created_at;
    if (e <= now_s) FAIL(-ETIME, "expired %lld s ago", (long long)(now_s - e));
    /* a listing from the future would pin itself as the newest, one that lives for days would
     * outlive its mesh: both refused */
    if (ev->created_at > now_s + LISTING_MAX_SKEW_S)
        FAIL(-EINVAL, "created %lld s in the future", (long long)(ev->created_at - now_s));
    if (e - ev->created_at > LISTING_MAX_TTL_S)
        FAIL(-EINVAL, "expires %lld s after its creation (at most %d)",
             (long long)(e - ev->created_at), LISTING_MAX_TTL_S);
    json_error_t je;
    c = json_loads(ev->content ? ev->content : "", JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(c)) FAIL(-EINVAL, "content is not a JSON object");
    uint64_t v = 0, nodes = 0;
    if (!get_u64(c, "v", 1000, &v) || v != 1) FAIL(-EINVAL, "unknown listing version");
    if (!get_str(c, "mesh_id", l->mesh_id, sizeof l->mesh_id) || strcmp(l->mesh_id, d) != 0)
        FAIL(-EINVAL, "content mesh_id differs from the d tag");
    if (!get_str(c, "name", l->name, sizeof l->name) ||
        !get_str(c, "region", l->region, sizeof l->region) ||
        !get_str(c, "version", l->version, sizeof l->version) ||
        !get_str(c, "token", l->token, sizeof l->token) ||
        !get_str(c, "node", l->node, sizeof l->node))
        FAIL(-EINVAL, "name, region, version, token or node missing or too long");
    if (!get_u64(c, "node_count", 1000000, &nodes) ||
        !get_u64(c, "mem_total", UINT64_MAX >> 1, &l->mem_total) ||
        !get_u64(c, "mem_free", UINT64_MAX >> 1, &l->mem_free))
        FAIL(-EINVAL, "node_count or memory missing");
    l->node_count = (uint32_t)nodes;
    json_t *models = json_object_get(c, "models");
    if (!json_is_array(models) || json_array_size(models) > LISTING_MAX_MODELS)
        FAIL(-EINVAL, "models is not an array of at most %d", LISTING_MAX_MODELS);
    size_t i;
    json_t *m;
    json_array_foreach(models, i, m)
    {
        listing_model_t *lm = &l->models[l->n_models];
        json_t *served = json_object_get(m, "served");
        if (!json_is_object(m) || !get_str(m, "name", lm->name, sizeof lm->name) ||
            !get_str(m, "status", lm->status, sizeof lm->status) || !json_is_boolean(served))
            FAIL(-EINVAL, "model %zu is malformed", i);
        lm->served = json_is_true(served);
        l->n_models++;
    }
    token_t t;
    char terr[128];
    if (token_decode(l->token, strlen(l->token), &t, terr, sizeof terr) != 0)
        FAIL(-EINVAL, "invalid invite token: %s", terr);
    bool same = strcmp(t.mesh_id, l->mesh_id) == 0;
    memset(&t, 0, sizeof t);
    if (!same) FAIL(-EINVAL, "the token is for another mesh");
    memcpy(l->publisher, ev->pubkey, sizeof l->publisher);
    memcpy(l->event_id, ev->id, sizeof l->event_id);
out:
    json_decref(c);
    return rc;
}

bool listing_has_model(const mesh_listing_t *l, const char *model)
{
    if (!model || !model[0]) return true;
    for (size_t i = 0; i < l->n_models; i++)
        if (strcmp(l->models[i].name, model) == 0) return true;
    return false;
}

int listing_set_init(listing_set_t *s)
{
    s->n = 0;
    s->items = calloc(LISTING_SET_MAX, sizeof *s->items);
    return s->items ? 0 : -ENOMEM;
}

void listing_set_free(listing_set_t *s)
{
    free(s->items);
    s->items = NULL;
    s->n = 0;
}

const mesh_listing_t *listing_set_find(const listing_set_t *s, const char *mesh_id)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->items[i].mesh_id, mesh_id) == 0) return &s->items[i];
    return NULL;
}

bool listing_set_add(listing_set_t *s, const mesh_listing_t *l)
{
    mesh_listing_t *cur = (mesh_listing_t *)listing_set_find(s, l->mesh_id);
    if (cur) {
        if (l->created_at < cur->created_at ||
            (l->created_at == cur->created_at && strcmp(l->event_id, cur->event_id) <= 0))
            return false;
        *cur = *l;
        return true;
    }
    if (s->n >= LISTING_SET_MAX) return false;
    s->items[s->n++] = *l;
    return true;
}

void listing_set_expire(listing_set_t *s, int64_t now_s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->items[i].expires_at > now_s) s->items[k++] = s->items[i];
    s->n = k;
}

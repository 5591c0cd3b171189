#include "admit.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define IDX_BITS 14 /* ADMIT_MAX_ENTRIES < 1 << IDX_BITS */
#define RETRY_MAX_S 300

const char *admit_why_code(admit_why_t w)
{
    switch (w) {
    case ADMIT_WHY_QUEUE_FULL:
        return "queue_full";
    case ADMIT_WHY_KEY_QUEUE_FULL:
        return "key_queue_share_exceeded";
    case ADMIT_WHY_TPM:
        return "tokens_per_minute_exceeded";
    case ADMIT_WHY_QUEUE_TIMEOUT:
        return "queue_timeout";
    case ADMIT_WHY_NO_SPACE:
        return "too_many_requests";
    case ADMIT_WHY_NO_HOST:
        return "no_host";
    default:
        return "none";
    }
}

unsigned admit_why_status(admit_why_t w)
{
    return w == ADMIT_WHY_QUEUE_TIMEOUT || w == ADMIT_WHY_NO_HOST ? 503 : 429;
}

void admit_init(admit_t *a, unsigned queue_len, uint64_t max_wait_ms)
{
    memset(a, 0, sizeof *a);
    a->queue_len = queue_len;
    a->max_wait_ms = max_wait_ms;
    snprintf(a->tiers[0].name, sizeof a->tiers[0].name, "default");
    a->n_tiers = 1;
    snprintf(a->keys[0].name, sizeof a->keys[0].name, "anonymous");
    a->n_keys = 1;
}

int admit_find_tier(const admit_t *a, const char *name)
{
    for (size_t i = 0; i < a->n_tiers; i++)
        if (strcmp(a->tiers[i].name, name) == 0) return (int)i;
    return -ENOENT;
}

int admit_add_tier(admit_t *a, const admit_tier_t *t)
{
    if (!t->name[0] || strlen(t->name) >= ADMIT_NAME_MAX || t->queue_share > 100) return -EINVAL;
    int i = admit_find_tier(a, t->name);
    if (i == 0) {
        a->tiers[0] = *t;
        return 0;
    }
    if (i > 0) return -EEXIST;
    if (a->n_tiers >= ADMIT_MAX_TIERS) return -ENOSPC;
    a->tiers[a->n_tiers] = *t;
    return (int)a->n_tiers++;
}

int admit_add_key(admit_t *a, const char *name, int tier)
{
    if (tier < 0 || (size_t)tier >= a->n_tiers || strlen(name) >= ADMIT_NAME_MAX) return -EINVAL;
    if (a->n_keys >= ADMIT_MAX_KEYS) return -ENOSPC;
    admit_key_t *k = &a->keys[a->n_keys];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", name);
    k->tier = tier;
    return (int)a->n_keys++;
}

int admit_find_model(const admit_t *a, const char *name)
{
    for (size_t i = 0; i < a->n_models; i++)
        if (strcmp(a->models[i].name, name) == 0) return (int)i;
    return -ENOENT;
}

int admit_model(admit_t *a, const char *name, unsigned cap)
{
    int i = admit_find_model(a, name);
    if (i >= 0) {
        a->models[i].cap = cap;
        return i;
    }
    if (a->n_models >= ADMIT_MAX_MODELS || strlen(name) >= ADMIT_NAME_MAX) return -ENOSPC;
    admit_model_t *m = &a->models[a->n_models];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->cap = cap;
    return (int)a->n_models++;
}

static admit_entry_t *entry_of(admit_t *a, uint64_t id)
{
    if (!id) return NULL;
    uint64_t idx = id & ((1u << IDX_BITS) - 1);
    if (idx >= ADMIT_MAX_ENTRIES) return NULL;
    admit_entry_t *e = &a->entries[idx];
    return e->id == id ? e : NULL;
}

const admit_entry_t *admit_entry(const admit_t *a, uint64_t id)
{
    return entry_of((admit_t *)a, id);
}

static admit_entry_t *new_entry(admit_t *a)
{
    for (size_t n = 0; n < ADMIT_MAX_ENTRIES; n++) {
        size_t i = (size_t)(a->next_id + n) % ADMIT_MAX_ENTRIES;
        admit_entry_t *e = &a->entries[i];
        if (e->state != ADMIT_FREE) continue;
        a->next_id++;
        memset(e, 0, sizeof *e);
        e->id = (a->next_id << IDX_BITS) | i;
        e->seq = ++a->next_seq;
        return e;
    }
    return NULL;
}

/* ---- tokens per minute ---- */

uint64_t admit_key_tokens(const admit_t *a, int key, uint64_t now)
{
    const admit_key_t *k = &a->keys[key];
    uint64_t sec = now / 1000, sum = 0;
    for (size_t i = 0; i < ADMIT_TPM_BUCKETS; i++)
        if (k->tok[i] && k->tok_sec[i] + ADMIT_TPM_BUCKETS > sec) sum += k->tok[i];
    return sum;
}

void admit_tokens(admit_t *a, int key, uint64_t tokens, uint64_t now)
{
    if (key < 0 || (size_t)key >= a->n_keys || !tokens) return;
    admit_key_t *k = &a->keys[key];
    uint64_t sec = now / 1000;
    size_t b = sec % ADMIT_TPM_BUCKETS;
    if (k->tok_sec[b] != sec) {
        k->tok[b] = 0;
        k->tok_sec[b] = sec;
    }
    k->tok[b] += tokens;
}

/* Seconds until the key's window holds fewer than tpm tokens again. */
static unsigned tpm_retry_s(const admit_t *a, int key, uint64_t tpm, uint64_t now)
{
    const admit_key_t *k = &a->keys[key];
    uint64_t sec = now / 1000, used = admit_key_tokens(a, key, now);
    for (uint64_t s = 1; s <= ADMIT_TPM_BUCKETS; s++) {
        /* at sec + s, buckets older than sec + s - 59 have left */
        for (size_t i = 0; i < ADMIT_TPM_BUCKETS; i++)
            if (k->tok[i] && k->tok_sec[i] + ADMIT_TPM_BUCKETS == sec + s) used -= k->tok[i];
        if (used < tpm) return (unsigned)s;
    }
    return ADMIT_TPM_BUCKETS;
}

/* ---- decisions ---- */

static unsigned key_cap(const admit_t *a, int key)
{
    return a->tiers[a->keys[key].tier].max_concurrent;
}

static bool key_has_room(const admit_t *a, int key)
{
    unsigned c = key_cap(a, key);
    return !c || a->keys[key].in_flight < c;
}

static bool model_has_room(const admit_model_t *m)
{
    return !m->blocked && (!m->cap || m->in_flight < m->cap);
}

/* How many of a model's queue places one key may hold. */
static unsigned key_queue_places(const admit_t *a, int key)
{
    unsigned share = a->tiers[a->keys[key].tier].queue_share;
    if (!share || share >= 100) return a->queue_len;
    unsigned n = (a->queue_len * share + 99) / 100;
    return n ? n : 1;
}

static unsigned key_queued_for(const admit_t *a, int model, int key)
{
    unsigned n = 0;
    for (size_t i = 0; i < ADMIT_MAX_ENTRIES; i++) {
        const admit_entry_t *e = &a->entries[i];
        if (e->state == ADMIT_QUEUED_E && e->model == model && e->key == key) n++;
    }
    return n;
}

/* A guess at when a place frees: the queue ahead drained by the cap at the average service
 * time, at least 1 s. */
static unsigned retry_after(const admit_model_t *m)
{
    uint64_t svc = m->service_ms ? m->service_ms : 1000;
    uint64_t slots = m->cap ? m->cap : 1;
    uint64_t ms = svc * (m->queued + 1) / slots;
    uint64_t s = (ms + 999) / 1000;
    return s < 1 ? 1 : s > RETRY_MAX_S ? RETRY_MAX_S : (unsigned)s;
}

static void start(admit_t *a, admit_entry_t *e, uint64_t now)
{
    admit_model_t *m = &a->models[e->model];
    admit_key_t *k = &a->keys[e->key];
    e->state = ADMIT_RUNNING;
    e->since = now;
    m->in_flight++;
    m->admitted++;
    k->in_flight++;
    k->admitted++;
    k->last_served = ++a->serve_stamp;
}

admit_verdict_t admit_try(admit_t *a, int model, int key, uint64_t now, uint64_t *id,
                          admit_reject_t *rej)
{
    *id = 0;
    rej->why = ADMIT_WHY_NONE;
    rej->retry_after_s = 0;
    if (key < 0 || (size_t)key >= a->n_keys) key = 0;
    admit_model_t *m = &a->models[model];
    admit_key_t *k = &a->keys[key];
    const admit_tier_t *t = &a->tiers[k->tier];
    if (t->tpm && admit_key_tokens(a, key, now) >= t->tpm) {
        rej->why = ADMIT_WHY_TPM;
        rej->retry_after_s = tpm_retry_s(a, key, t->tpm, now);
        goto reject;
    }
    /* FIFO: nobody overtakes requests already queued for the model (of a key with room) */
    bool queue_ahead = false;
    for (size_t i = 0; i < ADMIT_MAX_ENTRIES && m->queued && !queue_ahead; i++) {
        const admit_entry_t *e = &a->entries[i];
        queue_ahead = e->state == ADMIT_QUEUED_E && e->model == model && key_has_room(a, e->key);
    }
    bool go = model_has_room(m) && key_has_room(a, key) && !queue_ahead;
    if (!go) {
        if (m->no_host) {
            rej->why = ADMIT_WHY_NO_HOST;
            rej->retry_after_s = ADMIT_NO_HOST_RETRY_S;
            goto reject;
        }
        unsigned places = key_queue_places(a, key);
        if (places < a->queue_len && key_queued_for(a, model, key) >= places) {
            rej->why = ADMIT_WHY_KEY_QUEUE_FULL;
            rej->retry_after_s = retry_after(m);
            goto reject;
        }
        if (m->queued >= a->queue_len) {
            rej->why = ADMIT_WHY_QUEUE_FULL;
            rej->retry_after_s = retry_after(m);
            goto reject;
        }
    }
    admit_entry_t *e = new_entry(a);
    if (!e) {
        rej->why = ADMIT_WHY_NO_SPACE;
        rej->retry_after_s = 1;
        goto reject;
    }
    e->model = model;
    e->key = key;
    *id = e->id;
    if (go) {
        start(a, e, now);
        return ADMIT_GO;
    }
    e->state = ADMIT_QUEUED_E;
    e->since = now;
    m->queued++;
    k->queued++;
    return ADMIT_QUEUED;
reject:
    m->rejected++;
    k->rejected++;
    return ADMIT_REJECT;
}

static void unqueue(admit_t *a, admit_entry_t *e)
{
    a->models[e->model].queued--;
    a->keys[e->key].queued--;
}

void admit_release(admit_t *a, uint64_t id, uint64_t now)
{
    admit_entry_t *e = entry_of(a, id);
    if (!e) return;
    admit_model_t *m = &a->models[e->model];
    if (e->state == ADMIT_QUEUED_E) {
        unqueue(a, e);
        m->cancelled++;
    } else if (e->state == ADMIT_RUNNING) {
        m->in_flight--;
        a->keys[e->key].in_flight--;
        uint64_t took = now > e->since ? now - e->since : 0;
        m->service_ms = m->service_ms ? (m->service_ms * 7 + took) / 8 : (took ? took : 1);
    }
    memset(e, 0, sizeof *e);
}

void admit_set_blocked(admit_t *a, int model, bool blocked)
{
    if (model >= 0 && (size_t)model < a->n_models) a->models[model].blocked = blocked;
}

bool admit_set_no_host(admit_t *a, int model, bool no_host)
{
    if (model < 0 || (size_t)model >= a->n_models || a->models[model].no_host == no_host)
        return false;
    a->models[model].no_host = no_host;
    return true;
}

uint64_t admit_deadline(const admit_t *a)
{
    uint64_t d = UINT64_MAX;
    for (size_t i = 0; i < ADMIT_MAX_ENTRIES; i++) {
        const admit_entry_t *e = &a->entries[i];
        if (e->state == ADMIT_QUEUED_E && e->since + a->max_wait_ms < d)
            d = e->since + a->max_wait_ms;
    }
    return d;
}

uint64_t admit_oldest_queued(const admit_t *a, int model)
{
    uint64_t t = UINT64_MAX;
    for (size_t i = 0; i < ADMIT_MAX_ENTRIES && a->models[model].queued; i++) {
        const admit_entry_t *e = &a->entries[i];
        if (e->state == ADMIT_QUEUED_E && e->model == model && e->since < t) t = e->since;
    }
    return t;
}

bool admit_next(admit_t *a, uint64_t now, admit_action_t *out)
{
    memset(out, 0, sizeof *out);
    /* 1. a wait that ran out or a model no host serves (the oldest first) */
    admit_entry_t *old = NULL;
    for (size_t i = 0; i < ADMIT_MAX_ENTRIES; i++) {
        admit_entry_t *e = &a->entries[i];
        if (e->state == ADMIT_QUEUED_E &&
            (e->since + a->max_wait_ms <= now || a->models[e->model].no_host) &&
            (!old || e->seq < old->seq))
            old = e;
    }
    if (old) {
        admit_model_t *m = &a->models[old->model];
        out->kind = ADMIT_ACT_EXPIRE;
        out->why = old->since + a->max_wait_ms <= now ? ADMIT_WHY_QUEUE_TIMEOUT : ADMIT_WHY_NO_HOST;
        out->id = old->id;
        out->model = old->model;
        out->key = old->key;
        out->waited_ms = now - old->since;
        unqueue(a, old);
        m->expired++;
        m->rejected++;
        a->keys[old->key].rejected++;
        out->retry_after_s = out->why == ADMIT_WHY_NO_HOST ? ADMIT_NO_HOST_RETRY_S : retry_after(m);
        memset(old, 0, sizeof *old);
        return true;
    }
    /* 2. a queued request that may start: the model (with room) whose startable request came
     * first; in it, the key served least recently among those with room, its earliest request */
    admit_entry_t *first = NULL;
    for (size_t i = 0; i < ADMIT_MAX_ENTRIES; i++) {
        admit_entry_t *e = &a->entries[i];
        if (e->state == ADMIT_QUEUED_E && model_has_room(&a->models[e->model]) &&
            key_has_room(a, e->key) && (!first || e->seq < first->seq))
            first = e;
    }
    if (!first) return false;
    admit_entry_t *best = first;
    for (size_t i = 0; i < ADMIT_MAX_ENTRIES; i++) {
        admit_entry_t *e = &a->entries[i];
        if (e->state != ADMIT_QUEUED_E || e->model != first->model || !key_has_room(a, e->key))
            continue;
        uint64_t ls = a->keys[e->key].last_served, lb = a->keys[best->key].last_served;
        if (ls < lb || (ls == lb && e->seq < best->seq)) best = e;
    }
    unqueue(a, best);
    out->kind = ADMIT_ACT_GO;
    out->id = best->id;
    out->model = best->model;
    out->key = best->key;
    out->waited_ms = now - best->since;
    a->models[best->model].wait_ms_total += out->waited_ms;
    start(a, best, now);
    return true;
}

/* the value after the last `needle` in tail (0: none) */
static uint64_t last_number(const char *tail, size_t len, const char *needle)
{
    size_t nl = strlen(needle);
    const char *last = NULL;
    for (const char *p = tail; p < tail + len;) {
        const char *q = memmem(p, (size_t)(tail + len - p), needle, nl);
        if (!q) break;
        last = q;
        p = q + 1;
    }
    if (!last) return 0;
    char num[24];
    size_t n = 0;
    for (const char *p = last + nl; p < tail + len && n < sizeof num - 1 && *p >= '0' && *p <= '9';
         p++)
        num[n++] = *p;
    num[n] = '\0';
    return strtoull(num, NULL, 10);
}

uint64_t admit_tail_tokens(const char *tail, size_t len, unsigned choices)
{
    static const char *const NEEDLES[] = {"\"predicted_n\":", "\"completion_tokens\":",
                                          "\"output_tokens\":", "\"tokens_predicted\":"};
    if (!tail) return 0;
    uint64_t n = 0;
    for (size_t i = 0; i < sizeof NEEDLES / sizeof NEEDLES[0]; i++) {
        uint64_t v = last_number(tail, len, NEEDLES[i]);
        if (v > n) n = v;
    }
    if (n) return n * (choices ? choices : 1);
    /* cut short: one token per event */
    for (const char *p = tail; p + 5 <= tail + len; p++)
        if ((p == tail || p[-1] == '\n') && memcmp(p, "data:", 5) == 0) n++;
    return n;
}

#include "mm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

unsigned mm_device_class(const char *backend)
{
    static const char *const npu[] = {"CANN", "HTP", "ZDNN"};
    if (!backend || !*backend || strcasecmp(backend, "CPU") == 0) return MM_DEV_CPU;
    if (strncasecmp(backend, "NPU", 3) == 0) return MM_DEV_NPU;
    for (size_t i = 0; i < sizeof npu / sizeof npu[0]; i++)
        if (strcasecmp(backend, npu[i]) == 0) return MM_DEV_NPU;
    return MM_DEV_GPU;
}

const char *mm_device_name(unsigned bits, char *buf, size_t len)
{
    static const char *const names[] = {"cpu", "gpu", "npu"};
    size_t off = 0;
    if (len) buf[0] = '\0';
    for (unsigned i = 0; i < 3; i++)
        if (bits & (1u << i) && off < len)
            off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? "|" : "", names[i]);
    if (!off && len) snprintf(buf, len, "cpu");
    return buf;
}

const char *mm_type_name(mm_type_t t)
{
    switch (t) {
    case MM_EMBEDDING:
        return "embedding";
    case MM_RERANKING:
        return "reranking";
    default:
        return "llm";
    }
}

const char *mm_state_name(mm_state_t s)
{
    switch (s) {
    case MM_LOADING:
        return "loading";
    case MM_LOADED:
        return "loaded";
    case MM_UNLOADING:
        return "unloading";
    default:
        return "unloaded";
    }
}

void mm_init(mm_t *mm, const unsigned max_loaded[MM_N_TYPES])
{
    memset(mm, 0, sizeof *mm);
    for (int t = 0; t < MM_N_TYPES; t++)
        mm->max_loaded[t] = max_loaded && max_loaded[t] ? max_loaded[t] : 1;
}

void mm_set_ledger(mm_t *mm, ledger_t *l)
{
    mm->ledger = l;
}

void mm_set_bytes(mm_model_t *m, uint64_t bytes)
{
    m->bytes = bytes;
}

/* What models may use: the offer minus what worker shards hold. */
static uint64_t model_budget(const mm_t *mm)
{
    uint64_t w = ledger_held_kind(mm->ledger, LEDGER_WORKER);
    return mm->ledger->offered > w ? mm->ledger->offered - w : 0;
}

bool mm_can_fit(const mm_t *mm, const mm_model_t *m)
{
    return mm_fits_beside(mm, m, 0);
}

bool mm_fits_beside(const mm_t *mm, const mm_model_t *m, uint64_t beside)
{
    if (!mm->ledger || !m->bytes) return true;
    uint64_t budget = model_budget(mm);
    return m->bytes <= budget && beside <= budget - m->bytes;
}

static void hold(mm_t *mm, mm_model_t *m, bool loading)
{
    if (mm->ledger && m->bytes) ledger_set(mm->ledger, m->name, LEDGER_MODEL, m->bytes, loading);
}

static void release(mm_t *mm, mm_model_t *m)
{
    if (mm->ledger) ledger_clear(mm->ledger, m->name, LEDGER_MODEL);
}

mm_model_t *mm_find(mm_t *mm, const char *name)
{
    for (size_t i = 0; i < mm->n_models; i++)
        if (strcmp(mm->models[i].name, name) == 0) return &mm->models[i];
    return NULL;
}

mm_model_t *mm_add(mm_t *mm, const char *name, mm_type_t type, unsigned device)
{
    if (mm->n_models >= MM_MAX_MODELS || strlen(name) >= MM_NAME_MAX || mm_find(mm, name) ||
        (unsigned)type >= MM_N_TYPES)
        return NULL;
    mm_model_t *m = &mm->models[mm->n_models++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->type = type;
    m->device = device ? device : MM_DEV_CPU;
    return m;
}

static void push_r(mm_t *mm, mm_action_kind_t kind, mm_model_t *m, unsigned count, int status,
                   mm_fail_reason_t reason)
{
    if (mm->act_len >= MM_MAX_ACTIONS)
        return; /* cannot happen: at most a few actions per model per event */
    mm_action_t *a = &mm->actions[(mm->act_head + mm->act_len) % MM_MAX_ACTIONS];
    a->kind = kind;
    a->model = m;
    a->count = count;
    a->status = status;
    a->reason = reason;
    mm->act_len++;
}

static void push(mm_t *mm, mm_action_kind_t kind, mm_model_t *m, unsigned count, int status)
{
    push_r(mm, kind, m, count, status, MM_FAIL_LOAD);
}

bool mm_next_action(mm_t *mm, mm_action_t *out)
{
    if (mm->act_len == 0) return false;
    *out = mm->actions[mm->act_head];
    mm->act_head = (mm->act_head + 1) % MM_MAX_ACTIONS;
    mm->act_len--;
    return true;
}

static void enqueue(mm_t *mm, mm_model_t *m, uint64_t now)
{
    if (m->queued || mm->current == m || m->state == MM_LOADING || mm->qlen >= MM_MAX_MODELS)
        return;
    m->wait_since = now;
    mm->queue[mm->qlen++] = m;
    m->queued = true;
}

static void dequeue(mm_t *mm, mm_model_t *m)
{
    for (size_t i = 0; i < mm->qlen; i++) {
        if (mm->queue[i] == m) {
            memmove(&mm->queue[i], &mm->queue[i + 1], (mm->qlen - i - 1) * sizeof mm->queue[0]);
            mm->qlen--;
            m->queued = false;
            return;
        }
    }
}

unsigned mm_count_loaded(const mm_t *mm, mm_type_t type)
{
    unsigned n = 0;
    for (size_t i = 0; i < mm->n_models; i++)
        if (mm->models[i].type == type && mm->models[i].state != MM_UNLOADED) n++;
    return n;
}

static bool idle(const mm_model_t *m)
{
    return m->state == MM_LOADED && m->in_flight == 0 && m->waiters == 0 && !m->unload_pending;
}

/* Pending requests protect a loaded model while the load waiting for a slot is within its
 * fairness bound. */
static bool protect(const mm_t *mm, uint64_t now)
{
    return mm->current && mm->fair_ms && now < mm->current->wait_since + mm->fair_ms;
}

/* May leave to make room for the current load. */
static bool evictable(const mm_t *mm, const mm_model_t *m, uint64_t now)
{
    return idle(m) && !m->pinned && !(m->pending && protect(mm, now));
}

static void start_unload(mm_t *mm, mm_model_t *m)
{
    m->state = MM_UNLOADING;
    m->unload_pending = false;
    m->keep_alive = 0; /* it lasts for this load */
    push(mm, MM_ACT_UNLOAD, m, 0, 0);
}

static void serve_waiters(mm_t *mm, mm_model_t *m, uint64_t now)
{
    if (m->waiters == 0) return;
    m->in_flight += m->waiters;
    m->last_use = now;
    push(mm, MM_ACT_SERVE, m, m->waiters, 0);
    m->waiters = 0;
}

static void fail_waiters(mm_t *mm, mm_model_t *m, int status)
{
    if (m->waiters == 0) return;
    push(mm, MM_ACT_FAIL, m, m->waiters, status);
    m->waiters = 0;
}

/* Memory for m: idle models of any type leave, least recently used first, until m fits with
 * what stays; busy ones are waited for. 1: fits now, 0: wait, -1: can never fit. */
static int make_memory(mm_t *mm, mm_model_t *m, uint64_t now)
{
    if (!mm->ledger || !m->bytes) return 1;
    uint64_t budget = model_budget(mm);
    if (m->bytes > budget) return -1;
    uint64_t staying = 0, leaving = 0;
    for (size_t i = 0; i < mm->n_models; i++) {
        mm_model_t *x = &mm->models[i];
        if (x == m || x->state == MM_UNLOADED) continue;
        if (x->state == MM_UNLOADING)
            leaving += x->bytes;
        else
            staying += x->bytes;
    }
    while (staying > budget - m->bytes) {
        mm_model_t *victim = NULL;
        for (size_t i = 0; i < mm->n_models; i++) {
            mm_model_t *x = &mm->models[i];
            if (x == m || !evictable(mm, x, now) || !x->bytes) continue;
            if (!victim || x->last_use < victim->last_use ||
                (x->last_use == victim->last_use && strcmp(x->name, victim->name) < 0))
                victim = x;
        }
        if (!victim) return 0; /* the rest is busy: wait until a model becomes idle */
        start_unload(mm, victim);
        staying -= victim->bytes;
        leaving += victim->bytes;
    }
    return leaving ? 0 : 1;
}

/* Make room for mm->current. Returns 1 when the load may start now, 0 to wait, -1 when pinned
 * models hold every slot of its type. */
static int make_room(mm_t *mm, mm_model_t *m, uint64_t now)
{
    bool ready = true;
    if (mm->drain_all) {
        for (size_t i = 0; i < mm->n_models; i++)
            if (mm->models[i].state == MM_UNLOADING) return 0;
        mm->drain_all = false;
    }
    /* A device that holds one model at a time: its holder goes, whatever its type. */
    if (m->device & MM_DEV_NPU) {
        for (size_t i = 0; i < mm->n_models; i++) {
            mm_model_t *x = &mm->models[i];
            if (x == m || !(x->device & MM_DEV_NPU) || x->state == MM_UNLOADED) continue;
            if (idle(x)) start_unload(mm, x);
            ready = false; /* wait for the unload (or for x to become idle) */
        }
    }
    /* Slots of m's type: models that will still be there once in-progress unloads finish. */
    unsigned staying = 0, leaving = 0, pinned = 0;
    for (size_t i = 0; i < mm->n_models; i++) {
        mm_model_t *x = &mm->models[i];
        if (x == m || x->type != m->type || x->state == MM_UNLOADED) continue;
        if (x->pinned && x->state != MM_UNLOADING) pinned++;
        /* NPU holders leave before m loads (rule above), so they free their slot too */
        if (x->state == MM_UNLOADING || ((m->device & MM_DEV_NPU) && (x->device & MM_DEV_NPU)))
            leaving++;
        else
            staying++;
    }
    if (pinned >= mm->max_loaded[m->type]) return -1;
    while (staying >= mm->max_loaded[m->type]) {
        mm_model_t *victim = NULL;
        for (size_t i = 0; i < mm->n_models; i++) {
            mm_model_t *x = &mm->models[i];
            if (x == m || x->type != m->type || !evictable(mm, x, now)) continue;
            if (!victim || x->last_use < victim->last_use ||
                (x->last_use == victim->last_use && strcmp(x->name, victim->name) < 0))
                victim = x;
        }
        if (!victim) return 0; /* every candidate is busy: wait until one is idle */
        start_unload(mm, victim);
        mm->switches++;
        staying--;
        leaving++;
    }
    return ready && leaving == 0 ? 1 : 0;
}

static void step(mm_t *mm, uint64_t now)
{
    for (;;) {
        for (size_t i = 0; i < mm->n_models; i++) {
            mm_model_t *x = &mm->models[i];
            if (x->state == MM_LOADED && mm_expiry(x) <= now) x->unload_pending = true;
            if (x->unload_pending && x->state == MM_LOADED && x->in_flight == 0)
                start_unload(mm, x);
        }
        if (!mm->current) {
            if (mm->qlen == 0) return;
            mm_model_t *m = mm->queue[0];
            dequeue(mm, m);
            mm->current = m;
            mm->current_started = false;
            m->attempt = 0;
            if (m->state == MM_LOADED) { /* already there (loaded meanwhile) */
                serve_waiters(mm, m, now);
                mm->current = NULL;
                continue;
            }
        }
        mm_model_t *m = mm->current;
        if (mm->current_started || m->state == MM_UNLOADING)
            return; /* a load in progress, or m itself still going away */
        if (!mm_can_fit(mm, m)) {
            /* never fits here: fail now rather than evict models for nothing */
            push_r(mm, MM_ACT_FAIL, m, m->waiters, 503, MM_FAIL_MEMORY);
            m->waiters = 0;
            m->unload_pending = m->reload = false;
            mm->current = NULL;
            continue;
        }
        int room = make_room(mm, m, now);
        if (room < 0) {
            push_r(mm, MM_ACT_FAIL, m, m->waiters, 503, MM_FAIL_PINNED);
            m->waiters = 0;
            m->unload_pending = m->reload = false;
            mm->current = NULL;
            continue;
        }
        if (room == 0 || make_memory(mm, m, now) != 1) return;
        m->state = MM_LOADING;
        hold(mm, m, true);
        m->last_use = now;
        mm->current_started = true;
        push(mm, MM_ACT_LOAD, m, 0, 0);
        return;
    }
}

void mm_set_fair_ms(mm_t *mm, uint64_t fair_ms)
{
    mm->fair_ms = fair_ms;
}

void mm_set_pending(mm_t *mm, mm_model_t *m, unsigned pending, uint64_t now)
{
    bool less = pending < m->pending;
    m->pending = pending;
    if (less) step(mm, now);
}

void mm_set_pinned(mm_t *mm, mm_model_t *m, bool pinned)
{
    (void)mm;
    m->pinned = pinned;
}

bool mm_hold(const mm_t *mm, const mm_model_t *m, uint64_t now)
{
    const mm_model_t *c = mm->current;
    return c && !mm->current_started && c != m && c->type == m->type && !m->pinned &&
           m->state == MM_LOADED && mm->fair_ms && now >= c->wait_since + mm->fair_ms;
}

uint64_t mm_expiry(const mm_model_t *m)
{
    if (!m->keep_alive || m->state != MM_LOADED || m->unload_pending || m->in_flight ||
        m->waiters || m->pending)
        return UINT64_MAX;
    return m->last_use > UINT64_MAX - m->keep_alive ? UINT64_MAX - 1 : m->last_use + m->keep_alive;
}

void mm_set_keep_alive(mm_t *mm, mm_model_t *m, uint64_t ms, uint64_t now)
{
    m->keep_alive = ms;
    if (ms && m->state == MM_LOADED) m->last_use = now; /* an access: its clock starts now */
    step(mm, now);
}

uint64_t mm_deadline(const mm_t *mm)
{
    uint64_t due = UINT64_MAX;
    for (size_t i = 0; i < mm->n_models; i++) {
        uint64_t e = mm_expiry(&mm->models[i]);
        if (e < due) due = e;
    }
    const mm_model_t *c = mm->current;
    if (!c || mm->current_started || !mm->fair_ms) return due;
    return c->wait_since + mm->fair_ms < due ? c->wait_since + mm->fair_ms : due;
}

void mm_tick(mm_t *mm, uint64_t now)
{
    step(mm, now);
}

mm_req_result_t mm_request_begin(mm_t *mm, mm_model_t *m, uint64_t now)
{
    if (m->state == MM_LOADED && !m->unload_pending) {
        m->in_flight++;
        m->last_use = now;
        return MM_SERVE_NOW;
    }
    m->waiters++;
    if (m->state == MM_UNLOADED) enqueue(mm, m, now);
    step(mm, now);
    return MM_WAIT;
}

void mm_request_end(mm_t *mm, mm_model_t *m, uint64_t now)
{
    if (m->in_flight) m->in_flight--;
    m->last_use = now;
    step(mm, now);
}

void mm_request_cancel(mm_t *mm, mm_model_t *m)
{
    if (m->waiters) m->waiters--;
}

void mm_load(mm_t *mm, mm_model_t *m, uint64_t now)
{
    if ((m->state == MM_LOADED || m->state == MM_LOADING) && !m->unload_pending) {
        if (m->state == MM_LOADED) m->last_use = now;
        return; /* loaded or on its way: nothing to do */
    }
    if (m->state == MM_UNLOADED)
        enqueue(mm, m, now);
    else
        m->reload = true; /* unloading or unload pending: come back afterwards */
    step(mm, now);
}

void mm_reload(mm_t *mm, mm_model_t *m, uint64_t now)
{
    if (m->state == MM_LOADED || m->state == MM_LOADING) {
        m->unload_pending = true;
        m->reload = true;
    } else if (m->state == MM_UNLOADING) {
        m->reload = true;
    } else {
        enqueue(mm, m, now);
    }
    step(mm, now);
}

int mm_unload(mm_t *mm, mm_model_t *m, uint64_t now)
{
    m->reload = false;
    if (m->queued && m->state == MM_UNLOADED) {
        dequeue(mm, m);
        fail_waiters(mm, m, 503);
        return 0;
    }
    if (m->state != MM_LOADED && m->state != MM_LOADING) return -ENOENT;
    m->unload_pending = true;
    step(mm, now);
    return 0;
}

void mm_load_done(mm_t *mm, mm_model_t *m, bool ok, mm_load_err_t why, uint64_t now)
{
    if (mm->current != m || m->state != MM_LOADING) return; /* stale report */
    mm->current_started = false;
    if (ok) {
        hold(mm, m, false);
        m->state = MM_LOADED;
        m->last_use = now;
        m->loaded_at = now;
        serve_waiters(mm, m, now);
        mm->current = NULL;
        step(mm, now);
        return;
    }
    m->state = MM_UNLOADED;
    release(mm, m);
    if (why == MM_LOAD_ERR_MISSING || why == MM_LOAD_ERR_FINAL) {
        fail_waiters(mm, m, why == MM_LOAD_ERR_MISSING ? 404 : 500);
        m->unload_pending = m->reload = false;
        mm->current = NULL;
    } else if (m->attempt == 0) {
        /* The nuclear option: free everything that can be freed, then try once more. */
        m->attempt = 1;
        for (size_t i = 0; i < mm->n_models; i++)
            if (idle(&mm->models[i]) && !mm->models[i].pinned) start_unload(mm, &mm->models[i]);
        mm->drain_all = true;
    } else {
        fail_waiters(mm, m, 500);
        m->unload_pending = m->reload = false;
        mm->current = NULL;
    }
    step(mm, now);
}

void mm_unload_done(mm_t *mm, mm_model_t *m, uint64_t now)
{
    if (m->state != MM_UNLOADING) return;
    m->state = MM_UNLOADED;
    release(mm, m);
    m->in_flight = 0;
    if (m->waiters || m->reload) {
        m->reload = false;
        enqueue(mm, m, now);
    }
    step(mm, now);
}

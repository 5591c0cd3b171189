/* admission — see admission.h. */
#include "admission.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "meshstat.h"
#include "route.h"
#include "models_int.h"
#include "models_slots.h"
#include "options.h"
#include "tunnel.h"
#include "util.h"

#define KEYS_FILE_MAX 65536
#define REMOTE_NAME "(routed to the mesh)"
#define HELD_POLL_MS 100  /* a model held for a switch: look again this soon */
#define HOST_POLL_MS 1000 /* requests wait: whether their model still has a host, this often */

struct ticket {
    admission_t *ad;
    uint64_t id;
    httpd_req_t *req; /* NULL once finished */
    int needs;
    int model, key;
    unsigned choices; /* the body's "n" (1 when absent): llama-server reports one choice */
    bool started, done;
    bool counted; /* its tokens were counted (the local child's tail or the response's) */
    bool signal;  /* queued through a tunnel whose requester takes the queued signal */
    bool spill;   /* admitted as routed: this node's server for its model was full (deps.spills) */
    ticket_t *next;
};

static uint64_t now_ms(admission_t *ad)
{
    return uv_now(ad->loop);
}

static unsigned cap_of(const model_entry_t *e)
{
    return models_slots(e);
}

/* ---- keys ---- */

static int read_keys_file(const char *path, char **out, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "--api-keys %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -EINVAL;
    }
    if (st.st_mode & (S_IROTH | S_IWOTH)) {
        snprintf(err, errlen,
                 "--api-keys %s: the file is readable or writable by every user of this machine "
                 "and holds secrets; chmod 600 it",
                 path);
        close(fd);
        return -EINVAL;
    }
    char *buf = malloc(KEYS_FILE_MAX + 1);
    ssize_t n = buf ? read(fd, buf, KEYS_FILE_MAX + 1) : -1;
    close(fd);
    if (!buf || n < 0 || n > KEYS_FILE_MAX) {
        snprintf(err, errlen, "--api-keys %s: %s", path,
                 n > KEYS_FILE_MAX ? "larger than 64 KiB" : "cannot read it");
        if (buf) sodium_memzero(buf, KEYS_FILE_MAX + 1);
        free(buf);
        return -EINVAL;
    }
    buf[n] = '\0';
    if (st.st_mode & S_IRGRP)
        LOGW("admission", "--api-keys %s can be read by the file's group; chmod 600 it", path);
    *out = buf;
    return 0;
}

bool admission_has_keys(const admission_t *ad)
{
    return ad->n_secret_keys > 0;
}

static int key_of_secret(const admission_t *ad, const char *given)
{
    unsigned char d[32];
    crypto_generichash(d, sizeof d, (const unsigned char *)given, strlen(given), NULL, 0);
    int found = -1;
    for (size_t i = 0; i < ad->a->n_keys; i++) /* every key compared: no early exit */
        if (ad->has_digest[i] && sodium_memcmp(d, ad->digests[i], sizeof d) == 0) found = (int)i;
    return found;
}

int admission_key_of(const admission_t *ad, const char *authorization)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0) return -1;
    const char *given = authorization + 7;
    while (*given == ' ')
        given++;
    return key_of_secret(ad, given);
}

int admission_req_key(const admission_t *ad, const httpd_req_t *req)
{
    int k = admission_key_of(ad, httpd_header(req, "authorization"));
    const char *x = httpd_header(req, "x-api-key");
    return k >= 0 ? k : x ? key_of_secret(ad, x) : -1;
}

/* ---- tickets ---- */

static void schedule(admission_t *ad);

static ticket_t *ticket_find(admission_t *ad, uint64_t id)
{
    for (ticket_t *t = ad->tickets; t; t = t->next)
        if (t->id == id) return t;
    return NULL;
}

static void ticket_free(admission_t *ad, ticket_t *t)
{
    for (ticket_t **pp = &ad->tickets; *pp; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }
    ad->n_tickets--;
    free(t);
}

static void kick(admission_t *ad)
{
    ad->kick = true;
    schedule(ad);
}

/* Tell mm how many requests wait here for each local model (anti-thrash). */
/* The model label of admission's model index: requests for models this node does not serve
 * share one admission entry, counted as "_routed". */
static const char *metrics_label(const admit_t *a, int model)
{
    return strcmp(a->models[model].name, REMOTE_NAME) == 0 ? "_routed" : a->models[model].name;
}

static void sync_pending(admission_t *ad)
{
    uint64_t now = now_ms(ad);
    for (size_t i = 0; i < ad->a->n_models; i++) {
        if ((int)i != ad->remote)
            metrics_queue_depth_set(meshstat_metrics(ad->stat), ad->a->models[i].name,
                                    ad->a->models[i].queued);
        if (ad->local[i])
            mm_set_pending(&ad->ms->mm, ad->local[i]->mm, ad->a->models[i].queued, now);
    }
    models_run(ad->ms);
}

static void on_req_finish(httpd_req_t *req)
{
    ticket_t *t = req->finish_data;
    /* a request the node did not answer from its own child (routed to a peer, a passive
     * client's host): its tokens from what went to the client (usage, timings, data events) */
    if (!t->counted && req->tail_len) {
        uint64_t n = admit_tail_tokens(req->tail, req->tail_len, t->choices);
        if (n) admit_tokens(t->ad->a, t->key, n, now_ms(t->ad));
        t->counted = true;
    }
    t->done = true;
    t->req = NULL;
    kick(t->ad); /* the slot frees on the next loop turn, after the request's own cleanup */
}

static void on_queued_abort(httpd_req_t *req)
{
    ticket_t *t = req->data;
    admission_t *ad = t->ad;
    admit_release(ad->a, t->id, now_ms(ad));
    LOGD("admission", "a queued request for %s left the queue (client gone)",
         ad->a->models[t->model].name);
    ticket_free(ad, t);
    sync_pending(ad);
    schedule(ad);
}

/* The queued signal (net/tunnel.h) to every tunnelled request that waits here and asked for it:
 * its entry node then restarts its first-byte deadline instead of giving the request up. */
static void send_queued_signals(admission_t *ad, uint64_t now)
{
    if (now < ad->signal_due) return;
    ad->signal_due = UINT64_MAX;
    static const char sig = TUNNEL_QUEUED_BYTE;
    for (ticket_t *t = ad->tickets; t; t = t->next) {
        if (!t->signal || t->started || !t->req) continue;
        httpd_write(t->req, &sig, 1);
        ad->signal_due = now + TUNNEL_QUEUED_EVERY_MS;
    }
}

/* waited_ms: how long it was queued (0: admitted at once) */
static void start(admission_t *ad, ticket_t *t, uint64_t waited_ms)
{
    httpd_req_t *req = t->req;
    metrics_queue_wait(meshstat_metrics(ad->stat), metrics_label(ad->a, t->model),
                       (double)waited_ms / 1e3);
    req->mesh.queue_ns = waited_ms * 1000000ull;
    LOGD("admission", "start %llu model %s key %s", (unsigned long long)t->id,
         ad->a->models[t->model].name, ad->a->keys[t->key].name);
    t->started = true;
    req->data = NULL;
    req->on_abort = NULL;
    req->tag = t->id;
    req->on_finish = on_req_finish;
    req->finish_data = t;
    req->keep_tail = ad->n_secret_keys > 0; /* tokens per minute are per key */
    ad->dep.resume(ad->dep.data, req, t->needs);
}

/* A refusal: 429 for the client's own limits and a full queue, 503 for a queue that cannot drain
 * (admit_why_status); both with Retry-After. */
static void respond_refusal(httpd_req_t *req, const admit_t *a, int model, int key, admit_why_t why,
                            unsigned retry_s, uint64_t waited_ms)
{
    char msg[512];
    const char *m = a->models[model].name;
    metrics_queue_rejected(meshstat_metrics(meshstat_of(req)), metrics_label(a, model));
    metrics_key_rejected(meshstat_metrics(meshstat_of(req)), a->keys[key].name,
                         a->tiers[a->keys[key].tier].name, admit_why_code(why));
    switch (why) {
    case ADMIT_WHY_QUEUE_FULL:
        snprintf(msg, sizeof msg,
                 "model '%s' is busy: %u requests in flight and %u waiting (the queue holds %u); "
                 "retry after %u s",
                 m, a->models[model].in_flight, a->models[model].queued, a->queue_len, retry_s);
        break;
    case ADMIT_WHY_KEY_QUEUE_FULL:
        snprintf(msg, sizeof msg,
                 "key '%s' (tier %s) already has its share of the queue of model '%s' waiting; "
                 "retry after %u s",
                 a->keys[key].name, a->tiers[a->keys[key].tier].name, m, retry_s);
        break;
    case ADMIT_WHY_TPM:
        snprintf(msg, sizeof msg,
                 "key '%s' (tier %s) used its %llu tokens per minute; retry after %u s",
                 a->keys[key].name, a->tiers[a->keys[key].tier].name,
                 (unsigned long long)a->tiers[a->keys[key].tier].tpm, retry_s);
        break;
    case ADMIT_WHY_QUEUE_TIMEOUT:
    case ADMIT_WHY_NO_HOST:
        snprintf(msg, sizeof msg,
                 "model '%s' %s: the request waited %llu ms in the queue; retry after %u s", m,
                 why == ADMIT_WHY_NO_HOST
                     ? "has no host in the mesh now, so its queue cannot drain"
                     : "stayed busy without a free slot (MESH_LLM_QUEUE_WAIT_MS)",
                 (unsigned long long)waited_ms, retry_s);
        break;
    default:
        snprintf(msg, sizeof msg, "too many requests waiting on this node; retry after %u s",
                 retry_s);
        break;
    }
    unsigned status = admit_why_status(why);
    json_t *o =
        json_pack("{s:{s:s,s:s,s:s}}", "error", "message", msg, "type",
                  status == 429 ? "rate_limit_error" : "unavailable", "code", admit_why_code(why));
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    char extra[64];
    snprintf(extra, sizeof extra, "Retry-After: %u\r\n", retry_s);
    if (body)
        httpd_respond(req, (int)status, "application/json", body, strlen(body), extra);
    else
        httpd_respond_error(req, 500, "server_error", "out_of_memory", "out of memory");
    free(body);
}

/* ---- the loop: deadlines, releases, starts ---- */

/* Whether a local model has a host (here or elsewhere in the mesh); asked while requests for it
 * wait, and before one queues. */
static void check_host(admission_t *ad, int model)
{
    if (!ad->dep.has_host || model == ad->remote || !ad->local[model]) return;
    admit_set_no_host(ad->a, model,
                      !ad->dep.has_host(ad->dep.host_data, ad->a->models[model].name));
}

static void process(admission_t *ad)
{
    if (ad->closing) return;
    uint64_t now = now_ms(ad);
    ad->kick = false;
    for (ticket_t *t = ad->tickets, *nx; t; t = nx) {
        nx = t->next;
        if (!t->done) continue;
        admit_release(ad->a, t->id, now);
        ticket_free(ad, t);
    }
    if (mm_deadline(&ad->ms->mm) <= now) {
        mm_tick(&ad->ms->mm, now);
        models_run(ad->ms);
    }
    for (size_t i = 0; i < ad->a->n_models; i++) {
        if (!ad->local[i]) continue;
        admit_set_blocked(ad->a, (int)i, mm_hold(&ad->ms->mm, ad->local[i]->mm, now));
        if (ad->a->models[i].queued) check_host(ad, (int)i);
    }
    admit_action_t act;
    while (admit_next(ad->a, now, &act)) {
        ticket_t *t = ticket_find(ad, act.id);
        if (!t || !t->req) { /* cannot happen: queued tickets hold their request */
            admit_release(ad->a, act.id, now);
            if (t) ticket_free(ad, t);
            continue;
        }
        if (act.kind == ADMIT_ACT_EXPIRE) {
            httpd_req_t *req = t->req;
            req->data = NULL;
            req->on_abort = NULL;
            ticket_free(ad, t);
            respond_refusal(req, ad->a, act.model, act.key, act.why, act.retry_after_s,
                            act.waited_ms);
            continue;
        }
        start(ad, t,
              act.waited_ms); /* mm counts it before the pending count drops (sync_pending below) */
    }
    send_queued_signals(ad, now);
    sync_pending(ad);
    schedule(ad);
}

static void on_timer(uv_timer_t *h)
{
    admission_t *ad = h->data;
    ad->in_timer = true;
    process(ad);
    ad->in_timer = false;
}

static void schedule(admission_t *ad)
{
    if (!ad->timer_init || ad->closing) return;
    uint64_t now = now_ms(ad), due = UINT64_MAX;
    if (ad->kick) {
        due = now;
    } else {
        due = admit_deadline(ad->a);
        uint64_t d = mm_deadline(&ad->ms->mm);
        if (d < due) due = d;
        if (ad->signal_due < due) due = ad->signal_due;
        for (size_t i = 0; i < ad->a->n_models; i++) {
            const admit_model_t *m = &ad->a->models[i];
            if (!m->queued) continue;
            /* held for a switch: look again soon; waiting: does the model still have a host? */
            uint64_t poll = m->blocked         ? HELD_POLL_MS
                            : ad->dep.has_host ? HOST_POLL_MS
                                               : UINT64_MAX;
            if (poll != UINT64_MAX && now + poll < due) due = now + poll;
        }
    }
    if (due == UINT64_MAX) {
        uv_timer_stop(&ad->timer);
        return;
    }
    /* A deadline already due when the timer's own callback re-arms it must wait 1 ms: libuv
     * (1.44, Debian 12) runs a timer re-armed at 0 ms again in the same timer phase, so a deadline
     * that stays due (the model manager's while it waits for a child to stop) spun the loop
     * forever without reading I/O or firing the child's kill timer: a request hung (found by
     * test_stream_is_never_evicted under ASan on a loaded machine). */
    uint64_t delay = due > now ? due - now : ad->in_timer ? 1 : 0;
    uv_timer_start(&ad->timer, on_timer, delay, 0);
}

/* ---- entry ---- */

static void on_flight_tail(void *data, uint64_t tag, int status, const char *tail, size_t len)
{
    admission_t *ad = data;
    ticket_t *t = ticket_find(ad, tag);
    (void)status; /* a stream its client left (499) generated tokens too */
    if (!t || !tail || t->counted) return;
    t->counted = true;
    uint64_t n = admit_tail_tokens(tail, len, t->choices);
    if (n) admit_tokens(ad->a, t->key, n, now_ms(ad));
}

/* A new request for m would wait: no free slot, or others wait already. */
static bool would_queue(const admit_model_t *m)
{
    return m->cap && (m->in_flight >= m->cap || m->queued > 0);
}

bool admission_spilled(const admission_t *ad, const httpd_req_t *req)
{
    for (const ticket_t *t = ad->tickets; t && req->tag; t = t->next)
        if (t->id == req->tag && t->req == req) return t->spill;
    return false;
}

bool admission_enter(admission_t *ad, httpd_req_t *req, int needs)
{
    if (req->tag || ad->closing) return false; /* admitted already */
    /* the body, parsed once by the API (req->rq): no model named is served as the node's one
     * model, or the mesh's one model on a node that serves none */
    const request_t *rq = meshstat_parse_body(req);
    unsigned choices = rq->choices;
    model_entry_t *e = NULL;
    if (rq->model_rc < 0)
        return false; /* a bad body: the API answers with a 400 */
    else if (rq->model_rc == REQUEST_MODEL_FOUND)
        e = models_find(ad->ms, rq->model);
    else if (models_count(ad->ms) == 1)
        e = models_only(ad->ms);
    else if (models_count(ad->ms) == 0)
        e = NULL; /* the API may route it to the mesh's one model: admitted as routed */
    else
        return false; /* a model the API asks for: it answers with a 400 */
    int model = ad->remote;
    bool spill = false;
    if (e) {
        model = admit_model(ad->a, e->mm->name, cap_of(e));
        if (model < 0) return false;
        ad->local[model] = e;
        spill = would_queue(&ad->a->models[model]) && !rq->has_sticky && !route_req_is_hop(req) &&
                ad->dep.spills && ad->dep.spills(ad->dep.host_data, e->mm->name, req);
        if (spill) model = ad->remote;
    }
    int key = 0;
    if (req->peer != HTTPD_PEER_TUNNEL && ad->n_secret_keys) {
        key = admission_req_key(ad, req);
        if (key < 0) key = 0;
    }
    uint64_t now = now_ms(ad), id;
    if (model != ad->remote) check_host(ad, model);
    admit_reject_t rej;
    admit_verdict_t v = admit_try(ad->a, model, key, now, &id, &rej);
    if (v == ADMIT_REJECT) {
        respond_refusal(req, ad->a, model, key, rej.why, rej.retry_after_s, 0);
        return true;
    }
    ticket_t *t = calloc(1, sizeof *t);
    if (!t) {
        admit_release(ad->a, id, now);
        httpd_respond_error(req, 503, "unavailable", "out_of_memory", "out of memory");
        return true;
    }
    t->ad = ad;
    t->id = id;
    t->req = req;
    t->needs = needs;
    t->model = model;
    t->key = key;
    t->choices = choices;
    t->spill = spill;
    t->next = ad->tickets;
    ad->tickets = t;
    ad->n_tickets++;
    if (v == ADMIT_GO) {
        start(ad, t, 0);
        return true;
    }
    req->data = t;
    req->on_abort = on_queued_abort;
    if (req->peer == HTTPD_PEER_TUNNEL && httpd_header(req, TUNNEL_QUEUED_HEADER)) {
        t->signal = true;
        ad->signal_due = now; /* at once, then every TUNNEL_QUEUED_EVERY_MS */
        send_queued_signals(ad, now);
    }
    sync_pending(ad);
    schedule(ad);
    return true;
}

/* ---- setup ---- */

/* mm's deadline moved outside a request (a keep-alive set): look again now */
static void on_mm_deadline(void *data)
{
    kick(data);
}

int admission_init(admission_t *ad, uv_loop_t *loop, const config_t *cfg, models_t *ms,
                   meshstat_t *stat, const admission_deps_t *dep, char *err, size_t errlen)
{
    memset(ad, 0, sizeof *ad);
    ad->dep = *dep;
    ad->stat = stat;
    ad->signal_due = UINT64_MAX;
    ad->loop = loop;
    ad->cfg = cfg;
    ad->ms = ms;
    ad->a = calloc(1, sizeof *ad->a);
    if (!ad->a) return -ENOMEM;
    admit_init(ad->a, cfg->queue_len, cfg->tun.queue_wait_ms);
    mm_set_fair_ms(&ms->mm, cfg->tun.switch_fair_ms);
    ad->remote = admit_model(ad->a, REMOTE_NAME, 0);
    if (cfg->api_keys_file) {
        char *text = NULL;
        int rc = read_keys_file(cfg->api_keys_file, &text, err, errlen);
        if (rc) return rc;
        char e2[256];
        rc = admission_parse_keys(ad->a, text, ad->digests, ad->has_digest, e2, sizeof e2);
        sodium_memzero(text, strlen(text));
        free(text);
        if (rc) {
            snprintf(err, errlen, "--api-keys %s: %s", cfg->api_keys_file, e2);
            return rc;
        }
    }
    if (cfg->api_key) {
        int k = admit_add_key(ad->a, "api-key", 0);
        if (k < 0) {
            snprintf(err, errlen, "too many API keys");
            return -EINVAL;
        }
        crypto_generichash(ad->digests[k], 32, (const unsigned char *)cfg->api_key,
                           strlen(cfg->api_key), NULL, 0);
        ad->has_digest[k] = true;
    }
    for (size_t i = 0; i < ad->a->n_keys; i++)
        ad->n_secret_keys += ad->has_digest[i];
    unsigned pinned[MM_N_TYPES] = {0};
    for (size_t i = 0; i < cfg->n_pins; i++) {
        model_entry_t *e = models_find(ms, cfg->pins[i]);
        if (!e) {
            snprintf(err, errlen, "--pin %s: no such model on this node", cfg->pins[i]);
            return -EINVAL;
        }
        if (!e->mm->pinned) pinned[e->mm->type]++;
        mm_set_pinned(&ms->mm, e->mm, true);
        if (pinned[e->mm->type] > ms->mm.max_loaded[e->mm->type]) {
            snprintf(err, errlen,
                     "--pin: %u %s models pinned but only %u %s slot(s) (--max-loaded-models)",
                     pinned[e->mm->type], mm_type_name(e->mm->type), ms->mm.max_loaded[e->mm->type],
                     mm_type_name(e->mm->type));
            return -EINVAL;
        }
    }
    for (model_entry_t *e = NULL; (e = models_next(ms, e));) {
        int m = admit_model(ad->a, e->mm->name, cap_of(e));
        if (m >= 0) ad->local[m] = e;
    }
    ms->on_flight_tail = on_flight_tail;
    ms->tail_data = ad;
    ms->on_deadline = on_mm_deadline;
    ms->deadline_data = ad;
    uv_timer_init(loop, &ad->timer);
    ad->timer.data = ad;
    ad->timer_init = true;
    LOGI("admission",
         "queue %u per model, wait %llu ms, %zu API key(s) in %zu tier(s), switch fairness %llu "
         "ms, %zu pinned",
         ad->a->queue_len, (unsigned long long)ad->a->max_wait_ms, ad->n_secret_keys,
         ad->a->n_tiers, (unsigned long long)ms->mm.fair_ms, cfg->n_pins);
    return 0;
}

void admission_start(admission_t *ad)
{
    for (model_entry_t *e = NULL; (e = models_next(ad->ms, e));)
        if (e->mm->pinned) models_load(ad->ms, e, false);
}

void admission_close(admission_t *ad)
{
    ad->closing = true;
    if (ad->timer_init) uv_timer_stop(&ad->timer);
}

json_t *admission_status(admission_t *ad)
{
    if (!ad->a) return NULL;
    uint64_t now = now_ms(ad);
    json_t *models = json_object(), *keys = json_object();
    for (size_t i = 0; i < ad->a->n_models; i++) {
        const admit_model_t *m = &ad->a->models[i];
        uint64_t oldest = admit_oldest_queued(ad->a, (int)i);
        json_object_set_new(
            models, m->name,
            json_pack("{s:i,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:b,s:b}", "cap", (int)m->cap,
                      "in_flight", (int)m->in_flight, "queued", (int)m->queued, "admitted",
                      (json_int_t)m->admitted, "rejected", (json_int_t)m->rejected, "expired",
                      (json_int_t)m->expired, "cancelled", (json_int_t)m->cancelled,
                      "wait_ms_total", (json_int_t)m->wait_ms_total, "oldest_wait_ms",
                      (json_int_t)(oldest == UINT64_MAX || oldest > now ? 0 : now - oldest), "held",
                      m->blocked, "no_host", m->no_host));
    }
    for (size_t i = 0; i < ad->a->n_keys; i++) {
        const admit_key_t *k = &ad->a->keys[i];
        json_object_set_new(keys, k->name,
                            json_pack("{s:s,s:i,s:i,s:I,s:I,s:I}", "tier",
                                      ad->a->tiers[k->tier].name, "in_flight", (int)k->in_flight,
                                      "queued", (int)k->queued, "admitted", (json_int_t)k->admitted,
                                      "rejected", (json_int_t)k->rejected, "tokens_last_minute",
                                      (json_int_t)admit_key_tokens(ad->a, (int)i, now)));
    }
    return json_pack("{s:i,s:I,s:I,s:i,s:o,s:o}", "queue_len", (int)ad->a->queue_len,
                     "queue_wait_ms", (json_int_t)ad->a->max_wait_ms, "switch_fair_ms",
                     (json_int_t)ad->ms->mm.fair_ms, "model_switches", (int)ad->ms->mm.switches,
                     "models", models, "keys", keys);
}

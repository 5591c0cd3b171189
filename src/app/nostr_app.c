/* Public discovery in the node: key, discovery, publisher, --auto, GET /api/discover. */
#include "nostr_app.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sodium.h>

#include "auto_score.h"
#include "log.h"
#include "nostr_key.h"
#include "nostr_pool.h"
#include "options.h"
#include "probe.h"
#include "util.h"

static void auto_decide(nostr_app_t *na, bool final);

static void on_change(void *data)
{
    nostr_app_t *na = data;
    /* listening: a listing may have arrived before every relay answered again */
    if (na->auto_pending && (na->auto_listening || discovery_settled(na->disc)))
        auto_decide(na, false);
}

static int start_discovery(nostr_app_t *na)
{
    if (na->disc) return 0;
    if (na->n_relays == 0) return -ENOENT;
    int rc = discovery_start(&na->disc, na->loop, na->relays, na->n_relays, &na->cfg->tun,
                             on_change, na);
    if (rc == 0) {
        char list[1024] = "";
        size_t off = 0;
        for (size_t i = 0; i < na->n_relays && off < sizeof list; i++)
            off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", i ? ", " : "",
                                    na->relays[i]);
        LOGI("nostr", "public discovery: listening to %zu relay(s): %s", na->n_relays, list);
    }
    return rc;
}

int nostr_app_init(nostr_app_t *na, uv_loop_t *loop, const config_t *cfg, const char *home,
                   const nostr_app_deps_t *dep, char *err, size_t errlen)
{
    memset(na, 0, sizeof *na);
    na->dep = *dep;
    na->loop = loop;
    na->cfg = cfg;
    na->home = home;
    na->n_relays = nostr_pool_relays((const char *const *)cfg->nostr_relays, cfg->n_nostr_relays,
                                     cfg->nostr_relays_env, na->relay_buf, sizeof na->relay_buf,
                                     na->relays, CONFIG_MAX_RELAYS);
    if (!cfg->publish && !cfg->auto_join && !cfg->mesh_name) return 0;
    /* the key signs listings, and a named mesh's id derives from it */
    int rc = nostr_key_load(home, na->sk, na->pk, err, errlen);
    if (rc) return rc;
    na->have_key = true;
    if (!cfg->publish && !cfg->auto_join) return 0;
    if (na->n_relays == 0) {
        snprintf(err, errlen,
                 "%s needs Nostr relays, and none are configured ($MESH_LLM_NOSTR_RELAYS is "
                 "'none'): give --nostr-relay URL",
                 cfg->publish ? "--publish" : "--auto");
        return -EINVAL;
    }
    rc = start_discovery(na);
    if (rc) snprintf(err, errlen, "cannot start public discovery: %s", strerror(-rc));
    return rc;
}

void nostr_app_in_mesh(nostr_app_t *na, planner_t *plan, mesh_t *mesh)
{
    na->plan = plan;
    na->mesh = mesh;
    if (!na->disc || !na->have_key || na->pub.started) return;
    publisher_start(&na->pub, na->loop, na->disc, plan, mesh, na->sk, na->cfg->mesh_name,
                    na->cfg->region, na->cfg->publish);
    na->pub.passive = na->passive;
    na->pub.passive_data = na->passive_data;
}

void nostr_app_set_passive(nostr_app_t *na, size_t (*fn)(void *, uint64_t *), void *data)
{
    na->passive = fn;
    na->passive_data = data;
    na->pub.passive = fn;
    na->pub.passive_data = data;
}

void nostr_app_fill_announcement(const nostr_app_t *na, json_t *ann)
{
    if (na->pub.started) json_object_set_new(ann, "nostr_published", json_true());
}

bool nostr_app_peers_changed(nostr_app_t *na)
{
    if (!na->mesh || na->pub.started || na->n_relays == 0 || na->cfg->client) return false;
    bool published = false;
    const view_node_t *peers;
    size_t n = mesh_peers(na->mesh, &peers);
    for (size_t i = 0; i < n; i++)
        published |= peers[i].nostr_published;
    if (!published) return false;
    char err[512];
    if (!na->have_key) {
        if (nostr_key_load(na->home, na->sk, na->pk, err, sizeof err) != 0) {
            LOGW("nostr", "cannot watch the mesh's listing: %s", err);
            return false;
        }
        na->have_key = true;
    }
    if (start_discovery(na) != 0) return false;
    LOGI("nostr", "mesh %s is published: this node watches its listing (publish watchdog)",
         mesh_id(na->mesh));
    publisher_start(&na->pub, na->loop, na->disc, na->plan, na->mesh, na->sk, na->cfg->mesh_name,
                    na->cfg->region, false);
    return true;
}

/* $MESH_LLM_HOME/last-mesh: the mesh joined last ("" when none). */
static void read_last_mesh(const char *home, char *out, size_t outlen)
{
    out[0] = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/last-mesh", home);
    FILE *f = fopen(path, "re");
    if (!f) return;
    if (fgets(out, (int)outlen, f)) out[strcspn(out, "\r\n")] = 0;
    fclose(f);
}

static void auto_finish(nostr_app_t *na)
{
    na->auto_pending = false;
    if (na->auto_timer_open) uv_timer_stop(&na->auto_timer);
}

static void auto_free(nostr_app_t *na)
{
    free(na->cands);
    free(na->scores);
    na->cands = NULL;
    na->scores = NULL;
    na->n_cands = 0;
}

/* Start the new mesh: the note says what --auto decided (one line, said once), then join, then
 * fetch the picked model when there is one to fetch (on disk: it is found there). */
static void auto_start_new(nostr_app_t *na, const char *what, const char *fetch)
{
    char err[512];
    snprintf(na->auto_note, sizeof na->auto_note,
             "no public mesh to join (%zu listed, %lu of %lu probed answered%s): started a new "
             "mesh %s",
             na->auto_listed, na->probes_ok, na->probes,
             discovery_reached(na->disc) ? "" : "; no relay reachable", what);
    LOGI("nostr", "--auto: %s", na->auto_note);
    auto_free(na);
    snprintf(na->auto_model, sizeof na->auto_model, "%s", fetch ? fetch : "");
    if (na->dep.join(na->dep.data, NULL, err, sizeof err) != 0) {
        LOGE("nostr", "--auto: cannot start a new mesh: %s", err);
        return;
    }
    if (fetch && na->dep.fetch_model && na->dep.fetch_model(na->dep.data, fetch, err, sizeof err))
        LOGE("nostr", "--auto: cannot fetch %s: %s", fetch, err);
}

static bool pick_on_disk(void *data, const known_model_t *m)
{
    nostr_app_t *na = data;
    return na->dep.on_disk && na->dep.on_disk(na->dep.data, m->name);
}

/* The picked model, as the note says it. */
static void pick_what(const nostr_app_t *na, const auto_pick_t *p, const char *hub_err, char *what,
                      size_t len)
{
    double gb = (double)na->dep.offer / 1e9;
    if (p->why == AUTO_PICK_NONE_FITS)
        snprintf(what, len,
                 "without a model: no catalog model fits %.1f GB (give one with --model)", gb);
    else if (p->why == AUTO_PICK_TOO_SLOW)
        snprintf(what, len,
                 "without a model: no catalog model runs at %.0f tokens/s or more here (%s, the "
                 "fastest that fits %.1f GB, would run at ~%.1f, estimated from %u MFLOP/s); give "
                 "one with --model",
                 AUTO_MIN_TPS, p->best->name, gb, auto_est_tps(p->best->size, na->mflops),
                 na->mflops);
    else if (hub_err)
        snprintf(what, len,
                 "without a model: %s would need a download and the hub cannot serve it (%s); "
                 "give one with --model",
                 p->model->name, hub_err);
    else if (na->mflops == AUTO_SPEED_UNLIMITED)
        snprintf(what, len,
                 "with %s, the largest catalog model that fits %.1f GB of accelerator memory; %s",
                 p->model->name, gb, p->on_disk ? "on disk" : "downloading it");
    else if (p->why == AUTO_PICK_UNKNOWN_SPEED)
        snprintf(what, len, "with %s, the catalog default (this node's speed is unknown); %s",
                 p->model->name, p->on_disk ? "on disk" : "downloading it");
    else
        snprintf(what, len,
                 "with %s, the largest catalog model that fits %.1f GB and runs at ~%.1f "
                 "tokens/s here (estimated from %u MFLOP/s; at least %.0f wanted); %s",
                 p->model->name, gb, p->tps, na->mflops, AUTO_MIN_TPS,
                 p->on_disk ? "on disk" : "downloading it");
}

static void on_hub_probe(void *data, int rc, const char *why)
{
    nostr_app_t *na = data;
    if (na->stopped || na->mesh) return; /* stopping, or joined meanwhile (POST /api/join) */
    char what[768];
    pick_what(na, &na->pick, rc ? why : NULL, what, sizeof what);
    auto_start_new(na, what, rc ? NULL : na->pick.model->name);
}

static void auto_new_mesh(nostr_app_t *na, size_t listed);

static void auto_speed_wait(uv_timer_t *t)
{
    nostr_app_t *na = t->data;
    if (!na->mesh) auto_new_mesh(na, na->auto_listed);
}

/* No mesh to join: a new one, with a model this node can run at a usable speed (auto_score.h),
 * taken from disk or downloaded only when the hub answers first. */
static void auto_new_mesh(nostr_app_t *na, size_t listed)
{
    const config_t *cfg = na->cfg;
    na->auto_listed = listed;
    if (config_named_models(cfg) || cfg->n_requested || cfg->models_dir) {
        auto_start_new(na, "serving this node's models", NULL);
        return;
    }
    bool pending = false;
    na->mflops = na->dep.speed ? na->dep.speed(na->dep.data, &pending) : 0;
    if (pending && na->speed_waits++ < AUTO_SPEED_WAITS) { /* the calibration ends soon */
        uv_timer_start(&na->auto_timer, auto_speed_wait, 100, 0);
        return;
    }
    na->pick = auto_pick_model(na->dep.offer, na->mflops, pick_on_disk, na);
    char what[768];
    if (na->pick.model && !na->pick.on_disk && na->dep.probe_hub) {
        int rc = na->dep.probe_hub(na->dep.data, na->pick.model->name, on_hub_probe, na);
        if (rc == 0) return; /* on_hub_probe goes on */
        pick_what(na, &na->pick, strerror(-rc), what, sizeof what);
        auto_start_new(na, what, NULL);
        return;
    }
    pick_what(na, &na->pick, NULL, what, sizeof what);
    auto_start_new(na, what, na->pick.model ? na->pick.model->name : NULL);
}

static void probe_batch(nostr_app_t *na);

/* A batch answered: join the best candidate that was admitted, else probe the next batch. */
static void batch_done(nostr_app_t *na)
{
    char err[512];
    for (size_t i = 0; i < na->batch_n; i++) {
        if (na->probe_rc[i] != 0) continue;
        const mesh_listing_t *l = &na->cands[na->batch_start + i];
        token_t t;
        if (token_decode(l->token, strlen(l->token), &t, err, sizeof err) != 0) continue;
        int rc = na->dep.join(na->dep.data, &t, err, sizeof err);
        sodium_memzero(&t, sizeof t);
        if (rc == 0) {
            snprintf(na->auto_note, sizeof na->auto_note,
                     "joined mesh %s ('%.64s', region %s, %u node(s)), score %lld, rank %zu of "
                     "%zu, probe %.1f ms",
                     l->mesh_id, l->name, l->region[0] ? l->region : "-", l->node_count,
                     (long long)na->scores[na->batch_start + i], na->batch_start + i + 1,
                     na->n_cands, na->probe_rtt[i]);
            LOGI("nostr", "--auto: %s", na->auto_note);
            auto_free(na);
            return;
        }
        if (rc == -EALREADY) {
            auto_free(na);
            return;
        }
        LOGW("nostr", "--auto: mesh %s: %s; trying the next one", l->mesh_id, err);
    }
    na->batch_start += na->batch_n;
    if (na->batch_start < na->n_cands)
        probe_batch(na);
    else
        auto_new_mesh(na, na->n_cands);
}

typedef struct {
    nostr_app_t *na;
    size_t slot;
} probe_ctx_t;

static void on_probe(void *data, int rc, double rtt_ms, const char *why)
{
    probe_ctx_t *pc = data;
    nostr_app_t *na = pc->na;
    size_t slot = pc->slot;
    free(pc);
    if (!na->cands) return; /* stopped meanwhile */
    const mesh_listing_t *l = &na->cands[na->batch_start + slot];
    na->probe_rc[slot] = rc;
    na->probe_rtt[slot] = rtt_ms;
    if (rc == 0) na->probes_ok++;
    LOGI("nostr", "--auto: probe of mesh %s (%s): %s%s", l->mesh_id, l->name,
         rc ? "failed: " : "alive, admitted", rc ? why : "");
    if (--na->pending == 0) batch_done(na);
}

static void probe_batch(nostr_app_t *na)
{
    uint64_t timeout = na->cfg->tun.probe_ms;
    size_t n = na->n_cands - na->batch_start;
    na->batch_n = n < AUTO_PROBE_BATCH ? n : AUTO_PROBE_BATCH;
    na->pending = na->batch_n;
    for (size_t i = 0; i < na->batch_n; i++) {
        const mesh_listing_t *l = &na->cands[na->batch_start + i];
        token_t t;
        char err[160];
        na->probe_rc[i] = -EINVAL;
        probe_ctx_t *pc = malloc(sizeof *pc);
        int rc = pc ? token_decode(l->token, strlen(l->token), &t, err, sizeof err) : -ENOMEM;
        if (rc == 0) {
            *pc = (probe_ctx_t){na, i};
            na->probes++;
            rc = probe_start(na->loop, &t, &na->cfg->tun, timeout, on_probe, pc);
            sodium_memzero(&t, sizeof t);
        }
        if (rc) {
            free(pc);
            na->pending--;
        }
    }
    if (na->pending == 0) batch_done(na);
}

/* The live listings, ranked, into na->cands (best first, at most AUTO_MAX_CANDIDATES); returns
 * how many are listed. */
static size_t auto_collect(nostr_app_t *na)
{
    auto_free(na);
    int64_t now = (int64_t)time(NULL);
    mesh_listing_t *ls = malloc(LISTING_SET_MAX * sizeof *ls);
    size_t *order = malloc(LISTING_SET_MAX * sizeof *order);
    na->cands = malloc(AUTO_MAX_CANDIDATES * sizeof *na->cands);
    na->scores = malloc(AUTO_MAX_CANDIDATES * sizeof *na->scores);
    size_t n = ls && order && na->cands && na->scores
                   ? discovery_list(na->disc, now, NULL, NULL, ls, LISTING_SET_MAX)
                   : 0;
    char last[128];
    read_last_mesh(na->home, last, sizeof last);
    const char *wanted[CONFIG_MAX_MODELS * 2];
    size_t nw = 0;
    for (size_t i = 0; i < na->cfg->n_models; i++)
        wanted[nw++] = na->cfg->models[i].name;
    for (size_t i = 0; i < na->cfg->n_requested; i++)
        wanted[nw++] = na->cfg->requested[i];
    auto_prefs_t prefs = {
        .region = na->cfg->region, .last_mesh = last, .wanted = wanted, .n_wanted = nw};
    auto_rank(ls, n, &prefs, order);
    na->n_cands = 0;
    for (size_t k = 0; k < n && na->n_cands < AUTO_MAX_CANDIDATES; k++) {
        na->cands[na->n_cands] = ls[order[k]];
        na->scores[na->n_cands++] = auto_score(&ls[order[k]], &prefs);
    }
    free(ls);
    free(order);
    return n;
}

static void auto_listen_end(uv_timer_t *t)
{
    nostr_app_t *na = t->data;
    auto_decide(na, true);
}

/* Halfway through the listening window: ask the relays again (a relay's first answer may have
 * come from a cache older than a listing published just before this node started). */
static void auto_listen_refresh(uv_timer_t *t)
{
    nostr_app_t *na = t->data;
    if (!na->auto_pending) return;
    LOGD("nostr", "--auto: asking the relays again for listings");
    discovery_refresh(na->disc, (int64_t)time(NULL));
    uint64_t listen = na->cfg->tun.auto_listen_ms;
    uv_timer_start(&na->auto_timer, auto_listen_end, listen - listen / 2, 0);
}

/* The relays answered (or final: the wait is over): join the best listed mesh. With none listed
 * yet, keep listening for MESH_LLM_AUTO_LISTEN_MS (asking the relays again halfway) and decide
 * as soon as a listing arrives or at the end of that window. */
static void auto_decide(nostr_app_t *na, bool final)
{
    if (!na->auto_pending) return;
    if (na->mesh) { /* joined meanwhile (POST /api/join) */
        auto_finish(na);
        return;
    }
    size_t n = auto_collect(na);
    if (na->n_cands == 0 && !final) {
        uint64_t listen = na->cfg->tun.auto_listen_ms;
        if (!na->auto_listening && listen > 0) {
            na->auto_listening = true;
            LOGI("nostr",
                 "--auto: no mesh listed yet; listening %.1f s more (asking the relays again) "
                 "before starting a new mesh",
                 (double)listen / 1000);
            uv_timer_stop(&na->auto_timer);
            uv_timer_start(&na->auto_timer, auto_listen_refresh, listen / 2, 0);
        }
        if (listen > 0) {
            auto_free(na);
            return; /* until a listing arrives or the window ends */
        }
    }
    auto_finish(na);
    if (n == 0 && !discovery_reached(na->disc))
        LOGW("nostr", "--auto: no Nostr relay could be reached (offline?): no public mesh can "
                      "be found");
    LOGI("nostr", "--auto: %zu live mesh(es) listed%s", n, n ? "; probing the best" : "");
    na->batch_start = 0;
    if (na->n_cands == 0)
        auto_new_mesh(na, n);
    else
        probe_batch(na);
}

static void auto_timeout(uv_timer_t *t)
{
    nostr_app_t *na = t->data;
    if (na->auto_pending) {
        LOGI("nostr", "--auto: not every relay answered in time; deciding with what arrived");
        auto_decide(na, true);
    }
}

void nostr_app_auto(nostr_app_t *na)
{
    if (!na->disc) return;
    na->auto_pending = true;
    uv_timer_init(na->loop, &na->auto_timer);
    na->auto_timer.data = na;
    na->auto_timer_open = true;
    uv_timer_start(&na->auto_timer, auto_timeout, na->cfg->tun.auto_wait_ms, 0);
    LOGI("nostr", "--auto: looking for public meshes%s%s%s", na->cfg->region ? " (region " : "",
         na->cfg->region ? na->cfg->region : "", na->cfg->region ? ")" : "");
    if (discovery_settled(na->disc)) auto_decide(na, false);
}

void nostr_app_query(const char *url, const char *name, char *out, size_t outlen)
{
    out[0] = 0;
    const char *q = strchr(url, '?');
    size_t nl = strlen(name);
    while (q && *q) {
        q++;
        if (strncmp(q, name, nl) == 0 && q[nl] == '=') {
            const char *v = q + nl + 1;
            size_t vl = strcspn(v, "&#");
            if (vl >= outlen) return;
            for (size_t i = 0; i < vl; i++) {
                char c = v[i];
                bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                             (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' || c == ':';
                if (!plain) return;
            }
            memcpy(out, v, vl);
            out[vl] = 0;
            return;
        }
        q = strchr(q, '&');
    }
}

void nostr_app_discover(nostr_app_t *na, httpd_req_t *req)
{
    if (start_discovery(na) != 0) {
        httpd_respond_json(req, 200,
                           json_pack("{s:[],s:b,s:s}", "meshes", "searching", false, "reason",
                                     "no Nostr relays configured: start the node with "
                                     "--nostr-relay URL"));
        return;
    }
    char region[LISTING_REGION_MAX + 1], model[LISTING_MODEL_MAX];
    nostr_app_query(req->url, "region", region, sizeof region);
    nostr_app_query(req->url, "model", model, sizeof model);
    httpd_respond_json(req, 200, discovery_json(na->disc, (int64_t)time(NULL), region, model));
}

json_t *nostr_app_status(nostr_app_t *na)
{
    if (!na->disc) return json_null();
    return json_pack("{s:b,s:o,s:s?}", "settled", discovery_settled(na->disc), "publish",
                     na->pub.started ? publisher_status(&na->pub) : json_null(), "auto",
                     na->auto_note[0] ? na->auto_note : NULL);
}

void nostr_app_stop(nostr_app_t *na)
{
    na->stopped = true;
    publisher_stop(&na->pub);
    if (na->auto_timer_open) {
        na->auto_timer_open = false;
        uv_close((uv_handle_t *)&na->auto_timer, NULL);
    }
    na->auto_pending = false;
    auto_free(na);
    discovery_stop(na->disc);
    na->disc = NULL;
    sodium_memzero(na->sk, sizeof na->sk);
}

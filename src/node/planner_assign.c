/* planner_assign — the operator's assignments (planner.h; decisions: core/assign.h).
 *
 * An assigned model is planned like a --model one (elected, loaded as a replica or a split
 * host) and more: pinned in the model manager (never evicted to make room), announced pinned,
 * never demoted or idle-unloaded by the mesh's rules (pm_pinned), and while the node plans for
 * it the allocation gives the node nothing else. Unassigned, it goes back to the mesh's rules:
 * a --model one is --model again; the node's only model on a node the mesh allocates stays its
 * mesh model (the demotion rules apply from then on); any other stays loaded on demand only
 * (the model manager's LRU). The --model models an assignment pushed out come back when no
 * assignment remains. */
#include "planner_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "assign.h"
#include "log.h"

static bool cfg_pinned(const planner_t *pl, const char *model)
{
    for (size_t i = 0; i < pl->cfg->n_pins; i++)
        if (strcmp(pl->cfg->pins[i], model) == 0) return true;
    return false;
}

static bool name_in(char (*names)[MODEL_NAME_MAX], size_t n, const char *model, size_t *at)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], model) == 0) {
            if (at) *at = i;
            return true;
        }
    return false;
}

static void name_drop(char (*names)[MODEL_NAME_MAX], size_t *n, size_t at)
{
    memmove(names[at], names[at + 1], (*n - at - 1) * sizeof names[0]);
    (*n)--;
}

static size_t n_assigned(const planner_t *pl)
{
    size_t k = pl->n_assign_pending;
    for (size_t i = 0; i < pl->n; i++)
        k += pl->models[i].assigned;
    return k;
}

int planner_assign(planner_t *pl, const char *model, char *msg, size_t len)
{
    model_entry_t *e = models_find(pl->ms, model);
    if (!e || e->deleted) {
        snprintf(msg, len,
                 "model '%s' is not on this node's disk (mesh-llm models installed lists what "
                 "is; a catalog name or a hf:// reference is downloaded first)",
                 model);
        return 404;
    }
    for (size_t i = 0; i < pl->n; i++)
        if (pl->models[i].seeding) {
            snprintf(msg, len,
                     "model %s is filling its rpc cache for a split right now; retry in a moment",
                     pl->models[i].name);
            return 409;
        }
    assign_held_t held[ASSIGN_MAX];
    size_t n = pl->n < ASSIGN_MAX ? pl->n : ASSIGN_MAX;
    for (size_t i = 0; i < n; i++) {
        const pmodel_t *pm = &pl->models[i];
        model_state_t s = pm->e ? models_state(pm->e) : MODEL_UNLOADED;
        held[i] = (assign_held_t){.name = pm->name,
                                  .type = pm->e ? (unsigned)pm->e->mm->type : (unsigned)MM_LLM,
                                  .bytes = ledger_held_for(&pl->ms->ledger, pm->name),
                                  .loaded = s != MODEL_UNLOADED,
                                  .pinned = strcmp(pm->rule, "explicit") == 0,
                                  .assigned = pm->assigned,
                                  .last_use = pm->e ? pm->e->mm->last_use : 0};
    }
    assign_input_t in = {.model = e->mm->name,
                         .type = e->mm->type,
                         .need_bytes = models_need_bytes(pl->ms, e),
                         .offer_bytes = pl->ms->ledger.offered,
                         .slots = pl->cfg->max_loaded[e->mm->type],
                         .planned = held,
                         .n_planned = n};
    assign_result_t r;
    assign_decide(&in, &r);
    char nb[32], ob[32];
    switch (r.verdict) {
    case ASSIGN_ALREADY:
        snprintf(msg, len, "model %s is assigned to this node already", e->mm->name);
        return 200;
    case ASSIGN_TOO_BIG:
        snprintf(msg, len,
                 "model %s needs %s of memory; this node offers %s (--max-vram): it cannot serve "
                 "it alone",
                 e->mm->name, ledger_fmt(in.need_bytes, nb, sizeof nb),
                 ledger_fmt(in.offer_bytes, ob, sizeof ob));
        return 409;
    case ASSIGN_CONFLICT:
        snprintf(msg, len,
                 "model %s does not fit beside model %s, which is assigned to this node too: "
                 "unassign it first (mesh-llm unassign %s)",
                 e->mm->name, held[r.in_the_way].name, held[r.in_the_way].name);
        return 409;
    case ASSIGN_OK:
        break;
    }
    char gone[512] = "";
    size_t gl = 0;
    for (size_t i = n; i-- > 0;) {
        if (r.go[i] == ASSIGN_KEEP) continue;
        pmodel_t *pm = &pl->models[i];
        LOGI("planner", "model %s: unloaded for the assignment of %s (%s)", pm->name, e->mm->name,
             assign_go_name(r.go[i]));
        if (gl < sizeof gone)
            gl += (size_t)snprintf(gone + gl, sizeof gone - gl, "%s%s", gl ? ", " : "", pm->name);
        if (r.go[i] != ASSIGN_GO_MESH && pl->n_displaced < PLAN_MAX_MODELS &&
            !name_in(pl->displaced, pl->n_displaced, pm->name, NULL))
            snprintf(pl->displaced[pl->n_displaced++], MODEL_NAME_MAX, "%s", pm->name);
        pm_release(pl, i, true);
    }
    pmodel_t *pm = pm_find(pl, e->mm->name);
    if (!pm) {
        if (pl->n >= PLAN_MAX_MODELS) {
            snprintf(msg, len, "this node plans for %d models already", PLAN_MAX_MODELS);
            return 409;
        }
        pm = &pl->models[pl->n++];
        memset(pm, 0, sizeof *pm);
        pm->pl = pl;
        snprintf(pm->name, sizeof pm->name, "%s", e->mm->name);
        pm->e = e;
        pm->st.load_when_replica = true;
        if (!pl->serving_since_ms) pl->serving_since_ms = uv_now(pl->loop);
    } else {
        pm->was_explicit = strcmp(pm->rule, "explicit") == 0;
    }
    snprintf(pm->rule, sizeof pm->rule, "assigned");
    pm->assigned = true;
    pm->assigned_unix = (uint64_t)time(NULL);
    size_t at;
    if (name_in(pl->displaced, pl->n_displaced, pm->name, &at))
        name_drop(pl->displaced, &pl->n_displaced, at);
    if (name_in(pl->assign_pending, pl->n_assign_pending, pm->name, &at))
        name_drop(pl->assign_pending, &pl->n_assign_pending, at);
    pl->standby = pl->alloc_none = false;
    mm_set_pinned(&pl->ms->mm, e->mm, true);
    models_keep_alive(pl->ms, e, 0); /* no expiry */
    if (models_state(e) == MODEL_UNLOADED && models_fits(pl->ms, e) && !pl->cfg->split)
        models_load(pl->ms, e, false);
    LOGI("planner", "model %s: assigned to this node by its operator%s%s", e->mm->name,
         gl ? "; unloaded " : "", gone);
    snprintf(msg, len, "model %s is assigned to this node%s%s", e->mm->name,
             gl ? "; unloaded: " : "", gone);
    planner_kick(pl);
    return 200;
}

int planner_assign_pending(planner_t *pl, const char *model, char *msg, size_t len)
{
    if (!name_in(pl->assign_pending, pl->n_assign_pending, model, NULL)) {
        if (pl->n_assign_pending >= PLAN_MAX_MODELS) {
            snprintf(msg, len, "too many assignments wait for their downloads");
            return 409;
        }
        snprintf(pl->assign_pending[pl->n_assign_pending++], MODEL_NAME_MAX, "%s", model);
    }
    snprintf(msg, len, "model %s is being downloaded; it is assigned to this node when it arrives",
             model);
    return 202;
}

void pa_arrived(planner_t *pl, const char *model)
{
    if (!name_in(pl->assign_pending, pl->n_assign_pending, model, NULL)) return;
    char msg[512];
    int st = planner_assign(pl, model, msg, sizeof msg);
    if (st >= 300) LOGW("planner", "model %s arrived, but its assignment failed: %s", model, msg);
}

int planner_unassign(planner_t *pl, const char *model, char *msg, size_t len)
{
    size_t at;
    if (name_in(pl->assign_pending, pl->n_assign_pending, model, &at)) {
        name_drop(pl->assign_pending, &pl->n_assign_pending, at);
        snprintf(msg, len, "model %s is no longer assigned (its download goes on)", model);
        return 200;
    }
    pmodel_t *pm = pm_find(pl, model);
    if (!pm || !pm->assigned) {
        snprintf(msg, len, "model '%s' is not assigned to this node", model);
        return 404;
    }
    pm->assigned = false;
    if (pm->e && !cfg_pinned(pl, pm->name)) mm_set_pinned(&pl->ms->mm, pm->e->mm, false);
    const char *now;
    if (pm->was_explicit) {
        snprintf(pm->rule, sizeof pm->rule, "explicit");
        now = "it is this node's --model again";
    } else if (pl->allocating && pl->n == 1) {
        snprintf(pm->rule, sizeof pm->rule, "unassigned");
        snprintf(pl->alloc.rule, sizeof pl->alloc.rule, "unassigned");
        pl->serving_since_ms = uv_now(pl->loop); /* the demotion rules' hysteresis starts now */
        now = "it stays this node's model until the mesh's rules (idle, demand) move it";
    } else {
        pm_release(pl, (size_t)(pm - pl->models), false);
        now = "it stays loaded until the model manager needs its slot";
    }
    LOGI("planner", "model %s: unassigned by this node's operator; %s", model, now);
    if (n_assigned(pl) == 0) {
        for (size_t i = 0; i < pl->n_displaced; i++) {
            model_entry_t *e = models_find(pl->ms, pl->displaced[i]);
            if (e && !e->deleted && !pm_find(pl, e->mm->name)) {
                LOGI("planner", "model %s: planned here again (--model)", e->mm->name);
                planner_add_model(pl, e);
            }
        }
        pl->n_displaced = 0;
    }
    snprintf(msg, len, "model %s is no longer assigned to this node; %s", model, now);
    planner_kick(pl);
    return 200;
}

json_t *planner_assignments(planner_t *pl)
{
    json_t *a = json_array();
    for (size_t i = 0; i < pl->n; i++) {
        const pmodel_t *pm = &pl->models[i];
        if (!pm->assigned) continue;
        model_state_t s = pm->e ? models_state(pm->e) : MODEL_UNLOADED;
        json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:I,s:b}", "model", pm->name, "state",
                                           model_state_name(s), "role", pm_role_name(pm), "since",
                                           (json_int_t)pm->assigned_unix, "pending", false));
    }
    for (size_t i = 0; i < pl->n_assign_pending; i++)
        json_array_append_new(a,
                              json_pack("{s:s,s:s,s:n,s:n,s:b}", "model", pl->assign_pending[i],
                                        "state", "downloading", "role", "since", "pending", true));
    return a;
}

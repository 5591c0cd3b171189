/* standby — see standby.h. */
#include "standby.h"

#include <string.h>

#include "log.h"

static void on_timer(uv_timer_t *t)
{
    standby_t *s = t->data;
    planner_t *pl = s->pl;
    if (!s->started || pl->stopping) return;
    s->in_timer = true;
    if (!pl->passive && s->want_check && planner_wants_passive(pl)) {
        LOGI("standby",
             "nothing in the mesh needs this node now: standing by passively (leaving gossip; "
             "routing tables from an active node, promotion decided on each)");
        pl->passive = true;
        s->went_passive++;
        s->have_table = false;
        mesh_go_passive(s->mesh);
        planner_peers_changed(pl); /* no gossip peers from now on */
        checkin_resume(passive_checkin(s->pv));
    } else if (pl->passive && s->have_table) {
        s->have_table = false;
        if (planner_promote_from_table(
                pl, s->none_answered ? NULL : checkin_table(passive_checkin(s->pv)))) {
            LOGI("standby", "promoted: joining gossip again");
            checkin_pause(passive_checkin(s->pv));
            pl->passive = false;
            s->went_active++;
            mesh_go_active(s->mesh);
            planner_kick(pl);
        }
    }
    s->want_check = false;
    s->in_timer = false;
}

/* From inside on_timer (a replan it caused) 1 ms, not 0: libuv 1.44 reruns a timer started at
 * 0 ms from its own callback in the same phase without reading I/O. */
static void arm(standby_t *s)
{
    if (s->started && !s->pl->stopping) uv_timer_start(&s->timer, on_timer, s->in_timer ? 1 : 0, 0);
}

static void on_replanned(void *data)
{
    standby_t *s = data;
    if (s->pl->passive) return;
    s->want_check = true;
    arm(s);
}

static void on_table(void *data, const rt_table_t *t)
{
    standby_t *s = data;
    if (!s->pl->passive) return;
    s->have_table = true;
    s->none_answered = t == NULL;
    arm(s);
}

int standby_start(standby_t *s, uv_loop_t *loop, planner_t *pl, mesh_t *mesh,
                  const passive_opts_t *o, passive_t **pv_out)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->pl = pl;
    s->mesh = mesh;
    passive_opts_t po = *o;
    po.role = RT_ROLE_STANDBY;
    po.on_table = on_table;
    po.data = s;
    po.paused = true;
    int rc = passive_start(&s->pv, loop, mesh, &po);
    if (rc) return rc;
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    pl->on_replanned = on_replanned;
    pl->hook_data = s;
    s->started = true;
    *pv_out = s->pv;
    return 0;
}

int standby_join(standby_t *s, uv_loop_t *loop, planner_t *pl, mesh_t *mesh, bool client,
                 const passive_opts_t *o, passive_t **pv_out)
{
    if (o->n_joins == 0 || client || pl->n > 0) return 0;
    planner_allocate(pl);
    const char *names[RT_MAX_REQ_MODELS];
    size_t nm = 0;
    for (model_entry_t *e = NULL; nm < RT_MAX_REQ_MODELS && (e = models_next(pl->ms, e));)
        names[nm++] = e->mm->name;
    passive_opts_t po = *o;
    po.models = names;
    po.n_models = nm;
    return standby_start(s, loop, pl, mesh, &po, pv_out);
}

json_t *standby_status(const standby_t *s)
{
    if (!s->started) return NULL;
    return json_pack("{s:b,s:I,s:I}", "passive", s->pl->passive, "went_passive",
                     (json_int_t)s->went_passive, "went_active", (json_int_t)s->went_active);
}

void standby_stop(standby_t *s)
{
    if (!s->started) return;
    s->started = false;
    s->pl->on_replanned = NULL;
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, NULL);
}

/* speed — see speed.h. */
#include "speed.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tunables.h"

static void speed_work(uv_work_t *w)
{
    node_speed_t *s = w->data;
    s->rc = calib_gemv(s->threads, CALIB_BUDGET_MS, &s->res);
}

static void speed_after(uv_work_t *w, int status)
{
    node_speed_t *s = w->data;
    s->running = false;
    if (s->cancelled) return;
    if (status == 0 && s->rc == 0 && s->res.mflops) {
        s->mflops = s->res.mflops;
        s->source = "measured";
        LOGI("speed",
             "compute speed %u MFLOP/s (F32 matrix-vector, %u thread(s), %u passes in %.0f ms)",
             s->mflops, s->res.threads, s->res.passes, s->res.elapsed_ms);
    } else {
        s->source = "failed";
        LOGW("speed", "compute-speed calibration failed (%s): splits stay memory-proportional",
             status ? uv_strerror(status) : strerror(-s->rc));
    }
    if (s->done) s->done(s);
}

int node_speed_start(node_speed_t *s, uv_loop_t *loop, const tunables_t *tun, node_speed_cb done,
                     void *data)
{
    memset(s, 0, sizeof *s);
    s->done = done;
    s->data = data;
    /* a value not accepted is in config_parse's notes (logged at start), and measured */
    if (tun && tunables_given(tun, &tun->speed_mflops)) {
        s->mflops = (uint32_t)tun->speed_mflops;
        s->source = s->mflops ? "env" : "off";
        return 1;
    }
    s->threads = calib_threads();
    s->work.data = s;
    int rc = uv_queue_work(loop, &s->work, speed_work, speed_after);
    if (rc) {
        s->source = "failed";
        return rc;
    }
    s->running = true;
    s->source = "calibrating";
    return 0;
}

void node_speed_cancel(node_speed_t *s)
{
    if (!s->running) return;
    s->cancelled = true;
    uv_cancel((uv_req_t *)&s->work);
}

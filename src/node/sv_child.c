/* sv_child — what a supervised child's fields say, computed and never acted on: its name for
 * logs, whether its process is there, its load deadline, and the verdicts of sv_watch.c's
 * checks (supervisor_int.h). A leaf: supervisor.c and sv_watch.c call it, it calls neither. */
#include <stdio.h>

#include "supervisor_int.h"

#define GIB (1024ull * 1024 * 1024)

uint64_t sv_default_load_timeout_ms(uint64_t model_bytes)
{
    /* 2 minutes, plus a minute per GiB: reading a file at ~20 MB/s still fits */
    return 120000 + (model_bytes + GIB - 1) / GIB * 60000;
}

uint64_t svw_load_limit(const sv_child_t *c)
{
    if (c->sv->load_timeout_ms) return c->sv->load_timeout_ms;
    return c->load_timeout_ms ? c->load_timeout_ms : sv_default_load_timeout_ms(0);
}

const char *sv_prog_name(const sv_child_t *c)
{
    static char buf[MODEL_NAME_MAX + 32];
    if (c->kind == SV_KIND_RPC) return "rpc-server";
    snprintf(buf, sizeof buf, "llama-server for model %s", c->name);
    return buf;
}

/* The process is there and its exit has not been seen yet. */
bool sv_running(const sv_child_t *c)
{
    return c->proc_open && !uv_is_closing((const uv_handle_t *)&c->proc);
}

/* A /health 200 counts only from the process that holds the port: another process may have
 * taken a port the node picked before the child could bind it. */
svw_verdict_t svw_probe_verdict(bool answered, int port_held)
{
    if (!answered) return SVW_WAIT;
    return port_held == 0 ? SVW_PORT_TAKEN : SVW_READY;
}

svw_verdict_t svw_tick(svw_tick_t *t)
{
    if (!t->busy || t->cpu_advanced) t->progress_ms = t->now_ms;
    bool unanswered = t->now_ms - t->last_alive_ms >= t->hang_ms;
    bool no_progress = t->now_ms - t->progress_ms >= t->hang_ms;
    return unanswered && (!t->busy || no_progress) ? SVW_WEDGED : SVW_WAIT;
}

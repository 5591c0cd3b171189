/* reqlog — see reqlog.h. */
#include "reqlog.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void reqlog_init(reqlog_t *l)
{
    memset(l, 0, sizeof *l);
}

void reqlog_add(reqlog_t *l, const reqlog_entry_t *e)
{
    l->e[l->next] = *e;
    l->next = (l->next + 1) % REQLOG_MAX;
    if (l->n < REQLOG_MAX) l->n++;
    l->total++;
}

const reqlog_entry_t *reqlog_get(const reqlog_t *l, size_t i)
{
    if (i >= l->n) return NULL;
    return &l->e[(l->next + REQLOG_MAX - 1 - i) % REQLOG_MAX];
}

static double ms_between(uint64_t a, uint64_t b)
{
    return b > a ? (double)(b - a) / 1e6 : 0.0;
}

int reqlog_entry_from(reqlog_entry_t *out, const metrics_req_t *r, const char *self_id,
                      uint64_t now_ns, uint64_t wall_ms)
{
    if (!r->model[0]) return -ENOENT;
    memset(out, 0, sizeof *out);
    out->wall_ms = wall_ms;
    snprintf(out->model, sizeof out->model, "%s", r->model);
    snprintf(out->path, sizeof out->path, "%s", r->path ? r->path : "");
    out->route = r->route;
    snprintf(out->node, sizeof out->node, "%s",
             r->route == METRICS_ROUTE_TUNNEL ? r->peer : (self_id ? self_id : ""));
    out->status = r->status ? r->status : 499;
    /* the first answer byte: the first body byte, else the response head (a tunnelled answer
     * is relayed as it comes, so its head is when the host began to answer) */
    uint64_t fb = r->first_body_ns ? r->first_body_ns : r->head_ns;
    out->ttft_ms = fb > r->start_ns ? ms_between(r->start_ns, fb) : -1.0;
    out->duration_ms = ms_between(r->start_ns, now_ns);
    out->tokens_out = r->tokens_out;
    out->tokens_per_s = -1.0;
    if (r->per_token_s > 0)
        out->tokens_per_s = 1.0 / r->per_token_s;
    else if (r->tokens_out > 0 && fb && now_ns > fb)
        out->tokens_per_s = (double)r->tokens_out / ((double)(now_ns - fb) / 1e9);
    return 0;
}

static json_t *num_or_null(double v)
{
    return v < 0 ? json_null() : json_real((double)(int64_t)(v * 10.0 + 0.5) / 10.0);
}

json_t *reqlog_json(const reqlog_t *l)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < l->n; i++) {
        const reqlog_entry_t *e = reqlog_get(l, i);
        json_t *o = json_pack(
            "{s:I,s:s,s:o,s:s,s:s,s:i,s:o,s:o,s:o,s:o}", "time_ms", (json_int_t)e->wall_ms, "model",
            e->model, "path", e->path[0] ? json_string(e->path) : json_null(), "node", e->node,
            "route", e->route == METRICS_ROUTE_TUNNEL ? "tunnel" : "local", "status", e->status,
            "ttft_ms", num_or_null(e->ttft_ms), "duration_ms", num_or_null(e->duration_ms),
            "tokens", e->tokens_out < 0 ? json_null() : json_integer(e->tokens_out), "tokens_per_s",
            num_or_null(e->tokens_per_s));
        if (o && json_array_append_new(a, o) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

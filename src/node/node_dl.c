/* node_dl — see node_dl.h. */
#include "node_dl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ledger.h"
#include "log.h"
#include "model_fetch.h"
#include "model_ref.h"
#include "options.h"
#include "tunables.h"
#include "util.h"

#define RETRY_AFTER_S 5

int node_dl_take_args(node_dl_args_t *a, int *argc, char **argv)
{
    memset(a, 0, sizeof *a);
    char dir[1024];
    mf_default_dir(mf_models_dir_arg(*argc, argv), dir, sizeof dir);
    int taken = 0;
    for (int i = 1; i + 1 < *argc;) {
        if (strcmp(argv[i], "--model") != 0 && strcmp(argv[i], "-m") != 0) {
            i++;
            continue;
        }
        const char *arg = argv[i + 1];
        model_ref_t r;
        char err[512], path[2048];
        struct stat st;
        if (model_ref_parse(arg, &r, err, sizeof err) != 0 || !model_ref_remote(&r) ||
            (r.kind == MODEL_REF_CATALOG && stat(arg, &st) == 0) ||
            strlen(arg) >= NODE_DL_REF_MAX) {
            i += 2;
            continue;
        }
        if (mf_on_disk(&r, dir, path, sizeof path)) {
            char *p = strdup(path); /* on disk already: the file itself (lives until exit) */
            if (p) argv[i + 1] = p;
            if (a->n_present < NODE_DL_MAX)
                snprintf(a->present[a->n_present++], NODE_DL_REF_MAX, "%s", arg);
            i += 2;
            continue;
        }
        if (a->n_refs >= NODE_DL_MAX) {
            i += 2;
            continue; /* config_parse reports it */
        }
        snprintf(a->refs[a->n_refs], NODE_DL_REF_MAX, "%s", arg);
        a->ref_ptrs[a->n_refs] = a->refs[a->n_refs];
        a->n_refs++;
        taken++;
        memmove(&argv[i], &argv[i + 2], (size_t)(*argc - i - 2) * sizeof *argv);
        *argc -= 2;
        argv[*argc] = NULL;
    }
    return taken;
}

size_t node_dl_pending(const node_dl_args_t *a, const char *const **refs)
{
    if (refs) *refs = a->ref_ptrs;
    return a->n_refs;
}

static void log_progress(uv_timer_t *t)
{
    node_dl_t *nd = t->data;
    dl_progress_t p[NODE_DL_MAX];
    size_t n = dl_list(nd->d, p, NODE_DL_MAX);
    for (size_t i = 0; i < n; i++) {
        char line[700];
        dl_format_progress(&p[i], false, line, sizeof line);
        LOGI("download", "downloading %s", line);
    }
    /* the mesh sees the progress too (the announcement's downloading entries) */
    if (n && nd->dep.on_change) nd->dep.on_change(nd->dep.data);
}

int node_dl_init(node_dl_t *nd, uv_loop_t *loop, const char *models_dir, const tunables_t *tun,
                 const node_dl_deps_t *dep)
{
    memset(nd, 0, sizeof *nd);
    nd->dep = *dep;
    nd->loop = loop;
    nd->tun = tun;
    mf_default_dir(models_dir, nd->dir, sizeof nd->dir);
    dl_opts_t o;
    tunables_dl_opts(tun, &o);
    int rc = dl_init(&nd->d, loop, &o);
    if (rc) return rc;
    uv_timer_init(loop, &nd->progress);
    nd->progress.data = nd;
    nd->timer_open = true;
    return 0;
}

void node_dl_add_present(node_dl_t *nd, const node_dl_args_t *a)
{
    /* --model REF whose file was there: a finished job, so its source is announced */
    for (size_t i = 0; i < a->n_present && nd->n < NODE_DL_MAX; i++) {
        node_dl_job_t *j = &nd->jobs[nd->n];
        model_ref_t r;
        char err[64], path[2048];
        struct stat st;
        if (model_ref_parse(a->present[i], &r, err, sizeof err) != 0 ||
            !mf_on_disk(&r, nd->dir, path, sizeof path) || stat(path, &st) != 0 ||
            model_name_from_path(path, j->name, sizeof j->name) != 0)
            continue;
        snprintf(j->ref, sizeof j->ref, "%s", a->present[i]);
        j->asked = true;
        j->size = (uint64_t)st.st_size;
        nd->n++;
    }
}

static bool any_active(const node_dl_t *nd)
{
    for (size_t i = 0; i < nd->n; i++)
        if (nd->jobs[i].active) return true;
    return false;
}

typedef struct {
    node_dl_t *nd;
    size_t idx;
} ctx_t;

/* 1.1 x size: what serving a model of this size needs (the ledger's rule). */
static uint64_t serve_need(uint64_t size)
{
    return size + size / 10;
}

static void refuse_msg(const node_dl_job_t *j, uint64_t offer, char *err, size_t errlen)
{
    char need[32], size[32], off[32];
    snprintf(err, errlen,
             "not downloading %s: it needs %s to serve (1.1 x %s) and this node offers %s "
             "(--max-vram); run it on a bigger node or name a smaller model",
             j->ref, ledger_fmt(serve_need(j->size), need, sizeof need),
             ledger_fmt(j->size, size, sizeof size), ledger_fmt(offer, off, sizeof off));
}

static void fetched(void *data, int rc, const char *err, const char *path, bool already)
{
    ctx_t *c = data;
    node_dl_t *nd = c->nd;
    node_dl_job_t *j = &nd->jobs[c->idx];
    free(c);
    j->active = false;
    if (!any_active(nd) && nd->timer_open) uv_timer_stop(&nd->progress);
    if (rc == -EFBIG && j->limit) {
        j->failed = j->too_big = true;
        if (!j->size) j->size = j->limit + 1; /* more than the limit, exact size unknown */
        char msg[sizeof j->err];
        refuse_msg(j, nd->dep.offer, msg, sizeof msg);
        memcpy(j->err, msg, sizeof msg);
        LOGW("download", "%s", j->err);
    } else if (rc) {
        j->failed = true;
        snprintf(j->err, sizeof j->err, "%s", err ? err : strerror(-rc));
        if (rc != -ECANCELED) LOGE("download", "%s: %s", j->ref, j->err);
    } else {
        LOGI("download", "%s: %s %s", j->ref, already ? "already there:" : "downloaded to", path);
        char name[NODE_DL_NAME_MAX];
        if (model_name_from_path(path, name, sizeof name) == 0)
            snprintf(j->name, sizeof j->name, "%s", name);
        struct stat st;
        if (!j->size && stat(path, &st) == 0) j->size = (uint64_t)st.st_size;
    }
    if (nd->dep.on_done && rc != -ECANCELED)
        nd->dep.on_done(nd->dep.data, j->ref, path, rc, j->err);
    if (nd->dep.on_change && rc != -ECANCELED) nd->dep.on_change(nd->dep.data);
}

static void push_err(char (*errs)[512], unsigned *n, const char *err)
{
    if (*n == NODE_DL_ERRS) {
        memmove(errs[0], errs[1], (NODE_DL_ERRS - 1) * sizeof errs[0]);
        (*n)--;
    }
    snprintf(errs[(*n)++], sizeof errs[0], "%s", err);
}

static int start(node_dl_t *nd, const char *ref, bool asked, bool solo, char *err, size_t errlen)
{
    if (strlen(ref) >= NODE_DL_REF_MAX) {
        snprintf(err, errlen, "model reference too long");
        return -ENAMETOOLONG;
    }
    for (size_t i = 0; i < nd->n; i++)
        if (strcmp(nd->jobs[i].ref, ref) == 0 && nd->jobs[i].active) return 0;
    size_t idx = nd->n;
    for (size_t i = 0; i < nd->n; i++)
        if (!nd->jobs[i].active && strcmp(nd->jobs[i].ref, ref) == 0) idx = i;
    if (idx == nd->n) {
        for (size_t i = 0; i < nd->n && idx == nd->n; i++)
            if (!nd->jobs[i].active && (nd->jobs[i].failed || nd->jobs[i].deleted)) idx = i;
        if (idx == nd->n && nd->n >= NODE_DL_MAX) {
            snprintf(err, errlen, "too many downloads (at most %d)", NODE_DL_MAX);
            return -E2BIG;
        }
    }
    node_dl_job_t *j = &nd->jobs[idx];
    bool same = idx < nd->n && strcmp(j->ref, ref) == 0;
    bool was_asked = idx < nd->n && j->asked;
    /* the same model again: its earlier errors stay (a bounded list), the latest first */
    char(*keep)[512] = same ? malloc(sizeof j->errs) : NULL;
    unsigned n_keep = 0;
    if (keep) {
        n_keep = j->n_errs;
        memcpy(keep, j->errs, sizeof j->errs);
        if (j->failed && j->err[0]) push_err(keep, &n_keep, j->err);
    }
    memset(j, 0, sizeof *j);
    if (keep) {
        memcpy(j->errs, keep, sizeof j->errs);
        j->n_errs = n_keep;
        free(keep);
    }
    snprintf(j->ref, sizeof j->ref, "%s", ref);
    j->asked = asked || was_asked;
    model_ref_t r;
    char path[2048];
    int rc = model_ref_parse(ref, &r, err, errlen);
    if (rc) return rc;
    if (mf_local_path(&r, nd->dir, path, sizeof path) != 0 ||
        model_name_from_path(path, j->name, sizeof j->name) != 0)
        snprintf(j->name, sizeof j->name, "%s", ref); /* ORG/REPO:QUANT: known after listing */
    if (r.known) j->size = r.known->size;
    /* don't download what won't fit (seed 002): the ledger's 1.1 x size rule */
    if (solo && nd->dep.offer)
        j->limit = nd->dep.offer - nd->dep.offer / 11; /* 1.1 x limit <= offer */
    if (j->limit && j->size && j->size > j->limit) {
        refuse_msg(j, nd->dep.offer, err, errlen);
        j->failed = j->too_big = true;
        snprintf(j->err, sizeof j->err, "%s", err);
        if (idx == nd->n) nd->n++;
        LOGW("download", "%s", err);
        if (nd->dep.on_change) nd->dep.on_change(nd->dep.data);
        return -EFBIG;
    }
    ctx_t *c = malloc(sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    *c = (ctx_t){nd, idx};
    j->active = true;
    if (idx == nd->n) nd->n++;
    mf_opts_t o = {.max_bytes = j->limit, .size_out = &j->size};
    rc = mf_fetch_opts(nd->d, ref, nd->dir, &o, fetched, c, err, errlen);
    if (rc) {
        j->active = false;
        j->failed = true;
        snprintf(j->err, sizeof j->err, "%s", err);
        free(c);
        return rc;
    }
    LOGI("download", "model %s: downloading %s into %s (%s)", j->name, ref, nd->dir,
         asked ? "the node serves it when it is there"
               : "the mesh gives this node the model: download and serve");
    uint64_t every = nd->tun ? nd->tun->progress_ms : options_env_default("MESH_LLM_PROGRESS_MS");
    if (!uv_is_active((uv_handle_t *)&nd->progress))
        uv_timer_start(&nd->progress, log_progress, every, every);
    if (nd->dep.on_change) nd->dep.on_change(nd->dep.data);
    return 0;
}

int node_dl_start(node_dl_t *nd, const char *ref, char *err, size_t errlen)
{
    return start(nd, ref, true, true, err, errlen);
}

int node_dl_start_mesh(node_dl_t *nd, const char *ref, bool solo, char *err, size_t errlen)
{
    return start(nd, ref, false, solo, err, errlen);
}

const node_dl_job_t *node_dl_job(const node_dl_t *nd, const char *ref)
{
    for (size_t i = 0; i < nd->n; i++)
        if (strcmp(nd->jobs[i].ref, ref) == 0) return &nd->jobs[i];
    return NULL;
}

void node_dl_close(node_dl_t *nd)
{
    if (!nd->d) return;
    if (nd->timer_open) {
        nd->timer_open = false;
        uv_close((uv_handle_t *)&nd->progress, NULL);
    }
    dl_close(nd->d);
    nd->d = NULL;
}

void node_dl_forget(node_dl_t *nd, const char *name)
{
    for (size_t i = 0; i < nd->n; i++)
        if (!nd->jobs[i].active && strcmp(nd->jobs[i].name, name) == 0) nd->jobs[i].deleted = true;
}

const node_dl_job_t *node_dl_find(node_dl_t *nd, const char *name)
{
    for (size_t i = 0; i < nd->n; i++) {
        const node_dl_job_t *j = &nd->jobs[i];
        if (j->active && (strcmp(j->name, name) == 0 || strcmp(j->ref, name) == 0)) return j;
    }
    return NULL;
}

void node_dl_progress(node_dl_t *nd, const node_dl_job_t *j, uint64_t *bytes, uint64_t *total,
                      double *rate)
{
    *bytes = *total = 0;
    *rate = 0;
    if (!nd->d) return;
    dl_progress_t p[NODE_DL_MAX];
    size_t n = dl_list(nd->d, p, NODE_DL_MAX);
    size_t rl = strlen(j->ref);
    for (size_t i = 0; i < n; i++) {
        /* the label is the ref, or "REF (part K of N)" */
        if (strncmp(p[i].label, j->ref, rl) != 0 || (p[i].label[rl] && p[i].label[rl] != ' '))
            continue;
        *bytes += p[i].bytes;
        *total += p[i].total;
        *rate += p[i].rate;
    }
}

bool node_dl_answer(node_dl_t *nd, const char *model, httpd_req_t *req)
{
    const node_dl_job_t *j = node_dl_find(nd, model);
    if (!j) return false;
    uint64_t b, t;
    double rate;
    node_dl_progress(nd, j, &b, &t, &rate);
    node_dl_respond_downloading(req, j->name, "this node", b, t);
    return true;
}

void node_dl_respond_downloading(httpd_req_t *req, const char *model, const char *where, uint64_t b,
                                 uint64_t t)
{
    char msg[900], pct[32] = "";
    if (t) snprintf(pct, sizeof pct, " (%.1f%%)", 100.0 * (double)b / (double)t);
    snprintf(msg, sizeof msg, "model '%s' is downloading on %s (%llu of %llu bytes%s); retry later",
             model, where, (unsigned long long)b, (unsigned long long)t, pct);
    json_t *o = json_pack("{s:{s:s,s:s,s:s}}", "error", "message", msg, "type", "unavailable",
                          "code", "model_downloading");
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    char extra[64];
    snprintf(extra, sizeof extra, "Retry-After: %d\r\n", RETRY_AFTER_S);
    if (body)
        httpd_respond(req, 503, "application/json", body, strlen(body), extra);
    else
        httpd_respond_error(req, 500, "server_error", "out_of_memory", "out of memory");
    free(body);
}

int node_dl_ref_name(node_dl_t *nd, const char *ref, char *name, size_t len)
{
    model_ref_t r;
    char err[64], path[2048];
    if (model_ref_parse(ref, &r, err, sizeof err) != 0 || !model_ref_remote(&r)) return -EINVAL;
    const node_dl_job_t *j = node_dl_job(nd, ref);
    if (j && !j->active && !j->failed) {
        snprintf(name, len, "%s", j->name);
        return 0;
    }
    if (mf_local_path(&r, nd->dir, path, sizeof path) != 0 ||
        model_name_from_path(path, name, len) != 0)
        snprintf(name, len, "%s", ref);
    return 0;
}

void node_dl_answer_load(node_dl_t *nd, const char *ref, httpd_req_t *req)
{
    char err[600];
    if (!nd->d) {
        httpd_respond_error(req, 503, "unavailable", "downloads_disabled",
                            "model '%s' is not on this node and it cannot download models", ref);
        return;
    }
    int rc = start(nd, ref, true, true, err, sizeof err);
    if (rc == -EFBIG) {
        httpd_respond_error(req, 400, "invalid_request_error", "model_too_large", "%s", err);
        return;
    }
    if (rc == -E2BIG || rc == -ENOMEM) {
        httpd_respond_error(req, 503, "unavailable", "busy", "%s", err);
        return;
    }
    if (rc) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_model_reference", "%s",
                            err);
        return;
    }
    const node_dl_job_t *j = node_dl_job(nd, ref);
    uint64_t b = 0, t = 0;
    double rate;
    if (j) node_dl_progress(nd, j, &b, &t, &rate);
    char msg[900];
    snprintf(msg, sizeof msg,
             "downloading %s; this node loads model '%s' when the file is there (GET /v1/models "
             "shows its status and progress)",
             ref, j ? j->name : ref);
    json_t *o = json_pack("{s:s,s:s,s:s,s:{s:I,s:I},s:s}", "status", "downloading", "model",
                          j ? j->name : ref, "ref", ref, "progress", "bytes", (json_int_t)b,
                          "total", (json_int_t)t, "message", msg);
    if (o)
        httpd_respond_json(req, 202, o);
    else
        httpd_respond_error(req, 500, "server_error", "out_of_memory", "out of memory");
}

void node_dl_list_models(node_dl_t *nd, model_list_t *list)
{
    for (size_t i = 0; i < nd->n; i++) {
        const node_dl_job_t *j = &nd->jobs[i];
        if (!j->active) continue;
        ml_row_t *r = ml_add(list, j->name);
        if (!r) continue;
        double rate;
        node_dl_progress(nd, j, &r->dl_bytes, &r->dl_total, &rate);
        r->status = ML_DOWNLOADING;
        r->has_progress = true;
        snprintf(r->source, sizeof r->source, "%s", j->ref);
    }
}

void node_dl_status(node_dl_t *nd, json_t **downloads, json_t **errors)
{
    json_t *a = json_array();
    for (size_t i = 0; i < nd->n; i++) {
        const node_dl_job_t *j = &nd->jobs[i];
        if (!j->active) continue;
        uint64_t b, t;
        double rate;
        node_dl_progress(nd, j, &b, &t, &rate);
        json_array_append_new(a, json_pack("{s:s,s:s,s:I,s:I,s:f}", "model", j->name, "ref", j->ref,
                                           "bytes", (json_int_t)b, "total", (json_int_t)t, "rate",
                                           rate));
    }
    *downloads = a;
    json_t *f = json_array();
    for (size_t i = 0; i < nd->n; i++) {
        const node_dl_job_t *j = &nd->jobs[i];
        if (!j->failed || j->deleted) continue;
        /* error: the latest; errors: the earlier ones too, oldest first (bounded) */
        json_t *all = json_array();
        for (unsigned k = 0; k < j->n_errs; k++)
            json_array_append_new(all, json_string(j->errs[k]));
        json_array_append_new(all, json_string(j->err));
        json_array_append_new(f, json_pack("{s:s,s:s,s:s,s:o}", "model", j->name, "ref", j->ref,
                                           "error", j->err, "errors", all));
    }
    *errors = f;
}

void node_dl_fill_view(node_dl_t *nd, view_node_t *n)
{
    if (!nd || !nd->d) return;
    for (size_t i = 0; i < nd->n; i++) {
        node_dl_job_t *j = &nd->jobs[i];
        if ((j->failed && !j->too_big) || j->deleted) continue;
        uint64_t b = 0, t = 0;
        double rate;
        if (j->active) {
            node_dl_progress(nd, j, &b, &t, &rate);
            if (t && !j->size) j->size = t;
        }
        view_source_t *src = view_add_source(n, j->name, j->ref);
        if (src) src->size_bytes = j->size;
        if (j->asked && (j->active || j->too_big) && !view_requested(n, j->name))
            view_add_requested(n, j->name);
        view_download_t *d = j->active ? view_add_download(n, j->name) : NULL;
        if (d) {
            d->total = t;
            d->bytes = t && b > t ? t : b;
        }
    }
}

bool node_dl_on_disk(const node_dl_t *nd, const char *ref)
{
    model_ref_t r;
    char err[64], path[2048];
    struct stat st;
    return model_ref_parse(ref, &r, err, sizeof err) == 0 &&
           mf_on_disk(&r, nd->dir, path, sizeof path) && stat(path, &st) == 0 && st.st_size > 0;
}

typedef struct {
    node_dl_probe_fn cb;
    void *data;
    char hub[MODEL_REF_URL_MAX];
} probe_t;

static void probe_done(void *data, int rc, const char *err, long status, const char *body,
                       size_t len)
{
    probe_t *p = data;
    (void)body;
    (void)len;
    char why[600];
    if (rc == 0 && status == 200)
        why[0] = 0;
    else if (rc == 0)
        snprintf(why, sizeof why, "HTTP %ld from %.500s", status, p->hub);
    else
        snprintf(why, sizeof why, "%s", err && *err ? err : strerror(-rc));
    p->cb(p->data, rc == 0 && status == 200 ? 0 : rc ? rc : -EIO, why);
    free(p);
}

int node_dl_probe(node_dl_t *nd, const char *ref, node_dl_probe_fn cb, void *data)
{
    model_ref_t r;
    char err[256];
    int rc = model_ref_parse(ref, &r, err, sizeof err);
    if (rc) return rc;
    if (!r.repo[0]) return -EINVAL; /* a plain URL: nothing to ask the hub */
    probe_t *p = malloc(sizeof *p);
    if (!p) return -ENOMEM;
    p->cb = cb;
    p->data = data;
    char url[MODEL_REF_URL_MAX];
    snprintf(url, sizeof url, "%s/api/models/%s", dl_hub(nd->d), r.repo);
    snprintf(p->hub, sizeof p->hub, "%s", url);
    rc = dl_fetch(nd->d, url, 1 << 20, probe_done, p);
    if (rc) free(p);
    return rc;
}

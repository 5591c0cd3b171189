/* Ollama's DELETE /api/delete (api_ollama.h) {"model": NAME} (or the older "name"): the node
 * removes a model it downloaded — its files in the models directory (mf_remove: what `mesh-llm
 * models rm` removes) — and the model leaves the registry (models_delete: unloaded, and gone
 * from every listing, the announcement and routing at once: the next request for it is a 404).
 * 200 with an empty body; 404 {"error": "model 'X' not found"} for a model this node does not
 * have. Refused: a model whose file is not in the models directory (403: a --model file of the
 * user's own, never deleted), and a model being downloaded (409: its download is not cancelled;
 * delete it once the download ended). NAME may also be the reference it was pulled by. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_ollama.h"
#include "log.h"
#include "model_fetch.h"
#include "node_dl.h"

/* Whether the file at path lies directly in dir (its directory is dir, links resolved). */
static bool in_dir(const char *path, const char *dir)
{
    char parent[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == path)
        snprintf(parent, sizeof parent, "/");
    else
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
    return realpath(parent, a) && realpath(dir, b) && strcmp(a, b) == 0;
}

static void log_removed(void *data, const char *path)
{
    LOGI("ollama", "delete of %s: removed %s", (const char *)data, path);
}

void api_ollama_delete(api_t *api, httpd_req_t *req)
{
    char name[NODE_DL_REF_MAX], err[OLLAMA_ERR_MAX];
    if (ollama_model_of(req->body, req->body_len, name, sizeof name, NULL, err, sizeof err) < 0) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_body", "%s", err);
        return;
    }
    model_entry_t *e = models_find(api->ms, name);
    char alias[NODE_DL_NAME_MAX];
    if (!e && api->dl && node_dl_ref_name(api->dl, name, alias, sizeof alias) == 0)
        e = models_find(api->ms, alias); /* the reference it was pulled by */
    const node_dl_job_t *j = api->dl ? node_dl_find(api->dl, e ? e->mm->name : name) : NULL;
    if (j) {
        httpd_respond_error(req, 409, "invalid_request_error", "model_downloading",
                            "model '%s' is being downloaded on this node (%s); delete it once "
                            "the download ended",
                            j->name, j->ref);
        return;
    }
    if (!e) {
        httpd_respond_error(req, 404, "invalid_request_error", "model_not_found",
                            "model '%s' not found", name);
        return;
    }
    char dir[1024];
    mf_default_dir(api->cfg->models_dir, dir, sizeof dir);
    if (!in_dir(e->path, dir)) {
        httpd_respond_error(req, 403, "invalid_request_error", "model_not_deletable",
                            "model '%s' is the file %s, outside this node's models directory "
                            "(%s): the node deletes only the models it downloaded; the file is "
                            "left as it is",
                            e->mm->name, e->path, dir);
        return;
    }
    const char *file = strrchr(e->path, '/');
    file = file ? file + 1 : e->path;
    char why[2200];
    int rc = mf_remove(dir, file, log_removed, e->mm->name, why, sizeof why);
    if (rc == -EBUSY) {
        httpd_respond_error(req, 409, "invalid_request_error", "model_downloading",
                            "model '%s' is being downloaded by another process (%s is locked); "
                            "stop that download first",
                            e->mm->name, why);
        return;
    }
    if (rc < 0) {
        httpd_respond_error(req, 500, "server_error", "delete_failed",
                            "model '%s' could not be deleted: cannot remove %s", e->mm->name, why);
        return;
    }
    LOGI("ollama", "delete of %s: %d file(s) removed from %s", e->mm->name, rc, dir);
    models_delete(api->ms, e);
    if (api->dl) node_dl_forget(api->dl, e->mm->name);
    httpd_respond(req, 200, "text/plain; charset=utf-8", "", 0, NULL);
}

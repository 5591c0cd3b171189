/* models_serve — the serving features of a model's llama-server (core/serve_opts.h): which
 * draft model and vision projector it gets, from the command line and the catalog. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "model_fetch.h"
#include "models_int.h"
#include "serve_opts.h"

static bool regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static uint64_t file_bytes(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* The catalog draft of e's file when that file is next to it or in the models directory. */
static bool catalog_draft_on_disk(const models_t *ms, const model_entry_t *e, char *out, size_t len)
{
    const char *file = serve_catalog_draft(e->path);
    if (!file) return false;
    const char *slash = strrchr(e->path, '/');
    snprintf(out, len, "%.*s%s", slash ? (int)(slash - e->path + 1) : 0, e->path, file);
    if (regular_file(out)) return true;
    char dir[2048];
    mf_default_dir(ms->cfg->models_dir, dir, sizeof dir);
    snprintf(out, len, "%s/%s", dir, file);
    return regular_file(out);
}

/* The vision projector downloaded with e's file (model_ref.h: mmproj-<stem>.gguf beside it). */
static bool projector_beside(const model_entry_t *e, char *out, size_t len)
{
    char local[MODEL_REF_FILE_MAX];
    if (model_ref_mmproj_local(e->path, local, sizeof local) != 0) return false;
    const char *slash = strrchr(e->path, '/');
    int w = snprintf(out, len, "%.*s%s", slash ? (int)(slash - e->path + 1) : 0, e->path, local);
    return w > 0 && (size_t)w < len && regular_file(out);
}

int models_serve_setup(const models_t *ms, model_entry_t *e)
{
    const config_t *cfg = ms->cfg;
    char found[4096];
    bool cat = !cfg->draft && !cfg->no_draft && e->mm->type == MM_LLM &&
               catalog_draft_on_disk(ms, e, found, sizeof found);
    const char *draft = serve_pick_draft(e->mm->type == MM_LLM, cfg->no_draft, cfg->draft,
                                         cat ? found : NULL, e->path);
    if (cfg->draft && e->mm->type == MM_LLM && !draft)
        LOGW("models", "model %s: --draft names the model itself; no speculative decoding",
             e->mm->name);
    char beside[4096];
    const char *mmproj = config_mmproj_of(cfg, e->mm->name);
    if (!mmproj && e->mm->type == MM_LLM && projector_beside(e, beside, sizeof beside))
        mmproj = beside;
    serve_opts_t o = {.jinja = e->mm->type == MM_LLM, .draft = draft, .mmproj = mmproj};
    buf_t b;
    buf_init(&b, 1 << 14);
    int rc = serve_opts_args(&o, &b);
    free(e->serve_args);
    e->serve_args = NULL;
    if (rc == 0 && b.len) {
        e->serve_args = strndup(b.data, b.len);
        if (!e->serve_args) rc = -ENOMEM;
    }
    buf_free(&b);
    if (rc) return rc;
    e->vision = o.mmproj != NULL;
    e->serve_bytes = file_bytes(draft) + file_bytes(o.mmproj); /* memory they take when loaded */
    snprintf(e->draft, sizeof e->draft, "%s", draft ? draft : "");
    if (draft)
        LOGI("models", "model %s: speculative decoding with draft %s%s", e->mm->name, draft,
             cat ? " (the catalog's pairing)" : "");
    if (o.mmproj) LOGI("models", "model %s: vision projector %s", e->mm->name, o.mmproj);
    return 0;
}

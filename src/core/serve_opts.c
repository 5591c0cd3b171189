/* serve_opts — see serve_opts.h. */
#include "serve_opts.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "model_ref.h"

/* A word argv_split reads back as is: every byte that is not plainly safe gets a backslash. */
static int put_word(buf_t *b, const char *w)
{
    int rc = buf_append(b, " ", b->len ? 1 : 0);
    for (const char *p = w; rc == 0 && *p; p++) {
        bool safe = isalnum((unsigned char)*p) || strchr("._/-+,=:@%", *p);
        if (!safe) rc = buf_append(b, "\\", 1);
        if (rc == 0) rc = buf_append(b, p, 1);
    }
    return rc;
}

int serve_opts_args(const serve_opts_t *o, buf_t *out)
{
    int rc = o->jinja ? put_word(out, "--jinja") : 0;
    if (rc == 0 && o->draft) {
        char n[16];
        rc = put_word(out, "--model-draft");
        if (rc == 0) rc = put_word(out, o->draft);
        /* llama-server loads a draft model without using it unless told which kind of
         * speculation to run */
        if (rc == 0) rc = put_word(out, "--spec-type");
        if (rc == 0) rc = put_word(out, SERVE_DRAFT_TYPE);
        snprintf(n, sizeof n, "%d", SERVE_DRAFT_N_MAX);
        if (rc == 0) rc = put_word(out, "--spec-draft-n-max");
        if (rc == 0) rc = put_word(out, n);
        snprintf(n, sizeof n, "%d", SERVE_DRAFT_N_MIN);
        if (rc == 0) rc = put_word(out, "--spec-draft-n-min");
        if (rc == 0) rc = put_word(out, n);
        if (rc == 0) rc = put_word(out, "--spec-draft-p-min");
        if (rc == 0) rc = put_word(out, SERVE_DRAFT_P_MIN);
    }
    if (rc == 0 && o->mmproj) {
        rc = put_word(out, "--mmproj");
        if (rc == 0) rc = put_word(out, o->mmproj);
    }
    return rc;
}

const char *serve_draft_placement(bool has_draft, bool split_host)
{
    return has_draft && split_host ? SERVE_DRAFT_LOCAL_ARGS : "";
}

static const char *base_of(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

const char *serve_catalog_draft(const char *target_file)
{
    const char *base = base_of(target_file);
    for (size_t i = 0; i < known_models_n; i++) {
        const known_model_t *k = &known_models[i];
        if (!k->draft || strcasecmp(model_ref_basename(k->file), base) != 0) continue;
        const known_model_t *d = known_model_find(k->draft);
        return d && d != k ? model_ref_basename(d->file) : NULL;
    }
    return NULL;
}

const char *serve_pick_draft(bool is_llm, bool no_draft, const char *explicit_draft,
                             const char *catalog_on_disk, const char *target_path)
{
    if (!is_llm || no_draft) return NULL;
    const char *d = explicit_draft ? explicit_draft : catalog_on_disk;
    if (d && target_path && strcmp(d, target_path) == 0) return NULL;
    return d;
}

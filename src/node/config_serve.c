/* config_serve — the serving-feature options of the command line: --draft NAME|PATH,
 * --no-draft and --mmproj MODEL=PATH (see config.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "config_int.h"
#include "model_fetch.h"
#include "model_ref.h"

static bool regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool looks_like_path(const char *s)
{
    size_t n = strlen(s);
    return strchr(s, '/') || (n > 5 && strcasecmp(s + n - 5, ".gguf") == 0);
}

int config_draft_arg(config_t *cfg, const char *arg, char *err, size_t errlen)
{
    if (!*arg || strlen(arg) >= 4096) {
        snprintf(err, errlen, "--draft takes a GGUF file or a catalog model name");
        return -EINVAL;
    }
    free(cfg->draft);
    cfg->draft = strdup(arg);
    return cfg->draft ? 0 : -ENOMEM;
}

int config_mmproj_arg(config_t *cfg, const char *arg, char *err, size_t errlen)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1] || (size_t)(eq - arg) >= MODEL_NAME_MAX) {
        snprintf(err, errlen,
                 "--mmproj takes MODEL=PATH (the model's name, the file name without .gguf, "
                 "and its projector file), got '%s'",
                 arg);
        return -EINVAL;
    }
    if (!regular_file(eq + 1)) {
        snprintf(err, errlen, "--mmproj %s: %s is not a readable file", arg, eq + 1);
        return -EINVAL;
    }
    size_t len = (size_t)(eq - arg);
    for (size_t i = 0; i < cfg->n_mmproj; i++)
        if (strlen(cfg->mmproj[i].model) == len && strncmp(cfg->mmproj[i].model, arg, len) == 0) {
            snprintf(err, errlen, "--mmproj: model '%.*s' has two projectors", (int)len, arg);
            return -EINVAL;
        }
    if (cfg->n_mmproj >= CONFIG_MAX_MODELS) {
        snprintf(err, errlen, "too many --mmproj (at most %d)", CONFIG_MAX_MODELS);
        return -EINVAL;
    }
    char *path = strdup(eq + 1);
    if (!path) return -ENOMEM;
    snprintf(cfg->mmproj[cfg->n_mmproj].model, MODEL_NAME_MAX, "%.*s", (int)len, arg);
    cfg->mmproj[cfg->n_mmproj++].path = path;
    return 0;
}

int config_serve_finish(config_t *cfg, char *err, size_t errlen)
{
    if (cfg->draft && cfg->no_draft) {
        snprintf(err, errlen, "--draft and --no-draft contradict each other; give one");
        return -EINVAL;
    }
    if (cfg->draft && cfg->client) {
        snprintf(err, errlen, "--client nodes serve no model: drop --draft or --client");
        return -EINVAL;
    }
    if (cfg->n_mmproj && cfg->client) {
        snprintf(err, errlen, "--client nodes serve no model: drop --mmproj or --client");
        return -EINVAL;
    }
    if (!cfg->draft) return 0;
    if (looks_like_path(cfg->draft)) {
        if (regular_file(cfg->draft)) return 0;
        snprintf(err, errlen, "--draft %s: no such file", cfg->draft);
        return -EINVAL;
    }
    /* a catalog name: its file in the models directory */
    const known_model_t *k = known_model_find(cfg->draft);
    char dir[2048], path[4096];
    mf_default_dir(cfg->models_dir, dir, sizeof dir);
    if (!k) {
        snprintf(err, errlen,
                 "--draft %s: not a file and not a catalog model (see 'mesh-llm models list')",
                 cfg->draft);
        return -EINVAL;
    }
    snprintf(path, sizeof path, "%s/%s", dir, model_ref_basename(k->file));
    if (!regular_file(path)) {
        snprintf(err, errlen, "--draft %s: its file %s is not on disk (mesh-llm download %s)",
                 cfg->draft, path, k->name);
        return -EINVAL;
    }
    char *p = strdup(path);
    if (!p) return -ENOMEM;
    free(cfg->draft);
    cfg->draft = p;
    return 0;
}

void config_serve_free(config_t *cfg)
{
    free(cfg->draft);
    for (size_t i = 0; i < cfg->n_mmproj; i++)
        free(cfg->mmproj[i].path);
}

const char *config_mmproj_of(const config_t *cfg, const char *model)
{
    for (size_t i = 0; i < cfg->n_mmproj; i++)
        if (strcmp(cfg->mmproj[i].model, model) == 0) return cfg->mmproj[i].path;
    return NULL;
}

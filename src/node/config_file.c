/* config_file — see config_file.h. libconfig parses the file; this module maps its settings to
 * the option table's keys and turns them into command-line arguments. */
#include "config_file.h"

/* libconfig's config_t is not ours (config.h): renamed here */
#define config_t libconfig_t
#include <libconfig.h>
#undef config_t

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "identity.h"
#include "llama_args.h"
#include "slots.h"
#include "model_fetch.h"
#include "model_ref.h"
#include "options.h"
#include "suggest.h"
#include "util.h"

/* What reading a file produces: the arguments (flag, value, flag, ...) in file order, the
 * per-model settings, and the problems found (reported all at once by config check). */
typedef struct {
    config_src_t *src; /* where strings go (owned), NULL-free arguments */
    char **args;
    int n_args;
    int n_problems;
    char *first;  /* the first problem, for err */
    FILE *report; /* config check: every problem goes here */
    const char *path;
    const char *models_dir; /* the file's models_dir (names of remote models) */
} reader_t;

__attribute__((format(printf, 3, 4))) static void problem(reader_t *r, int line, const char *fmt,
                                                          ...)
{
    char msg[768], full[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0)
        snprintf(full, sizeof full, "%s:%d: %s", r->path, line, msg);
    else
        snprintf(full, sizeof full, "%s: %s", r->path, msg);
    if (r->report) fprintf(r->report, "%s\n", full);
    if (!r->first) r->first = strdup(full);
    r->n_problems++;
}

static int add_arg(reader_t *r, const char *s)
{
    config_src_t *src = r->src;
    if (src->n_owned >= CONFIG_SRC_MAX_ARGS) {
        problem(r, 0, "too many settings (at most %d values)", CONFIG_SRC_MAX_ARGS / 2);
        return -EINVAL;
    }
    char *d = strdup(s);
    if (!d) return -ENOMEM;
    src->owned[src->n_owned++] = d;
    r->args[r->n_args++] = d;
    return 0;
}

/* A scalar setting as the text of a command-line value; false when its type does not fit. */
static bool scalar_text(const config_setting_t *s, opt_value_t kind, char *out, size_t len)
{
    int t = config_setting_type(s);
    switch (t) {
    case CONFIG_TYPE_STRING:
        if (kind != OPTV_STRING) return false;
        snprintf(out, len, "%s", config_setting_get_string(s));
        return true;
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        if (kind == OPTV_SWITCH) return false;
        snprintf(out, len, "%lld", config_setting_get_int64(s));
        return true;
    case CONFIG_TYPE_FLOAT:
        if (kind != OPTV_NUMBER && kind != OPTV_STRING) return false;
        snprintf(out, len, "%.17g", config_setting_get_float(s));
        return true;
    default:
        return false;
    }
}

static const char *kind_text(opt_value_t kind)
{
    switch (kind) {
    case OPTV_SWITCH:
        return "true or false";
    case OPTV_INT:
        return "an integer";
    case OPTV_NUMBER:
        return "a number";
    case OPTV_INTS:
        return "an integer or an array of integers";
    default:
        return "a string";
    }
}

/* One setting of the option o: its arguments ("--name value ..."). */
static int read_option(reader_t *r, const mesh_option_t *o, const config_setting_t *s,
                       const char *key)
{
    int line = (int)config_setting_source_line(s);
    char flag[96], val[4096];
    snprintf(flag, sizeof flag, "--%s", o->name);
    if (o->value == OPTV_SWITCH) {
        if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
            problem(r, line, "%s takes true or false", key);
            return 0;
        }
        return config_setting_get_bool(s) ? add_arg(r, flag) : 0;
    }
    bool many = config_setting_is_aggregate(s);
    if (many && config_setting_is_group(s)) {
        problem(r, line, "%s takes %s, not a group", key, kind_text(o->value));
        return 0;
    }
    if (many && !(o->flags & OPTF_REPEAT) && o->value != OPTV_INTS) {
        problem(r, line, "%s takes one value, not a list", key);
        return 0;
    }
    int n = many ? config_setting_length(s) : 1;
    if (n > 64) {
        problem(r, line, "%s: more than 64 values", key);
        return 0;
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const config_setting_t *e = many ? config_setting_get_elem(s, (unsigned)i) : s;
        opt_value_t kind = o->value == OPTV_INTS ? OPTV_INT : o->value;
        if (!scalar_text(e, kind, val, sizeof val)) {
            problem(r, (int)config_setting_source_line(e), "%s takes %s", key, kind_text(o->value));
            return 0;
        }
        if (o->value == OPTV_INTS) {
            if (i == 0) rc = add_arg(r, flag);
        } else {
            rc = add_arg(r, flag);
        }
        if (rc == 0) rc = add_arg(r, val);
        if ((o->flags & OPTF_SECRET) && val[0] != '@') r->src->has_secret = true;
    }
    sodium_memzero(val, sizeof val);
    return rc;
}

/* "did you mean" over the keys of the table valid where key was found (prefix: "api." etc.) */
static void unknown_key(reader_t *r, int line, const char *key, const char *prefix)
{
    size_t n, np = strlen(prefix);
    const mesh_option_t *all = options_all(&n);
    const char *names[80];
    size_t k = 0;
    for (size_t i = 0; i < n && k < 80; i++) {
        const char *ok = all[i].key;
        if (!ok) continue;
        if (strcmp(prefix, "models.") == 0 && (all[i].flags & OPTF_MODEL)) {
            const char *dot = strrchr(ok, '.');
            names[k++] = dot ? dot + 1 : ok;
        } else if (strncmp(ok, prefix, np) == 0 && (np > 0 || !strchr(ok, '.'))) {
            names[k++] = ok + np;
        }
    }
    if (!*prefix) {
        static const char *const top[] = {"models", "devices", "api", "mesh", "discovery", "log"};
        for (size_t i = 0; i < sizeof top / sizeof top[0] && k < 80; i++)
            names[k++] = top[i];
    }
    const char *near = suggest_closest(key, names, k);
    if (near)
        problem(r, line, "unknown key '%s%s'; did you mean '%s%s'?", prefix, key, prefix, near);
    else
        problem(r, line, "unknown key '%s%s'", prefix, key);
}

/* The name a models entry's model will be served under (see config_model_opts_t). */
static void model_name_of(const reader_t *r, const char *ref, char *out, size_t len)
{
    char base[4096];
    snprintf(base, sizeof base, "%s", ref);
    static const char *const types[] = {":llm", ":embedding", ":reranking"};
    for (size_t i = 0; i < 3; i++) {
        size_t bl = strlen(base), tl = strlen(types[i]);
        if (bl > tl && strcmp(base + bl - tl, types[i]) == 0) base[bl - tl] = '\0';
    }
    model_ref_t mr;
    char e[256], dir[2048], path[4096];
    mf_default_dir(r->models_dir, dir, sizeof dir);
    if (model_ref_parse(base, &mr, e, sizeof e) == 0 && model_ref_remote(&mr) &&
        mf_local_path(&mr, dir, path, sizeof path) == 0 &&
        model_name_from_path(path, out, len) == 0)
        return;
    if (model_name_from_path(base, out, len) != 0) snprintf(out, len, "%s", base);
}

/* One entry of models = ( ... ): a string (the model) or a group. */
static int read_model(reader_t *r, const config_setting_t *m)
{
    int line = (int)config_setting_source_line(m);
    const char *ref = NULL;
    if (config_setting_type(m) == CONFIG_TYPE_STRING)
        ref = config_setting_get_string(m);
    else if (config_setting_is_group(m) &&
             config_setting_lookup_string(m, "model", &ref) != CONFIG_TRUE)
        ref = NULL;
    if (!ref || !*ref) {
        problem(r, line, "a models entry needs model = \"FILE, catalog name or URL\"");
        return 0;
    }
    int rc = add_arg(r, "--model");
    if (rc == 0) rc = add_arg(r, ref);
    if (rc || !config_setting_is_group(m)) return rc;
    config_model_opts_t mo = {0};
    model_name_of(r, ref, mo.name, sizeof mo.name);
    for (int i = 0; i < config_setting_length(m) && rc == 0; i++) {
        const config_setting_t *s = config_setting_get_elem(m, (unsigned)i);
        const char *k = config_setting_name(s);
        int sl = (int)config_setting_source_line(s);
        const char *sv =
            config_setting_type(s) == CONFIG_TYPE_STRING ? config_setting_get_string(s) : NULL;
        if (strcmp(k, "model") == 0) continue;
        if (strcmp(k, "ctx_size") == 0) {
            long long v = config_setting_get_int64(s);
            if ((config_setting_type(s) != CONFIG_TYPE_INT &&
                 config_setting_type(s) != CONFIG_TYPE_INT64) ||
                v < 1 || v > (1 << 24))
                problem(r, sl, "models.ctx_size takes a number of tokens from 1 to %d", 1 << 24);
            else
                mo.ctx_size = (uint32_t)v;
        } else if (strcmp(k, "slots") == 0) {
            long long v = config_setting_get_int64(s);
            if ((config_setting_type(s) != CONFIG_TYPE_INT &&
                 config_setting_type(s) != CONFIG_TYPE_INT64) ||
                v < 1 || v > SLOTS_MAX)
                problem(r, sl, "models.slots takes a number of slots from 1 to %d", SLOTS_MAX);
            else
                mo.slots = (uint32_t)v;
        } else if (strcmp(k, "llamacpp_args") == 0) {
            char e[256];
            if (!sv || llama_args_check(sv, LLAMA_ARGS_OPERATOR, NULL, e, sizeof e) != 0)
                problem(r, sl, "models.llamacpp_args: %s", sv ? e : "takes a string");
            else if (!mo.llamacpp_args && !(mo.llamacpp_args = strdup(sv)))
                rc = -ENOMEM;
        } else if (strcmp(k, "mmproj") == 0) {
            char v[4096 + MODEL_NAME_MAX];
            if (!sv) {
                problem(r, sl, "models.mmproj takes the path of a projector file");
                continue;
            }
            snprintf(v, sizeof v, "%s=%s", mo.name, sv);
            rc = add_arg(r, "--mmproj");
            if (rc == 0) rc = add_arg(r, v);
        } else {
            unknown_key(r, sl, k, "models.");
        }
    }
    config_src_t *src = r->src;
    if (rc == 0 && (mo.ctx_size || mo.slots || mo.llamacpp_args)) {
        if (src->n_model_opts >= CONFIG_MAX_MODELS) {
            problem(r, line, "too many models (at most %d)", CONFIG_MAX_MODELS);
        } else {
            src->model_opts[src->n_model_opts++] = mo;
            return 0;
        }
    }
    free(mo.llamacpp_args);
    return rc;
}

static int read_models(reader_t *r, const config_setting_t *s)
{
    if (!config_setting_is_aggregate(s) || config_setting_is_group(s)) {
        problem(r, (int)config_setting_source_line(s),
                "models is a list: models = ( { model = \"...\"; }, \"other.gguf\" );");
        return 0;
    }
    int rc = 0;
    for (int i = 0; i < config_setting_length(s) && rc == 0; i++)
        rc = read_model(r, config_setting_get_elem(s, (unsigned)i));
    return rc;
}

/* devices = ( { name = "CUDA0"; }, ... ): reserved for per-device settings; none exist yet */
static void read_devices(reader_t *r, const config_setting_t *s)
{
    if (!config_setting_is_list(s)) {
        problem(r, (int)config_setting_source_line(s),
                "devices is a list of groups: devices = ( { name = \"CUDA0\"; } );");
        return;
    }
    for (int i = 0; i < config_setting_length(s); i++) {
        const config_setting_t *d = config_setting_get_elem(s, (unsigned)i);
        int line = (int)config_setting_source_line(d);
        const char *name;
        if (!config_setting_is_group(d) ||
            config_setting_lookup_string(d, "name", &name) != CONFIG_TRUE) {
            problem(r, line, "a devices entry is a group with name = \"DEVICE\"");
            continue;
        }
        for (int k = 0; k < config_setting_length(d); k++) {
            const config_setting_t *e = config_setting_get_elem(d, (unsigned)k);
            if (strcmp(config_setting_name(e), "name") != 0)
                problem(r, (int)config_setting_source_line(e),
                        "unknown key 'devices.%s' (no per-device settings yet besides name)",
                        config_setting_name(e));
        }
    }
}

static const char *const SECTIONS[] = {"api", "mesh", "discovery", "log"};

static int read_setting(reader_t *r, const config_setting_t *s, const char *prefix)
{
    const char *name = config_setting_name(s);
    int line = (int)config_setting_source_line(s);
    if (!*prefix && strcmp(name, "models") == 0) return read_models(r, s);
    if (!*prefix && strcmp(name, "devices") == 0) {
        read_devices(r, s);
        return 0;
    }
    if (!*prefix && config_setting_is_group(s)) {
        for (size_t i = 0; i < sizeof SECTIONS / sizeof SECTIONS[0]; i++)
            if (strcmp(name, SECTIONS[i]) == 0) {
                char p[32];
                snprintf(p, sizeof p, "%s.", name);
                int rc = 0;
                for (int k = 0; k < config_setting_length(s) && rc == 0; k++)
                    rc = read_setting(r, config_setting_get_elem(s, (unsigned)k), p);
                return rc;
            }
        const char *near = suggest_closest(name, SECTIONS, sizeof SECTIONS / sizeof SECTIONS[0]);
        if (near)
            problem(r, line, "unknown section '%s'; did you mean '%s'?", name, near);
        else
            problem(r, line,
                    "unknown section '%s' (sections: api, mesh, discovery, log; and "
                    "the lists models and devices)",
                    name);
        return 0;
    }
    char key[160];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    const mesh_option_t *o = options_by_key(key);
    if (!o || strncmp(key, "models.", 7) == 0) {
        unknown_key(r, line, name, prefix);
        return 0;
    }
    return read_option(r, o, s, key);
}

/* Read path into r (arguments in file order). */
static int read_file(reader_t *r, const char *path)
{
    r->path = path;
    struct stat st;
    if (stat(path, &st) != 0) {
        problem(r, 0, "%s", strerror(errno));
        return 0;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > CONFIG_FILE_MAX) {
        problem(r, 0, "not a regular file of at most %d bytes", CONFIG_FILE_MAX);
        return 0;
    }
    libconfig_t cf;
    config_init(&cf);
    if (config_read_file(&cf, path) != CONFIG_TRUE) {
        if (config_error_type(&cf) == CONFIG_ERR_FILE_IO)
            problem(r, 0, "cannot read it: %s", strerror(errno));
        else
            problem(r, config_error_line(&cf), "%s", config_error_text(&cf));
        config_destroy(&cf);
        return 0;
    }
    const config_setting_t *root = config_root_setting(&cf);
    const char *md;
    if (config_lookup_string(&cf, "models_dir", &md) == CONFIG_TRUE) r->models_dir = md;
    int rc = 0;
    for (int i = 0; i < config_setting_length(root) && rc == 0; i++)
        rc = read_setting(r, config_setting_get_elem(root, (unsigned)i), "");
    r->models_dir = NULL;
    config_destroy(&cf);
    return rc;
}

int config_file_check(const char *path, FILE *out)
{
    config_src_t src;
    memset(&src, 0, sizeof src);
    char *args[CONFIG_SRC_MAX_ARGS];
    reader_t r = {.src = &src, .args = args, .report = out};
    int rc = read_file(&r, path);
    int problems = r.n_problems;
    free(r.first);
    config_src_free(&src);
    if (rc == -ENOMEM) {
        fprintf(out, "%s: out of memory\n", path);
        return 2;
    }
    if (problems) return 2;
    fprintf(out, "%s: OK\n", path);
    return 0;
}

/* --config FILE (or --config=FILE) on the command line, else NULL */
static const char *config_arg(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strcmp(argv[i], "--config") == 0) return i + 1 < argc ? argv[i + 1] : "";
        if (strncmp(argv[i], "--config=", 9) == 0) return argv[i] + 9;
    }
    return NULL;
}

/* whether the command line gives option o (long or short form) */
static bool in_argv(const mesh_option_t *o, int argc, char **argv)
{
    size_t nl = strlen(o->name), n, ns = 0;
    const mesh_option_t *all = options_all(&n);
    char shorts[16];
    for (size_t i = 0; i < n && ns < sizeof shorts - 1; i++)
        if (all[i].short_name) shorts[ns++] = all[i].short_name;
    shorts[ns] = '\0';
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) break;
        if (a[0] == '-' && a[1] == '-' && strncmp(a + 2, o->name, nl) == 0 &&
            (a[2 + nl] == '\0' || a[2 + nl] == '='))
            return true;
        /* a cluster of short switches ("-vh"), not a value that starts with '-' */
        if (o->short_name && a[0] == '-' && a[1] && strspn(a + 1, shorts) == strlen(a + 1) &&
            strchr(a + 1, o->short_name))
            return true;
    }
    return false;
}

/* Keep the file's arguments of options neither the command line nor the environment gives. */
static int merge(config_src_t *src, char **fargs, int nf, int argc, char **argv)
{
    src->argv = calloc((size_t)(argc + nf + 1), sizeof *src->argv);
    if (!src->argv) return -ENOMEM;
    src->argv[src->argc++] = argv[0];
    for (int i = 0; i < nf;) {
        const mesh_option_t *o = options_by_name(fargs[i] + 2);
        /* a flag's values: by its kind (a value may start with "--": llamacpp_args) */
        int j = i + 1 + (o && o->value != OPTV_SWITCH ? 1 : 0);
        if (o && o->value == OPTV_INTS)
            while (j < nf && strncmp(fargs[j], "--", 2) != 0)
                j++;
        bool env = o && o->env && getenv(o->env) && *getenv(o->env);
        if (o && !env && !in_argv(o, argc, argv))
            for (int k = i; k < j; k++)
                src->argv[src->argc++] = fargs[k];
        i = j;
    }
    for (int i = 1; i < argc; i++)
        src->argv[src->argc++] = argv[i];
    src->argv[src->argc] = NULL;
    return 0;
}

int config_src_load(config_src_t *src, int argc, char **argv, char *err, size_t errlen)
{
    memset(src, 0, sizeof *src);
    err[0] = '\0';
    const char *path = config_arg(argc, argv);
    if (path && !*path) {
        snprintf(err, errlen, "--config needs a file");
        return -EINVAL;
    }
    if (!path) {
        char home[4096];
        struct stat st;
        if (identity_home(getenv("MESH_LLM_HOME"), home, sizeof home) == 0 &&
            (size_t)snprintf(src->path, sizeof src->path, "%s/config", home) < sizeof src->path &&
            stat(src->path, &st) == 0)
            path = src->path;
        else
            src->path[0] = '\0';
    }
    char **fargs = calloc(CONFIG_SRC_MAX_ARGS, sizeof *fargs);
    if (!fargs) return -ENOMEM;
    reader_t r = {.src = src, .args = fargs};
    int rc = path ? read_file(&r, path) : 0;
    if (rc == 0 && r.n_problems) {
        snprintf(err, errlen, "%s%s", r.first ? r.first : "bad config file",
                 r.n_problems > 1 ? " (and more: mesh-llm config check FILE lists them all)" : "");
        rc = -EINVAL;
    }
    free(r.first);
    if (path && path != src->path) snprintf(src->path, sizeof src->path, "%s", path);
    if (rc == 0) rc = merge(src, fargs, r.n_args, argc, argv);
    free(fargs);
    if (rc) {
        if (!err[0]) snprintf(err, errlen, "%s", strerror(-rc));
        config_src_free(src);
    }
    return rc;
}

void config_src_free(config_src_t *src)
{
    for (size_t i = 0; i < src->n_owned; i++) {
        sodium_memzero(src->owned[i], strlen(src->owned[i]));
        free(src->owned[i]);
    }
    for (size_t i = 0; i < src->n_model_opts; i++)
        free(src->model_opts[i].llamacpp_args);
    free(src->argv);
    memset(src, 0, sizeof *src);
}

bool config_src_owns(const config_src_t *src, const char *s)
{
    for (size_t i = 0; i < src->n_owned; i++)
        if (src->owned[i] == s) return true;
    return false;
}

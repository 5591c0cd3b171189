#include "config_int.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "httpd_guard.h"
#include "config_file.h"
#include "devices.h"
#include "llama_args.h"
#include "slots.h"
#include "model_fetch.h"
#include "options.h"
#include "suggest.h"
#include "util.h"

#define DEFAULT_MAX_BODY (8u * 1024 * 1024)

const char *model_type_name(model_type_t t)
{
    switch (t) {
    case MODEL_TYPE_EMBEDDING:
        return "embedding";
    case MODEL_TYPE_RERANKING:
        return "reranking";
    default:
        return "llm";
    }
}

int config_parse_model_arg(const char *arg, config_model_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    size_t len = strlen(arg);
    static const struct {
        const char *suffix;
        model_type_t type;
    } labels[] = {{":llm", MODEL_TYPE_LLM},
                  {":embedding", MODEL_TYPE_EMBEDDING},
                  {":reranking", MODEL_TYPE_RERANKING}};
    out->type = MODEL_TYPE_AUTO;
    for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++) {
        size_t sl = strlen(labels[i].suffix);
        if (len > sl && strcmp(arg + len - sl, labels[i].suffix) == 0) {
            out->type = labels[i].type;
            len -= sl;
            break;
        }
    }
    if (len == 0) {
        snprintf(err, errlen, "--model needs a path to a .gguf file");
        return -EINVAL;
    }
    char *path = strndup(arg, len);
    if (!path) return -ENOMEM;
    struct stat st;
    if (stat(path, &st) != 0 && !strchr(path, '/')) {
        /* A bare name: look in ~/.models/NAME.gguf. */
        const char *home = getenv("HOME");
        char alt[4096];
        snprintf(alt, sizeof alt, "%s/.models/%s.gguf", home ? home : "", path);
        if (stat(alt, &st) == 0) {
            free(path);
            path = strdup(alt);
            if (!path) return -ENOMEM;
        }
    }
    if (stat(path, &st) != 0) {
        int e = errno;
        snprintf(err, errlen, "model file %s: %s", path, strerror(e));
        free(path);
        return e == ENOENT ? -ENOENT : -EINVAL;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "model %s is not a regular file", path);
        free(path);
        return -EINVAL;
    }
    if (model_name_from_path(path, out->name, sizeof out->name) != 0) {
        snprintf(err, errlen, "model %s: cannot derive a name from the file name", path);
        free(path);
        return -EINVAL;
    }
    out->path = path;
    return 0;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-') return -EINVAL;
    unsigned long long mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024 * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1024ULL * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end || v == 0 || v > (1ULL << 40) / mul) return -EINVAL;
    *out = (size_t)(v * mul);
    return 0;
}

/* A bare model name (no directory, no .gguf, no :type label): when no file of that name
 * exists, the node asks the mesh for it (seed 000: "mesh-llm --model Qwen2.5-3B --join"). */
static bool requested_name(const char *arg)
{
    size_t n = strlen(arg);
    if (n == 0 || n >= MODEL_NAME_MAX || strchr(arg, '/') || strchr(arg, ':')) return false;
    if (n > 5 && strcmp(arg + n - 5, ".gguf") == 0) return false;
    for (const unsigned char *p = (const unsigned char *)arg; *p; p++)
        if (*p < 0x20 || *p == 0x7f) return false;
    return true;
}

static int add_requested(config_t *cfg, const char *name, char *err, size_t errlen)
{
    for (size_t i = 0; i < cfg->n_requested; i++)
        if (strcmp(cfg->requested[i], name) == 0) return 0;
    if (cfg->n_requested >= CONFIG_MAX_MODELS) {
        snprintf(err, errlen, "too many models (at most %d)", CONFIG_MAX_MODELS);
        return -EINVAL;
    }
    snprintf(cfg->requested[cfg->n_requested++], MODEL_NAME_MAX, "%s", name);
    return 0;
}

static int add_model(config_t *cfg, const char *arg, bool from_dir, char *err, size_t errlen)
{
    if (cfg->n_models >= CONFIG_MAX_MODELS) {
        snprintf(err, errlen, "too many models (at most %d)", CONFIG_MAX_MODELS);
        return -EINVAL;
    }
    config_model_t m;
    int rc = config_parse_model_arg(arg, &m, err, errlen);
    if (rc == -ENOENT && !from_dir && requested_name(arg))
        return add_requested(cfg, arg, err, errlen); /* checked against --join at the end */
    if (rc) return rc < 0 && rc != -ENOENT ? rc : -EINVAL;
    for (size_t i = 0; i < cfg->n_models; i++) {
        if (strcmp(cfg->models[i].name, m.name) == 0) {
            if (strcmp(cfg->models[i].path, m.path) == 0) { /* same file twice: once is enough */
                free(m.path);
                return 0;
            }
            snprintf(err, errlen, "two models are named '%s' (%s and %s); rename one file", m.name,
                     cfg->models[i].path, m.path);
            free(m.path);
            return -EINVAL;
        }
    }
    m.from_dir = from_dir;
    cfg->models[cfg->n_models++] = m;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Why a --models-dir entry named *.gguf cannot be a model, or NULL when it can. Symlinks are
 * resolved by stat(), which the kernel bounds (ELOOP after 40 links). Only regular files are
 * models: a directory, FIFO, socket or device (a link to /dev/zero) would hang or fail a reader. */
static const char *dir_entry_problem(const char *path, char *buf, size_t len)
{
    struct stat lst, st;
    if (lstat(path, &lst) != 0) {
        snprintf(buf, len, "%s", strerror(errno));
        return buf;
    }
    bool link = S_ISLNK(lst.st_mode);
    if (!link) {
        st = lst;
    } else if (stat(path, &st) != 0) {
        int e = errno;
        if (e == ENOENT)
            snprintf(buf, len, "dangling symlink (its target does not exist)");
        else if (e == ELOOP)
            snprintf(buf, len, "symlink loop (%s)", strerror(e));
        else
            snprintf(buf, len, "symlink target: %s", strerror(e));
        return buf;
    }
    if (S_ISREG(st.st_mode)) return NULL;
    const char *what = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "something else";
    snprintf(buf, len, "%s%s, not a regular file", link ? "symlink to " : "", what);
    return buf;
}

/* Remember a line for the log (written once logging is set up). */
static void add_note(config_t *cfg, const char *line)
{
    size_t old = cfg->notes ? strlen(cfg->notes) : 0, add = strlen(line);
    if (old + add > 64 * 1024) return; /* bounded: a directory of junk cannot grow it forever */
    char *n = realloc(cfg->notes, old + add + 2);
    if (!n) return;
    memcpy(n + old, line, add);
    n[old + add] = '\n';
    n[old + add + 1] = '\0';
    cfg->notes = n;
}

/* lenient: the default models directory (~/.models), which the user did not name: absent is
 * nothing to serve, and what cannot be added (a name --model took already, too many) is
 * skipped with a note instead of stopping the node. */
static int add_models_dir(config_t *cfg, const char *dir, bool lenient, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d && lenient && errno == ENOENT) return 0;
    if (!d) {
        snprintf(err, errlen, "--models-dir %s: %s", dir, strerror(errno));
        if (lenient) add_note(cfg, err);
        return lenient ? 0 : -EINVAL;
    }
    char *names[CONFIG_MAX_MODELS];
    size_t n = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcasecmp(e->d_name + len - 5, ".gguf") != 0 || e->d_name[0] == '.' ||
            model_ref_is_mmproj(e->d_name)) /* a model's vision projector, not a model */
            continue;
        char *path = malloc(strlen(dir) + len + 2);
        if (!path) {
            rc = -ENOMEM;
            break;
        }
        sprintf(path, "%s/%s", dir, e->d_name);
        /* one bad entry is skipped with a warning: it never stops the node */
        char why[256], line[PATH_MAX + 320];
        if (dir_entry_problem(path, why, sizeof why)) {
            snprintf(line, sizeof line, "--models-dir: skipping %s: %s", path, why);
            add_note(cfg, line);
            free(path);
            continue;
        }
        if (n >= CONFIG_MAX_MODELS) {
            snprintf(err, errlen, "--models-dir %s: more than %d models", dir, CONFIG_MAX_MODELS);
            free(path);
            rc = -EINVAL;
            break;
        }
        names[n++] = path;
    }
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_str); /* deterministic order */
    for (size_t i = 0; i < n; i++) {
        if (rc == 0) rc = add_model(cfg, names[i], true, err, errlen);
        if (rc && lenient) {
            char line[1200];
            snprintf(line, sizeof line, "%s: not served from %s: %s", names[i], dir, err);
            add_note(cfg, line);
            err[0] = '\0';
            rc = 0;
        }
        free(names[i]);
    }
    return rc;
}

/* Without --models-dir, the models directory where downloads land (~/.models, DESIGN §8) is
 * served the same way: its files are known models, loaded on first use (not at start). */
static int add_default_models_dir(config_t *cfg, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    mf_default_dir(NULL, dir, sizeof dir);
    return add_models_dir(cfg, dir, true, err, errlen);
}

#define OPTIONS_MAX 64

/* getopt_long's table, from the option table */
static void build_getopt(struct option *opts)
{
    size_t n, k = 0;
    const mesh_option_t *all = options_all(&n);
    for (size_t i = 0; i < n && k < OPTIONS_MAX; i++, k++)
        opts[k] = (struct option){all[i].name,
                                  all[i].value == OPTV_SWITCH ? no_argument : required_argument,
                                  NULL, all[i].id};
    opts[k] = (struct option){NULL, 0, NULL, 0};
}

/* "unknown option '--prot'; did you mean --port?" */
static void unknown_option(int opt, const char *arg, char *err, size_t errlen)
{
    if (opt && opt < 256) {
        snprintf(err, errlen, "unknown option '-%c'", opt);
        return;
    }
    char name[SUGGEST_NAME_MAX + 1];
    const char *p = arg + strspn(arg, "-");
    snprintf(name, sizeof name, "%.*s", (int)strcspn(p, "="), p);
    const char *near = options_suggest(name);
    if (near)
        snprintf(err, errlen, "unknown option '%s'; did you mean --%s?", arg, near);
    else
        snprintf(err, errlen, "unknown option '%s'", arg);
}

static int parse_port(const char *s, const char *flag, int *out, char *err, size_t errlen)
{
    uint64_t v;
    if (parse_u64(s, 0, 65535, &v)) {
        snprintf(err, errlen, "%s needs a port number 0-65535, got '%s'", flag, s);
        return -EINVAL;
    }
    *out = (int)v;
    return 0;
}

static int parse(config_t *cfg, int argc, char **argv, const config_src_t *src, char *err,
                 size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->port = 9337;
    cfg->console_port = 3131;
    cfg->ollama_port = -1;
    cfg->max_body_bytes = DEFAULT_MAX_BODY;
    cfg->log_format = LOG_FORMAT_PRETTY;
    cfg->max_loaded[0] = cfg->max_loaded[1] = cfg->max_loaded[2] = 1;
    cfg->queue_len = 256;
    err[0] = '\0';
    /* every MESH_LLM_* tunable, read once here (tunables.h); a value not accepted keeps its
     * default, as the call sites always did, and is noted in the log */
    char terr[512];
    if (tunables_load(&cfg->tun, NULL, terr, sizeof terr) != 0 && terr[0]) add_note(cfg, terr);

    optind = 0; /* 0: glibc fully re-initialises (clustered short options) */
    opterr = 0;
    int c, rc = 0;
    uint64_t v = 0;
    struct option opts[OPTIONS_MAX + 1];
    build_getopt(opts);
    bool from_file = false;
    while (rc == 0 && (c = getopt_long(argc, argv, ":vh", opts, NULL)) != -1) {
        from_file = src && optind > 0 && config_src_owns(src, argv[optind - 1]);
        switch (c) {
        case OPT_MODEL:
            rc = add_model(cfg, optarg, false, err, errlen);
            break;
        case OPT_MODELS_DIR:
            free(cfg->models_dir);
            cfg->models_dir = strdup(optarg);
            rc = add_models_dir(cfg, optarg, false, err, errlen);
            break;
        case OPT_PORT:
            rc = parse_port(optarg, "--port", &cfg->port, err, errlen);
            break;
        case OPT_CONSOLE:
            rc = parse_port(optarg, "--console", &cfg->console_port, err, errlen);
            break;
        case OPT_OLLAMA_PORT:
            rc = parse_port(optarg, "--ollama-port", &cfg->ollama_port, err, errlen);
            break;
        case OPT_HEADLESS:
            cfg->headless = true;
            break;
        case OPT_LISTEN_ALL:
            cfg->listen_all = true;
            break;
        case OPT_CTX:
            if (parse_u64(optarg, 1, 1u << 24, &v)) {
                snprintf(err, errlen, "--ctx-size needs a number of tokens from 1 to %u, got '%s'",
                         1u << 24, optarg);
                rc = -EINVAL;
            }
            cfg->ctx_size = (uint32_t)v;
            break;
        case OPT_SLOTS:
            if (parse_u64(optarg, 1, SLOTS_MAX, &v)) {
                snprintf(err, errlen, "--slots needs a number of slots from 1 to %d, got '%s'",
                         SLOTS_MAX, optarg);
                rc = -EINVAL;
            }
            cfg->slots = (uint32_t)v;
            break;
        case OPT_LLAMA_ARGS: {
            /* the operator is trusted: only the flags the node manages are refused */
            rc = llama_args_check(optarg, LLAMA_ARGS_OPERATOR, NULL, err, errlen);
            if (rc) {
                rc = rc == -ENOMEM ? rc : -EINVAL;
                break;
            }
            free(cfg->llamacpp_args);
            cfg->llamacpp_args = strdup(optarg);
            break;
        }
        case OPT_BIN_DIR:
            free(cfg->bin_dir);
            cfg->bin_dir = strdup(optarg);
            break;
        case OPT_API_KEY:
            if (!*optarg) {
                snprintf(err, errlen, "--api-key must not be empty");
                rc = -EINVAL;
                break;
            }
            rc = config_set_api_key(cfg, optarg, strlen(optarg), "--api-key", err, errlen);
            cfg->api_key_in_argv = rc == 0 && !from_file;
            break;
        case OPT_MAX_BODY:
            if (parse_size(optarg, &cfg->max_body_bytes)) {
                snprintf(err, errlen, "--max-body-size needs a size like 8M or 65536, got '%s'",
                         optarg);
                rc = -EINVAL;
            }
            break;
        case OPT_MAX_CONNS: {
            char *end;
            errno = 0;
            unsigned long nc = strtoul(optarg, &end, 10);
            if (errno || *end || end == optarg || nc < 1 || nc > 1000000) {
                snprintf(err, errlen,
                         "--max-connections needs a number from 1 to 1000000, got '%s'", optarg);
                rc = -EINVAL;
            } else {
                cfg->max_connections = (unsigned)nc;
            }
            break;
        }
        case OPT_LOG_FORMAT:
            if (strcmp(optarg, "pretty") == 0)
                cfg->log_format = LOG_FORMAT_PRETTY;
            else if (strcmp(optarg, "json") == 0)
                cfg->log_format = LOG_FORMAT_JSON;
            else {
                snprintf(err, errlen, "--log-format must be pretty or json, got '%s'", optarg);
                rc = -EINVAL;
            }
            break;
        case OPT_MAX_LOADED: {
            /* 1 to 3 positive integers: LLM [EMBEDDING [RERANKING]]; missing values are 1 */
            const char *vals[3] = {optarg, NULL, NULL};
            int nv = 1;
            /* the next words are its values, negative numbers included (refused below) */
            while (nv < 3 && optind < argc &&
                   (argv[optind][0] != '-' || (argv[optind][1] >= '0' && argv[optind][1] <= '9')))
                vals[nv++] = argv[optind++];
            for (int k = 0; k < nv && rc == 0; k++) {
                if (parse_u64(vals[k], 1, 1024, &v)) {
                    snprintf(err, errlen,
                             "--max-loaded-models takes 1 to 3 positive integers "
                             "(LLM [EMBEDDING [RERANKING]]), got '%s'",
                             vals[k]);
                    rc = -EINVAL;
                }
                cfg->max_loaded[k] = (unsigned)v;
            }
            break;
        }
        case OPT_JOIN:
            rc = config_join_arg(cfg, optarg, err, errlen);
            if (from_file) cfg->join_in_argv = false; /* the file's tokens: not in argv */
            break;
        case OPT_AUTO:
        case OPT_PUBLISH:
        case OPT_REGION:
        case OPT_NOSTR_RELAY:
            rc = config_nostr_opt(cfg, c, optarg, err, errlen);
            break;
        case OPT_MESH_NAME:
            if (!*optarg || strlen(optarg) > 128) {
                snprintf(err, errlen, "--mesh-name needs a name of 1 to 128 characters");
                rc = -EINVAL;
                break;
            }
            free(cfg->mesh_name);
            free(cfg->device);
            cfg->mesh_name = strdup(optarg);
            break;
        case OPT_BIND_PORT:
            rc = parse_port(optarg, "--bind-port", &cfg->bind_port, err, errlen);
            break;
        case OPT_MAX_VRAM: {
            char *end = NULL;
            errno = 0;
            double gb = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(gb > 0) || gb > 1e6) {
                snprintf(err, errlen,
                         "--max-vram needs a size in GB greater than 0, like 8 or 0.5, got '%s'",
                         optarg);
                rc = -EINVAL;
                break;
            }
            cfg->max_vram_bytes = (uint64_t)(gb * 1e9);
            if (cfg->max_vram_bytes == 0) cfg->max_vram_bytes = 1;
            break;
        }
        case OPT_OFFLOAD_RAM: {
            char *end = NULL;
            errno = 0;
            double gb = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(gb >= 0) || gb > 1e6) {
                snprintf(err, errlen,
                         "--offload-ram needs a size in GB (0 or more), like 16 or 0.5, got '%s'",
                         optarg);
                rc = -EINVAL;
                break;
            }
            cfg->offload_ram_bytes = (uint64_t)(gb * 1e9);
            break;
        }
        case OPT_DEVICE:
            if (devices_list_valid(optarg) != 0) {
                snprintf(err, errlen,
                         "--device needs device names as llama-server --list-devices gives them "
                         "(like Vulkan0 or CUDA0,CUDA1), or none, got '%s'",
                         optarg);
                rc = -EINVAL;
                break;
            }
            free(cfg->device);
            cfg->device = strdup(optarg);
            break;
        case OPT_SPLIT:
            cfg->split = true;
            break;
        case OPT_SPLIT_PRIVATE:
            cfg->split_private = true;
            break;
        case OPT_OWN_MESH:
            cfg->own_mesh = true;
            break;
        case OPT_CLIENT:
            cfg->client = true;
            break;
        case OPT_RELAY:
            cfg->relay = true;
            break;
        case OPT_STUN:
        case OPT_TURN:
        case OPT_TURN_USER:
        case OPT_TURN_PASSWORD_FILE:
        case OPT_TURN_PASSWORD:
            rc = config_nat_server(cfg, c, optarg, from_file, err, errlen);
            break;
        case OPT_NO_PORTMAP:
            cfg->no_portmap = true;
            break;
        case OPT_ALLOW_ORIGIN:
            rc = config_allow_origin(cfg, optarg, err, errlen);
            break;
        case OPT_API_KEY_FILE:
            rc = config_api_key_file(cfg, optarg, err, errlen);
            break;
        case OPT_API_KEYS:
            free(cfg->api_keys_file);
            cfg->api_keys_file = strdup(optarg);
            if (!cfg->api_keys_file) rc = -ENOMEM;
            break;
        case OPT_QUEUE_LEN:
            if (parse_u64(optarg, 0, 4096, &v)) {
                snprintf(err, errlen, "--queue-len takes 0-4096, got '%s'", optarg);
                rc = -EINVAL;
            } else {
                cfg->queue_len = (unsigned)v;
            }
            break;
        case OPT_PIN:
            if (cfg->n_pins >= CONFIG_MAX_MODELS || !*optarg || strlen(optarg) >= MODEL_NAME_MAX) {
                snprintf(err, errlen, "--pin takes a model name (at most %d pins)",
                         CONFIG_MAX_MODELS);
                rc = -EINVAL;
            } else {
                snprintf(cfg->pins[cfg->n_pins++], MODEL_NAME_MAX, "%s", optarg);
            }
            break;
        case OPT_DRAFT:
            rc = config_draft_arg(cfg, optarg, err, errlen);
            break;
        case OPT_NO_DRAFT:
            cfg->no_draft = true;
            break;
        case OPT_MMPROJ:
            rc = config_mmproj_arg(cfg, optarg, err, errlen);
            break;
        case 'v':
        case OPT_VERBOSE:
            cfg->verbose = true;
            break;
        case 'h':
        case OPT_HELP:
            options_usage(stdout);
            return CONFIG_EXIT;
        case OPT_HELP_MARKDOWN:
            options_markdown(stdout);
            return CONFIG_EXIT;
        case OPT_CONFIG:
            break; /* read before (config_file.c) */
        case OPT_VERSION:
            printf("mesh-llm %s\n", MESH_VERSION);
            return CONFIG_EXIT;
        case ':':
            snprintf(err, errlen, "%s needs a value", argv[optind - 1]);
            rc = -EINVAL;
            break;
        default:
            unknown_option(optopt, argv[optind - 1], err, errlen);
            rc = -EINVAL;
            break;
        }
    }
    if (rc && from_file && strlen(err) + 40 < errlen)
        snprintf(err + strlen(err), errlen - strlen(err), " (in the config file %s)", src->path);
    if (rc == 0) rc = config_secrets_from_env(cfg, err, errlen);
    if (rc == 0 && config_env_bin_dir() && !(cfg->bin_dir_env = strdup(config_env_bin_dir())))
        rc = -ENOMEM;
    if (rc == 0) rc = config_serve_finish(cfg, err, errlen);
    if (rc == 0 && optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s' (models are given with --model PATH)",
                 argv[optind]);
        rc = -EINVAL;
    }
    if (rc == 0 && cfg->own_mesh && (cfg->n_joins > 0 || cfg->client)) {
        snprintf(err, errlen,
                 "--own-mesh forms this node's own mesh; it cannot be combined with %s",
                 cfg->client ? "--client" : "--join");
        rc = -EINVAL;
    }
    if (rc == 0 && cfg->n_joins > 0 && cfg->mesh_name) {
        snprintf(err, errlen,
                 "--mesh-name names a mesh you create; it cannot be combined with --join");
        rc = -EINVAL;
    }
    if (rc == 0 && cfg->client &&
        (cfg->n_models > 0 || cfg->n_requested > 0 || cfg->models_dir || cfg->split ||
         cfg->split_private)) {
        snprintf(err, errlen, "--client nodes serve no model: drop %s or --client",
                 cfg->split                          ? "--split"
                 : cfg->split_private                ? "--split-private"
                 : cfg->n_models || cfg->n_requested ? "--model"
                                                     : "--models-dir");
        rc = -EINVAL;
    }
    if (rc == 0) rc = config_nostr_check(cfg, err, errlen);
    if (rc == 0 && cfg->n_requested > 0 && cfg->n_joins == 0 && !cfg->auto_join) {
        const char *home = getenv("HOME");
        snprintf(err, errlen,
                 "model '%s': no such file (also looked for %s/.models/%s.gguf). Give the path "
                 "to a .gguf file, or add --join TOKEN to ask a mesh for it by name",
                 cfg->requested[0], home ? home : "", cfg->requested[0]);
        rc = -EINVAL;
    }
    if (rc == 0 && cfg->client && cfg->n_joins == 0) {
        snprintf(err, errlen, "--client routes through a mesh: give the mesh with --join TOKEN");
        rc = -EINVAL;
    }
    if (rc == 0 && !cfg->headless && cfg->console_port != 0 && cfg->console_port == cfg->port) {
        snprintf(err, errlen, "--port and --console must differ (both %d)", cfg->port);
        rc = -EINVAL;
    }
    if (rc == 0 && cfg->ollama_port > 0 &&
        (cfg->ollama_port == cfg->port ||
         (!cfg->headless && cfg->ollama_port == cfg->console_port))) {
        snprintf(err, errlen, "--ollama-port must differ from --port and --console (%d)",
                 cfg->ollama_port);
        rc = -EINVAL;
    }
    if (rc == 0 && cfg->headless && config_idle(cfg)) {
        snprintf(err, errlen,
                 "--headless: with no --model, --models-dir, --join or --own-mesh the node starts "
                 "idle and "
                 "joins a mesh through its management API (POST /api/join, the console), which "
                 "--headless turns off; give --join TOKEN or --model PATH, or drop --headless");
        rc = -EINVAL;
    }
    if (rc == 0 && !cfg->models_dir && !cfg->client) rc = add_default_models_dir(cfg, err, errlen);
    if (rc && !err[0]) snprintf(err, errlen, "%s", strerror(-rc));
    return rc < 0 ? rc : CONFIG_OK;
}

size_t config_named_models(const config_t *cfg)
{
    size_t named = 0;
    for (size_t i = 0; i < cfg->n_models; i++)
        named += !cfg->models[i].from_dir;
    return named;
}

int config_parse(config_t *cfg, int argc, char **argv, char *err, size_t errlen)
{
    return parse(cfg, argc, argv, NULL, err, errlen);
}

int config_parse_src(config_t *cfg, config_src_t *src, char *err, size_t errlen)
{
    int rc = parse(cfg, src->argc, src->argv, src, err, errlen);
    if (rc != CONFIG_OK) return rc;
    /* the file's per-model settings move to cfg */
    memcpy(cfg->model_opts, src->model_opts, sizeof cfg->model_opts);
    cfg->n_model_opts = src->n_model_opts;
    src->n_model_opts = 0;
    if (src->path[0] && !(cfg->config_path = strdup(src->path))) return -ENOMEM;
    cfg->config_has_secret = src->has_secret;
    return CONFIG_OK;
}

const config_model_opts_t *config_model_opts_of(const config_t *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_model_opts; i++)
        if (strcmp(cfg->model_opts[i].name, name) == 0) return &cfg->model_opts[i];
    return NULL;
}

uint32_t config_ctx_of(const config_t *cfg, const char *name)
{
    const config_model_opts_t *mo = config_model_opts_of(cfg, name);
    return mo && mo->ctx_size ? mo->ctx_size : cfg->ctx_size;
}

uint32_t config_slots_of(const config_t *cfg, const char *name)
{
    const config_model_opts_t *mo = config_model_opts_of(cfg, name);
    return mo && mo->slots ? mo->slots : cfg->slots;
}

const char *config_llamacpp_args_of(const config_t *cfg, const char *name)
{
    const config_model_opts_t *mo = config_model_opts_of(cfg, name);
    return mo && mo->llamacpp_args ? mo->llamacpp_args : cfg->llamacpp_args;
}

bool config_idle(const config_t *cfg)
{
    /* the default models directory's files do not make a node leave idle */
    return config_named_models(cfg) == 0 && cfg->n_requested == 0 && !cfg->models_dir &&
           cfg->n_joins == 0 && !cfg->client && !cfg->mesh_name && !cfg->own_mesh &&
           !cfg->auto_join && !cfg->publish;
}

const char *config_env_bin_dir(void)
{
    return getenv("MESH_LLM_BIN_DIR");
}

void config_free(config_t *cfg)
{
    free(cfg->bin_dir_env);
    cfg->bin_dir_env = NULL;
    for (size_t i = 0; i < cfg->n_models; i++)
        free(cfg->models[i].path);
    free(cfg->models_dir);
    free(cfg->notes);
    free(cfg->llamacpp_args);
    free(cfg->bin_dir);
    if (cfg->api_key) sodium_memzero(cfg->api_key, strlen(cfg->api_key));
    free(cfg->api_key);
    config_nat_servers_free(cfg);
    for (size_t i = 0; i < cfg->n_allow_origins; i++)
        free(cfg->allow_origins[i]);
    free(cfg->mesh_name);
    free(cfg->api_keys_file);
    free(cfg->config_path);
    for (size_t i = 0; i < cfg->n_model_opts; i++)
        free(cfg->model_opts[i].llamacpp_args);
    config_nostr_free(cfg);
    config_serve_free(cfg);
    sodium_memzero(cfg->joins, sizeof cfg->joins);
    memset(cfg, 0, sizeof *cfg);
}

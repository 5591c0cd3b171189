/* cli_models — see cli_models.h. */
#include "cli_models.h"

#include <dirent.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "download.h"
#include "log.h"
#include "model_fetch.h"
#include "model_ref.h"
#include "offer.h"
#include "options.h"
#include "tunables.h"
#include "bin_find.h"
#include "config.h"
#include "util.h"

typedef struct {
    uv_loop_t loop;
    dl_t *d;
    uv_timer_t progress;
    uv_signal_t sigint, sigterm;
    bool tty, drew, interrupted;
    int rc;
    char path[2048];
    bool already;
    char err[1024];
} run_t;

static void progress_cb(uv_timer_t *t)
{
    run_t *r = t->data;
    dl_progress_t p[4];
    size_t n = dl_list(r->d, p, 4);
    for (size_t i = 0; i < n; i++) {
        char line[600];
        dl_format_progress(&p[i], r->tty, line, sizeof line);
        if (r->tty) {
            fprintf(stderr, "\r%-100.100s", line);
            r->drew = true;
        } else {
            fprintf(stderr, "downloading %s\n", line);
        }
    }
    fflush(stderr);
}

static void stop_handles(run_t *r)
{
    uv_timer_stop(&r->progress);
    uv_close((uv_handle_t *)&r->progress, NULL);
    uv_close((uv_handle_t *)&r->sigint, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
}

static void fetched(void *data, int rc, const char *err, const char *path, bool already)
{
    run_t *r = data;
    if (r->tty && r->drew) fprintf(stderr, "\n");
    r->rc = rc;
    r->already = already;
    if (path) snprintf(r->path, sizeof r->path, "%s", path);
    if (err) snprintf(r->err, sizeof r->err, "%s", err);
    if (!r->interrupted) {
        stop_handles(r);
        dl_close(r->d);
    }
}

static void signal_cb(uv_signal_t *s, int signum)
{
    run_t *r = s->data;
    if (r->interrupted) return;
    r->interrupted = true;
    stop_handles(r);
    dl_close(r->d); /* fetched() runs with -ECANCELED */
}

/* Fetch ref into dir on a loop of its own. Returns 0, 1 (failed) or 130 (interrupted). */
static int run_fetch(const char *ref, const char *dir, const tunables_t *tun, char *path,
                     size_t pathlen, bool *already)
{
    run_t *r = calloc(1, sizeof *r);
    if (!r) return 1;
    uv_loop_init(&r->loop);
    dl_opts_t o;
    tunables_dl_opts(tun, &o);
    int rc = dl_init(&r->d, &r->loop, &o);
    if (rc) {
        fprintf(stderr, "mesh-llm: cannot start the downloader: %s\n", strerror(-rc));
        free(r);
        return 1;
    }
    r->tty = isatty(STDERR_FILENO);
    uv_timer_init(&r->loop, &r->progress);
    r->progress.data = r;
    /* 250 ms on a terminal unless MESH_LLM_PROGRESS_MS is given */
    uint64_t every = r->tty && !tunables_given(tun, &tun->progress_ms) ? 250 : tun->progress_ms;
    uv_timer_start(&r->progress, progress_cb, every, every);
    uv_signal_init(&r->loop, &r->sigint);
    uv_signal_init(&r->loop, &r->sigterm);
    r->sigint.data = r->sigterm.data = r;
    uv_signal_start(&r->sigint, signal_cb, SIGINT);
    uv_signal_start(&r->sigterm, signal_cb, SIGTERM);
    char err[1024];
    rc = mf_fetch(r->d, ref, dir, fetched, r, err, sizeof err);
    if (rc) {
        fprintf(stderr, "mesh-llm: %s\n", err);
        stop_handles(r);
        dl_close(r->d);
        uv_run(&r->loop, UV_RUN_DEFAULT);
        uv_loop_close(&r->loop);
        free(r);
        return 1;
    }
    uv_run(&r->loop, UV_RUN_DEFAULT);
    uv_loop_close(&r->loop);
    int out;
    if (r->interrupted) {
        fprintf(stderr,
                "mesh-llm: interrupted: the partial download is kept (*.part in %s); "
                "run the same command again to resume\n",
                dir);
        out = 130;
    } else if (r->rc) {
        fprintf(stderr, "mesh-llm: download failed: %s\n", r->err);
        out = 1;
    } else {
        snprintf(path, pathlen, "%s", r->path);
        *already = r->already;
        out = 0;
    }
    free(r);
    return out;
}

/* ---------------------------------------------------------------------------------------- */

/* What a node started with these options would offer (offer.h): --max-vram, the devices the
 * llama-server of --bin-dir (or the default search) lists, else half of the available RAM —
 * never the total RAM, which a node never offers. */
static uint64_t memory_offered(int argc, char **argv, const tunables_t *tun, char *how, size_t len)
{
    const char *bin_dir = NULL;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--max-vram") == 0)
            return offer_compute((uint64_t)(atof(argv[i + 1]) * 1e9), NULL, NULL, NULL, how, len,
                                 NULL);
        if (strcmp(argv[i], "--bin-dir") == 0) bin_dir = argv[i + 1];
    }
    bin_env_t e = {.env_dir = config_env_bin_dir(), .cache = tun->cache};
    char *llama_server = sv_find_binary(bin_dir, "llama-server", &e);
    uint64_t offer = offer_compute(0, NULL, llama_server, NULL, how, len, NULL);
    free(llama_server);
    return offer;
}

static bool on_disk(const known_model_t *k, const char *dir)
{
    char p[2048];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, model_ref_basename(k->file));
    return stat(p, &st) == 0;
}

static void list_catalog(const char *filter, const char *dir, int argc, char **argv,
                         const tunables_t *tun)
{
    char how[256];
    uint64_t mem = memory_offered(argc, argv, tun, how, sizeof how);
    printf("%-30s %-10s %9s %8s  %-5s %-7s %s\n", "NAME", "TYPE", "SIZE", "CONTEXT", "FITS",
           "ON DISK", "REPOSITORY");
    int shown = 0;
    for (size_t i = 0; i < known_models_n; i++) {
        const known_model_t *k = &known_models[i];
        if (filter && !known_model_matches(k, filter)) continue;
        printf("%-30s %-10s %6.1f GB %8u  %-5s %-7s %s%s\n", k->name, known_type_name(k->type),
               k->size / 1e9, k->ctx, k->min_memory <= mem ? "yes" : "no",
               on_disk(k, dir) ? "yes" : "-", k->repo,
               k == known_model_default() ? "  (default)" : "");
        shown++;
    }
    if (filter && !shown)
        printf("(nothing in the catalog matches '%s'; any GGUF on the hub can be named as "
               "ORG/REPO:QUANT or hf://ORG/REPO/FILE.gguf)\n",
               filter);
    printf("memory this node offers: %.1f GB (%s); models directory: %s\n", mem / 1e9, how, dir);
}

static int list_installed(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp) {
        printf("no models in %s (%s)\n", dir, strerror(errno));
        return 0;
    }
    struct dirent *de;
    int n = 0;
    while ((de = readdir(dp))) {
        size_t l = strlen(de->d_name);
        bool gguf = l > 5 && strcasecmp(de->d_name + l - 5, ".gguf") == 0;
        bool part = l > 10 && strcasecmp(de->d_name + l - 10, ".gguf.part") == 0;
        if (!gguf && !part) continue;
        char p[2048];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (stat(p, &st) != 0) continue;
        printf("%-50s %9.1f MB%s\n", de->d_name, st.st_size / 1e6,
               part ? "  (partial download: 'mesh-llm download' resumes it)"
               : model_ref_is_mmproj(de->d_name) ? "  (vision projector of the model it names)"
                                                 : "");
        n++;
    }
    closedir(dp);
    if (!n) printf("no models in %s\n", dir);
    return 0;
}

static void print_removed(void *data, const char *path)
{
    (void)data;
    size_t l = strlen(path);
    if (l < 7 || strcmp(path + l - 7, ".source") != 0) printf("removed %s\n", path);
}

static int remove_model(const char *name, const char *dir)
{
    if (strchr(name, '/') || strcmp(name, "..") == 0 || strcmp(name, ".") == 0) {
        fprintf(stderr, "mesh-llm: models rm takes a name from 'mesh-llm models installed'\n");
        return 2;
    }
    const known_model_t *k = known_model_find(name);
    char file[MODEL_REF_FILE_MAX], why[2200];
    size_t l = strlen(name);
    if (k)
        snprintf(file, sizeof file, "%s", model_ref_basename(k->file));
    else
        snprintf(file, sizeof file, "%s%s", name,
                 l > 5 && strcasecmp(name + l - 5, ".gguf") == 0 ? "" : ".gguf");
    int rc = mf_remove(dir, file, print_removed, NULL, why, sizeof why);
    if (rc == -EBUSY) {
        fprintf(stderr,
                "mesh-llm: %s is being downloaded by another process (its .part is locked); "
                "stop that download first\n",
                why);
        return 1;
    }
    if (rc < 0) {
        fprintf(stderr, "mesh-llm: cannot remove %s\n", why);
        return 1;
    }
    if (rc == 0) {
        fprintf(stderr, "mesh-llm: no model '%s' in %s (see 'mesh-llm models installed')\n", name,
                dir);
        return 1;
    }
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: mesh-llm download REF [--models-dir DIR]\n"
                    "       mesh-llm models list|installed [--models-dir DIR]\n"
                    "       mesh-llm models search TEXT\n"
                    "       mesh-llm models rm NAME [--models-dir DIR]\n"
                    "REF: a catalog name (mesh-llm models list), "
                    "hf://ORG/REPO/FILE.gguf[@REV][?mmproj=PROJECTOR.gguf], "
                    "ORG/REPO:QUANT, or an https:// URL of a GGUF\n");
    return 2;
}

int cli_models_main(int argc, char **argv, const tunables_t *tun)
{
    if (argc < 2 || (strcmp(argv[1], "download") != 0 && strcmp(argv[1], "models") != 0)) return -1;
    char dir[1024];
    mf_default_dir(mf_models_dir_arg(argc, argv), dir, sizeof dir);
    /* the positional arguments, without the options */
    const char *pos[4] = {0};
    int np = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--models-dir") == 0 || strcmp(argv[i], "--max-vram") == 0 ||
            strcmp(argv[i], "--bin-dir") == 0) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--", 2) == 0) continue;
        if (np < 4) pos[np++] = argv[i];
    }
    if (strcmp(argv[1], "download") == 0) {
        if (np != 1) return usage();
        if (sodium_init() < 0) return 1;
        log_init(LOG_FORMAT_PRETTY, LOG_INFO);
        char path[2048];
        bool already = false;
        int rc = run_fetch(pos[0], dir, tun, path, sizeof path, &already);
        if (rc) return rc;
        if (already)
            printf("%s: already there: %s\n", pos[0], path);
        else
            printf("%s: downloaded to %s\n", pos[0], path);
        return 0;
    }
    const char *sub = np > 0 ? pos[0] : "list";
    if (strcmp(sub, "list") == 0) {
        list_catalog(NULL, dir, argc, argv, tun);
        return 0;
    }
    if (strcmp(sub, "search") == 0 && np == 2) {
        list_catalog(pos[1], dir, argc, argv, tun);
        return 0;
    }
    if (strcmp(sub, "installed") == 0) return list_installed(dir);
    if (strcmp(sub, "rm") == 0 && np == 2) return remove_model(pos[1], dir);
    return usage();
}

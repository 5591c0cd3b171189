/* bin_find — see bin_find.h. */
#include "bin_find.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build_paths.h" /* generated: MESH_BUILD_BIN_DIR, MESH_LIBEXEC_DIR, ... */

static bool is_exec(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

static char *try_dir(const char *dir, const char *name)
{
    if (!dir || !*dir) return NULL;
    char p[PATH_MAX];
    int n = snprintf(p, sizeof p, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof p || !is_exec(p)) return NULL;
    return realpath(p, NULL);
}

/* Add the directory a + mid + b (none when a is unset or empty). */
static void add(bin_dirs_t *d, const char *what, const char *a, const char *mid, const char *b)
{
    if (!a || !*a || d->n == BIN_DIRS_MAX) return;
    int n = snprintf(d->dir[d->n], sizeof d->dir[0], "%s%s%s", a, mid, b);
    if (n < 0 || (size_t)n >= sizeof d->dir[0]) return;
    d->what[d->n++] = what;
}

void bin_dirs(bin_dirs_t *d)
{
    d->n = 0;
    add(d, "$MESH_LLM_BIN_DIR", getenv("MESH_LLM_BIN_DIR"), "", "");
    /* the installed copy: <prefix>/bin/mesh-llm → <prefix>/libexec/mesh-llm/<flavour> */
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (int up = 0; up < 2; up++) { /* <prefix>/bin/mesh-llm → <prefix> */
            char *slash = strrchr(exe, '/');
            if (slash) *slash = '\0';
        }
        add(d, "the installed copy", exe, "/" MESH_LIBEXEC_DIR "/", MESH_FLAVOUR);
    }
    add(d, "the build's llama.cpp", MESH_BUILD_BIN_DIR, "", "");
    const char *cache = getenv("MESH_LLM_CACHE"), *home = getenv("HOME");
    if (cache && *cache)
        add(d, "the cache", cache, "/", MESH_CACHE_BIN_SUBDIR);
    else
        add(d, "the cache", home, "/.cache/mesh-llm/", MESH_CACHE_BIN_SUBDIR);
}

char *sv_find_binary(const char *bin_dir, const char *name)
{
    char *r;
    if (bin_dir)
        return try_dir(bin_dir, name); /* an explicit --bin-dir is the only place looked at */
    bin_dirs_t d;
    bin_dirs(&d);
    for (size_t i = 0; i < d.n; i++)
        if ((r = try_dir(d.dir[i], name))) return r;
    const char *path = getenv("PATH");
    if (!path) return NULL;
    char *dup = strdup(path), *save = NULL;
    if (!dup) return NULL;
    r = NULL;
    for (char *p = strtok_r(dup, ":", &save); p && !r; p = strtok_r(NULL, ":", &save))
        r = try_dir(p, name);
    free(dup);
    return r;
}

void bin_not_found(char *out, size_t outlen, const char *name)
{
    bin_dirs_t d;
    bin_dirs(&d);
    size_t off = (size_t)snprintf(out, outlen, "%s not found. Looked in:", name);
    for (size_t i = 0; i < d.n && off < outlen; i++)
        off += (size_t)snprintf(out + off, outlen - off, " %s (%s);", d.dir[i], d.what[i]);
    if (off < outlen)
        snprintf(out + off, outlen - off,
                 " then PATH. Build it with 'make' in the mesh-llm source tree (it builds the "
                 "pinned llama.cpp into %s), install with 'make install', or point --bin-dir or "
                 "MESH_LLM_BIN_DIR at a directory holding llama-server and ggml-rpc-server",
                 MESH_BUILD_BIN_DIR);
}

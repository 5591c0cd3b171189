/* Test helper for unit tests that drive the real model manager (node/models.h) without
 * llama-server: a models_t over the three shared test GGUF files (MESH_LLM_TEST_MODELS, as
 * --models-dir entries, no preload, except model i when bit i of `pinned` is set: a --model),
 * 8 GiB offered, two LLM slots, whose child seams are the test's (test_models, test_planner).
 * Include after cmocka.h. Header-only. */
#ifndef MESH_TEST_MODELS_FIXTURE_H
#define MESH_TEST_MODELS_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "config.h"
#include "meshstat.h"
#include "models.h"
#include "supervisor.h"
#include "tunables.h"

typedef struct {
    uv_loop_t loop;
    config_t cfg;
    supervisor_t sv;
    models_t ms;
    meshstat_t mstat;
} models_fixture_t;

static int models_fixture_init(models_fixture_t *f, unsigned pinned, int (*start)(sv_child_t *),
                               void (*stop)(sv_child_t *, uint64_t))
{
    const char *dir = getenv("MESH_LLM_TEST_MODELS");
    if (!dir) dir = "../shared/models";
    static const char *files[] = {"TinyStories-656K-Q8_0.gguf", "llama-2-tiny-random.gguf",
                                  "stories260K.gguf"};
    if (uv_loop_init(&f->loop) != 0) return -1;
    memset(&f->cfg, 0, sizeof f->cfg);
    f->cfg.max_loaded[0] = 2;
    f->cfg.max_loaded[1] = f->cfg.max_loaded[2] = 1;
    char err[256];
    for (size_t i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (config_parse_model_arg(path, &f->cfg.models[i], err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
        f->cfg.models[i].from_dir = !(pinned & (1u << i));
    }
    f->cfg.n_models = 3;
    tunables_defaults(&f->cfg.tun);
    /* a known compute speed: no calibration on the thread pool (speed.h) */
    const char *env[] = {"MESH_LLM_SPEED_MFLOPS=1000", NULL};
    if (tunables_load(&f->cfg.tun, env, err, sizeof err) != 0) return -1;
    meshstat_init(&f->mstat, NULL);
    if (sv_init(&f->sv, &f->loop, "/bin/true", false, &f->cfg.tun, NULL) != 0) return -1;
    if (models_init(&f->ms, &f->loop, &f->cfg, &f->sv, &f->mstat, err, sizeof err) != 0) {
        fprintf(stderr, "models_init: %s\n", err);
        return -1;
    }
    models_set_offer(&f->ms, 8ull << 30, 0);
    f->ms.child_start = start;
    f->ms.child_stop = stop;
    return 0;
}

static void models_fixture_close_handle(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* What main does at exit: close every handle left (the supervisor's timers), then free. */
static int models_fixture_free(models_fixture_t *f)
{
    uv_walk(&f->loop, models_fixture_close_handle, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT); /* every handle is closing: returns once they and any file
                                         check on the thread pool are done */
    sv_close(&f->sv);
    models_free(&f->ms);
    for (size_t i = 0; i < f->cfg.n_models; i++)
        free(f->cfg.models[i].path);
    return uv_loop_close(&f->loop) == 0 ? 0 : -1;
}

#endif

/* node_dl — model downloads inside the running node (on its loop, never blocking it).
 *
 * `--model REF` with a remote reference (catalog name, hf://…, ORG/REPO:QUANT, https://) whose
 * file is not on disk is taken off the command line before config_parse (node_dl_take_args) and
 * fetched in the background once the node runs: the API is up at once, progress goes to the log,
 * and when the file is in place on_done adds it to the node's models. While it downloads, the
 * model is listed in /v1/models with status "downloading" and progress, requests for it get 503
 * + Retry-After (code model_downloading), /api/status shows `downloads`, and the announcement
 * carries `downloading {model, bytes, total}` and `model_source` (the ref). */
#ifndef MESH_NODE_DL_H
#define MESH_NODE_DL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "download.h"
#include "httpd.h"

#define NODE_DL_MAX 8
#define NODE_DL_REF_MAX 512
#define NODE_DL_NAME_MAX 256

typedef struct {
    char ref[NODE_DL_REF_MAX];
    char name[NODE_DL_NAME_MAX]; /* the model name the file will have */
    bool active, failed;
    char err[256];
} node_dl_job_t;

typedef struct node_dl {
    uv_loop_t *loop;
    dl_t *d;
    uv_timer_t progress;
    bool timer_open;
    char dir[1024];
    uint64_t offer; /* the memory this node offers (0: unknown): a catalog model it cannot serve
                       solo (offer < 1.1 × size) is not downloaded */
    node_dl_job_t jobs[NODE_DL_MAX];
    size_t n;
    /* a download finished: path is the (first part of the) file, or rc < 0 with err */
    void (*on_done)(void *data, const char *ref, const char *path, int rc, const char *err);
    void (*on_change)(void *data); /* a download started or ended (announce again) */
    void *data;
} node_dl_t;

/* Before config_parse: take every `--model REF` (or -m) with a remote reference whose file is
 * not in the models directory off argv (into a static list) and return how many were taken;
 * a remote ref whose file is there already becomes its path. *argc shrinks. */
int node_dl_take_args(int *argc, char **argv);
/* The references node_dl_take_args took. */
size_t node_dl_pending(const char *const **refs);

int node_dl_init(node_dl_t *nd, uv_loop_t *loop, const char *models_dir);
/* Start downloading ref (a second start of the same ref is a no-op). 0 or -errno (err set). */
int node_dl_start(node_dl_t *nd, const char *ref, char *err, size_t errlen);
void node_dl_close(node_dl_t *nd);
/* The active job downloading model `name` (its model name or its ref), or NULL. */
const node_dl_job_t *node_dl_find(node_dl_t *nd, const char *name);
/* Progress of a job summed over its parts: bytes, total (0 unknown), rate. */
void node_dl_progress(node_dl_t *nd, const node_dl_job_t *j, uint64_t *bytes, uint64_t *total,
                      double *rate);
/* A request for a model being downloaded: 503 + Retry-After (model_downloading); true if
 * answered. */
bool node_dl_answer(node_dl_t *nd, const char *model, httpd_req_t *req);
/* Append {id, object, status: "downloading", progress {bytes,total}, source} to a /v1/models
 * list. */
void node_dl_list_models(node_dl_t *nd, json_t *list);
/* /api/status: "downloads": [{model, ref, bytes, total, rate}] */
void node_dl_status(node_dl_t *nd, json_t *st);
/* The announcement: "downloading": [{model, bytes, total}] and "model_source": {model: ref}
 * (for models being downloaded or downloaded by this node). */
void node_dl_fill_announcement(node_dl_t *nd, json_t *ann);

#endif

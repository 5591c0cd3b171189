/* node_dl — model downloads inside the running node (on its loop, never blocking it).
 *
 * `--model REF` with a remote reference (catalog name, hf://…, ORG/REPO:QUANT, https://) whose
 * file is not on disk is taken off the command line before config_parse (node_dl_take_args) and
 * fetched in the background once the node runs: the API is up at once, progress goes to the log,
 * and when the file is in place on_done adds it to the node's models. While it downloads, the
 * model is listed in /v1/models with status "downloading" and progress, requests for it get 503
 * + Retry-After (code model_downloading), /api/status shows `downloads`, and the announcement
 * carries `downloading {model, bytes, total}` and `model_source` (the ref and size; view.h).
 *
 * Don't download what won't fit (seed 002): a download the node's operator asked for, or one the
 * mesh gives it to serve alone, is refused when serving it would need more than this node offers
 * (1.1 x its size > offer): at once for a catalog name (its size is known), else as soon as the
 * server says the size (nothing is written). The refusal is logged and shown in /api/status
 * `download_errors`; an asked-for model is then announced as requested with its source and size,
 * so a bigger node of the mesh can download and serve it (allocation rule 4). A split worker's
 * download (the mesh needs the file, not a solo fit) has no such limit. */
#ifndef MESH_NODE_DL_H
#define MESH_NODE_DL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "download.h"
#include "httpd.h"
#include "model_list.h"
#include "view.h"

#define NODE_DL_MAX 8
#define NODE_DL_REF_MAX 512
#define NODE_DL_NAME_MAX 256
#define NODE_DL_ERRS 4 /* earlier errors of one model's downloads kept (the oldest dropped) */

typedef struct {
    char ref[NODE_DL_REF_MAX];
    char name[NODE_DL_NAME_MAX]; /* the model name the file will have */
    bool active, failed;
    bool asked;     /* the operator asked (--model, /api/v1/load), not the mesh: requested */
    bool too_big;   /* refused: serving it would need more than this node offers */
    bool deleted;   /* ended, and its model deleted since (node_dl_forget): not announced */
    uint64_t size;  /* the file's size once known (catalog, the server), else 0 */
    uint64_t limit; /* refuse a file larger than this (0: none) */
    char err[512];  /* the latest error */
    char errs[NODE_DL_ERRS][512]; /* the errors before it, oldest first */
    unsigned n_errs;
} node_dl_job_t;

/* What the node gives its downloads (node_dl_init). */
typedef struct {
    uint64_t offer; /* the memory this node offers (0: unknown): a catalog model it cannot serve
                       solo (offer < 1.1 × size) is not downloaded */
    /* a download finished: path is the (first part of the) file, or rc < 0 with err */
    void (*on_done)(void *data, const char *ref, const char *path, int rc, const char *err);
    void (*on_change)(void *data); /* a download started or ended (announce again) */
    void *data;
} node_dl_deps_t;

typedef struct node_dl {
    uv_loop_t *loop;
    const struct tunables *tun; /* node_dl_init's (NULL: the defaults) */
    dl_t *d;
    uv_timer_t progress;
    bool timer_open;
    char dir[1024];
    node_dl_job_t jobs[NODE_DL_MAX];
    size_t n;
    node_dl_deps_t dep; /* node_dl_init's */
} node_dl_t;

/* The --model REFs of the command line, from argv (node_dl_take_args, before config_parse) to
 * the running node (node_dl_pending, node_dl_add_present). Owned by the node. */
typedef struct {
    char refs[NODE_DL_MAX][NODE_DL_REF_MAX]; /* to download */
    const char *ref_ptrs[NODE_DL_MAX];
    size_t n_refs;
    char present[NODE_DL_MAX][NODE_DL_REF_MAX]; /* on disk already: announced as sources */
    size_t n_present;
} node_dl_args_t;

/* Before config_parse: take every `--model REF` (or -m) with a remote reference whose file is
 * not in the models directory off argv (into a) and return how many were taken; a remote ref
 * whose file is there already becomes its path (and is noted in a). *argc shrinks. */
int node_dl_take_args(node_dl_args_t *a, int *argc, char **argv);
/* The references node_dl_take_args took. */
size_t node_dl_pending(const node_dl_args_t *a, const char *const **refs);

struct tunables;
/* tun: the downloader's settings (tunables_dl_opts; NULL: the defaults); dep is copied (kept
 * also when the downloader cannot start: its rc, downloads disabled) */
int node_dl_init(node_dl_t *nd, uv_loop_t *loop, const char *models_dir, const struct tunables *tun,
                 const node_dl_deps_t *dep);
/* After node_dl_init: each --model REF whose file was there already becomes a finished job (its
 * source is announced). */
void node_dl_add_present(node_dl_t *nd, const node_dl_args_t *a);
/* Start downloading ref for the operator (a second start of the same ref is a no-op). 0 or
 * -errno (err set; -EFBIG: too big for this node). */
int node_dl_start(node_dl_t *nd, const char *ref, char *err, size_t errlen);
/* The same for the mesh (allocation rule 4): not announced as requested; solo: the node will
 * serve it alone, so it must fit (a split worker's file need not). */
int node_dl_start_mesh(node_dl_t *nd, const char *ref, bool solo, char *err, size_t errlen);
/* The job (active or ended) for ref, or NULL. */
const node_dl_job_t *node_dl_job(const node_dl_t *nd, const char *ref);
void node_dl_close(node_dl_t *nd);
/* ref's file is in the models directory already (a download would find it there). */
bool node_dl_on_disk(const node_dl_t *nd, const char *ref);
/* Whether the hub can serve ref before a download starts (--auto, issue 26): asks the hub for
 * the repository's listing (GET HF_ENDPOINT/api/models/ORG/REPO). cb(data, 0, "") when it
 * answers 200, else cb(data, -errno, why): unreachable (offline), or the repository missing. */
typedef void (*node_dl_probe_fn)(void *data, int rc, const char *why);
int node_dl_probe(node_dl_t *nd, const char *ref, node_dl_probe_fn cb, void *data);
/* Model `name` was deleted (DELETE /api/delete): its ended jobs are no longer announced as its
 * source nor listed as errors; a download of it again starts afresh. */
void node_dl_forget(node_dl_t *nd, const char *name);
/* The active job downloading model `name` (its model name or its ref), or NULL. */
const node_dl_job_t *node_dl_find(node_dl_t *nd, const char *name);
/* Progress of a job summed over its parts: bytes, total (0 unknown), rate. */
void node_dl_progress(node_dl_t *nd, const node_dl_job_t *j, uint64_t *bytes, uint64_t *total,
                      double *rate);
/* A request for a model being downloaded: 503 + Retry-After (model_downloading); true if
 * answered. */
bool node_dl_answer(node_dl_t *nd, const char *model, httpd_req_t *req);
/* That 503 for a model downloading on `where` ("this node", "node ID"). */
void node_dl_respond_downloading(httpd_req_t *req, const char *model, const char *where, uint64_t b,
                                 uint64_t t);
/* The model name a remote reference gives (a finished job's name for its ref, else from the
 * reference's file name; ORG/REPO:QUANT before its listing: the ref itself). 0, or -EINVAL
 * when ref is not a remote model reference. */
int node_dl_ref_name(node_dl_t *nd, const char *ref, char *name, size_t len);
/* POST /api/v1/load of a reference whose model is not on this node: start its download (for the
 * operator, as --model REF) and answer 202 {status: "downloading", model, ref, progress {bytes,
 * total}, message}; the node loads the model when the file is there. A reference too big for
 * this node: 400 model_too_large; a bad one: 400 invalid_model_reference; too many downloads:
 * 503. */
void node_dl_answer_load(node_dl_t *nd, const char *ref, httpd_req_t *req);
/* Append a row per active download to a /v1/models list: status downloading, progress
 * {bytes,total}, source (its reference). */
void node_dl_list_models(node_dl_t *nd, model_list_t *list);
/* /api/status: "downloads": [{model, ref, bytes, total, rate}] and "download_errors":
 * [{model, ref, error, errors}] (new values). */
void node_dl_status(node_dl_t *nd, json_t **downloads, json_t **errors);
/* This node's view (what it announces): model_source for every model it downloads, downloaded
 * or refused as too big; downloading for the active ones; requested for the asked-for ones not
 * on disk (active or refused). */
void node_dl_fill_view(node_dl_t *nd, view_node_t *n);

#endif

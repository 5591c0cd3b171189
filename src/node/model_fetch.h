/* model_fetch — from a model reference to a local file: resolves catalog names, hf:// refs,
 * ORG/REPO:QUANT (via the hub's /api/models listing) and URLs, and downloads every part of the
 * file into the models directory with the downloader (download.h). */
#ifndef MESH_MODEL_FETCH_H
#define MESH_MODEL_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "download.h"
#include "model_ref.h"

/* path: the (first part of the) file on disk; already: it was there before. */
typedef void (*mf_done_fn)(void *data, int rc, const char *err, const char *path, bool already);

/* The default models directory: the first --models-dir, else ~/.models. */
void mf_default_dir(const char *models_dir, char *out, size_t len);
/* The value of --models-dir DIR / --models-dir=DIR in argv (the first), or NULL. */
const char *mf_models_dir_arg(int argc, char **argv);
/* Start fetching ref into dir. Returns 0 (cb runs later) or a negative errno with err set. */
int mf_fetch(dl_t *d, const char *ref, const char *dir, mf_done_fn cb, void *data, char *err,
             size_t errlen);
/* Limits of a fetch: max_bytes refuses (-EFBIG, nothing written) a file (each part of a split
 * one) larger than that; *size_out gets a file's size as soon as the server tells it. */
typedef struct {
    uint64_t max_bytes;
    uint64_t *size_out;
} mf_opts_t;
int mf_fetch_opts(dl_t *d, const char *ref, const char *dir, const mf_opts_t *o, mf_done_fn cb,
                  void *data, char *err, size_t errlen);
/* Where a reference's file lives in dir when it needs no listing (catalog, hf file, URL). */
int mf_local_path(const model_ref_t *r, const char *dir, char *out, size_t len);
/* r's file is in dir (path set): there, a regular file, and not downloaded from another source
 * (FILE.source, written after each download, names where it came from). */
bool mf_on_disk(const model_ref_t *r, const char *dir, char *path, size_t len);
/* The source recorded for a downloaded file (one line), or a negative errno. */
int mf_source_of(const char *dest, char *out, size_t len);

/* Remove a model's files from dir, as `mesh-llm models rm` and DELETE /api/delete do: file (a
 * file name in dir, the first part of a split GGUF) and, split, every part of it, each with its
 * partial download (.part) and where it came from (.source). First, when a download holds one
 * of the .part files (its exclusive lock, download.c), nothing is removed: -EBUSY with that path
 * in why. Returns the number of model files (.gguf, .part) removed (0: none was there), or
 * -EINVAL (a file name with a '/', "." or ".."), or -errno of the first removal that failed (why:
 * the path; the others are still removed). removed (NULL: none) is told each path it removed. */
int mf_remove(const char *dir, const char *file, void (*removed)(void *data, const char *path),
              void *data, char *why, size_t whylen);

#endif

/* model_ref — what a user may name as a model, parsed without touching the disk or the network:
 * a file path, a catalog name (known_models.c), hf://ORG/REPO/FILE.gguf[@REV][?mmproj=FILE.gguf],
 * ORG/REPO[:QUANT], or an http(s):// URL of a GGUF. Split GGUFs (NAME-00001-of-0000N.gguf) are
 * recognised so the downloader can fetch every part.
 *
 * Vision projectors (issue 34 item 5): a reference may bring the model's projector (mmproj)
 * with it, a file of the same repo and revision — named by a catalog entry, by hf://…?mmproj=
 * FILE.gguf, or, for ORG/REPO:QUANT, picked from the repo's listing as llama.cpp's -hf does
 * (model_ref_pick_mmproj). On disk it lies beside the model as mmproj-<model stem>.gguf
 * (model_ref_mmproj_local), which is how a node finds the projector of a model it serves, and
 * a models directory never lists such a file as a model (model_ref_is_mmproj). */
#ifndef MESH_MODEL_REF_H
#define MESH_MODEL_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    MODEL_REF_PATH,     /* a path on this machine (starts with / . ~ or names a .gguf) */
    MODEL_REF_NAME,     /* a bare name: a local file by that name, else asked of the mesh */
    MODEL_REF_CATALOG,  /* a name of the shipped catalog (hf fields are filled from it) */
    MODEL_REF_HF_FILE,  /* hf://ORG/REPO/FILE.gguf[@REV] */
    MODEL_REF_HF_QUANT, /* ORG/REPO:QUANT (the repo's GGUF of that quantization) */
    MODEL_REF_URL,      /* http(s)://… a GGUF */
} model_ref_kind_t;

typedef enum { KNOWN_LLM, KNOWN_EMBEDDING, KNOWN_RERANKING } known_type_t;

typedef struct {
    const char *name;   /* catalog name, e.g. "Qwen2.5-0.5B-Instruct-Q4_K_M" */
    const char *repo;   /* ORG/REPO on the hub */
    const char *file;   /* GGUF file in the repo (first part for a split GGUF) */
    uint64_t size;      /* approximate total size in bytes (all parts) */
    const char *sha256; /* "" unless known: the hub's X-Linked-ETag gives it at download time */
    known_type_t type;
    uint32_t ctx;        /* trained context length */
    const char *draft;   /* catalog name of a natural draft model, or NULL */
    uint64_t min_memory; /* bytes needed to serve it with a modest context */
    const char *description;
    const char *mmproj; /* vision projector in the same repo (downloaded with it), or NULL */
} known_model_t;

extern const known_model_t known_models[];
extern const size_t known_models_n;
/* The default small chat model (served when nothing else is named). */
const known_model_t *known_model_default(void);
const known_model_t *known_model_find(const char *name); /* case-insensitive; NULL: none */
/* Whether text occurs (case-insensitively) in the name, repo, file or description. */
bool known_model_matches(const known_model_t *m, const char *text);
const char *known_type_name(known_type_t t);

#define MODEL_REF_REPO_MAX 200
#define MODEL_REF_FILE_MAX 256
#define MODEL_REF_URL_MAX 2048

typedef struct {
    model_ref_kind_t kind;
    char repo[MODEL_REF_REPO_MAX];   /* ORG/REPO (hf kinds and catalog) */
    char file[MODEL_REF_FILE_MAX];   /* file in the repo; for URL: the last path segment */
    char rev[64];                    /* revision (default "main") */
    char quant[32];                  /* HF_QUANT: e.g. "Q4_K_M" */
    char url[MODEL_REF_URL_MAX];     /* URL kind */
    const known_model_t *known;      /* CATALOG kind */
    char mmproj[MODEL_REF_FILE_MAX]; /* the projector's file in the repo, "" none (hf, catalog) */
} model_ref_t;

/* Parse s. Returns 0 or -EINVAL with a message in err. */
int model_ref_parse(const char *s, model_ref_t *out, char *err, size_t errlen);
/* Whether the reference needs a download (catalog, hf, url). */
bool model_ref_remote(const model_ref_t *r);
/* The local file name the reference's (first) file gets on disk. */
const char *model_ref_basename(const char *file);

/* Split GGUF names: "X-00002-of-00003.gguf" → *idx 2, *n 3, *stem_len = strlen("X").
 * Returns false for a name that is not one. */
bool model_ref_split(const char *file, unsigned *idx, unsigned *n, size_t *stem_len);
/* Name of part idx (1-based) of the split file named like `file`. Returns 0 or -EINVAL. */
int model_ref_split_part(const char *file, unsigned idx, char *out, size_t len);

/* {endpoint}/{repo}/resolve/{rev}/{file}. Returns 0 or -ENAMETOOLONG. */
int model_ref_hf_url(const char *endpoint, const char *repo, const char *rev, const char *file,
                     char *out, size_t len);
/* Choose, among a repo's files, the GGUF of quantization quant (case-insensitive match in the
 * name, not an mmproj file; the first part of a split one). Returns its index or -1. */
int model_ref_pick_quant(const char *const *files, size_t n, const char *quant);
/* Choose, among a repo's files, the vision projector of the model file `model` (quant: its
 * quantization, or NULL): a .gguf whose name starts with "mmproj" (any case) in the model's
 * folder; the one naming quant first, then F16, BF16, F32, Q8_0, then any; ties to the shorter
 * then the smaller name. Returns its index or -1 (the model has none). */
int model_ref_pick_mmproj(const char *const *files, size_t n, const char *model, const char *quant);
/* Whether a file name (a path's last segment counts) is a vision projector's: "mmproj*.gguf". */
bool model_ref_is_mmproj(const char *file);
/* The name the projector of model file `model` has on disk beside it: "mmproj-" + the model's
 * base name without .gguf and without a split suffix + ".gguf". 0 or -ENAMETOOLONG/-EINVAL. */
int model_ref_mmproj_local(const char *model, char *out, size_t len);
/* Whether s looks like a sha256 in hex (64 hex digits). */
bool model_ref_is_sha256(const char *s);
/* Where a reference's file comes from, independent of the hub's address: "hf://ORG/REPO/FILE"
 * (with "@REV" unless main) for the hub kinds and catalog names, the URL without its query for
 * URLs. file: the file in the repo (a split part) or NULL for r->file. 0 or -ENAMETOOLONG. */
int model_ref_source(const model_ref_t *r, const char *file, char *out, size_t len);

#endif

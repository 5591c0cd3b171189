/* model_list — the models a node lists (GET /v1/models, a 404's "available", a passive node's
 * route table), as typed rows (pure: no I/O, no clock).
 *
 * The listers fill one model_list_t in turn, and the renderers read it:
 *  - api_openai: this node's own models (id, created, type, size, status: ready|loading|unloaded);
 *  - node_dl: its downloads (status downloading, progress {bytes,total}, source);
 *  - the planner (an active node): the mesh catalog, merged by id into the row listed last with
 *    that name (status, short_bytes, progress {node,bytes,total}, hosts, nodes, requested,
 *    request_rate, last_request); a name not listed yet gets a new row (created, type, size);
 *  - a passive node: its route table's models (type, status, hosts).
 *
 * A row renders (ml_row_json) only the fields its listers set, as the /v1/models object:
 *   {"id","object":"model","created"?,"owned_by":"mesh-llm","type"?,"size"?,"status",
 *    "short_bytes"?,"progress"?,"source"?,"hosts"?,"nodes"?,"requested"?,"request_rate"?,
 *    "last_request"?}
 * ("created" and "size" go together: a described row). The key order is that of the JSON the
 * listers built before the rows: an own row has "status" right after "owned_by", a download's
 * row (source) "short_bytes" after "source". */
#ifndef MESH_MODEL_LIST_H
#define MESH_MODEL_LIST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "mm.h"

#define ML_ID_MAX 256 /* bytes including the NUL: the longest name a lister has (a download's) */
#define ML_SOURCE_MAX 512 /* bytes including the NUL: a download's model reference */

typedef enum {
    ML_UNLOADED = 0,
    ML_LOADING,
    ML_READY,
    ML_NEEDS_CAPACITY,
    ML_WAITING,     /* loading, but the whole split group waits to form */
    ML_DOWNLOADING, /* being downloaded somewhere in the mesh */
} ml_status_t;

typedef struct {
    char id[ML_ID_MAX];
    ml_status_t status;
    bool has_type;
    mm_type_t type;
    bool described; /* "created" and "size" */
    bool own;       /* this node's own model: its "status" before "type" and "size" (the order
                       /v1/models has always shown it in) */
    uint64_t size;
    uint64_t short_bytes; /* needs capacity: the memory its group lacks (0: not listed) */
    bool has_progress;
    char dl_node[CATALOG_ID_LEN + 1]; /* who downloads it ("": not said) */
    uint64_t dl_bytes, dl_total;
    char source[ML_SOURCE_MAX]; /* a download's reference ("": none) */
    bool has_hosts;
    catalog_id_t *hosts; /* owned by the row */
    size_t n_hosts, cap_hosts;
    bool in_catalog; /* "nodes", "requested", "request_rate", "last_request" */
    size_t nodes;    /* how many nodes hold the file */
    bool requested;
    uint64_t request_rate, last_request;
} ml_row_t;

typedef struct {
    ml_row_t *rows; /* in listing order; a row pointer is valid until the next add */
    size_t n, cap;
} model_list_t;

void ml_init(model_list_t *l);
void ml_free(model_list_t *l);
/* A new row for id at the end (zeroed but for id; status unloaded), NULL when id is empty or
 * longer than ML_ID_MAX-1 bytes, or on no memory. */
ml_row_t *ml_add(model_list_t *l, const char *id);
/* The row listed last with id (merge by id); create: a new row when there is none (ml_add). */
ml_row_t *ml_get(model_list_t *l, const char *id, bool create);
/* Whether a row before index i has id (a listing names each model once). */
bool ml_listed_before(const model_list_t *l, size_t i, const char *id);
/* One host more (sets has_hosts): 0, -EINVAL (not a catalog id's length), -ENOMEM. */
int ml_add_host(ml_row_t *r, const char *id);

/* unloaded|loading|ready|needs_capacity|waiting|downloading */
const char *ml_status_name(ml_status_t s);
ml_status_t ml_status_of_catalog(catalog_status_t s);
/* The status a route table carries for a listed status: the catalog's four as they are,
 * waiting as loading (passive nodes answer 503 for it, as an active node does); false for
 * downloading (not a catalog status). */
bool ml_status_catalog(ml_status_t s, catalog_status_t *out);

/* The /v1/models object of a row (new reference, NULL on no memory); created: its "created". */
json_t *ml_row_json(const ml_row_t *r, int64_t created);
/* The rows' objects in order (the "data" array; rows that fail to render are left out). */
json_t *ml_list_json(const model_list_t *l, int64_t created);

#endif

/* view_set — the live peers of a mesh as typed views, each announcement decoded once (pure: no
 * I/O, no clock).
 *
 * The mesh driver (node/mesh.c) syncs the set with gossip's live peers whenever gossip reports
 * a change; a peer whose announcement version (incarnation, seq) is the one already decoded
 * keeps its view, a new or changed one is decoded (view_decode), a gone one is freed. So every
 * reader of the peers (planner, route tables, publisher, metrics) shares one decode per
 * announcement change instead of decoding per call.
 *
 * Lifetime: the views (and the ids in them) are valid until the next sync that changes
 * something, i.e. while `gen` stays the same; a sync that changes nothing keeps every pointer.
 * A peer whose announcement cannot be decoded (not an object, invalid id, no memory) is left out
 * and tried again at the next sync. */
#ifndef MESH_VIEW_SET_H
#define MESH_VIEW_SET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "view.h"

/* One live peer as gossip knows it (ann borrowed for the call). */
typedef struct {
    const char *id;
    const json_t *ann;
    uint64_t inc, seq; /* the announcement's version */
} view_set_in_t;

typedef struct {
    view_node_t *v; /* the decoded live peers, id order */
    size_t n;
    uint64_t *inc, *seq; /* the version each view was decoded from */
    uint64_t gen;        /* bumped by every sync that changed v */
    uint64_t decodes;    /* view_decode calls so far */
} view_set_t;

void view_set_init(view_set_t *s);
void view_set_free(view_set_t *s);
/* Make the set hold exactly the peers in[] (any order; an id given twice counts once). true
 * when anything changed (gen bumped). On no memory the set stays as it was (false). */
bool view_set_sync(view_set_t *s, const view_set_in_t *in, size_t n);
/* The view of id, or NULL. */
const view_node_t *view_set_find(const view_set_t *s, const char *id);

#endif

/* rtt — measured latency in the model of the mesh (pure: no I/O, no clock).
 *
 * Each active node announces the round-trip time of the QUIC connections it holds (its
 * announcement's rtt_ms, DESIGN.md §4): {"<peer node id>": ms, …}, full 64-hex node ids,
 * integer milliseconds rounded by rtt_round (so that jitter inside a step changes nothing), at
 * most RTT_MAX_ENTRIES entries, the nearest peers first (rtt_pick). A decoder (view.c) keeps at
 * most RTT_MAX_ENTRIES valid entries, clamps a value to RTT_MAX_MS and ignores the rest; an old
 * node sends {} and an old decoder ignores the field.
 *
 * From every node's announced entries (and this node's own measurements) rtt_matrix builds the
 * symmetric node-to-node matrix the election reads (election.h, "RTT matrix"): when both ends
 * measured a link the larger value counts, when one did its value, else unknown (-1). */
#ifndef MESH_RTT_H
#define MESH_RTT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"

#define RTT_MAX_ENTRIES 32 /* entries announced / kept per node */
#define RTT_MAX_MS 60000   /* values are clamped to 0..RTT_MAX_MS */

typedef struct {
    char id[CATALOG_ID_LEN + 1]; /* a node id (catalog_id_valid) */
    int32_t ms;                  /* 0..RTT_MAX_MS */
} rtt_entry_t;

/* The announced value of a measured RTT: < 0 (unknown) → -1; else rounded to the nearest
 * integer below 10 ms, to 5 ms below 100 ms, to 25 ms below 1 s, to 250 ms above, clamped to
 * RTT_MAX_MS. */
int32_t rtt_round(double ms);

/* Sort e[0..n) by ms ascending then id, and return how many to keep: min(n, max). */
size_t rtt_pick(rtt_entry_t *e, size_t n, size_t max);

/* Same ids with the same values in the same order. */
bool rtt_equal(const rtt_entry_t *a, size_t na, const rtt_entry_t *b, size_t nb);

/* The n × n symmetric matrix (row-major, out[i * n + j]) of the nodes ids[0..n): rows[i] (n_rows[i]
 * entries, rows may be NULL) are what node i measured; entries naming an id not among ids, or
 * ids[i] itself, are ignored. Diagonal 0, unknown -1. ids must be distinct. 0, -ENOMEM. */
int rtt_matrix(const char *const *ids, size_t n, const rtt_entry_t *const *rows,
               const size_t *n_rows, int32_t *out);

#endif

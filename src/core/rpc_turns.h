/* rpc_turns — request/response turns of a byte stream (pure).
 *
 * llama.cpp RPC is request/response: the host (llama-server) writes commands, the worker
 * (rpc-server) answers the few that need a reply. A turn is one exchange: application bytes
 * flowing host -> worker, then worker -> host. The relay notes each chunk of bytes it moves
 * with its direction; rpc_turns_note says whether that chunk began a reply, i.e. completed a
 * turn (worker -> host bytes right after host -> worker bytes). Replies split over several
 * chunks count once, commands that need no reply count nothing, and bytes from the worker
 * before any request (there are none in the protocol) count nothing. Round trips per token =
 * turns / decoded tokens. */
#ifndef MESH_RPC_TURNS_H
#define MESH_RPC_TURNS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { RPC_DIR_NONE = 0, RPC_DIR_TO_WORKER = 1, RPC_DIR_TO_HOST = 2 } rpc_dir_t;

typedef struct {
    rpc_dir_t last; /* direction of the last non-empty chunk */
} rpc_turns_t;

/* Note n bytes moving in direction d; true when they complete a turn. n == 0 changes nothing. */
bool rpc_turns_note(rpc_turns_t *t, rpc_dir_t d, size_t n);

#endif

/* rpc_frame — where a relay of llama.cpp RPC may cut the byte stream into packets (pure).
 *
 * llama.cpp's RPC client writes every command as three send()s (command byte, 8-byte size,
 * payload: ggml-rpc.cpp send_rpc_cmd) and a decode step as a burst of commands that need no
 * reply (SET_TENSOR of the inputs, GRAPH_COMPUTE / GRAPH_RECOMPUTE) closed by one that does
 * (GET_TENSOR of the output); ggml-rpc-server answers with two send()s (8-byte size, payload).
 * A relay that forwards each piece as it is read sends a QUIC packet per piece and wakes the
 * other side's relay and rpc-server for each: ~11 packets per token for a 2-node split of a
 * small model, on a path where only the last one matters. The peer can do nothing with a
 * partial command, nor with commands before the one the client waits on.
 *
 * This module follows the framing and says how many of the bytes read so far (and not yet
 * released) to forward now:
 *   requests  [u8 cmd][u64 size][size bytes]: release through the end of every command that
 *             needs a reply, or whose kind is not known (the client is about to wait);
 *   responses [u64 size][size bytes]: release through the end of every response.
 * Bytes after the last release point are held, unless they exceed RPC_FRAME_HOLD_MAX (a large
 * SET_TENSOR or response streams as it comes). The relay releases held bytes anyway when no
 * more arrive within its hold time (rpc_frame_release_all), so a wrong guess costs at most that
 * delay, never correctness: the bytes and their order are never changed.
 */
#ifndef MESH_RPC_FRAME_H
#define MESH_RPC_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RPC_FRAME_HOLD_MAX (64u << 10)

typedef enum { RPC_FRAME_REQUESTS = 0, RPC_FRAME_RESPONSES = 1 } rpc_frame_kind_t;

typedef struct {
    rpc_frame_kind_t kind;
    uint8_t hdr[9];    /* the current message's header bytes read so far */
    uint8_t hdr_len;   /* of hdr; the header is 9 bytes (requests) or 8 (responses) */
    uint64_t left;     /* payload bytes of the current message still to come */
    bool in_payload;   /* the header is complete */
    bool reply;        /* the current request needs a reply (or is unknown) */
    uint64_t size;     /* the current message's payload size */
    size_t held;       /* bytes fed and not yet released */
    uint64_t computes; /* requests: GRAPH_COMPUTE / GRAPH_RECOMPUTE commands that ended (a
                        * worker's stage of a token starts there: stage.h) */
} rpc_frame_t;

void rpc_frame_init(rpc_frame_t *f, rpc_frame_kind_t kind);

/* The next n bytes of the stream. Returns how many of the held bytes (the earlier held ones
 * first, then these) to forward now; the rest stay held. */
size_t rpc_frame_feed(rpc_frame_t *f, const uint8_t *p, size_t n);

/* The hold time passed (or the stream ends): every held byte goes; returns how many. */
size_t rpc_frame_release_all(rpc_frame_t *f);

/* Whether a request command starts a graph computation (GRAPH_COMPUTE, GRAPH_RECOMPUTE). */
bool rpc_frame_cmd_computes(uint8_t cmd);

/* Whether a request command needs a reply in the pinned llama.cpp RPC protocol (unknown
 * commands count as needing one). */
bool rpc_frame_cmd_replies(uint8_t cmd);

#endif

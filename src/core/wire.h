/* wire — the byte format between nodes (DESIGN.md §4), pure.
 *
 * Every bidirectional stream starts with one type byte, then control frames
 * [u32 big-endian length][JSON object with "v":1], each at most WIRE_MAX_FRAME bytes. Tunnel
 * streams carry one control frame, then raw bytes. The reader is incremental: feed it whatever
 * arrived; it hands out one frame at a time and says how many bytes it consumed, so the bytes
 * after a tunnel's frame stay with the caller.
 */
#ifndef MESH_WIRE_H
#define MESH_WIRE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

#define WIRE_MAX_FRAME (1u << 20)

typedef enum {
    WIRE_GOSSIP = 0x01,
    WIRE_TUNNEL_RPC = 0x02,
    WIRE_TUNNEL_MAP = 0x03,
    WIRE_TUNNEL_HTTP = 0x04,
    WIRE_ROUTE_REQUEST = 0x05,
    WIRE_PEER_DOWN = 0x06,
    WIRE_PEER_LEAVING = 0x07,
    WIRE_NAT = 0x08, /* punch and relay coordination (node/mesh_nat.c); older nodes reset it */
} wire_type_t;

const char *wire_type_name(int type);

typedef struct {
    int type; /* -1 until the type byte arrived */
    uint8_t lenb[4];
    unsigned lenhave;
    uint32_t need; /* body length of the frame being read */
    buf_t body;
    size_t frames; /* frames delivered */
} wire_reader_t;

/* expect_type: read the type byte first (a stream's start) or not (frames only). */
void wire_reader_init(wire_reader_t *r, int expect_type);
void wire_reader_free(wire_reader_t *r);

/* Consume bytes from p[0..n). Returns the number consumed (>= 0) and sets *frame (new
 * reference, caller frees) when a whole frame has been read — the caller calls again with the
 * rest. Errors: -EPROTO unknown type byte, -EMSGSIZE frame over the cap or empty, -EBADMSG not
 * a JSON object with "v":1. After an error the stream must be closed. */
ssize_t wire_read(wire_reader_t *r, const uint8_t *p, size_t n, json_t **frame);

/* Append [type byte if type >= 0][len][compact JSON of frame] to out. Adds "v":1 when absent.
 * -EMSGSIZE if the frame exceeds the cap. */
int wire_write(buf_t *out, int type, json_t *frame);

#endif

/* sendbuf — a stream's send queue, pure: bytes appended by the writer stay at a fixed address
 * until the peer acknowledges them (QUIC may retransmit any unacknowledged byte), so the queue
 * is a list of fixed-capacity chunks, never moved; fully acknowledged chunks are freed.
 *
 *   [ acked … | sent, not acked … | not sent yet … ]
 *   head/head_acked        cur/cur_off               tail
 */
#ifndef MESH_SENDBUF_H
#define MESH_SENDBUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct sendbuf_chunk sendbuf_chunk_t;

typedef struct {
    sendbuf_chunk_t *head, *tail, *cur;
    size_t head_acked; /* bytes of head already acknowledged */
    size_t cur_off;    /* next unsent byte: cur->data[cur_off] */
    size_t unacked;    /* bytes queued and not acknowledged (sent or not) */
    size_t unsent;
} sendbuf_t;

typedef struct {
    const uint8_t *base;
    size_t len;
} sendbuf_vec_t;

/* Copy n bytes in. -ENOMEM leaves the queue as it was before the failing chunk. */
int sendbuf_append(sendbuf_t *b, const void *p, size_t n);
/* The unsent bytes as up to max pieces; returns the number of pieces. */
size_t sendbuf_peek(const sendbuf_t *b, sendbuf_vec_t *v, size_t max);
/* n bytes (from the front of the unsent part) went out. */
void sendbuf_sent(sendbuf_t *b, size_t n);
/* n more bytes (in order) were acknowledged; their chunks are freed. */
void sendbuf_acked(sendbuf_t *b, size_t n);
void sendbuf_free(sendbuf_t *b);

#endif

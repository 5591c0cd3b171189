/* probe — is a mesh alive and does its token admit us? (--auto's health probe, issue 16)
 *
 * A throwaway QUIC endpoint with an ephemeral key dials the token's node at each of its IPv4
 * addresses with the token's mesh secret: the first connection that completes the handshake and
 * the admission exchange (transport.h) answers "alive" with its RTT; every dial failing, an
 * admission refused (another secret) or timeout_ms passing answers an error. The endpoint is
 * closed after the answer; cb runs once, never inside probe_start. */
#ifndef MESH_PROBE_H
#define MESH_PROBE_H

#include <stdint.h>
#include <uv.h>

#include "identity.h"

typedef void (*probe_cb_t)(void *data, int rc, double rtt_ms, const char *why);

struct tunables;
/* tun: the QUIC settings (tunables_tp_config; NULL: the defaults); timeout_ms the handshake's. */
int probe_start(uv_loop_t *loop, const token_t *t, const struct tunables *tun, uint64_t timeout_ms,
                probe_cb_t cb, void *data);

#endif

/* tlsid — TLS credentials made from the node's Ed25519 key, and peer-key extraction.
 *
 * Each node presents a self-signed X.509 certificate whose public key is its Ed25519 node key;
 * TLS 1.3's CertificateVerify proves possession of the private key, so after the handshake the
 * peer's certificate key *is* its node id. Certificates are never checked against a CA.
 */
#ifndef MESH_TLSID_H
#define MESH_TLSID_H

#include <gnutls/gnutls.h>
#include <stdint.h>

#include "identity.h"

/* Certificate credentials (self-signed cert for id) with a verify function that only requires
 * an Ed25519 certificate; the caller compares the key (tlsid_peer_key). */
int tlsid_credentials(const identity_t *id, gnutls_certificate_credentials_t *out);

/* The raw Ed25519 public key of the peer's certificate. -EINVAL when absent or not Ed25519. */
int tlsid_peer_key(gnutls_session_t session, uint8_t pk[32]);

#endif

/* nostr_key — this node's Nostr identity: a secp256k1 secret key in $MESH_LLM_HOME/nostr-key
 * (64 hex chars and a newline, mode 0600; refused when readable by group/others), created on
 * first use. It signs the node's public listings, and a named mesh's id is derived from the
 * originator's Nostr public key (identity.h). */
#ifndef MESH_NOSTR_KEY_H
#define MESH_NOSTR_KEY_H

#include <stddef.h>
#include <stdint.h>

/* Load or create the key in dir; sk gets the secret key, pk the x-only public key. */
int nostr_key_load(const char *dir, uint8_t sk[32], uint8_t pk[32], char *err, size_t errlen);

#endif

/* identity — who this node is and which mesh it belongs to.
 *
 * State lives in $MESH_LLM_HOME (default ~/.mesh-llm/):
 *   key          Ed25519 secret key (64 bytes, libsodium layout), mode 0600; refused when
 *                readable or writable by group/others
 *   mesh-id      id of the mesh this node created ("<hex>\n"), with
 *   mesh-secret  its 32-byte admission secret (hex, 0600). Both are checked at every start: a
 *                missing half or a malformed file refuses to start, naming the file — never
 *                silently replaced (that would end every invite token given out)
 *   last-mesh    mesh id of the last mesh joined
 *   incarnation  last incarnation used (each start takes a higher one)
 *
 * Node id = lowercase hex of the Ed25519 public key (64 chars).
 * Mesh id: random and persisted for an unnamed mesh; for --mesh-name NAME it is
 * BLAKE2b-128(name || creator's Nostr public key (nostr_key.h); its node key when it has none) and
 * the secret is BLAKE2b-256 keyed by the creator's secret key over the name — stable across
 * restarts of the creator.
 *
 * Invite token: base64url (no padding) of
 *   {"v":1,"id":"<node id>","addrs":["host:port",…],"mesh":"<mesh id>","secret":"<hex>"}
 */
#ifndef MESH_IDENTITY_H
#define MESH_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define ID_HEX_LEN 64
#define MESH_ID_MAX 64
#define TOKEN_MAX_ADDRS 16
#define TOKEN_ADDR_MAX 64
#define TOKEN_MAX_LEN 4096

typedef struct {
    uint8_t pk[32];
    uint8_t sk[64];
    char id[ID_HEX_LEN + 1];
    uint64_t incarnation;
} identity_t;

typedef struct {
    char mesh_id[MESH_ID_MAX + 1];
    uint8_t secret[32];
} mesh_cred_t;

typedef struct {
    char id[ID_HEX_LEN + 1];
    char mesh_id[MESH_ID_MAX + 1];
    uint8_t secret[32];
    char addrs[TOKEN_MAX_ADDRS][TOKEN_ADDR_MAX];
    size_t n_addrs;
} token_t;

/* The state directory: h ($MESH_LLM_HOME, which the caller read: node/tunables.h) when not
 * NULL or empty, else ~/.mesh-llm. */
int identity_home(const char *h, char *out, size_t outlen);

/* Load or create the key in dir (created 0700 if missing) and pick this start's incarnation.
 * Errors are described in err. */
int identity_load(identity_t *id, const char *dir, uint64_t now_ms, char *err, size_t errlen);

/* A fresh key held in memory only (a --client: nothing is written), incarnation now_ms. */
void identity_ephemeral(identity_t *id, uint64_t now_ms);

/* The credentials of a mesh this node creates: named (derived) or unnamed (persisted). */
int identity_own_mesh(const identity_t *id, const char *dir, const char *mesh_name,
                      mesh_cred_t *out, char *err, size_t errlen);
/* A named mesh: id = BLAKE2b-128(name || originator_pk) — the originator's Nostr public key
 * when it has one (nostr_key.h), so two people who pick the same name get different meshes —
 * and the secret keyed by this node's secret key over the name. */
void identity_named_mesh(const identity_t *id, const uint8_t originator_pk[32],
                         const char *mesh_name, mesh_cred_t *out);
/* Remember the mesh joined last (best effort), written on the libuv thread pool. */
void identity_save_last_mesh(uv_loop_t *loop, const char *dir, const char *mesh_id);

/* Encode a token (NUL-terminated base64url into out). -ENOSPC if outlen is too small. */
int token_encode(const token_t *t, char *out, size_t outlen);
/* Decode and validate; on error err says what is wrong. */
int token_decode(const char *s, size_t len, token_t *t, char *err, size_t errlen);

/* Split "host:port" / "[v6]:port" into host and port. */
int addr_split(const char *s, char *host, size_t hostlen, int *port);
struct sockaddr;
struct sockaddr_storage;
/* "ip:port" (IPv4) or "[ip]:port" (IPv6) of sa; -EINVAL for another family, -ENOSPC. */
int addr_format(const struct sockaddr *sa, char *out, size_t len);
/* The socket address of a numeric "ip:port" or "[ipv6]:port" (port 1-65535; no names, no
 * IPv6 scope): 0, or -EINVAL. */
int addr_parse(const char *s, struct sockaddr_storage *out);

/* The admission proof: HMAC-SHA256(secret, "mesh-llm/1 admit" || from_pk || to_pk). */
void identity_admission_mac(const uint8_t secret[32], const uint8_t from_pk[32],
                            const uint8_t to_pk[32], uint8_t out[32]);

int hex_decode(const char *hex, size_t hexlen, uint8_t *out, size_t outlen);
void hex_encode(const uint8_t *in, size_t n, char *out);

/* --- Signatures by node keys (gossip announcements and leaves; see gossip.h for what is
 * signed). Pure functions: no state, no files. --- */
#define IDENTITY_SIG_LEN 64

/* Ed25519 detached signature of msg by the secret key sk (libsodium layout, identity_t.sk). */
void identity_sign(const uint8_t sk[64], const void *msg, size_t len,
                   uint8_t sig[IDENTITY_SIG_LEN]);
/* Whether sig is the signature of msg by node `id` (64 lowercase hex chars: its public key).
 * False for a malformed id or a key that is not a valid curve point. */
bool identity_verify(const char *id, const void *msg, size_t len,
                     const uint8_t sig[IDENTITY_SIG_LEN]);

#endif

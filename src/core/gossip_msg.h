/* gossip_msg — the gossip message set, its validation and its signatures, pure (see gossip.h
 * for the protocol and the signed byte forms). Everything a message carries is checked here
 * before the state machine looks at it: a message that fails changes nothing. */
#ifndef MESH_GOSSIP_MSG_H
#define MESH_GOSSIP_MSG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GMSG_MAX_ARRAY 1025 /* GOSSIP_MAX_PEERS + self */
#define GMSG_SIG_HEX 128    /* an Ed25519 signature in lowercase hex */

enum { M_HB, M_ACK, M_UPDATE, M_HELLO, M_SYNC, M_PING, M_PONG, M_PEER_DOWN, M_LEAVING, M_NOTICE };
extern const char *const gmsg_type_names[];

struct gmsg {
    int type;
    uint64_t inc;
    json_t *digest, *anns, *want, *dead, *ann;
    const char *sig; /* leaving: the sender's signed leave */
    int join;
};

/* A dead or left record: [id, inc, "dead"|"left"] or [id, inc, "left", sig] */
struct gmsg_rec {
    const char *id;
    uint64_t inc;
    bool left;
    const char *sig; /* the leaver's signature of its leave, or NULL */
};

bool gmsg_valid_id(const char *s);  /* 64 lowercase hex characters */
bool gmsg_valid_sig(const char *s); /* 128 lowercase hex characters */
/* [id, inc, seq] */
bool gmsg_digest_entry(const json_t *e, const char **id, uint64_t *inc, uint64_t *seq);
bool gmsg_dead_entry(const json_t *e, struct gmsg_rec *r);
/* an announcement's {"id","incarnation","seq"} (and a well-formed "sig") */
bool gmsg_ann_fields(json_t *a, const char **id, uint64_t *inc, uint64_t *seq);
/* Validate msg from authenticated peer `from`; m borrows from msg. Incarnations of the sender
 * above max_inc are refused. 0 or -EINVAL. */
int gmsg_parse(json_t *msg, const char *from, uint64_t max_inc, struct gmsg *m);

/* --- Signed byte forms (gossip.h) --- */

/* The bytes an announcement's signature covers: malloc'd, length in *len. NULL when the
 * canonical JSON is longer than max bytes, or out of memory. */
char *gmsg_ann_bytes(const json_t *ann, size_t max, size_t *len);
/* The bytes a leave's signature covers. NULL when out of memory. */
char *gmsg_leave_bytes(const char *id, uint64_t inc, size_t *len);

typedef void (*gmsg_sign_fn)(void *data, const uint8_t *msg, size_t len, uint8_t sig[64]);
/* Sign bytes into a hex string (GMSG_SIG_HEX + 1 chars). */
void gmsg_sign_hex(gmsg_sign_fn sign, void *data, const char *bytes, size_t len, char *hex);
/* Set ann's "sig" (replacing any) to its origin's signature. 0 or -ENOMEM. */
int gmsg_ann_sign(json_t *ann, gmsg_sign_fn sign, void *data);
/* Whether ann (validated by gmsg_ann_fields) carries its origin's signature over its content
 * and is at most max canonical bytes. */
bool gmsg_ann_verify(const json_t *ann, size_t max);
/* Whether sig is node id's signature of its leave at incarnation inc. */
bool gmsg_leave_verify(const char *id, uint64_t inc, const char *sig);

#endif

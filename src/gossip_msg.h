/* gossip_msg — the gossip message set and its validation, pure (see gossip.h for the
 * protocol). Everything a message carries is checked here before the state machine looks at
 * it: a message that fails changes nothing. */
#ifndef MESH_GOSSIP_MSG_H
#define MESH_GOSSIP_MSG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define GMSG_MAX_ARRAY 1025 /* GOSSIP_MAX_PEERS + self */

enum { M_HB, M_ACK, M_UPDATE, M_HELLO, M_SYNC, M_PING, M_PONG, M_PEER_DOWN, M_LEAVING, M_NOTICE };
extern const char *const gmsg_type_names[];

struct gmsg {
    int type;
    uint64_t inc;
    json_t *digest, *anns, *want, *dead, *ann;
    int join;
};

bool gmsg_valid_id(const char *s); /* 64 lowercase hex characters */
/* [id, inc, seq] */
bool gmsg_digest_entry(const json_t *e, const char **id, uint64_t *inc, uint64_t *seq);
/* [id, inc, "dead"|"left"] */
bool gmsg_dead_entry(const json_t *e, const char **id, uint64_t *inc, bool *left);
/* an announcement's {"id","incarnation","seq"} */
bool gmsg_ann_fields(json_t *a, const char **id, uint64_t *inc, uint64_t *seq);
/* Validate msg from authenticated peer `from`; m borrows from msg. 0 or -EINVAL. */
int gmsg_parse(json_t *msg, const char *from, struct gmsg *m);

#endif

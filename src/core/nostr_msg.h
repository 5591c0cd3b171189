/* nostr_msg — NIP-01 relay messages (pure).
 *
 * Client to relay: ["EVENT", <event>], ["REQ", <sub id>, <filter>], ["CLOSE", <sub id>].
 * Relay to client: ["EVENT", <sub id>, <event>], ["EOSE", <sub id>], ["OK", <event id>, <bool>,
 * <message>], ["NOTICE", <message>], ["CLOSED", <sub id>, <message>].
 *
 * nostr_msg_parse reads one relay message of at most NOSTR_MSG_MAX bytes: anything else (not
 * JSON, another shape, an unknown type, a field over its cap) is NOSTR_MSG_INVALID with the
 * reason, never a crash. Signatures are the caller's to check (nostr_event_verify). */
#ifndef MESH_NOSTR_MSG_H
#define MESH_NOSTR_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "nostr_event.h"

#define NOSTR_MSG_MAX (256 * 1024) /* bytes per relay message */
#define NOSTR_SUBID_MAX 64         /* bytes of a subscription id */
#define NOSTR_NOTICE_MAX 256       /* bytes of a NOTICE/OK/CLOSED message kept */
#define NOSTR_FILTER_MAX_VALS 8

typedef enum {
    NOSTR_MSG_INVALID = 0,
    NOSTR_MSG_EVENT,
    NOSTR_MSG_EOSE,
    NOSTR_MSG_OK,
    NOSTR_MSG_NOTICE,
    NOSTR_MSG_CLOSED,
} nostr_msg_type_t;

typedef struct {
    nostr_msg_type_t type;
    char sub_id[NOSTR_SUBID_MAX + 1];   /* EVENT, EOSE, CLOSED */
    char event_id[NOSTR_HEX32];         /* OK */
    bool ok;                            /* OK */
    char message[NOSTR_NOTICE_MAX + 1]; /* OK, NOTICE, CLOSED (truncated); INVALID: why */
    nostr_event_t event;                /* EVENT: owned, free with nostr_msg_free */
} nostr_msg_t;

/* Parse one relay message. Returns its type (msg->message says why for INVALID). */
nostr_msg_type_t nostr_msg_parse(const char *data, size_t len, nostr_msg_t *msg);
void nostr_msg_free(nostr_msg_t *msg);

/* A REQ filter: kinds, a "#t" tag and a "#d" tag (empty: not filtered), since, limit. */
typedef struct {
    uint32_t kinds[NOSTR_FILTER_MAX_VALS];
    size_t n_kinds;
    const char *t_tags[NOSTR_FILTER_MAX_VALS];
    size_t n_t;
    const char *d_tags[NOSTR_FILTER_MAX_VALS];
    size_t n_d;
    int64_t since;  /* 0: none */
    unsigned limit; /* 0: none */
} nostr_filter_t;

/* Client messages as malloc'd NUL-terminated JSON text (NULL: out of memory or bad input). */
char *nostr_msg_event(const nostr_event_t *ev);
char *nostr_msg_req(const char *sub_id, const nostr_filter_t *f);
char *nostr_msg_close(const char *sub_id);

#endif

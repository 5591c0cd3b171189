/* The port-mapping schedule (net/portmap.c's policy, pure: time passed in, no I/O). It says which
 * method to try next (NAT-PMP, then UPnP-IGD), when to renew a mapping (at half its lease), how
 * long to wait after a round in which no router answered (doubling backoff, capped, at most
 * max_rounds rounds before giving up) and when a mapping whose renewals keep failing counts as
 * lost (its lease would run out before the next retry). The driver asks pms_next what is due,
 * runs the attempt, and hands the outcome to pms_result, which returns what changed. */
#ifndef MESH_PORTMAP_SCHED_H
#define MESH_PORTMAP_SCHED_H

#include <stdbool.h>
#include <stdint.h>

typedef enum { PMS_NATPMP = 0, PMS_UPNP = 1 } pms_method_t;

#define PMS_DEFAULT_LEASE_S 3600u
#define PMS_DEFAULT_RETRY_BASE_MS 30000u /* after the first round with no answer */
#define PMS_DEFAULT_RETRY_MAX_MS 900000u /* the backoff's cap: 15 min */
#define PMS_DEFAULT_MAX_ROUNDS 8u        /* failed rounds in a row before giving up */
#define PMS_RENEW_RETRY_MS 5000u         /* the first retry after a failed renewal */
#define PMS_MIN_LEASE_S 4u               /* a shorter grant is taken as this */
#define PMS_MIN_RETRY_MS 1000u           /* a renewal retry closer than this to the expiry: lost */

typedef struct {
    uint32_t lease_s;       /* asked for; 0: PMS_DEFAULT_LEASE_S */
    uint32_t retry_base_ms; /* 0: PMS_DEFAULT_RETRY_BASE_MS */
    uint32_t retry_max_ms;  /* 0: PMS_DEFAULT_RETRY_MAX_MS */
    uint32_t max_rounds;    /* 0: PMS_DEFAULT_MAX_ROUNDS */
} pms_cfg_t;

typedef enum { PMS_PROBING = 0, PMS_MAPPED, PMS_GAVE_UP } pms_state_t;

typedef struct {
    pms_cfg_t cfg; /* defaults filled in */
    pms_state_t state;
    pms_method_t method;  /* probing: the one to try next; mapped: the one holding the mapping */
    uint64_t next_ms;     /* when the next attempt is due */
    uint64_t expires_ms;  /* mapped: when the router's lease runs out */
    uint32_t lease_s;     /* mapped: the lease granted */
    uint32_t fail_rounds; /* rounds in a row in which no method mapped */
    uint32_t renew_fails; /* renewals in a row that failed */
    bool told_none;       /* PMS_EV_NO_ROUTER was returned (once per schedule) */
} pms_t;

typedef enum {
    PMS_ACT_TRY = 0, /* attempt `method` now (a first mapping, or the renewal of the held one) */
    PMS_ACT_WAIT,    /* nothing before at_ms */
    PMS_ACT_IDLE,    /* gave up: nothing more to do */
} pms_act_kind_t;

typedef struct {
    pms_act_kind_t kind;
    pms_method_t method; /* PMS_ACT_TRY */
    uint64_t at_ms;      /* PMS_ACT_WAIT */
} pms_action_t;

typedef enum {
    PMS_EV_NONE = 0,
    PMS_EV_MAPPED,    /* a new mapping (first, or after one was lost) */
    PMS_EV_RENEWED,   /* the held mapping's lease was extended */
    PMS_EV_LOST,      /* the held mapping's renewals failed until its lease ran out */
    PMS_EV_NO_ROUTER, /* the first round in which neither method answered (once) */
    PMS_EV_GAVE_UP,   /* max_rounds rounds in a row without an answer: no more attempts */
} pms_event_t;

void pms_init(pms_t *s, const pms_cfg_t *cfg, uint64_t now_ms);
pms_action_t pms_next(const pms_t *s, uint64_t now_ms);
/* The outcome of the attempt pms_next asked for: ok with the lease the router granted (0: the
 * one asked for; a lease below PMS_MIN_LEASE_S counts as that). */
pms_event_t pms_result(pms_t *s, uint64_t now_ms, pms_method_t m, bool ok, uint32_t granted_s);
/* The wait before the next round after `rounds` failed rounds in a row (rounds >= 1). */
uint64_t pms_backoff_ms(const pms_cfg_t *cfg, uint32_t rounds);
/* An IPv4 address (host byte order) that is not publicly routable: RFC 1918, 100.64/10 (CGNAT),
 * 169.254/16, 127/8, 0/8. An external address like this means another NAT beyond the router. */
bool pms_addr_private(uint32_t ipv4);
const char *pms_method_name(pms_method_t m); /* "natpmp" | "upnp" */

#endif

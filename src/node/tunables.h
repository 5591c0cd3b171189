/* tunables — every MESH_LLM_* environment variable, read once at start into one typed struct.
 *
 * The option table's environment rows (options.c:ENV_VARS) drive the loader: each row names its
 * kind (the parser: options.h:tun_kind_t), its field here and the range it accepts; the rows
 * that stand for an option (MESH_LLM_JOIN, _API_KEY, _BIN_DIR, _NOSTR_RELAYS) are read with the
 * options and have no field. A value a variable does not accept leaves the table's default, as
 * the call sites always did; tunables_load reports it. tests/unit/test_tunables.c checks every
 * row against the parser its call site used, and that no row lacks a field.
 *
 * Read once at start: by config_parse (config_t.tun) for the node, by cli_dispatch for the
 * commands; call sites get their values through it or the opts structs filled from it below,
 * never from getenv (ctest check_env). */
#ifndef MESH_TUNABLES_H
#define MESH_TUNABLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "download.h"
#include "transport.h"
#include "tunnel_rpc.h"

#define TUN_PATH_MAX 4096     /* a TUN_TEXT value, its NUL included (longer: tunables_load fails) */
#define TUN_CHOICE_MAX 16     /* a TUN_CHOICE value, its NUL included */
#define TUNABLES_MAX_VARS 128 /* rows of the environment table (options.c checks it) */

/* A field whose variable is unset, empty or not accepted holds the table's default; "0: the call
 * site computes it" where the table's value is 0 and its def describes the computation. */
typedef struct tunables {
    /* relay (node/relay.c) */
    uint64_t first_byte_ms;        /* MESH_LLM_FIRST_BYTE_MS */
    uint64_t first_byte_ms_per_kb; /* MESH_LLM_FIRST_BYTE_MS_PER_KB */
    uint64_t retry_dial_ms;        /* MESH_LLM_RETRY_DIAL_MS */
    uint64_t connect_wait_ms;      /* MESH_LLM_CONNECT_WAIT_MS */
    bool prefix_affinity;          /* MESH_LLM_PREFIX_AFFINITY */
    /* admission (node/admission.c) */
    uint64_t queue_wait_ms;  /* MESH_LLM_QUEUE_WAIT_MS (0 .. 1 day) */
    uint64_t switch_fair_ms; /* MESH_LLM_SWITCH_FAIR_MS (0 .. 1 day) */
    /* HTTP servers (app/api_openai.c, app/api_mgmt.c) */
    uint64_t http_idle_ms;      /* MESH_LLM_HTTP_IDLE_MS */
    uint64_t http_read_ms;      /* MESH_LLM_HTTP_READ_MS */
    uint64_t http_write_ms;     /* MESH_LLM_HTTP_WRITE_MS */
    uint64_t http_max_buffered; /* MESH_LLM_HTTP_MAX_BUFFERED (bytes, 4096 .. 2^40) */
    uint64_t events_ms;         /* MESH_LLM_EVENTS_MS */
    uint64_t events_max_queue;  /* MESH_LLM_EVENTS_MAX_QUEUE (bytes) */
    /* mesh and QUIC (node/mesh.c, app/main.c, net/transport_ep.c) */
    uint64_t heartbeat_ms;        /* MESH_LLM_HEARTBEAT_MS */
    uint64_t probe_ms;            /* MESH_LLM_PROBE_MS (gossip: only when given) */
    uint64_t route_refresh_ms;    /* MESH_LLM_ROUTE_REFRESH_MS */
    uint64_t handshake_ms;        /* MESH_LLM_HANDSHAKE_MS */
    uint64_t quic_idle_ms;        /* MESH_LLM_QUIC_IDLE_MS */
    uint64_t live_ms;             /* MESH_LLM_LIVE_MS */
    uint64_t quic_retry_after;    /* MESH_LLM_QUIC_RETRY_AFTER (count, 0 .. 64) */
    char quic_cc[TUN_CHOICE_MAX]; /* MESH_LLM_QUIC_CC: reno, cubic, bbr or bbr2 */
    /* split RPC tunnels (net/tunnel_rpc.c) */
    uint64_t rpc_connect_ms; /* MESH_LLM_RPC_CONNECT_MS */
    uint64_t rpc_quiet_ms;   /* MESH_LLM_RPC_QUIET_MS */
    bool rpc_coalesce;       /* MESH_LLM_RPC_COALESCE */
    /* downloads (net/download.c, node/node_dl.c, node/planner.c, app/cli_models.c) */
    uint64_t relay_rate;    /* MESH_LLM_RELAY_RATE (bytes/s per relayed pair; --relay) */
    bool portmap;           /* MESH_LLM_PORTMAP (0: as --no-portmap) */
    uint64_t dl_backoff_ms; /* MESH_LLM_DL_BACKOFF_MS */
    uint64_t dl_min_rate;   /* MESH_LLM_DL_MIN_RATE (bytes/s) */
    uint64_t dl_retries;    /* MESH_LLM_DL_RETRIES */
    uint64_t dl_stall_ms;   /* MESH_LLM_DL_STALL_MS */
    bool dl_follow_urls;    /* MESH_LLM_DL_FOLLOW_URLS */
    uint64_t progress_ms;   /* MESH_LLM_PROGRESS_MS (cli_models: 250 on a terminal unless given) */
    /* planner (node/planner*.c, node/models.c) */
    uint64_t plan_wait_ms;       /* MESH_LLM_PLAN_WAIT_MS */
    uint64_t idle_unload_ms;     /* MESH_LLM_IDLE_UNLOAD_MS */
    uint64_t min_serve_ms;       /* MESH_LLM_MIN_SERVE_MS */
    uint64_t demand_window_ms;   /* MESH_LLM_DEMAND_WINDOW_MS */
    uint64_t rebalance_tick_ms;  /* MESH_LLM_REBALANCE_TICK_MS */
    uint64_t rebalance_ticks;    /* MESH_LLM_REBALANCE_TICKS (0 .. 1000; 0: RB_TICKS) */
    uint64_t rebalance_gain_pct; /* MESH_LLM_REBALANCE_GAIN_PCT (0 .. 1000) */
    /* children (node/supervisor.c, node/speed.c) */
    uint64_t health_interval_ms; /* MESH_LLM_HEALTH_INTERVAL_MS */
    uint64_t health_timeout_ms;  /* MESH_LLM_HEALTH_TIMEOUT_MS */
    uint64_t hang_timeout_ms;    /* MESH_LLM_HANG_TIMEOUT_MS */
    uint64_t load_timeout_ms;    /* MESH_LLM_LOAD_TIMEOUT_MS (0: per child, by its size) */
    uint64_t test_child_port;    /* MESH_LLM_TEST_CHILD_PORT (0: none) */
    uint64_t speed_mflops;       /* MESH_LLM_SPEED_MFLOPS (not given: measured; 0: none) */
    /* public discovery (node/publisher.c, node/nostr_pool.c, app/nostr_app.c, app/cli_discover.c)
     */
    uint64_t publish_interval_ms;   /* MESH_LLM_PUBLISH_INTERVAL_MS */
    uint64_t publish_ttl_ms;        /* MESH_LLM_PUBLISH_TTL_MS (0: 2 x publish_interval_ms) */
    uint64_t nostr_open_timeout_ms; /* MESH_LLM_NOSTR_OPEN_TIMEOUT_MS */
    uint64_t nostr_retry_ms;        /* MESH_LLM_NOSTR_RETRY_MS */
    uint64_t auto_listen_ms;        /* MESH_LLM_AUTO_LISTEN_MS */
    uint64_t auto_wait_ms;          /* MESH_LLM_AUTO_WAIT_MS */
    bool verbose;                   /* MESH_LLM_VERBOSE (set: discover's debug logs) */
    /* paths ("" when unset) */
    char home[TUN_PATH_MAX];          /* MESH_LLM_HOME (base/identity.c) */
    char cache[TUN_PATH_MAX];         /* MESH_LLM_CACHE (node/bin_find.c) */
    char nostr_ca_file[TUN_PATH_MAX]; /* MESH_LLM_NOSTR_CA_FILE (net/ws_client.c) */
    /* which variables were given an accepted value, by row of the table (tunables_given) */
    uint8_t given[TUNABLES_MAX_VARS / 8];
} tunables_t;

/* Every field at the table's default, as with an empty environment. */
void tunables_defaults(tunables_t *t);

/* Fill t from envp (NULL: the process environment; the first NAME= entry wins, as with getenv);
 * reads nothing else. Returns the number of values not accepted (each left at its default, and
 * described in err, values of secret variables not shown), or -ENAMETOOLONG when a TUN_TEXT
 * value does not fit its field (err says which; t then holds the defaults). */
int tunables_load(tunables_t *t, const char *const *envp, char *err, size_t errlen);

/* Whether field (&t->x) was given an accepted value rather than left at its default. */
bool tunables_given(const tunables_t *t, const void *field);

/* The QUIC settings over tp_config_default's: handshake, idle (keepalive a third of it), live,
 * retry_after and congestion control. t NULL: the defaults. */
void tunables_tp_config(const tunables_t *t, tp_config_t *cfg);
/* The split RPC tunnels' (MESH_LLM_RPC_*). t NULL: the defaults. */
void tunables_rpc_opts(const tunables_t *t, tunnel_rpc_opts_t *o);
/* The downloader's retries and stall detection (MESH_LLM_DL_*). t NULL: the defaults. */
void tunables_dl_opts(const tunables_t *t, dl_opts_t *o);

#endif

/* Spawn, health-check, restart and stop llama.cpp children (llama-server per model).
 * Children bind 127.0.0.1 on a free port, die with the node (parent-death signal), and are
 * restarted with exponential backoff when they exit unexpectedly. */
#ifndef MESH_SUPERVISOR_H
#define MESH_SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "child_log.h"
#include "config.h"

typedef enum {
    CHILD_STOPPED = 0,
    CHILD_STARTING, /* spawned, waiting for /health */
    CHILD_READY,
    CHILD_BACKOFF, /* exited; restart scheduled */
    CHILD_STOPPING,
} child_state_t;

const char *child_state_name(child_state_t s);

#define CHILD_LOG_LINES 12
#define CHILD_LINE_MAX 512

typedef struct supervisor supervisor_t;
typedef struct sv_child sv_child_t;
typedef struct sv_probe sv_probe_t;

typedef enum {
    SV_KIND_LLAMA = 0, /* llama-server for a model */
    SV_KIND_RPC,       /* ggml-rpc-server lending this node's memory to split models */
} sv_kind_t;

struct sv_child {
    supervisor_t *sv;
    sv_kind_t kind;
    char name[MODEL_NAME_MAX];
    char *path;
    model_type_t type;
    char **extra_argv; /* extra llama-server arguments (owned) */
    uint32_t ctx_size;
    child_state_t state;
    uint16_t port;
    int pid;
    unsigned generation; /* bumped on every spawn */
    unsigned attempts;   /* consecutive failed starts, for backoff */
    unsigned restarts;   /* total restarts */
    bool ever_ready;
    bool ready_this_spawn;
    bool start_pending;              /* sv_start called while the previous process was closing */
    bool stop_notify;                /* sv_stop in progress: notify once every handle is closed */
    bool missing_file;               /* the last start failed because the model file is gone */
    child_fail_t fail_kind;          /* what the last failed start's output says (child_log.h) */
    char last_error[CHILD_LINE_MAX]; /* why the last load failed, for API errors */
    uint64_t load_timeout_ms; /* 0: the supervisor's default (MESH_LLM_LOAD_TIMEOUT_MS wins) */
    bool timed_out;           /* killed: not ready within the load timeout */
    bool wedged;              /* killed: stopped responding after it was ready */
    unsigned port_losses;     /* consecutive starts whose port another process took */
    uint64_t last_alive_ms;   /* last /health answer (while ready) */
    uint64_t progress_ms;     /* last sign of work while busy (CPU time advancing) */
    uint64_t cpu_ticks;
    bool probing; /* a liveness probe is in flight */
    bool port_warned;
    bool first_outcome; /* became ready or failed at least once */
    unsigned in_flight; /* proxied requests not yet finished */
    uint64_t spawned_ms, ready_ms;
    int64_t last_exit_status;
    int last_term_signal;
    uv_process_t proc;
    bool proc_open;
    uv_pipe_t out;
    bool out_open;
    uv_timer_t timer; /* health polling, backoff, post-mortem */
    uv_timer_t watch; /* load deadline while starting; liveness ticks while ready */
    char partial[CHILD_LINE_MAX];
    size_t partial_len;
    char lines[CHILD_LOG_LINES][CHILD_LINE_MAX];
    unsigned n_lines; /* total lines seen; ring index = n % CHILD_LOG_LINES */
    sv_child_t *next;
};

typedef void (*sv_event_cb)(supervisor_t *sv, sv_child_t *child);

/* What sv_watch.c found about a child (supervisor_int.h). It reports READY, TIMED_OUT and
 * WEDGED to on_verdict, and supervisor.c acts on them; the others it handles itself. */
typedef enum {
    SVW_WAIT = 0,   /* nothing new: keep watching */
    SVW_PORT_TAKEN, /* /health answered from a process other than the child: keep polling */
    SVW_READY,      /* a starting child answers /health (an rpc-server: connections) */
    SVW_TIMED_OUT,  /* a starting child is not ready at its load deadline */
    SVW_WEDGED,     /* a ready child stopped responding (sv_watch.c's header says when) */
} svw_verdict_t;

struct supervisor {
    uv_loop_t *loop;
    char *llama_server; /* absolute path */
    char *rpc_server;   /* ggml-rpc-server (absolute path), NULL when not found */
    char *self_exe;     /* for the parent-death wrapper */
    bool verbose;
    const char *device; /* --device LIST (the node's config owns it): children get only those */
    sv_child_t *children;
    size_t n_children;
    bool stopping;
    int test_port;       /* MESH_LLM_TEST_CHILD_PORT (0: none), from sv_init's tunables */
    bool test_port_used; /* it went to a child already */
    uv_timer_t kill_timer;
    sv_event_cb on_change; /* a child changed state */
    sv_event_cb on_all_stopped;
    sv_event_cb on_ready;       /* a start became healthy */
    sv_event_cb on_load_failed; /* a start failed before becoming healthy (no restart) */
    sv_event_cb on_stopped;     /* sv_stop finished: the process is gone */
    /* a ready child stopped responding and was just killed (SIGKILL sent; it restarts with
     * backoff): answer its requests now rather than when the connection breaks */
    sv_event_cb on_wedged;
    void *data;
    /* liveness (MESH_LLM_* tunables, given to sv_init) */
    uint64_t health_interval_ms; /* /health of a ready child every ... (default 5 s) */
    uint64_t health_timeout_ms;  /* ... answered within (default 5 s) */
    uint64_t hang_ms; /* no answer (and, if busy, no CPU progress) this long: wedged (30 s) */
    uint64_t load_timeout_ms; /* MESH_LLM_LOAD_TIMEOUT_MS: every load; 0 = per child */
    sv_probe_t *probes;       /* health checks in flight */
    /* sv_watch.c reports its verdicts here: supervisor.c's, set by sv_init */
    void (*on_verdict)(void *data, sv_child_t *c, svw_verdict_t v);
    void *verdict_data;
};

/* The load timeout of a model of this size when MESH_LLM_LOAD_TIMEOUT_MS is not set. */
uint64_t sv_default_load_timeout_ms(uint64_t model_bytes);

/* What the node gives its supervisor (sv_init; NULL: none of it). */
typedef struct {
    char *rpc_server;           /* ggml-rpc-server's path (taken: freed by sv_close), or NULL */
    sv_event_cb on_all_stopped; /* sv_stop_all finished */
} sv_deps_t;

struct tunables;
/* tun: the liveness timers (MESH_LLM_HEALTH_*, _HANG_TIMEOUT_MS, _LOAD_TIMEOUT_MS) and
 * MESH_LLM_TEST_CHILD_PORT; NULL: defaults */
int sv_init(supervisor_t *sv, uv_loop_t *loop, const char *llama_server, bool verbose,
            const struct tunables *tun, const sv_deps_t *dep);
/* Add a model child (not started). extra_args is a shell-like string or NULL. */
int sv_add(supervisor_t *sv, const char *name, const char *path, model_type_t type,
           uint32_t ctx_size, const char *extra_args, sv_child_t **out);
int sv_start(sv_child_t *c);
/* Add the rpc-server child (not started): `ggml-rpc-server -H 127.0.0.1 -p PORT -c`, its cache in
 * $LLAMA_CACHE/rpc/. Ready once its port accepts connections. -ENOENT without sv->rpc_server. */
int sv_add_rpc(supervisor_t *sv, const char *name, sv_child_t **out);
sv_child_t *sv_find(supervisor_t *sv, const char *name);
/* Replace the options used by the next start. */
int sv_set_options(sv_child_t *c, uint32_t ctx_size, const char *extra_args);
/* Stop one child (SIGTERM, SIGKILL after grace_ms); on_stopped fires when it is gone. */
void sv_stop(sv_child_t *c, uint64_t grace_ms);
/* SIGTERM every child, SIGKILL after grace_ms; on_all_stopped fires when none is left. */
void sv_stop_all(supervisor_t *sv, uint64_t grace_ms);
void sv_close(supervisor_t *sv);
/* Report every child's change of state to on_change (NULL: none). */
void sv_watch(supervisor_t *sv, sv_event_cb on_change);
/* The child's argv (for status output); NULL-terminated, owned by the caller. */
char **sv_build_argv(const sv_child_t *c);

/* Entry point of the wrapper process: `mesh-llm --exec-child PPID PROGRAM ARGS...`. Sets the
 * parent-death signal so the child dies with the node, then execs PROGRAM. Never returns. */
int sv_exec_child_main(int argc, char **argv);

#endif

/* cli_agents_node — the node a coding-agent launcher starts when none runs here, and the agent
 * run beside it (cli_agents.c decides what to start: core/agents.c's agent_node_args).
 *
 * The node runs in a session of its own (the terminal's Ctrl-C goes to the agent, not to it)
 * with its output in a log file; a node tied to the launcher gets SIGTERM when the launcher dies
 * (PR_SET_PDEATHSIG), and the launcher stops it (SIGTERM, then SIGKILL after a grace period) once
 * the agent has exited. */
#ifndef MESH_CLI_AGENTS_NODE_H
#define MESH_CLI_AGENTS_NODE_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;  /* 0: none (never started, or reaped) */
    int status; /* its wait status once reaped */
    int log_fd; /* the log, read for agent_node_echo; -1 none */
    off_t echoed;
    char partial[512]; /* an unfinished last line */
    size_t n_partial;
} agent_node_t;

/* Starts argv (NULL-terminated; argv[0] the binary) with stdin from /dev/null and its output in
 * log (created 0600, truncated); join, when not NULL, in its environment as MESH_LLM_JOIN (the
 * invite token never goes on an argv); tied: it gets SIGTERM when this process dies. 0 or
 * -errno. */
int agent_node_start(agent_node_t *n, const char *const *argv, const char *join, const char *log,
                     bool tied);
/* Whether it still runs; reaps it once it has exited (then n->status holds its wait status). */
bool agent_node_alive(agent_node_t *n);
/* Writes the log's lines that arrived since the last call to `to`, each after prefix. */
void agent_node_echo(agent_node_t *n, FILE *to, const char *prefix);
/* SIGTERM, then SIGKILL when it still runs after grace_ms; reaped either way. */
void agent_node_stop(agent_node_t *n, unsigned grace_ms);
void agent_node_close(agent_node_t *n);

/* Runs argv as a child that keeps the terminal: while it runs this process ignores SIGINT and
 * SIGQUIT (the terminal sends them to the child too, as with system(3)) and passes SIGTERM and
 * SIGHUP on to it. Its exit status as a shell reports it (128 + the signal that ended it), or
 * 126/127 when it could not be executed. */
int agent_run_child(char *const *argv);

#endif

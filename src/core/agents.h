/* agents — the coding-agent launchers' policy (mesh-llm claude|codex|opencode|pi), pure: no I/O,
 * no environment read. The driver (app/cli_agents.c) finds the node, gathers the models it
 * lists, and carries a plan out: it writes the plan's files, sets and unsets its environment and
 * executes its argv.
 *
 * Which model: agent_pick_model over the node's /v1/models rows (with what llama-server said of
 * each local model's chat template: whether it takes tools).
 *
 * What each agent gets (the mechanisms each tool documents; nothing is written into the user's
 * own configuration: every agent gets a private configuration directory, dir, which the driver
 * keeps under $MESH_LLM_HOME/agents/NAME):
 *  - claude: ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN, ANTHROPIC_MODEL and the default
 *    opus/sonnet/haiku/small-fast models set to the model, CLAUDE_CONFIG_DIR=dir, telemetry,
 *    error reports, auto-updates and other nonessential traffic off; ANTHROPIC_API_KEY unset; a
 *    first .claude.json (a seed, kept once Claude Code owns it) that skips the first-run
 *    onboarding screens;
 *  - codex: -c overrides of a provider "mesh" (base_url BASE/v1, wire_api "responses", its key
 *    from the environment variable AGENT_KEY_ENV), the model, analytics and the update check off;
 *    CODEX_HOME=dir;
 *  - opencode: OPENCODE_CONFIG_CONTENT (an @ai-sdk/openai-compatible provider "mesh", the key as
 *    {env:AGENT_KEY_ENV}, model mesh/MODEL, autoupdate and sharing off), OPENCODE_CONFIG_DIR=dir,
 *    the models.dev fetch, LSP downloads and default plugins off;
 *  - pi: a models.json in PI_CODING_AGENT_DIR=dir (provider "mesh", openai-completions, apiKey
 *    naming AGENT_KEY_ENV), --provider mesh --model MODEL, PI_OFFLINE=1.
 * The key is only ever in the environment (AGENT_KEY_ENV, or claude's ANTHROPIC_AUTH_TOKEN),
 * never on the agent's argv nor in a file. */
#ifndef MESH_AGENTS_H
#define MESH_AGENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The environment variable that carries the key to codex, opencode and pi. */
#define AGENT_KEY_ENV "MESH_AGENT_API_KEY"
/* The key sent when the node requires none (the agents insist on one). */
#define AGENT_DUMMY_KEY "mesh-llm"

#define AGENT_MAX_ARGS 64 /* the agent's own arguments, after the subcommand */
#define AGENT_MAX_ENV 24
#define AGENT_MAX_FILES 2

typedef enum { AGENT_CLAUDE, AGENT_CODEX, AGENT_OPENCODE, AGENT_PI, AGENT_N } agent_kind_t;

typedef struct {
    const char *name;    /* the subcommand: mesh-llm NAME */
    const char *binary;  /* the executable looked up on PATH */
    const char *package; /* the npm package that installs it */
    const char *title;   /* for messages: "Claude Code" */
} agent_info_t;

/* The agent a subcommand names, NULL when none. */
const agent_info_t *agent_by_name(const char *name, agent_kind_t *kind);
const agent_info_t *agent_info(agent_kind_t kind);

typedef enum { AGENT_TOOLS_UNKNOWN = 0, AGENT_TOOLS_NO, AGENT_TOOLS_YES } agent_tools_t;

/* One model the node lists. */
typedef struct {
    const char *id;
    bool llm;   /* type llm, or no type given */
    bool ready; /* status ready */
    uint64_t size;
    agent_tools_t tools; /* its chat template takes tools (llama-server's chat_template_caps) */
} agent_model_t;

/* Which model the agent gets: want when given (its index; -ENOENT when no row has that id);
 * else the best llm: ready before not ready, then tool-capable (yes, unknown, no), then the
 * largest, then the first id alphabetically. -ENOENT when no row is an llm. */
int agent_pick_model(const agent_model_t *m, size_t n, const char *want);

/* What the launcher starts when no node answers here (agent_node_args). */
typedef struct {
    const char *self;  /* this binary (argv[0] of the node) */
    const char *model; /* --model NAME: the node loads it (a file, a catalog name, hf://…) */
    const char *join;  /* --join TOKEN|@FILE: the node joins that mesh */
    bool have_config;  /* $MESH_LLM_HOME/config exists: the node reads what to serve there */
    int api_port;      /* --port given: the node's API port (0: its default) */
    int console_port;  /* --console given: its console port (0: its default) */
} agent_start_t;

typedef struct {
    const char *argv[12]; /* NULL-terminated; argv[0] is self */
    int argc;
    const char *join_env; /* a token for the node's MESH_LLM_JOIN, NULL: none */
    char port[8], console[8];
} agent_node_cmd_t;

/* The node to start: --model NAME loads NAME (and joins with --join); --join alone starts a
 * client (--client: it serves nothing, the mesh does); neither, with a config file, starts the
 * node the config file describes. The API and console ports given to the launcher go to the
 * node. The token is never on the argv: it goes into join_env (--join @FILE stays a file the
 * node reads). out points into itself: not to be copied. 0, or -ENOENT (nothing says what to
 * serve: the launcher says how to start a node), or -EINVAL (no self). */
int agent_node_args(const agent_start_t *s, agent_node_cmd_t *out);

typedef struct {
    const char *base_url; /* the node's inference API, no trailing slash: http://127.0.0.1:9337 */
    const char *model;
    const char *key; /* the node's API key, NULL: none required (AGENT_DUMMY_KEY is sent) */
    const char *dir; /* the agent's private configuration directory (exists) */
} agent_ctx_t;

typedef struct {
    char *name;
    char *value; /* NULL: unset the variable */
} agent_env_t;

typedef struct {
    char *path; /* absolute: dir/NAME */
    char *content;
    bool keep; /* a seed: written only when the file does not exist (the agent's own state) */
} agent_file_t;

typedef struct {
    char *argv[AGENT_MAX_ARGS + 32]; /* NULL-terminated; argv[0] the binary */
    int argc;
    agent_env_t env[AGENT_MAX_ENV];
    size_t n_env;
    agent_file_t files[AGENT_MAX_FILES];
    size_t n_files;
} agent_plan_t;

/* The plan for kind with the user's arguments (passed through after the launcher's own): 0,
 * -EINVAL (a field missing, or a model name or URL with control bytes), -E2BIG (more than
 * AGENT_MAX_ARGS user arguments), -ENOMEM. The plan is freed by agent_plan_free (also after a
 * failure). */
int agent_plan(agent_kind_t kind, const agent_ctx_t *c, int uargc, char *const *uargv,
               agent_plan_t *out);
void agent_plan_free(agent_plan_t *p);

/* The value the plan gives name (NULL when it sets none; *unset true when it unsets it). */
const char *agent_plan_env(const agent_plan_t *p, const char *name, bool *unset);

#endif

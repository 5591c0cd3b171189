/* cli_agents — mesh-llm claude|codex|opencode|pi [--model NAME] [--api URL|--port PORT]
 * [--console PORT] [--] [AGENT ARGS...]: run a coding agent against the node running here. The
 * driver of core/agents.c: it finds the node (its console, default 127.0.0.1:3131, names its API
 * port; else the API on 127.0.0.1:9337; --api URL names the API, --port PORT the API on 127.0.0.1),
 * lists its models (GET /v1/models, and each local llama-server's /props for whether its chat
 * template takes tools), picks one (agent_pick_model), writes the plan's files into
 * $MESH_LLM_HOME/agents/NAME, sets its environment and executes the agent (looked up on PATH) in
 * place of this process. The key is $MESH_LLM_API_KEY when set, through the environment only. Exit
 * status (when no agent runs): 1 no node or no model, 2 usage, 127 the agent is not installed. */
#ifndef MESH_CLI_AGENTS_H
#define MESH_CLI_AGENTS_H

#include <stdbool.h>

struct tunables;

bool cli_agents_is_command(const char *arg);
int cli_agents_main(int argc, char **argv, const struct tunables *tun);

#endif

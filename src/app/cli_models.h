/* cli_models — `mesh-llm download REF`, `mesh-llm models list|search|installed|rm`. (A node's
 * own --model references are downloaded by the running node: node/node_dl.h.) */
#ifndef MESH_CLI_MODELS_H
#define MESH_CLI_MODELS_H

/* argv[1] is "download" or "models": run it and return the exit code; otherwise -1. */
struct tunables;
int cli_models_main(int argc, char **argv, const struct tunables *tun);

#endif

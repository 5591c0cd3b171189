/* cli — the subcommands' dispatch (mesh-llm COMMAND ...): help, config check, and the
 * commands of cli_status.c, cli_discover.c, cli_models.c, cli_agents.c. Their names and help live in the
 * option table (node/options.h). */
#ifndef MESH_CLI_H
#define MESH_CLI_H

/* Runs the subcommand argv[1] names and returns its exit status, or -1 when argv[1] is no
 * subcommand (the node runs). A word that looks like a mistyped subcommand is refused with
 * "did you mean" (exit 2). */
int cli_dispatch(int argc, char **argv);

#endif

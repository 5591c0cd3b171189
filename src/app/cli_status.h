/* cli_status — the commands that talk to a running node's management API on 127.0.0.1:
 *   mesh-llm status [--console PORT]        a readable summary of GET /api/status
 *   mesh-llm join TOKEN [--console PORT]    POST /api/join, then follow the node until it is in
 *                                           the mesh (or --timeout SECONDS passes; default 60)
 * TOKEN may be @FILE (read from a file, out of ps' sight). $MESH_LLM_API_KEY, when set, is sent
 * as the API key. Exit status: 0 done, 1 failed (the reason on stderr), 2 usage. */
#ifndef MESH_CLI_STATUS_H
#define MESH_CLI_STATUS_H

#include <stdbool.h>

bool cli_is_command(const char *arg);
int cli_main(int argc, char **argv);

#endif

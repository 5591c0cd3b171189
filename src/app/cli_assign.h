/* cli_assign — mesh-llm assign MODEL [--node ID] [--console PORT] [--timeout SECONDS]
 * [--no-wait], mesh-llm unassign MODEL [--console PORT]: POST /api/assign or /api/unassign to
 * the node running here (through cli_status.h's cli_request). Exit status: 0 done, 1 failed (the
 * reason on stderr), 2 usage. */
#ifndef MESH_CLI_ASSIGN_H
#define MESH_CLI_ASSIGN_H

int cli_assign_main(int argc, char **argv);

#endif

/* cli_discover — `mesh-llm discover [--region R] [--model M] [--json] [--nostr-relay URL]...
 * [--timeout S]`: the public meshes listed on the Nostr relays (live, signature-checked, newest
 * per mesh), read until every relay has answered or the timeout. */
#ifndef MESH_CLI_DISCOVER_H
#define MESH_CLI_DISCOVER_H

#include <stdbool.h>

bool cli_discover_is_command(const char *arg);
struct tunables;
int cli_discover_main(int argc, char **argv, const struct tunables *tun);

#endif

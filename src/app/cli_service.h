/* cli_service — mesh-llm as a systemd user service:
 *   mesh-llm service install     write ~/.config/systemd/user/mesh-llm.service (ExecStart: this
 *                                binary --config ~/.config/mesh-llm/config) and that config
 *                                file (0600, all comments) when missing; print the
 *                                systemctl line that enables and starts it
 *   mesh-llm service uninstall   remove the unit (and its enablement link); the config file stays
 *   mesh-llm service status      the unit file, and the node that holds this home, if any
 *   mesh-llm service unit [--exec PATH]   print the unit (make install writes it this way)
 * $XDG_CONFIG_HOME replaces ~/.config. Exit status: 0 done, 1 failed, 2 usage. */
#ifndef MESH_CLI_SERVICE_H
#define MESH_CLI_SERVICE_H

struct tunables;
int cli_service_main(int argc, char **argv, const struct tunables *tun);

#endif

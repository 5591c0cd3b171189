/* cli — see cli.h. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#include "cli_agents.h"
#include "cli_assign.h"
#include "cli_discover.h"
#include "cli_models.h"
#include "cli_service.h"
#include "cli_status.h"
#include "config_file.h"
#include "options.h"
#include "tunables.h"

static bool is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

static int help_main(int argc, char **argv)
{
    if (argc < 3) {
        options_usage(stdout);
        return 0;
    }
    if (strcmp(argv[2], "environment") == 0) {
        options_env_usage(stdout);
        return 0;
    }
    const mesh_command_t *c = options_command(argv[2]);
    if (c) {
        options_command_usage(c, stdout);
        return 0;
    }
    const char *near = options_command_suggest(argv[2]);
    fprintf(stderr, "mesh-llm: error: no command '%s'%s%s%s\nRun 'mesh-llm help' for the list.\n",
            argv[2], near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    return 2;
}

static int config_main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[2], "check") == 0) return config_file_check(argv[3], stdout);
    options_command_usage(options_command("config"), stderr);
    return 2;
}

int cli_dispatch(int argc, char **argv)
{
    if (argc < 2) return -1;
    const char *cmd = argv[1];
    const mesh_command_t *c = options_command(cmd);
    if (c && argc >= 3 && is_help(argv[2])) {
        options_command_usage(c, stdout);
        return 0;
    }
    if (strcmp(cmd, "help") == 0) return help_main(argc, argv);
    if (strcmp(cmd, "config") == 0) return config_main(argc, argv);
    /* the commands' MESH_LLM_* environment, read once here (a value not accepted keeps its
     * default; the node reads it in config_parse) */
    tunables_t tun;
    tunables_load(&tun, NULL, NULL, 0);
    if (strcmp(cmd, "service") == 0) return cli_service_main(argc, argv, &tun);
    if (cli_is_command(cmd)) return cli_main(argc, argv);
    if (strcmp(cmd, "assign") == 0 || strcmp(cmd, "unassign") == 0)
        return cli_assign_main(argc, argv);
    if (cli_agents_is_command(cmd)) return cli_agents_main(argc, argv, &tun);
    if (cli_discover_is_command(cmd)) return cli_discover_main(argc, argv, &tun);
    int rc = cli_models_main(argc, argv, &tun);
    if (rc >= 0) return rc;
    if (cmd[0] == '-' || strchr(cmd, '/') || strchr(cmd, '.')) return -1;
    /* a word: no option, path or file name; a mistyped command? */
    const char *near = options_command_suggest(cmd);
    if (!near) return -1; /* config_parse refuses the stray argument */
    fprintf(stderr,
            "mesh-llm: error: unknown command '%s'; did you mean 'mesh-llm %s'?\n"
            "Run 'mesh-llm help' for the list.\n",
            cmd, near);
    return 2;
}

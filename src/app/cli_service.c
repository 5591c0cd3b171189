/* cli_service — see cli_service.h. */
#include "cli_service.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "home_lock.h"
#include "identity.h"
#include "platform.h"
#include "tunables.h"
#include "util.h"

#define UNIT_NAME "mesh-llm.service"

/* The service's config file (docs/config.md): all comments, so the node starts idle and joins a
 * mesh from the console until the user fills it in. */
static const char CONFIG_TEMPLATE[] =
    "# mesh-llm service settings (libconfig format: docs/config.md, mesh-llm help config).\n"
    "# Check it with: mesh-llm config check ~/.config/mesh-llm/config\n"
    "# With nothing set the node starts idle: join a mesh from the console at\n"
    "# http://127.0.0.1:3131. For example:\n"
    "#\n"
    "# models = ( \"/home/me/.models/model.gguf\",\n"
    "#            { model = \"Qwen2.5-0.5B-Instruct-Q4_K_M\"; ctx_size = 8192; } );\n"
    "# mesh = { join = \"@/home/me/.config/mesh-llm/token\"; max_vram = 8.0; };\n"
    "# api = { port = 9337; console = 3131; };\n";

/* The unit for the binary exe; man: it has a man page (make install installs one). */
static int unit_text(char *out, size_t len, const char *exe, bool man)
{
    if (strpbrk(exe, " \t\n%$\\\"'")) return -EINVAL; /* systemd would read them */
    int n =
        snprintf(out, len,
                 "# mesh-llm as a systemd user service: systemctl --user enable --now mesh-llm\n"
                 "# Settings: ~/.config/mesh-llm/config (docs/config.md)\n"
                 "[Unit]\n"
                 "Description=mesh-llm node: pool machines into one OpenAI-compatible LLM API\n"
                 "%s"
                 "\n"
                 "[Service]\n"
                 "Type=exec\n"
                 "ExecStart=%s --config %%h/.config/mesh-llm/config\n"
                 "Restart=on-failure\n"
                 "RestartSec=5\n"
                 "# 2: bad options; restarting cannot fix them\n"
                 "RestartPreventExitStatus=2\n"
                 "TimeoutStopSec=30\n"
                 "\n"
                 "[Install]\n"
                 "WantedBy=default.target\n",
                 man ? "Documentation=man:mesh-llm(1)\n" : "", exe);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int config_dir(char *out, size_t len, const char *sub)
{
    const char *x = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    int n;
    if (x && *x)
        n = snprintf(out, len, "%s/%s", x, sub);
    else if (home && *home)
        n = snprintf(out, len, "%s/.config/%s", home, sub);
    else
        return -ENOENT;
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Write text into path (mode: 0644 for the unit, 0600 for a settings file that may come to hold
 * secrets) through a temporary file. */
static int write_file(const char *path, const char *text, mode_t mode)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) return -errno;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = -errno;
        close(fd);
        unlink(tmp);
        return e;
    }
    fputs(text, f);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        int e = -errno;
        unlink(tmp);
        return e;
    }
    return 0;
}

/* This binary's path, and whether its prefix has the man page (an installed copy). */
static int self_exe(char *exe, size_t len, bool *man)
{
    int rc = plat_self_exe(exe, len);
    if (rc) return rc;
    char page[PATH_MAX + 32];
    snprintf(page, sizeof page, "%s/../../share/man/man1/mesh-llm.1", exe);
    *man = access(page, R_OK) == 0;
    return 0;
}

static int fail(const char *what, const char *path, int rc)
{
    fprintf(stderr, "mesh-llm service: cannot %s %s: %s\n", what, path, strerror(-rc));
    return 1;
}

static int service_install(void)
{
    char exe[PATH_MAX], dir[PATH_MAX], unit[PATH_MAX + 32], conf[PATH_MAX + 32];
    char text[PATH_MAX + 2048];
    bool man;
    int erc = self_exe(exe, sizeof exe, &man);
    if (erc) return fail("find", "this binary's path", erc);
    int rc = config_dir(dir, sizeof dir, "mesh-llm");
    if (rc == 0 && (rc = mkdir_p(dir, 0755)) != 0) return fail("create", dir, rc);
    if (rc) return fail("find", "the configuration directory (set HOME)", rc);
    snprintf(conf, sizeof conf, "%s/config", dir);
    if (access(conf, F_OK) != 0 && (rc = write_file(conf, CONFIG_TEMPLATE, 0600)) != 0)
        return fail("write", conf, rc);
    if ((rc = config_dir(dir, sizeof dir, "systemd/user")) != 0 || (rc = mkdir_p(dir, 0755)) != 0)
        return fail("create", dir, rc);
    snprintf(unit, sizeof unit, "%s/" UNIT_NAME, dir);
    if ((rc = unit_text(text, sizeof text, exe, man)) != 0)
        return fail("write a unit for", exe, rc);
    if ((rc = write_file(unit, text, 0644)) != 0) return fail("write", unit, rc);
    printf("wrote %s (runs %s)\n"
           "settings: %s (docs/config.md; check it with mesh-llm config check FILE)\n"
           "enable and start it now and at every login:\n"
           "  systemctl --user daemon-reload && systemctl --user enable --now mesh-llm\n"
           "to keep it running when you are logged out: loginctl enable-linger\n",
           unit, exe, conf);
    return 0;
}

static int service_uninstall(void)
{
    char dir[PATH_MAX], unit[PATH_MAX + 32], link[PATH_MAX + 64];
    int rc = config_dir(dir, sizeof dir, "systemd/user");
    if (rc) return fail("find", "the configuration directory (set HOME)", rc);
    snprintf(unit, sizeof unit, "%s/" UNIT_NAME, dir);
    snprintf(link, sizeof link, "%s/default.target.wants/" UNIT_NAME, dir);
    if (unlink(link) != 0 && errno != ENOENT) return fail("remove", link, -errno);
    if (unlink(unit) != 0) {
        if (errno != ENOENT) return fail("remove", unit, -errno);
        printf("%s is not installed: nothing to do\n", unit);
        return 0;
    }
    printf("removed %s (the settings in ~/.config/mesh-llm stay)\n"
           "if it is running, stop it: systemctl --user stop mesh-llm && systemctl --user "
           "daemon-reload\n",
           unit);
    return 0;
}

static int service_status(const tunables_t *tun)
{
    char dir[PATH_MAX], unit[PATH_MAX + 32], home[4096];
    if (config_dir(dir, sizeof dir, "systemd/user") == 0) {
        snprintf(unit, sizeof unit, "%s/" UNIT_NAME, dir);
        printf("unit: %s (%s)\n", unit,
               access(unit, F_OK) == 0 ? "installed" : "not installed: mesh-llm service install");
    }
    if (identity_home(tun->home, home, sizeof home) == 0) {
        pid_t p = home_lock_holder(home);
        if (p > 0)
            printf("node: running, pid %ld, state directory %s\n", (long)p, home);
        else
            printf("node: none running with the state directory %s\n", home);
    }
    printf("systemd's view: systemctl --user status mesh-llm\n");
    return 0;
}

static int usage(void)
{
    fputs("usage: mesh-llm service install|uninstall|status\n"
          "       mesh-llm service unit [--exec PATH]   print the systemd user unit\n",
          stderr);
    return 2;
}

int cli_service_main(int argc, char **argv, const tunables_t *tun)
{
    if (argc < 3) return usage();
    const char *cmd = argv[2];
    if (strcmp(cmd, "install") == 0 && argc == 3) return service_install();
    if (strcmp(cmd, "uninstall") == 0 && argc == 3) return service_uninstall();
    if (strcmp(cmd, "status") == 0 && argc == 3) return service_status(tun);
    if (strcmp(cmd, "unit") == 0 && (argc == 3 || (argc == 5 && !strcmp(argv[3], "--exec")))) {
        char exe[PATH_MAX], text[PATH_MAX + 2048];
        bool man = true; /* --exec: make install, which installs the man page */
        int erc = argc == 3 ? self_exe(exe, sizeof exe, &man) : 0;
        if (erc) return fail("find", "this binary's path", erc);
        const char *path = argc == 5 ? argv[4] : exe;
        int rc = unit_text(text, sizeof text, path, man);
        if (rc) return fail("write a unit for", path, rc);
        fputs(text, stdout);
        return 0;
    }
    return usage();
}

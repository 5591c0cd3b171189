/* config_secrets — see config_int.h. */
#include "config_int.h"

#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "httpd_guard.h"
#include "log.h"
#include "options.h"
#include "util.h"

/* ---- secrets (--join @FILE, MESH_LLM_JOIN, --api-key-file, MESH_LLM_API_KEY) and origins ---- */

/* Read a small secret file whole (at most CONFIG_SECRET_FILE_MAX bytes). */
static int read_secret_file(const char *path, const char *flag, char **out, char *err,
                            size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s %s: %s", flag, path, strerror(errno));
        return -EINVAL;
    }
    char *buf = malloc(CONFIG_SECRET_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, CONFIG_SECRET_FILE_MAX + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf) return -ENOMEM;
    if (bad || n > CONFIG_SECRET_FILE_MAX) {
        snprintf(err, errlen, "%s %s: %s", flag, path,
                 bad ? "cannot read it" : "larger than 64 KiB; is it the right file?");
        sodium_memzero(buf, CONFIG_SECRET_FILE_MAX + 1);
        free(buf);
        return -EINVAL;
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

static bool is_sep(char ch, bool commas)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || (commas && ch == ',');
}

static int add_join(config_t *cfg, const char *tok, size_t len, char *err, size_t errlen)
{
    if (cfg->n_joins == CONFIG_MAX_JOIN) {
        snprintf(err, errlen, "at most %d --join tokens", CONFIG_MAX_JOIN);
        return -EINVAL;
    }
    char terr[256];
    if (token_decode(tok, len, &cfg->joins[cfg->n_joins], terr, sizeof terr) != 0) {
        snprintf(err, errlen, "--join #%zu: %s", cfg->n_joins + 1, terr);
        return -EINVAL;
    }
    if (cfg->n_joins > 0 && strcmp(cfg->joins[0].mesh_id, cfg->joins[cfg->n_joins].mesh_id)) {
        snprintf(err, errlen,
                 "--join #%zu is for another mesh (%s) than --join #1 (%s); give tokens of one "
                 "mesh",
                 cfg->n_joins + 1, cfg->joins[cfg->n_joins].mesh_id, cfg->joins[0].mesh_id);
        sodium_memzero(&cfg->joins[cfg->n_joins], sizeof cfg->joins[0]);
        return -EINVAL;
    }
    cfg->n_joins++;
    return 0;
}

/* Every token in text (separated by whitespace, and commas when commas is set). */
static int add_joins_from(config_t *cfg, const char *text, bool commas, const char *what, char *err,
                          size_t errlen)
{
    size_t before = cfg->n_joins;
    const char *p = text;
    while (*p) {
        while (*p && is_sep(*p, commas))
            p++;
        if (!*p) break;
        const char *start = p;
        while (*p && !is_sep(*p, commas))
            p++;
        int rc = add_join(cfg, start, (size_t)(p - start), err, errlen);
        if (rc) return rc;
    }
    if (cfg->n_joins == before) {
        snprintf(err, errlen, "%s holds no invite token", what);
        return -EINVAL;
    }
    return 0;
}

int config_join_arg(config_t *cfg, const char *arg, char *err, size_t errlen)
{
    if (arg[0] != '@') {
        cfg->join_in_argv = true;
        return add_join(cfg, arg, strlen(arg), err, errlen);
    }
    char *text = NULL;
    int rc = read_secret_file(arg + 1, "--join", &text, err, errlen);
    if (rc) return rc;
    char what[512];
    snprintf(what, sizeof what, "--join %s", arg);
    rc = add_joins_from(cfg, text, false, what, err, errlen);
    sodium_memzero(text, strlen(text));
    free(text);
    return rc;
}

int config_set_api_key(config_t *cfg, const char *key, size_t len, const char *from, char *err,
                       size_t errlen)
{
    while (len && is_sep(key[len - 1], false)) /* a file's final newline */
        len--;
    if (len == 0) {
        snprintf(err, errlen, "%s: the API key must not be empty", from);
        return -EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)key[i] < 0x21 || key[i] == 0x7f) {
            snprintf(err, errlen, "%s: the API key must be one line of printable characters", from);
            return -EINVAL;
        }
    }
    if (cfg->api_key) sodium_memzero(cfg->api_key, strlen(cfg->api_key));
    free(cfg->api_key);
    cfg->api_key = strndup(key, len);
    return cfg->api_key ? 0 : -ENOMEM;
}

int config_api_key_file(config_t *cfg, const char *path, char *err, size_t errlen)
{
    char *text = NULL;
    int rc = read_secret_file(path, "--api-key-file", &text, err, errlen);
    if (rc) return rc;
    char from[512];
    snprintf(from, sizeof from, "--api-key-file %s", path);
    rc = config_set_api_key(cfg, text, strlen(text), from, err, errlen);
    if (rc == 0) cfg->api_key_in_argv = false;
    sodium_memzero(text, strlen(text));
    free(text);
    return rc;
}

int config_allow_origin(config_t *cfg, const char *arg, char *err, size_t errlen)
{
    char origin[GUARD_ORIGIN_MAX + 2];
    size_t n = strlen(arg);
    if (n && n < sizeof origin && arg[n - 1] == '/') n--; /* "http://host:port/" as pasted */
    if (n >= sizeof origin) n = sizeof origin - 1;
    memcpy(origin, arg, n);
    origin[n] = '\0';
    if (!guard_origin_valid(origin)) {
        snprintf(err, errlen,
                 "--allow-origin needs an origin like http://localhost:5173 or "
                 "https://app.example.com (scheme://host[:port], no path), got '%s'",
                 arg);
        return -EINVAL;
    }
    for (size_t i = 0; i < cfg->n_allow_origins; i++)
        if (strcasecmp(cfg->allow_origins[i], origin) == 0) return 0;
    if (cfg->n_allow_origins == CONFIG_MAX_ORIGINS) {
        snprintf(err, errlen, "at most %d --allow-origin values", CONFIG_MAX_ORIGINS);
        return -EINVAL;
    }
    char *o = strdup(origin);
    if (!o) return -ENOMEM;
    cfg->allow_origins[cfg->n_allow_origins++] = o;
    return 0;
}

/* ---- STUN and TURN servers (--stun, --turn, --turn-user, the TURN password) ---- */

static int set_turn_password(config_t *cfg, const char *pw, size_t len, const char *from, char *err,
                             size_t errlen)
{
    while (len && is_sep(pw[len - 1], false)) /* a file's final newline */
        len--;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)pw[i] < 0x20 || pw[i] == 0x7f) {
            snprintf(err, errlen, "%s: the TURN password must be one line", from);
            return -EINVAL;
        }
    if (len == 0 || len > 256) {
        snprintf(err, errlen, "%s: the TURN password must be 1 to 256 characters", from);
        return -EINVAL;
    }
    if (cfg->turn_password) sodium_memzero(cfg->turn_password, strlen(cfg->turn_password));
    free(cfg->turn_password);
    cfg->turn_password = strndup(pw, len);
    return cfg->turn_password ? 0 : -ENOMEM;
}

int config_nat_server(config_t *cfg, int opt, const char *arg, bool from_file, char *err,
                      size_t errlen)
{
    char **dst = NULL;
    switch (opt) {
    case OPT_STUN:
        if (cfg->n_stun == CONFIG_MAX_STUN) {
            snprintf(err, errlen, "at most %d --stun servers", CONFIG_MAX_STUN);
            return -EINVAL;
        }
        dst = &cfg->stun[cfg->n_stun++];
        break;
    case OPT_TURN:
        dst = &cfg->turn;
        break;
    case OPT_TURN_USER:
        dst = &cfg->turn_user;
        break;
    case OPT_TURN_PASSWORD_FILE: {
        char *text = NULL;
        int rc = read_secret_file(arg, "--turn-password-file", &text, err, errlen);
        if (rc) return rc;
        char from[512];
        snprintf(from, sizeof from, "--turn-password-file %s", arg);
        rc = set_turn_password(cfg, text, strlen(text), from, err, errlen);
        sodium_memzero(text, strlen(text));
        free(text);
        return rc;
    }
    case OPT_TURN_PASSWORD:
        if (!from_file) {
            snprintf(err, errlen,
                     "--turn-password would put the password on the command line; use "
                     "--turn-password-file FILE, $MESH_LLM_TURN_PASSWORD or the config file's "
                     "mesh.turn_password");
            return -EINVAL;
        }
        return set_turn_password(cfg, arg, strlen(arg), "mesh.turn_password", err, errlen);
    default:
        return -EINVAL;
    }
    if (!*arg || strlen(arg) > 255) {
        snprintf(err, errlen, "--%s needs a value of 1 to 255 characters",
                 opt == OPT_STUN   ? "stun"
                 : opt == OPT_TURN ? "turn"
                                   : "turn-user");
        if (opt == OPT_STUN) cfg->n_stun--;
        return -EINVAL;
    }
    free(*dst);
    *dst = strdup(arg);
    return *dst ? 0 : -ENOMEM;
}

void config_nat_servers_free(config_t *cfg)
{
    for (size_t i = 0; i < cfg->n_stun; i++)
        free(cfg->stun[i]);
    cfg->n_stun = 0;
    free(cfg->turn);
    free(cfg->turn_user);
    if (cfg->turn_password) sodium_memzero(cfg->turn_password, strlen(cfg->turn_password));
    free(cfg->turn_password);
    cfg->turn = cfg->turn_user = cfg->turn_password = NULL;
}

const char *config_env_api_key(void)
{
    const char *k = getenv("MESH_LLM_API_KEY");
    return k && *k ? k : NULL;
}

/* Secrets from the environment, for what the command line did not give. */
int config_secrets_from_env(config_t *cfg, char *err, size_t errlen)
{
    const char *j = getenv("MESH_LLM_JOIN");
    if (cfg->n_joins == 0 && j && *j) {
        int rc = add_joins_from(cfg, j, true, "MESH_LLM_JOIN", err, errlen);
        if (rc) return rc;
    }
    const char *tp = getenv("MESH_LLM_TURN_PASSWORD");
    if (!cfg->turn_password && tp && *tp) {
        int rc = set_turn_password(cfg, tp, strlen(tp), "MESH_LLM_TURN_PASSWORD", err, errlen);
        if (rc) return rc;
    }
    const char *k = config_env_api_key();
    if (!cfg->api_key && k)
        return config_set_api_key(cfg, k, strlen(k), "MESH_LLM_API_KEY", err, errlen);
    return 0;
}

void config_log_warnings(const config_t *cfg)
{
    struct stat st;
    if (cfg->config_path) LOGI("config", "settings read from %s", cfg->config_path);
    if (cfg->config_path && cfg->config_has_secret && stat(cfg->config_path, &st) == 0 &&
        (st.st_mode & 077))
        LOGW("config",
             "%s holds a secret (a join token or an API key) and other users of this "
             "machine may read it: chmod 600 %s",
             cfg->config_path, cfg->config_path);
    if (cfg->listen_all && !cfg->api_key)
        LOGW("config", "--listen-all without an API key: the API and the console are open to "
                       "the NETWORK — anyone who can reach this machine can run inference and "
                       "load or unload models. Add --api-key-file FILE or set MESH_LLM_API_KEY");
    if (cfg->join_in_argv)
        LOGW("config", "the --join token (it holds the mesh secret) is on the command line, "
                       "where other users of this machine can read it; use --join @FILE or "
                       "MESH_LLM_JOIN");
    if (cfg->api_key_in_argv)
        LOGW("config", "--api-key puts the key on the command line, where other users of this "
                       "machine can read it; use --api-key-file FILE or MESH_LLM_API_KEY");
}

/* agents — see agents.h. */
#include "agents.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const agent_info_t AGENTS[AGENT_N] = {
    [AGENT_CLAUDE] = {"claude", "claude", "@anthropic-ai/claude-code", "Claude Code"},
    [AGENT_CODEX] = {"codex", "codex", "@openai/codex", "Codex"},
    [AGENT_OPENCODE] = {"opencode", "opencode", "opencode-ai", "opencode"},
    [AGENT_PI] = {"pi", "pi", "@mariozechner/pi-coding-agent", "pi"},
};

const agent_info_t *agent_info(agent_kind_t kind)
{
    return kind < AGENT_N ? &AGENTS[kind] : NULL;
}

const agent_info_t *agent_by_name(const char *name, agent_kind_t *kind)
{
    for (int i = 0; i < AGENT_N; i++)
        if (strcmp(AGENTS[i].name, name) == 0) {
            if (kind) *kind = (agent_kind_t)i;
            return &AGENTS[i];
        }
    return NULL;
}

/* ---- the model ---- */

static int tools_rank(agent_tools_t t)
{
    return t == AGENT_TOOLS_YES ? 2 : t == AGENT_TOOLS_UNKNOWN ? 1 : 0;
}

/* whether a is a better pick than b */
static bool better(const agent_model_t *a, const agent_model_t *b)
{
    if (a->ready != b->ready) return a->ready;
    if (tools_rank(a->tools) != tools_rank(b->tools))
        return tools_rank(a->tools) > tools_rank(b->tools);
    if (a->size != b->size) return a->size > b->size;
    return strcmp(a->id, b->id) < 0;
}

int agent_pick_model(const agent_model_t *m, size_t n, const char *want)
{
    if (want && *want) {
        for (size_t i = 0; i < n; i++)
            if (m[i].id && strcmp(m[i].id, want) == 0) return (int)i;
        return -ENOENT;
    }
    int best = -ENOENT;
    for (size_t i = 0; i < n; i++) {
        if (!m[i].id || !m[i].id[0] || !m[i].llm) continue;
        if (best < 0 || better(&m[i], &m[best])) best = (int)i;
    }
    return best;
}

/* ---- the node the launcher starts ---- */

int agent_node_args(const agent_start_t *s, agent_node_cmd_t *out)
{
    memset(out, 0, sizeof *out);
    if (!s->self || !*s->self) return -EINVAL;
    bool join = s->join && *s->join;
    if (!(s->model && *s->model) && !join && !s->have_config) return -ENOENT;
    int n = 0;
    out->argv[n++] = s->self;
    if (s->model && *s->model) {
        out->argv[n++] = "--model";
        out->argv[n++] = s->model;
    } else if (join) {
        out->argv[n++] = "--client";
    }
    if (join && s->join[0] == '@') {
        out->argv[n++] = "--join";
        out->argv[n++] = s->join;
    } else if (join) {
        out->join_env = s->join;
    }
    if (s->api_port > 0 && s->api_port <= 65535) {
        snprintf(out->port, sizeof out->port, "%d", s->api_port);
        out->argv[n++] = "--port";
        out->argv[n++] = out->port;
    }
    if (s->console_port > 0 && s->console_port <= 65535) {
        snprintf(out->console, sizeof out->console, "%d", s->console_port);
        out->argv[n++] = "--console";
        out->argv[n++] = out->console;
    }
    out->argv[n] = NULL;
    out->argc = n;
    return 0;
}

/* ---- the plan ---- */

static bool printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return false;
    return true;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    int n = vasprintf(&s, f, ap);
    va_end(ap);
    return n < 0 ? NULL : s;
}

static int arg(agent_plan_t *p, char *s)
{
    if (!s) return -ENOMEM;
    if ((size_t)p->argc + 1 >= sizeof p->argv / sizeof p->argv[0]) {
        free(s);
        return -E2BIG;
    }
    p->argv[p->argc++] = s;
    p->argv[p->argc] = NULL;
    return 0;
}

static int set(agent_plan_t *p, const char *name, const char *value)
{
    if (p->n_env >= AGENT_MAX_ENV) return -E2BIG;
    agent_env_t *e = &p->env[p->n_env];
    e->name = strdup(name);
    e->value = value ? strdup(value) : NULL;
    if (!e->name || (value && !e->value)) {
        free(e->name);
        free(e->value);
        return -ENOMEM;
    }
    p->n_env++;
    return 0;
}

static int file(agent_plan_t *p, const char *dir, const char *name, json_t *doc, bool keep)
{
    if (!doc) return -ENOMEM;
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(doc);
    char *path = fmt("%s/%s", dir, name);
    if (!text || !path || p->n_files >= AGENT_MAX_FILES) {
        free(text);
        free(path);
        return text && path ? -E2BIG : -ENOMEM;
    }
    p->files[p->n_files++] = (agent_file_t){.path = path, .content = text, .keep = keep};
    return 0;
}

/* a TOML basic string of s (for codex's -c key=value) */
static char *toml_str(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(2 * n + 3), *o = out;
    if (!out) return NULL;
    *o++ = '"';
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') *o++ = '\\';
        *o++ = *s;
    }
    *o++ = '"';
    *o = '\0';
    return out;
}

static int codex_set(agent_plan_t *p, const char *key, const char *value, bool quote)
{
    int rc = arg(p, strdup("-c"));
    if (rc) return rc;
    char *v = quote ? toml_str(value) : strdup(value);
    if (!v) return -ENOMEM;
    rc = arg(p, fmt("%s=%s", key, v));
    free(v);
    return rc;
}

static int plan_claude(agent_plan_t *p, const agent_ctx_t *c)
{
    static const char *const model_vars[] = {
        "ANTHROPIC_MODEL",
        "ANTHROPIC_SMALL_FAST_MODEL",
        "ANTHROPIC_DEFAULT_OPUS_MODEL",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    };
    static const char *const off[] = {
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_TELEMETRY",
        "DISABLE_ERROR_REPORTING",
        "DISABLE_AUTOUPDATER",
        "DISABLE_BUG_COMMAND",
    };
    int rc = set(p, "ANTHROPIC_BASE_URL", c->base_url);
    if (!rc) rc = set(p, "ANTHROPIC_AUTH_TOKEN", c->key ? c->key : AGENT_DUMMY_KEY);
    /* a key of the user's own for api.anthropic.com must not go to the mesh (nor win over
     * the token) */
    if (!rc) rc = set(p, "ANTHROPIC_API_KEY", NULL);
    for (size_t i = 0; !rc && i < sizeof model_vars / sizeof model_vars[0]; i++)
        rc = set(p, model_vars[i], c->model);
    for (size_t i = 0; !rc && i < sizeof off / sizeof off[0]; i++)
        rc = set(p, off[i], "1");
    if (!rc) rc = set(p, "CLAUDE_CONFIG_DIR", c->dir);
    /* an interactive first start would ask for a theme and walk through onboarding */
    if (!rc)
        rc = file(p, c->dir, ".claude.json",
                  json_pack("{s:b, s:s}", "hasCompletedOnboarding", 1, "theme", "dark"), true);
    return rc;
}

static int plan_codex(agent_plan_t *p, const agent_ctx_t *c)
{
    char *url = fmt("%s/v1", c->base_url);
    if (!url) return -ENOMEM;
    int rc = codex_set(p, "model_provider", "mesh", true);
    if (!rc) rc = codex_set(p, "model_providers.mesh.name", "mesh-llm", true);
    if (!rc) rc = codex_set(p, "model_providers.mesh.base_url", url, true);
    if (!rc) rc = codex_set(p, "model_providers.mesh.wire_api", "responses", true);
    if (!rc) rc = codex_set(p, "model_providers.mesh.env_key", AGENT_KEY_ENV, true);
    if (!rc) rc = codex_set(p, "model", c->model, true);
    if (!rc) rc = codex_set(p, "analytics.enabled", "false", false);
    if (!rc) rc = codex_set(p, "check_for_update_on_startup", "false", false);
    free(url);
    if (!rc) rc = set(p, "CODEX_HOME", c->dir);
    return rc;
}

static int plan_opencode(agent_plan_t *p, const agent_ctx_t *c)
{
    char *url = fmt("%s/v1", c->base_url), *model = fmt("mesh/%s", c->model);
    json_t *doc =
        url && model
            ? json_pack("{s:s, s:{s:{s:s, s:s, s:{s:s, s:s}, s:{s:{s:s, s:b}}}},"
                        " s:s, s:s, s:b}",
                        "$schema", "https://opencode.ai/config.json", "provider", "mesh", "npm",
                        "@ai-sdk/openai-compatible", "name", "mesh-llm", "options", "baseURL", url,
                        "apiKey", "{env:" AGENT_KEY_ENV "}", "models", c->model, "name", c->model,
                        "tool_call", 1, "model", model, "share", "disabled", "autoupdate", 0)
            : NULL;
    free(url);
    free(model);
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    if (!text) return -ENOMEM;
    int rc = set(p, "OPENCODE_CONFIG_CONTENT", text);
    free(text);
    static const char *const off[] = {
        "OPENCODE_DISABLE_AUTOUPDATE",      "OPENCODE_DISABLE_MODELS_FETCH",
        "OPENCODE_DISABLE_SHARE",           "OPENCODE_DISABLE_LSP_DOWNLOAD",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS",
    };
    for (size_t i = 0; !rc && i < sizeof off / sizeof off[0]; i++)
        rc = set(p, off[i], "1");
    if (!rc) rc = set(p, "OPENCODE_CONFIG_DIR", c->dir);
    return rc;
}

static int plan_pi(agent_plan_t *p, const agent_ctx_t *c)
{
    char *url = fmt("%s/v1", c->base_url);
    json_t *doc =
        url ? json_pack("{s:{s:{s:s, s:s, s:s, s:b, s:{s:b, s:b}, s:[{s:s}]}}}", "providers",
                        "mesh", "baseUrl", url, "api", "openai-completions", "apiKey",
                        AGENT_KEY_ENV, "authHeader", 1, "compat", "supportsDeveloperRole", 0,
                        "supportsReasoningEffort", 0, "models", "id", c->model)
            : NULL;
    free(url);
    int rc = file(p, c->dir, "models.json", doc, false);
    if (!rc) rc = arg(p, strdup("--provider"));
    if (!rc) rc = arg(p, strdup("mesh"));
    if (!rc) rc = arg(p, strdup("--model"));
    if (!rc) rc = arg(p, strdup(c->model));
    if (!rc) rc = set(p, "PI_CODING_AGENT_DIR", c->dir);
    if (!rc) rc = set(p, "PI_OFFLINE", "1");
    if (!rc) rc = set(p, "PI_TELEMETRY", "0");
    if (!rc) rc = set(p, "PI_SKIP_VERSION_CHECK", "1");
    return rc;
}

int agent_plan(agent_kind_t kind, const agent_ctx_t *c, int uargc, char *const *uargv,
               agent_plan_t *out)
{
    memset(out, 0, sizeof *out);
    if (kind >= AGENT_N || !c || !c->base_url || !c->model || !c->dir || !c->model[0] ||
        !printable(c->base_url) || !printable(c->model) || (c->key && !printable(c->key)) ||
        uargc < 0)
        return -EINVAL;
    if (uargc > AGENT_MAX_ARGS) return -E2BIG;
    int rc = arg(out, strdup(AGENTS[kind].binary));
    if (!rc && kind != AGENT_CLAUDE)
        rc = set(out, AGENT_KEY_ENV, c->key ? c->key : AGENT_DUMMY_KEY);
    if (!rc) {
        switch (kind) {
        case AGENT_CLAUDE:
            rc = plan_claude(out, c);
            break;
        case AGENT_CODEX:
            rc = plan_codex(out, c);
            break;
        case AGENT_OPENCODE:
            rc = plan_opencode(out, c);
            break;
        case AGENT_PI:
            rc = plan_pi(out, c);
            break;
        default:
            rc = -EINVAL;
        }
    }
    for (int i = 0; !rc && i < uargc; i++)
        rc = arg(out, strdup(uargv[i] ? uargv[i] : ""));
    return rc;
}

void agent_plan_free(agent_plan_t *p)
{
    for (int i = 0; i < p->argc; i++)
        free(p->argv[i]);
    for (size_t i = 0; i < p->n_env; i++) {
        free(p->env[i].name);
        free(p->env[i].value);
    }
    for (size_t i = 0; i < p->n_files; i++) {
        free(p->files[i].path);
        free(p->files[i].content);
    }
    memset(p, 0, sizeof *p);
}

const char *agent_plan_env(const agent_plan_t *p, const char *name, bool *unset)
{
    if (unset) *unset = false;
    for (size_t i = p->n_env; i-- > 0;)
        if (strcmp(p->env[i].name, name) == 0) {
            if (unset) *unset = !p->env[i].value;
            return p->env[i].value;
        }
    return NULL;
}

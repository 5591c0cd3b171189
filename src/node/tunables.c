/* tunables — see tunables.h. The loader knows no variable by name: the table does. */
#include "tunables.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "options.h"
#include "util.h"

extern char **environ;

static uint64_t *u64_of(tunables_t *t, const mesh_env_t *e)
{
    return (uint64_t *)((char *)t + e->off);
}

static bool *bool_of(tunables_t *t, const mesh_env_t *e)
{
    return (bool *)((char *)t + e->off);
}

static char *text_of(tunables_t *t, const mesh_env_t *e)
{
    return (char *)t + e->off;
}

static void set_default(tunables_t *t, const mesh_env_t *e)
{
    switch (e->kind) {
    case TUN_MS:
    case TUN_MS0:
    case TUN_U64:
    case TUN_ULONG:
        *u64_of(t, e) = e->value;
        break;
    case TUN_BOOL:
        *bool_of(t, e) = e->value != 0;
        break;
    case TUN_TEXT:
        text_of(t, e)[0] = '\0';
        break;
    case TUN_CHOICE:
        snprintf(text_of(t, e), TUN_CHOICE_MAX, "%s", e->def ? e->def : "");
        break;
    case TUN_NONE:
    case TUN_OPTION:
        break;
    }
}

void tunables_defaults(tunables_t *t)
{
    size_t n;
    const mesh_env_t *rows = options_env_all(&n);
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < n; i++)
        set_default(t, &rows[i]);
}

/* getenv over envp: the first NAME=VALUE entry's VALUE, or NULL */
static const char *lookup(const char *const *envp, const char *name)
{
    size_t len = strlen(name);
    for (; envp && *envp; envp++)
        if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=') return *envp + len + 1;
    return NULL;
}

/* speed.c's parser: strtoul's syntax (leading space, a sign), all of it a number */
static bool parse_ulong(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (end == s || *end != '\0' || v < min || v > max) return false;
    *out = v;
    return true;
}

/* The one rule of every switch (TUN_BOOL): a decimal integer 0 .. max (true when not 0), or
 * off/on, false/true, no/yes in any case. 1, 0, or -1: not a switch value. */
static int parse_switch(const char *s, uint64_t max)
{
    static const char *const off[] = {"off", "false", "no"}, *const on[] = {"on", "true", "yes"};
    uint64_t v;
    if (parse_u64(s, 0, max, &v) == 0) return v != 0;
    for (size_t i = 0; i < 3; i++) {
        if (strcasecmp(s, off[i]) == 0) return 0;
        if (strcasecmp(s, on[i]) == 0) return 1;
    }
    return -1;
}

/* a word of "a|b|c" */
static bool is_choice(const char *choices, const char *s)
{
    size_t len = strlen(s);
    for (const char *p = choices; p && *p;) {
        size_t w = strcspn(p, "|");
        if (w == len && strncmp(p, s, len) == 0) return true;
        p += w + (p[w] == '|');
    }
    return false;
}

/* Read value s of row e into t. 1: accepted; 0: not (why says what it takes); -ENAMETOOLONG. */
static int parse(tunables_t *t, const mesh_env_t *e, const char *s, char *why, size_t wl)
{
    uint64_t v;
    switch (e->kind) {
    case TUN_MS:
    case TUN_MS0:
    case TUN_U64:
        if (parse_u64(s, e->min, e->max, &v) != 0) break;
        *u64_of(t, e) = v;
        return 1;
    case TUN_ULONG:
        if (!parse_ulong(s, e->min, e->max, &v)) break;
        *u64_of(t, e) = v;
        return 1;
    case TUN_BOOL: {
        int b = parse_switch(s, e->max);
        if (b < 0) {
            snprintf(why, wl, "not 0/1, off/on, false/true or no/yes");
            return 0;
        }
        *bool_of(t, e) = b;
        return 1;
    }
    case TUN_TEXT:
        if (strlen(s) >= TUN_PATH_MAX) return -ENAMETOOLONG;
        memcpy(text_of(t, e), s, strlen(s) + 1);
        return 1;
    case TUN_CHOICE:
        if (!is_choice(e->unit, s) || strlen(s) >= TUN_CHOICE_MAX) {
            snprintf(why, wl, "not %s", e->unit);
            return 0;
        }
        memcpy(text_of(t, e), s, strlen(s) + 1);
        return 1;
    case TUN_NONE:
    case TUN_OPTION:
        return 1;
    }
    snprintf(why, wl, "not %llu .. %llu", (unsigned long long)e->min, (unsigned long long)e->max);
    return 0;
}

/* "NAME=VALUE (why)" after what err holds, "; " between, "..." when it no longer fits */
static void report(char *err, size_t errlen, const mesh_env_t *e, const char *s, const char *why)
{
    if (!err || !errlen) return;
    size_t used = strlen(err);
    if (used + 4 >= errlen || (used >= 3 && strcmp(err + used - 3, "...") == 0)) return;
    char one[256];
    snprintf(one, sizeof one, "%s%s=%s%.40s%s (%s): ignored", used ? "; " : "", e->name,
             e->flags & ENVF_SECRET ? "(secret)" : "", e->flags & ENVF_SECRET ? "" : s,
             !(e->flags & ENVF_SECRET) && strlen(s) > 40 ? "..." : "", why);
    if (used + strlen(one) < errlen)
        memcpy(err + used, one, strlen(one) + 1);
    else
        snprintf(err + used, errlen - used, "%s", used ? "; ..." : "...");
}

int tunables_load(tunables_t *t, const char *const *envp, char *err, size_t errlen)
{
    if (!envp) envp = (const char *const *)environ;
    if (err && errlen) err[0] = '\0';
    tunables_defaults(t);
    size_t n;
    const mesh_env_t *rows = options_env_all(&n);
    int ignored = 0;
    for (size_t i = 0; i < n && i < TUNABLES_MAX_VARS; i++) {
        const mesh_env_t *e = &rows[i];
        if (e->kind == TUN_NONE || e->kind == TUN_OPTION) continue;
        const char *s = lookup(envp, e->name);
        if (!s || !*s) continue; /* empty: unset, as every call site reads it */
        char why[96] = "";
        int rc = parse(t, e, s, why, sizeof why);
        if (rc < 0) {
            if (err && errlen)
                snprintf(err, errlen, "%s is longer than %d bytes", e->name, TUN_PATH_MAX - 1);
            tunables_defaults(t);
            return rc;
        }
        if (rc == 0) {
            report(err, errlen, e, s, why);
            ignored++;
            continue;
        }
        t->given[i / 8] |= (uint8_t)(1u << (i % 8));
    }
    return ignored;
}

bool tunables_given(const tunables_t *t, const void *field)
{
    size_t n;
    const mesh_env_t *rows = options_env_all(&n);
    uintptr_t f = (uintptr_t)field, base = (uintptr_t)t;
    if (f < base || f >= base + sizeof *t) return false;
    size_t off = (size_t)(f - base);
    for (size_t i = 0; i < n && i < TUNABLES_MAX_VARS; i++)
        if (rows[i].kind != TUN_NONE && rows[i].kind != TUN_OPTION && rows[i].off == off)
            return t->given[i / 8] & (1u << (i % 8));
    return false;
}

void tunables_tp_config(const tunables_t *t, tp_config_t *cfg)
{
    tp_config_default(cfg);
    tunables_t defaults;
    if (!t) {
        tunables_defaults(&defaults);
        t = &defaults;
    }
    cfg->handshake_timeout_ms = t->handshake_ms;
    cfg->idle_timeout_ms = t->quic_idle_ms;
    cfg->keepalive_ms = cfg->idle_timeout_ms / 3;
    cfg->live_ms = t->live_ms;
    cfg->retry_after = (size_t)t->quic_retry_after;
    cfg->cc_algo = tp_cc_algo(t->quic_cc, cfg->cc_algo);
}

void tunables_dl_opts(const tunables_t *t, dl_opts_t *o)
{
    dl_opts_default(o);
    if (!t) return;
    o->min_rate = t->dl_min_rate;
    o->stall_ms = t->dl_stall_ms;
    o->retries = t->dl_retries;
    o->backoff_ms = t->dl_backoff_ms;
}

void tunables_rpc_opts(const tunables_t *t, tunnel_rpc_opts_t *o)
{
    tunnel_rpc_opts_default(o);
    if (!t) return;
    o->connect_ms = t->rpc_connect_ms;
    o->quiet_ms = t->rpc_quiet_ms;
    o->coalesce = t->rpc_coalesce;
}

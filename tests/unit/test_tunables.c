/* Unit tests for the tunables loader (src/node/tunables.h) and the environment rows of the
 * option table that drive it (src/node/options.c:ENV_VARS).
 *
 * The loader replaces a dozen parsers spread over the call sites; moving a call site to its
 * tunable (issue 30, S11) must change nothing. So every row is checked here against the code its
 * call site runs today: util.c:env_ms and options_env_ms are called as they are; the parsers that
 * are static or inline at their call site (admission.c:env_ms0, api_openai.c:api_start,
 * transport_ep.c:tp_config_default, speed.c:node_speed_start, supervisor.c:test_port, relay.c,
 * tunnel_rpc.c, planner.c, identity.c, bin_find.c, ws_client.c, cli_discover.c) are copied below,
 * each named after its origin. WANT gives every variable's kind, range and call site by hand: a
 * new row of the table fails here until it has a field of tunables_t (or is marked TUN_OPTION)
 * and a line in WANT. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "httpd.h"
#include "options.h"
#include "tunables.h"
#include "tunnel_rpc.h"
#include "util.h"

#define MS7D TUN_MS_MAX
#define DAY TUN_MS0_MAX
#define TABLE (-1) /* the call site takes the table's default (options_env_ms / _default) */

/* How today's call site reads the variable (the reference the loader is compared with). */
typedef enum {
    R_OPTION,       /* read with the options (config*.c, bin_find.c, nostr_pool.c, cli_status.c) */
    R_ENV_MS,       /* env_ms(name, def) (options_env_ms when def is TABLE) */
    R_ENV_MS0,      /* admission.c:env_ms0(name, options_env_default(name)) */
    R_SWITCH,       /* S11's one rule of switches (switch_env below); def: the default */
    R_TEXT,         /* identity.c, bin_find.c, ws_client.c: s && *s */
    R_MAX_BUFFERED, /* api_openai.c:api_start -> httpd_budget_t.cap */
    R_RETRY_AFTER,  /* transport_ep.c:tp_config_default */
    R_QUIC_CC,      /* transport_ep.c:tp_config_default */
    R_SPEED,        /* speed.c:node_speed_start */
    R_TEST_PORT,    /* supervisor.c:test_port */
    R_PROBE,        /* nostr_app.c: options_env_ms; mesh.c:mesh_gossip_new: env_ms(name, 0) */
    R_PROGRESS,     /* node_dl.c: options_env_ms; cli_models.c: env_ms(name, tty ? 250 : table) */
    R_TTL,          /* publisher.c: env_ms(name, 2 * options_env_ms(PUBLISH_INTERVAL)) */
    R_COUNT0,       /* a count 0 .. max (0 accepted: download.c's retries since S11) */
} ref_t;

typedef struct {
    const char *name;
    tun_kind_t kind;
    uint64_t min, max;
    ref_t ref;
    long long def; /* R_ENV_MS: the default the call site passes; TABLE: the table's */
    size_t off;    /* the field (not TUN_OPTION) */
} want_t;

#define F(f) offsetof(tunables_t, f)

static const want_t WANT[] = {
    {"MESH_LLM_API_KEY", TUN_OPTION, 0, 0, R_OPTION, 0, 0},
    {"MESH_LLM_AUTO_LISTEN_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(auto_listen_ms)},
    {"MESH_LLM_AUTO_WAIT_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(auto_wait_ms)},
    {"MESH_LLM_BIN_DIR", TUN_OPTION, 0, 0, R_OPTION, 0, 0},
    {"MESH_LLM_CACHE", TUN_TEXT, 0, 0, R_TEXT, 0, F(cache)},
    {"MESH_LLM_CONNECT_WAIT_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(connect_wait_ms)},
    {"MESH_LLM_DEMAND_WINDOW_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(demand_window_ms)},
    {"MESH_LLM_DL_BACKOFF_MS", TUN_MS, 1, MS7D, R_ENV_MS, 500, F(dl_backoff_ms)},
    {"MESH_LLM_DL_FOLLOW_URLS", TUN_BOOL, 0, MS7D, R_SWITCH, 0, F(dl_follow_urls)},
    {"MESH_LLM_DL_MIN_RATE", TUN_U64, 1, MS7D, R_ENV_MS, 1024, F(dl_min_rate)},
    {"MESH_LLM_DL_RETRIES", TUN_U64, 0, MS7D, R_COUNT0, 5, F(dl_retries)},
    {"MESH_LLM_DL_STALL_MS", TUN_MS, 1, MS7D, R_ENV_MS, 60000, F(dl_stall_ms)},
    {"MESH_LLM_EVENTS_MAX_QUEUE", TUN_U64, 1, MS7D, R_ENV_MS, TABLE, F(events_max_queue)},
    {"MESH_LLM_EVENTS_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(events_ms)},
    {"MESH_LLM_FIRST_BYTE_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(first_byte_ms)},
    {"MESH_LLM_FIRST_BYTE_MS_PER_KB", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(first_byte_ms_per_kb)},
    {"MESH_LLM_HANDSHAKE_MS", TUN_MS, 1, MS7D, R_ENV_MS, 5000, F(handshake_ms)},
    {"MESH_LLM_HANG_TIMEOUT_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(hang_timeout_ms)},
    {"MESH_LLM_HEALTH_INTERVAL_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(health_interval_ms)},
    {"MESH_LLM_HEALTH_TIMEOUT_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(health_timeout_ms)},
    {"MESH_LLM_HEARTBEAT_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(heartbeat_ms)},
    {"MESH_LLM_HOME", TUN_TEXT, 0, 0, R_TEXT, 0, F(home)},
    {"MESH_LLM_HTTP_IDLE_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(http_idle_ms)},
    {"MESH_LLM_HTTP_MAX_BUFFERED", TUN_U64, 4096, 1ULL << 40, R_MAX_BUFFERED, 0,
     F(http_max_buffered)},
    {"MESH_LLM_HTTP_READ_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(http_read_ms)},
    {"MESH_LLM_HTTP_WRITE_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(http_write_ms)},
    {"MESH_LLM_IDLE_UNLOAD_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(idle_unload_ms)},
    {"MESH_LLM_JOIN", TUN_OPTION, 0, 0, R_OPTION, 0, 0},
    {"MESH_LLM_LIVE_MS", TUN_MS, 1, MS7D, R_ENV_MS, 2000, F(live_ms)},
    {"MESH_LLM_LOAD_TIMEOUT_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(load_timeout_ms)},
    {"MESH_LLM_MIN_SERVE_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(min_serve_ms)},
    {"MESH_LLM_NOSTR_CA_FILE", TUN_TEXT, 0, 0, R_TEXT, 0, F(nostr_ca_file)},
    {"MESH_LLM_NOSTR_OPEN_TIMEOUT_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(nostr_open_timeout_ms)},
    {"MESH_LLM_NOSTR_RELAYS", TUN_OPTION, 0, 0, R_OPTION, 0, 0},
    {"MESH_LLM_NOSTR_RETRY_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(nostr_retry_ms)},
    {"MESH_LLM_PLAN_WAIT_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(plan_wait_ms)},
    {"MESH_LLM_PORTMAP", TUN_BOOL, 0, MS7D, R_SWITCH, 1, F(portmap)},
    {"MESH_LLM_PREFIX_AFFINITY", TUN_BOOL, 0, MS7D, R_SWITCH, 1, F(prefix_affinity)},
    {"MESH_LLM_PROBE_MS", TUN_MS, 1, MS7D, R_PROBE, 0, F(probe_ms)},
    {"MESH_LLM_PROGRESS_MS", TUN_MS, 1, MS7D, R_PROGRESS, 0, F(progress_ms)},
    {"MESH_LLM_PUBLISH_INTERVAL_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(publish_interval_ms)},
    {"MESH_LLM_PUBLISH_TTL_MS", TUN_MS, 1, MS7D, R_TTL, 0, F(publish_ttl_ms)},
    {"MESH_LLM_QUEUE_WAIT_MS", TUN_MS0, 0, DAY, R_ENV_MS0, 0, F(queue_wait_ms)},
    {"MESH_LLM_QUIC_CC", TUN_CHOICE, 0, 0, R_QUIC_CC, 0, F(quic_cc)},
    {"MESH_LLM_QUIC_IDLE_MS", TUN_MS, 1, MS7D, R_ENV_MS, 30000, F(quic_idle_ms)},
    {"MESH_LLM_QUIC_RETRY_AFTER", TUN_U64, 0, 64, R_RETRY_AFTER, 0, F(quic_retry_after)},
    {"MESH_LLM_REBALANCE_GAIN_PCT", TUN_U64, 0, 1000, R_COUNT0, 20, F(rebalance_gain_pct)},
    {"MESH_LLM_REBALANCE_TICKS", TUN_U64, 0, 1000, R_COUNT0, 3, F(rebalance_ticks)},
    {"MESH_LLM_REBALANCE_TICK_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(rebalance_tick_ms)},
    {"MESH_LLM_RELAY_RATE", TUN_U64, 0, MS7D, R_COUNT0, 16777216, F(relay_rate)},
    {"MESH_LLM_RETRY_DIAL_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(retry_dial_ms)},
    {"MESH_LLM_ROUTE_REFRESH_MS", TUN_MS, 1, MS7D, R_ENV_MS, TABLE, F(route_refresh_ms)},
    {"MESH_LLM_RPC_COALESCE", TUN_BOOL, 0, MS7D, R_SWITCH, 1, F(rpc_coalesce)},
    {"MESH_LLM_RPC_CONNECT_MS", TUN_MS, 1, MS7D, R_ENV_MS, 5000, F(rpc_connect_ms)},
    {"MESH_LLM_RPC_QUIET_MS", TUN_MS, 1, MS7D, R_ENV_MS, TUNNEL_RPC_QUIET_MS, F(rpc_quiet_ms)},
    {"MESH_LLM_SPEED_MFLOPS", TUN_ULONG, 0, 100000000, R_SPEED, 0, F(speed_mflops)},
    {"MESH_LLM_SWITCH_FAIR_MS", TUN_MS0, 0, DAY, R_ENV_MS0, 0, F(switch_fair_ms)},
    {"MESH_LLM_TEST_CHILD_PORT", TUN_U64, 1, 65535, R_TEST_PORT, 0, F(test_child_port)},
    {"MESH_LLM_TURN_PASSWORD", TUN_OPTION, 0, 0, R_OPTION, 0, 0},
    {"MESH_LLM_VERBOSE", TUN_BOOL, 0, MS7D, R_SWITCH, 0, F(verbose)},
};
#define N_WANT (sizeof WANT / sizeof WANT[0])

static const want_t *want_of(const char *name)
{
    for (size_t i = 0; i < N_WANT; i++)
        if (strcmp(WANT[i].name, name) == 0) return &WANT[i];
    return NULL;
}

static size_t size_of_kind(tun_kind_t k)
{
    switch (k) {
    case TUN_MS:
    case TUN_MS0:
    case TUN_U64:
    case TUN_ULONG:
        return sizeof(uint64_t);
    case TUN_BOOL:
        return sizeof(bool);
    case TUN_TEXT:
        return TUN_PATH_MAX;
    case TUN_CHOICE:
        return TUN_CHOICE_MAX;
    default:
        return 0;
    }
}

static uint64_t u64_at(const tunables_t *t, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)t + off, sizeof v);
    return v;
}

static bool bool_at(const tunables_t *t, size_t off)
{
    return *(const bool *)((const char *)t + off);
}

static const char *text_at(const tunables_t *t, size_t off)
{
    return (const char *)t + off;
}

/* ---- today's parsers, copied from their call sites ---- */

/* admission.c:env_ms0 */
static uint64_t admission_env_ms0(const char *name, uint64_t def)
{
    uint64_t v;
    const char *s = getenv(name);
    return s && parse_u64(s, 0, 86400000ULL, &v) == 0 ? v : def;
}

/* api_openai.c:api_start, then the httpd_budget_t cap (0: HTTPD_DEFAULT_BUFFER_CAP) */
static uint64_t api_start_buffer_cap(void)
{
    uint64_t cap;
    const char *ev = getenv("MESH_LLM_HTTP_MAX_BUFFERED");
    size_t bytes = ev && parse_u64(ev, 4096, 1ull << 40, &cap) == 0 ? (size_t)cap : 0;
    return bytes ? bytes : HTTPD_DEFAULT_BUFFER_CAP;
}

/* transport_ep.c:tp_config_default (MAX_UNADMITTED of transport_int.h is 64) */
static uint64_t tp_retry_after(void)
{
    uint64_t v;
    const char *e = getenv("MESH_LLM_QUIC_RETRY_AFTER");
    return e && parse_u64(e, 0, 64, &v) == 0 ? (size_t)v : 16;
}

/* transport_ep.c:tp_config_default, the algorithm by name */
static const char *tp_cc(void)
{
    static const char *const ccs[] = {"reno", "cubic", "bbr", "bbr2"};
    const char *algo = "bbr2";
    const char *e = getenv("MESH_LLM_QUIC_CC");
    for (size_t i = 0; e && i < sizeof ccs / sizeof ccs[0]; i++)
        if (strcmp(e, ccs[i]) == 0) algo = ccs[i];
    return algo;
}

/* speed.c:node_speed_start: true and *mflops when the variable decides (else: measured) */
static bool speed_env(uint64_t *mflops)
{
    const char *e = getenv("MESH_LLM_SPEED_MFLOPS");
    if (e && *e) {
        char *end;
        unsigned long v = strtoul(e, &end, 10);
        if (*end == '\0' && v <= 100000000UL) {
            *mflops = (uint32_t)v;
            return true;
        }
    }
    return false;
}

/* supervisor.c:test_port (its first call; 0: none) */
static uint64_t supervisor_test_port(void)
{
    uint64_t v;
    const char *s = getenv("MESH_LLM_TEST_CHILD_PORT");
    if (!s || parse_u64(s, 1, 65535, &v) != 0) return 0;
    return v;
}

/* The rule of every switch since S11 (before: DL_FOLLOW_URLS took a number only,
 * PREFIX_AFFINITY and RPC_COALESCE were on unless exactly "0" — "off" left them on — and
 * VERBOSE was on when set at all — "0" turned debug on). -1: unset or not accepted. */
static int switch_env(const char *name)
{
    static const char *const words[][2] = {{"0", "1"},    {"off", "on"},     {"OFF", "ON"},
                                           {"Off", "On"}, {"false", "true"}, {"FALSE", "TRUE"},
                                           {"no", "yes"}, {"No", "Yes"}};
    const char *s = getenv(name);
    if (!s || !*s) return -1;
    uint64_t v;
    if (parse_u64(s, 0, MS7D, &v) == 0) return v != 0;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        for (int b = 0; b < 2; b++)
            if (strcmp(s, words[i][b]) == 0) return b;
    return -1;
}

/* identity.c:identity_home, bin_find.c:bin_dirs, ws_client.c:tls_setup: used when non-empty */
static const char *text_env(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : "";
}

/* The call site's reading of w's variable (in the process environment) against t. */
static void check_row(const want_t *w, const tunables_t *t, const char *value)
{
    const char *n = w->name;
    const void *field = (const char *)t + w->off;
    uint64_t got = 0, want = 0, v = 0;
    bool given = tunables_given(t, field);
#define EXPECT_U(a, b)                                                                             \
    do {                                                                                           \
        if ((a) != (b))                                                                            \
            fail_msg("%s=%s: the tunable gives %llu, the call site %llu", n,                       \
                     value ? value : "(unset)", (unsigned long long)(a), (unsigned long long)(b)); \
    } while (0)
    switch (w->ref) {
    case R_OPTION:
        return;
    case R_ENV_MS:
        want = w->def == TABLE ? options_env_ms(n) : env_ms(n, (uint64_t)w->def);
        EXPECT_U(u64_at(t, w->off), want);
        EXPECT_U(given, env_ms(n, 0) != 0); /* accepted values are >= 1 */
        return;
    case R_ENV_MS0:
        EXPECT_U(u64_at(t, w->off), admission_env_ms0(n, options_env_default(n)));
        EXPECT_U(given, admission_env_ms0(n, UINT64_MAX) != UINT64_MAX);
        return;
    case R_SWITCH: {
        int b = switch_env(n);
        EXPECT_U(given, b >= 0);
        EXPECT_U(bool_at(t, w->off), b >= 0 ? (bool)b : w->def != 0);
        return;
    }
    case R_TEXT:
        if (strcmp(text_at(t, w->off), text_env(n)) != 0)
            fail_msg("%s: the tunable gives '%s', the call site '%s'", n, text_at(t, w->off),
                     text_env(n));
        EXPECT_U(given, *text_env(n) != '\0');
        return;
    case R_MAX_BUFFERED:
        EXPECT_U(u64_at(t, w->off), api_start_buffer_cap());
        return;
    case R_RETRY_AFTER:
        EXPECT_U(u64_at(t, w->off), tp_retry_after());
        return;
    case R_COUNT0: {
        const char *e = getenv(n);
        bool ok = e && parse_u64(e, 0, w->max, &v) == 0;
        EXPECT_U(given, ok);
        EXPECT_U(u64_at(t, w->off), ok ? v : (uint64_t)w->def);
        return;
    }
    case R_QUIC_CC:
        if (strcmp(text_at(t, w->off), tp_cc()) != 0)
            fail_msg("%s=%s: the tunable gives '%s', the call site '%s'", n,
                     value ? value : "(unset)", text_at(t, w->off), tp_cc());
        return;
    case R_SPEED: {
        bool set = speed_env(&v);
        EXPECT_U(given, set);
        EXPECT_U(u64_at(t, w->off), set ? v : 0);
        return;
    }
    case R_TEST_PORT:
        EXPECT_U(u64_at(t, w->off), supervisor_test_port());
        return;
    case R_PROBE: /* nostr_app.c's timeout; mesh.c sets gossip's probe only when given */
        EXPECT_U(u64_at(t, w->off), options_env_ms(n));
        got = given ? u64_at(t, w->off) : 0;
        EXPECT_U(got, env_ms(n, 0));
        return;
    case R_PROGRESS: /* node_dl.c; cli_models.c: 250 on a terminal unless given */
        EXPECT_U(u64_at(t, w->off), options_env_ms(n));
        got = given ? u64_at(t, w->off) : 250;
        EXPECT_U(got, env_ms(n, 250));
        return;
    case R_TTL: { /* publisher.c: 0 is "twice the interval" */
        uint64_t interval = u64_at(t, offsetof(tunables_t, publish_interval_ms));
        got = u64_at(t, w->off) ? u64_at(t, w->off) : 2 * interval;
        want = env_ms(n, 2 * options_env_ms("MESH_LLM_PUBLISH_INTERVAL_MS"));
        EXPECT_U(got, want);
        return;
    }
    }
#undef EXPECT_U
}

static int clear_env(void **state)
{
    (void)state;
    size_t n;
    const mesh_env_t *rows = options_env_all(&n);
    for (size_t i = 0; i < n; i++)
        unsetenv(rows[i].name);
    return 0;
}

/* ---- the table ---- */

/* Every row has a kind; it has a field of tunables_t or stands for an option; kinds and ranges
 * are those of WANT; fields do not overlap. */
static void test_every_row_has_a_tunable(void **state)
{
    (void)state;
    size_t n, n_opts;
    const mesh_env_t *rows = options_env_all(&n);
    const mesh_option_t *opts = options_all(&n_opts);
    assert_true(n <= TUNABLES_MAX_VARS);
    assert_int_equal(n, N_WANT);
    for (size_t i = 0; i < n; i++) {
        const mesh_env_t *e = &rows[i];
        const want_t *w = want_of(e->name);
        if (!w) fail_msg("%s: not in WANT of test_tunables.c (its call site's parser)", e->name);
        if (e->kind == TUN_NONE) fail_msg("%s: no tunable (T_MS(field), ... or T_OPTION)", e->name);
        if (e->kind != w->kind) fail_msg("%s: kind %d, want %d", e->name, e->kind, w->kind);
        bool is_option = false;
        for (size_t j = 0; j < n_opts; j++)
            if (opts[j].env && strcmp(opts[j].env, e->name) == 0) is_option = true;
        if (is_option != (e->kind == TUN_OPTION))
            fail_msg("%s: TUN_OPTION is for (and only for) the variable of an option", e->name);
        if (e->kind == TUN_OPTION) continue;
        if (e->off != w->off) fail_msg("%s: not its field of tunables_t", e->name);
        if (e->off + size_of_kind(e->kind) > offsetof(tunables_t, given))
            fail_msg("%s: its field is outside tunables_t", e->name);
        for (size_t j = 0; j < i; j++) {
            const mesh_env_t *o = &rows[j];
            if (o->kind == TUN_OPTION) continue;
            if (e->off < o->off + size_of_kind(o->kind) && o->off < e->off + size_of_kind(e->kind))
                fail_msg("%s and %s share a field", e->name, o->name);
        }
        switch (e->kind) {
        case TUN_MS:
            assert_true(e->min == 1 && e->max == TUN_MS_MAX); /* util.c:env_ms */
            break;
        case TUN_MS0:
            assert_true(e->min == 0 && e->max == TUN_MS0_MAX); /* admission.c:env_ms0 */
            break;
        case TUN_U64:
        case TUN_ULONG:
        case TUN_BOOL:
            if (e->min != w->min || e->max != w->max)
                fail_msg("%s: range %llu..%llu, want %llu..%llu", e->name,
                         (unsigned long long)e->min, (unsigned long long)e->max,
                         (unsigned long long)w->min, (unsigned long long)w->max);
            break;
        case TUN_CHOICE: {
            /* its default is one of its words, and each word fits */
            bool found = false;
            const char *p = e->unit;
            while (*p) {
                size_t len = strcspn(p, "|");
                assert_true(len > 0 && len < TUN_CHOICE_MAX);
                if (e->def && strlen(e->def) == len && strncmp(p, e->def, len) == 0) found = true;
                p += len + (p[len] == '|');
            }
            if (!found) fail_msg("%s: default '%s' is not one of %s", e->name, e->def, e->unit);
            break;
        }
        default:
            break;
        }
        /* a number's default is in its range (else only the environment could give it), except
         * 0 where the call site computes the default (the table's def text says how) */
        if ((e->kind == TUN_MS || e->kind == TUN_MS0 || e->kind == TUN_U64 ||
             e->kind == TUN_ULONG) &&
            !(e->value == 0 && e->def) && (e->value < e->min || e->value > e->max))
            fail_msg("%s: default %llu is outside %llu..%llu", e->name,
                     (unsigned long long)e->value, (unsigned long long)e->min,
                     (unsigned long long)e->max);
    }
}

/* ---- the loader against today's parsers ---- */

static const char *const CORPUS[] = {
    "",
    "0",
    "1",
    "2",
    "5",
    "00",
    "007",
    "16",
    "64",
    "65",
    "250",
    "1000",
    "4095",
    "4096",
    "65535",
    "65536",
    "86400000",
    "86400001",
    "100000000",
    "100000001",
    "604800000",
    "604800001",
    "1099511627776",
    "1099511627777",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
    " 5",
    "5 ",
    "+5",
    "-0",
    "-1",
    "-5",
    "5x",
    "x",
    "1.5",
    "1e3",
    "0x10",
    "yes",
    "no",
    "true",
    "on",
    "reno",
    "cubic",
    "bbr",
    "bbr2",
    "BBR2",
    "bbr3",
    "cubic ",
    "/tmp/a path",
    "~/x",
    "\t1",
};

/* the row's own edges: min, max, min - 1, max + 1 */
static size_t edges(const mesh_env_t *e, char out[4][32])
{
    size_t n = 0;
    if (e->min == 0 && e->max == 0) return 0;
    snprintf(out[n++], 32, "%llu", (unsigned long long)e->min);
    snprintf(out[n++], 32, "%llu", (unsigned long long)e->max);
    if (e->min > 0) snprintf(out[n++], 32, "%llu", (unsigned long long)e->min - 1);
    if (e->max < UINT64_MAX) snprintf(out[n++], 32, "%llu", (unsigned long long)e->max + 1);
    return n;
}

static void load_one(const mesh_env_t *e, const char *value)
{
    static tunables_t t, from_environ;
    char entry[4200], err[512];
    const char *envp[] = {entry, NULL};
    if (value) {
        snprintf(entry, sizeof entry, "%s=%s", e->name, value);
        setenv(e->name, value, 1);
    } else {
        envp[0] = NULL;
        unsetenv(e->name);
    }
    int rc = tunables_load(&t, envp, err, sizeof err);
    if (rc < 0) fail_msg("%s=%s: %s", e->name, value, err);
    check_row(want_of(e->name), &t, value);
    /* NULL: the process environment, the same */
    assert_int_equal(tunables_load(&from_environ, NULL, NULL, 0), rc);
    assert_memory_equal(&t, &from_environ, sizeof t);
    /* every other field is at its default */
    tunables_t d;
    tunables_defaults(&d);
    for (size_t i = 0; i < N_WANT; i++) {
        const want_t *w = &WANT[i];
        if (w->kind == TUN_OPTION || strcmp(w->name, e->name) == 0) continue;
        if (memcmp((char *)&t + w->off, (char *)&d + w->off, size_of_kind(w->kind)) != 0)
            fail_msg("%s=%s changed %s", e->name, value, w->name);
    }
    unsetenv(e->name);
}

/* Every row, unset and with every value of the corpus and its edges: the tunable is what the
 * call site reads today. */
static void test_rows_match_todays_parsers(void **state)
{
    (void)state;
    size_t n;
    const mesh_env_t *rows = options_env_all(&n);
    for (size_t i = 0; i < n; i++) {
        const mesh_env_t *e = &rows[i];
        if (e->kind == TUN_OPTION) continue;
        load_one(e, NULL);
        for (size_t j = 0; j < sizeof CORPUS / sizeof CORPUS[0]; j++)
            load_one(e, CORPUS[j]);
        char edge[4][32];
        size_t ne = edges(e, edge);
        for (size_t j = 0; j < ne; j++)
            load_one(e, edge[j]);
    }
}

/* The same per kind, spelled out: default, min, max, junk and 0, and what is reported. */
static void test_kinds(void **state)
{
    (void)state;
    static const struct {
        const char *name, *value;
        uint64_t u;       /* a number's or a bool's value */
        const char *text; /* a text's or a choice's (else NULL) */
        bool given;       /* tunables_given */
        int ignored;      /* tunables_load's count */
    } cases[] = {
        /* TUN_MS: 1 .. 7 days, else the default */
        {"MESH_LLM_HEARTBEAT_MS", NULL, 60000, NULL, false, 0},
        {"MESH_LLM_HEARTBEAT_MS", "", 60000, NULL, false, 0},
        {"MESH_LLM_HEARTBEAT_MS", "1", 1, NULL, true, 0},
        {"MESH_LLM_HEARTBEAT_MS", "604800000", 604800000, NULL, true, 0},
        {"MESH_LLM_HEARTBEAT_MS", "604800001", 60000, NULL, false, 1},
        {"MESH_LLM_HEARTBEAT_MS", "0", 60000, NULL, false, 1},
        {"MESH_LLM_HEARTBEAT_MS", "12x", 60000, NULL, false, 1},
        {"MESH_LLM_HEARTBEAT_MS", " 12", 60000, NULL, false, 1},
        {"MESH_LLM_HEARTBEAT_MS", "0012", 12, NULL, true, 0},
        {"MESH_LLM_LOAD_TIMEOUT_MS", NULL, 0, NULL, false, 0}, /* 0: by the model's size */
        {"MESH_LLM_LOAD_TIMEOUT_MS", "0", 0, NULL, false, 1},
        {"MESH_LLM_PUBLISH_TTL_MS", NULL, 0, NULL, false, 0}, /* 0: twice the interval */
        /* TUN_MS0: 0 .. 1 day */
        {"MESH_LLM_QUEUE_WAIT_MS", NULL, 600000, NULL, false, 0},
        {"MESH_LLM_QUEUE_WAIT_MS", "0", 0, NULL, true, 0},
        {"MESH_LLM_QUEUE_WAIT_MS", "86400000", 86400000, NULL, true, 0},
        {"MESH_LLM_QUEUE_WAIT_MS", "86400001", 600000, NULL, false, 1},
        {"MESH_LLM_SWITCH_FAIR_MS", NULL, 10000, NULL, false, 0},
        {"MESH_LLM_SWITCH_FAIR_MS", "0", 0, NULL, true, 0},
        {"MESH_LLM_SWITCH_FAIR_MS", "-1", 10000, NULL, false, 1},
        /* TUN_U64 */
        {"MESH_LLM_HTTP_MAX_BUFFERED", NULL, 256u << 20, NULL, false, 0},
        {"MESH_LLM_HTTP_MAX_BUFFERED", "4095", 256u << 20, NULL, false, 1},
        {"MESH_LLM_HTTP_MAX_BUFFERED", "4096", 4096, NULL, true, 0},
        {"MESH_LLM_HTTP_MAX_BUFFERED", "1099511627776", 1ULL << 40, NULL, true, 0},
        {"MESH_LLM_HTTP_MAX_BUFFERED", "1099511627777", 256u << 20, NULL, false, 1},
        {"MESH_LLM_HTTP_MAX_BUFFERED", "0", 256u << 20, NULL, false, 1},
        {"MESH_LLM_QUIC_RETRY_AFTER", NULL, 16, NULL, false, 0},
        {"MESH_LLM_QUIC_RETRY_AFTER", "0", 0, NULL, true, 0},
        {"MESH_LLM_QUIC_RETRY_AFTER", "64", 64, NULL, true, 0},
        {"MESH_LLM_QUIC_RETRY_AFTER", "65", 16, NULL, false, 1},
        {"MESH_LLM_TEST_CHILD_PORT", NULL, 0, NULL, false, 0},
        {"MESH_LLM_TEST_CHILD_PORT", "0", 0, NULL, false, 1},
        {"MESH_LLM_TEST_CHILD_PORT", "1", 1, NULL, true, 0},
        {"MESH_LLM_TEST_CHILD_PORT", "65535", 65535, NULL, true, 0},
        {"MESH_LLM_TEST_CHILD_PORT", "65536", 0, NULL, false, 1},
        {"MESH_LLM_DL_RETRIES", "0", 0, NULL, true, 0}, /* 0: no retry (S11; env_ms refused it) */
        {"MESH_LLM_DL_RETRIES", "604800000", 604800000, NULL, true, 0},
        /* TUN_ULONG: strtoul's syntax */
        {"MESH_LLM_SPEED_MFLOPS", NULL, 0, NULL, false, 0},
        {"MESH_LLM_SPEED_MFLOPS", "", 0, NULL, false, 0},
        {"MESH_LLM_SPEED_MFLOPS", "0", 0, NULL, true, 0}, /* given: none announced */
        {"MESH_LLM_SPEED_MFLOPS", "100000000", 100000000, NULL, true, 0},
        {"MESH_LLM_SPEED_MFLOPS", "100000001", 0, NULL, false, 1},
        {"MESH_LLM_SPEED_MFLOPS", " 42", 42, NULL, true, 0},
        {"MESH_LLM_SPEED_MFLOPS", "+42", 42, NULL, true, 0},
        {"MESH_LLM_SPEED_MFLOPS", "-0", 0, NULL, true, 0},
        {"MESH_LLM_SPEED_MFLOPS", "-1", 0, NULL, false, 1},
        {"MESH_LLM_SPEED_MFLOPS", "42 ", 0, NULL, false, 1},
        {"MESH_LLM_SPEED_MFLOPS", "fast", 0, NULL, false, 1},
        /* TUN_BOOL, every switch one rule: 0 .. max (true when not 0), off/on, false/true,
         * no/yes in any case; empty is unset; anything else keeps the default, reported */
        {"MESH_LLM_DL_FOLLOW_URLS", NULL, false, NULL, false, 0},
        {"MESH_LLM_DL_FOLLOW_URLS", "0", false, NULL, true, 0},
        {"MESH_LLM_DL_FOLLOW_URLS", "1", true, NULL, true, 0},
        {"MESH_LLM_DL_FOLLOW_URLS", "2", true, NULL, true, 0},
        {"MESH_LLM_DL_FOLLOW_URLS", "604800001", false, NULL, false, 1},
        {"MESH_LLM_DL_FOLLOW_URLS", "yes", true, NULL, true, 0}, /* was ignored */
        {"MESH_LLM_DL_FOLLOW_URLS", "maybe", false, NULL, false, 1},
        {"MESH_LLM_PREFIX_AFFINITY", NULL, true, NULL, false, 0},
        {"MESH_LLM_PREFIX_AFFINITY", "0", false, NULL, true, 0},
        {"MESH_LLM_PREFIX_AFFINITY", "1", true, NULL, true, 0},
        {"MESH_LLM_PREFIX_AFFINITY", "", true, NULL, false, 0},
        {"MESH_LLM_PREFIX_AFFINITY", "00", false, NULL, true, 0},  /* was on */
        {"MESH_LLM_PREFIX_AFFINITY", "off", false, NULL, true, 0}, /* was on */
        {"MESH_LLM_PREFIX_AFFINITY", "OFF", false, NULL, true, 0},
        {"MESH_LLM_PREFIX_AFFINITY", "maybe", true, NULL, false, 1},
        {"MESH_LLM_RPC_COALESCE", "0", false, NULL, true, 0},
        {"MESH_LLM_RPC_COALESCE", "false", false, NULL, true, 0}, /* was on */
        {"MESH_LLM_RPC_COALESCE", "No", false, NULL, true, 0},
        {"MESH_LLM_VERBOSE", NULL, false, NULL, false, 0},
        {"MESH_LLM_VERBOSE", "", false, NULL, false, 0}, /* was on (set) */
        {"MESH_LLM_VERBOSE", "0", false, NULL, true, 0}, /* was on: 0 turned debug on */
        {"MESH_LLM_VERBOSE", "1", true, NULL, true, 0},
        {"MESH_LLM_VERBOSE", "yes", true, NULL, true, 0},
        {"MESH_LLM_VERBOSE", "loud", false, NULL, false, 1}, /* was on */
        /* TUN_TEXT: as is; empty is unset */
        {"MESH_LLM_HOME", NULL, 0, "", false, 0},
        {"MESH_LLM_HOME", "", 0, "", false, 0},
        {"MESH_LLM_HOME", "/srv/mesh home", 0, "/srv/mesh home", true, 0},
        {"MESH_LLM_NOSTR_CA_FILE", "ca.pem", 0, "ca.pem", true, 0},
        /* TUN_CHOICE: one of the unit's words, case and all */
        {"MESH_LLM_QUIC_CC", NULL, 0, "bbr2", false, 0},
        {"MESH_LLM_QUIC_CC", "cubic", 0, "cubic", true, 0},
        {"MESH_LLM_QUIC_CC", "reno", 0, "reno", true, 0},
        {"MESH_LLM_QUIC_CC", "CUBIC", 0, "bbr2", false, 1},
        {"MESH_LLM_QUIC_CC", "bbr2|", 0, "bbr2", false, 1},
        {"MESH_LLM_QUIC_CC", "", 0, "bbr2", false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mesh_env_t *e = options_env(cases[i].name);
        assert_non_null(e);
        char entry[256], err[256];
        snprintf(entry, sizeof entry, "%s=%s", cases[i].name, cases[i].value ? cases[i].value : "");
        const char *envp[] = {cases[i].value ? entry : NULL, NULL};
        tunables_t t;
        int rc = tunables_load(&t, envp, err, sizeof err);
        const char *what = cases[i].value ? cases[i].value : "(unset)";
        if (rc != cases[i].ignored)
            fail_msg("%s=%s: %d ignored, want %d (%s)", cases[i].name, what, rc, cases[i].ignored,
                     err);
        if (rc && !strstr(err, cases[i].name))
            fail_msg("%s=%s: the report '%s' does not name it", cases[i].name, what, err);
        if (!rc && *err)
            fail_msg("%s=%s: a report '%s' with nothing ignored", cases[i].name, what, err);
        const void *field = (const char *)&t + e->off;
        if (tunables_given(&t, field) != cases[i].given)
            fail_msg("%s=%s: given %d, want %d", cases[i].name, what, !cases[i].given,
                     cases[i].given);
        uint64_t u = 0;
        switch (e->kind) {
        case TUN_BOOL:
            u = bool_at(&t, e->off);
            break;
        case TUN_TEXT:
        case TUN_CHOICE:
            assert_non_null(cases[i].text);
            if (strcmp(text_at(&t, e->off), cases[i].text) != 0)
                fail_msg("%s=%s: '%s', want '%s'", cases[i].name, what, text_at(&t, e->off),
                         cases[i].text);
            continue;
        default:
            u = u64_at(&t, e->off);
            break;
        }
        if (u != cases[i].u)
            fail_msg("%s=%s: %llu, want %llu", cases[i].name, what, (unsigned long long)u,
                     (unsigned long long)cases[i].u);
    }
}

/* ---- the loader's own rules ---- */

static void test_defaults(void **state)
{
    (void)state;
    tunables_t a, b;
    const char *empty[] = {NULL};
    char err[64] = "x";
    tunables_defaults(&a);
    assert_int_equal(tunables_load(&b, empty, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_memory_equal(&a, &b, sizeof a);
    for (size_t i = 0; i < sizeof a.given; i++)
        assert_int_equal(a.given[i], 0);
    assert_int_equal(a.heartbeat_ms, 60000);
    assert_true(a.prefix_affinity && a.rpc_coalesce && !a.verbose && !a.dl_follow_urls);
    assert_string_equal(a.quic_cc, "bbr2");
    assert_string_equal(a.home, "");
    assert_false(tunables_given(&a, &a.heartbeat_ms));
    assert_false(tunables_given(&a, &a.given)); /* not a tunable */
}

/* getenv's rules over envp: the first NAME= wins, a longer name or no '=' is another entry; the
 * options' own variables are left to the options */
static void test_envp(void **state)
{
    (void)state;
    const char *envp[] = {"MESH_LLM_HEARTBEAT_MSX=7",
                          "MESH_LLM_HEARTBEAT_MS",
                          "MESH_LLM_HEARTBEAT_MS=1234",
                          "MESH_LLM_HEARTBEAT_MS=99",
                          "XMESH_LLM_LIVE_MS=5",
                          "mesh_llm_live_ms=5",
                          "MESH_LLM_API_KEY=k",
                          "MESH_LLM_HOME=/h",
                          "MESH_LLM_HOME=/other",
                          "PATH=/bin",
                          NULL};
    tunables_t t;
    assert_int_equal(tunables_load(&t, envp, NULL, 0), 0);
    assert_int_equal(t.heartbeat_ms, 1234);
    assert_int_equal(t.live_ms, 2000);
    assert_string_equal(t.home, "/h");
    assert_true(tunables_given(&t, &t.heartbeat_ms));
    assert_true(tunables_given(&t, &t.home));
    assert_false(tunables_given(&t, &t.live_ms));
    /* the process environment is not read when envp is given */
    setenv("MESH_LLM_LIVE_MS", "77", 1);
    assert_int_equal(tunables_load(&t, envp, NULL, 0), 0);
    assert_int_equal(t.live_ms, 2000);
    assert_int_equal(tunables_load(&t, NULL, NULL, 0), 0);
    assert_int_equal(t.live_ms, 77);
    unsetenv("MESH_LLM_LIVE_MS");
}

/* what was ignored is reported, each value once, in table order, cut with "..." when err is
 * short; a text longer than its field fails the load */
static void test_report(void **state)
{
    (void)state;
    const char *envp[] = {"MESH_LLM_LIVE_MS=soon", "MESH_LLM_HEARTBEAT_MS=0",
                          "MESH_LLM_QUIC_CC=vegas", "MESH_LLM_PROBE_MS=9", NULL};
    tunables_t t;
    char err[512];
    assert_int_equal(tunables_load(&t, envp, err, sizeof err), 3);
    assert_string_equal(err, "MESH_LLM_HEARTBEAT_MS=0 (not 1 .. 604800000): ignored; "
                             "MESH_LLM_LIVE_MS=soon (not 1 .. 604800000): ignored; "
                             "MESH_LLM_QUIC_CC=vegas (not reno|cubic|bbr|bbr2): ignored");
    assert_int_equal(t.probe_ms, 9);
    char small[60];
    assert_int_equal(tunables_load(&t, envp, small, sizeof small), 3);
    assert_string_equal(small, "MESH_LLM_HEARTBEAT_MS=0 (not 1 .. 604800000): ignored; ...");
    char tiny[8];
    assert_int_equal(tunables_load(&t, envp, tiny, sizeof tiny), 3);
    assert_true(strlen(tiny) < sizeof tiny);
    /* a long value is shown cut */
    static char entry[200];
    int m = snprintf(entry, sizeof entry, "MESH_LLM_LIVE_MS=");
    memset(entry + m, '9', 120); /* far past 2^64 */
    entry[m + 120] = '\0';
    const char *longv[] = {entry, NULL};
    assert_int_equal(tunables_load(&t, longv, err, sizeof err), 1);
    assert_non_null(strstr(err, "... (not 1 .. 604800000): ignored"));
    assert_true(strlen(err) < 120);

    /* TUN_PATH_MAX - 1 bytes fit; one more fails, and t holds the defaults */
    static char home[TUN_PATH_MAX + 32];
    int n = snprintf(home, sizeof home, "MESH_LLM_HOME=");
    memset(home + n, 'h', TUN_PATH_MAX - 1);
    home[n + TUN_PATH_MAX - 1] = '\0';
    const char *fits[] = {"MESH_LLM_LIVE_MS=5", home, NULL};
    assert_int_equal(tunables_load(&t, fits, err, sizeof err), 0);
    assert_int_equal(strlen(t.home), TUN_PATH_MAX - 1);
    home[n + TUN_PATH_MAX - 1] = 'h';
    home[n + TUN_PATH_MAX] = '\0';
    assert_int_equal(tunables_load(&t, fits, err, sizeof err), -ENAMETOOLONG);
    assert_string_equal(err, "MESH_LLM_HOME is longer than 4095 bytes");
    tunables_t d;
    tunables_defaults(&d);
    assert_memory_equal(&t, &d, sizeof t);
}

/* the values S11's call sites derive: gossip's probe only when given, cli_models' 250 ms on a
 * terminal unless given, the listing's expiry twice the interval unless given */
static void test_derived(void **state)
{
    (void)state;
    tunables_t t;
    const char *none[] = {NULL};
    assert_int_equal(tunables_load(&t, none, NULL, 0), 0);
    assert_false(tunables_given(&t, &t.probe_ms));
    assert_int_equal(t.probe_ms, 5000);
    assert_false(tunables_given(&t, &t.progress_ms));
    assert_int_equal(t.progress_ms, 3000);
    assert_int_equal(t.publish_ttl_ms, 0);
    const char *some[] = {"MESH_LLM_PUBLISH_INTERVAL_MS=1000", "MESH_LLM_PROBE_MS=300",
                          "MESH_LLM_PROGRESS_MS=3000", NULL};
    assert_int_equal(tunables_load(&t, some, NULL, 0), 0);
    assert_true(tunables_given(&t, &t.probe_ms));
    assert_true(tunables_given(&t, &t.progress_ms)); /* the default's value, given: no 250 */
    assert_int_equal(t.publish_interval_ms, 1000);
    assert_int_equal(t.publish_ttl_ms, 0);
    /* a row-by-row check of the interval and the expiry together */
    const want_t *ttl = want_of("MESH_LLM_PUBLISH_TTL_MS");
    setenv("MESH_LLM_PUBLISH_INTERVAL_MS", "1000", 1);
    const char *both[] = {"MESH_LLM_PUBLISH_INTERVAL_MS=1000", "MESH_LLM_PUBLISH_TTL_MS=x", NULL};
    setenv("MESH_LLM_PUBLISH_TTL_MS", "x", 1);
    assert_int_equal(tunables_load(&t, both, NULL, 0), 1);
    check_row(ttl, &t, "x");
    setenv("MESH_LLM_PUBLISH_TTL_MS", "5", 1);
    both[1] = "MESH_LLM_PUBLISH_TTL_MS=5";
    assert_int_equal(tunables_load(&t, both, NULL, 0), 0);
    check_row(ttl, &t, "5");
    assert_int_equal(t.publish_ttl_ms, 5);
    unsetenv("MESH_LLM_PUBLISH_TTL_MS");
    unsetenv("MESH_LLM_PUBLISH_INTERVAL_MS");
}

/* The net layer reads no environment: tunables_tp_config and tunables_dl_opts carry the values
 * to it; unset, they are the net layer's own defaults. MESH_LLM_DL_RETRIES=0 means no retry
 * (before S11 env_ms refused 0 and 5 retries followed). */
static void test_net_opts(void **state)
{
    (void)state;
    tunables_t t;
    const char *none[] = {NULL};
    assert_int_equal(tunables_load(&t, none, NULL, 0), 0);
    tp_config_t got, def;
    tunables_tp_config(&t, &got);
    tp_config_default(&def);
    assert_memory_equal(&got, &def, sizeof got);
    tunables_tp_config(NULL, &got);
    assert_memory_equal(&got, &def, sizeof got);
    dl_opts_t o, dd;
    tunables_dl_opts(&t, &o);
    dl_opts_default(&dd);
    assert_memory_equal(&o, &dd, sizeof o);
    assert_int_equal(dd.retries, 5);
    assert_int_equal(dd.min_rate, 1024);

    setenv("MESH_LLM_QUIC_RETRY_AFTER", "7", 1); /* the environment is not the source */
    tp_config_default(&got);
    assert_int_equal(got.retry_after, 16);
    unsetenv("MESH_LLM_QUIC_RETRY_AFTER");

    const char *some[] = {"MESH_LLM_HANDSHAKE_MS=700", "MESH_LLM_QUIC_IDLE_MS=9000",
                          "MESH_LLM_LIVE_MS=300",      "MESH_LLM_QUIC_RETRY_AFTER=0",
                          "MESH_LLM_QUIC_CC=cubic",    "MESH_LLM_DL_RETRIES=0",
                          "MESH_LLM_DL_MIN_RATE=9",    "MESH_LLM_DL_STALL_MS=1500",
                          "MESH_LLM_DL_BACKOFF_MS=20", NULL};
    assert_int_equal(tunables_load(&t, some, NULL, 0), 0);
    tunables_tp_config(&t, &got);
    assert_int_equal(got.handshake_timeout_ms, 700);
    assert_int_equal(got.idle_timeout_ms, 9000);
    assert_int_equal(got.keepalive_ms, 3000);
    assert_int_equal(got.live_ms, 300);
    assert_int_equal(got.retry_after, 0);
    assert_int_equal(got.cc_algo, tp_cc_algo("cubic", -1));
    assert_int_not_equal(got.cc_algo, def.cc_algo);
    assert_int_equal(got.max_conns, def.max_conns);
    tunables_dl_opts(&t, &o);
    assert_true(tunables_given(&t, &t.dl_retries));
    assert_int_equal(o.retries, 0);
    assert_int_equal(o.min_rate, 9);
    assert_int_equal(o.stall_ms, 1500);
    assert_int_equal(o.backoff_ms, 20);
    assert_int_equal(tp_cc_algo("vegas", 42), 42);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_every_row_has_a_tunable, clear_env),
        cmocka_unit_test_setup(test_rows_match_todays_parsers, clear_env),
        cmocka_unit_test_setup(test_kinds, clear_env),
        cmocka_unit_test_setup(test_defaults, clear_env),
        cmocka_unit_test_setup(test_envp, clear_env),
        cmocka_unit_test_setup(test_report, clear_env),
        cmocka_unit_test_setup(test_derived, clear_env),
        cmocka_unit_test_setup(test_net_opts, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

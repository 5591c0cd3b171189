/* The port-mapping schedule: see portmap_sched.h. */
#include "portmap_sched.h"

void pms_init(pms_t *s, const pms_cfg_t *cfg, uint64_t now_ms)
{
    *s = (pms_t){0};
    if (cfg) s->cfg = *cfg;
    if (!s->cfg.lease_s) s->cfg.lease_s = PMS_DEFAULT_LEASE_S;
    if (s->cfg.lease_s < PMS_MIN_LEASE_S) s->cfg.lease_s = PMS_MIN_LEASE_S;
    if (!s->cfg.retry_base_ms) s->cfg.retry_base_ms = PMS_DEFAULT_RETRY_BASE_MS;
    if (!s->cfg.retry_max_ms) s->cfg.retry_max_ms = PMS_DEFAULT_RETRY_MAX_MS;
    if (s->cfg.retry_max_ms < s->cfg.retry_base_ms) s->cfg.retry_max_ms = s->cfg.retry_base_ms;
    if (!s->cfg.max_rounds) s->cfg.max_rounds = PMS_DEFAULT_MAX_ROUNDS;
    s->state = PMS_PROBING;
    s->method = PMS_NATPMP;
    s->next_ms = now_ms;
}

pms_action_t pms_next(const pms_t *s, uint64_t now_ms)
{
    if (s->state == PMS_GAVE_UP) return (pms_action_t){.kind = PMS_ACT_IDLE};
    if (now_ms >= s->next_ms) return (pms_action_t){.kind = PMS_ACT_TRY, .method = s->method};
    return (pms_action_t){.kind = PMS_ACT_WAIT, .at_ms = s->next_ms};
}

static uint64_t doubled(uint64_t base, uint32_t n, uint64_t cap)
{
    uint64_t v = base;
    for (uint32_t i = 1; i < n && v < cap; i++)
        v *= 2;
    return v < cap ? v : cap;
}

uint64_t pms_backoff_ms(const pms_cfg_t *cfg, uint32_t rounds)
{
    return doubled(cfg->retry_base_ms, rounds ? rounds : 1, cfg->retry_max_ms);
}

static void mapped(pms_t *s, uint64_t now_ms, pms_method_t m, uint32_t granted_s)
{
    uint32_t lease = granted_s ? granted_s : s->cfg.lease_s;
    if (lease < PMS_MIN_LEASE_S) lease = PMS_MIN_LEASE_S;
    s->state = PMS_MAPPED;
    s->method = m;
    s->lease_s = lease;
    s->expires_ms = now_ms + (uint64_t)lease * 1000;
    s->next_ms = now_ms + (uint64_t)lease * 500;
    s->fail_rounds = 0;
    s->renew_fails = 0;
}

pms_event_t pms_result(pms_t *s, uint64_t now_ms, pms_method_t m, bool ok, uint32_t granted_s)
{
    if (s->state == PMS_GAVE_UP) return PMS_EV_NONE;
    if (s->state == PMS_MAPPED) {
        if (ok) {
            mapped(s, now_ms, m, granted_s);
            return PMS_EV_RENEWED;
        }
        s->renew_fails++;
        uint64_t left = s->expires_ms > now_ms ? s->expires_ms - now_ms : 0;
        uint64_t d = doubled(PMS_RENEW_RETRY_MS, s->renew_fails, s->cfg.retry_max_ms);
        if (d > left / 2) d = left / 2;
        if (d >= PMS_MIN_RETRY_MS) {
            s->next_ms = now_ms + d;
            return PMS_EV_NONE;
        }
        /* the lease runs out before another try: start over with a fresh round, now */
        s->state = PMS_PROBING;
        s->method = PMS_NATPMP;
        s->next_ms = now_ms;
        s->fail_rounds = 0;
        s->renew_fails = 0;
        s->lease_s = 0;
        s->expires_ms = 0;
        return PMS_EV_LOST;
    }
    /* probing */
    if (ok) {
        mapped(s, now_ms, m, granted_s);
        return PMS_EV_MAPPED;
    }
    if (m == PMS_NATPMP) {
        s->method = PMS_UPNP;
        s->next_ms = now_ms;
        return PMS_EV_NONE;
    }
    s->fail_rounds++;
    s->method = PMS_NATPMP;
    if (s->fail_rounds >= s->cfg.max_rounds) {
        s->state = PMS_GAVE_UP;
        return PMS_EV_GAVE_UP;
    }
    s->next_ms = now_ms + pms_backoff_ms(&s->cfg, s->fail_rounds);
    if (s->told_none) return PMS_EV_NONE;
    s->told_none = true;
    return PMS_EV_NO_ROUTER;
}

bool pms_addr_private(uint32_t a)
{
    return (a >> 24) == 10 || (a >> 20) == (172u << 4 | 1) || (a >> 16) == (192u << 8 | 168) ||
           (a >> 22) == (100u << 2 | 1) || (a >> 16) == (169u << 8 | 254) || (a >> 24) == 127 ||
           (a >> 24) == 0;
}

const char *pms_method_name(pms_method_t m)
{
    return m == PMS_UPNP ? "upnp" : "natpmp";
}

/* Port mapping driver: see portmap.h. The policy (which method, when) is core/portmap_sched.c;
 * this file runs the attempts. Each attempt is one threadpool job (uv_queue_work) that does all
 * its blocking library calls with bounded waits: NAT-PMP requests wait at most
 * NATPMP_WAIT_MS each (libnatpmp's own retries inside that); UPnP's SSDP discovery waits
 * discover_ms and its HTTP calls are bounded by libminiupnpc's socket timeouts. The job reads
 * and writes only its job struct and the UPnP state below (no other job runs meanwhile); the
 * after-work callback, on the loop thread, hands the outcome to the schedule. */
#include "portmap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <miniupnpc/miniupnpc.h>
#include <miniupnpc/upnpcommands.h>
#include <natpmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/time.h>

#include "log.h"
#include "portmap_sched.h"

#define TAG "portmap"
#define NATPMP_WAIT_MS 1500      /* one NAT-PMP request's answer, libnatpmp's resends included */
#define DISCOVER_DEFAULT_MS 2000 /* UPnP SSDP discovery, all search types */
#define DISCOVER_MIN_MS 1000     /* one search type's wait (libminiupnpc's minimum) */
#define STOP_BOUND_MS 2000       /* portmap_stop calls done by then at the latest */
#define UPNP_CONFLICT 718        /* ConflictInMappingEntry */
#define UPNP_ONLY_PERMANENT 725  /* OnlyPermanentLeasesSupported */

typedef enum { JOB_MAP = 0, JOB_DELETE } job_kind_t;

typedef struct {
    job_kind_t kind;
    pms_method_t method;
    uint16_t want_ext; /* the external port asked for */
    /* out */
    bool ok;
    char ext_ip[INET_ADDRSTRLEN];
    uint16_t ext_port;
    uint32_t granted_s;
    char err[96];
} job_t;

struct portmap {
    uv_loop_t *loop;
    portmap_opts_t o;
    pms_t sched;
    uv_timer_t timer;      /* the schedule's next attempt */
    uv_timer_t stop_timer; /* portmap_stop's bound */
    uv_work_t work;
    job_t job;
    bool busy;
    /* UPnP: the IGD found (kept between jobs for renewals and the deletion) */
    bool have_igd;
    struct UPNPUrls urls;
    struct IGDdatas igd;
    char lanaddr[64];
    /* the mapping held */
    bool mapped;
    pms_method_t via;
    bool said_none; /* on_change(NULL, NULL) was called */
    char ext_ip[INET_ADDRSTRLEN];
    uint16_t ext_port;
    /* stopping */
    bool stopping;
    bool done_called;
    void (*done)(void *data);
    void *done_data;
    int open_handles;
};

/* ---- in the threadpool ---- */

/* Wait for the answer to the request just sent, resends by libnatpmp included, at most
 * NATPMP_WAIT_MS. Returns libnatpmp's result (0: *resp filled). */
static int natpmp_wait(natpmp_t *n, natpmpresp_t *resp)
{
    uint64_t end = uv_hrtime() / 1000000 + NATPMP_WAIT_MS;
    for (;;) {
        uint64_t now = uv_hrtime() / 1000000;
        if (now >= end) return NATPMP_TRYAGAIN;
        struct timeval tv;
        if (getnatpmprequesttimeout(n, &tv) < 0) return NATPMP_ERR_GETTIMEOFDAYERR;
        uint64_t left = end - now;
        uint64_t tv_ms = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
        if (tv.tv_sec < 0 || tv_ms > left) {
            tv.tv_sec = (time_t)(left / 1000);
            tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
        }
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(n->s, &fds);
        if (select(n->s + 1, &fds, NULL, NULL, &tv) < 0 && errno != EINTR)
            return NATPMP_ERR_RECVFROM;
        int r = readnatpmpresponseorretry(n, resp);
        if (r != NATPMP_TRYAGAIN) return r;
    }
}

static void natpmp_job(job_t *j, uint16_t local, uint32_t lease)
{
    natpmp_t n;
    natpmpresp_t resp;
    int r = initnatpmp(&n, 0, 0);
    if (r < 0) {
        snprintf(j->err, sizeof j->err, "no default gateway (%d)", r);
        return;
    }
    if (j->kind == JOB_DELETE) {
        /* lifetime 0 deletes the mapping of the private port */
        r = sendnewportmappingrequest(&n, NATPMP_PROTOCOL_UDP, local, 0, 0);
        if (r >= 0) r = natpmp_wait(&n, &resp);
        j->ok = r == 0;
        if (r) snprintf(j->err, sizeof j->err, "delete: %d", r);
        closenatpmp(&n);
        return;
    }
    r = sendpublicaddressrequest(&n);
    if (r >= 0) r = natpmp_wait(&n, &resp);
    if (r != 0 || resp.type != NATPMP_RESPTYPE_PUBLICADDRESS) {
        snprintf(j->err, sizeof j->err, "public address request: %d", r);
        closenatpmp(&n);
        return;
    }
    if (!inet_ntop(AF_INET, &resp.pnu.publicaddress.addr, j->ext_ip, sizeof j->ext_ip)) {
        snprintf(j->err, sizeof j->err, "bad public address");
        closenatpmp(&n);
        return;
    }
    r = sendnewportmappingrequest(&n, NATPMP_PROTOCOL_UDP, local, j->want_ext, lease);
    if (r >= 0) r = natpmp_wait(&n, &resp);
    if (r != 0 || resp.type != NATPMP_RESPTYPE_UDPPORTMAPPING ||
        resp.pnu.newportmapping.mappedpublicport == 0 || resp.pnu.newportmapping.lifetime == 0) {
        snprintf(j->err, sizeof j->err, "mapping request: %d", r);
        closenatpmp(&n);
        return;
    }
    j->ext_port = resp.pnu.newportmapping.mappedpublicport;
    j->granted_s = resp.pnu.newportmapping.lifetime;
    j->ok = true;
    closenatpmp(&n);
}

static void upnp_forget(portmap_t *pm)
{
    if (pm->have_igd) FreeUPNPUrls(&pm->urls);
    pm->have_igd = false;
}

static bool upnp_find(portmap_t *pm, job_t *j)
{
    if (pm->have_igd) return true;
    /* the IGD's device type, then its WAN connection service (some answer only that one),
     * each waited for in turn until one is answered; the library waits whole seconds (at least
     * 1 s a type), so the bound is split between them */
    static const char *const types[] = {"urn:schemas-upnp-org:device:InternetGatewayDevice:1",
                                        "urn:schemas-upnp-org:service:WANIPConnection:1", NULL};
    int ntypes = (int)(sizeof types / sizeof types[0]) - 1;
    int err = 0;
    int delay = (int)(pm->o.discover_ms ? pm->o.discover_ms : DISCOVER_DEFAULT_MS) / ntypes;
    if (delay < DISCOVER_MIN_MS) delay = DISCOVER_MIN_MS;
    struct UPNPDev *devs =
        upnpDiscoverDevices(types, delay, NULL, NULL, UPNP_LOCAL_PORT_ANY, 0, 2, &err, 0);
    if (!devs) {
        snprintf(j->err, sizeof j->err, "no UPnP device answered (%d)", err);
        return false;
    }
    memset(&pm->urls, 0, sizeof pm->urls);
    memset(&pm->igd, 0, sizeof pm->igd);
    int r = UPNP_GetValidIGD(devs, &pm->urls, &pm->igd, pm->lanaddr, sizeof pm->lanaddr);
    freeUPNPDevlist(devs);
    if (r != 1) {
        /* 2: an IGD not connected, 3: a UPnP device that is no IGD */
        if (r > 0) FreeUPNPUrls(&pm->urls);
        snprintf(j->err, sizeof j->err, "no connected IGD (%d)", r);
        return false;
    }
    pm->have_igd = true;
    return true;
}

static void upnp_job(portmap_t *pm, job_t *j, uint16_t local, uint32_t lease)
{
    char ext[8], in[8], lease_s[16];
    if (j->kind == JOB_DELETE) {
        if (!pm->have_igd) {
            snprintf(j->err, sizeof j->err, "no IGD");
            return;
        }
        snprintf(ext, sizeof ext, "%u", (unsigned)j->want_ext);
        int r = UPNP_DeletePortMapping(pm->urls.controlURL, pm->igd.first.servicetype, ext, "UDP",
                                       NULL);
        j->ok = r == UPNPCOMMAND_SUCCESS;
        if (!j->ok) snprintf(j->err, sizeof j->err, "DeletePortMapping: %d", r);
        upnp_forget(pm);
        return;
    }
    if (!upnp_find(pm, j)) return;
    const char *ctl = pm->urls.controlURL, *st = pm->igd.first.servicetype;
    char ip[40] = "";
    int r = UPNP_GetExternalIPAddress(ctl, st, ip);
    struct in_addr a;
    if (r != UPNPCOMMAND_SUCCESS || inet_pton(AF_INET, ip, &a) != 1) {
        snprintf(j->err, sizeof j->err, "GetExternalIPAddress: %d", r);
        upnp_forget(pm);
        return;
    }
    inet_ntop(AF_INET, &a, j->ext_ip, sizeof j->ext_ip);
    snprintf(ext, sizeof ext, "%u", (unsigned)j->want_ext);
    snprintf(in, sizeof in, "%u", (unsigned)local);
    snprintf(lease_s, sizeof lease_s, "%u", (unsigned)lease);
    r = UPNP_AddPortMapping(ctl, st, ext, in, pm->lanaddr, "mesh-llm", "UDP", NULL, lease_s);
    if (r == UPNP_ONLY_PERMANENT) {
        snprintf(lease_s, sizeof lease_s, "0");
        r = UPNP_AddPortMapping(ctl, st, ext, in, pm->lanaddr, "mesh-llm", "UDP", NULL, lease_s);
    }
    j->ext_port = j->want_ext;
    if (r == UPNP_CONFLICT) {
        /* the port is taken (by another host): let the router choose one */
        char got[8] = "";
        r = UPNP_AddAnyPortMapping(ctl, st, ext, in, pm->lanaddr, "mesh-llm", "UDP", NULL, lease_s,
                                   got);
        unsigned long p = strtoul(got, NULL, 10);
        if (r == UPNPCOMMAND_SUCCESS && (p == 0 || p > 65535)) r = UPNPCOMMAND_INVALID_RESPONSE;
        j->ext_port = (uint16_t)p;
    }
    if (r != UPNPCOMMAND_SUCCESS) {
        snprintf(j->err, sizeof j->err, "AddPortMapping: %d", r);
        upnp_forget(pm);
        return;
    }
    j->granted_s = (uint32_t)strtoul(lease_s, NULL, 10); /* 0: permanent, renewed all the same */
    j->ok = true;
}

static void job_work(uv_work_t *w)
{
    portmap_t *pm = w->data;
    job_t *j = &pm->job;
    if (j->method == PMS_NATPMP)
        natpmp_job(j, pm->o.port, pm->sched.cfg.lease_s);
    else
        upnp_job(pm, j, pm->o.port, pm->sched.cfg.lease_s);
}

/* ---- on the loop thread ---- */

static void schedule(portmap_t *pm);
static void after_job(uv_work_t *w, int status);

static int queue_job(portmap_t *pm, job_kind_t kind, pms_method_t m, uint16_t want_ext)
{
    pm->job = (job_t){.kind = kind, .method = m, .want_ext = want_ext};
    pm->work.data = pm;
    int rc = uv_queue_work(pm->loop, &pm->work, job_work, after_job);
    if (rc == 0) pm->busy = true;
    return rc;
}

static void call_done(portmap_t *pm)
{
    if (pm->done_called) return;
    pm->done_called = true;
    if (pm->done) pm->done(pm->done_data);
}

static void on_closed(uv_handle_t *h)
{
    portmap_t *pm = h->data;
    if (--pm->open_handles > 0) return;
    call_done(pm);
    free(pm);
}

static void finish(portmap_t *pm)
{
    upnp_forget(pm);
    uv_close((uv_handle_t *)&pm->timer, on_closed);
    uv_close((uv_handle_t *)&pm->stop_timer, on_closed);
}

static void on_stop_bound(uv_timer_t *t)
{
    portmap_t *pm = t->data;
    LOGI(TAG, "port mapping: stop not done within %d ms: not waiting (the deletion goes on)",
         STOP_BOUND_MS);
    call_done(pm);
}

/* stopping and no job in flight: delete the mapping held, else finish */
static void stop_step(portmap_t *pm)
{
    if (pm->mapped) {
        pm->mapped = false;
        if (queue_job(pm, JOB_DELETE, pm->via, pm->ext_port) == 0) return;
    }
    finish(pm);
}

static void after_job(uv_work_t *w, int status)
{
    portmap_t *pm = w->data;
    job_t *j = &pm->job;
    pm->busy = false;
    if (status != 0) j->ok = false; /* cancelled */
    if (j->kind == JOB_DELETE) {
        const char *how = j->method == PMS_UPNP ? "UPnP" : "NAT-PMP";
        if (j->ok)
            LOGI(TAG, "port mapping: deleted UDP %s:%u via %s", pm->ext_ip, (unsigned)j->want_ext,
                 how);
        else
            LOGI(TAG, "port mapping: deleting UDP %s:%u via %s failed (%s)", pm->ext_ip,
                 (unsigned)j->want_ext, how, j->err);
        finish(pm);
        return;
    }
    if (pm->stopping) {
        if (j->ok) {
            /* made while stopping: delete it too */
            pm->mapped = true;
            pm->via = j->method;
            snprintf(pm->ext_ip, sizeof pm->ext_ip, "%s", j->ext_ip);
            pm->ext_port = j->ext_port;
        }
        stop_step(pm);
        return;
    }
    uint64_t now = uv_now(pm->loop);
    pms_event_t ev = pms_result(&pm->sched, now, j->method, j->ok, j->granted_s);
    const char *via = pms_method_name(j->method);
    const char *via_log = j->method == PMS_UPNP ? "UPnP" : "NAT-PMP";
    char ext[INET_ADDRSTRLEN + 8];
    snprintf(ext, sizeof ext, "%s:%u", j->ext_ip, (unsigned)j->ext_port);
    struct in_addr a = {0};
    bool priv =
        j->ok && inet_pton(AF_INET, j->ext_ip, &a) == 1 && pms_addr_private(ntohl(a.s_addr));
    bool changed = j->ok && (!pm->mapped || pm->via != j->method || pm->ext_port != j->ext_port ||
                             strcmp(pm->ext_ip, j->ext_ip) != 0);
    if (!j->ok) LOGD(TAG, "port mapping: %s attempt failed: %s", via, j->err);
    switch (ev) {
    case PMS_EV_MAPPED:
    case PMS_EV_RENEWED:
        if (!changed) {
            LOGD(TAG, "port mapping: renewed UDP %s via %s, lease %u s", ext, via_log,
                 (unsigned)pm->sched.lease_s);
            break;
        }
        pm->mapped = true;
        pm->via = j->method;
        snprintf(pm->ext_ip, sizeof pm->ext_ip, "%s", j->ext_ip);
        pm->ext_port = j->ext_port;
        LOGI(TAG, "port mapping: UDP %s → local %u via %s, lease %u s%s", ext, (unsigned)pm->o.port,
             via_log, (unsigned)pm->sched.lease_s,
             priv ? " (the external address is private: another NAT is beyond the router)" : "");
        pm->o.on_change(pm->o.data, ext, via, priv);
        break;
    case PMS_EV_LOST:
        LOGI(TAG, "port mapping: UDP %s:%u via %s lost (renewals failed: %s)", pm->ext_ip,
             (unsigned)pm->ext_port, via_log, j->err);
        pm->mapped = false;
        upnp_forget(pm);
        pm->o.on_change(pm->o.data, NULL, via, false);
        break;
    case PMS_EV_NO_ROUTER:
        LOGI(TAG, "port mapping: no router answered NAT-PMP or UPnP; retrying in %llu s",
             (unsigned long long)(pms_backoff_ms(&pm->sched.cfg, 1) / 1000));
        pm->said_none = true;
        pm->o.on_change(pm->o.data, NULL, NULL, false);
        break;
    case PMS_EV_GAVE_UP:
        LOGI(TAG, "port mapping: no router answered in %u rounds; giving up",
             (unsigned)pm->sched.cfg.max_rounds);
        /* max_rounds 1: the first round gives up before PMS_EV_NO_ROUTER; say it all the same */
        if (!pm->said_none) pm->o.on_change(pm->o.data, NULL, NULL, false);
        pm->said_none = true;
        break;
    case PMS_EV_NONE:
        break;
    }
    schedule(pm);
}

static void on_timer(uv_timer_t *t)
{
    schedule(t->data);
}

static void schedule(portmap_t *pm)
{
    if (pm->stopping || pm->busy) return;
    uint64_t now = uv_now(pm->loop);
    pms_action_t a = pms_next(&pm->sched, now);
    if (a.kind == PMS_ACT_WAIT) {
        uv_timer_start(&pm->timer, on_timer, a.at_ms - now, 0);
        return;
    }
    if (a.kind == PMS_ACT_IDLE) return;
    /* a renewal asks for the port held, a first mapping for the local one */
    uint16_t want = pm->mapped && pm->via == a.method ? pm->ext_port : pm->o.port;
    if (queue_job(pm, JOB_MAP, a.method, want) != 0) {
        /* the threadpool refused (it does not): count it a failure, the schedule backs off */
        pms_result(&pm->sched, now, a.method, false, 0);
        uv_timer_start(&pm->timer, on_timer, PMS_MIN_RETRY_MS, 0);
    }
}

int portmap_start(portmap_t **out, uv_loop_t *loop, const portmap_opts_t *o)
{
    if (!out || !loop || !o || !o->port || !o->on_change) return -EINVAL;
    portmap_t *pm = calloc(1, sizeof *pm);
    if (!pm) return -ENOMEM;
    pm->loop = loop;
    pm->o = *o;
    pms_cfg_t cfg = {
        .lease_s = o->lease_s, .retry_base_ms = o->retry_base_ms, .max_rounds = o->max_rounds};
    pms_init(&pm->sched, &cfg, uv_now(loop));
    uv_timer_init(loop, &pm->timer);
    uv_timer_init(loop, &pm->stop_timer);
    pm->timer.data = pm;
    pm->stop_timer.data = pm;
    pm->open_handles = 2;
    *out = pm;
    schedule(pm);
    return 0;
}

void portmap_stop(portmap_t *pm, void (*done)(void *data), void *data)
{
    if (!pm || pm->stopping) return;
    pm->stopping = true;
    pm->done = done;
    pm->done_data = data;
    uv_timer_stop(&pm->timer);
    uv_timer_start(&pm->stop_timer, on_stop_bound, STOP_BOUND_MS, 0);
    if (!pm->busy) stop_step(pm);
    /* else after_job goes on from here */
}

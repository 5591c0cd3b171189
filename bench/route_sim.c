/* bench/route_sim — load spread in a simulated mesh (issue 31): 100 nodes, 1,000 clients,
 * 10 models of Zipf popularity, on a virtual clock, every request routed by the real
 * route_decide (core/route_decide.c) with the facts an entry node has.
 *
 * The mesh: model m (0..9) has popularity 1/(m+1) (normalized) and hosts in proportion (at least
 * 2; 46 hosts in all), each on its own node with SLOTS parallel slots and a FIFO queue beyond
 * them. Clients enter through node (client % 100), send requests without a stickiness key by
 * popularity, in one open Poisson stream at ρ of the mesh's capacity; a request is served for an
 * exponential time (mean 2 s). Three routing policies, on the same arrivals:
 *  - hash-only: every entry node sends a model's requests to its home host (route_decide with no
 *    load facts);
 *  - own in flight: route_decide with each entry's own requests in flight per host and no
 *    announced load (the same choices as the spill-over before issue 31, and a passive client's
 *    today);
 *  - load spread: route_decide with the host's announced busy as well — re-announced when its
 *    load class changes (slots_load_class), at most once a second, reaching every node
 *    ANN_DELAY_MS later — so entries act on a second-old view, as in the mesh.
 * Reported: queue wait (time from arrival to a slot) p50/p99/mean and the share of requests that
 * waited, per policy, at ρ = 0.7 and 0.9. Target (PASS/MISS; the exit code is 0 when it ran):
 * load spread's p99 wait below own-in-flight's and hash-only's at both loads.
 * Last line: BENCH route_sim p99_hash=... p99_inflight=... p99_spread=... (ρ 0.9). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "route_decide.h"
#include "slots.h"

#define NODES 100
#define CLIENTS 1000
#define MODELS 10
#define HOSTS_SHARE 44 /* hosts in proportion to popularity, at least 2 a model */
#define HOSTS_TOTAL 64 /* room */
#define SLOTS 4
#define SERVICE_MS 2000.0
#define REQUESTS 200000
#define ANN_DELAY_MS 50 /* an announcement reaches the other nodes */
#define MAX_QUEUE 200000

typedef enum { POL_HASH = 0, POL_INFLIGHT, POL_SPREAD, POL_N } policy_t;
static const char *const POL_NAME[] = {"hash-only", "own in flight", "load spread"};

typedef struct {
    double at, service; /* arrival, service time */
    int entry;
} queued_t;

typedef struct {
    char id[24];
    int model;
    unsigned busy;         /* in service + queued */
    unsigned ann_busy;     /* what the mesh sees (announced) */
    unsigned pending_busy; /* announced, not arrived yet */
    double pending_at;     /* when it arrives (0: none) */
    double last_ann;       /* when it last announced */
    queued_t *queue;       /* FIFO beyond the slots */
    size_t q_head, q_tail;
} host_t;

typedef struct {
    double t;
    int host, entry;
} done_t;

/* a binary min-heap of completions */
static done_t *heap;
static size_t n_heap;

static void heap_push(done_t d)
{
    size_t i = n_heap++;
    heap[i] = d;
    while (i && heap[(i - 1) / 2].t > heap[i].t) {
        done_t x = heap[i];
        heap[i] = heap[(i - 1) / 2];
        heap[(i - 1) / 2] = x;
        i = (i - 1) / 2;
    }
}

static done_t heap_pop(void)
{
    done_t top = heap[0];
    heap[0] = heap[--n_heap];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n_heap && heap[l].t < heap[m].t) m = l;
        if (r < n_heap && heap[r].t < heap[m].t) m = r;
        if (m == i) break;
        done_t x = heap[i];
        heap[i] = heap[m];
        heap[m] = x;
        i = m;
    }
    return top;
}

/* a small deterministic generator (splitmix64) */
static uint64_t rng_state;
static double uniform(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

static double expo(double mean)
{
    return -mean * log(uniform());
}

typedef struct {
    double t;
    int client, model;
    double service;
} arrival_t;

static host_t hosts[HOSTS_TOTAL];
static int model_hosts[MODELS][HOSTS_TOTAL], n_model_hosts[MODELS];
static unsigned inflight[NODES][HOSTS_TOTAL]; /* an entry's own requests at a host */
static char entry_id[NODES][24];
static double pop[MODELS];

static void setup_mesh(void)
{
    double sum = 0;
    for (int m = 0; m < MODELS; m++)
        sum += pop[m] = 1.0 / (m + 1);
    int h = 0;
    for (int m = 0; m < MODELS; m++) {
        pop[m] /= sum;
        int want = (int)lround(pop[m] * HOSTS_SHARE);
        if (want < 2) want = 2;
        for (int k = 0; k < want && h < HOSTS_TOTAL; k++, h++) {
            hosts[h].model = m;
            snprintf(hosts[h].id, sizeof hosts[h].id, "host-%03d", h);
            model_hosts[m][n_model_hosts[m]++] = h;
        }
    }
    for (int e = 0; e < NODES; e++)
        snprintf(entry_id[e], sizeof entry_id[e], "node-%03d", e);
}

static int hosts_in_use(void)
{
    int n = 0;
    for (int m = 0; m < MODELS; m++)
        n += n_model_hosts[m];
    return n;
}

/* arrivals at load rho: Poisson at rho x capacity, models by popularity */
static arrival_t *make_arrivals(double rho, uint64_t seed)
{
    arrival_t *a = malloc(sizeof *a * REQUESTS);
    if (!a) return NULL;
    rng_state = seed;
    double rate = rho * hosts_in_use() * SLOTS / SERVICE_MS, t = 0; /* per ms */
    for (size_t i = 0; i < REQUESTS; i++) {
        t += expo(1.0 / rate);
        double u = uniform(), c = 0;
        int m = MODELS - 1;
        for (int k = 0; k < MODELS; k++)
            if (u < (c += pop[k])) {
                m = k;
                break;
            }
        a[i] = (arrival_t){t, (int)(uniform() * CLIENTS) % CLIENTS, m, expo(SERVICE_MS)};
    }
    return a;
}

/* the announcement: re-announced when its load class changed, at most once per second */
static void maybe_announce(host_t *h, double now)
{
    if (h->pending_at && h->pending_at <= now) {
        h->ann_busy = h->pending_busy;
        h->pending_at = 0;
    }
    unsigned seen = h->pending_at ? h->pending_busy : h->ann_busy;
    if (slots_load_class(h->busy, SLOTS) == slots_load_class(seen, SLOTS)) return;
    if (now - h->last_ann < SLOTS_LOAD_ANN_MS) return;
    h->last_ann = now;
    h->pending_busy = h->busy;
    h->pending_at = now + ANN_DELAY_MS;
}

static int route(policy_t pol, int entry, int model)
{
    rd_host_t rh[RD_MAX_HOSTS];
    size_t n = 0;
    for (int k = 0; k < n_model_hosts[model] && n < RD_MAX_HOSTS; k++) {
        int h = model_hosts[model][k];
        rh[n++] = (rd_host_t){.id = hosts[h].id,
                              .ready = true,
                              .type = -1,
                              .slots = SLOTS,
                              .inflight = pol == POL_HASH ? 0 : inflight[entry][h],
                              .busy = pol == POL_SPREAD ? hosts[h].ann_busy : 0};
    }
    char name[16];
    snprintf(name, sizeof name, "model-%d", model);
    rd_input_t in = {
        .model = name, .needs = -1, .self_id = entry_id[entry], .hosts = rh, .n_hosts = n};
    rd_decision_t d;
    route_decide(&in, &d);
    if (d.verdict != RD_FORWARD || !d.n) {
        fprintf(stderr, "route_sim: verdict %d for %s: %s\n", (int)d.verdict, name, d.msg);
        return -1;
    }
    const char *id = rh[d.order[0]].id;
    for (int k = 0; k < n_model_hosts[model]; k++)
        if (strcmp(hosts[model_hosts[model][k]].id, id) == 0) return model_hosts[model][k];
    return -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double p50, p99, mean, waited;
} waits_t;

static int run(policy_t pol, const arrival_t *arr, waits_t *out)
{
    double *waits = malloc(sizeof *waits * REQUESTS);
    heap = malloc(sizeof *heap * REQUESTS);
    if (!waits || !heap) return -1;
    n_heap = 0;
    memset(inflight, 0, sizeof inflight);
    for (int h = 0; h < HOSTS_TOTAL; h++) {
        free(hosts[h].queue);
        hosts[h].queue = malloc(sizeof(queued_t) * MAX_QUEUE);
        if (!hosts[h].queue) return -1;
        hosts[h].busy = hosts[h].ann_busy = hosts[h].pending_busy = 0;
        hosts[h].pending_at = hosts[h].last_ann = 0;
        hosts[h].q_head = hosts[h].q_tail = 0;
    }
    size_t n_waits = 0, i = 0;
    int n_hosts = hosts_in_use();
    while (i < REQUESTS || n_heap) {
        bool arrive = i < REQUESTS && (!n_heap || arr[i].t < heap[0].t);
        double now = arrive ? arr[i].t : heap[0].t;
        for (int h = 0; h < n_hosts; h++)
            maybe_announce(&hosts[h], now);
        if (arrive) {
            const arrival_t *a = &arr[i++];
            int entry = a->client % NODES, h = route(pol, entry, a->model);
            if (h < 0) return -1;
            host_t *x = &hosts[h];
            inflight[entry][h]++;
            if (x->busy < SLOTS) {
                waits[n_waits++] = 0;
                heap_push((done_t){now + a->service, h, entry});
            } else {
                if (x->q_tail >= MAX_QUEUE) return -1;
                x->queue[x->q_tail++] = (queued_t){now, a->service, entry};
            }
            x->busy++;
        } else {
            done_t d = heap_pop();
            host_t *x = &hosts[d.host];
            x->busy--;
            inflight[d.entry][d.host]--;
            if (x->q_head < x->q_tail) {
                queued_t q = x->queue[x->q_head++];
                waits[n_waits++] = now - q.at;
                heap_push((done_t){now + q.service, d.host, q.entry});
            }
        }
    }
    qsort(waits, n_waits, sizeof *waits, cmp_double);
    double sum = 0;
    size_t waited = 0;
    for (size_t k = 0; k < n_waits; k++) {
        sum += waits[k];
        waited += waits[k] > 0;
    }
    out->p50 = waits[n_waits / 2];
    out->p99 = waits[(size_t)(n_waits * 0.99)];
    out->mean = sum / (double)n_waits;
    out->waited = (double)waited / (double)n_waits;
    free(waits);
    free(heap);
    heap = NULL;
    return 0;
}

int main(void)
{
    setup_mesh();
    printf("route_sim: %d nodes, %d clients, %d models (Zipf), %d hosts x %d slots, service "
           "exp(%.0f ms), %d requests per run, announcements at most 1/s, %d ms to arrive\n",
           NODES, CLIENTS, MODELS, hosts_in_use(), SLOTS, SERVICE_MS, REQUESTS, ANN_DELAY_MS);
    static const double RHO[] = {0.7, 0.9};
    double p99_last[POL_N] = {0};
    bool pass = true;
    for (size_t r = 0; r < sizeof RHO / sizeof *RHO; r++) {
        arrival_t *arr = make_arrivals(RHO[r], 42 + r);
        if (!arr) return 1;
        printf("\n== load %.0f %% of capacity: queue wait (ms) ==\n", RHO[r] * 100);
        printf("%-16s %10s %10s %10s %10s\n", "policy", "p50", "p99", "mean", "waited");
        waits_t w[POL_N];
        for (int p = 0; p < POL_N; p++) {
            if (run((policy_t)p, arr, &w[p]) != 0) {
                fprintf(stderr, "route_sim: out of memory or a request without a host\n");
                return 1;
            }
            printf("%-16s %10.0f %10.0f %10.1f %9.1f%%\n", POL_NAME[p], w[p].p50, w[p].p99,
                   w[p].mean, 100 * w[p].waited);
            p99_last[p] = w[p].p99;
        }
        bool ok = w[POL_SPREAD].p99 < w[POL_INFLIGHT].p99 && w[POL_SPREAD].p99 < w[POL_HASH].p99;
        printf("load spread's p99 below the others': %s\n", ok ? "PASS" : "MISS");
        pass &= ok;
        free(arr);
    }
    for (int h = 0; h < HOSTS_TOTAL; h++)
        free(hosts[h].queue);
    printf("\nBENCH route_sim p99_hash=%.0f p99_inflight=%.0f p99_spread=%.0f %s\n",
           p99_last[POL_HASH], p99_last[POL_INFLIGHT], p99_last[POL_SPREAD],
           pass ? "PASS" : "MISS");
    return 0;
}

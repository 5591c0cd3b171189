/* libFuzzer target: the ROUTE_REQUEST frames (src/core/route_table.h), both directions.
 *
 * Oracles besides the sanitizers: every list respects its cap; every host refers to a node of
 * the table; what was decoded encodes and decodes again to the same table with nothing
 * rejected; the host and check-in choices stay inside the table. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "route_decide.h"
#include "route_table.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

#define ID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static rt_table_t t, back;
static rt_request_t rq, rq2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *f = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!f) return 0;
    if (rt_table_decode(f, &t) == 0) {
        CHECK(t.n_nodes <= RT_MAX_NODES && t.n_models <= RT_MAX_MODELS);
        for (size_t i = 0; i < t.n_models; i++) {
            CHECK(t.models[i].n_hosts <= RT_MAX_HOSTS);
            for (size_t k = 0; k < t.models[i].n_hosts; k++)
                CHECK(t.models[i].hosts[k].node < t.n_nodes);
            rd_host_t hosts[RD_MAX_HOSTS];
            size_t node_of[RD_MAX_HOSTS];
            rd_input_t in;
            rd_passive_input(&in, &t, t.models[i].name, ID, hosts, node_of, RD_MAX_HOSTS);
            size_t n = in.n_hosts;
            CHECK(n == t.models[i].n_hosts);
            rd_decision_t d;
            route_decide(&in, &d);
            /* the private rule: the relay goes to the plain hosts only; none: refused */
            size_t n_priv = 0;
            for (size_t k = 0; k < n; k++)
                n_priv += hosts[k].priv;
            bool refused = n == 0 || n_priv == n;
            CHECK(refused ? d.verdict == RD_REFUSE : d.verdict == RD_FORWARD && d.n == n - n_priv);
            CHECK(!(n && n_priv == n) || (d.status == 403 && strcmp(d.code, "private_split") == 0));
            for (size_t k = 0; k < d.n; k++)
                CHECK(d.order[k] < n && node_of[d.order[k]] < t.n_nodes && !hosts[d.order[k]].priv);
        }
        for (size_t i = 0; i < t.n_nodes; i++)
            CHECK(t.nodes[i].n_addrs <= RT_MAX_ADDRS);
        size_t order[RT_MAX_NODES];
        size_t n = rt_checkin_order(&t, ID, order, RT_MAX_NODES);
        CHECK(n <= t.n_nodes);
        json_t *enc = rt_table_encode(&t);
        CHECK(enc);
        CHECK(rt_table_decode(enc, &back) == 0);
        CHECK(back.rejected == 0 && back.n_nodes == t.n_nodes && back.n_models == t.n_models);
        for (size_t i = 0; i < t.n_models; i++)
            for (size_t k = 0; k < t.models[i].n_hosts && k < back.models[i].n_hosts; k++)
                CHECK(back.models[i].hosts[k].priv == t.models[i].hosts[k].priv &&
                      back.models[i].hosts[k].vision == t.models[i].hosts[k].vision);
        t.rejected = 0;
        CHECK(memcmp(t.mesh_id, back.mesh_id, sizeof t.mesh_id) == 0);
        json_decref(enc);
    }
    int rc = rt_request_decode(f, ID, &rq);
    if (rc == 0) {
        CHECK(rq.n_models <= RT_MAX_REQ_MODELS);
        json_t *enc = rt_request_encode(&rq);
        CHECK(enc && rt_request_decode(enc, ID, &rq2) == 0);
        CHECK(rq2.rejected == 0 && rq2.n_models == rq.n_models && rq2.role == rq.role &&
              rq2.vram_bytes == rq.vram_bytes);
        json_decref(enc);
    }
    json_decref(f);
    return 0;
}

/* mesh_passive — passive mode of the mesh driver (seed 002; see mesh.h).
 *
 * A passive node keeps its QUIC endpoint (admitted with the mesh secret like every member) but
 * takes no part in gossip: it never says hello, sends no heartbeat, and ignores gossip streams
 * (mesh.c). Active nodes therefore never list it among their peers nor in their heartbeat ring.
 * It dials peers only for ROUTE_REQUEST and tunnels, at the addresses its routing table gives
 * (mesh_set_peer_addrs).
 *
 * A standby (standby.h) switches between the two. Promotion (mesh_go_active) joins gossip
 * through the --join tokens like a node starting active, and says hello to the active nodes it
 * is connected to (its check-ins): the token's node may be dead (the death that promoted it).
 * Demotion (mesh_go_passive) sends the signed "leaving" (peers drop the node at once,
 * no probe) and starts a fresh gossip state machine at a higher incarnation, so a later
 * promotion is accepted at once (a higher incarnation supersedes the "left" record). */
#include <string.h>

#include "log.h"
#include "mesh_int.h"

bool mesh_is_passive(const mesh_t *m)
{
    return m->passive;
}

void mesh_go_active(mesh_t *m)
{
    if (!m->passive || m->stopping) return;
    m->passive = false;
    LOGI("mesh", "going active: joining gossip");
    mesh_announce_changed(m);
    if (m->n_joins) mesh_join_start(m);
    /* and through the active nodes it is connected to (routing tables gave their addresses) */
    for (mpeer_t *p = m->peers; p; p = p->next)
        if (p->n_addrs && tp_find(m->ep, p->id)) gossip_join(m->g, p->id, mesh_now(m));
    mesh_gossip_arm(m);
}

void mesh_go_passive(mesh_t *m)
{
    if (m->passive || m->stopping) return;
    LOGI("mesh", "going passive: leaving gossip (routing tables from now on)");
    gossip_leave(m->g, mesh_now(m)); /* the messages are serialized now (mesh.c g_send) */
    uint64_t inc = gossip_incarnation(m->g) + 1;
    gossip_t *fresh = mesh_gossip_new(m, inc);
    if (!fresh) { /* keep the old one: it has left, it sends nothing more */
        LOGW("mesh", "cannot restart gossip (out of memory)");
    } else {
        gossip_free(m->g);
        m->g = fresh;
        m->id.incarnation = inc;
        mesh_views_sync(m); /* no peers from now on */
    }
    m->passive = true;
    m->joined = m->joining = false;
    uv_timer_stop(&m->jtimer);
    for (mpeer_t *p = m->peers; p; p = p->next)
        mesh_queue_drop(p); /* gossip queued for peers not connected yet */
}

void mesh_set_peer_addrs(mesh_t *m, const char *peer_id, const char *const *addrs, size_t n)
{
    mpeer_t *p = mesh_peer_get(m, peer_id, true);
    if (!p) return;
    p->n_addrs = 0;
    for (size_t i = 0; i < n && p->n_addrs < MAX_ADDRS; i++)
        if (addrs[i] && strlen(addrs[i]) < TOKEN_ADDR_MAX)
            memcpy(p->addrs[p->n_addrs++], addrs[i], strlen(addrs[i]) + 1);
}

tp_conn_t *mesh_find_conn(mesh_t *m, const char *peer_id)
{
    return tp_find(m->ep, peer_id);
}

json_t *mesh_self_announcement(mesh_t *m)
{
    return m->passive || !m->g ? NULL : gossip_self(m->g);
}

size_t mesh_own_addrs(const mesh_t *m, const char **out, size_t max)
{
    size_t n = 0;
    for (; n < m->n_addrs && n < max; n++)
        out[n] = m->addrs[n];
    return n;
}

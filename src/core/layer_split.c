/* layer_split — see layer_split.h. */
#include "layer_split.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

static uint32_t speed_of(const ls_node_t *x)
{
    return x->speed_mflops > LS_SPEED_MAX ? LS_SPEED_MAX : x->speed_mflops;
}

int layer_split_speed(const ls_node_t *nodes, size_t n, uint32_t n_slots, uint64_t slot_bytes,
                      uint32_t *counts)
{
    if (!nodes || !counts || n == 0 || n > LS_MAX_NODES || slot_bytes == 0 || n_slots == 0)
        return -EINVAL;
    uint32_t lo = UINT32_MAX, hi = 0;
    uint64_t caps = 0;
    for (size_t j = 0; j < n; j++) {
        uint32_t s = speed_of(&nodes[j]);
        if (s == 0) return 0;
        lo = s < lo ? s : lo;
        hi = s > hi ? s : hi;
        uint64_t c = nodes[j].cap_bytes / slot_bytes;
        caps += c > n_slots ? n_slots : c; /* no overflow: n ≤ LS_MAX_NODES */
    }
    if ((double)hi < LS_EQUAL_RATIO * (double)lo || caps < n_slots) return 0;

    uint32_t *cnt = calloc(n, sizeof *cnt);
    size_t *order = malloc(n * sizeof *order);
    if (!cnt || !order) {
        free(cnt);
        free(order);
        return 0; /* out of memory: the proportional split still works */
    }
    uint32_t left = n_slots;
    bool min_one = n_slots >= n;
    for (size_t j = 0; j < n; j++) {
        order[j] = j;
        if (min_one) {
            cnt[j] = 1;
            left--;
        }
    }
    /* fastest first, ties to the lower index (insertion sort: n is small in practice) */
    for (size_t i = 1; i < n; i++) {
        size_t k = order[i], p = i;
        while (p > 0 && speed_of(&nodes[order[p - 1]]) < speed_of(&nodes[k])) {
            order[p] = order[p - 1];
            p--;
        }
        order[p] = k;
    }
    for (size_t i = 0; i < n && left > 0; i++) {
        size_t j = order[i];
        uint64_t cap = nodes[j].cap_bytes / slot_bytes;
        uint32_t room = cap > cnt[j] ? (uint32_t)(cap - cnt[j] > left ? left : cap - cnt[j]) : 0;
        cnt[j] += room;
        left -= room;
    }
    /* the minimum of one slot may have pushed a member past its cap so that the caps no longer
     * cover every slot: the slowest member takes what is left (never reached when every cap
     * is ≥ 1, as Σ caps ≥ n_slots) */
    if (left > 0) cnt[order[n - 1]] += left;
    for (size_t j = 0; j < n; j++)
        counts[j] = cnt[j];
    free(cnt);
    free(order);
    return 1;
}

double layer_split_cost(const ls_node_t *nodes, size_t n, const uint32_t *counts)
{
    double t = 0;
    for (size_t j = 0; nodes && counts && j < n; j++) {
        uint32_t s = speed_of(&nodes[j]);
        if (s == 0) return 0;
        t += (double)counts[j] / (double)s;
    }
    return t;
}

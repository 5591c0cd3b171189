"""The host an entry node picks, as src/core/route_decide.c computes it: candidates in id order;
without a stickiness key, mix(FNV-1a(entry id "\\n" model)) % hosts (each entry node's home host);
with one, FNV-1a(key) % hosts."""
M64 = (1 << 64) - 1
FNV_BASIS = 1469598103934665603


def fnv1a(h, s):
    for b in s.encode():
        h = ((h ^ b) * 1099511628211) & M64
    return h


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def expected_host(client_id, model, host_ids):
    """The home host of entry node client_id for model among host_ids."""
    hosts = sorted(host_ids)
    h = mix(fnv1a(fnv1a(fnv1a(FNV_BASIS, client_id), "\n"), model))
    return hosts[h % len(hosts)]


def sticky_host(key, host_ids):
    """The host a request with stickiness key `key` goes to among host_ids."""
    hosts = sorted(host_ids)
    return hosts[fnv1a(FNV_BASIS, key) % len(hosts)]

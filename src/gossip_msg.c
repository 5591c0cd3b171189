#include "gossip_msg.h"

#include <errno.h>
#include <string.h>

#include "gossip.h"

const char *const gmsg_type_names[] = {"hb",   "ack",  "update",    "hello",   "sync",
                                       "ping", "pong", "peer_down", "leaving", "dead_notice"};
#define N_TYPES (sizeof gmsg_type_names / sizeof gmsg_type_names[0])
_Static_assert(GMSG_MAX_ARRAY == GOSSIP_MAX_PEERS + 1, "self + peers");

/* --- Validation (everything is checked before anything changes) --- */

bool gmsg_valid_id(const char *s)
{
    return s && strspn(s, "0123456789abcdef") == GOSSIP_ID_LEN && s[GOSSIP_ID_LEN] == '\0';
}

static bool get_u64(const json_t *j, uint64_t *out)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0) return false;
    *out = (uint64_t)json_integer_value(j);
    return true;
}

/* [id, inc, seq] */
bool gmsg_digest_entry(const json_t *e, const char **id, uint64_t *inc, uint64_t *seq)
{
    if (!json_is_array(e) || json_array_size(e) != 3) return false;
    *id = json_string_value(json_array_get(e, 0));
    return gmsg_valid_id(*id) && get_u64(json_array_get(e, 1), inc) &&
           get_u64(json_array_get(e, 2), seq);
}

/* [id, inc, "dead"|"left"] */
bool gmsg_dead_entry(const json_t *e, const char **id, uint64_t *inc, bool *left)
{
    const char *st;
    if (!json_is_array(e) || json_array_size(e) != 3) return false;
    *id = json_string_value(json_array_get(e, 0));
    st = json_string_value(json_array_get(e, 2));
    if (!gmsg_valid_id(*id) || !get_u64(json_array_get(e, 1), inc) || !st) return false;
    *left = !strcmp(st, "left");
    return *left || !strcmp(st, "dead");
}

bool gmsg_ann_fields(json_t *a, const char **id, uint64_t *inc, uint64_t *seq)
{
    json_int_t i, s;
    if (json_unpack(a, "{s:s, s:I, s:I}", "id", id, "incarnation", &i, "seq", &s) < 0) return false;
    if (!gmsg_valid_id(*id) || i < 0 || s < 0) return false;
    *inc = (uint64_t)i;
    *seq = (uint64_t)s;
    return true;
}

static bool check_array(json_t *a, int kind)
{
    size_t i;
    json_t *e;
    const char *id = NULL;
    uint64_t x = 0, y = 0;
    bool l = false;
    if (!a) return true;
    if (!json_is_array(a) || json_array_size(a) > GMSG_MAX_ARRAY) return false;
    json_array_foreach(a, i, e)
    {
        bool ok = kind == 0   ? gmsg_digest_entry(e, &id, &x, &y)
                  : kind == 1 ? gmsg_dead_entry(e, &id, &x, &l)
                  : kind == 2 ? gmsg_ann_fields(e, &id, &x, &y)
                              : gmsg_valid_id(json_string_value(e));
        if (!ok) return false;
    }
    return true;
}

int gmsg_parse(json_t *j, const char *from, struct gmsg *m)
{
    const char *type, *id;
    json_int_t v, inc;
    uint64_t ai = 0, as = 0;
    size_t t;

    memset(m, 0, sizeof *m);
    if (json_unpack(j, "{s:I, s:s, s:I, s?o, s?o, s?o, s?o, s?o, s?b}", "v", &v, "type", &type,
                    "inc", &inc, "digest", &m->digest, "anns", &m->anns, "want", &m->want, "dead",
                    &m->dead, "ann", &m->ann, "join", &m->join) < 0)
        return -EINVAL;
    if (v != 1 || inc < 0) return -EINVAL;
    m->inc = (uint64_t)inc;
    for (t = 0; t < N_TYPES && strcmp(type, gmsg_type_names[t]); t++)
        ;
    if (t == N_TYPES) return -EINVAL;
    m->type = (int)t;
    if ((m->type == M_HB && !m->digest) ||
        ((m->type == M_UPDATE || m->type == M_SYNC) && !m->anns) ||
        ((m->type == M_PEER_DOWN || m->type == M_NOTICE) && !m->dead) ||
        (m->type == M_HELLO && !m->ann))
        return -EINVAL;
    if (!check_array(m->digest, 0) || !check_array(m->dead, 1) || !check_array(m->anns, 2) ||
        !check_array(m->want, 3))
        return -EINVAL;
    /* a hello carries the sender's own announcement at the sender's incarnation */
    if (m->ann && (!gmsg_ann_fields(m->ann, &id, &ai, &as) || strcmp(id, from) || ai != m->inc))
        return -EINVAL;
    return 0;
}

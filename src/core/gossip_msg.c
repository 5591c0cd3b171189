#include "gossip_msg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gossip.h"
#include "identity.h"

const char *const gmsg_type_names[] = {"hb",   "ack",  "update",    "hello",   "sync",
                                       "ping", "pong", "peer_down", "leaving", "dead_notice"};
#define N_TYPES (sizeof gmsg_type_names / sizeof gmsg_type_names[0])
_Static_assert(GMSG_MAX_ARRAY == GOSSIP_MAX_PEERS + 1, "self + peers");
_Static_assert(GMSG_SIG_HEX == 2 * IDENTITY_SIG_LEN, "hex signature");

/* --- Validation (everything is checked before anything changes) --- */

static bool lower_hex(const char *s, size_t n)
{
    return s && strspn(s, "0123456789abcdef") == n && s[n] == '\0';
}

bool gmsg_valid_id(const char *s)
{
    return lower_hex(s, GOSSIP_ID_LEN);
}

bool gmsg_valid_sig(const char *s)
{
    return lower_hex(s, GMSG_SIG_HEX);
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

/* [id, inc, "dead"|"left"] or [id, inc, "left", sig] */
bool gmsg_dead_entry(const json_t *e, struct gmsg_rec *r)
{
    const char *st;
    size_t n = json_is_array(e) ? json_array_size(e) : 0;
    if (n != 3 && n != 4) return false;
    r->id = json_string_value(json_array_get(e, 0));
    st = json_string_value(json_array_get(e, 2));
    if (!gmsg_valid_id(r->id) || !get_u64(json_array_get(e, 1), &r->inc) || !st) return false;
    r->left = !strcmp(st, "left");
    r->sig = n == 4 ? json_string_value(json_array_get(e, 3)) : NULL;
    if (n == 4 && (!r->left || !gmsg_valid_sig(r->sig))) return false;
    return r->left || !strcmp(st, "dead");
}

bool gmsg_ann_fields(json_t *a, const char **id, uint64_t *inc, uint64_t *seq)
{
    json_int_t i, s;
    const char *sig;
    if (json_unpack(a, "{s:s, s:I, s:I, s:s}", "id", id, "incarnation", &i, "seq", &s, "sig",
                    &sig) < 0)
        return false;
    if (!gmsg_valid_id(*id) || i < 0 || s < 0 || !gmsg_valid_sig(sig)) return false;
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
    struct gmsg_rec r;
    if (!a) return true;
    if (!json_is_array(a) || json_array_size(a) > GMSG_MAX_ARRAY) return false;
    json_array_foreach(a, i, e)
    {
        bool ok = kind == 0   ? gmsg_digest_entry(e, &id, &x, &y)
                  : kind == 1 ? gmsg_dead_entry(e, &r)
                  : kind == 2 ? gmsg_ann_fields(e, &id, &x, &y)
                              : gmsg_valid_id(json_string_value(e));
        if (!ok) return false;
    }
    return true;
}

int gmsg_parse(json_t *j, const char *from, uint64_t max_inc, struct gmsg *m)
{
    const char *type, *id;
    json_int_t v, inc;
    uint64_t ai = 0, as = 0;
    size_t t;

    memset(m, 0, sizeof *m);
    if (json_unpack(j, "{s:I, s:s, s:I, s?o, s?o, s?o, s?o, s?o, s?b, s?s}", "v", &v, "type", &type,
                    "inc", &inc, "digest", &m->digest, "anns", &m->anns, "want", &m->want, "dead",
                    &m->dead, "ann", &m->ann, "join", &m->join, "sig", &m->sig) < 0)
        return -EINVAL;
    if (v != 1 || inc < 0 || (uint64_t)inc > max_inc) return -EINVAL;
    m->inc = (uint64_t)inc;
    for (t = 0; t < N_TYPES && strcmp(type, gmsg_type_names[t]); t++)
        ;
    if (t == N_TYPES) return -EINVAL;
    m->type = (int)t;
    if ((m->type == M_HB && !m->digest) ||
        ((m->type == M_UPDATE || m->type == M_SYNC) && !m->anns) ||
        ((m->type == M_PEER_DOWN || m->type == M_NOTICE) && !m->dead) ||
        (m->type == M_HELLO && !m->ann) || (m->type == M_LEAVING && !gmsg_valid_sig(m->sig)))
        return -EINVAL;
    if (!check_array(m->digest, 0) || !check_array(m->dead, 1) || !check_array(m->anns, 2) ||
        !check_array(m->want, 3))
        return -EINVAL;
    /* a hello carries the sender's own announcement at the sender's incarnation */
    if (m->ann && (!gmsg_ann_fields(m->ann, &id, &ai, &as) || strcmp(id, from) || ai != m->inc))
        return -EINVAL;
    return 0;
}

/* --- Signed byte forms --- */

#define ANN_DOMAIN "mesh-llm/1 announcement\n"
#define LEAVE_DOMAIN "mesh-llm/1 leave\n"

char *gmsg_ann_bytes(const json_t *ann, size_t max, size_t *len)
{
    static const size_t dl = sizeof ANN_DOMAIN - 1;
    json_t *c = json_copy((json_t *)ann); /* shallow: only "sig" goes */
    char *js = NULL, *out = NULL;
    size_t n;
    if (!c) return NULL;
    json_object_del(c, "sig");
    js = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(c);
    if (!js || (n = strlen(js)) > max || !(out = malloc(dl + n))) goto out;
    memcpy(out, ANN_DOMAIN, dl);
    memcpy(out + dl, js, n);
    *len = dl + n;
out:
    free(js);
    return out;
}

char *gmsg_leave_bytes(const char *id, uint64_t inc, size_t *len)
{
    char *out = malloc(sizeof LEAVE_DOMAIN + GOSSIP_ID_LEN + 64);
    int n;
    if (!out) return NULL;
    n = snprintf(out, sizeof LEAVE_DOMAIN + GOSSIP_ID_LEN + 64,
                 LEAVE_DOMAIN "{\"id\":\"%s\",\"incarnation\":%llu}", id, (unsigned long long)inc);
    *len = (size_t)n;
    return out;
}

void gmsg_sign_hex(gmsg_sign_fn sign, void *data, const char *bytes, size_t len, char *hex)
{
    uint8_t sig[IDENTITY_SIG_LEN];
    sign(data, (const uint8_t *)bytes, len, sig);
    hex_encode(sig, sizeof sig, hex);
}

int gmsg_ann_sign(json_t *ann, gmsg_sign_fn sign, void *data)
{
    char hex[GMSG_SIG_HEX + 1];
    size_t len = 0;
    char *b = gmsg_ann_bytes(ann, SIZE_MAX, &len);
    if (!b) return -ENOMEM;
    gmsg_sign_hex(sign, data, b, len, hex);
    free(b);
    return json_object_set_new(ann, "sig", json_string(hex)) < 0 ? -ENOMEM : 0;
}

static bool verify_hex(const char *id, const char *bytes, size_t len, const char *hex)
{
    uint8_t sig[IDENTITY_SIG_LEN];
    return gmsg_valid_sig(hex) && hex_decode(hex, GMSG_SIG_HEX, sig, sizeof sig) == 0 &&
           identity_verify(id, bytes, len, sig);
}

bool gmsg_ann_verify(const json_t *ann, size_t max)
{
    size_t len = 0;
    const char *id = json_string_value(json_object_get(ann, "id"));
    char *b = gmsg_valid_id(id) ? gmsg_ann_bytes(ann, max, &len) : NULL;
    bool ok = b && verify_hex(id, b, len, json_string_value(json_object_get(ann, "sig")));
    free(b);
    return ok;
}

bool gmsg_leave_verify(const char *id, uint64_t inc, const char *sig)
{
    size_t len = 0;
    char *b = gmsg_valid_id(id) ? gmsg_leave_bytes(id, inc, &len) : NULL;
    bool ok = b && verify_hex(id, b, len, sig);
    free(b);
    return ok;
}

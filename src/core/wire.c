#include "wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *wire_type_name(int type)
{
    switch (type) {
    case WIRE_GOSSIP:
        return "GOSSIP";
    case WIRE_TUNNEL_RPC:
        return "TUNNEL_RPC";
    case WIRE_TUNNEL_MAP:
        return "TUNNEL_MAP";
    case WIRE_TUNNEL_HTTP:
        return "TUNNEL_HTTP";
    case WIRE_ROUTE_REQUEST:
        return "ROUTE_REQUEST";
    case WIRE_PEER_DOWN:
        return "PEER_DOWN";
    case WIRE_PEER_LEAVING:
        return "PEER_LEAVING";
    case WIRE_NAT:
        return "NAT";
    default:
        return "unknown";
    }
}

void wire_reader_init(wire_reader_t *r, int expect_type)
{
    memset(r, 0, sizeof *r);
    r->type = expect_type ? -1 : 0;
    buf_init(&r->body, WIRE_MAX_FRAME);
}

void wire_reader_free(wire_reader_t *r)
{
    buf_free(&r->body);
}

ssize_t wire_read(wire_reader_t *r, const uint8_t *p, size_t n, json_t **frame)
{
    size_t used = 0;
    *frame = NULL;
    if (r->type < 0) {
        if (n == 0) return 0;
        if (p[0] < WIRE_GOSSIP || p[0] > WIRE_NAT) return -EPROTO;
        r->type = p[0];
        used = 1;
    }
    while (r->lenhave < 4 && used < n)
        r->lenb[r->lenhave++] = p[used++];
    if (r->lenhave < 4) return (ssize_t)used;
    if (r->need == 0) {
        uint32_t len = (uint32_t)r->lenb[0] << 24 | (uint32_t)r->lenb[1] << 16 |
                       (uint32_t)r->lenb[2] << 8 | r->lenb[3];
        if (len == 0 || len > WIRE_MAX_FRAME) return -EMSGSIZE;
        r->need = len;
    }
    size_t take = r->need - r->body.len;
    if (take > n - used) take = n - used;
    if (take && buf_append(&r->body, p + used, take) != 0) return -ENOMEM;
    used += take;
    if (r->body.len < r->need) return (ssize_t)used;

    json_error_t je;
    json_t *o = json_loadb(r->body.data, r->body.len, JSON_REJECT_DUPLICATES, &je);
    buf_reset(&r->body);
    r->need = 0;
    r->lenhave = 0;
    if (!o || !json_is_object(o) || json_integer_value(json_object_get(o, "v")) != 1 ||
        !json_is_integer(json_object_get(o, "v"))) {
        json_decref(o);
        return -EBADMSG;
    }
    r->frames++;
    *frame = o;
    return (ssize_t)used;
}

int wire_write(buf_t *out, int type, json_t *frame)
{
    if (!json_object_get(frame, "v")) json_object_set_new(frame, "v", json_integer(1));
    char *js = json_dumps(frame, JSON_COMPACT);
    if (!js) return -ENOMEM;
    size_t len = strlen(js);
    int rc = 0;
    if (len > WIRE_MAX_FRAME) {
        rc = -EMSGSIZE;
        goto out;
    }
    uint8_t hdr[5];
    size_t h = 0;
    if (type >= 0) hdr[h++] = (uint8_t)type;
    hdr[h++] = (uint8_t)(len >> 24);
    hdr[h++] = (uint8_t)(len >> 16);
    hdr[h++] = (uint8_t)(len >> 8);
    hdr[h++] = (uint8_t)len;
    rc = buf_append(out, hdr, h);
    if (rc == 0) rc = buf_append(out, js, len);
out:
    free(js);
    return rc;
}

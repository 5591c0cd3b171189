/* STUN/TURN codec (stun.h). */
#include "stun.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define FINGERPRINT_XOR 0x5354554eu
#define HMAC_SHA1_LEN 20

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static size_t pad4(size_t n)
{
    return (n + 3) & ~(size_t)3;
}

uint32_t stun_crc32(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

bool stun_is_stun(const uint8_t *p, size_t n)
{
    if (!p || n < STUN_HEADER_LEN || (p[0] & 0xC0) != 0) return false;
    size_t len = rd16(p + 2);
    return rd32(p + 4) == STUN_MAGIC && len % 4 == 0 && STUN_HEADER_LEN + len <= n;
}

int stun_channel_data_decode(const uint8_t *p, size_t n, uint16_t *channel, stun_bytes_t *data)
{
    if (!p || n < STUN_CHANNEL_HEADER_LEN) return -EINVAL;
    uint16_t ch = rd16(p);
    size_t len = rd16(p + 2);
    if (ch < STUN_CHANNEL_MIN || ch > STUN_CHANNEL_MAX) return -EINVAL;
    if (STUN_CHANNEL_HEADER_LEN + len > n || n > STUN_CHANNEL_HEADER_LEN + pad4(len))
        return -EINVAL;
    if (channel) *channel = ch;
    if (data) {
        data->p = p + STUN_CHANNEL_HEADER_LEN;
        data->n = len;
    }
    return 0;
}

bool stun_is_channel_data(const uint8_t *p, size_t n)
{
    return stun_channel_data_decode(p, n, NULL, NULL) == 0;
}

int stun_channel_data_encode(uint8_t *buf, size_t cap, uint16_t channel, const uint8_t *data,
                             size_t n)
{
    if (channel < STUN_CHANNEL_MIN || channel > STUN_CHANNEL_MAX || n > 0xFFFF || (n && !data))
        return -EINVAL;
    size_t total = STUN_CHANNEL_HEADER_LEN + pad4(n);
    if (!buf || total > cap) return -ENOBUFS;
    wr16(buf, channel);
    wr16(buf + 2, (uint16_t)n);
    if (n) memmove(buf + STUN_CHANNEL_HEADER_LEN, data, n);
    memset(buf + STUN_CHANNEL_HEADER_LEN + n, 0, total - STUN_CHANNEL_HEADER_LEN - n);
    return (int)total;
}

uint16_t stun_type(uint16_t method, uint16_t cls)
{
    return (uint16_t)((method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2) |
                      (cls & 0x0110));
}

uint16_t stun_type_method(uint16_t t)
{
    return (uint16_t)((t & 0x000F) | ((t & 0x00E0) >> 1) | ((t & 0x3E00) >> 2));
}

uint16_t stun_type_class(uint16_t t)
{
    return (uint16_t)(t & 0x0110);
}

/* --- decoding --- */

static int decode_addr(const uint8_t *v, size_t n, bool xor, const uint8_t *tid, stun_addr_t *a)
{
    if (n < 4) return -EINVAL;
    memset(a, 0, sizeof *a);
    uint8_t fam = v[1];
    size_t iplen = fam == 0x01 ? 4 : fam == 0x02 ? 16 : 0;
    if (!iplen || n != 4 + iplen) return -EINVAL;
    a->family = fam == 0x01 ? 4 : 6;
    a->port = rd16(v + 2);
    memcpy(a->ip, v + 4, iplen);
    if (xor) {
        uint8_t mask[16];
        wr32(mask, STUN_MAGIC);
        memcpy(mask + 4, tid, STUN_TID_LEN);
        a->port ^= (uint16_t)(STUN_MAGIC >> 16);
        for (size_t i = 0; i < iplen; i++)
            a->ip[i] ^= mask[i];
    }
    return 0;
}

int stun_decode_error_code(const uint8_t *v, size_t n)
{
    if (!v || n < 4) return -EINVAL;
    int cls = v[2] & 0x07, num = v[3];
    if (cls < 3 || cls > 6 || num > 99) return -EINVAL;
    return cls * 100 + num;
}

static bool known_attr(uint16_t t)
{
    switch (t) {
    case STUN_A_MAPPED_ADDRESS:
    case STUN_A_USERNAME:
    case STUN_A_MESSAGE_INTEGRITY:
    case STUN_A_ERROR_CODE:
    case STUN_A_UNKNOWN_ATTRIBUTES:
    case STUN_A_CHANNEL_NUMBER:
    case STUN_A_LIFETIME:
    case STUN_A_XOR_PEER_ADDRESS:
    case STUN_A_DATA:
    case STUN_A_REALM:
    case STUN_A_NONCE:
    case STUN_A_XOR_RELAYED_ADDRESS:
    case STUN_A_REQUESTED_ADDRESS_FAMILY:
    case STUN_A_EVEN_PORT:
    case STUN_A_REQUESTED_TRANSPORT:
    case STUN_A_DONT_FRAGMENT:
    case STUN_A_MESSAGE_INTEGRITY_SHA256:
    case STUN_A_PASSWORD_ALGORITHM:
    case STUN_A_USERHASH:
    case STUN_A_XOR_MAPPED_ADDRESS:
    case STUN_A_RESERVATION_TOKEN:
    case STUN_A_PRIORITY:
    case STUN_A_USE_CANDIDATE:
        return true;
    default:
        return t >= 0x8000; /* comprehension-optional: ignored when unknown */
    }
}

static int set_bytes(stun_msg_t *m, unsigned bit, stun_bytes_t *b, const uint8_t *v, size_t n,
                     size_t max)
{
    if (n > max) return -EINVAL;
    if (!(m->have & bit)) {
        b->p = v;
        b->n = n;
        m->have |= bit;
    }
    return 0;
}

static int set_addr(stun_msg_t *m, unsigned bit, stun_addr_t *a, const uint8_t *v, size_t n,
                    bool xor)
{
    stun_addr_t tmp;
    if (decode_addr(v, n, xor, m->tid, &tmp) < 0) return -EINVAL;
    if (!(m->have & bit)) {
        *a = tmp;
        m->have |= bit;
    }
    return 0;
}

static int decode_attr(stun_msg_t *m, uint16_t t, const uint8_t *v, size_t n)
{
    switch (t) {
    case STUN_A_MAPPED_ADDRESS:
        return set_addr(m, STUN_HAVE_MAPPED, &m->mapped, v, n, false);
    case STUN_A_XOR_MAPPED_ADDRESS:
        return set_addr(m, STUN_HAVE_XOR_MAPPED, &m->xor_mapped, v, n, true);
    case STUN_A_XOR_RELAYED_ADDRESS:
        return set_addr(m, STUN_HAVE_XOR_RELAYED, &m->xor_relayed, v, n, true);
    case STUN_A_XOR_PEER_ADDRESS:
        return set_addr(m, STUN_HAVE_XOR_PEER, &m->xor_peer, v, n, true);
    case STUN_A_LIFETIME:
        if (n != 4) return -EINVAL;
        if (!(m->have & STUN_HAVE_LIFETIME)) m->lifetime = rd32(v);
        m->have |= STUN_HAVE_LIFETIME;
        return 0;
    case STUN_A_CHANNEL_NUMBER:
        if (n != 4) return -EINVAL;
        if (!(m->have & STUN_HAVE_CHANNEL)) m->channel = rd16(v);
        m->have |= STUN_HAVE_CHANNEL;
        return 0;
    case STUN_A_REQUESTED_TRANSPORT:
        if (n != 4) return -EINVAL;
        if (!(m->have & STUN_HAVE_TRANSPORT)) m->transport = v[0];
        m->have |= STUN_HAVE_TRANSPORT;
        return 0;
    case STUN_A_ERROR_CODE: {
        int code = stun_decode_error_code(v, n);
        if (code < 0 || n - 4 > STUN_MAX_STRING) return -EINVAL;
        if (!(m->have & STUN_HAVE_ERROR)) {
            m->error_code = (uint16_t)code;
            m->error_reason.p = v + 4;
            m->error_reason.n = n - 4;
        }
        m->have |= STUN_HAVE_ERROR;
        return 0;
    }
    case STUN_A_REALM:
        return set_bytes(m, STUN_HAVE_REALM, &m->realm, v, n, STUN_MAX_STRING);
    case STUN_A_NONCE:
        return set_bytes(m, STUN_HAVE_NONCE, &m->nonce, v, n, STUN_MAX_STRING);
    case STUN_A_SOFTWARE:
        return set_bytes(m, STUN_HAVE_SOFTWARE, &m->software, v, n, STUN_MAX_STRING);
    case STUN_A_USERNAME:
        return set_bytes(m, STUN_HAVE_USERNAME, &m->username, v, n, STUN_MAX_USERNAME);
    case STUN_A_DATA:
        return set_bytes(m, STUN_HAVE_DATA, &m->data, v, n, 0xFFFF);
    default:
        if (!known_attr(t)) {
            if (m->n_unknown < STUN_MAX_UNKNOWN) m->unknown[m->n_unknown] = t;
            m->n_unknown++;
        }
        return 0;
    }
}

int stun_decode(const uint8_t *p, size_t n, stun_msg_t *m)
{
    if (!m) return -EINVAL;
    memset(m, 0, sizeof *m);
    if (!stun_is_stun(p, n)) return -EINVAL;
    uint16_t type = rd16(p);
    m->method = stun_type_method(type);
    m->cls = stun_type_class(type);
    memcpy(m->tid, p + 8, STUN_TID_LEN);
    size_t end = STUN_HEADER_LEN + rd16(p + 2);
    m->len = end;
    bool fingerprint = false;
    for (size_t off = STUN_HEADER_LEN; off < end;) {
        if (end - off < 4) return -EINVAL;
        uint16_t t = rd16(p + off);
        size_t alen = rd16(p + off + 2);
        if (pad4(alen) > end - off - 4) return -EINVAL;
        if (++m->n_attrs > STUN_MAX_ATTRS) return -EINVAL;
        if (fingerprint) return -EBADMSG; /* FINGERPRINT must be last */
        const uint8_t *v = p + off + 4;
        if (t == STUN_A_FINGERPRINT) {
            if (alen != 4) return -EINVAL;
            if ((stun_crc32(p, off) ^ FINGERPRINT_XOR) != rd32(v)) return -EBADMSG;
            fingerprint = true;
            m->have |= STUN_HAVE_FINGERPRINT;
        } else if (m->have & STUN_HAVE_INTEGRITY) {
            /* after MESSAGE-INTEGRITY: ignored */
        } else if (t == STUN_A_MESSAGE_INTEGRITY) {
            if (alen != HMAC_SHA1_LEN) return -EINVAL;
            m->integrity_at = off;
            m->have |= STUN_HAVE_INTEGRITY;
        } else {
            int rc = decode_attr(m, t, v, alen);
            if (rc < 0) return rc;
        }
        off += 4 + pad4(alen);
    }
    return 0;
}

int stun_check_integrity(const uint8_t *p, size_t n, const stun_msg_t *m, const uint8_t *key,
                         size_t keylen)
{
    if (!p || !m || !(m->have & STUN_HAVE_INTEGRITY)) return -ENOENT;
    size_t at = m->integrity_at;
    if (at < STUN_HEADER_LEN || at + 4 + HMAC_SHA1_LEN > n || at + 4 + HMAC_SHA1_LEN > m->len)
        return -ENOENT;
    /* the HMAC covers the message up to MESSAGE-INTEGRITY with the length field ending it */
    uint8_t hdr[4];
    memcpy(hdr, p, 2);
    wr16(hdr + 2, (uint16_t)(at + 4 + HMAC_SHA1_LEN - STUN_HEADER_LEN));
    gnutls_hmac_hd_t h;
    if (gnutls_hmac_init(&h, GNUTLS_MAC_SHA1, key, keylen) < 0) return -EIO;
    uint8_t mac[HMAC_SHA1_LEN];
    int rc = gnutls_hmac(h, hdr, sizeof hdr);
    if (rc >= 0) rc = gnutls_hmac(h, p + 4, at - 4);
    gnutls_hmac_deinit(h, mac);
    if (rc < 0) return -EIO;
    return sodium_memcmp(mac, p + at + 4, HMAC_SHA1_LEN) == 0 ? 0 : -EACCES;
}

/* --- addresses --- */

bool stun_addr_equal(const stun_addr_t *a, const stun_addr_t *b)
{
    return a->family == b->family && a->port == b->port &&
           memcmp(a->ip, b->ip, a->family == 4 ? 4 : 16) == 0;
}

const char *stun_addr_str(const stun_addr_t *a, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN];
    if (!out || cap == 0) return "?";
    if (!inet_ntop(a->family == 4 ? AF_INET : AF_INET6, a->ip, ip, sizeof ip)) {
        snprintf(out, cap, "?");
        return out;
    }
    int w = snprintf(out, cap, a->family == 4 ? "%s:%u" : "[%s]:%u", ip, (unsigned)a->port);
    if (w < 0 || (size_t)w >= cap) snprintf(out, cap, "?");
    return out;
}

int stun_addr_parse(const char *s, stun_addr_t *a)
{
    if (!s || !a) return -EINVAL;
    memset(a, 0, sizeof *a);
    char host[INET6_ADDRSTRLEN + 2];
    const char *port;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':' || (size_t)(close - s - 1) >= sizeof host) return -EINVAL;
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = '\0';
        port = close + 2;
        if (inet_pton(AF_INET6, host, a->ip) != 1) return -EINVAL;
        a->family = 6;
    } else {
        const char *colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= sizeof host) return -EINVAL;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
        port = colon + 1;
        if (inet_pton(AF_INET, host, a->ip) != 1) return -EINVAL;
        a->family = 4;
    }
    unsigned long v = 0;
    if (!*port || strlen(port) > 5) return -EINVAL;
    for (const char *c = port; *c; c++) {
        if (*c < '0' || *c > '9') return -EINVAL;
        v = v * 10 + (unsigned long)(*c - '0');
    }
    if (v == 0 || v > 65535) return -EINVAL;
    a->port = (uint16_t)v;
    return 0;
}

int stun_addr_from_sockaddr(const struct sockaddr *sa, stun_addr_t *a)
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(a, 0, sizeof *a);
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        a->family = 4;
        a->port = ntohs(s4->sin_port);
        memcpy(a->ip, &s4->sin_addr, 4);
        return 0;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        const uint8_t *ip = (const uint8_t *)&s6->sin6_addr;
        a->port = ntohs(s6->sin6_port);
        if (memcmp(ip, v4mapped, sizeof v4mapped) == 0) {
            a->family = 4;
            memcpy(a->ip, ip + 12, 4);
        } else {
            a->family = 6;
            memcpy(a->ip, ip, 16);
        }
        return 0;
    }
    return -EAFNOSUPPORT;
}

int stun_addr_to_sockaddr(const stun_addr_t *a, int af, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (!a || (a->family != 4 && a->family != 6)) return -EINVAL;
    if (af == AF_INET) {
        if (a->family != 4) return -EAFNOSUPPORT;
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(a->port);
        memcpy(&s4->sin_addr, a->ip, 4);
        return 0;
    }
    if (af != AF_INET6) return -EAFNOSUPPORT;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(a->port);
    uint8_t *ip = (uint8_t *)&s6->sin6_addr;
    if (a->family == 4) {
        ip[10] = ip[11] = 0xff;
        memcpy(ip + 12, a->ip, 4);
    } else {
        memcpy(ip, a->ip, 16);
    }
    return 0;
}

/* --- credentials --- */

int stun_long_term_key(const char *username, const char *realm, size_t realm_len,
                       const char *password, uint8_t key[STUN_KEY_LEN])
{
    if (!username || !password || (!realm && realm_len)) return -EINVAL;
    size_t ul = strlen(username), pl = strlen(password);
    uint8_t buf[STUN_MAX_USERNAME + STUN_MAX_STRING + 256 + 2];
    if (ul > STUN_MAX_USERNAME || realm_len > STUN_MAX_STRING || pl > 256) return -EINVAL;
    size_t n = 0;
    memcpy(buf + n, username, ul);
    n += ul;
    buf[n++] = ':';
    if (realm_len) memcpy(buf + n, realm, realm_len);
    n += realm_len;
    buf[n++] = ':';
    memcpy(buf + n, password, pl);
    n += pl;
    int rc = gnutls_hash_fast(GNUTLS_DIG_MD5, buf, n, key);
    sodium_memzero(buf, sizeof buf);
    return rc < 0 ? -EIO : 0;
}

/* --- encoding --- */

void stun_enc_init(stun_enc_t *e, uint8_t *buf, size_t cap, uint16_t method, uint16_t cls,
                   const uint8_t tid[STUN_TID_LEN])
{
    memset(e, 0, sizeof *e);
    e->buf = buf;
    e->cap = cap;
    memcpy(e->tid, tid, STUN_TID_LEN);
    if (!buf || cap < STUN_HEADER_LEN) {
        e->err = -ENOBUFS;
        return;
    }
    if (method > 0xFFF) {
        e->err = -EINVAL;
        return;
    }
    wr16(buf, stun_type(method, cls));
    wr16(buf + 2, 0);
    wr32(buf + 4, STUN_MAGIC);
    memcpy(buf + 8, tid, STUN_TID_LEN);
    e->len = STUN_HEADER_LEN;
}

static void set_len(stun_enc_t *e, size_t body)
{
    wr16(e->buf + 2, (uint16_t)body);
}

void stun_enc_attr(stun_enc_t *e, uint16_t type, const void *v, size_t n)
{
    if (e->err) return;
    if (n > 0xFFFF || (n && !v)) {
        e->err = -EINVAL;
        return;
    }
    size_t total = 4 + pad4(n);
    if (total > e->cap - e->len || e->len + total - STUN_HEADER_LEN > 0xFFFF) {
        e->err = -ENOBUFS;
        return;
    }
    uint8_t *p = e->buf + e->len;
    wr16(p, type);
    wr16(p + 2, (uint16_t)n);
    if (n) memcpy(p + 4, v, n);
    memset(p + 4 + n, 0, total - 4 - n);
    e->len += total;
    set_len(e, e->len - STUN_HEADER_LEN);
}

void stun_enc_u32(stun_enc_t *e, uint16_t type, uint32_t v)
{
    uint8_t b[4];
    wr32(b, v);
    stun_enc_attr(e, type, b, 4);
}

void stun_enc_addr(stun_enc_t *e, uint16_t type, const stun_addr_t *a, bool xor)
{
    if (e->err) return;
    if (!a || (a->family != 4 && a->family != 6)) {
        e->err = -EINVAL;
        return;
    }
    size_t iplen = a->family == 4 ? 4 : 16;
    uint8_t v[20] = {0};
    v[1] = a->family == 4 ? 0x01 : 0x02;
    wr16(v + 2, xor? (uint16_t)(a->port ^ (STUN_MAGIC >> 16)) : a->port);
    memcpy(v + 4, a->ip, iplen);
    if (xor) {
        uint8_t mask[16];
        wr32(mask, STUN_MAGIC);
        memcpy(mask + 4, e->tid, STUN_TID_LEN);
        for (size_t i = 0; i < iplen; i++)
            v[4 + i] ^= mask[i];
    }
    stun_enc_attr(e, type, v, 4 + iplen);
}

void stun_enc_error(stun_enc_t *e, int code, const char *reason)
{
    if (e->err) return;
    size_t rl = reason ? strlen(reason) : 0;
    if (code < 300 || code > 699 || rl > STUN_MAX_STRING) {
        e->err = -EINVAL;
        return;
    }
    uint8_t v[4 + STUN_MAX_STRING] = {0};
    v[2] = (uint8_t)(code / 100);
    v[3] = (uint8_t)(code % 100);
    if (rl) memcpy(v + 4, reason, rl);
    stun_enc_attr(e, STUN_A_ERROR_CODE, v, 4 + rl);
}

void stun_enc_integrity(stun_enc_t *e, const uint8_t *key, size_t keylen)
{
    if (e->err) return;
    if (4 + HMAC_SHA1_LEN > e->cap - e->len) {
        e->err = -ENOBUFS;
        return;
    }
    set_len(e, e->len - STUN_HEADER_LEN + 4 + HMAC_SHA1_LEN);
    uint8_t mac[HMAC_SHA1_LEN];
    if (gnutls_hmac_fast(GNUTLS_MAC_SHA1, key, keylen, e->buf, e->len, mac) < 0) {
        e->err = -EIO;
        return;
    }
    stun_enc_attr(e, STUN_A_MESSAGE_INTEGRITY, mac, sizeof mac);
}

void stun_enc_fingerprint(stun_enc_t *e)
{
    if (e->err) return;
    if (8 > e->cap - e->len) {
        e->err = -ENOBUFS;
        return;
    }
    set_len(e, e->len - STUN_HEADER_LEN + 8);
    stun_enc_u32(e, STUN_A_FINGERPRINT, stun_crc32(e->buf, e->len) ^ FINGERPRINT_XOR);
}

int stun_enc_finish(stun_enc_t *e)
{
    return e->err ? e->err : (int)e->len;
}

/* --- TURN client messages --- */

static void enc_cred(stun_enc_t *e, const stun_cred_t *cred)
{
    if (!cred) return;
    stun_enc_attr(e, STUN_A_USERNAME, cred->username, cred->username ? strlen(cred->username) : 0);
    stun_enc_attr(e, STUN_A_REALM, cred->realm, cred->realm_len);
    stun_enc_attr(e, STUN_A_NONCE, cred->nonce, cred->nonce_len);
}

static int enc_end(stun_enc_t *e, const stun_cred_t *cred)
{
    if (cred) stun_enc_integrity(e, cred->key, STUN_KEY_LEN);
    stun_enc_fingerprint(e);
    return stun_enc_finish(e);
}

int stun_encode_binding(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN])
{
    stun_enc_t e;
    stun_enc_init(&e, buf, cap, STUN_BINDING, STUN_REQUEST, tid);
    return enc_end(&e, NULL);
}

int stun_encode_allocate(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN],
                         const stun_cred_t *cred, uint32_t lifetime)
{
    stun_enc_t e;
    stun_enc_init(&e, buf, cap, STUN_ALLOCATE, STUN_REQUEST, tid);
    stun_enc_u32(&e, STUN_A_REQUESTED_TRANSPORT, 17u << 24); /* UDP */
    if (lifetime) stun_enc_u32(&e, STUN_A_LIFETIME, lifetime);
    enc_cred(&e, cred);
    return enc_end(&e, cred);
}

int stun_encode_refresh(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN],
                        const stun_cred_t *cred, uint32_t lifetime)
{
    stun_enc_t e;
    stun_enc_init(&e, buf, cap, STUN_REFRESH, STUN_REQUEST, tid);
    stun_enc_u32(&e, STUN_A_LIFETIME, lifetime);
    enc_cred(&e, cred);
    return enc_end(&e, cred);
}

int stun_encode_create_permission(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN],
                                  const stun_cred_t *cred, const stun_addr_t *peer)
{
    stun_enc_t e;
    stun_enc_init(&e, buf, cap, STUN_CREATE_PERMISSION, STUN_REQUEST, tid);
    stun_enc_addr(&e, STUN_A_XOR_PEER_ADDRESS, peer, true);
    enc_cred(&e, cred);
    return enc_end(&e, cred);
}

int stun_encode_channel_bind(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN],
                             const stun_cred_t *cred, uint16_t channel, const stun_addr_t *peer)
{
    if (channel < STUN_CHANNEL_MIN || channel > STUN_CHANNEL_MAX) return -EINVAL;
    stun_enc_t e;
    stun_enc_init(&e, buf, cap, STUN_CHANNEL_BIND, STUN_REQUEST, tid);
    stun_enc_u32(&e, STUN_A_CHANNEL_NUMBER, (uint32_t)channel << 16);
    stun_enc_addr(&e, STUN_A_XOR_PEER_ADDRESS, peer, true);
    enc_cred(&e, cred);
    return enc_end(&e, cred);
}

int stun_encode_send(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN],
                     const stun_addr_t *peer, const uint8_t *data, size_t n)
{
    stun_enc_t e;
    stun_enc_init(&e, buf, cap, STUN_SEND, STUN_INDICATION, tid);
    stun_enc_addr(&e, STUN_A_XOR_PEER_ADDRESS, peer, true);
    stun_enc_attr(&e, STUN_A_DATA, data, n);
    return stun_enc_finish(&e);
}

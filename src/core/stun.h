/* STUN (RFC 8489, was 5389) and TURN (RFC 8656, was 5766) messages over UDP: a pure codec.
 *
 * Encoding writes into a caller buffer (stun_enc_*: a builder that checks every length against
 * the buffer's cap and latches the first error); decoding reads a datagram into a stun_msg_t whose
 * byte fields point into that datagram (no copy, no allocation). Long-term credentials: the key is
 * MD5(username ":" realm ":" password) (stun_long_term_key; the password is used as given: no
 * SASLprep, so ASCII passwords only), MESSAGE-INTEGRITY is HMAC-SHA1 with it (GnuTLS).
 *
 * On a UDP socket shared with QUIC, the first byte tells the protocols apart (RFC 7983):
 * 0-3 STUN (stun_is_stun also checks the magic cookie), 64-79 ChannelData (stun_is_channel_data),
 * QUIC long headers start at 0xc0 and short headers at 0x40 with the fixed bit, so a QUIC short
 * header packet can look like ChannelData: the transport must only treat datagrams from the TURN
 * server's address as TURN. */
#ifndef MESH_CORE_STUN_H
#define MESH_CORE_STUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STUN_HEADER_LEN 20
#define STUN_MAGIC 0x2112A442u
#define STUN_TID_LEN 12
#define STUN_MAX_ATTRS 32   /* a message with more is rejected */
#define STUN_MAX_UNKNOWN 8  /* unknown comprehension-required types recorded (counted beyond) */
#define STUN_KEY_LEN 16     /* MD5 */
#define STUN_MAX_STRING 763 /* REALM, NONCE, SOFTWARE, ERROR reason: RFC 8489's < 128 chars */
#define STUN_MAX_USERNAME 513
#define STUN_CHANNEL_MIN 0x4000
#define STUN_CHANNEL_MAX 0x7FFF
#define STUN_CHANNEL_HEADER_LEN 4

/* methods */
enum {
    STUN_BINDING = 0x001,
    STUN_ALLOCATE = 0x003,
    STUN_REFRESH = 0x004,
    STUN_SEND = 0x006,
    STUN_DATA = 0x007,
    STUN_CREATE_PERMISSION = 0x008,
    STUN_CHANNEL_BIND = 0x009,
};

/* classes (the C1 C0 bits in place) */
enum {
    STUN_REQUEST = 0x000,
    STUN_INDICATION = 0x010,
    STUN_SUCCESS = 0x100,
    STUN_ERROR = 0x110,
};

/* attributes */
enum {
    STUN_A_MAPPED_ADDRESS = 0x0001,
    STUN_A_USERNAME = 0x0006,
    STUN_A_MESSAGE_INTEGRITY = 0x0008,
    STUN_A_ERROR_CODE = 0x0009,
    STUN_A_UNKNOWN_ATTRIBUTES = 0x000A,
    STUN_A_CHANNEL_NUMBER = 0x000C,
    STUN_A_LIFETIME = 0x000D,
    STUN_A_XOR_PEER_ADDRESS = 0x0012,
    STUN_A_DATA = 0x0013,
    STUN_A_REALM = 0x0014,
    STUN_A_NONCE = 0x0015,
    STUN_A_XOR_RELAYED_ADDRESS = 0x0016,
    STUN_A_REQUESTED_ADDRESS_FAMILY = 0x0017,
    STUN_A_EVEN_PORT = 0x0018,
    STUN_A_REQUESTED_TRANSPORT = 0x0019,
    STUN_A_DONT_FRAGMENT = 0x001A,
    STUN_A_MESSAGE_INTEGRITY_SHA256 = 0x001C,
    STUN_A_PASSWORD_ALGORITHM = 0x001D,
    STUN_A_USERHASH = 0x001E,
    STUN_A_XOR_MAPPED_ADDRESS = 0x0020,
    STUN_A_RESERVATION_TOKEN = 0x0022,
    STUN_A_PRIORITY = 0x0024,
    STUN_A_USE_CANDIDATE = 0x0025,
    STUN_A_PASSWORD_ALGORITHMS = 0x8002,
    STUN_A_ALTERNATE_DOMAIN = 0x8003,
    STUN_A_SOFTWARE = 0x8022,
    STUN_A_ALTERNATE_SERVER = 0x8023,
    STUN_A_FINGERPRINT = 0x8028,
    STUN_A_ICE_CONTROLLED = 0x8029,
    STUN_A_ICE_CONTROLLING = 0x802A,
    STUN_A_RESPONSE_ORIGIN = 0x802B,
    STUN_A_OTHER_ADDRESS = 0x802C,
};

/* which attributes a decoded message had (stun_msg_t.have) */
enum {
    STUN_HAVE_MAPPED = 1u << 0,
    STUN_HAVE_XOR_MAPPED = 1u << 1,
    STUN_HAVE_XOR_RELAYED = 1u << 2,
    STUN_HAVE_XOR_PEER = 1u << 3,
    STUN_HAVE_LIFETIME = 1u << 4,
    STUN_HAVE_ERROR = 1u << 5,
    STUN_HAVE_REALM = 1u << 6,
    STUN_HAVE_NONCE = 1u << 7,
    STUN_HAVE_DATA = 1u << 8,
    STUN_HAVE_INTEGRITY = 1u << 9,
    STUN_HAVE_FINGERPRINT = 1u << 10,
    STUN_HAVE_USERNAME = 1u << 11,
    STUN_HAVE_SOFTWARE = 1u << 12,
    STUN_HAVE_CHANNEL = 1u << 13,
    STUN_HAVE_TRANSPORT = 1u << 14,
};

/* a transport address: family 4 or 6, ip in network order (4 or 16 bytes used) */
typedef struct {
    uint8_t family;
    uint16_t port;
    uint8_t ip[16];
} stun_addr_t;

typedef struct {
    const uint8_t *p;
    size_t n;
} stun_bytes_t;

typedef struct {
    uint16_t method; /* STUN_BINDING ... */
    uint16_t cls;    /* STUN_REQUEST ... */
    uint8_t tid[STUN_TID_LEN];
    size_t len; /* the whole message, header included (<= the datagram) */
    unsigned have;
    size_t n_attrs;
    stun_addr_t mapped, xor_mapped, xor_relayed, xor_peer;
    uint32_t lifetime;
    uint16_t error_code; /* 300..699 */
    stun_bytes_t error_reason, realm, nonce, data, username, software;
    uint16_t channel;
    uint8_t transport;   /* REQUESTED-TRANSPORT protocol number */
    size_t integrity_at; /* offset of the MESSAGE-INTEGRITY attribute's header */
    uint16_t unknown[STUN_MAX_UNKNOWN];
    size_t n_unknown; /* unknown comprehension-required attributes; may exceed STUN_MAX_UNKNOWN */
} stun_msg_t;

/* --- classifiers (a datagram's first bytes) --- */
/* a STUN message: top two bits 0, the magic cookie, a length that is a multiple of 4 and fits */
bool stun_is_stun(const uint8_t *p, size_t n);
/* a ChannelData message: channel 0x4000-0x7FFF and a length that fits in n */
bool stun_is_channel_data(const uint8_t *p, size_t n);

/* --- message type --- */
uint16_t stun_type(uint16_t method, uint16_t cls);
uint16_t stun_type_method(uint16_t type);
uint16_t stun_type_class(uint16_t type);

/* --- decoding --- */
/* Decodes the STUN message at the front of p[0..n) into *m. 0, or -EINVAL (not STUN, truncated,
 * an attribute past the message, malformed known attribute, too many attributes), -EBADMSG (a
 * FINGERPRINT that does not match, or one that is not last). Attributes after MESSAGE-INTEGRITY
 * other than FINGERPRINT are ignored (RFC 8489 14.5). Repeated attributes: the first counts. */
int stun_decode(const uint8_t *p, size_t n, stun_msg_t *m);
/* MESSAGE-INTEGRITY of a decoded message (p, n as given to stun_decode) under key: 0 if it
 * matches, -ENOENT if the message has none, -EACCES if it does not match */
int stun_check_integrity(const uint8_t *p, size_t n, const stun_msg_t *m, const uint8_t *key,
                         size_t keylen);
/* the error class*100+number of an ERROR-CODE value; -EINVAL if malformed */
int stun_decode_error_code(const uint8_t *v, size_t n);

/* --- addresses --- */
bool stun_addr_equal(const stun_addr_t *a, const stun_addr_t *b);
/* "IP:PORT" ("[IP]:PORT" for IPv6) into out; returns out ("?" when cap is too small) */
const char *stun_addr_str(const stun_addr_t *a, char *out, size_t cap);
/* parses "IP:PORT" / "[IPv6]:PORT" (numeric only); 0 or -EINVAL */
int stun_addr_parse(const char *s, stun_addr_t *a);
struct sockaddr;
struct sockaddr_storage;
/* from a struct sockaddr_in/_in6 (an IPv4-mapped IPv6 address, as a dual-stack socket reports
 * one, becomes the IPv4 address); 0 or -EAFNOSUPPORT */
int stun_addr_from_sockaddr(const struct sockaddr *sa, stun_addr_t *a);
/* into a sockaddr_in/_in6 for the socket's family: af AF_INET6 maps an IPv4 address
 * (::ffff:a.b.c.d, for a dual-stack socket), AF_INET refuses an IPv6 one; 0, -EINVAL,
 * -EAFNOSUPPORT */
int stun_addr_to_sockaddr(const stun_addr_t *a, int af, struct sockaddr_storage *ss);

/* --- long-term credentials --- */
/* key = MD5(username ":" realm ":" password); 0 or -EINVAL (too long) / -EIO (GnuTLS) */
int stun_long_term_key(const char *username, const char *realm, size_t realm_len,
                       const char *password, uint8_t key[STUN_KEY_LEN]);
uint32_t stun_crc32(const uint8_t *p, size_t n);

/* --- encoding: a builder over a caller buffer --- */
typedef struct {
    uint8_t *buf;
    size_t cap;
    size_t len;
    int err; /* the first error (-ENOBUFS, -EINVAL), sticky */
    uint8_t tid[STUN_TID_LEN];
} stun_enc_t;

void stun_enc_init(stun_enc_t *e, uint8_t *buf, size_t cap, uint16_t method, uint16_t cls,
                   const uint8_t tid[STUN_TID_LEN]);
void stun_enc_attr(stun_enc_t *e, uint16_t type, const void *v, size_t n);
void stun_enc_u32(stun_enc_t *e, uint16_t type, uint32_t v);
/* an address attribute; xored (XOR-*) when xor is true */
void stun_enc_addr(stun_enc_t *e, uint16_t type, const stun_addr_t *a, bool xor);
void stun_enc_error(stun_enc_t *e, int code, const char *reason);
/* MESSAGE-INTEGRITY under key (then only FINGERPRINT may follow) */
void stun_enc_integrity(stun_enc_t *e, const uint8_t *key, size_t keylen);
void stun_enc_fingerprint(stun_enc_t *e);
/* the message's length, or the first error */
int stun_enc_finish(stun_enc_t *e);

/* --- the messages a TURN client sends (all with FINGERPRINT; a NULL cred: no credentials) --- */
typedef struct {
    const char *username;
    const uint8_t *realm; /* as the server sent it */
    size_t realm_len;
    const uint8_t *nonce;
    size_t nonce_len;
    uint8_t key[STUN_KEY_LEN];
} stun_cred_t;

/* each returns the message length or a negative errno */
int stun_encode_binding(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN]);
/* REQUESTED-TRANSPORT UDP, LIFETIME (0: none) */
int stun_encode_allocate(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN],
                         const stun_cred_t *cred, uint32_t lifetime);
/* LIFETIME (0: delete the allocation) */
int stun_encode_refresh(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN],
                        const stun_cred_t *cred, uint32_t lifetime);
int stun_encode_create_permission(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN],
                                  const stun_cred_t *cred, const stun_addr_t *peer);
/* channel in 0x4000-0x7FFF, else -EINVAL */
int stun_encode_channel_bind(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN],
                             const stun_cred_t *cred, uint16_t channel, const stun_addr_t *peer);
/* a Send indication (no credentials, no FINGERPRINT: RFC 8656 11.1) */
int stun_encode_send(uint8_t *buf, size_t cap, const uint8_t tid[STUN_TID_LEN],
                     const stun_addr_t *peer, const uint8_t *data, size_t n);

/* --- ChannelData (RFC 8656 12.4) --- */
/* header + data, padded to 4 bytes (the padding is sent over UDP too: RFC 8656 12.5); returns
 * the datagram length or -EINVAL / -ENOBUFS */
int stun_channel_data_encode(uint8_t *buf, size_t cap, uint16_t channel, const uint8_t *data,
                             size_t n);
/* the channel and payload of a ChannelData datagram (padding or not); 0 or -EINVAL */
int stun_channel_data_decode(const uint8_t *p, size_t n, uint16_t *channel, stun_bytes_t *data);

#endif

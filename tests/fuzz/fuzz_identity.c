/* libFuzzer target: invite tokens (token_decode: base64url JSON a user pastes, copied from
 * another node) and the "host:port" addresses in them (addr_split).
 *
 * Oracles besides the sanitizers: a token that decodes re-encodes (token_encode) to a token
 * that decodes to the same fields; errors come with a message; addr_split never overruns a
 * small host buffer and returns a port in 1..65535. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "identity.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static void check_addr(const char *s, size_t hostlen)
{
    char *host = malloc(hostlen);
    if (!host) return;
    int port = 0;
    int rc = addr_split(s, host, hostlen, &port);
    CHECK(rc == 0 || rc == -EINVAL);
    if (rc == 0) {
        CHECK(memchr(host, '\0', hostlen) != NULL && host[0] != '\0');
        CHECK(port >= 1 && port <= 65535);
    }
    free(host);
}

static int same_token(const token_t *a, const token_t *b)
{
    if (strcmp(a->id, b->id) || strcmp(a->mesh_id, b->mesh_id) ||
        memcmp(a->secret, b->secret, sizeof a->secret) || a->n_addrs != b->n_addrs)
        return 0;
    for (size_t i = 0; i < a->n_addrs; i++)
        if (strcmp(a->addrs[i], b->addrs[i])) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    token_t t;
    char err[256] = "";
    int rc = token_decode(s, size, &t, err, sizeof err);
    CHECK(rc == 0 || rc == -EINVAL);
    if (rc) {
        CHECK(err[0] != '\0');
    } else {
        CHECK(strlen(t.id) == ID_HEX_LEN && t.n_addrs >= 1 && t.n_addrs <= TOKEN_MAX_ADDRS);
        char enc[2 * TOKEN_MAX_LEN];
        CHECK(token_encode(&t, enc, sizeof enc) == 0);
        token_t t2;
        CHECK(token_decode(enc, strlen(enc), &t2, err, sizeof err) == 0);
        CHECK(same_token(&t, &t2));
    }

    check_addr(s, 1);
    check_addr(s, 8);
    check_addr(s, TOKEN_ADDR_MAX);
    free(s);
    return 0;
}

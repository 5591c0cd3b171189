/* The node's Nostr key file. */
#include "nostr_key.h"

#include <errno.h>
#include <fcntl.h>
#include <secp256k1.h>
#include <secp256k1_extrakeys.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "identity.h"

static int xonly(const uint8_t sk[32], uint8_t pk[32])
{
    secp256k1_context *ctx = secp256k1_context_create(SECP256K1_CONTEXT_NONE);
    if (!ctx) return -ENOMEM;
    secp256k1_keypair kp;
    secp256k1_xonly_pubkey x;
    int ok = secp256k1_keypair_create(ctx, &kp, sk) &&
             secp256k1_keypair_xonly_pub(ctx, &x, NULL, &kp) &&
             secp256k1_xonly_pubkey_serialize(ctx, pk, &x);
    sodium_memzero(&kp, sizeof kp);
    secp256k1_context_destroy(ctx);
    return ok ? 0 : -EINVAL;
}

int nostr_key_load(const char *dir, uint8_t sk[32], uint8_t pk[32], char *err, size_t errlen)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/nostr-key", dir) >= (int)sizeof path) {
        snprintf(err, errlen, "state directory path too long: %s", dir);
        return -ENAMETOOLONG;
    }
    mkdir(dir, 0700);
    char hex[66];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        do
            randombytes_buf(sk, 32);
        while (xonly(sk, pk) != 0);
        hex_encode(sk, 32, hex);
        hex[64] = '\n';
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        int ok = fd >= 0 && write(fd, hex, 65) == 65 && fsync(fd) == 0;
        int e = errno;
        if (fd >= 0) close(fd);
        sodium_memzero(hex, sizeof hex);
        if (!ok) {
            snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
            return -e;
        }
        return 0;
    }
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (st.st_mode & 077)) {
        close(fd);
        snprintf(err, errlen,
                 "%s is accessible by other users; the Nostr key must be private: chmod 600 %s",
                 path, path);
        return -EPERM;
    }
    ssize_t n = read(fd, hex, sizeof hex);
    close(fd);
    int rc = -EINVAL;
    if ((n == 64 || (n == 65 && hex[64] == '\n')) && hex_decode(hex, 64, sk, 32) == 0)
        rc = xonly(sk, pk);
    sodium_memzero(hex, sizeof hex);
    if (rc) snprintf(err, errlen, "%s is not a Nostr secret key (64 hex characters)", path);
    return rc;
}

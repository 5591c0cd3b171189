#include "tlsid.h"

#include <errno.h>
#include <gnutls/abstract.h>
#include <gnutls/x509.h>
#include <sodium.h>
#include <string.h>
#include <time.h>

int tlsid_peer_key(gnutls_session_t session, uint8_t pk[32])
{
    unsigned n = 0;
    const gnutls_datum_t *certs = gnutls_certificate_get_peers(session, &n);
    if (!certs || n == 0) return -EINVAL;
    gnutls_x509_crt_t crt = NULL;
    gnutls_pubkey_t pub = NULL;
    gnutls_datum_t x = {NULL, 0};
    gnutls_ecc_curve_t curve;
    int rc = -EINVAL;
    if (gnutls_x509_crt_init(&crt) < 0) return -ENOMEM;
    if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) < 0) goto out;
    if (gnutls_pubkey_init(&pub) < 0) goto out;
    if (gnutls_pubkey_import_x509(pub, crt, 0) < 0) goto out;
    if (gnutls_pubkey_get_pk_algorithm(pub, NULL) != GNUTLS_PK_EDDSA_ED25519) goto out;
    if (gnutls_pubkey_export_ecc_raw2(pub, &curve, &x, NULL, GNUTLS_EXPORT_FLAG_NO_LZ) < 0)
        goto out;
    if (curve != GNUTLS_ECC_CURVE_ED25519 || x.size != 32) goto out;
    memcpy(pk, x.data, 32);
    rc = 0;
out:
    gnutls_free(x.data);
    if (pub) gnutls_pubkey_deinit(pub);
    gnutls_x509_crt_deinit(crt);
    return rc;
}

/* Called during the handshake: require a certificate with an Ed25519 key. Which key is
 * acceptable is decided by the transport once the handshake completes. */
static int verify_cb(gnutls_session_t session)
{
    uint8_t pk[32];
    return tlsid_peer_key(session, pk) == 0 ? 0 : GNUTLS_E_CERTIFICATE_ERROR;
}

int tlsid_credentials(const identity_t *id, gnutls_certificate_credentials_t *out)
{
    gnutls_x509_privkey_t key = NULL;
    gnutls_x509_crt_t crt = NULL;
    gnutls_certificate_credentials_t cred = NULL;
    uint8_t seed[32];
    int rc = -EINVAL;
    crypto_sign_ed25519_sk_to_seed(seed, id->sk);
    gnutls_datum_t x = {(unsigned char *)id->pk, 32}, k = {seed, 32};
    if (gnutls_x509_privkey_init(&key) < 0) goto out;
    if (gnutls_x509_privkey_import_ecc_raw(key, GNUTLS_ECC_CURVE_ED25519, &x, NULL, &k) < 0)
        goto out;
    if (gnutls_x509_crt_init(&crt) < 0) goto out;
    uint8_t serial[16];
    randombytes_buf(serial, sizeof serial);
    serial[0] &= 0x7f;
    time_t now = time(NULL);
    char cn[80];
    snprintf(cn, sizeof cn, "CN=mesh-llm %.16s", id->id);
    if (gnutls_x509_crt_set_version(crt, 3) < 0 ||
        gnutls_x509_crt_set_serial(crt, serial, sizeof serial) < 0 ||
        gnutls_x509_crt_set_activation_time(crt, now - 86400) < 0 ||
        gnutls_x509_crt_set_expiration_time(crt, now + 20L * 365 * 86400) < 0 ||
        gnutls_x509_crt_set_dn(crt, cn, NULL) < 0 || gnutls_x509_crt_set_key(crt, key) < 0 ||
        gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA512, 0) < 0)
        goto out;
    if (gnutls_certificate_allocate_credentials(&cred) < 0) goto out;
    if (gnutls_certificate_set_x509_key(cred, &crt, 1, key) < 0) goto out;
    gnutls_certificate_set_verify_function(cred, verify_cb);
    *out = cred;
    cred = NULL;
    rc = 0;
out:
    sodium_memzero(seed, sizeof seed);
    if (cred) gnutls_certificate_free_credentials(cred);
    if (crt) gnutls_x509_crt_deinit(crt);
    if (key) gnutls_x509_privkey_deinit(key);
    return rc;
}

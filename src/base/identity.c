#include "identity.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "util.h"

void hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[in[i] >> 4];
        out[2 * i + 1] = hx[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int hex_decode(const char *hex, size_t hexlen, uint8_t *out, size_t outlen)
{
    if (hexlen != 2 * outlen) return -EINVAL;
    for (size_t i = 0; i < outlen; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return -EINVAL;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int identity_home(const char *h, char *out, size_t outlen)
{
    int n;
    if (h && *h) {
        n = snprintf(out, outlen, "%s", h);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home) return -ENOENT;
        n = snprintf(out, outlen, "%s/.mesh-llm", home);
    }
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

static int path_join(char *out, size_t outlen, const char *dir, const char *name)
{
    int n = snprintf(out, outlen, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* Read a whole small file (at most max bytes). */
static int read_small(const char *path, char *out, size_t max, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    size_t have = 0;
    for (;;) {
        ssize_t r = read(fd, out + have, max - have);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = -errno;
            close(fd);
            return e;
        }
        if (r == 0) break;
        have += (size_t)r;
        if (have == max) {
            char extra;
            if (read(fd, &extra, 1) > 0) {
                close(fd);
                return -EFBIG;
            }
            break;
        }
    }
    close(fd);
    *len = have;
    return 0;
}

/* Write a file atomically (tmp + rename) with the given mode. */
static int write_file(const char *path, const void *data, size_t len, mode_t mode)
{
    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp) return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) return -errno;
    const char *p = data;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, p + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            int e = -errno;
            close(fd);
            unlink(tmp);
            return e;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = -errno;
        unlink(tmp);
        return e;
    }
    if (rename(tmp, path) != 0) {
        int e = -errno;
        unlink(tmp);
        return e;
    }
    return 0;
}

static int ensure_dir(const char *dir, char *err, size_t errlen)
{
    if (mkdir(dir, 0700) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
        snprintf(err, errlen, "%s exists but is not a directory", dir);
        return -ENOTDIR;
    }
    int e = errno;
    snprintf(err, errlen, "cannot create state directory %s: %s", dir, strerror(e));
    return -e;
}

static int load_incarnation(const char *dir, uint64_t now_ms, uint64_t *out)
{
    char path[4096], buf[32];
    size_t len = 0;
    uint64_t last = 0, inc;
    if (path_join(path, sizeof path, dir, "incarnation") == 0 &&
        read_small(path, buf, sizeof buf - 1, &len) == 0) {
        buf[len] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        if (parse_u64(buf, 0, UINT64_MAX - 1, &last) != 0) last = 0;
    }
    inc = now_ms > last ? now_ms : last + 1;
    int n = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)inc);
    (void)write_file(path, buf, (size_t)n, 0600); /* best effort: the clock still moves on */
    *out = inc;
    return 0;
}

int identity_load(identity_t *id, const char *dir, uint64_t now_ms, char *err, size_t errlen)
{
    char path[4096];
    int rc = ensure_dir(dir, err, errlen);
    if (rc) return rc;
    if (path_join(path, sizeof path, dir, "key")) {
        snprintf(err, errlen, "state directory path too long: %s", dir);
        return -ENAMETOOLONG;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT) {
            int e = errno;
            snprintf(err, errlen, "cannot read %s: %s", path, strerror(e));
            return -e;
        }
        crypto_sign_keypair(id->pk, id->sk);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, id->sk, sizeof id->sk) != (ssize_t)sizeof id->sk ||
            fsync(fd) != 0) {
            int e = errno;
            if (fd >= 0) close(fd);
            snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
            return -e;
        }
        close(fd);
    } else {
        if (st.st_mode & 077) {
            snprintf(err, errlen,
                     "%s is accessible by other users (mode %03o); the node key must be "
                     "private: chmod 600 %s",
                     path, (unsigned)(st.st_mode & 0777), path);
            return -EPERM;
        }
        char raw[sizeof id->sk];
        size_t len = 0;
        rc = read_small(path, raw, sizeof raw, &len);
        if (rc || len != sizeof id->sk) {
            snprintf(err, errlen, "%s is not a mesh-llm key (expected %zu bytes%s%s)", path,
                     sizeof id->sk, rc ? ": " : "", rc ? strerror(-rc) : "");
            return rc ? rc : -EINVAL;
        }
        memcpy(id->sk, raw, sizeof id->sk);
        sodium_memzero(raw, sizeof raw);
        uint8_t seed[32], pk[32], sk[64];
        crypto_sign_ed25519_sk_to_seed(seed, id->sk);
        crypto_sign_seed_keypair(pk, sk, seed);
        sodium_memzero(seed, sizeof seed);
        if (sodium_memcmp(sk, id->sk, sizeof sk) != 0) {
            sodium_memzero(sk, sizeof sk);
            snprintf(err, errlen, "%s is corrupt (its public half does not match)", path);
            return -EINVAL;
        }
        sodium_memzero(sk, sizeof sk);
        memcpy(id->pk, pk, sizeof pk);
    }
    hex_encode(id->pk, sizeof id->pk, id->id);
    return load_incarnation(dir, now_ms, &id->incarnation);
}

void identity_ephemeral(identity_t *id, uint64_t now_ms)
{
    crypto_sign_keypair(id->pk, id->sk);
    hex_encode(id->pk, sizeof id->pk, id->id);
    id->incarnation = now_ms;
}

static bool is_lower_hex(const char *s, size_t n);

/* A one-line state file ("value\n"): -ENOENT when absent, -EFBIG when too long for buf. */
static int read_state_line(const char *path, char *buf, size_t buflen)
{
    size_t len = 0;
    int rc = read_small(path, buf, buflen - 1, &len);
    if (rc) return rc;
    buf[len] = '\0';
    if (len && buf[len - 1] == '\n') buf[--len] = '\0';
    if (strlen(buf) != len) return -EINVAL; /* a NUL inside */
    return 0;
}

/* First start of an unnamed mesh: a random id and secret, saved (secret first). */
static int new_mesh(mesh_cred_t *out, const char *dir, const char *pid, const char *psec, char *err,
                    size_t errlen)
{
    uint8_t rid[16];
    randombytes_buf(rid, sizeof rid);
    randombytes_buf(out->secret, sizeof out->secret);
    hex_encode(rid, sizeof rid, out->mesh_id);
    char line[80], shex[65];
    hex_encode(out->secret, sizeof out->secret, shex);
    int n = snprintf(line, sizeof line, "%s\n", shex);
    int rc = write_file(psec, line, (size_t)n, 0600);
    sodium_memzero(line, sizeof line);
    sodium_memzero(shex, sizeof shex);
    n = snprintf(line, sizeof line, "%s\n", out->mesh_id);
    if (rc == 0) rc = write_file(pid, line, (size_t)n, 0600);
    if (rc) {
        snprintf(err, errlen, "cannot save the mesh id in %s: %s", dir, strerror(-rc));
        return rc;
    }
    return 0;
}

void identity_named_mesh(const identity_t *id, const uint8_t originator_pk[32],
                         const char *mesh_name, mesh_cred_t *out)
{
    memset(out, 0, sizeof *out);
    uint8_t h[16];
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, sizeof h);
    crypto_generichash_update(&st, (const uint8_t *)mesh_name, strlen(mesh_name));
    crypto_generichash_update(&st, originator_pk, 32);
    crypto_generichash_final(&st, h, sizeof h);
    hex_encode(h, sizeof h, out->mesh_id);
    uint8_t seed[32];
    crypto_sign_ed25519_sk_to_seed(seed, id->sk);
    crypto_generichash(out->secret, sizeof out->secret, (const uint8_t *)mesh_name,
                       strlen(mesh_name), seed, sizeof seed);
    sodium_memzero(seed, sizeof seed);
}

int identity_own_mesh(const identity_t *id, const char *dir, const char *mesh_name,
                      mesh_cred_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (mesh_name && *mesh_name) {
        identity_named_mesh(id, id->pk, mesh_name, out);
        return 0;
    }
    char pid[4096], psec[4096];
    if (path_join(pid, sizeof pid, dir, "mesh-id") ||
        path_join(psec, sizeof psec, dir, "mesh-secret"))
        return -ENAMETOOLONG;
    char idbuf[160], secbuf[160];
    int rid = read_state_line(pid, idbuf, sizeof idbuf);
    int rsec = read_state_line(psec, secbuf, sizeof secbuf);
    if (rid == -ENOENT && rsec == -ENOENT) return new_mesh(out, dir, pid, psec, err, errlen);
    /* Never regenerate silently: that would end every invite token given out so far. */
    static const char fix[] = "restore it from a backup, or delete both mesh-id and mesh-secret "
                              "to create a new mesh (invite tokens given out so far stop working)";
    /* -EFBIG (too long) and -EINVAL (a NUL inside) are garbage: reported as corrupt below */
    if (rid && rid != -ENOENT && rid != -EFBIG && rid != -EINVAL) {
        snprintf(err, errlen, "cannot read %s: %s; %s", pid, strerror(-rid), fix);
        return rid;
    }
    if (rsec && rsec != -ENOENT && rsec != -EFBIG && rsec != -EINVAL) {
        snprintf(err, errlen, "cannot read %s: %s; %s", psec, strerror(-rsec), fix);
        return rsec;
    }
    if (rid == -ENOENT || rsec == -ENOENT) {
        bool id_missing = rid == -ENOENT;
        snprintf(err, errlen, "%s exists but %s is missing: %s", id_missing ? psec : pid,
                 id_missing ? pid : psec, fix);
        return -EINVAL;
    }
    size_t idlen = rid ? 0 : strlen(idbuf);
    if (idlen == 0 || idlen > MESH_ID_MAX || !is_lower_hex(idbuf, idlen)) {
        snprintf(err, errlen,
                 "%s is corrupt (expected a mesh id: 1 to %d lowercase hex characters); %s", pid,
                 MESH_ID_MAX, fix);
        return -EINVAL;
    }
    if (rsec || hex_decode(secbuf, strlen(secbuf), out->secret, sizeof out->secret) != 0) {
        sodium_memzero(out->secret, sizeof out->secret);
        snprintf(err, errlen, "%s is corrupt (expected 64 hex characters); %s", psec, fix);
        return -EINVAL;
    }
    memcpy(out->mesh_id, idbuf, idlen + 1);
    sodium_memzero(secbuf, sizeof secbuf);
    return 0;
}

typedef struct {
    uv_work_t work;
    char path[4096];
    char line[MESH_ID_MAX + 2];
} save_job_t;

static void save_work(uv_work_t *w)
{
    save_job_t *j = w->data;
    (void)write_file(j->path, j->line, strlen(j->line), 0600); /* best effort */
}

static void save_done(uv_work_t *w, int status)
{
    (void)status;
    free(w->data);
}

void identity_save_last_mesh(uv_loop_t *loop, const char *dir, const char *mesh_id)
{
    /* write + fsync + rename can stall for seconds on a busy or network disk: never on the
     * event loop */
    save_job_t *j = calloc(1, sizeof *j);
    if (!j) return;
    j->work.data = j;
    if (path_join(j->path, sizeof j->path, dir, "last-mesh") ||
        snprintf(j->line, sizeof j->line, "%s\n", mesh_id) >= (int)sizeof j->line ||
        uv_queue_work(loop, &j->work, save_work, save_done) != 0)
        free(j);
}

int addr_format(const struct sockaddr *sa, char *out, size_t len)
{
    char ip[INET6_ADDRSTRLEN];
    int n;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)sa;
        if (!inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip)) return -EINVAL;
        n = snprintf(out, len, "%s:%u", ip, ntohs(a->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)sa;
        if (!inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip)) return -EINVAL;
        n = snprintf(out, len, "[%s]:%u", ip, ntohs(a->sin6_port));
    } else {
        return -EINVAL;
    }
    return n > 0 && (size_t)n < len ? 0 : -ENOSPC;
}

int addr_split(const char *s, char *host, size_t hostlen, int *port)
{
    const char *colon;
    size_t hl;
    if (*s == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':') return -EINVAL;
        hl = (size_t)(end - s - 1);
        s++;
        colon = end + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || memchr(s, ':', (size_t)(colon - s))) return -EINVAL;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= hostlen) return -EINVAL;
    for (size_t i = 0; i < hl; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '.' || c == '-' || c == ':' || c == '%' || c == '_'))
            return -EINVAL;
    }
    uint64_t p;
    if (parse_u64(colon + 1, 1, 65535, &p)) return -EINVAL;
    memcpy(host, s, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

int addr_parse(const char *s, struct sockaddr_storage *out)
{
    char host[INET6_ADDRSTRLEN];
    int port;
    memset(out, 0, sizeof *out);
    if (!s || addr_split(s, host, sizeof host, &port) != 0) return -EINVAL;
    struct sockaddr_in *a4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)out;
    if (s[0] != '[' && inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        return 0;
    }
    if (s[0] == '[' && inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        return 0;
    }
    memset(out, 0, sizeof *out);
    return -EINVAL;
}

int token_encode(const token_t *t, char *out, size_t outlen)
{
    char shex[65];
    hex_encode(t->secret, sizeof t->secret, shex);
    json_t *addrs = json_array();
    for (size_t i = 0; i < t->n_addrs; i++)
        json_array_append_new(addrs, json_string(t->addrs[i]));
    json_t *o = json_pack("{s:i,s:s,s:o,s:s,s:s}", "v", 1, "id", t->id, "addrs", addrs, "mesh",
                          t->mesh_id, "secret", shex);
    if (!o) return -ENOMEM;
    char *js = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!js) return -ENOMEM;
    size_t jl = strlen(js);
    size_t need = sodium_base64_encoded_len(jl, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    int rc = 0;
    if (need > outlen)
        rc = -ENOSPC;
    else
        sodium_bin2base64(out, outlen, (const uint8_t *)js, jl,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    free(js);
    return rc;
}

static bool is_lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

int token_decode(const char *s, size_t len, token_t *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == '\r' || s[len - 1] == ' '))
        len--;
    if (len == 0) {
        snprintf(err, errlen, "the invite token is empty");
        return -EINVAL;
    }
    if (len > TOKEN_MAX_LEN) {
        snprintf(err, errlen, "the invite token is too long (%zu characters, at most %d)", len,
                 TOKEN_MAX_LEN);
        return -EINVAL;
    }
    uint8_t raw[TOKEN_MAX_LEN];
    size_t rawlen = 0;
    const char *end = NULL;
    if (sodium_base642bin(raw, sizeof raw, s, len, NULL, &rawlen, &end,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
        end != s + len) {
        snprintf(err, errlen,
                 "the invite token is not base64url (character %zu is invalid); copy it whole "
                 "from the other node's ready line or /api/status",
                 end ? (size_t)(end - s) + 1 : (size_t)1);
        return -EINVAL;
    }
    json_error_t je;
    json_t *o = json_loadb((const char *)raw, rawlen, JSON_REJECT_DUPLICATES, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        snprintf(err, errlen, "the invite token does not contain a JSON object");
        return -EINVAL;
    }
    int rc = -EINVAL;
    json_int_t v = 0;
    const char *id = NULL, *mesh = NULL, *secret = NULL;
    json_t *addrs = NULL;
    if (json_unpack_ex(o, &je, 0, "{s:I,s:s,s:o,s:s,s:s}", "v", &v, "id", &id, "addrs", &addrs,
                       "mesh", &mesh, "secret", &secret) != 0) {
        snprintf(err, errlen, "the invite token is incomplete: %s", je.text);
        goto out;
    }
    if (v != 1) {
        snprintf(err, errlen, "the invite token has version %lld; this mesh-llm understands 1",
                 (long long)v);
        goto out;
    }
    if (strlen(id) != ID_HEX_LEN || !is_lower_hex(id, ID_HEX_LEN)) {
        snprintf(err, errlen, "the invite token's node id is not 64 hex characters");
        goto out;
    }
    size_t ml = strlen(mesh);
    if (ml == 0 || ml > MESH_ID_MAX || !is_lower_hex(mesh, ml)) {
        snprintf(err, errlen, "the invite token's mesh id is invalid");
        goto out;
    }
    if (hex_decode(secret, strlen(secret), t->secret, sizeof t->secret) != 0) {
        snprintf(err, errlen, "the invite token's mesh secret is not 64 hex characters");
        goto out;
    }
    if (!json_is_array(addrs) || json_array_size(addrs) == 0) {
        snprintf(err, errlen, "the invite token lists no addresses to reach the node");
        goto out;
    }
    size_t i;
    json_t *a;
    json_array_foreach(addrs, i, a)
    {
        if (t->n_addrs == TOKEN_MAX_ADDRS) break; /* extra addresses are ignored */
        const char *as = json_string_value(a);
        char host[TOKEN_ADDR_MAX];
        int port;
        if (!as || strlen(as) >= TOKEN_ADDR_MAX || addr_split(as, host, sizeof host, &port)) {
            snprintf(err, errlen, "the invite token's address #%zu is not host:port", i + 1);
            goto out;
        }
        snprintf(t->addrs[t->n_addrs++], TOKEN_ADDR_MAX, "%s", as);
    }
    memcpy(t->id, id, ID_HEX_LEN + 1);
    memcpy(t->mesh_id, mesh, ml + 1);
    rc = 0;
out:
    json_decref(o);
    if (rc) sodium_memzero(t->secret, sizeof t->secret);
    return rc;
}

void identity_admission_mac(const uint8_t secret[32], const uint8_t from_pk[32],
                            const uint8_t to_pk[32], uint8_t out[32])
{
    static const char label[] = "mesh-llm/1 admit";
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, secret, 32);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, sizeof label - 1);
    crypto_auth_hmacsha256_update(&st, from_pk, 32);
    crypto_auth_hmacsha256_update(&st, to_pk, 32);
    crypto_auth_hmacsha256_final(&st, out);
}

/* --- Signatures by node keys --- */

void identity_sign(const uint8_t sk[64], const void *msg, size_t len, uint8_t sig[IDENTITY_SIG_LEN])
{
    crypto_sign_detached(sig, NULL, msg, len, sk);
}

bool identity_verify(const char *id, const void *msg, size_t len,
                     const uint8_t sig[IDENTITY_SIG_LEN])
{
    uint8_t pk[32];
    if (!id || strlen(id) != ID_HEX_LEN || !is_lower_hex(id, ID_HEX_LEN) ||
        hex_decode(id, ID_HEX_LEN, pk, sizeof pk) != 0)
        return false;
    return crypto_sign_verify_detached(sig, msg, len, pk) == 0;
}

/* identity (key file, mesh ids, invite tokens) and wire (framing) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <unistd.h>

#include "identity.h"
#include "wire.h"

static char dir[256];

static int setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/mesh-idtest-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void test_key_created_private_and_stable(void **state)
{
    char err[512], path[300];
    identity_t a, b;
    snprintf(path, sizeof path, "%s/home", dir);
    assert_int_equal(identity_load(&a, path, 1000, err, sizeof err), 0);
    struct stat st;
    snprintf(path, sizeof path, "%s/home/key", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(strlen(a.id), 64);
    snprintf(path, sizeof path, "%s/home", dir);
    assert_int_equal(identity_load(&b, path, 500, err, sizeof err), 0);
    assert_string_equal(a.id, b.id);
    /* each start takes a higher incarnation even if the clock went back */
    assert_true(b.incarnation > a.incarnation);
}

static void test_key_readable_by_others_refused(void **state)
{
    char err[512], home[300], key[320];
    identity_t a;
    snprintf(home, sizeof home, "%s/h2", dir);
    assert_int_equal(identity_load(&a, home, 1, err, sizeof err), 0);
    snprintf(key, sizeof key, "%s/key", home);
    assert_int_equal(chmod(key, 0644), 0);
    assert_int_equal(identity_load(&a, home, 2, err, sizeof err), -EPERM);
    assert_non_null(strstr(err, "chmod 600"));
    /* a truncated key is refused, not used */
    assert_int_equal(chmod(key, 0600), 0);
    assert_int_equal(truncate(key, 10), 0);
    assert_int_equal(identity_load(&a, home, 3, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "not a mesh-llm key"));
}

static void test_mesh_ids(void **state)
{
    char err[512], home[300];
    identity_t a;
    snprintf(home, sizeof home, "%s/h3", dir);
    assert_int_equal(identity_load(&a, home, 1, err, sizeof err), 0);
    mesh_cred_t m1, m2, n1, n2;
    assert_int_equal(identity_own_mesh(&a, home, NULL, &m1, err, sizeof err), 0);
    assert_int_equal(identity_own_mesh(&a, home, NULL, &m2, err, sizeof err), 0);
    assert_string_equal(m1.mesh_id, m2.mesh_id); /* persisted */
    assert_memory_equal(m1.secret, m2.secret, 32);
    assert_int_equal(identity_own_mesh(&a, home, "lab", &n1, err, sizeof err), 0);
    assert_int_equal(identity_own_mesh(&a, home, "lab", &n2, err, sizeof err), 0);
    assert_string_equal(n1.mesh_id, n2.mesh_id); /* derived */
    assert_string_not_equal(n1.mesh_id, m1.mesh_id);
    mesh_cred_t o;
    assert_int_equal(identity_own_mesh(&a, home, "other", &o, err, sizeof err), 0);
    assert_string_not_equal(o.mesh_id, n1.mesh_id);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A damaged mesh-id or mesh-secret refuses to start with a message naming the file and the
 * fix; it is never replaced (that silently ended every invite token), never used as is (a
 * garbage mesh-id made tokens every joiner rejects). */
static void test_corrupt_mesh_state_refused(void **state)
{
    char err[1024], home[300], pid[340], psec[340];
    identity_t a;
    snprintf(home, sizeof home, "%s/h4", dir);
    assert_int_equal(identity_load(&a, home, 1, err, sizeof err), 0);
    mesh_cred_t m, again;
    assert_int_equal(identity_own_mesh(&a, home, NULL, &m, err, sizeof err), 0);
    snprintf(pid, sizeof pid, "%s/mesh-id", home);
    snprintf(psec, sizeof psec, "%s/mesh-secret", home);
    char good_id[128], good_sec[128];
    FILE *f = fopen(pid, "r");
    assert_non_null(fgets(good_id, sizeof good_id, f));
    fclose(f);
    f = fopen(psec, "r");
    assert_non_null(fgets(good_sec, sizeof good_sec, f));
    fclose(f);

    static const struct {
        const char *file;    /* "id" or "secret" */
        const char *content; /* NULL: removed */
        const char *named;   /* the file the message names */
    } cases[] = {
        {"secret", "garbage\n", "mesh-secret is corrupt"},
        {"secret", "zz23456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
         "mesh-secret is corrupt"},
        {"secret", "0123\n", "mesh-secret is corrupt"},
        {"secret", "", "mesh-secret is corrupt"},
        {"secret", NULL, "mesh-secret is missing"},
        {"id", "not hex!\n", "mesh-id is corrupt"},
        {"id", "ABCDEF\n", "mesh-id is corrupt"}, /* tokens carry lowercase hex only */
        {"id", "\n", "mesh-id is corrupt"},
        {"id", NULL, "mesh-id is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = strcmp(cases[i].file, "id") == 0 ? pid : psec;
        if (cases[i].content)
            write_text(path, cases[i].content);
        else
            assert_int_equal(unlink(path), 0);
        err[0] = '\0';
        int rc = identity_own_mesh(&a, home, NULL, &again, err, sizeof err);
        if (rc == 0) fail_msg("case %zu accepted", i);
        if (!strstr(err, cases[i].named))
            fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].named);
        assert_non_null(strstr(err, "delete both"));
        /* nothing was regenerated behind the operator's back */
        struct stat st;
        if (cases[i].content) {
            f = fopen(path, "r");
            char back[160] = "";
            if (!fgets(back, sizeof back, f)) back[0] = '\0';
            fclose(f);
            assert_string_equal(back, cases[i].content);
        } else {
            assert_int_equal(stat(path, &st), -1);
        }
        write_text(pid, good_id);
        write_text(psec, good_sec);
    }
    /* restored: the same mesh as before */
    assert_int_equal(identity_own_mesh(&a, home, NULL, &again, err, sizeof err), 0);
    assert_string_equal(again.mesh_id, m.mesh_id);
    assert_memory_equal(again.secret, m.secret, 32);
    /* both removed: a new mesh, as on a first start */
    assert_int_equal(unlink(pid), 0);
    assert_int_equal(unlink(psec), 0);
    assert_int_equal(identity_own_mesh(&a, home, NULL, &again, err, sizeof err), 0);
    assert_string_not_equal(again.mesh_id, m.mesh_id);
}

/* The last-mesh write (write + fsync + rename, at join) runs on the thread pool, never on the
 * event loop: with the pool's only thread held busy, the call returns and nothing is written
 * until the pool is free. */
static uv_sem_t pool_gate;
static void hold_pool(uv_work_t *w)
{
    (void)w;
    uv_sem_wait(&pool_gate);
}
static void held_done(uv_work_t *w, int status)
{
    (void)w;
    (void)status;
}

static void test_last_mesh_written_off_loop(void **state)
{
    char home[300], path[340];
    snprintf(home, sizeof home, "%s", dir);
    snprintf(path, sizeof path, "%s/last-mesh", dir);
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(uv_sem_init(&pool_gate, 0), 0);
    uv_work_t busy;
    assert_int_equal(uv_queue_work(&loop, &busy, hold_pool, held_done), 0);
    identity_save_last_mesh(&loop, home, "00112233445566778899aabbccddeeff");
    struct stat st;
    assert_int_equal(stat(path, &st), -1); /* not written on the caller's thread */
    uv_sem_post(&pool_gate);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[80] = "";
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_string_equal(line, "00112233445566778899aabbccddeeff\n");
    assert_int_equal(uv_loop_close(&loop), 0);
    uv_sem_destroy(&pool_gate);
}

static void test_token_roundtrip(void **state)
{
    token_t t, u;
    memset(&t, 0, sizeof t);
    memset(t.id, 'a', 64);
    snprintf(t.mesh_id, sizeof t.mesh_id, "0123abcd");
    randombytes_buf(t.secret, 32);
    snprintf(t.addrs[0], TOKEN_ADDR_MAX, "192.168.1.2:4433");
    snprintf(t.addrs[1], TOKEN_ADDR_MAX, "127.0.0.1:4433");
    t.n_addrs = 2;
    char s[TOKEN_MAX_LEN + 1], err[256];
    assert_int_equal(token_encode(&t, s, sizeof s), 0);
    assert_null(strchr(s, '='));
    assert_null(strchr(s, '+'));
    assert_int_equal(token_decode(s, strlen(s), &u, err, sizeof err), 0);
    assert_string_equal(u.id, t.id);
    assert_string_equal(u.mesh_id, t.mesh_id);
    assert_memory_equal(u.secret, t.secret, 32);
    assert_int_equal(u.n_addrs, 2);
    assert_string_equal(u.addrs[1], "127.0.0.1:4433");
    char small[16];
    assert_int_equal(token_encode(&t, small, sizeof small), -ENOSPC);
}

static void enc(const char *json, char *out, size_t outlen)
{
    sodium_bin2base64(out, outlen, (const uint8_t *)json, strlen(json),
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

static void test_token_malformed(void **state)
{
    static const struct {
        const char *json, *needle;
    } cases[] = {
        {"[1]", "JSON object"},
        {"{\"v\":1}", "incomplete"},
        {"{\"v\":3,\"id\":\"x\",\"addrs\":[],\"mesh\":\"a\",\"secret\":\"b\"}", "version"},
        {"{\"v\":1,\"id\":\"xyz\",\"addrs\":[\"a:1\"],\"mesh\":\"a\",\"secret\":\"b\"}", "node id"},
        {"{\"v\":1,\"id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
         "\"addrs\":[\"a:1\"],\"mesh\":\"A!\",\"secret\":\"b\"}",
         "mesh id"},
        {"{\"v\":1,\"id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
         "\"addrs\":[\"a:1\"],\"mesh\":\"ab\",\"secret\":\"00\"}",
         "secret"},
        {"{\"v\":1,\"id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
         "\"addrs\":[],\"mesh\":\"ab\","
         "\"secret\":\"0000000000000000000000000000000000000000000000000000000000000000\"}",
         "no addresses"},
        {"{\"v\":1,\"id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
         "\"addrs\":[\"host:99999\"],\"mesh\":\"ab\","
         "\"secret\":\"0000000000000000000000000000000000000000000000000000000000000000\"}",
         "host:port"},
    };
    char b64[2048], err[256];
    token_t t;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enc(cases[i].json, b64, sizeof b64);
        assert_int_equal(token_decode(b64, strlen(b64), &t, err, sizeof err), -EINVAL);
        if (!strstr(err, cases[i].needle))
            fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].needle);
    }
    assert_int_equal(token_decode("", 0, &t, err, sizeof err), -EINVAL);
    assert_int_equal(token_decode("ab$cd", 5, &t, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "base64url"));
    char big[TOKEN_MAX_LEN + 10];
    memset(big, 'A', sizeof big);
    assert_int_equal(token_decode(big, sizeof big, &t, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "too long"));
}

/* addr_parse: numeric IPv4 ip:port and [IPv6]:port only, formatted back the same way */
static void test_addr_parse(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out; /* out NULL: refused */
    } rows[] = {
        {"11.0.0.10:4242", "11.0.0.10:4242"},
        {"[2001:db8:1::10]:4242", "[2001:db8:1::10]:4242"},
        {"[2001:0db8:0001:0000::0010]:1", "[2001:db8:1::10]:1"},
        {"[::1]:65535", "[::1]:65535"},
        {"[::ffff:1.2.3.4]:9", "[::ffff:1.2.3.4]:9"},
        {"2001:db8::1:4242", NULL},    /* IPv6 without brackets */
        {"[11.0.0.10]:4242", NULL},    /* IPv4 in brackets */
        {"[fe80::1%eth0]:4242", NULL}, /* a scope: no meaning to a peer */
        {"example.com:4242", NULL},
        {"11.0.0.10:0", NULL},
        {"11.0.0.10:65536", NULL},
        {"11.0.0.256:1", NULL},
        {"[2001:db8::1]", NULL},
        {"[2001:db8::1:1", NULL},
        {"", NULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct sockaddr_storage ss;
        int rc = addr_parse(rows[i].in, &ss);
        if (!rows[i].out) {
            if (rc != -EINVAL) fail_msg("%s: accepted", rows[i].in);
            continue;
        }
        char out[64];
        if (rc != 0) fail_msg("%s: refused", rows[i].in);
        assert_int_equal(addr_format((struct sockaddr *)&ss, out, sizeof out), 0);
        assert_string_equal(out, rows[i].out);
    }
    assert_int_equal(addr_parse(NULL, &(struct sockaddr_storage){0}), -EINVAL);
}

static void test_admission_mac_directional(void **state)
{
    uint8_t s1[32], s2[32], a[32], b[32], m1[32], m2[32], m3[32];
    randombytes_buf(s1, 32);
    randombytes_buf(s2, 32);
    randombytes_buf(a, 32);
    randombytes_buf(b, 32);
    identity_admission_mac(s1, a, b, m1);
    identity_admission_mac(s1, b, a, m2);
    identity_admission_mac(s2, a, b, m3);
    assert_memory_not_equal(m1, m2, 32);
    assert_memory_not_equal(m1, m3, 32);
}

static void test_wire_incremental_and_caps(void **state)
{
    buf_t out;
    buf_init(&out, 1 << 21);
    json_t *f = json_pack("{s:s,s:i}", "type", "hb", "inc", 7);
    assert_int_equal(wire_write(&out, WIRE_GOSSIP, f), 0);
    assert_int_equal(wire_write(&out, -1, f), 0); /* a second frame on the same stream */
    json_decref(f);
    /* fed one byte at a time */
    wire_reader_t r;
    wire_reader_init(&r, 1);
    int frames = 0;
    for (size_t i = 0; i < out.len; i++) {
        json_t *got = NULL;
        ssize_t used = wire_read(&r, (const uint8_t *)out.data + i, 1, &got);
        assert_int_equal(used, 1);
        if (got) {
            frames++;
            assert_int_equal(json_integer_value(json_object_get(got, "v")), 1);
            assert_string_equal(json_string_value(json_object_get(got, "type")), "hb");
            json_decref(got);
        }
    }
    assert_int_equal(frames, 2);
    assert_int_equal(r.type, WIRE_GOSSIP);
    wire_reader_free(&r);
    /* a tunnel: the bytes after the frame stay with the caller */
    buf_reset(&out);
    f = json_pack("{s:s}", "model", "m");
    wire_write(&out, WIRE_TUNNEL_HTTP, f);
    json_decref(f);
    buf_append(&out, "GET / HTTP/1.1\r\n", 16);
    wire_reader_init(&r, 1);
    json_t *got = NULL;
    ssize_t used = wire_read(&r, (const uint8_t *)out.data, out.len, &got);
    assert_non_null(got);
    json_decref(got);
    assert_int_equal(out.len - (size_t)used, 16);
    wire_reader_free(&r);

    static const struct {
        uint8_t b[16];
        size_t n;
        int err;
    } bad[] = {
        {{0x00, 0, 0, 0, 2, '{', '}'}, 7, -EPROTO},
        {{0x09, 0, 0, 0, 2, '{', '}'}, 7, -EPROTO}, /* past WIRE_NAT */
        {{0x01, 0xff, 0xff, 0xff, 0xff}, 5, -EMSGSIZE},
        {{0x01, 0x00, 0x10, 0x00, 0x01}, 5, -EMSGSIZE}, /* 1 MiB + 1 */
        {{0x01, 0, 0, 0, 0}, 5, -EMSGSIZE},
        {{0x01, 0, 0, 0, 2, '{', '}'}, 7, -EBADMSG},                           /* no "v" */
        {{0x01, 0, 0, 0, 7, '{', '"', 'v', '"', ':', '2', '}'}, 12, -EBADMSG}, /* v != 1 */
        {{0x01, 0, 0, 0, 3, '[', '1', ']'}, 8, -EBADMSG},
        {{0x01, 0, 0, 0, 3, '{', 'x', '}'}, 8, -EBADMSG},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wire_reader_init(&r, 1);
        got = NULL;
        ssize_t rc = 0;
        size_t off = 0;
        while (off < bad[i].n && rc >= 0) {
            rc = wire_read(&r, bad[i].b + off, bad[i].n - off, &got);
            if (rc > 0) off += (size_t)rc;
            if (rc == 0) break;
        }
        if (rc != bad[i].err) fail_msg("case %zu: got %zd want %d", i, rc, bad[i].err);
        assert_null(got);
        wire_reader_free(&r);
    }
    /* the writer refuses what a reader would refuse */
    buf_reset(&out);
    char *huge = malloc(WIRE_MAX_FRAME + 10);
    memset(huge, 'x', WIRE_MAX_FRAME + 9);
    huge[WIRE_MAX_FRAME + 9] = '\0';
    f = json_pack("{s:s}", "blob", huge);
    assert_int_equal(wire_write(&out, WIRE_GOSSIP, f), -EMSGSIZE);
    json_decref(f);
    free(huge);
    buf_free(&out);
}

int main(void)
{
    if (sodium_init() < 0) return 1;
    setenv("UV_THREADPOOL_SIZE", "1", 1); /* test_last_mesh_written_off_loop holds the pool */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_created_private_and_stable),
        cmocka_unit_test(test_key_readable_by_others_refused),
        cmocka_unit_test(test_mesh_ids),
        cmocka_unit_test(test_corrupt_mesh_state_refused),
        cmocka_unit_test(test_last_mesh_written_off_loop),
        cmocka_unit_test(test_token_roundtrip),
        cmocka_unit_test(test_token_malformed),
        cmocka_unit_test(test_addr_parse),
        cmocka_unit_test(test_admission_mac_directional),
        cmocka_unit_test(test_wire_incremental_and_caps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

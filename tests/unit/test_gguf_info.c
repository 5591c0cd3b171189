/* Unit tests for the GGUF metadata reader (src/core/gguf_info.h) on hand-built headers and, when
 * present, the shared test models. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_info.h"
#include "util.h"

enum { T_U8 = 0, T_I32 = 5, T_STR = 8, T_ARR = 9, T_U64 = 10 };

static void put_u32(buf_t *b, uint32_t v)
{
    assert_int_equal(buf_append(b, &v, 4), 0); /* little-endian hosts only, like the reader */
}

static void put_u64(buf_t *b, uint64_t v)
{
    assert_int_equal(buf_append(b, &v, 8), 0);
}

static void put_str(buf_t *b, const char *s)
{
    put_u64(b, strlen(s));
    assert_int_equal(buf_append(b, s, strlen(s)), 0);
}

static void begin(buf_t *b, uint64_t n_kv)
{
    buf_init(b, 1 << 20);
    assert_int_equal(buf_append(b, "GGUF", 4), 0);
    put_u32(b, 3);
    put_u64(b, 0);
    put_u64(b, n_kv);
}

static void kv_str(buf_t *b, const char *k, const char *v)
{
    put_str(b, k);
    put_u32(b, T_STR);
    put_str(b, v);
}

static void kv_u32(buf_t *b, const char *k, uint32_t type, uint64_t v)
{
    put_str(b, k);
    put_u32(b, type);
    if (type == T_U64)
        put_u64(b, v);
    else if (type == T_U8)
        assert_int_equal(buf_append(b, &v, 1), 0);
    else
        put_u32(b, (uint32_t)v);
}

static void test_basic_any_key_order(void **state)
{
    buf_t b;
    begin(&b, 4);
    kv_u32(&b, "bert.pooling_type", T_I32, 1);
    kv_u32(&b, "bert.block_count", T_I32, 12);
    kv_str(&b, "general.name", "mini");
    kv_str(&b, "general.architecture", "bert");
    gguf_info_t g;
    assert_int_equal(gguf_info_parse((const uint8_t *)b.data, b.len, &g), 0);
    assert_string_equal(g.architecture, "bert");
    assert_string_equal(g.name, "mini");
    assert_int_equal(g.pooling_type, 1);
    assert_int_equal(g.block_count, 12);
    assert_int_equal(gguf_info_type(&g), MM_EMBEDDING);
    /* every prefix is either the same result or "need more bytes" */
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(gguf_info_parse((const uint8_t *)b.data, n, &g), -ENODATA);
    buf_free(&b);
}

/* Keys named like the ones the reader wants but for other architectures must not hide the real
 * ones (the reader used to remember only the first 64 such keys). */
static void test_many_lookalike_keys(void **state)
{
    buf_t b;
    begin(&b, 102);
    for (int i = 0; i < 100; i++) {
        char k[64];
        snprintf(k, sizeof k, "x%d.block_count", i);
        kv_u32(&b, k, T_U8, (uint64_t)i);
    }
    kv_str(&b, "general.architecture", "llama");
    kv_u32(&b, "llama.block_count", T_I32, 7);
    gguf_info_t g;
    assert_int_equal(gguf_info_parse((const uint8_t *)b.data, b.len, &g), 0);
    assert_int_equal(g.block_count, 7);
    buf_free(&b);
}

static void test_out_of_range_values_ignored(void **state)
{
    buf_t b;
    begin(&b, 3);
    kv_str(&b, "general.architecture", "qwen3");
    kv_u32(&b, "qwen3.pooling_type", T_U64, (1ull << 32) + 4); /* not 4 (rank) truncated */
    kv_u32(&b, "qwen3.context_length", T_U64, 1ull << 40);
    gguf_info_t g;
    assert_int_equal(gguf_info_parse((const uint8_t *)b.data, b.len, &g), 0);
    assert_int_equal(g.pooling_type, -1);
    assert_int_equal(g.context_length, 0);
    assert_int_equal(gguf_info_type(&g), MM_LLM);
    buf_free(&b);
}

static void test_hostile_headers(void **state)
{
    buf_t b;
    begin(&b, 1);
    put_str(&b, "a.b");
    put_u32(&b, T_ARR);
    put_u32(&b, T_STR);
    put_u64(&b, 1ull << 62); /* an array that cannot fit */
    gguf_info_t g;
    assert_int_equal(gguf_info_parse((const uint8_t *)b.data, b.len, &g), -ENODATA);
    buf_free(&b);
    begin(&b, 1);
    kv_str(&b, "general.architecture",
           "0123456789012345678901234567890123456789012345678901234567890123");
    assert_int_equal(gguf_info_parse((const uint8_t *)b.data, b.len, &g), -EINVAL);
    buf_free(&b);
    assert_int_equal(gguf_info_parse((const uint8_t *)"GGML", 4, &g), -EINVAL);
}

static void test_shared_models(void **state)
{
    const char *dir = getenv("MESH_LLM_TEST_MODELS");
    if (!dir) {
        print_message("skipping: MESH_LLM_TEST_MODELS is not set\n");
        skip();
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/stories260K.gguf", dir);
    gguf_info_t g;
    int rc = gguf_info_read(path, &g);
    if (rc == -ENOENT) {
        print_message("skipping: %s not found\n", path);
        skip();
    }
    assert_int_equal(rc, 0);
    assert_string_equal(g.architecture, "llama");
    assert_int_equal(g.block_count, 5);
    assert_int_equal(g.context_length, 2048);
    /* the shape the memory ledger sizes the KV cache with */
    assert_int_equal(g.embedding_length, 64);
    assert_int_equal(g.head_count, 8);
    assert_int_equal(g.head_count_kv, 4);
    assert_int_equal(gguf_info_type(&g), MM_LLM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_any_key_order),
        cmocka_unit_test(test_many_lookalike_keys),
        cmocka_unit_test(test_out_of_range_values_ignored),
        cmocka_unit_test(test_hostile_headers),
        cmocka_unit_test(test_shared_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

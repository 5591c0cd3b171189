/* libFuzzer target: the GGUF tensor-table reader (gguf_tensors_parse, gguf_kv_foreach), which
 * reads model files that may come from a download or a peer, and whose offsets and sizes the
 * RPC cache seeding then reads the file at.
 *
 * The input is a file's first bytes; it is parsed as the whole file and as the prefix of a much
 * larger one (so tensor data can lie past the input). Oracles besides the sanitizers: only the
 * documented return codes; every accepted tensor has a valid name, a size that matches its
 * type and shape, an aligned offset inside the file, and does not overlap the metadata or the
 * previous tensor; and the prefix property gguf_tensors_read's grow-and-retry loop relies on:
 * a prefix parses to the same table as the whole input, or to -ENODATA. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_tensors.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static void check_table(int rc, const gguf_tensors_t *t, size_t len, uint64_t file_size)
{
    CHECK(rc == 0 || rc == -EINVAL || rc == -ENODATA || rc == -ENOMEM);
    if (rc != 0) {
        CHECK(t->tensors == NULL && t->n_tensors == 0);
        return;
    }
    CHECK(t->version == 2 || t->version == 3);
    CHECK(t->alignment && (t->alignment & (t->alignment - 1)) == 0);
    CHECK(t->file_size == file_size);
    CHECK(t->n_tensors <= GGUF_MAX_TENSORS);
    CHECK(t->n_tensors == 0 || t->data_offset % t->alignment == 0);
    CHECK(t->data_offset <= file_size);
    /* the table itself was inside the buffer */
    CHECK(t->n_tensors == 0 || t->data_offset < (uint64_t)len + t->alignment);
    uint64_t end = t->data_offset;
    for (size_t i = 0; i < t->n_tensors; i++) {
        const gguf_tensor_t *x = &t->tensors[i];
        size_t n = strnlen(x->name, sizeof x->name);
        CHECK(n > 0 && n < sizeof x->name);
        for (size_t k = 0; k < n; k++)
            CHECK((unsigned char)x->name[k] >= 0x20 && x->name[k] != 0x7f);
        for (size_t j = 0; j < i && j < 64; j++) /* names are unique (spot check) */
            CHECK(strcmp(t->tensors[j].name, x->name) != 0);
        CHECK(x->n_dims <= GGUF_MAX_DIMS);
        for (uint32_t d = x->n_dims; d < GGUF_MAX_DIMS; d++)
            CHECK(x->ne[d] == 1);
        uint64_t nb;
        CHECK(gguf_tensor_nbytes(x->type, x->ne, &nb) == 0 && nb == x->size);
        CHECK(x->offset % t->alignment == 0);
        CHECK(x->offset >= end);
        CHECK(x->offset <= file_size && x->size <= file_size - x->offset);
        end = x->offset + x->size;
    }
}

static int same(const gguf_tensors_t *a, const gguf_tensors_t *b)
{
    return a->version == b->version && a->alignment == b->alignment && a->n_kv == b->n_kv &&
           a->data_offset == b->data_offset && a->n_tensors == b->n_tensors &&
           (a->n_tensors == 0 ||
            memcmp(a->tensors, b->tensors, a->n_tensors * sizeof *a->tensors) == 0);
}

static int count_kv(void *ctx, const gguf_kv_t *kv)
{
    static const uint8_t scalar[GGUF_T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    uint64_t *n = ctx;
    CHECK(kv->type < GGUF_T_COUNT);
    if (kv->type == GGUF_T_STR)
        CHECK(kv->val_len >= 8);
    else if (kv->type == GGUF_T_ARR)
        CHECK(kv->val_len >= 12);
    else
        CHECK(kv->val_len == scalar[kv->type]);
    (*n)++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy: exactly size bytes, so ASan sees any read past the end. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);

    const uint64_t sizes[] = {size, (uint64_t)size + (1ull << 40)};
    for (size_t s = 0; s < 2; s++) {
        uint64_t fsize = sizes[s];
        gguf_tensors_t full;
        int rc = gguf_tensors_parse(buf, size, fsize, &full);
        check_table(rc, &full, size, fsize);
        if (s == 0) CHECK(rc != -ENODATA); /* the whole file: never "need more" */

        const size_t cuts[] = {size / 2, size ? size - 1 : 0, size > 24 ? 24 : 0};
        for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            gguf_tensors_t part;
            int prc = gguf_tensors_parse(buf, cuts[i], fsize, &part);
            check_table(prc, &part, cuts[i], fsize);
            CHECK(prc == -ENODATA || prc == rc);
            if (prc == 0) CHECK(same(&part, &full));
            gguf_tensors_free(&part);
        }
        if (rc == 0) {
            /* the key/value walker agrees on the section */
            uint64_t n = 0;
            size_t end = 0;
            CHECK(gguf_kv_foreach(buf, size, count_kv, &n, &end) == 0);
            CHECK(n == full.n_kv && end <= size);
        }
        gguf_tensors_free(&full);
    }
    free(buf);
    return 0;
}

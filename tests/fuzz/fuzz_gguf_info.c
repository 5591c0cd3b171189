/* libFuzzer target: the GGUF metadata reader (gguf_info_parse), which reads model files that
 * may come from a download or a peer.
 *
 * Oracles besides the sanitizers: only the documented return codes; NUL-terminated strings;
 * and the prefix property gguf_info_read's grow-and-retry loop relies on: a prefix of an input
 * parses to the same result as the whole input, or to -ENODATA. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_info.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static void check_info(int rc, const gguf_info_t *in)
{
    CHECK(rc == 0 || rc == -EINVAL || rc == -ENODATA);
    CHECK(memchr(in->architecture, '\0', sizeof in->architecture) != NULL);
    CHECK(memchr(in->name, '\0', sizeof in->name) != NULL);
    if (rc == 0) {
        CHECK(in->version == 2 || in->version == 3);
        mm_type_t t = gguf_info_type(in);
        CHECK(t == MM_LLM || t == MM_EMBEDDING || t == MM_RERANKING);
    }
}

static int same_info(const gguf_info_t *a, const gguf_info_t *b)
{
    return a->version == b->version && a->n_tensors == b->n_tensors && a->n_kv == b->n_kv &&
           strcmp(a->architecture, b->architecture) == 0 && strcmp(a->name, b->name) == 0 &&
           a->pooling_type == b->pooling_type && a->block_count == b->block_count &&
           a->context_length == b->context_length && a->has_classifier == b->has_classifier;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy: exactly size bytes, so ASan sees any read past the end. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);

    gguf_info_t full;
    int rc = gguf_info_parse(buf, size, &full);
    check_info(rc, &full);

    const size_t cuts[] = {size / 2, size ? size - 1 : 0, size > 24 ? 24 : 0};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        gguf_info_t part;
        int prc = gguf_info_parse(buf, cuts[i], &part);
        check_info(prc, &part);
        CHECK(prc == -ENODATA || prc == rc);
        if (prc == 0) CHECK(same_info(&part, &full));
    }
    free(buf);
    return 0;
}

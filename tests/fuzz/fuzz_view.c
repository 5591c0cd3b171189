/* libFuzzer target: view_decode, the typed view of a peer's announcement (src/core/view.h).
 *
 * Oracles besides the sanitizers: every list respects its cap; what was decoded encodes and
 * decodes again to an equal node with nothing rejected (the decoder keeps only what the encoder
 * can say); the memory a node offers any of its models never exceeds what it announces. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "view.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

#define ID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *ann = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!ann) return 0;
    view_node_t n, back;
    int rc = view_decode(ann, ID, &n);
    CHECK(rc == 0 || !json_is_object(ann));
    if (rc == 0) {
        CHECK(n.n_available <= VIEW_MAX_LIST && n.n_serving <= VIEW_MAX_LIST &&
              n.n_requested <= VIEW_MAX_LIST && n.n_plans <= VIEW_MAX_PLANS);
        for (size_t i = 0; i < n.n_serving; i++) {
            const view_serving_t *s = &n.serving[i];
            CHECK(!s->plan || s->plan->n_workers <= VIEW_MAX_PLAN_WORKERS);
            CHECK(view_offer_for(&n, s->model) <= n.vram_bytes);
        }
        json_t *out = json_object();
        CHECK(out && view_encode(&n, out) == 0);
        CHECK(view_decode(out, ID, &back) == 0);
        CHECK(back.rejected == 0);
        CHECK(view_node_equal(&n, &back));
        view_node_free(&back);
        json_decref(out);
    }
    view_node_free(&n);
    json_decref(ann);
    return 0;
}

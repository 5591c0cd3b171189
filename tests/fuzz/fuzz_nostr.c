/* libFuzzer target: what a Nostr relay sends (nostr_msg_parse: NIP-01 relay messages and the
 * events in them), then nostr_event_verify and listing_from_event on every parsed event.
 *
 * Oracles besides the sanitizers: a parsed event stays within the caps; it re-serializes to an
 * event object that parses again to the same id, tags and content; a listing that decodes keeps
 * its bounds and its token names its mesh; an invalid message always says why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "listing.h"
#include "nostr_msg.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static void check_event(const nostr_event_t *ev)
{
    CHECK(ev->n_tags <= NOSTR_MAX_TAGS);
    CHECK(ev->content && strlen(ev->content) <= NOSTR_CONTENT_MAX);
    for (size_t i = 0; i < ev->n_tags; i++) {
        CHECK(ev->tags[i].n >= 1 && ev->tags[i].n <= NOSTR_TAG_MAX_VALS);
        for (size_t k = 0; k < ev->tags[i].n; k++)
            CHECK(strlen(ev->tags[i].v[k]) <= NOSTR_TAG_VAL_MAX);
    }
    (void)nostr_event_verify(ev);
    /* round trip */
    json_t *j = nostr_event_to_json(ev);
    CHECK(j);
    nostr_event_t back;
    char err[160];
    CHECK(nostr_event_from_json(j, &back, err, sizeof err) == 0);
    CHECK(strcmp(back.id, ev->id) == 0 && back.n_tags == ev->n_tags &&
          strcmp(back.content, ev->content) == 0 && back.created_at == ev->created_at);
    char a[NOSTR_HEX32], b[NOSTR_HEX32];
    CHECK(nostr_event_compute_id(ev, a) == 0 && nostr_event_compute_id(&back, b) == 0);
    CHECK(strcmp(a, b) == 0);
    nostr_event_free(&back);
    json_decref(j);
    mesh_listing_t l;
    if (listing_from_event(ev, 0, &l, err, sizeof err) == 0) {
        CHECK(l.n_models <= LISTING_MAX_MODELS);
        CHECK(strcmp(l.mesh_id, nostr_event_tag(ev, "d")) == 0);
        token_t t;
        CHECK(token_decode(l.token, strlen(l.token), &t, err, sizeof err) == 0);
        CHECK(strcmp(t.mesh_id, l.mesh_id) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) init = sodium_init() >= 0 ? 1 : -1;
    nostr_msg_t m;
    nostr_msg_type_t t = nostr_msg_parse((const char *)data, size, &m);
    CHECK(t == m.type);
    if (t == NOSTR_MSG_INVALID) CHECK(m.message[0] != 0);
    if (t == NOSTR_MSG_EVENT) check_event(&m.event);
    nostr_msg_free(&m);
    return 0;
}

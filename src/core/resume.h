/* resume — continuing a streamed completion on another replica after its host died (pure).
 *
 * A routed /v1/chat/completions or /v1/completions stream is watched event by event
 * (resume_track_event, fed by sse.h): the id and created of the stream, the text generated so
 * far and the number of content chunks (one token each with llama-server), whether it finished,
 * and anything that makes a continuation impossible (a tool call or reasoning being streamed,
 * more than one choice, an error event, non-JSON data, text past RESUME_MAX_TEXT).
 * When the host dies before the end, resume_build() makes the request for another replica:
 *  - chat: the original messages with the generated text as a trailing assistant message (or
 *    appended to the request's own trailing assistant message); llama-server prefills it
 *    (--prefill-assistant, its default) and generates what follows;
 *  - completions: the prompt (a string) with the generated text appended;
 *  - max_tokens / max_completion_tokens / n_predict lowered by the tokens already generated.
 * The new stream's events go through resume_splice_event(): id and created are rewritten to the
 * first stream's, and the chat role-only opening chunk is dropped, so the client sees one
 * stream. Requests a continuation cannot honour are refused up front (request.h:
 * request_resumable): not streamed, n > 1, a non-string prompt, grammar / JSON-schema constrained
 * output. */
#ifndef MESH_RESUME_H
#define MESH_RESUME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define RESUME_MAX_TEXT (256u << 10)

typedef enum { RESUME_CHAT = 0, RESUME_COMPLETION = 1 } resume_kind_t;

typedef struct {
    resume_kind_t kind;
    char id[128];
    bool have_id;
    int64_t created;
    bool have_created;
    char model[128];
    char *text; /* generated so far (NUL-terminated), at most RESUME_MAX_TEXT */
    size_t text_len, text_cap;
    size_t n_tokens; /* content chunks seen */
    bool done;       /* "[DONE]" seen */
    bool finished;   /* a finish_reason was sent */
    bool blocked;    /* a continuation is impossible (why says why) */
    char why[160];
} resume_track_t;

/* The kind for an API path, -1 when the path has no continuation. */
int resume_kind_for_path(const char *path);
/* (Whether a stream of a request can be continued elsewhere is request.h's
 * request_resumable, read from the body parsed once.) */

void resume_track_init(resume_track_t *t, resume_kind_t kind);
void resume_track_free(resume_track_t *t);
/* One SSE event's data from the stream being served (the first or a spliced one). */
void resume_track_event(resume_track_t *t, const char *data, size_t len);

#define RESUME_NOTHING_LEFT 1
/* The continuation request body (malloc'd JSON in *out). Returns 0, RESUME_NOTHING_LEFT when
 * the token budget is used up (nothing to ask: end the stream with finish_reason "length"),
 * or -EINVAL (why set) when there is no continuation. */
int resume_build(const resume_track_t *t, const char *body, size_t len, char **out, size_t *olen,
                 char *why, size_t wl);

/* An event of the continuation stream, as the client must see it: 1 with the rewritten data in
 * out (reset first), 0 when the event is dropped, -ENOMEM. "[DONE]" is returned unchanged. */
int resume_splice_event(const resume_track_t *t, const char *data, size_t len, buf_t *out);

/* The final chunk that ends a stream whose token budget ran out during the failover. */
int resume_length_chunk(const resume_track_t *t, buf_t *out);

/* How long a routed request may wait for its first response byte before it is retried on
 * another host: base_ms plus per_kb_ms for each KiB of the request body (long prompts take
 * longer to prefill), at most 30 minutes. */
uint64_t resume_first_byte_ms(uint64_t base_ms, uint64_t per_kb_ms, size_t body_len);

#endif

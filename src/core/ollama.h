/* ollama — Ollama's API translated to and from the OpenAI API the node serves (pure: no I/O, no
 * clock; the time is passed in).
 *
 * Requests: an Ollama body (POST /api/chat, /api/generate, /api/embed, /api/embeddings) is read
 * once (bounded: at most OLLAMA_MAX_MESSAGES messages, OLLAMA_MAX_IMAGES images) and written as
 * the OpenAI body the entry node routes like any other request: chat and a templated generate
 * become /v1/chat/completions (generate's "system" and "prompt" a system and a user message),
 * a raw generate /v1/completions with the prompt, embed and embeddings /v1/embeddings. "options"
 * become llama.cpp's sampling fields (temperature, top_p, top_k, min_p, typical_p, seed,
 * num_predict as max_tokens, stop, repeat_penalty, repeat_last_n, presence_penalty,
 * frequency_penalty, mirostat*); the loader's options (num_ctx, num_gpu, num_thread, …) are
 * ignored, as a running llama-server cannot change them. "format": "json" becomes
 * response_format json_object, a schema object response_format json_schema (a raw generate's:
 * llama.cpp's json_schema field, {"type":"object"} for "json"); "tools" pass as
 * they are (Ollama's are OpenAI's), a message's "images" (base64) become image_url parts and
 * its tool calls OpenAI's (arguments as a JSON string). Bad input is a 400 with a clear text.
 *
 * Responses: ollama_resp_t turns the OpenAI answer back into Ollama's: a streamed answer's SSE
 * events (core/sse.c) into NDJSON lines ({"model","created_at","message"|"response",
 * "done":false} …, then one "done":true line with done_reason and the counts and durations of
 * the answer's usage and timings), a whole answer into one JSON object, an OpenAI error body
 * into {"error":"…"}. A stream that ends before its last event ends with an error line. */
#ifndef MESH_OLLAMA_H
#define MESH_OLLAMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "sse.h"
#include "util.h"

#define OLLAMA_VERSION "0.6.4" /* what GET /api/version says: the API this follows */
#define OLLAMA_MAX_MESSAGES 4096
#define OLLAMA_MAX_IMAGES 64
#define OLLAMA_MAX_TOOL_CALLS 16
#define OLLAMA_MAX_TOOL_ARGS (64u << 10) /* one streamed tool call's arguments */
#define OLLAMA_MAX_WHOLE (64u << 20)     /* a whole (not streamed) answer */
#define OLLAMA_ERR_MAX 256

typedef enum {
    OL_NONE = 0,   /* not an Ollama path */
    OL_VERSION,    /* GET /api/version */
    OL_TAGS,       /* GET /api/tags */
    OL_PS,         /* GET /api/ps */
    OL_SHOW,       /* POST /api/show */
    OL_CHAT,       /* POST /api/chat */
    OL_GENERATE,   /* POST /api/generate */
    OL_EMBED,      /* POST /api/embed */
    OL_EMBEDDINGS, /* POST /api/embeddings (the older one) */
    OL_PULL,       /* POST /api/pull */
    OL_DELETE,     /* DELETE /api/delete */
    OL_UNKNOWN,    /* any other /api/... path (the node's /api/v0, /api/v1 are not Ollama's) */
} ollama_ep_t;

/* The endpoint of a path (exact, no query string); OL_NONE outside /api/ and for /api/v0/...,
 * /api/v1/... (the node's model manager). */
ollama_ep_t ollama_endpoint(const char *path);
/* The method an endpoint takes ("GET", "POST", "DELETE"; NULL for OL_NONE, OL_UNKNOWN). */
const char *ollama_method(ollama_ep_t ep);
/* The path of an endpoint ("/api/chat": a static string) and, for inference, its metrics label
 * ("ollama_chat", "ollama_generate", "ollama_embed", "ollama_embeddings"); NULL for OL_NONE and
 * OL_UNKNOWN (and the label of the others). */
const char *ollama_path(ollama_ep_t ep);
const char *ollama_label(ollama_ep_t ep);
/* Whether the endpoint is inference (translated and routed like an OpenAI request). */
bool ollama_is_inference(ollama_ep_t ep);

typedef struct {
    ollama_ep_t ep;
    char model[CATALOG_NAME_MAX];
    bool stream;           /* the client wants NDJSON lines (Ollama's default) */
    bool raw;              /* generate with raw: true (a /v1/completions prompt) */
    bool load_only;        /* generate or chat with nothing to answer: Ollama's "load" call */
    bool keep_alive_zero;  /* keep_alive 0: unload the model after the request */
    bool keep_alive_set;   /* keep_alive given: */
    int64_t keep_alive_ms; /* how long the model stays loaded idle after it (< 0: no limit) */
    bool images;
    const char *path; /* the OpenAI path the body goes to (a static string) */
    char *body;       /* the OpenAI body (malloc'd) */
    size_t body_len;
    char err[OLLAMA_ERR_MAX];
} ollama_req_t;

/* Ollama's keep_alive: seconds as a JSON number, or a Go duration string ("5m", "1h30m",
 * "250ms", "1.5h", "0"; a bare number string is seconds), into *ms: 0 (unload now), > 0, or -1
 * for a negative value (no limit) and one beyond OLLAMA_KEEP_ALIVE_MAX_MS. 0 or -EINVAL. */
#define OLLAMA_KEEP_ALIVE_MAX_MS (100ULL * 365 * 24 * 3600 * 1000) /* past this: no limit */
int ollama_keep_alive(const json_t *v, int64_t *ms);

/* Translate an Ollama inference body (len bytes) for ep. Returns 0, -EINVAL (err says why: a
 * 400), -ENOMEM. out is fully written; free with ollama_req_free. */
int ollama_request(ollama_req_t *out, ollama_ep_t ep, const char *body, size_t len);
void ollama_req_free(ollama_req_t *rq);

/* The model named by a body of POST /api/show or /api/pull or DELETE /api/delete ("model", or
 * the older "name"), and (stream not NULL) its "stream" (true unless false): 0, or -EINVAL with
 * err. */
int ollama_model_of(const char *body, size_t len, char *model, size_t ml, bool *stream, char *err,
                    size_t el);

typedef struct {
    char name[OLLAMA_ERR_MAX];
    buf_t args;
} ollama_tool_acc_t;

typedef struct {
    ollama_ep_t ep;
    bool raw;
    char model[CATALOG_NAME_MAX];
    char created_at[48];
    uint64_t start_ns; /* for total_duration */
    sse_parser_t sse;
    buf_t *out;    /* while feeding */
    int rc;        /* the first error of a feed (-ENOMEM, -E2BIG) */
    bool done;     /* the done line (or an error line) was written */
    bool finished; /* a finish_reason was seen */
    char done_reason[32];
    int64_t prompt_n, eval_n;
    double prompt_ms, eval_ms;
    ollama_tool_acc_t tools[OLLAMA_MAX_TOOL_CALLS];
    size_t n_tools;
} ollama_resp_t;

/* created_at: the RFC 3339 time every line carries; start_ns: when the request began (the
 * clock of now_ns below). */
void ollama_resp_init(ollama_resp_t *r, const ollama_req_t *rq, const char *created_at,
                      uint64_t start_ns);
void ollama_resp_free(ollama_resp_t *r);
/* A streamed answer: n bytes of its SSE body; the NDJSON lines they complete are appended to
 * out. Returns 0 or a negative errno (out of memory, a line past out's cap). */
int ollama_stream_feed(ollama_resp_t *r, const char *p, size_t n, uint64_t now_ns, buf_t *out);
/* The stream ended (complete: the upstream response ended normally). Without its last event,
 * an error line is appended; with it and no done line yet, the done line. */
int ollama_stream_end(ollama_resp_t *r, bool complete, uint64_t now_ns, buf_t *out);
/* A whole answer: upstream status and body → Ollama's JSON in out, its status in *status. */
int ollama_whole(ollama_resp_t *r, int upstream_status, const char *body, size_t n, uint64_t now_ns,
                 buf_t *out, int *status);
/* {"error":"msg"} (with a newline when line) appended to out. */
int ollama_error_json(const char *msg, bool line, buf_t *out);
/* The message of an OpenAI or Anthropic error body, or of {"error":"…"}; false when body has
 * none. */
bool ollama_error_message(const char *body, size_t n, char *msg, size_t ml);

/* A llama.cpp file type (GGUF general.file_type) as Ollama's quantization_level ("Q8_0", …);
 * "unknown" when not known. */
const char *ollama_quant_name(int32_t file_type);

#endif

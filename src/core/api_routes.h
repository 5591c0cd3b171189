/* api_routes — the inference endpoints a node serves and passes through to llama-server (pure:
 * no I/O). One typed row per path: the model type it needs, the shape of the errors the node
 * answers on it (OpenAI or Anthropic), the body field that names the model and a short label
 * for metrics. The same table is what a mesh member may reach through a TUNNEL_HTTP stream
 * (plus GET /v1/models and GET /health), nothing broader.
 *
 * The paths are those the pinned llama-server (llama.cpp of node-llama-cpp 3.22.1) answers with
 * a model: OpenAI chat/completions/embeddings/responses, Anthropic messages, llama.cpp's own
 * /completion, /tokenize, /detokenize, /apply-template, /infill, rerank and their aliases. */
#ifndef MESH_API_ROUTES_H
#define MESH_API_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

/* OLLAMA: {"error":"message"} (Ollama's API, /api/... but the node's /api/v0, /api/v1) */
typedef enum { API_ERR_OPENAI = 0, API_ERR_ANTHROPIC = 1, API_ERR_OLLAMA = 2 } api_err_shape_t;

/* what the endpoint needs (values of mm_type_t; ANY: whatever model, e.g. /tokenize) */
enum { API_NEEDS_ANY = -1, API_NEEDS_LLM = 0, API_NEEDS_EMBEDDING = 1, API_NEEDS_RERANKING = 2 };

typedef struct {
    const char *path;        /* exact path (no query string); the method is POST */
    int needs;               /* API_NEEDS_* */
    api_err_shape_t errors;  /* the shape of the node's own errors on this path */
    const char *model_field; /* the body's field naming the model */
    const char *label;       /* bounded metrics label (the canonical endpoint) */
} api_route_t;

/* The row for a POST to path, NULL when it is not a model endpoint. */
const api_route_t *api_route_find(const char *path);
size_t api_route_count(void);
const api_route_t *api_route_at(size_t i);
/* The error shape of any path (Anthropic for /v1/messages and below, Ollama for /api/... but
 * /api/v0/... and /api/v1/..., else OpenAI). */
api_err_shape_t api_route_err_shape(const char *path);
/* Whether a request may come through a mesh member's tunnel: POST to a row of the table,
 * GET /v1/models, GET /health. method and path are exact (path without the query string). */
bool api_route_tunnel_allowed(const char *method, const char *path);
/* The same check on a raw request line "METHOD URL HTTP/1.1" (len bytes, CRLF optional). */
bool api_route_tunnel_line_allowed(const char *line, size_t len);
/* Anthropic's error type for an HTTP status (invalid_request_error, authentication_error,
 * permission_error, not_found_error, request_too_large, rate_limit_error, api_error,
 * overloaded_error). */
const char *api_anthropic_error_type(int status);

/* How a streamed answer on path ends when its model server dies in the middle: OpenAI's
 * error data then "[DONE]" (chat, completions, llama.cpp's own), Anthropic's "event: error"
 * (/v1/messages), the Responses API's "response.failed" (/v1/responses). */
typedef enum { API_STREAM_OPENAI = 0, API_STREAM_ANTHROPIC, API_STREAM_RESPONSES } api_stream_t;
api_stream_t api_stream_kind(const char *path);
/* The SSE text (event and data lines, each event ending in a blank line) that ends such a
 * stream with an error: malloc'd, NULL without memory. */
char *api_stream_error(api_stream_t kind, const char *code, const char *msg);

#endif

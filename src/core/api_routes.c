/* api_routes — see api_routes.h. */
#include "api_routes.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define R_LLM(p, lbl)                                                                              \
    {                                                                                              \
        p, API_NEEDS_LLM, API_ERR_OPENAI, "model", lbl                                             \
    }
#define R_ANT(p, lbl)                                                                              \
    {                                                                                              \
        p, API_NEEDS_LLM, API_ERR_ANTHROPIC, "model", lbl                                          \
    }

static const api_route_t ROUTES[] = {
    R_LLM("/v1/chat/completions", "chat"),
    R_LLM("/chat/completions", "chat"),
    R_LLM("/v1/completions", "completions"),
    R_LLM("/completions", "completions"),
    R_LLM("/completion", "completions"),
    R_LLM("/v1/responses", "responses"),
    R_LLM("/v1/chat/completions/input_tokens", "input_tokens"),
    R_LLM("/v1/responses/input_tokens", "input_tokens"),
    R_ANT("/v1/messages", "messages"),
    R_ANT("/v1/messages/count_tokens", "count_tokens"),
    R_LLM("/infill", "infill"),
    R_LLM("/apply-template", "apply_template"),
    {"/tokenize", API_NEEDS_ANY, API_ERR_OPENAI, "model", "tokenize"},
    {"/detokenize", API_NEEDS_ANY, API_ERR_OPENAI, "model", "detokenize"},
    {"/v1/embeddings", API_NEEDS_EMBEDDING, API_ERR_OPENAI, "model", "embeddings"},
    {"/embeddings", API_NEEDS_EMBEDDING, API_ERR_OPENAI, "model", "embeddings"},
    {"/embedding", API_NEEDS_EMBEDDING, API_ERR_OPENAI, "model", "embeddings"},
    {"/v1/rerank", API_NEEDS_RERANKING, API_ERR_OPENAI, "model", "rerank"},
    {"/v1/reranking", API_NEEDS_RERANKING, API_ERR_OPENAI, "model", "rerank"},
    {"/rerank", API_NEEDS_RERANKING, API_ERR_OPENAI, "model", "rerank"},
    {"/reranking", API_NEEDS_RERANKING, API_ERR_OPENAI, "model", "rerank"},
};

#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])

size_t api_route_count(void)
{
    return N_ROUTES;
}

const api_route_t *api_route_at(size_t i)
{
    return i < N_ROUTES ? &ROUTES[i] : NULL;
}

const api_route_t *api_route_find(const char *path)
{
    for (size_t i = 0; path && i < N_ROUTES; i++)
        if (strcmp(path, ROUTES[i].path) == 0) return &ROUTES[i];
    return NULL;
}

api_err_shape_t api_route_err_shape(const char *path)
{
    if (path && strncmp(path, "/api/", 5) == 0 && strncmp(path, "/api/v0/", 8) != 0 &&
        strncmp(path, "/api/v1/", 8) != 0)
        return API_ERR_OLLAMA;
    if (!path || strncmp(path, "/v1/messages", 12) != 0) return API_ERR_OPENAI;
    return path[12] == '\0' || path[12] == '/' ? API_ERR_ANTHROPIC : API_ERR_OPENAI;
}

bool api_route_tunnel_allowed(const char *method, const char *path)
{
    if (!method || !path) return false;
    if (strcmp(method, "GET") == 0)
        return strcmp(path, "/v1/models") == 0 || strcmp(path, "/health") == 0;
    return strcmp(method, "POST") == 0 && api_route_find(path) != NULL;
}

bool api_route_tunnel_line_allowed(const char *line, size_t len)
{
    char method[8], path[64];
    size_t i = 0, m = 0, p = 0;
    while (i < len && line[i] != ' ' && m < sizeof method - 1)
        method[m++] = line[i++];
    method[m] = '\0';
    if (i >= len || line[i] != ' ') return false;
    i++;
    while (i < len && line[i] != ' ' && line[i] != '?' && p < sizeof path - 1)
        path[p++] = line[i++];
    path[p] = '\0';
    if (i >= len || (line[i] != ' ' && line[i] != '?')) return false; /* too long or no version */
    while (i < len && line[i] != ' ')
        i++;
    if (len - i < 9 || strncmp(line + i, " HTTP/1.", 8) != 0) return false;
    return api_route_tunnel_allowed(method, path);
}

const char *api_anthropic_error_type(int status)
{
    switch (status) {
    case 400:
    case 405:
    case 414:
    case 415:
    case 431:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
    case 529:
        return "overloaded_error";
    default:
        return status >= 400 && status < 500 ? "invalid_request_error" : "api_error";
    }
}

api_stream_t api_stream_kind(const char *path)
{
    if (path && strcmp(path, "/v1/messages") == 0) return API_STREAM_ANTHROPIC;
    if (path && strcmp(path, "/v1/responses") == 0) return API_STREAM_RESPONSES;
    return API_STREAM_OPENAI;
}

char *api_stream_error(api_stream_t kind, const char *code, const char *msg)
{
    json_t *e = kind == API_STREAM_ANTHROPIC
                    ? json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", "api_error",
                                "message", msg)
                : kind == API_STREAM_RESPONSES
                    ? json_pack("{s:s,s:{s:s,s:{s:s,s:s}}}", "type", "response.failed", "response",
                                "status", "failed", "error", "code", code, "message", msg)
                    : json_pack("{s:{s:s,s:s,s:s}}", "error", "message", msg, "type",
                                "upstream_error", "code", code);
    char *js = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    if (!js) return NULL;
    const char *head = kind == API_STREAM_ANTHROPIC   ? "event: error\n"
                       : kind == API_STREAM_RESPONSES ? "event: response.failed\n"
                                                      : "";
    const char *tail = kind == API_STREAM_OPENAI ? "\n\ndata: [DONE]\n\n" : "\n\n";
    size_t len = strlen(head) + strlen(js) + strlen(tail) + 8;
    char *out = malloc(len);
    if (out) snprintf(out, len, "%sdata: %s%s", head, js, tail);
    free(js);
    return out;
}

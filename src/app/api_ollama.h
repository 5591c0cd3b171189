/* api_ollama — Ollama's API on the inference port (core/ollama.h translates): /api/version,
 * /api/tags, /api/ps, /api/show (renderers of the node's typed state, api_ollama_list.c),
 * /api/chat, /api/generate, /api/embed, /api/embeddings (the body translated once into the
 * OpenAI body and served like any inference request; the answer translated back by a response
 * filter on the client's request, api_ollama_filter.c), /api/pull and /api/delete (local
 * management: a download into the models directory, and the removal of one); every other
 * /api/... path answers an Ollama-shaped error. */
#ifndef MESH_API_OLLAMA_H
#define MESH_API_OLLAMA_H

#include "api_openai.h"
#include "ollama.h"

/* Answer req (an Ollama path, ep: ollama_endpoint's; the key was checked): NULL when it is
 * answered (or will be), else the OpenAI path (a static string) the request goes on to as an
 * ordinary inference request — its body translated, its answer filtered back into Ollama's. */
const char *api_ollama(api_t *api, httpd_req_t *req, ollama_ep_t ep);

/* The listings (api_ollama_list.c). */
void api_ollama_tags(api_t *api, httpd_req_t *req);
void api_ollama_ps(api_t *api, httpd_req_t *req);
void api_ollama_show(api_t *api, httpd_req_t *req);
/* POST /api/pull (api_ollama_pull.c) and DELETE /api/delete (api_ollama_delete.c): local
 * management actions, checked by the caller. */
void api_ollama_pull(api_t *api, httpd_req_t *req);
void api_ollama_delete(api_t *api, httpd_req_t *req);

/* Set the response filter that turns the OpenAI answer to req into Ollama's, taking rq (its
 * body becomes the request's; freed with the request). unload (NULL: none): a model of ms to
 * unload when the request ends (keep_alive 0). Returns 0 or -ENOMEM (rq is then freed). */
int api_ollama_filter(httpd_req_t *req, ollama_req_t *rq, models_t *ms, model_entry_t *unload);
/* The RFC 3339 time Ollama's answers carry, of now (api_ollama_filter.c). */
void api_ollama_time(char *out, size_t len);

#endif

/* cli_status — the commands that talk to a running node's management API on 127.0.0.1:
 *   mesh-llm status [--console PORT]        a readable summary of GET /api/status
 *   mesh-llm join TOKEN [--console PORT]    POST /api/join, then follow the node until it is in
 *                                           the mesh (or --timeout SECONDS passes; default 60)
 * TOKEN may be @FILE (read from a file, out of ps' sight). $MESH_LLM_API_KEY, when set, is sent
 * as the API key. Exit status: 0 done, 1 failed (the reason on stderr), 2 usage. */
#ifndef MESH_CLI_STATUS_H
#define MESH_CLI_STATUS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* One HTTP exchange with a node (or its llama-server) for the commands. */
typedef struct {
    int port;
    uint32_t addr; /* IPv4, network order; 0: 127.0.0.1 */
    int status;    /* HTTP status, 0 when no answer */
    bool refused;  /* no answer because nothing listens there */
    json_t *body;  /* parsed JSON body or NULL */
    char err[256]; /* why there is no answer */
} cli_http_t;

/* One request to h->addr:h->port on a fresh connection (Connection: close), with
 * $MESH_LLM_API_KEY as the bearer key when set; the answer (at most 8 MiB) in h. The caller
 * json_decref's h->body. */
void cli_request(cli_http_t *h, const char *method, const char *path, const char *body);

bool cli_is_command(const char *arg);
int cli_main(int argc, char **argv);

#endif

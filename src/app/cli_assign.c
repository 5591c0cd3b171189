/* cli_assign — mesh-llm assign MODEL [--node ID] and mesh-llm unassign MODEL (cli_status.h):
 * POST /api/assign or /api/unassign to the node running here, then (assign) follow its status
 * until the model serves (or --timeout SECONDS passes; default 600). A peer never orders another
 * node: for --node ID of another node the command says to run it there. */
#include "cli_assign.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_status.h"
#include "util.h"

#define POLL_MS 250

static const char *message(const cli_http_t *h, const char *def)
{
    json_t *e = json_object_get(h->body, "error");
    const char *m = json_string_value(json_object_get(e ? e : h->body, "message"));
    return m ? m : def;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* This node's id from its status ("" when it does not say). */
static int node_id(cli_http_t *h, const char *cmd, char *id, size_t len)
{
    cli_request(h, "GET", "/api/status", NULL);
    if (h->status != 200) {
        fprintf(stderr, "mesh-llm %s: %s\n", cmd, h->status ? message(h, "no status") : h->err);
        return -1;
    }
    const char *s = json_string_value(json_object_get(json_object_get(h->body, "node"), "id"));
    snprintf(id, len, "%s", s ? s : "");
    return 0;
}

/* The assignment of model in the status, or NULL. */
static json_t *assignment(json_t *st, const char *model)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(st, "assignments"), i, a)
    {
        if (strcmp(json_string_value(json_object_get(a, "model")) ?: "", model) == 0) return a;
    }
    return NULL;
}

static int follow(cli_http_t *h, const char *model, uint64_t timeout_ms)
{
    uint64_t deadline = mono_ms() + timeout_ms;
    char last[64] = "";
    for (;;) {
        cli_request(h, "GET", "/api/status", NULL);
        if (h->status == 0) {
            fprintf(stderr, "mesh-llm assign: the node stopped answering: %s\n", h->err);
            return 1;
        }
        json_t *a = assignment(h->body, model);
        if (!a) {
            fprintf(stderr, "mesh-llm assign: %s is no longer assigned (see mesh-llm status)\n",
                    model);
            return 1;
        }
        const char *state = json_string_value(json_object_get(a, "state")) ?: "?";
        if (strcmp(state, "ready") == 0) {
            printf("%s serves on this node\n", model);
            return 0;
        }
        if (strcmp(state, last) != 0) {
            printf("%s: %s\n", model, state);
            fflush(stdout);
            snprintf(last, sizeof last, "%s", state);
        }
        if (mono_ms() >= deadline) {
            fprintf(stderr,
                    "mesh-llm assign: %s is not serving after %llu s (it stays assigned; see "
                    "mesh-llm status)\n",
                    model, (unsigned long long)(timeout_ms / 1000));
            return 1;
        }
        usleep(POLL_MS * 1000);
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: mesh-llm assign MODEL [--node ID] [--console PORT] [--timeout SECONDS] "
                    "[--no-wait]\n"
                    "       mesh-llm unassign MODEL [--console PORT]\n");
    return 2;
}

int cli_assign_main(int argc, char **argv)
{
    bool unassign = strcmp(argv[1], "unassign") == 0, wait = true;
    const char *cmd = argv[1], *model = NULL, *node = NULL;
    cli_http_t h = {.port = 3131};
    uint64_t v, timeout_s = 600;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--console") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], 1, 65535, &v) != 0) return usage();
            h.port = (int)v;
        } else if (!unassign && strcmp(argv[i], "--node") == 0 && i + 1 < argc) {
            node = argv[++i];
        } else if (!unassign && strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], 1, 86400, &timeout_s) != 0) return usage();
        } else if (!unassign && strcmp(argv[i], "--no-wait") == 0) {
            wait = false;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage();
            return 0;
        } else if (!model && argv[i][0] != '-') {
            model = argv[i];
        } else {
            fprintf(stderr, "mesh-llm %s: unexpected argument '%s'\n", cmd, argv[i]);
            return usage();
        }
    }
    if (!model) {
        fprintf(stderr, "mesh-llm %s: give the model (a name, a file's model, a reference)\n", cmd);
        return usage();
    }
    int rc = 1;
    if (node) {
        char id[129];
        if (node_id(&h, cmd, id, sizeof id) != 0) goto out;
        if (strlen(node) < 8 || strncmp(id, node, strlen(node)) != 0) {
            fprintf(stderr,
                    "mesh-llm assign: node %s is not the node running here (%.12s): a node takes "
                    "assignments only from its own operator, never from a peer. On that node's "
                    "machine, run:\n  mesh-llm assign %s\n",
                    node, id, model);
            goto out;
        }
    }
    json_t *req = json_pack("{s:s}", "model", model);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) goto out;
    cli_request(&h, "POST", unassign ? "/api/unassign" : "/api/assign", body);
    free(body);
    if (h.status == 0) {
        fprintf(stderr, "mesh-llm %s: %s\n", cmd, h.err);
        goto out;
    }
    if (h.status != 200 && h.status != 202) {
        fprintf(stderr, "mesh-llm %s: refused (%d): %s\n", cmd, h.status, message(&h, "?"));
        goto out;
    }
    printf("%s\n", message(&h, unassign ? "unassigned" : "assigned"));
    fflush(stdout);
    char name[256];
    snprintf(name, sizeof name, "%s", json_string_value(json_object_get(h.body, "model")) ?: model);
    rc = unassign || !wait || h.status == 202 ? 0 : follow(&h, name, timeout_s * 1000);
out:
    json_decref(h.body);
    return rc;
}

/* mesh-llm discover: list public meshes. */
#include "cli_discover.h"

#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "config.h"
#include "discovery.h"
#include "log.h"
#include "tunables.h"
#include "nostr_pool.h"
#include "util.h"

bool cli_discover_is_command(const char *arg)
{
    return strcmp(arg, "discover") == 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: mesh-llm discover [--region R] [--model M] [--json] "
                    "[--nostr-relay URL]... [--timeout SECONDS]\n");
    return 2;
}

typedef struct {
    uv_loop_t *loop;
    discovery_t *disc;
    uv_timer_t timer;
    bool done;
} run_t;

static void finish(run_t *r)
{
    if (r->done) return;
    r->done = true;
    uv_stop(r->loop);
}

static void on_change(void *data)
{
    run_t *r = data;
    if (r->disc && discovery_settled(r->disc)) finish(r);
}

static void on_timeout(uv_timer_t *t)
{
    finish(t->data);
}

static void close_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void gib(uint64_t b, char *out, size_t n)
{
    snprintf(out, n, "%.1f GiB", (double)b / (1024.0 * 1024 * 1024));
}

static void print_table(json_t *doc)
{
    json_t *meshes = json_object_get(doc, "meshes");
    if (json_array_size(meshes) == 0) {
        printf("no public meshes found\n");
        return;
    }
    size_t i;
    json_t *m;
    json_array_foreach(meshes, i, m)
    {
        char tot[32], fr[32];
        gib((uint64_t)json_integer_value(json_object_get(m, "mem_total")), tot, sizeof tot);
        gib((uint64_t)json_integer_value(json_object_get(m, "mem_free")), fr, sizeof fr);
        const char *region = json_string_value(json_object_get(m, "region"));
        printf("%s  %s  region %s  %lld node(s)  memory %s (%s free)  version %s  listed %llds "
               "ago\n",
               json_string_value(json_object_get(m, "mesh_id")),
               json_string_value(json_object_get(m, "name")), region && *region ? region : "-",
               (long long)json_integer_value(json_object_get(m, "node_count")), tot, fr,
               json_string_value(json_object_get(m, "version")),
               (long long)json_integer_value(json_object_get(m, "age_s")));
        size_t k;
        json_t *md;
        json_array_foreach(json_object_get(m, "models"), k, md)
            printf("    model %s (%s)\n", json_string_value(json_object_get(md, "name")),
                   json_string_value(json_object_get(md, "status")));
        printf("    join: mesh-llm --join %s\n", json_string_value(json_object_get(m, "token")));
    }
}

int cli_discover_main(int argc, char **argv, const tunables_t *tun)
{
    const char *region = NULL, *model = NULL;
    const char *cli_relays[CONFIG_MAX_RELAYS];
    size_t n_cli = 0;
    bool as_json = false;
    uint64_t timeout_s = 10;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--region") == 0 && i + 1 < argc)
            region = argv[++i];
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            as_json = true;
        else if (strcmp(argv[i], "--nostr-relay") == 0 && i + 1 < argc && n_cli < CONFIG_MAX_RELAYS)
            cli_relays[n_cli++] = argv[++i];
        else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], 1, 3600, &timeout_s) != 0) return usage();
        } else
            return usage();
    }
    if (sodium_init() < 0) return 1;
    log_init(LOG_FORMAT_PRETTY, tun->verbose ? LOG_DEBUG : LOG_WARN);
    char buf[2048];
    const char *relays[CONFIG_MAX_RELAYS];
    size_t n = nostr_pool_relays(cli_relays, n_cli, config_env_nostr_relays(), buf, sizeof buf,
                                 relays, CONFIG_MAX_RELAYS);
    if (n == 0) {
        fprintf(stderr, "mesh-llm discover: no Nostr relays configured: give --nostr-relay URL\n");
        return 2;
    }
    run_t r = {.loop = uv_default_loop()};
    if (discovery_start(&r.disc, r.loop, relays, n, tun, on_change, &r) != 0) {
        fprintf(stderr, "mesh-llm discover: cannot start\n");
        return 1;
    }
    uv_timer_init(r.loop, &r.timer);
    r.timer.data = &r;
    uv_timer_start(&r.timer, on_timeout, timeout_s * 1000, 0);
    if (!discovery_settled(r.disc)) uv_run(r.loop, UV_RUN_DEFAULT);
    json_t *doc = discovery_json(r.disc, (int64_t)time(NULL), region, model);
    bool reached = discovery_reached(r.disc);
    if (!reached) { /* offline: say so, never "no public meshes found" */
        fprintf(stderr, "mesh-llm discover: no Nostr relay could be reached, so public meshes "
                        "cannot be listed (offline?):\n");
        size_t i;
        json_t *rl;
        json_array_foreach(json_object_get(doc, "relays"), i, rl)
        {
            const char *e = json_string_value(json_object_get(rl, "last_error"));
            fprintf(stderr, "  %s: %s\n", json_string_value(json_object_get(rl, "url")),
                    e ? e : "no answer");
        }
    }
    if (as_json) {
        char *s = json_dumps(doc, JSON_INDENT(2));
        if (s) puts(s);
        free(s);
    } else if (reached) {
        print_table(doc);
        if (json_is_true(json_object_get(doc, "searching")))
            fprintf(stderr, "(not every relay answered within %llu s)\n",
                    (unsigned long long)timeout_s);
    }
    json_decref(doc);
    discovery_stop(r.disc);
    uv_walk(r.loop, close_cb, NULL);
    uv_run(r.loop, UV_RUN_DEFAULT);
    uv_loop_close(r.loop);
    return reached ? 0 : 1;
}

#include "supervisor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "child_log.h"
#include "log.h"
#include "platform.h"
#include "tunables.h"
#include "options.h"
#include "supervisor_int.h"
#include "util.h"

#define POSTMORTEM_MS 150
#define BACKOFF_BASE_MS 500
#define BACKOFF_MAX_MS 30000
#define STABLE_MS 30000
#define MAX_PORT_LOSSES 5 /* in a row: then it is not a race, and the start fails */

static void on_verdict(void *data, sv_child_t *c, svw_verdict_t v);

const char *child_state_name(child_state_t s)
{
    switch (s) {
    case CHILD_STARTING:
        return "loading";
    case CHILD_READY:
        return "ready";
    case CHILD_BACKOFF:
        return "restarting";
    case CHILD_STOPPING:
        return "stopping";
    default:
        return "stopped";
    }
}

int sv_init(supervisor_t *sv, uv_loop_t *loop, const char *llama_server, bool verbose,
            const tunables_t *tun, const sv_deps_t *dep)
{
    memset(sv, 0, sizeof *sv);
    if (dep) {
        sv->rpc_server = dep->rpc_server;
        sv->on_all_stopped = dep->on_all_stopped;
    }
    sv->loop = loop;
    sv->on_verdict = on_verdict;
    sv->verdict_data = sv;
    sv->verbose = verbose;
    sv->llama_server = strdup(llama_server);
    char exe[PATH_MAX];
    int erc = plat_self_exe(exe, sizeof exe);
    if (erc) return erc;
    if (!sv->llama_server) return -ENOMEM;
    sv->self_exe = strdup(exe);
    tunables_t defaults;
    if (!tun) {
        tunables_defaults(&defaults);
        tun = &defaults;
    }
    sv->health_interval_ms = tun->health_interval_ms;
    sv->health_timeout_ms = tun->health_timeout_ms;
    sv->hang_ms = tun->hang_timeout_ms;
    sv->load_timeout_ms = tun->load_timeout_ms;
    sv->test_port = (int)tun->test_child_port;
    uv_timer_init(loop, &sv->kill_timer);
    sv->kill_timer.data = sv;
    return 0;
}

int sv_add(supervisor_t *sv, const char *name, const char *path, model_type_t type,
           uint32_t ctx_size, const char *extra_args, sv_child_t **out)
{
    sv_child_t *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->sv = sv;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->path = strdup(path);
    c->type = type;
    c->ctx_size = ctx_size;
    if (extra_args && argv_split(extra_args, &c->extra_argv) < 0) {
        free(c->path);
        free(c);
        return -EINVAL;
    }
    uv_timer_init(sv->loop, &c->timer);
    c->timer.data = c;
    svw_init(c);
    sv_child_t **pp = &sv->children;
    while (*pp)
        pp = &(*pp)->next;
    *pp = c;
    sv->n_children++;
    if (out) *out = c;
    return 0;
}

int sv_add_rpc(supervisor_t *sv, const char *name, sv_child_t **out)
{
    if (!sv->rpc_server) return -ENOENT;
    sv_child_t *c = NULL;
    int rc = sv_add(sv, name, sv->rpc_server, MODEL_TYPE_AUTO, 0, NULL, &c);
    if (rc) return rc;
    c->kind = SV_KIND_RPC;
    if (out) *out = c;
    return 0;
}

sv_child_t *sv_find(supervisor_t *sv, const char *name)
{
    for (sv_child_t *c = sv->children; c; c = c->next)
        if (strcmp(c->name, name) == 0) return c;
    return NULL;
}

static int free_port(void)
{
    int fd = plat_socket(AF_INET, SOCK_STREAM, false);
    if (fd < 0) return fd;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int port = -EADDRNOTAVAIL;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* MESH_LLM_TEST_CHILD_PORT: the first child started by this supervisor gets this port instead
 * of a free one (tests: a port taken by another process between the pick and the child's bind). */
static int test_port(supervisor_t *sv)
{
    if (sv->test_port_used || !sv->test_port) return 0;
    sv->test_port_used = true;
    return sv->test_port;
}

static void sv_set_state(sv_child_t *c, child_state_t s)
{
    if (c->state == s) return;
    c->state = s;
    if (c->sv->on_change) c->sv->on_change(c->sv, c);
}

char **sv_build_argv(const sv_child_t *c)
{
    size_t n_extra = 0;
    while (c->extra_argv && c->extra_argv[n_extra])
        n_extra++;
    char **v = calloc(24 + n_extra, sizeof *v);
    if (!v) return NULL;
    size_t i = 0;
    char port[16], ctx[16];
    snprintf(port, sizeof port, "%u", c->port);
    if (c->kind == SV_KIND_RPC) {
        v[i++] = strdup(c->path);
        v[i++] = strdup("-H");
        v[i++] = strdup("127.0.0.1");
        v[i++] = strdup("-p");
        v[i++] = strdup(port);
        v[i++] = strdup("-c");
        if (c->sv->device) { /* rpc-server names the CPU "CPU"; llama-server says "none" */
            v[i++] = strdup("-d");
            v[i++] = strdup(strcmp(c->sv->device, "none") == 0 ? "CPU" : c->sv->device);
        }
        goto extra;
    }
    v[i++] = strdup(c->sv->llama_server);
    v[i++] = strdup("--model");
    v[i++] = strdup(c->path);
    v[i++] = strdup("--alias");
    v[i++] = strdup(c->name);
    v[i++] = strdup("--host");
    v[i++] = strdup("127.0.0.1");
    v[i++] = strdup("--port");
    v[i++] = strdup(port);
    if (c->ctx_size) {
        snprintf(ctx, sizeof ctx, "%u", c->ctx_size);
        v[i++] = strdup("--ctx-size");
        v[i++] = strdup(ctx);
    }
    if (c->sv->device) {
        v[i++] = strdup("--device");
        v[i++] = strdup(c->sv->device);
    }
    if (c->sv->verbose) { /* --verbose: llama.cpp's own info lines too (devices, offload) */
        v[i++] = strdup("-lv");
        v[i++] = strdup("4");
    }
    if (c->type == MODEL_TYPE_EMBEDDING) {
        v[i++] = strdup("--embeddings");
        v[i++] = strdup("--pooling");
        v[i++] = strdup("mean");
    } else if (c->type == MODEL_TYPE_RERANKING) {
        v[i++] = strdup("--reranking");
    }
extra:
    for (size_t k = 0; k < n_extra; k++)
        v[i++] = strdup(c->extra_argv[k]);
    v[i] = NULL;
    for (size_t k = 0; k < i; k++)
        if (!v[k]) {
            argv_free(v);
            return NULL;
        }
    return v;
}

static const char *last_line(const sv_child_t *c, unsigned back)
{
    if (back >= c->n_lines || back >= CHILD_LOG_LINES) return NULL;
    return c->lines[(c->n_lines - 1 - back) % CHILD_LOG_LINES];
}

static void store_line(sv_child_t *c, const char *line, size_t len)
{
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    if (len == 0) return;
    if (len >= CHILD_LINE_MAX) len = CHILD_LINE_MAX - 1;
    char *slot = c->lines[c->n_lines % CHILD_LOG_LINES];
    memcpy(slot, line, len);
    slot[len] = '\0';
    c->n_lines++;
    if (c->sv->verbose) LOGD("llama-server", "[%s] %s", c->name, slot);
    if (child_log_degraded(slot))
        LOGW("supervisor", "model %s: llama-server: %s", c->name, child_log_strip(slot));
    /* llama-server logs "listening on http://..." once /health answers 200 (after the model
     * loaded): check right away instead of waiting for the next poll, which would add up to
     * HEALTH_POLL_MS to every load. If it is not ready yet, the check fails and polling goes on. */
    if (c->state == CHILD_STARTING && strstr(slot, "listening on")) svw_check_now(c);
}

static void on_out_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    static char slab[16384];
    (void)h;
    (void)suggested;
    *b = uv_buf_init(slab, sizeof slab);
}

static void after_close(sv_child_t *c);

static void on_out_closed(uv_handle_t *h)
{
    sv_child_t *c = h->data;
    c->out_open = false;
    after_close(c);
}

static void on_out_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    sv_child_t *c = s->data;
    if (nread < 0) {
        if (c->partial_len) store_line(c, c->partial, c->partial_len);
        c->partial_len = 0;
        if (!uv_is_closing((uv_handle_t *)s)) uv_close((uv_handle_t *)s, on_out_closed);
        return;
    }
    for (ssize_t i = 0; i < nread; i++) {
        char ch = b->base[i];
        if (ch == '\n') {
            store_line(c, c->partial, c->partial_len);
            c->partial_len = 0;
        } else if (c->partial_len < CHILD_LINE_MAX - 1) {
            c->partial[c->partial_len++] = ch;
        }
    }
}

/* ---- what sv_watch.c found ---- */

static void on_verdict(void *data, sv_child_t *c, svw_verdict_t v)
{
    supervisor_t *sv = data;
    uint64_t now = uv_now(sv->loop);
    switch (v) {
    case SVW_READY:
        c->ready_ms = now;
        c->ever_ready = true;
        c->ready_this_spawn = true;
        c->first_outcome = true;
        c->port_losses = 0;
        if (c->kind == SV_KIND_RPC)
            LOGI("supervisor", "rpc-server ready on 127.0.0.1:%u (pid %d)", c->port, c->pid);
        else
            LOGI("supervisor", "model %s ready on 127.0.0.1:%u (pid %d, %.1f s)", c->name, c->port,
                 c->pid, (double)(now - c->spawned_ms) / 1000.0);
        sv_set_state(c, CHILD_READY);
        svw_ready(c);
        if (sv->on_ready) sv->on_ready(sv, c);
        break;
    case SVW_TIMED_OUT:
        c->timed_out = true;
        LOGE("supervisor", "%s (pid %d) did not become ready within %.1f s; killing it",
             sv_prog_name(c), c->pid, (double)(now - c->spawned_ms) / 1000.0);
        uv_process_kill(&c->proc, SIGKILL); /* the exit reports the failed load */
        break;
    case SVW_WEDGED: /* the watch has stopped its ticks */
        LOGE("supervisor",
             "%s (pid %d) stopped responding (no answer to /health for %.1f s%s); "
             "killing it",
             sv_prog_name(c), c->pid, (double)(now - c->last_alive_ms) / 1000.0,
             c->in_flight > 0 ? ", no CPU progress on its requests" : "");
        c->wedged = true;
        uv_process_kill(&c->proc, SIGKILL); /* the exit restarts it with backoff */
        if (sv->on_wedged) sv->on_wedged(sv, c);
        break;
    default: /* the watch's own (SVW_WAIT, SVW_PORT_TAKEN) */
        break;
    }
}

/* ---- lifecycle ---- */

static void check_all_stopped(supervisor_t *sv)
{
    if (!sv->stopping) return;
    for (sv_child_t *c = sv->children; c; c = c->next)
        if (c->proc_open) return;
    uv_timer_stop(&sv->kill_timer);
    if (sv->on_all_stopped) {
        sv_event_cb cb = sv->on_all_stopped;
        sv->on_all_stopped = NULL;
        cb(sv, NULL);
    }
}

static void on_proc_closed(uv_handle_t *h)
{
    sv_child_t *c = h->data;
    c->proc_open = false;
    check_all_stopped(c->sv);
    after_close(c);
}

static int do_spawn(sv_child_t *c);

/* Runs when one of the child's handles finished closing. */
static void after_close(sv_child_t *c)
{
    if (c->proc_open || c->out_open || c->sv->stopping) return;
    if (c->stop_notify) {
        c->stop_notify = false;
        sv_set_state(c, CHILD_STOPPED);
        if (c->sv->on_stopped) c->sv->on_stopped(c->sv, c);
    }
    if (c->start_pending) {
        c->start_pending = false;
        if (do_spawn(c) != 0) {
            sv_set_state(c, CHILD_STOPPED);
            if (c->sv->on_load_failed) c->sv->on_load_failed(c->sv, c);
        }
    }
}

static void on_restart_timer(uv_timer_t *t)
{
    sv_child_t *c = t->data;
    if (c->state != CHILD_BACKOFF || c->sv->stopping) return;
    if (c->proc_open || c->out_open) { /* previous incarnation still closing */
        uv_timer_start(&c->timer, on_restart_timer, 50, 0);
        return;
    }
    sv_start(c);
}

static void describe_exit(char *out, size_t len, int64_t status, int sig)
{
    if (sig)
        snprintf(out, len, "killed by signal %d (%s)", sig, strsignal(sig));
    else
        snprintf(out, len, "exited with status %lld", (long long)status);
}

/* The child's lines of this start, oldest first. */
static size_t lines_of(const sv_child_t *c, const char *out[CHILD_LOG_LINES])
{
    size_t n = 0;
    for (int back = CHILD_LOG_LINES - 1; back >= 0; back--) {
        const char *l = last_line(c, (unsigned)back);
        if (l) out[n++] = l;
    }
    return n;
}

/* Why the start failed, for the API: the child's own telling line, else how it ended. */
static void describe_failure(sv_child_t *c, const char *why)
{
    const char *lines[CHILD_LOG_LINES];
    size_t n = lines_of(c, lines);
    char reason[CHILD_LINE_MAX];
    c->fail_kind = child_log_classify(lines, n, reason, sizeof reason);
    const char *prog = c->kind == SV_KIND_RPC ? "rpc-server" : "llama-server";
    if (c->timed_out) {
        /* its last lines show how far it got */
        int at = snprintf(c->last_error, sizeof c->last_error,
                          "%s did not become ready within %.1f s (MESH_LLM_LOAD_TIMEOUT_MS)", prog,
                          (double)svw_load_limit(c) / 1000.0);
        for (size_t i = n > 2 ? n - 2 : 0; i < n && at > 0 && (size_t)at < sizeof c->last_error;
             i++)
            at += snprintf(c->last_error + at, sizeof c->last_error - (size_t)at, "%s%s",
                           i == (n > 2 ? n - 2 : 0) ? "; its last lines: " : " | ",
                           child_log_strip(lines[i]));
        if (n == 0 && at > 0 && (size_t)at < sizeof c->last_error)
            snprintf(c->last_error + at, sizeof c->last_error - (size_t)at, "; it printed nothing");
        c->fail_kind = CHILD_FAIL_OTHER;
    } else if (reason[0]) {
        snprintf(c->last_error, sizeof c->last_error, "%s", reason);
    } else {
        snprintf(c->last_error, sizeof c->last_error, "%s %s", prog, why);
    }
}

static void on_postmortem(uv_timer_t *t)
{
    sv_child_t *c = t->data;
    if (c->sv->stopping) return;
    char why[128];
    describe_exit(why, sizeof why, c->last_exit_status, c->last_term_signal);
    uint64_t delay = backoff_ms(c->attempts, BACKOFF_BASE_MS, BACKOFF_MAX_MS);
    bool load_failed = !c->ready_this_spawn;
    describe_failure(c, why);
    if (c->out_open && !uv_is_closing((uv_handle_t *)&c->out))
        uv_close((uv_handle_t *)&c->out, on_out_closed);
    if (c->fail_kind != CHILD_FAIL_PORT) c->port_losses = 0;
    if (load_failed && c->fail_kind == CHILD_FAIL_PORT && c->port_losses < MAX_PORT_LOSSES) {
        /* another process took the port between free_port() and the child's bind: a race, not
         * a failed load. Start again on a new port, without backoff. */
        c->port_losses++;
        LOGW("supervisor",
             "%s (pid %d) lost port %u to another process; starting it on another "
             "port",
             sv_prog_name(c), c->pid, c->port);
        c->start_pending = true;
        after_close(c); /* spawns now, or once the output pipe is closed */
        return;
    }
    if (load_failed)
        LOGE("supervisor", "%s (pid %d) %s while loading", sv_prog_name(c), c->pid, why);
    else
        LOGE("supervisor", "%s (pid %d) %s%s; restarting in %.1f s", sv_prog_name(c), c->pid, why,
             c->wedged ? " after it stopped responding" : "", (double)delay / 1000.0);
    /* The child's last words usually say why (bad file, out of memory, port in use...). */
    int shown = 0;
    for (int back = CHILD_LOG_LINES - 1; back >= 0 && (!c->last_term_signal || c->timed_out);
         back--) {
        const char *l = last_line(c, (unsigned)back);
        if (l && back < 6) {
            LOGE("supervisor", "  %s> %s", c->name, l);
            shown++;
        }
    }
    if (!shown && !c->last_term_signal) LOGE("supervisor", "  (it printed nothing)");
    if (load_failed) {
        sv_set_state(c, CHILD_STOPPED);
        if (c->sv->on_load_failed) c->sv->on_load_failed(c->sv, c);
        return;
    }
    c->attempts++;
    c->restarts++;
    uv_timer_start(&c->timer, on_restart_timer, delay, 0);
}

static void on_child_exit(uv_process_t *p, int64_t status, int sig)
{
    sv_child_t *c = p->data;
    c->last_exit_status = status;
    c->last_term_signal = sig;
    uv_close((uv_handle_t *)p, on_proc_closed);
    svw_stop(c);
    if (c->sv->stopping || c->state == CHILD_STOPPING) {
        LOGI("supervisor", "%s stopped", sv_prog_name(c));
        uv_timer_stop(&c->timer);
        if (c->out_open && !uv_is_closing((uv_handle_t *)&c->out))
            uv_close((uv_handle_t *)&c->out, on_out_closed);
        if (!c->sv->stopping)
            c->stop_notify = true; /* on_stopped once the handles are closed */
        else
            sv_set_state(c, CHILD_STOPPED);
        return;
    }
    uint64_t now = uv_now(c->sv->loop);
    if (c->state == CHILD_READY && now - c->ready_ms >= STABLE_MS)
        c->attempts = 0; /* it ran fine for a while: restart quickly */
    c->first_outcome = true;
    sv_set_state(c, c->ready_this_spawn ? CHILD_BACKOFF : CHILD_STARTING);
    uv_timer_start(&c->timer, on_postmortem, POSTMORTEM_MS, 0);
}

int sv_start(sv_child_t *c)
{
    if (c->sv->stopping) return -ECANCELED;
    if (c->proc_open || c->out_open) {
        /* the previous process is still being closed: start once it is */
        c->start_pending = true;
        sv_set_state(c, CHILD_STARTING);
        return 0;
    }
    return do_spawn(c);
}

static int do_spawn(sv_child_t *c)
{
    supervisor_t *sv = c->sv;
    c->ready_this_spawn = false;
    c->missing_file = false;
    c->fail_kind = CHILD_FAIL_OTHER;
    c->last_error[0] = '\0';
    /* a failed start reports its own lines, never an earlier process's */
    c->n_lines = 0;
    c->partial_len = 0;
    if (access(c->path, R_OK) != 0) {
        int e = errno;
        c->missing_file = e == ENOENT;
        snprintf(c->last_error, sizeof c->last_error, "model file %s: %s", c->path, strerror(e));
        return -e;
    }
    int port = test_port(c->sv);
    if (port <= 0) port = free_port();
    if (port < 0) return port;
    c->port = (uint16_t)port;
    char **args = sv_build_argv(c);
    if (!args) return -ENOMEM;
    size_t n = 0;
    while (args[n])
        n++;
    char ppid[16];
    snprintf(ppid, sizeof ppid, "%d", (int)getpid());
    char **full = calloc(n + 4, sizeof *full);
    if (!full) {
        argv_free(args);
        return -ENOMEM;
    }
    full[0] = sv->self_exe;
    full[1] = "--exec-child";
    full[2] = ppid;
    for (size_t i = 0; i < n; i++)
        full[3 + i] = args[i];
    full[3 + n] = NULL;

    uv_file fds[2];
    int rc = uv_pipe(fds, 0, 0);
    if (rc) {
        free(full);
        argv_free(args);
        return rc;
    }
    uv_stdio_container_t stdio[3];
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_INHERIT_FD;
    stdio[1].data.fd = fds[1];
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = fds[1];
    uv_process_options_t o = {0};
    o.file = sv->self_exe;
    o.args = full;
    o.exit_cb = on_child_exit;
    o.stdio = stdio;
    o.stdio_count = 3;
    o.flags = UV_PROCESS_DETACHED; /* own session: a terminal's ^C reaches only the node */
    c->proc.data = c;
    c->generation++;
    rc = uv_spawn(sv->loop, &c->proc, &o);
    close(fds[1]);
    if (rc == 0) {
        c->proc_open = true;
        c->pid = c->proc.pid;
        uv_pipe_init(sv->loop, &c->out, 0);
        c->out.data = c;
        if (uv_pipe_open(&c->out, fds[0]) == 0) {
            c->out_open = true;
            uv_read_start((uv_stream_t *)&c->out, on_out_alloc, on_out_read);
        } else {
            close(fds[0]);
        }
        c->spawned_ms = uv_now(sv->loop);
        c->partial_len = 0;
        LOGI("supervisor", "starting %s on 127.0.0.1:%u (pid %d)", sv_prog_name(c), c->port,
             c->pid);
        if (log_enabled(LOG_DEBUG)) {
            buf_t cmd;
            buf_init(&cmd, 1 << 16);
            for (size_t i = 0; i < n; i++)
                buf_printf(&cmd, "%s%s", i ? " " : "", args[i]);
            LOGD("supervisor", "command: %s", cmd.data);
            buf_free(&cmd);
        }
        sv_set_state(c, CHILD_STARTING);
        svw_spawned(c);
    } else {
        close(fds[0]);
        uv_close((uv_handle_t *)&c->proc, NULL);
        LOGE("supervisor", "cannot start %s: %s", sv->llama_server, uv_strerror(rc));
    }
    free(full);
    argv_free(args);
    return rc;
}

int sv_set_options(sv_child_t *c, uint32_t ctx_size, const char *extra_args)
{
    char **av = NULL;
    if (extra_args && argv_split(extra_args, &av) < 0) return -EINVAL;
    argv_free(c->extra_argv);
    c->extra_argv = av;
    c->ctx_size = ctx_size;
    return 0;
}

static void on_child_kill_timer(uv_timer_t *t)
{
    sv_child_t *c = t->data;
    if (c->proc_open && !uv_is_closing((uv_handle_t *)&c->proc)) {
        LOGW("supervisor", "llama-server for %s did not stop in time; killing it", c->name);
        uv_process_kill(&c->proc, SIGKILL);
    }
}

void sv_stop(sv_child_t *c, uint64_t grace_ms)
{
    uv_timer_stop(&c->timer);
    svw_stop(c);
    c->start_pending = false;
    if (c->proc_open && !uv_is_closing((uv_handle_t *)&c->proc) && c->state != CHILD_BACKOFF) {
        c->state = CHILD_STOPPING;
        uv_process_kill(&c->proc, SIGTERM);
        uv_timer_start(&c->timer, on_child_kill_timer, grace_ms, 0);
        return;
    }
    /* Not running (or between restarts): stopped once its handles are closed. */
    if (c->out_open && !uv_is_closing((uv_handle_t *)&c->out))
        uv_close((uv_handle_t *)&c->out, on_out_closed);
    c->state = CHILD_STOPPING;
    c->stop_notify = true;
    after_close(c);
}

static void on_kill_timer(uv_timer_t *t)
{
    supervisor_t *sv = t->data;
    for (sv_child_t *c = sv->children; c; c = c->next) {
        if (c->proc_open && !uv_is_closing((uv_handle_t *)&c->proc)) {
            LOGW("supervisor", "llama-server for %s did not stop in time; killing it", c->name);
            uv_process_kill(&c->proc, SIGKILL);
        }
    }
}

void sv_stop_all(supervisor_t *sv, uint64_t grace_ms)
{
    sv->stopping = true;
    for (sv_child_t *c = sv->children; c; c = c->next) {
        uv_timer_stop(&c->timer);
        svw_stop(c);
        if (c->proc_open && !uv_is_closing((uv_handle_t *)&c->proc)) {
            c->state = CHILD_STOPPING;
            uv_process_kill(&c->proc, SIGTERM);
        } else {
            c->state = CHILD_STOPPED;
        }
    }
    svw_cancel_all(sv);
    uv_timer_start(&sv->kill_timer, on_kill_timer, grace_ms, 0);
    check_all_stopped(sv);
}

void sv_watch(supervisor_t *sv, sv_event_cb on_change)
{
    sv->on_change = on_change;
}

void sv_close(supervisor_t *sv)
{
    /* Handles are closed by the loop walk in main; here only memory. */
    sv_child_t *c = sv->children;
    while (c) {
        sv_child_t *next = c->next;
        free(c->path);
        argv_free(c->extra_argv);
        free(c);
        c = next;
    }
    sv->children = NULL;
    free(sv->llama_server);
    free(sv->rpc_server);
    free(sv->self_exe);
}

int sv_exec_child_main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "mesh-llm --exec-child: missing arguments\n");
        _exit(127);
    }
    long ppid = strtol(argv[2], NULL, 10);
    if (plat_die_with_parent(SIGKILL) != 0 || getppid() != (pid_t)ppid)
        _exit(1); /* the node is already gone */
    execv(argv[3], argv + 3);
    fprintf(stderr, "mesh-llm: cannot run %s: %s\n", argv[3], strerror(errno));
    _exit(127);
}

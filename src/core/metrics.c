/* metrics — see metrics.h. */
#include "metrics.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const char *const ENDPOINTS[METRICS_N_ENDPOINTS] = {
    "chat",        "completions",     "responses",      "input_tokens",
    "messages",    "count_tokens",    "infill",         "tokenize",
    "detokenize",  "embeddings",      "apply_template", "rerank",
    "ollama_chat", "ollama_generate", "ollama_embed",   "ollama_embeddings",
    "other"};
static const int CODES[METRICS_N_CODES - 1] = {200, 400, 401, 403, 404, 405, 408, 413,
                                               415, 429, 431, 499, 500, 502, 503, 504};
static const char *const ROUTES[2] = {"local", "tunnel"};
static const char *const REASONS[METRICS_N_REASONS] = {"queue_full", "key_queue_share_exceeded",
                                                       "tokens_per_minute_exceeded",
                                                       "queue_timeout", "too_many_requests"};

/* seconds */
static const double B_TTFT[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                1,     2.5,  5,     10,   30,  60,   120};
static const double B_TOKEN[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                 0.1,    0.25,  0.5,    1,     2.5,  5};
static const double B_WAIT[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
static const double B_LOAD[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
#define NB(a) (sizeof a / sizeof a[0])

void metrics_init(metrics_t *m)
{
    memset(m, 0, sizeof *m);
}

void metrics_req_init(metrics_req_t *r, uint64_t start_ns)
{
    memset(r, 0, sizeof *r);
    r->start_ns = start_ns;
    r->tokens_in = r->tokens_out = -1;
    r->draft_n = r->draft_accepted = -1;
}

/* The label slot of a model: its own while there is room, else the shared "_other". */
static size_t model_idx(metrics_t *m, const char *name)
{
    for (size_t i = 0; i < m->n_models; i++)
        if (strcmp(m->models[i], name) == 0) return i;
    if (m->n_models == METRICS_MAX_MODELS || strlen(name) >= METRICS_MODEL_LEN)
        return METRICS_MAX_MODELS;
    snprintf(m->models[m->n_models], METRICS_MODEL_LEN, "%s", name);
    return m->n_models++;
}

static size_t endpoint_idx(const char *label)
{
    for (size_t i = 0; label && i < METRICS_N_ENDPOINTS - 1; i++)
        if (strcmp(ENDPOINTS[i], label) == 0) return i;
    return METRICS_N_ENDPOINTS - 1;
}

static size_t code_idx(int status)
{
    for (size_t i = 0; i < METRICS_N_CODES - 1; i++)
        if (CODES[i] == status) return i;
    return METRICS_N_CODES - 1;
}

static void observe(metrics_hist_t *h, const double *bounds, size_t nb, double v)
{
    size_t i = 0;
    while (i < nb && v > bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

static double secs(uint64_t ns)
{
    return (double)ns / 1e9;
}

void metrics_request_done(metrics_t *m, metrics_req_t *r, uint64_t now_ns)
{
    if (!m) return; /* no registry: not counted */
    if (r->reported || !r->model[0]) return;
    r->reported = true;
    size_t mi = model_idx(m, r->model);
    int status = r->status ? r->status : 499; /* cut off before any answer */
    m->requests[mi][endpoint_idx(r->endpoint)][code_idx(status)]
               [r->route == METRICS_ROUTE_TUNNEL]++;
    if (r->tokens_in > 0) m->tokens[mi][0] += (uint64_t)r->tokens_in;
    if (r->tokens_out > 0) m->tokens[mi][1] += (uint64_t)r->tokens_out;
    if (r->route == METRICS_ROUTE_LOCAL && r->draft_n > 0) {
        m->draft[mi][0] += (uint64_t)r->draft_n;
        if (r->draft_accepted > 0) m->draft[mi][1] += (uint64_t)r->draft_accepted;
    }
    if (status >= 200 && status < 300 && r->route == METRICS_ROUTE_LOCAL) {
        uint64_t fb = r->first_body_ns ? r->first_body_ns : r->head_ns;
        if (fb > r->start_ns) observe(&m->ttft[mi], B_TTFT, NB(B_TTFT), secs(fb - r->start_ns));
        if (r->per_token_s > 0) observe(&m->per_token[mi], B_TOKEN, NB(B_TOKEN), r->per_token_s);
    }
    if (now_ns > r->start_ns)
        observe(&m->duration[mi], B_TTFT, NB(B_TTFT), secs(now_ns - r->start_ns));
}

/* The last `"key":{...}` object of tail, parsed (NULL if none or cut). */
static json_t *last_object(const char *tail, size_t len, const char *key)
{
    char needle[32];
    int nl = snprintf(needle, sizeof needle, "\"%s\":", key);
    const char *last = NULL;
    for (const char *p = tail; p < tail + len;) {
        const char *q = memmem(p, (size_t)(tail + len - p), needle, (size_t)nl);
        if (!q) break;
        last = q;
        p = q + 1;
    }
    if (!last) return NULL;
    const char *start = last + nl;
    while (start < tail + len && *start == ' ')
        start++;
    json_error_t je;
    json_t *o = json_loadb(start, (size_t)(tail + len - start), JSON_DISABLE_EOF_CHECK, &je);
    if (o && !json_is_object(o)) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

static int64_t int_of(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

bool metrics_parse_usage(const char *tail, size_t len, metrics_req_t *r)
{
    if (!tail || !len) return false;
    bool found = false;
    json_t *t = last_object(tail, len, "timings");
    if (t) {
        r->tokens_in = int_of(t, "prompt_n");
        r->tokens_out = int_of(t, "predicted_n");
        json_t *pt = json_object_get(t, "predicted_per_token_ms");
        if (json_is_number(pt) && r->tokens_out > 0) r->per_token_s = json_number_value(pt) / 1e3;
        r->draft_n = int_of(t, "draft_n");
        r->draft_accepted = int_of(t, "draft_n_accepted");
        json_decref(t);
        found = r->tokens_in >= 0 || r->tokens_out >= 0;
    }
    if (found) return true;
    json_t *u = last_object(tail, len, "usage");
    if (!u) return false;
    int64_t in = int_of(u, "prompt_tokens"), out = int_of(u, "completion_tokens");
    if (in < 0) in = int_of(u, "input_tokens");
    if (out < 0) out = int_of(u, "output_tokens");
    json_decref(u);
    if (in < 0 && out < 0) return false;
    r->tokens_in = in;
    r->tokens_out = out;
    return true;
}

void metrics_draft_totals(const metrics_t *m, const char *model, uint64_t *drafted,
                          uint64_t *accepted)
{
    *drafted = *accepted = 0;
    if (!m) return;
    for (size_t i = 0; i < m->n_models; i++)
        if (strcmp(m->models[i], model) == 0) {
            *drafted = m->draft[i][0];
            *accepted = m->draft[i][1];
        }
}

void metrics_in_flight_add(metrics_t *m, const char *model, int delta)
{
    if (!m) return; /* no registry: not counted */
    m->in_flight[model_idx(m, model)] += delta;
}

void metrics_queue_depth_set(metrics_t *m, const char *model, unsigned depth)
{
    if (!m) return; /* no registry: not counted */
    m->queue_depth[model_idx(m, model)] = depth;
}

void metrics_queue_wait(metrics_t *m, const char *model, double seconds)
{
    if (!m) return; /* no registry: not counted */
    observe(&m->queue_wait[model_idx(m, model)], B_WAIT, NB(B_WAIT), seconds);
}

void metrics_queue_rejected(metrics_t *m, const char *model)
{
    if (!m) return; /* no registry: not counted */
    m->queue_rejected[model_idx(m, model)]++;
}

void metrics_key_rejected(metrics_t *m, const char *key, const char *tier, const char *reason)
{
    if (!m) return; /* no registry: not counted */
    size_t r = METRICS_N_REASONS - 1;
    for (size_t i = 0; reason && i < METRICS_N_REASONS; i++)
        if (strcmp(REASONS[i], reason) == 0) r = i;
    size_t k = 0;
    while (k < m->n_keys && !(strcmp(m->keys[k][0], key) == 0 && strcmp(m->keys[k][1], tier) == 0))
        k++;
    if (k == m->n_keys) {
        if (m->n_keys == METRICS_MAX_KEYS || strlen(key) >= METRICS_KEY_LEN ||
            strlen(tier) >= METRICS_KEY_LEN) {
            k = METRICS_MAX_KEYS;
        } else {
            snprintf(m->keys[k][0], METRICS_KEY_LEN, "%s", key);
            snprintf(m->keys[k][1], METRICS_KEY_LEN, "%s", tier);
            m->n_keys++;
        }
    }
    m->key_rejected[k][r]++;
}

void metrics_relay(metrics_t *m, const char *model, metrics_relay_t what)
{
    if (!m) return; /* no registry: not counted */
    if ((unsigned)what < METRICS_N_RELAY) m->relay[model_idx(m, model)][what]++;
}

void metrics_load_begin(metrics_t *m, const char *model, uint64_t now_ns)
{
    if (!m) return; /* no registry: not counted */
    m->load_started_ns[model_idx(m, model)] = now_ns ? now_ns : 1;
}

void metrics_load_end(metrics_t *m, const char *model, bool ok, uint64_t now_ns)
{
    if (!m) return; /* no registry: not counted */
    size_t mi = model_idx(m, model);
    m->loads[mi][ok ? 0 : 1]++;
    uint64_t t0 = m->load_started_ns[mi];
    if (ok && t0 && now_ns >= t0) observe(&m->load_time[mi], B_LOAD, NB(B_LOAD), secs(now_ns - t0));
    m->load_started_ns[mi] = 0;
}

void metrics_unload(metrics_t *m, const char *model)
{
    if (!m) return; /* no registry: not counted */
    m->unloads[model_idx(m, model)]++;
}

void metrics_set_peers(metrics_t *m, const metrics_peer_t *peers, size_t n)
{
    if (!m) return; /* no registry: not counted */
    if (n > METRICS_MAX_PEERS) n = METRICS_MAX_PEERS;
    memcpy(m->peers, peers, n * sizeof *peers);
    for (size_t i = 0; i < n; i++) {
        m->peers[i].id[METRICS_PEER_LEN - 1] = '\0';
        m->peers[i].state[sizeof m->peers[i].state - 1] = '\0';
        m->peers[i].path[sizeof m->peers[i].path - 1] = '\0';
    }
    m->n_peers = n;
}

void metrics_tunnel_bytes(metrics_t *m, bool tx, uint64_t n)
{
    if (!m) return; /* no registry: not counted */
    m->tunnel_bytes[tx ? 1 : 0] += n;
}

void metrics_set_rpc_tunnel(metrics_t *m, uint64_t to_workers, uint64_t from_workers,
                            uint64_t turns)
{
    if (!m) return; /* no registry: not counted */
    m->rpc_bytes[0] = to_workers;
    m->rpc_bytes[1] = from_workers;
    m->rpc_turns = turns;
}

/* ---- rendering ---- */

/* A label value escaped for the exposition format (\\, \", \n). */
static int put_label(buf_t *b, const char *v)
{
    char tmp[2 * METRICS_MODEL_LEN + 8];
    size_t o = 0;
    for (const char *p = v; *p && o < sizeof tmp - 3; p++) {
        if (*p == '\\' || *p == '"') {
            tmp[o++] = '\\';
            tmp[o++] = *p;
        } else if (*p == '\n') {
            tmp[o++] = '\\';
            tmp[o++] = 'n';
        } else {
            tmp[o++] = *p;
        }
    }
    return buf_append(b, tmp, o);
}

static const char *model_name(const metrics_t *m, size_t i)
{
    return i < METRICS_MAX_MODELS ? m->models[i] : "_other";
}

static size_t n_slots(const metrics_t *m)
{
    return m->n_models + 1; /* ... plus "_other" at METRICS_MAX_MODELS */
}

static size_t slot(const metrics_t *m, size_t k)
{
    return k < m->n_models ? k : METRICS_MAX_MODELS;
}

static int head(buf_t *b, const char *name, const char *type, const char *help)
{
    return buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A counter without labels. */
static int counter(buf_t *b, const char *name, const char *help, uint64_t v)
{
    int rc = head(b, name, "counter", help);
    if (rc == 0) rc = buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
    return rc;
}

/* A counter family with two series labelled direction=d0 / d1. */
static int by_direction(buf_t *b, const char *name, const char *help, const char *d0, uint64_t v0,
                        const char *d1, uint64_t v1)
{
    int rc = head(b, name, "counter", help);
    if (rc == 0)
        rc = buf_printf(b, "%s{direction=\"%s\"} %llu\n%s{direction=\"%s\"} %llu\n", name, d0,
                        (unsigned long long)v0, name, d1, (unsigned long long)v1);
    return rc;
}

static int hist(buf_t *b, const char *name, const char *model, const metrics_hist_t *h,
                const double *bounds, size_t nb)
{
    int rc = 0;
    uint64_t cum = 0;
    for (size_t i = 0; rc == 0 && i <= nb; i++) {
        cum += h->counts[i];
        rc = buf_printf(b, "%s_bucket{model=\"", name);
        if (rc == 0) rc = put_label(b, model);
        if (rc == 0 && i < nb)
            rc = buf_printf(b, "\",le=\"%g\"} %llu\n", bounds[i], (unsigned long long)cum);
        if (rc == 0 && i == nb)
            rc = buf_printf(b, "\",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    if (rc == 0) rc = buf_printf(b, "%s_sum{model=\"", name);
    if (rc == 0) rc = put_label(b, model);
    if (rc == 0) rc = buf_printf(b, "\"} %.9g\n%s_count{model=\"", h->sum, name);
    if (rc == 0) rc = put_label(b, model);
    if (rc == 0) rc = buf_printf(b, "\"} %llu\n", (unsigned long long)h->count);
    return rc;
}

static int hist_family(buf_t *b, const metrics_t *m, const char *name, const char *help,
                       const metrics_hist_t *hs, const double *bounds, size_t nb)
{
    int rc = head(b, name, "histogram", help);
    for (size_t k = 0; rc == 0 && k < n_slots(m); k++) {
        size_t i = slot(m, k);
        if (hs[i].count) rc = hist(b, name, model_name(m, i), &hs[i], bounds, nb);
    }
    return rc;
}

/* A per-model family of one number each; only models seen (and non-zero when skip_zero). */
static int per_model(buf_t *b, const metrics_t *m, const char *name, const char *type,
                     const char *help, const int64_t *vals, const uint64_t *uvals, size_t stride,
                     const char *extra_label, bool skip_zero)
{
    int rc = head(b, name, type, help);
    for (size_t k = 0; rc == 0 && k < n_slots(m); k++) {
        size_t i = slot(m, k);
        long long v = vals ? (long long)vals[i * stride] : (long long)uvals[i * stride];
        if ((skip_zero || i == METRICS_MAX_MODELS) && v == 0) continue;
        rc = buf_printf(b, "%s{model=\"", name);
        if (rc == 0) rc = put_label(b, model_name(m, i));
        if (rc == 0) rc = buf_printf(b, "\"%s} %lld\n", extra_label ? extra_label : "", v);
    }
    return rc;
}

int metrics_render(const metrics_t *m, const char *node_id, const char *version, buf_t *out)
{
    int rc = head(out, "mesh_llm_node_info", "gauge", "This node: its id and version (always 1).");
    if (rc == 0) rc = buf_printf(out, "mesh_llm_node_info{id=\"");
    if (rc == 0) rc = put_label(out, node_id ? node_id : "");
    if (rc == 0) rc = buf_printf(out, "\",version=\"");
    if (rc == 0) rc = put_label(out, version ? version : "");
    if (rc == 0) rc = buf_printf(out, "\"} 1\n");

    if (rc == 0)
        rc = head(out, "mesh_llm_requests_total", "counter",
                  "Inference requests finished, by model, endpoint, HTTP status and route "
                  "(local: served by this node's llama-server; tunnel: forwarded to a peer). "
                  "Status 499: the client went away first.");
    for (size_t k = 0; rc == 0 && k < n_slots(m); k++) {
        size_t i = slot(m, k);
        for (size_t e = 0; rc == 0 && e < METRICS_N_ENDPOINTS; e++)
            for (size_t c = 0; rc == 0 && c < METRICS_N_CODES; c++)
                for (size_t r = 0; rc == 0 && r < 2; r++) {
                    uint64_t v = m->requests[i][e][c][r];
                    if (!v) continue;
                    rc = buf_printf(out, "mesh_llm_requests_total{model=\"");
                    if (rc == 0) rc = put_label(out, model_name(m, i));
                    char code[8];
                    if (c < METRICS_N_CODES - 1)
                        snprintf(code, sizeof code, "%d", CODES[c]);
                    else
                        snprintf(code, sizeof code, "other");
                    if (rc == 0)
                        rc = buf_printf(out, "\",endpoint=\"%s\",code=\"%s\",route=\"%s\"} %llu\n",
                                        ENDPOINTS[e], code, ROUTES[r], (unsigned long long)v);
                }
    }
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_prompt_tokens_total", "counter",
                       "Prompt tokens processed by this node's model servers.", NULL,
                       &m->tokens[0][0], 2, NULL, true);
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_completion_tokens_total", "counter",
                       "Tokens generated by this node's model servers.", NULL, &m->tokens[0][1], 2,
                       NULL, true);
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_draft_tokens_total", "counter",
                       "Tokens proposed by draft models (speculative decoding, --draft).", NULL,
                       &m->draft[0][0], 2, NULL, true);
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_draft_accepted_tokens_total", "counter",
                       "Draft tokens the target model accepted (speculative decoding).", NULL,
                       &m->draft[0][1], 2, NULL, true);
    if (rc == 0)
        rc = hist_family(out, m, "mesh_llm_time_to_first_token_seconds",
                         "Time from a request's arrival to the first byte of its answer's body "
                         "(requests served here, successful).",
                         m->ttft, B_TTFT, NB(B_TTFT));
    if (rc == 0)
        rc = hist_family(out, m, "mesh_llm_time_per_output_token_seconds",
                         "Generation time per output token (llama-server timings).", m->per_token,
                         B_TOKEN, NB(B_TOKEN));
    if (rc == 0)
        rc = hist_family(out, m, "mesh_llm_request_duration_seconds",
                         "Time from a request's arrival to the end of its answer.", m->duration,
                         B_TTFT, NB(B_TTFT));
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_requests_in_flight", "gauge",
                       "Requests being answered by this node's model servers.", m->in_flight, NULL,
                       1, NULL, false);
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_queue_depth", "gauge",
                       "Requests waiting in the admission queue.", m->queue_depth, NULL, 1, NULL,
                       false);
    if (rc == 0)
        rc = hist_family(out, m, "mesh_llm_queue_wait_seconds",
                         "Time requests waited in the admission queue.", m->queue_wait, B_WAIT,
                         NB(B_WAIT));
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_queue_rejected_total", "counter",
                       "Requests refused by admission control (429).", NULL, m->queue_rejected, 1,
                       NULL, true);
    if (rc == 0)
        rc = head(out, "mesh_llm_key_rejected_total", "counter",
                  "Requests refused by admission control (429), by API key, tier and reason.");
    for (size_t k = 0; rc == 0 && k <= METRICS_MAX_KEYS; k++) {
        if (k >= m->n_keys && k < METRICS_MAX_KEYS) continue;
        for (size_t r = 0; rc == 0 && r < METRICS_N_REASONS; r++) {
            uint64_t v = m->key_rejected[k][r];
            if (!v) continue;
            rc = buf_printf(out, "mesh_llm_key_rejected_total{key=\"");
            if (rc == 0) rc = put_label(out, k < METRICS_MAX_KEYS ? m->keys[k][0] : "_other");
            if (rc == 0) rc = buf_printf(out, "\",tier=\"");
            if (rc == 0) rc = put_label(out, k < METRICS_MAX_KEYS ? m->keys[k][1] : "_other");
            if (rc == 0)
                rc = buf_printf(out, "\",reason=\"%s\"} %llu\n", REASONS[r], (unsigned long long)v);
        }
    }
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_relay_retries_total", "counter",
                       "Routed requests re-sent whole to another host (the first failed before "
                       "answering).",
                       NULL, &m->relay[0][METRICS_RELAY_RETRY], METRICS_N_RELAY, NULL, true);
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_relay_first_byte_timeouts_total", "counter",
                       "Routed requests whose host sent no first byte in time "
                       "(MESH_LLM_FIRST_BYTE_MS).",
                       NULL, &m->relay[0][METRICS_RELAY_FIRST_BYTE_TIMEOUT], METRICS_N_RELAY, NULL,
                       true);
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_relay_failovers_total", "counter",
                       "Routed streams whose host died mid-stream.", NULL,
                       &m->relay[0][METRICS_RELAY_FAILOVER], METRICS_N_RELAY, NULL, true);
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_relay_failover_results_total", "counter",
                       "Outcomes of mid-stream failovers (resumed: continued on another replica; "
                       "failed: ended with an error event).",
                       NULL, &m->relay[0][METRICS_RELAY_RESUMED], METRICS_N_RELAY,
                       ",result=\"resumed\"", true);
    for (size_t k = 0; rc == 0 && k < n_slots(m); k++) { /* same family, failed */
        size_t i = slot(m, k);
        if (!m->relay[i][METRICS_RELAY_FAILED]) continue;
        rc = buf_printf(out, "mesh_llm_relay_failover_results_total{model=\"");
        if (rc == 0) rc = put_label(out, model_name(m, i));
        if (rc == 0)
            rc = buf_printf(out, "\",result=\"failed\"} %llu\n",
                            (unsigned long long)m->relay[i][METRICS_RELAY_FAILED]);
    }
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_model_loads_total", "counter",
                       "Model server starts, by result.", NULL, &m->loads[0][0], 2,
                       ",result=\"ok\"", true);
    for (size_t k = 0; rc == 0 && k < n_slots(m); k++) { /* same family, failed loads */
        size_t i = slot(m, k);
        if (!m->loads[i][1]) continue;
        rc = buf_printf(out, "mesh_llm_model_loads_total{model=\"");
        if (rc == 0) rc = put_label(out, model_name(m, i));
        if (rc == 0)
            rc =
                buf_printf(out, "\",result=\"failed\"} %llu\n", (unsigned long long)m->loads[i][1]);
    }
    if (rc == 0)
        rc = hist_family(out, m, "mesh_llm_model_load_seconds",
                         "Time from a load's start to its server being ready.", m->load_time,
                         B_LOAD, NB(B_LOAD));
    if (rc == 0)
        rc = per_model(out, m, "mesh_llm_model_unloads_total", "counter",
                       "Model servers stopped by the model manager: evictions for another "
                       "model, idle and explicit unloads.",
                       NULL, m->unloads, 1, NULL, true);
    if (rc == 0)
        rc = head(out, "mesh_llm_peer_rtt_seconds", "gauge", "Round-trip time to each peer.");
    for (size_t i = 0; rc == 0 && i < m->n_peers; i++) {
        if (m->peers[i].rtt_s < 0) continue;
        rc = buf_printf(out, "mesh_llm_peer_rtt_seconds{peer=\"");
        if (rc == 0) rc = put_label(out, m->peers[i].id);
        if (rc == 0) rc = buf_printf(out, "\"} %.6f\n", m->peers[i].rtt_s);
    }
    if (rc == 0)
        rc = head(out, "mesh_llm_peer_state", "gauge",
                  "Each known peer, labelled with its state (always 1).");
    for (size_t i = 0; rc == 0 && i < m->n_peers; i++) {
        rc = buf_printf(out, "mesh_llm_peer_state{peer=\"");
        if (rc == 0) rc = put_label(out, m->peers[i].id);
        if (rc == 0) rc = buf_printf(out, "\",state=\"");
        if (rc == 0) rc = put_label(out, m->peers[i].state);
        if (rc == 0) rc = buf_printf(out, "\"} 1\n");
    }
    /* the connected peers by the kind of path they are reached on (docs/nat.md) */
    static const char *const PATHS[] = {"direct", "mapped", "punched", "relayed"};
    if (rc == 0)
        rc = head(out, "mesh_llm_peers_by_path", "gauge",
                  "Connected peers by how they are reached: direct, through a router's port "
                  "mapping, by a hole punch, through a relay.");
    for (size_t k = 0; rc == 0 && k < sizeof PATHS / sizeof *PATHS; k++) {
        unsigned n = 0;
        for (size_t i = 0; i < m->n_peers; i++)
            n += strcmp(m->peers[i].path, PATHS[k]) == 0;
        rc = buf_printf(out, "mesh_llm_peers_by_path{path=\"%s\"} %u\n", PATHS[k], n);
    }
    if (rc == 0)
        rc = by_direction(out, "mesh_llm_tunnel_bytes_total",
                          "Bytes of HTTP answers through TUNNEL_HTTP streams (rx: received for "
                          "requests this node forwarded; tx: sent for requests it served).",
                          "rx", m->tunnel_bytes[0], "tx", m->tunnel_bytes[1]);
    if (rc == 0)
        rc = by_direction(out, "mesh_llm_tunnel_rpc_bytes_total",
                          "Bytes of llama.cpp RPC through TUNNEL_RPC streams on a split host "
                          "(to_worker: commands and inputs; from_worker: replies).",
                          "to_worker", m->rpc_bytes[0], "from_worker", m->rpc_bytes[1]);
    if (rc == 0)
        rc = counter(out, "mesh_llm_tunnel_rpc_turns_total",
                     "Request/response turns of llama.cpp RPC on a split host's TUNNEL_RPC streams "
                     "(round trips it waited for; per decoded token: round trips per token).",
                     m->rpc_turns);
    if (rc == 0)
        rc = counter(out, "mesh_llm_download_bytes_total", "Model bytes downloaded by this node.",
                     m->download_bytes);
    if (rc == 0)
        rc = counter(out, "mesh_llm_request_parses_total",
                     "JSON parses of inference request bodies (one per request: the body is "
                     "parsed once, core/request.h).",
                     m->request_parses);
    return rc ? -ENOSPC : 0;
}

static double ms_between(uint64_t a, uint64_t b)
{
    return a && b > a ? (double)(b - a) / 1e6 : 0.0;
}

int metrics_resp_headers(const metrics_req_t *r, const char *node_id, const char *route, int hops,
                         uint64_t now_ns, char *out, size_t outlen)
{
    /* before dispatch: queue (admission), then the rest (waiting for the model's load) */
    uint64_t before = r->dispatch_ns > r->start_ns ? r->dispatch_ns - r->start_ns : 0;
    uint64_t load = before > r->queue_ns ? before - r->queue_ns : 0;
    int n = snprintf(out, outlen,
                     "X-Mesh-Node: %s\r\n%s%s%sServer-Timing: queue;dur=%.1f, load;dur=%.1f, "
                     "fb;dur=%.1f, hops;desc=\"%d\"\r\n",
                     node_id && node_id[0] ? node_id : "unknown", route ? "X-Mesh-Route: " : "",
                     route ? route : "", route ? "\r\n" : "", (double)r->queue_ns / 1e6,
                     (double)load / 1e6, ms_between(r->dispatch_ns, now_ns), hops);
    return n < 0 || (size_t)n >= outlen ? -ENOSPC : n;
}

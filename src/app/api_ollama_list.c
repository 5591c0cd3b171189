/* Ollama's listings (api_ollama.h): GET /api/tags (the mesh's models), GET /api/ps (the models
 * loaded, here or on another node), POST /api/show (one model), rendered from the node's typed
 * state: its models table, the mesh's rows (model_list, what /v1/models lists) and the GGUF
 * metadata of its own files. */
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api_ollama.h"
#include "gguf_info.h"

typedef struct {
    const char *name;
    uint64_t size;
    bool have_info;
    gguf_info_t info;
    mm_type_t type;
    bool vision;
    bool local;
    bool ready;
} ol_model_t;

static void digest_of(const char *name, char *out, size_t len)
{
    unsigned char h[32];
    crypto_generichash(h, sizeof h, (const unsigned char *)name, strlen(name), NULL, 0);
    sodium_bin2hex(out, len, h, sizeof h);
}

/* Ollama's quantization level of a name like "Org/Model-Q4_K_M.gguf" (remote rows: no file). */
static const char *quant_of_name(const char *name)
{
    static const char *const Q[] = {"IQ2_XXS", "IQ3_XXS", "Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S",
                                    "Q3_K_M",  "Q3_K_S",  "Q3_K_L", "Q2_K",   "Q6_K",   "Q8_0",
                                    "Q4_0",    "Q4_1",    "Q5_0",   "Q5_1",   "F16",    "BF16",
                                    "F32",     "IQ4_XS",  "IQ4_NL"};
    for (size_t i = 0; i < sizeof Q / sizeof Q[0]; i++)
        if (strcasestr(name, Q[i])) return Q[i];
    return "unknown";
}

static json_t *details(const ol_model_t *m)
{
    const char *family = m->have_info && m->info.architecture[0] ? m->info.architecture : "";
    const char *quant = m->have_info && m->info.file_type >= 0
                            ? ollama_quant_name(m->info.file_type)
                            : quant_of_name(m->name);
    return json_pack("{s:s,s:s,s:s,s:[s],s:s,s:s}", "parent_model", "", "format", "gguf", "family",
                     family, "families", family, "parameter_size", "", "quantization_level", quant);
}

static json_t *model_json(const ol_model_t *m, const char *modified)
{
    char dg[65];
    digest_of(m->name, dg, sizeof dg);
    return json_pack("{s:s,s:s,s:s,s:I,s:s,s:o}", "name", m->name, "model", m->name, "modified_at",
                     modified, "size", (json_int_t)m->size, "digest", dg, "details", details(m));
}

static void from_entry(ol_model_t *m, const model_entry_t *e)
{
    memset(m, 0, sizeof *m);
    m->name = e->mm->name;
    m->size = e->size;
    m->type = e->mm->type;
    m->vision = e->vision;
    m->local = true;
    m->ready = models_state(e) == MODEL_READY;
    m->have_info = e->path && gguf_info_read(e->path, &m->info) == 0;
}

static void from_row(ol_model_t *m, const ml_row_t *r)
{
    memset(m, 0, sizeof *m);
    m->name = r->id;
    m->size = r->described ? r->size : 0;
    m->type = r->has_type ? r->type : MM_LLM;
    m->ready = r->status == ML_READY;
}

/* /api/ps's expires_at: when e's keep-alive runs out; without one (it stays until evicted),
 * what Ollama shows for keep_alive -1: the farthest time it can write (now + 2^63 ns). */
static void expires_at(api_t *api, const model_entry_t *e, char *out, size_t len)
{
    uint64_t ms = e ? models_expires_unix_ms(api->ms, e) : 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t sec = ms ? (time_t)(ms / 1000) : ts.tv_sec + (time_t)(INT64_MAX / 1000000000);
    struct tm tm;
    if (!gmtime_r(&sec, &tm)) {
        snprintf(out, len, "%s", "9999-12-31T23:59:59Z");
        return;
    }
    char day[40];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%03uZ", day, ms ? (unsigned)(ms % 1000) : 0u);
}

/* Every model the mesh serves or can serve: this node's, then the others (once each). */
static json_t *listing(api_t *api, bool loaded_only)
{
    char modified[48];
    api_ollama_time(modified, sizeof modified);
    json_t *models = json_array();
    model_list_t l;
    ml_init(&l);
    if (api->list_remote) api->list_remote(api->remote_data, &l);
    for (model_entry_t *e = NULL; (e = models_next(api->ms, e));) {
        ol_model_t m;
        from_entry(&m, e);
        if (loaded_only && !m.ready)
            continue; /* this node's own state, not its last announcement */
        json_t *o = model_json(&m, modified);
        if (loaded_only) {
            char at[48];
            expires_at(api, e, at, sizeof at);
            json_object_set_new(o, "expires_at", json_string(at));
            json_object_set_new(o, "size_vram", json_integer(0));
        }
        json_array_append_new(models, o);
    }
    for (size_t i = 0; i < l.n; i++) {
        const ml_row_t *r = &l.rows[i];
        if (models_find(api->ms, r->id) || ml_listed_before(&l, i, r->id)) continue;
        ol_model_t m;
        from_row(&m, r);
        if (loaded_only && !m.ready) continue;
        json_t *o = model_json(&m, modified);
        if (loaded_only) {
            char at[48]; /* another node's policy: not known here */
            expires_at(api, NULL, at, sizeof at);
            json_object_set_new(o, "expires_at", json_string(at));
            json_object_set_new(o, "size_vram", json_integer(0));
        }
        json_array_append_new(models, o);
    }
    ml_free(&l);
    return json_pack("{s:o}", "models", models);
}

void api_ollama_tags(api_t *api, httpd_req_t *req)
{
    httpd_respond_json(req, 200, listing(api, false));
}

void api_ollama_ps(api_t *api, httpd_req_t *req)
{
    httpd_respond_json(req, 200, listing(api, true));
}

void api_ollama_show(api_t *api, httpd_req_t *req)
{
    char name[CATALOG_NAME_MAX], err[OLLAMA_ERR_MAX];
    if (ollama_model_of(req->body, req->body_len, name, sizeof name, NULL, err, sizeof err) < 0) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_body", "%s", err);
        return;
    }
    ol_model_t m;
    model_entry_t *e = models_find(api->ms, name);
    model_list_t l;
    ml_init(&l);
    if (e) {
        from_entry(&m, e);
    } else {
        if (api->list_remote) api->list_remote(api->remote_data, &l);
        const ml_row_t *r = ml_get(&l, name, false);
        if (!r) {
            ml_free(&l);
            httpd_respond_error(req, 404, "invalid_request_error", "model_not_found",
                                "model '%s' not found", name);
            return;
        }
        from_row(&m, r);
    }
    json_t *caps = json_array();
    json_array_append_new(caps, json_string(m.type == MM_EMBEDDING ? "embedding" : "completion"));
    if (m.type == MM_LLM) json_array_append_new(caps, json_string("tools"));
    if (m.vision) json_array_append_new(caps, json_string("vision"));
    json_t *info = json_object();
    if (m.have_info) {
        const char *a = m.info.architecture;
        char k[160];
        json_object_set_new(info, "general.architecture", json_string(a));
        if (m.info.name[0]) json_object_set_new(info, "general.name", json_string(m.info.name));
        if (m.info.file_type >= 0)
            json_object_set_new(info, "general.file_type", json_integer(m.info.file_type));
#define INFO(suffix, v)                                                                            \
    do {                                                                                           \
        if (v) {                                                                                   \
            snprintf(k, sizeof k, "%s." suffix, a);                                                \
            json_object_set_new(info, k, json_integer((json_int_t)(v)));                           \
        }                                                                                          \
    } while (0)
        INFO("context_length", m.info.context_length);
        INFO("embedding_length", m.info.embedding_length);
        INFO("block_count", m.info.block_count);
        INFO("attention.head_count", m.info.head_count);
        INFO("attention.head_count_kv", m.info.head_count_kv);
#undef INFO
    }
    char modified[48];
    api_ollama_time(modified, sizeof modified);
    json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:o,s:o,s:s}", "modelfile", "", "parameters", "",
                          "template", "", "details", details(&m), "model_info", info,
                          "capabilities", caps, "modified_at", modified);
    ml_free(&l);
    httpd_respond_json(req, 200, o);
}

/* ollama — see ollama.h. */
#include "ollama.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- endpoints ---- */

static const struct {
    const char *path;
    ollama_ep_t ep;
    const char *method;
    const char *label; /* inference: the metrics label */
} EPS[] = {
    {"/api/version", OL_VERSION, "GET", NULL},
    {"/api/tags", OL_TAGS, "GET", NULL},
    {"/api/ps", OL_PS, "GET", NULL},
    {"/api/show", OL_SHOW, "POST", NULL},
    {"/api/chat", OL_CHAT, "POST", "ollama_chat"},
    {"/api/generate", OL_GENERATE, "POST", "ollama_generate"},
    {"/api/embed", OL_EMBED, "POST", "ollama_embed"},
    {"/api/embeddings", OL_EMBEDDINGS, "POST", "ollama_embeddings"},
    {"/api/pull", OL_PULL, "POST", NULL},
    {"/api/delete", OL_DELETE, "DELETE", NULL},
};
#define N_EPS (sizeof EPS / sizeof EPS[0])

ollama_ep_t ollama_endpoint(const char *path)
{
    if (!path || strncmp(path, "/api/", 5) != 0) return OL_NONE;
    if (strncmp(path, "/api/v0/", 8) == 0 || strncmp(path, "/api/v1/", 8) == 0) return OL_NONE;
    for (size_t i = 0; i < N_EPS; i++)
        if (strcmp(path, EPS[i].path) == 0) return EPS[i].ep;
    return OL_UNKNOWN;
}

static int ep_row(ollama_ep_t ep)
{
    for (size_t i = 0; i < N_EPS; i++)
        if (EPS[i].ep == ep) return (int)i;
    return -1;
}

const char *ollama_method(ollama_ep_t ep)
{
    int i = ep_row(ep);
    return i < 0 ? NULL : EPS[i].method;
}

const char *ollama_path(ollama_ep_t ep)
{
    int i = ep_row(ep);
    return i < 0 ? NULL : EPS[i].path;
}

const char *ollama_label(ollama_ep_t ep)
{
    int i = ep_row(ep);
    return i < 0 ? NULL : EPS[i].label;
}

bool ollama_is_inference(ollama_ep_t ep)
{
    return ep == OL_CHAT || ep == OL_GENERATE || ep == OL_EMBED || ep == OL_EMBEDDINGS;
}

/* The one JSON reader of this module: request bodies, answer events and bodies, tool-call
 * arguments (check_parse_once lists it). */
static json_t *parse(const char *p, size_t n)
{
    json_error_t je;
    return json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
}

/* ---- requests ---- */

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(out->err, sizeof out->err, __VA_ARGS__);                                          \
        rc = -EINVAL;                                                                              \
        goto done;                                                                                 \
    } while (0)

/* a Go duration's unit (time.ParseDuration): its length in ns, 0 when none matches */
static double unit_ns(const char **p)
{
    static const struct {
        const char *name;
        double ns;
    } U[] = {{"ns", 1},   {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"\xce\xbcs", 1e3},
             {"ms", 1e6}, {"s", 1e9},  {"m", 60e9},        {"h", 3600e9}};
    for (size_t i = 0; i < sizeof U / sizeof U[0]; i++) {
        size_t n = strlen(U[i].name);
        /* "m" is not the start of "ms" */
        if (strncmp(*p, U[i].name, n) == 0 && !(n == 1 && **p == 'm' && (*p)[1] == 's')) {
            *p += n;
            return U[i].ns;
        }
    }
    return 0;
}

static int seconds_ms(double v, int64_t *ms)
{
    if (v != v) return -EINVAL; /* NaN */
    if (v < 0 || v * 1000 > (double)OLLAMA_KEEP_ALIVE_MAX_MS)
        *ms = -1;
    else
        *ms = (int64_t)(v * 1000 + 0.5);
    return 0;
}

int ollama_keep_alive(const json_t *v, int64_t *ms)
{
    if (json_is_number(v)) return seconds_ms(json_number_value(v), ms);
    if (!json_is_string(v)) return -EINVAL;
    const char *s = json_string_value(v), *p = s;
    if (json_string_length(v) == 0 || json_string_length(v) > 64) return -EINVAL;
    char *end;
    double whole = strtod(s, &end);
    if (end != s && !*end) return seconds_ms(whole, ms); /* "300", "-1": seconds */
    bool neg = *p == '-';
    if (*p == '-' || *p == '+') p++;
    double ns = 0;
    int terms = 0;
    while (*p) {
        if (!((*p >= '0' && *p <= '9') || *p == '.')) return -EINVAL;
        double x = strtod(p, &end);
        if (end == p) return -EINVAL;
        p = end;
        double u = unit_ns(&p);
        if (u == 0) return -EINVAL; /* Go wants a unit after every number but a lone 0 */
        ns += x * u;
        terms++;
    }
    if (!terms) return -EINVAL;
    return seconds_ms(neg ? -ns / 1e9 : ns / 1e9, ms);
}

static const char *image_mime(const char *b64)
{
    if (strncmp(b64, "/9j/", 4) == 0) return "image/jpeg";
    if (strncmp(b64, "R0lG", 4) == 0) return "image/gif";
    if (strncmp(b64, "UklG", 4) == 0) return "image/webp";
    return "image/png";
}

/* Ollama's base64 images → OpenAI content parts after the text. */
static int content_with_images(const char *text, const json_t *images, json_t **content, char *err,
                               size_t el, size_t *n_images)
{
    json_t *parts = json_array();
    if (!parts) return -ENOMEM;
    if (text && *text)
        json_array_append_new(parts, json_pack("{s:s,s:s}", "type", "text", "text", text));
    size_t i;
    json_t *im;
    json_array_foreach(images, i, im)
    {
        if (!json_is_string(im) || !json_string_length(im)) {
            snprintf(err, el, "images must be base64 strings");
            json_decref(parts);
            return -EINVAL;
        }
        if (++*n_images > OLLAMA_MAX_IMAGES) {
            snprintf(err, el, "too many images (at most %d)", OLLAMA_MAX_IMAGES);
            json_decref(parts);
            return -EINVAL;
        }
        const char *b = json_string_value(im);
        size_t len = strlen(b) + 64;
        char *url = malloc(len);
        if (!url) {
            json_decref(parts);
            return -ENOMEM;
        }
        snprintf(url, len, "data:%s;base64,%s", image_mime(b), b);
        json_array_append_new(
            parts, json_pack("{s:s,s:{s:s}}", "type", "image_url", "image_url", "url", url));
        free(url);
    }
    *content = parts;
    return 0;
}

/* Ollama's tool calls ({function:{name, arguments:{…}}}) → OpenAI's (arguments a string). */
static json_t *tool_calls_openai(const json_t *calls)
{
    json_t *a = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c)
    {
        json_t *f = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name) continue;
        json_t *args = json_object_get(f, "arguments");
        char *js = args ? json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{}");
        char id[32];
        snprintf(id, sizeof id, "call_%zu", i);
        json_array_append_new(a, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                           "function", "name", name, "arguments", js ? js : "{}"));
        free(js);
    }
    return a;
}

static int messages_openai(const json_t *msgs, json_t *dst, ollama_req_t *out, size_t *n_images)
{
    int rc = 0;
    if (!json_is_array(msgs)) FAIL("messages must be an array");
    if (json_array_size(msgs) > OLLAMA_MAX_MESSAGES)
        FAIL("too many messages (at most %d)", OLLAMA_MAX_MESSAGES);
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if (!json_is_object(m)) FAIL("messages[%zu] must be an object", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || !*role) FAIL("messages[%zu].role must be a string", i);
        json_t *c = json_object_get(m, "content");
        if (c && !json_is_string(c) && !json_is_null(c))
            FAIL("messages[%zu].content must be a string", i);
        const char *text = json_string_value(c);
        json_t *om = json_pack("{s:s}", "role", role);
        if (!om) return -ENOMEM;
        json_array_append_new(dst, om);
        json_t *images = json_object_get(m, "images");
        if (images && !json_is_null(images)) {
            if (!json_is_array(images)) FAIL("messages[%zu].images must be an array", i);
            json_t *parts = NULL;
            rc = content_with_images(text, images, &parts, out->err, sizeof out->err, n_images);
            if (rc) goto done;
            json_object_set_new(om, "content", parts);
        } else {
            json_object_set_new(om, "content", json_string(text ? text : ""));
        }
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_is_array(calls) && json_array_size(calls))
            json_object_set_new(om, "tool_calls", tool_calls_openai(calls));
        const char *tn = json_string_value(json_object_get(m, "tool_name"));
        if (tn) json_object_set_new(om, "name", json_string(tn));
    }
done:
    return rc;
}

/* options → llama.cpp's sampling fields (numbers checked, loader options ignored). */
static int options_openai(const json_t *opts, json_t *dst, ollama_req_t *out)
{
    static const char *const NUMS[][2] = {
        {"temperature", "temperature"},
        {"top_p", "top_p"},
        {"top_k", "top_k"},
        {"min_p", "min_p"},
        {"typical_p", "typical_p"},
        {"seed", "seed"},
        {"repeat_penalty", "repeat_penalty"},
        {"repeat_last_n", "repeat_last_n"},
        {"presence_penalty", "presence_penalty"},
        {"frequency_penalty", "frequency_penalty"},
        {"mirostat", "mirostat"},
        {"mirostat_tau", "mirostat_tau"},
        {"mirostat_eta", "mirostat_eta"},
        {"num_keep", "n_keep"},
    };
    int rc = 0;
    if (!opts || json_is_null(opts)) return 0;
    if (!json_is_object(opts)) FAIL("options must be an object");
    for (size_t i = 0; i < sizeof NUMS / sizeof NUMS[0]; i++) {
        json_t *v = json_object_get(opts, NUMS[i][0]);
        if (!v || json_is_null(v)) continue;
        if (!json_is_number(v)) FAIL("options.%s must be a number", NUMS[i][0]);
        json_object_set(dst, NUMS[i][1], v);
    }
    json_t *np = json_object_get(opts, "num_predict");
    if (np && !json_is_null(np)) {
        if (!json_is_integer(np)) FAIL("options.num_predict must be an integer");
        if (json_integer_value(np) >= 0) json_object_set(dst, "max_tokens", np);
    }
    json_t *stop = json_object_get(opts, "stop");
    if (stop && !json_is_null(stop)) {
        if (json_is_string(stop)) {
            json_object_set_new(dst, "stop", json_pack("[O]", stop));
        } else {
            if (!json_is_array(stop)) FAIL("options.stop must be an array of strings");
            size_t i;
            json_t *s;
            json_array_foreach(stop, i, s) if (!json_is_string(s))
                FAIL("options.stop must be an array of strings");
            json_object_set(dst, "stop", stop);
        }
    }
done:
    return rc;
}

/* format: "json" or a JSON schema, as the chat API's response_format; a raw generate goes to
 * /v1/completions, which ignores response_format: there llama.cpp's json_schema field ("json":
 * any object). */
static int format_openai(json_t *fmt, bool raw, json_t *dst, ollama_req_t *out)
{
    int rc = 0;
    if (!fmt || json_is_null(fmt) || (json_is_string(fmt) && !json_string_length(fmt))) return 0;
    bool json = json_is_string(fmt) && strcmp(json_string_value(fmt), "json") == 0;
    if (!json && !json_is_object(fmt)) FAIL("format must be \"json\" or a JSON schema object");
    if (raw && json)
        json_object_set_new(dst, "json_schema", json_pack("{s:s}", "type", "object"));
    else if (raw)
        json_object_set(dst, "json_schema", fmt);
    else if (json)
        json_object_set_new(dst, "response_format", json_pack("{s:s}", "type", "json_object"));
    else
        json_object_set_new(dst, "response_format",
                            json_pack("{s:s,s:{s:s,s:O}}", "type", "json_schema", "json_schema",
                                      "name", "format", "schema", fmt));
done:
    return rc;
}

int ollama_request(ollama_req_t *out, ollama_ep_t ep, const char *body, size_t len)
{
    memset(out, 0, sizeof *out);
    out->ep = ep;
    out->stream = true;
    int rc = 0;
    json_t *in = NULL, *o = NULL;
    if (!ollama_is_inference(ep)) FAIL("not an inference endpoint");
    in = parse(body, len);
    if (!json_is_object(in)) FAIL("the body must be a JSON object");
    const char *model = json_string_value(json_object_get(in, "model"));
    if (!model) model = json_string_value(json_object_get(in, "name"));
    if (!model || !*model) FAIL("model is required");
    if (strlen(model) >= sizeof out->model) FAIL("model name too long");
    snprintf(out->model, sizeof out->model, "%s", model);
    json_t *st = json_object_get(in, "stream");
    if (st && !json_is_null(st)) {
        if (!json_is_boolean(st)) FAIL("stream must be a boolean");
        out->stream = json_is_true(st);
    }
    json_t *ka = json_object_get(in, "keep_alive");
    if (ka && !json_is_null(ka)) {
        if (ollama_keep_alive(ka, &out->keep_alive_ms) != 0)
            FAIL("keep_alive: not a duration (seconds, or a string like \"5m\", \"1h30m\", "
                 "\"-1\")");
        out->keep_alive_set = true;
        out->keep_alive_zero = out->keep_alive_ms == 0;
    }
    o = json_pack("{s:s}", "model", model);
    if (!o) {
        rc = -ENOMEM;
        goto done;
    }
    size_t n_images = 0;
    if (ep == OL_EMBED || ep == OL_EMBEDDINGS) {
        out->stream = false;
        out->path = "/v1/embeddings";
        json_t *input = json_object_get(in, ep == OL_EMBED ? "input" : "prompt");
        if (ep == OL_EMBED && json_is_array(input)) {
            if (!json_array_size(input)) FAIL("input must not be empty");
            size_t i;
            json_t *s;
            json_array_foreach(input, i, s) if (!json_is_string(s))
                FAIL("input must be a string or an array of strings");
        } else if (!json_is_string(input)) {
            FAIL(ep == OL_EMBED ? "input must be a string or an array of strings"
                                : "prompt must be a string");
        }
        json_object_set(o, "input", input);
        json_t *dims = json_object_get(in, "dimensions");
        if (json_is_integer(dims)) json_object_set(o, "dimensions", dims);
    } else {
        out->raw = ep == OL_GENERATE && json_is_true(json_object_get(in, "raw"));
        rc = options_openai(json_object_get(in, "options"), o, out);
        if (rc == 0) rc = format_openai(json_object_get(in, "format"), out->raw, o, out);
        if (rc) goto done;
        json_t *tools = json_object_get(in, "tools");
        if (tools && !json_is_null(tools)) {
            if (!json_is_array(tools)) FAIL("tools must be an array");
            if (json_array_size(tools)) json_object_set(o, "tools", tools);
        }
        if (ep == OL_CHAT) {
            json_t *msgs = json_object_get(in, "messages");
            if (!msgs || json_is_null(msgs) || (json_is_array(msgs) && !json_array_size(msgs))) {
                out->load_only = true;
                msgs = NULL;
            }
            json_t *dst = json_array();
            json_object_set_new(o, "messages", dst);
            if (msgs) rc = messages_openai(msgs, dst, out, &n_images);
            if (rc) goto done;
            out->path = "/v1/chat/completions";
        } else {
            json_t *pj = json_object_get(in, "prompt");
            if (pj && !json_is_null(pj) && !json_is_string(pj)) FAIL("prompt must be a string");
            const char *prompt = json_string_value(pj);
            json_t *sys = json_object_get(in, "system");
            if (sys && !json_is_null(sys) && !json_is_string(sys)) FAIL("system must be a string");
            json_t *images = json_object_get(in, "images");
            if (images && !json_is_null(images) && !json_is_array(images))
                FAIL("images must be an array");
            bool has_images = json_is_array(images) && json_array_size(images);
            if ((!prompt || !*prompt) && !has_images) out->load_only = true;
            if (out->raw) {
                if (has_images) FAIL("images cannot be sent with raw: true");
                json_object_set_new(o, "prompt", json_string(prompt ? prompt : ""));
                out->path = "/v1/completions";
            } else {
                json_t *dst = json_array();
                json_object_set_new(o, "messages", dst);
                const char *s = json_string_value(sys);
                if (s && *s)
                    json_array_append_new(dst,
                                          json_pack("{s:s,s:s}", "role", "system", "content", s));
                json_t *um = json_pack("{s:s}", "role", "user");
                json_array_append_new(dst, um);
                if (has_images) {
                    json_t *parts = NULL;
                    rc = content_with_images(prompt, images, &parts, out->err, sizeof out->err,
                                             &n_images);
                    if (rc) goto done;
                    json_object_set_new(um, "content", parts);
                } else {
                    json_object_set_new(um, "content", json_string(prompt ? prompt : ""));
                }
                out->path = "/v1/chat/completions";
            }
        }
        if (out->stream) {
            json_object_set_new(o, "stream", json_true());
            json_object_set_new(o, "stream_options", json_pack("{s:b}", "include_usage", 1));
        }
    }
    out->images = n_images > 0;
    out->body = json_dumps(o, JSON_COMPACT);
    if (!out->body) {
        rc = -ENOMEM;
        goto done;
    }
    out->body_len = strlen(out->body);
done:
    json_decref(in);
    json_decref(o);
    return rc;
}

void ollama_req_free(ollama_req_t *rq)
{
    free(rq->body);
    rq->body = NULL;
}

int ollama_model_of(const char *body, size_t len, char *model, size_t ml, bool *stream, char *err,
                    size_t el)
{
    json_t *in = parse(body, len);
    int rc = -EINVAL;
    if (stream) *stream = !json_is_false(json_object_get(in, "stream"));
    const char *m = json_string_value(json_object_get(in, "model"));
    if (!m) m = json_string_value(json_object_get(in, "name"));
    if (!json_is_object(in))
        snprintf(err, el, "the body must be a JSON object");
    else if (!m || !*m)
        snprintf(err, el, "model is required");
    else if (strlen(m) >= ml)
        snprintf(err, el, "model name too long");
    else {
        snprintf(model, ml, "%s", m);
        rc = 0;
    }
    json_decref(in);
    return rc;
}

/* ---- responses ---- */

void ollama_resp_init(ollama_resp_t *r, const ollama_req_t *rq, const char *created_at,
                      uint64_t start_ns)
{
    memset(r, 0, sizeof *r);
    r->ep = rq->ep;
    r->raw = rq->raw;
    snprintf(r->model, sizeof r->model, "%s", rq->model);
    snprintf(r->created_at, sizeof r->created_at, "%s", created_at);
    r->start_ns = start_ns;
    sse_init(&r->sse, 0);
    r->prompt_n = r->eval_n = -1;
}

void ollama_resp_free(ollama_resp_t *r)
{
    sse_free(&r->sse);
    for (size_t i = 0; i < r->n_tools; i++)
        buf_free(&r->tools[i].args);
    r->n_tools = 0;
}

static int put_json(json_t *o, bool line, buf_t *out)
{
    if (!o) return -ENOMEM;
    char *js = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!js) return -ENOMEM;
    int rc = buf_append(out, js, strlen(js));
    if (rc == 0 && line) rc = buf_append(out, "\n", 1);
    free(js);
    return rc;
}

int ollama_error_json(const char *msg, bool line, buf_t *out)
{
    return put_json(json_pack("{s:s}", "error", msg), line, out);
}

bool ollama_error_message(const char *body, size_t n, char *msg, size_t ml)
{
    json_t *o = parse(body, n);
    json_t *e = json_object_get(o, "error");
    const char *m =
        json_is_string(e) ? json_string_value(e) : json_string_value(json_object_get(e, "message"));
    if (m) snprintf(msg, ml, "%s", m);
    json_decref(o);
    return m != NULL;
}

/* usage and llama.cpp's timings of an answer */
static void note_counts(ollama_resp_t *r, const json_t *o)
{
    json_t *u = json_object_get(o, "usage");
    if (json_is_integer(json_object_get(u, "prompt_tokens")))
        r->prompt_n = json_integer_value(json_object_get(u, "prompt_tokens"));
    if (json_is_integer(json_object_get(u, "completion_tokens")))
        r->eval_n = json_integer_value(json_object_get(u, "completion_tokens"));
    json_t *t = json_object_get(o, "timings");
    if (json_is_number(json_object_get(t, "prompt_ms")))
        r->prompt_ms = json_number_value(json_object_get(t, "prompt_ms"));
    if (json_is_number(json_object_get(t, "predicted_ms")))
        r->eval_ms = json_number_value(json_object_get(t, "predicted_ms"));
    if (r->prompt_n < 0 && json_is_integer(json_object_get(t, "prompt_n")))
        r->prompt_n = json_integer_value(json_object_get(t, "prompt_n"));
    if (r->eval_n < 0 && json_is_integer(json_object_get(t, "predicted_n")))
        r->eval_n = json_integer_value(json_object_get(t, "predicted_n"));
}

static void note_finish(ollama_resp_t *r, const json_t *choice)
{
    const char *fr = json_string_value(json_object_get(choice, "finish_reason"));
    if (!fr) return;
    r->finished = true;
    /* Ollama says "stop" for a tool call too, "length" when num_predict ran out */
    snprintf(r->done_reason, sizeof r->done_reason, "%s",
             strcmp(fr, "length") == 0 ? "length" : "stop");
}

static json_t *line_base(const ollama_resp_t *r)
{
    return json_pack("{s:s,s:s}", "model", r->model, "created_at", r->created_at);
}

static void set_counts(const ollama_resp_t *r, json_t *o, uint64_t now_ns)
{
    json_object_set_new(o, "done_reason", json_string(r->done_reason[0] ? r->done_reason : "stop"));
    json_object_set_new(
        o, "total_duration",
        json_integer(now_ns > r->start_ns ? (json_int_t)(now_ns - r->start_ns) : 0));
    json_object_set_new(o, "load_duration", json_integer(0));
    json_object_set_new(o, "prompt_eval_count", json_integer(r->prompt_n > 0 ? r->prompt_n : 0));
    json_object_set_new(o, "prompt_eval_duration", json_integer((json_int_t)(r->prompt_ms * 1e6)));
    json_object_set_new(o, "eval_count", json_integer(r->eval_n > 0 ? r->eval_n : 0));
    json_object_set_new(o, "eval_duration", json_integer((json_int_t)(r->eval_ms * 1e6)));
}

/* A text line: chat's "message", generate's "response". */
static json_t *text_line(const ollama_resp_t *r, const char *text, const char *thinking,
                         json_t *tool_calls, bool done)
{
    json_t *o = line_base(r);
    if (!o) return NULL;
    if (r->ep == OL_CHAT) {
        json_t *m = json_pack("{s:s,s:s}", "role", "assistant", "content", text ? text : "");
        if (thinking && *thinking) json_object_set_new(m, "thinking", json_string(thinking));
        if (tool_calls) json_object_set_new(m, "tool_calls", tool_calls);
        json_object_set_new(o, "message", m);
    } else {
        json_object_set_new(o, "response", json_string(text ? text : ""));
        if (thinking && *thinking) json_object_set_new(o, "thinking", json_string(thinking));
        json_decref(tool_calls);
    }
    json_object_set_new(o, "done", json_boolean(done));
    return o;
}

/* OpenAI's tool calls (arguments a JSON string) → Ollama's (arguments an object). */
static json_t *tool_call_ollama(const char *name, const char *args, size_t len)
{
    json_t *a = len ? parse(args, len) : json_object();
    if (!json_is_object(a)) {
        json_decref(a);
        a = json_object();
    }
    return json_pack("{s:{s:s,s:o}}", "function", "name", name, "arguments", a);
}

static int flush_tools(ollama_resp_t *r, buf_t *out)
{
    if (!r->n_tools) return 0;
    json_t *calls = json_array();
    for (size_t i = 0; i < r->n_tools; i++) {
        json_array_append_new(
            calls, tool_call_ollama(r->tools[i].name, r->tools[i].args.data, r->tools[i].args.len));
        buf_free(&r->tools[i].args);
    }
    r->n_tools = 0;
    return put_json(text_line(r, "", NULL, calls, false), true, out);
}

static int done_line(ollama_resp_t *r, uint64_t now_ns, buf_t *out)
{
    int rc = flush_tools(r, out);
    json_t *o = text_line(r, "", NULL, NULL, true);
    if (o) set_counts(r, o, now_ns);
    if (rc == 0)
        rc = put_json(o, true, out);
    else
        json_decref(o);
    r->done = true;
    return rc;
}

static void stream_tool_delta(ollama_resp_t *r, const json_t *calls)
{
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c)
    {
        json_t *ix = json_object_get(c, "index");
        size_t k = json_is_integer(ix) ? (size_t)json_integer_value(ix) : i;
        if (k >= OLLAMA_MAX_TOOL_CALLS) continue;
        while (r->n_tools <= k) {
            memset(&r->tools[r->n_tools], 0, sizeof r->tools[0]);
            buf_init(&r->tools[r->n_tools].args, OLLAMA_MAX_TOOL_ARGS);
            r->n_tools++;
        }
        json_t *f = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        size_t have = strlen(r->tools[k].name);
        if (name) snprintf(r->tools[k].name + have, sizeof r->tools[k].name - have, "%s", name);
        const char *args = json_string_value(json_object_get(f, "arguments"));
        if (args) buf_append(&r->tools[k].args, args, strlen(args));
    }
}

typedef struct {
    ollama_resp_t *r;
    uint64_t now_ns;
} feed_ctx_t;

static void on_event(void *ud, const char *event, const char *data, size_t len)
{
    feed_ctx_t *fc = ud;
    ollama_resp_t *r = fc->r;
    (void)event;
    if (r->done || r->rc) return;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        r->rc = done_line(r, fc->now_ns, r->out);
        return;
    }
    json_t *o = parse(data, len);
    if (!json_is_object(o)) {
        json_decref(o);
        return;
    }
    json_t *err = json_object_get(o, "error");
    if (err) {
        const char *m = json_is_string(err) ? json_string_value(err)
                                            : json_string_value(json_object_get(err, "message"));
        r->rc = ollama_error_json(m ? m : "the model server failed", true, r->out);
        r->done = true;
        json_decref(o);
        return;
    }
    note_counts(r, o);
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    if (ch) {
        const char *text = NULL, *thinking = NULL;
        if (r->raw) {
            text = json_string_value(json_object_get(ch, "text"));
        } else {
            json_t *d = json_object_get(ch, "delta");
            text = json_string_value(json_object_get(d, "content"));
            thinking = json_string_value(json_object_get(d, "reasoning_content"));
            json_t *calls = json_object_get(d, "tool_calls");
            if (json_is_array(calls)) stream_tool_delta(r, calls);
        }
        if ((text && *text) || (thinking && *thinking))
            r->rc = put_json(text_line(r, text, thinking, NULL, false), true, r->out);
        note_finish(r, ch);
    }
    json_decref(o);
}

int ollama_stream_feed(ollama_resp_t *r, const char *p, size_t n, uint64_t now_ns, buf_t *out)
{
    feed_ctx_t fc = {r, now_ns};
    r->out = out;
    int rc = sse_feed(&r->sse, p, n, on_event, &fc);
    r->out = NULL;
    return rc ? rc : r->rc;
}

int ollama_stream_end(ollama_resp_t *r, bool complete, uint64_t now_ns, buf_t *out)
{
    if (r->done) return 0;
    if (complete && r->finished) return done_line(r, now_ns, out);
    r->done = true;
    return ollama_error_json(complete ? "the answer ended before its last event"
                                      : "the answer broke off: its model server failed",
                             true, out);
}

static json_t *embeddings_of(const json_t *o, size_t *n)
{
    json_t *data = json_object_get(o, "data");
    json_t *a = json_array();
    size_t i;
    json_t *d;
    json_array_foreach(data, i, d)
    {
        json_t *e = json_object_get(d, "embedding");
        if (json_is_array(e)) json_array_append(a, e);
    }
    *n = json_array_size(a);
    return a;
}

int ollama_whole(ollama_resp_t *r, int upstream_status, const char *body, size_t n, uint64_t now_ns,
                 buf_t *out, int *status)
{
    char msg[1024];
    *status = upstream_status;
    if (upstream_status < 200 || upstream_status >= 300) {
        if (!ollama_error_message(body, n, msg, sizeof msg))
            snprintf(msg, sizeof msg, "the model server answered %d", upstream_status);
        return ollama_error_json(msg, false, out);
    }
    json_t *o = parse(body, n);
    if (!json_is_object(o)) {
        json_decref(o);
        *status = 502;
        return ollama_error_json("the model server's answer is not JSON", false, out);
    }
    note_counts(r, o);
    json_t *res = NULL;
    if (r->ep == OL_EMBED || r->ep == OL_EMBEDDINGS) {
        size_t k;
        json_t *embs = embeddings_of(o, &k);
        if (r->ep == OL_EMBEDDINGS) {
            json_t *first = k ? json_incref(json_array_get(embs, 0)) : json_array();
            res = json_pack("{s:o}", "embedding", first);
            json_decref(embs);
        } else {
            res = line_base(r);
            json_object_del(res, "created_at");
            json_object_set_new(res, "embeddings", embs);
            json_object_set_new(
                res, "total_duration",
                json_integer(now_ns > r->start_ns ? (json_int_t)(now_ns - r->start_ns) : 0));
            json_object_set_new(res, "load_duration", json_integer(0));
            json_object_set_new(res, "prompt_eval_count",
                                json_integer(r->prompt_n > 0 ? r->prompt_n : 0));
        }
    } else {
        json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        note_finish(r, ch);
        const char *text, *thinking = NULL;
        json_t *calls = NULL;
        if (r->raw) {
            text = json_string_value(json_object_get(ch, "text"));
        } else {
            json_t *m = json_object_get(ch, "message");
            text = json_string_value(json_object_get(m, "content"));
            thinking = json_string_value(json_object_get(m, "reasoning_content"));
            json_t *tc = json_object_get(m, "tool_calls");
            if (json_is_array(tc) && json_array_size(tc)) {
                calls = json_array();
                size_t i;
                json_t *c;
                json_array_foreach(tc, i, c)
                {
                    json_t *f = json_object_get(c, "function");
                    const char *name = json_string_value(json_object_get(f, "name"));
                    const char *args = json_string_value(json_object_get(f, "arguments"));
                    if (name)
                        json_array_append_new(calls, tool_call_ollama(name, args ? args : "",
                                                                      args ? strlen(args) : 0));
                }
            }
        }
        res = text_line(r, text, thinking, calls, true);
        if (res) set_counts(r, res, now_ns);
    }
    json_decref(o);
    r->done = true;
    return put_json(res, false, out);
}

const char *ollama_quant_name(int32_t t)
{
    static const char *const NAMES[] = {
        [0] = "F32",      [1] = "F16",      [2] = "Q4_0",    [3] = "Q4_1",    [7] = "Q8_0",
        [8] = "Q5_0",     [9] = "Q5_1",     [10] = "Q2_K",   [11] = "Q3_K_S", [12] = "Q3_K_M",
        [13] = "Q3_K_L",  [14] = "Q4_K_S",  [15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M",
        [18] = "Q6_K",    [19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S", [22] = "IQ3_XS",
        [23] = "IQ3_XXS", [24] = "IQ1_S",   [25] = "IQ4_NL", [26] = "IQ3_S",  [27] = "IQ3_M",
        [28] = "IQ2_S",   [29] = "IQ2_M",   [30] = "IQ4_XS", [31] = "IQ1_M",  [32] = "BF16",
        [36] = "TQ1_0",   [37] = "TQ2_0",
    };
    if (t < 0 || (size_t)t >= sizeof NAMES / sizeof NAMES[0] || !NAMES[t]) return "unknown";
    return NAMES[t];
}

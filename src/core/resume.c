/* resume — see resume.h. */
#include "resume.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int resume_kind_for_path(const char *path)
{
    if (!path) return -1;
    if (strcmp(path, "/v1/chat/completions") == 0) return RESUME_CHAT;
    if (strcmp(path, "/v1/completions") == 0) return RESUME_COMPLETION;
    return -1;
}

static void set_why(char *why, size_t wl, const char *msg)
{
    if (why && wl) snprintf(why, wl, "%s", msg);
}

/* Can a stream of this request (o: its parsed body) be continued elsewhere? The rule of
 * request.h's request_resumable, on the body resume_build parses anyway; false with why. */
static bool continuable(resume_kind_t kind, const json_t *o, char *why, size_t wl)
{
    bool ok = false;
    if (!json_is_object(o)) {
        set_why(why, wl, "the request is not a JSON object");
    } else if (!json_is_true(json_object_get(o, "stream"))) {
        set_why(why, wl, "not a streamed request");
    } else if (json_object_get(o, "n") && json_integer_value(json_object_get(o, "n")) != 1) {
        set_why(why, wl, "more than one choice (n > 1)");
    } else if (json_object_get(o, "grammar") || json_object_get(o, "json_schema") ||
               json_object_get(o, "response_format")) {
        set_why(why, wl, "constrained output (grammar, json_schema, response_format)");
    } else if (kind == RESUME_COMPLETION && !json_is_string(json_object_get(o, "prompt"))) {
        set_why(why, wl, "the prompt is not a single string");
    } else if (kind == RESUME_CHAT && !json_is_array(json_object_get(o, "messages"))) {
        set_why(why, wl, "no messages");
    } else {
        ok = true;
    }
    return ok;
}

void resume_track_init(resume_track_t *t, resume_kind_t kind)
{
    memset(t, 0, sizeof *t);
    t->kind = kind;
}

void resume_track_free(resume_track_t *t)
{
    free(t->text);
    t->text = NULL;
    t->text_len = t->text_cap = 0;
}

static void block(resume_track_t *t, const char *why)
{
    if (!t->blocked) snprintf(t->why, sizeof t->why, "%s", why);
    t->blocked = true;
}

static void add_text(resume_track_t *t, const char *s, size_t n)
{
    if (t->text_len + n > RESUME_MAX_TEXT) {
        block(t, "too much text generated to continue it");
        return;
    }
    if (t->text_len + n + 1 > t->text_cap) {
        size_t nc = t->text_cap ? t->text_cap : 1024;
        while (nc < t->text_len + n + 1)
            nc *= 2;
        char *nt = realloc(t->text, nc);
        if (!nt) {
            block(t, "out of memory");
            return;
        }
        t->text = nt;
        t->text_cap = nc;
    }
    memcpy(t->text + t->text_len, s, n);
    t->text_len += n;
    t->text[t->text_len] = '\0';
}

static bool is_done(const char *data, size_t len)
{
    while (len && (data[len - 1] == ' ' || data[len - 1] == '\n'))
        len--;
    return len == 6 && memcmp(data, "[DONE]", 6) == 0;
}

static bool nonempty_array(json_t *a)
{
    return json_is_array(a) && json_array_size(a) > 0;
}

void resume_track_event(resume_track_t *t, const char *data, size_t len)
{
    if (is_done(data, len)) {
        t->done = true;
        return;
    }
    json_t *o = json_loadb(data, len, 0, NULL);
    if (!json_is_object(o)) {
        block(t, "the host sent an event that is not JSON");
        goto out;
    }
    if (json_object_get(o, "error")) {
        block(t, "the host sent an error event");
        goto out;
    }
    const char *id = json_string_value(json_object_get(o, "id"));
    if (id && !t->have_id && strlen(id) < sizeof t->id) {
        snprintf(t->id, sizeof t->id, "%s", id);
        t->have_id = true;
    }
    json_t *cr = json_object_get(o, "created");
    if (json_is_integer(cr) && !t->have_created) {
        t->created = json_integer_value(cr);
        t->have_created = true;
    }
    const char *model = json_string_value(json_object_get(o, "model"));
    if (model && !t->model[0] && strlen(model) < sizeof t->model)
        snprintf(t->model, sizeof t->model, "%s", model);
    json_t *choices = json_object_get(o, "choices");
    size_t i;
    json_t *c;
    json_array_foreach(choices, i, c)
    {
        json_t *idx = json_object_get(c, "index");
        if (json_is_integer(idx) && json_integer_value(idx) != 0) {
            block(t, "more than one choice");
            continue;
        }
        json_t *fr = json_object_get(c, "finish_reason");
        if (json_is_string(fr)) t->finished = true;
        const char *s;
        if (t->kind == RESUME_CHAT) {
            json_t *d = json_object_get(c, "delta");
            if (nonempty_array(json_object_get(d, "tool_calls")) ||
                json_object_get(d, "function_call"))
                block(t, "a tool call was being streamed");
            const char *rc = json_string_value(json_object_get(d, "reasoning_content"));
            if (rc && rc[0]) block(t, "reasoning was being streamed");
            json_t *content = json_object_get(d, "content");
            if (content && !json_is_string(content) && !json_is_null(content))
                block(t, "non-text content");
            s = json_string_value(content);
        } else {
            s = json_string_value(json_object_get(c, "text"));
        }
        if (s && s[0]) {
            add_text(t, s, strlen(s));
            t->n_tokens++;
        }
    }
out:
    json_decref(o);
}

static int lower_budget(json_t *o, const char *key, size_t used, bool *nothing_left)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0; /* absent, or -1: no limit */
    json_int_t left = json_integer_value(v) - (json_int_t)used;
    if (left <= 0) *nothing_left = true;
    return json_object_set_new(o, key, json_integer(left > 0 ? left : 1));
}

int resume_build(const resume_track_t *t, const char *body, size_t len, char **out, size_t *olen,
                 char *why, size_t wl)
{
    *out = NULL;
    *olen = 0;
    if (t->blocked) {
        set_why(why, wl, t->why);
        return -EINVAL;
    }
    json_t *o = json_loadb(body, len, 0, NULL); /* the failover's rewrite: its own parse */
    if (!continuable(t->kind, o, why, wl)) {
        json_decref(o);
        return -EINVAL;
    }
    int rc = 0;
    bool nothing_left = false;
    const char *text = t->text ? t->text : "";
    if (t->kind == RESUME_CHAT) {
        json_t *msgs = json_object_get(o, "messages");
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        const char *role = json_string_value(json_object_get(last, "role"));
        const char *prev = json_string_value(json_object_get(last, "content"));
        if (role && strcmp(role, "assistant") == 0 && prev) {
            size_t pl = strlen(prev);
            char *joined = malloc(pl + t->text_len + 1);
            if (!joined) {
                rc = -ENOMEM;
                goto out;
            }
            memcpy(joined, prev, pl);
            memcpy(joined + pl, text, t->text_len + 1);
            rc = json_object_set_new(last, "content", json_string(joined));
            free(joined);
        } else {
            rc = json_array_append_new(
                msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", text));
        }
    } else {
        const char *prompt = json_string_value(json_object_get(o, "prompt"));
        size_t pl = strlen(prompt);
        char *joined = malloc(pl + t->text_len + 1);
        if (!joined) {
            rc = -ENOMEM;
            goto out;
        }
        memcpy(joined, prompt, pl);
        memcpy(joined + pl, text, t->text_len + 1);
        rc = json_object_set_new(o, "prompt", json_string(joined));
        free(joined);
    }
    if (rc == 0) rc = lower_budget(o, "max_tokens", t->n_tokens, &nothing_left);
    if (rc == 0) rc = lower_budget(o, "max_completion_tokens", t->n_tokens, &nothing_left);
    if (rc == 0) rc = lower_budget(o, "n_predict", t->n_tokens, &nothing_left);
    if (rc) {
        set_why(why, wl, "could not build the continuation request");
        rc = -EINVAL;
        goto out;
    }
    if (nothing_left) {
        rc = RESUME_NOTHING_LEFT;
        goto out;
    }
    *out = json_dumps(o, JSON_COMPACT);
    if (!*out) {
        rc = -ENOMEM;
        goto out;
    }
    *olen = strlen(*out);
out:
    json_decref(o);
    return rc;
}

static int dump_to(json_t *o, buf_t *out)
{
    char *s = json_dumps(o, JSON_COMPACT);
    if (!s) return -ENOMEM;
    int rc = buf_append(out, s, strlen(s));
    free(s);
    return rc ? -ENOMEM : 1;
}

int resume_splice_event(const resume_track_t *t, const char *data, size_t len, buf_t *out)
{
    buf_reset(out);
    json_t *o = is_done(data, len) ? NULL : json_loadb(data, len, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return buf_append(out, data, len) ? -ENOMEM : 1;
    }
    int rc;
    if (t->kind == RESUME_CHAT) {
        /* the continuation's opening chunk says only role: assistant (already said) */
        json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
        json_t *d = json_object_get(c0, "delta");
        bool has_content = json_string_length(json_object_get(d, "content")) > 0;
        bool other = json_object_get(d, "tool_calls") || json_object_get(d, "reasoning_content");
        if (c0 && json_object_get(d, "role") && !has_content && !other &&
            !json_is_string(json_object_get(c0, "finish_reason"))) {
            rc = 0;
            goto out;
        }
    }
    if (t->have_id) json_object_set_new(o, "id", json_string(t->id));
    if (t->have_created) json_object_set_new(o, "created", json_integer(t->created));
    rc = dump_to(o, out);
out:
    json_decref(o);
    return rc;
}

int resume_length_chunk(const resume_track_t *t, buf_t *out)
{
    buf_reset(out);
    json_t *choice =
        t->kind == RESUME_CHAT
            ? json_pack("{s:i,s:{},s:s}", "index", 0, "delta", "finish_reason", "length")
            : json_pack("{s:i,s:s,s:s}", "index", 0, "text", "", "finish_reason", "length");
    json_t *o = json_pack("{s:s,s:I,s:s,s:s,s:[o]}", "id", t->have_id ? t->id : "", "created",
                          (json_int_t)t->created, "model", t->model, "object",
                          t->kind == RESUME_CHAT ? "chat.completion.chunk" : "text_completion",
                          "choices", choice);
    if (!o) return -ENOMEM;
    int rc = dump_to(o, out);
    json_decref(o);
    return rc < 0 ? rc : 0;
}

uint64_t resume_first_byte_ms(uint64_t base_ms, uint64_t per_kb_ms, size_t body_len)
{
    const uint64_t cap = 30ull * 60 * 1000;
    uint64_t kb = (uint64_t)body_len / 1024;
    if (per_kb_ms && kb > cap / per_kb_ms) return cap;
    uint64_t ms = base_ms + kb * per_kb_ms;
    return ms < base_ms || ms > cap ? cap : ms;
}

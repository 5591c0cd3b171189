/* Unit tests for the typed request (src/core/request.h): differential tables against the
 * functions request_parse replaced. The core ones (vision_has_image, affinity_prefix_key,
 * resume_request_ok, router_request_key, rt_sticky_key: verbatim in body_oracle.h since the node
 * parses a body once) run on every row; the ones above core
 * (app/api_openai.c:api_body_model and api_anthropic_body_check, node/admission.c:body_model)
 * cannot be linked here, so their answers are written in the rows, each column naming its
 * function. A row where request_parse deliberately differs says so (`differs`). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "affinity.h"
#include "body_oracle.h"
#include "request.h"
#include "resume.h"
#include "route_table.h"
#include "vision.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h;
}

static request_t parse(const char *path, const char *body)
{
    request_t rq;
    int rc = request_parse(&rq, path, body, body ? strlen(body) : 0);
    assert_int_equal(rc, rq.rc);
    return rq;
}

/* ---- the model and the body's shape: api_body_model, admission's body_model ---- */

enum { ADM_FOUND = 0, ADM_ABSENT = -ENODATA, ADM_BAD = -ENOENT }; /* admission.c:body_model */

typedef struct {
    const char *what, *body;
    /* request_parse, = app/api_openai.c:api_body_model (rc, name, err) unless differs */
    int rc, model_rc;
    const char *model, *err; /* err: the start of the message */
    /* node/admission.c:body_model (flags 0, name buffer MODEL_NAME_MAX): rc, name, choices */
    int adm;
    const char *adm_model;
    unsigned choices;
    const char *differs; /* why request_parse/the API and admission read it differently */
} model_row_t;

#define NOT_JSON "request body is not valid JSON: "
#define NOT_OBJ "request body must be a JSON object"
#define NONEMPTY "'model' must be a non-empty string"

static char long127[200], long128[200]; /* {"model":"x…"} with names of 127 and 128 bytes */

static const model_row_t MODEL[] = {
    {"a name", "{\"model\":\"qwen\"}", 0, REQUEST_MODEL_FOUND, "qwen", NULL, ADM_FOUND, "qwen", 1,
     NULL},
    {"no model", "{\"messages\":[]}", 0, REQUEST_MODEL_ABSENT, "", NULL, ADM_ABSENT, NULL, 1, NULL},
    {"model null", "{\"model\":null}", 0, REQUEST_MODEL_ABSENT, "", NULL, ADM_ABSENT, NULL, 1,
     NULL},
    {"empty name", "{\"model\":\"\"}", 0, -EINVAL, "", NONEMPTY, ADM_FOUND, "", 1,
     "admission admits \"\" as a remote model before the API answers 400"},
    {"number", "{\"model\":5}", 0, -EINVAL, "", NONEMPTY, ADM_BAD, NULL, 1, NULL},
    {"object", "{\"model\":{\"a\":1}}", 0, -EINVAL, "", NONEMPTY, ADM_BAD, NULL, 1, NULL},
    {"\\u0000 (jansson refuses it)", "{\"model\":\"ab\\u0000c\"}", -EINVAL, -EINVAL, "", NOT_JSON,
     ADM_BAD, NULL, 1, NULL},
    {"not JSON", "model=qwen", -EINVAL, -EINVAL, "", NOT_JSON, ADM_BAD, NULL, 1, NULL},
    {"empty body", "", -EINVAL, -EINVAL, "", NOT_JSON, ADM_BAD, NULL, 1, NULL},
    {"trailing bytes", "{\"model\":\"a\"} x", -EINVAL, -EINVAL, "", NOT_JSON, ADM_BAD, NULL, 1,
     NULL},
    {"an array", "[{\"model\":\"a\"}]", -EINVAL, -EINVAL, "", NOT_OBJ, ADM_BAD, NULL, 1, NULL},
    {"a string", "\"qwen\"", -EINVAL, -EINVAL, "", NOT_JSON, ADM_BAD, NULL, 1, NULL},
    {"duplicate key", "{\"model\":\"a\",\"model\":\"b\"}", -EINVAL, -EINVAL, "", NOT_JSON,
     ADM_FOUND, "b", 1, "admission parses duplicates (the last wins); the API answers 400"},
    {"n counts choices", "{\"model\":\"m\",\"n\":3}", 0, REQUEST_MODEL_FOUND, "m", NULL, ADM_FOUND,
     "m", 3, NULL},
    {"n 0", "{\"n\":0}", 0, REQUEST_MODEL_ABSENT, "", NULL, ADM_ABSENT, NULL, 1, NULL},
    {"n negative", "{\"n\":-4}", 0, REQUEST_MODEL_ABSENT, "", NULL, ADM_ABSENT, NULL, 1, NULL},
    {"n past the cap", "{\"n\":100000}", 0, REQUEST_MODEL_ABSENT, "", NULL, ADM_ABSENT, NULL,
     REQUEST_MAX_CHOICES, NULL},
    {"n a real", "{\"n\":2.0}", 0, REQUEST_MODEL_ABSENT, "", NULL, ADM_ABSENT, NULL, 1, NULL},
    {"n a string", "{\"n\":\"2\"}", 0, REQUEST_MODEL_ABSENT, "", NULL, ADM_ABSENT, NULL, 1, NULL},
    {"127-byte name", long127, 0, REQUEST_MODEL_FOUND, NULL, NULL, ADM_FOUND, NULL, 1, NULL},
    {"128-byte name", long128, 0, -EINVAL, "", "'model' is too long", ADM_BAD, NULL, 1, NULL},
};

static void test_model(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(MODEL); i++) {
        const model_row_t *r = &MODEL[i];
        request_t rq = parse("/v1/chat/completions", r->body);
        if (rq.rc != r->rc || rq.model_rc != r->model_rc)
            fail_msg("%s: rc %d model_rc %d, want %d %d", r->what, rq.rc, rq.model_rc, r->rc,
                     r->model_rc);
        if (r->model) assert_string_equal(rq.model, r->model);
        if (r->err && strncmp(rq.err, r->err, strlen(r->err)) != 0)
            fail_msg("%s: err \"%s\", want \"%s…\"", r->what, rq.err, r->err);
        if (r->model_rc < 0) assert_true(rq.err[0]);
        assert_int_equal(rq.choices, r->choices);
        /* admission's reading, as request_parse lets admission read it (S15): found → the
         * name; absent → the only model; anything else → the API answers */
        int adm_new = rq.model_rc == REQUEST_MODEL_FOUND    ? ADM_FOUND
                      : rq.model_rc == REQUEST_MODEL_ABSENT ? ADM_ABSENT
                                                            : ADM_BAD;
        bool same = adm_new == r->adm &&
                    (r->adm != ADM_FOUND || !r->adm_model || strcmp(rq.model, r->adm_model) == 0);
        if (same != !r->differs)
            fail_msg("%s: admission %s (request %d, admission %d)", r->what,
                     same ? "agrees, but the row says it differs" : "differs, not documented",
                     adm_new, r->adm);
    }
    /* the name's length limit is CATALOG_NAME_MAX - 1 bytes (MODEL_NAME_MAX's) */
    request_t rq = parse("/v1/chat/completions", long127);
    assert_int_equal(strlen(rq.model), CATALOG_NAME_MAX - 1);
}

static void test_no_body(void **state)
{
    (void)state;
    request_t rq;
    memset(&rq, 0x5a, sizeof rq);
    assert_int_equal(request_parse(&rq, NULL, NULL, 0), -EINVAL);
    assert_int_equal(rq.model_rc, -EINVAL);
    assert_int_equal(strncmp(rq.err, NOT_JSON, strlen(NOT_JSON)), 0);
    assert_int_equal(rq.kind, -1);
    assert_int_equal(rq.shape, API_STREAM_OPENAI);
    assert_int_equal(rq.choices, 1);
    assert_false(rq.stream || rq.images || rq.has_sticky);
    assert_true(rq.prefix == 0);
    assert_int_equal(rq.max_tokens, -1);
    assert_int_equal(rq.anthropic_rc, 0);
    /* only len bytes are read: the rest of the buffer is not the body */
    const char *b = "{\"model\":\"a\"}{\"model\":\"b\"}";
    assert_int_equal(request_parse(&rq, NULL, b, 13), 0);
    assert_string_equal(rq.model, "a");
    /* a body of one NUL byte is not JSON (it is not an empty string either) */
    assert_int_equal(request_parse(&rq, NULL, "", 1), -EINVAL);
}

/* ---- the stickiness key of the one rule (route_decide.h) ---- */

typedef struct {
    const char *what, *body;
    const char *sticky; /* the key hashed into request_t.sticky, NULL: none */
} key_row_t;

static char user300[400], user600[700], sys2k[2200]; /* long keys, filled by make_bodies */
static char u300[301], v600[601];

static const key_row_t KEYS[] = {
    {"user first", "{\"user\":\"u1\",\"session_id\":\"s\",\"messages\":[{\"role\":\"user\"}]}",
     "u1"},
    {"session_id", "{\"session_id\":\"s2\",\"messages\":[]}", "s2"},
    {"messages only: no key (the old active router pinned on messages[0])",
     "{\"messages\":[{\"role\":\"system\",\"content\":\"hi\"},{\"role\":\"user\"}]}", NULL},
    {"empty user, session_id: the session_id", "{\"user\":\"\",\"session_id\":\"s\"}", "s"},
    {"empty user alone", "{\"user\":\"\"}", NULL},
    {"user not a string", "{\"user\":5,\"session_id\":\"s\"}", "s"},
    {"null user, empty session_id", "{\"user\":null,\"session_id\":\"\"}", NULL},
    {"\\u0000: not JSON to jansson", "{\"user\":\"a\\u0000b\"}", NULL},
    {"300-byte user: hashed whole", user300, u300},
    {"600-byte user: hashed whole", user600, v600},
    {"messages[0] a string", "{\"messages\":[\"hi\"]}", NULL},
    {"messages[0] an array", "{\"messages\":[[1,2]]}", NULL},
    {"messages an object", "{\"messages\":{\"role\":\"user\"}}", NULL},
    {"long system prompt", sys2k, NULL},
    {"prompt only", "{\"prompt\":\"x\"}", NULL},
    {"not JSON", "user=u1", NULL},
};

static void make_bodies(void)
{
    memset(u300, 'u', 300);
    snprintf(user300, sizeof user300, "{\"user\":\"%s\"}", u300);
    memset(v600, 'v', 600);
    snprintf(user600, sizeof user600, "{\"user\":\"%s\",\"session_id\":\"s\"}", v600);
    char sys[2000];
    memset(sys, 's', sizeof sys - 1);
    sys[sizeof sys - 1] = '\0';
    snprintf(sys2k, sizeof sys2k, "{\"messages\":[{\"role\":\"system\",\"content\":\"%s\"}]}", sys);
    char name[129];
    memset(name, 'm', 128);
    name[128] = '\0';
    snprintf(long128, sizeof long128, "{\"model\":\"%s\"}", name);
    name[127] = '\0';
    snprintf(long127, sizeof long127, "{\"model\":\"%s\"}", name);
}

static void check_key(const char *what, const char *field, bool has, uint64_t h, const char *want)
{
    if (has != (want != NULL))
        fail_msg("%s: %s %s, want %s", what, field, has ? "present" : "absent",
                 want ? want : "none");
    if (want && h != fnv(want, strlen(want)))
        fail_msg("%s: %s is not the hash of \"%.40s…\"", what, field, want);
}

static void test_keys(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(KEYS); i++) {
        const key_row_t *r = &KEYS[i];
        request_t rq = parse("/v1/chat/completions", r->body);
        check_key(r->what, "sticky", rq.has_sticky, rq.sticky, r->sticky);
    }
    request_t rq = parse(NULL, "{\"user\":\"user-42\"}");
    assert_true(rq.sticky == fnv("user-42", 7));
}

/* ---- images: vision_has_image ---- */

typedef struct {
    const char *what, *body;
    bool images;
    bool differs; /* vision_has_image parses duplicates (the API answers 400) */
} image_row_t;

static const image_row_t IMAGES[] = {
    {"chat image_url part",
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
     "\"what is it\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,"
     "AAAA\"}}]}]}",
     true, false},
    {"anthropic image block",
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}", true,
     false},
    {"anthropic image in a tool_result",
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
     "\"t\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}]}",
     true, false},
    {"tool_result nested twice: not looked at",
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"content\":[{"
     "\"type\":\"tool_result\",\"content\":[{\"type\":\"image\"}]}]}]}]}",
     false, false},
    {"responses input_image part",
     "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}"
     "]}",
     true, false},
    {"responses input item", "{\"input\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}", true,
     false},
    {"completion multimodal_data object",
     "{\"prompt\":{\"prompt_string\":\"<__media__>\",\"multimodal_data\":[\"A\"]}}", true, false},
    {"completion multimodal_data list",
     "{\"prompt\":[{\"prompt_string\":\"x\",\"multimodal_data\":[\"A\"]}]}", true, false},
    {"text about an image_url", "{\"messages\":[{\"role\":\"user\",\"content\":\"an image_url\"}]}",
     false, false},
    {"a text part saying image",
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"image\"}]}]}",
     false, false},
    {"input text", "{\"input\":\"describe the image\"}", false, false},
    {"prompt text", "{\"prompt\":\"an image of a cat\"}", false, false},
    {"a tool schema's type",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"image\"}]}",
     false, false},
    {"not JSON", "not json image", false, false},
    {"an array", "[{\"type\":\"image\"}]", false, false},
    {"messages an object", "{\"messages\":{\"type\":\"image_url\"}}", false, false},
    {"odd items", "{\"messages\":[1,\"image\",null,[{\"type\":\"image\"}]]}", false, false},
    {"escaped type: no literal 'image' in the body",
     "{\"messages\":[{\"content\":[{\"type\":\"\\u0069mage\"}]}]}", false, false},
    {"duplicate key", "{\"model\":\"a\",\"model\":\"b\",\"messages\":[{\"type\":\"image\"}]}",
     false, true},
};

static void test_images(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(IMAGES); i++) {
        const image_row_t *r = &IMAGES[i];
        request_t rq = parse("/v1/chat/completions", r->body);
        if (rq.images != r->images) fail_msg("%s: images %d", r->what, rq.images);
        bool today = vision_has_image(r->body, strlen(r->body));
        if ((today == r->images) == r->differs)
            fail_msg("%s: vision_has_image says %d", r->what, today);
    }
    /* the scan is bounded as vision.c's: an image after VISION_MAX_ITEMS parts is not seen */
    size_t cap = (VISION_MAX_ITEMS + 8) * 32 + 256, len = 0;
    char *b = malloc(cap);
    assert_non_null(b);
    for (int last = 0; last < 2; last++) {
        int parts = last ? VISION_MAX_ITEMS - 2 : VISION_MAX_ITEMS;
        len = (size_t)snprintf(b, cap, "{\"messages\":[{\"content\":[");
        for (int i = 0; i < parts; i++)
            len += (size_t)snprintf(b + len, cap - len, "{\"type\":\"text\"},");
        len += (size_t)snprintf(b + len, cap - len, "{\"type\":\"image\"}]}]}");
        request_t rq;
        assert_int_equal(request_parse(&rq, NULL, b, len), 0);
        assert_int_equal(rq.images, last == 1);
        assert_int_equal(vision_has_image(b, len), last == 1);
    }
    free(b);
}

/* ---- prefix affinity: affinity_prefix_key ---- */

/* pre + a string of n bytes ('p'; 'q' at byte i when i < n) + post */
static char *body_with(const char *pre, const char *post, size_t n, size_t i)
{
    size_t lp = strlen(pre), lq = strlen(post);
    char *b = malloc(lp + n + lq + 1);
    assert_non_null(b);
    memcpy(b, pre, lp);
    memset(b + lp, 'p', n);
    if (i < n) b[lp + i] = 'q';
    memcpy(b + lp + n, post, lq + 1);
    return b;
}

typedef struct {
    const char *what, *pre, *post;
    size_t n;   /* bytes of the string between pre and post */
    bool key;   /* a key (not 0) */
    int same;   /* the row whose key it equals (-1: none checked) */
    size_t cut; /* where a 'q' changes the string (n: nowhere) */
} prefix_row_t;

#define PROMPT "{\"prompt\":\"", "\"}"
#define CHAT_SYS "{\"messages\":[{\"role\":\"system\",\"content\":\""
#define P_CHAT CHAT_SYS, "\"},{\"role\":\"user\"}]}"
#define P_CHAT2 CHAT_SYS, "\"},{\"role\":\"user\"},1]}"

static const prefix_row_t PREFIX[] = {
    {"completion prompt, 511 bytes", PROMPT, 511, false, -1, 511},
    {"completion prompt, 512 bytes", PROMPT, 512, true, -1, 512},
    {"completion prompt, 5000 bytes", PROMPT, 5000, true, -1, 5000},
    {"… differing after 1024 bytes: the same key", PROMPT, 5000, true, 2, 2000},
    {"… differing at byte 100: another key", PROMPT, 5000, true, -1, 100},
    {"chat, long system prompt", P_CHAT, 3000, true, -1, 3000},
    {"the next turn of it: the same key", P_CHAT2, 3000, true, 5, 3000},
    {"chat, short", P_CHAT, 100, false, -1, 100},
    {"chat, 470-byte content: the JSON is over 512", P_CHAT, 470, true, -1, 470},
    {"a prompt string wins over messages", "{\"prompt\":\"", "\",\"messages\":[1]}", 512, true, 1,
     512},
    {"a token prompt: messages", "{\"prompt\":[1,2],\"messages\":[\"", "\"]}", 600, true, -1, 600},
    {"input only", "{\"input\":\"", "\"}", 2000, false, -1, 2000},
    {"messages an object", "{\"messages\":{\"a\":\"", "\"}}", 2000, false, -1, 2000},
    {"a huge conversation", P_CHAT, 1u << 20, true, 5, 1u << 20},
};

static void test_prefix(void **state)
{
    (void)state;
    uint64_t keys[N(PREFIX)];
    for (size_t i = 0; i < N(PREFIX); i++) {
        const prefix_row_t *r = &PREFIX[i];
        char *b = body_with(r->pre, r->post, r->n, r->cut);
        request_t rq = parse("/v1/chat/completions", b);
        keys[i] = rq.prefix;
        if ((rq.prefix != 0) != r->key)
            fail_msg("%s: key %llx", r->what, (unsigned long long)rq.prefix);
        if (rq.prefix != affinity_prefix_key(b, strlen(b)))
            fail_msg("%s: not affinity_prefix_key's", r->what);
        if (r->same >= 0 && keys[r->same] != rq.prefix) fail_msg("%s: keys differ", r->what);
        free(b);
    }
    assert_true(keys[4] != keys[2]);
    /* not JSON: none (affinity_prefix_key: none) */
    request_t rq = parse(NULL, "prompt=xxxx");
    assert_true(rq.prefix == 0);
}

/* ---- continuation and the relay's facts: resume_request_ok, relay_start ---- */

typedef struct {
    const char *what, *path, *body;
    bool ok;            /* request_resumable = resume_request_ok (kind of the path) */
    const char *why;    /* its reason */
    bool stream;        /* relay.c:relay_start's "stream" */
    api_stream_t shape; /* relay.c:relay_start's r->shape */
} resume_row_t;

#define CHAT "/v1/chat/completions"
#define COMPL "/v1/completions"

static const resume_row_t RESUME[] = {
    {"streamed chat", CHAT, "{\"stream\":true,\"messages\":[]}", true, NULL, true,
     API_STREAM_OPENAI},
    {"not streamed", CHAT, "{\"messages\":[]}", false, "not a streamed request", false,
     API_STREAM_OPENAI},
    {"stream not true", CHAT, "{\"stream\":\"true\",\"messages\":[]}", false,
     "not a streamed request", false, API_STREAM_OPENAI},
    {"n 2", CHAT, "{\"stream\":true,\"n\":2,\"messages\":[]}", false,
     "more than one choice (n > 1)", true, API_STREAM_OPENAI},
    {"n 1", CHAT, "{\"stream\":true,\"n\":1,\"messages\":[]}", true, NULL, true, API_STREAM_OPENAI},
    {"n 1.0", CHAT, "{\"stream\":true,\"n\":1.0,\"messages\":[]}", false,
     "more than one choice (n > 1)", true, API_STREAM_OPENAI},
    {"n null", CHAT, "{\"stream\":true,\"n\":null,\"messages\":[]}", false,
     "more than one choice (n > 1)", true, API_STREAM_OPENAI},
    {"grammar", CHAT, "{\"stream\":true,\"grammar\":\"x\",\"messages\":[]}", false,
     "constrained output (grammar, json_schema, response_format)", true, API_STREAM_OPENAI},
    {"response_format null", CHAT, "{\"stream\":true,\"response_format\":null,\"messages\":[]}",
     false, "constrained output (grammar, json_schema, response_format)", true, API_STREAM_OPENAI},
    {"json_schema", COMPL, "{\"stream\":true,\"json_schema\":{},\"prompt\":\"x\"}", false,
     "constrained output (grammar, json_schema, response_format)", true, API_STREAM_OPENAI},
    {"chat without messages", CHAT, "{\"stream\":true,\"prompt\":\"x\"}", false, "no messages",
     true, API_STREAM_OPENAI},
    {"completion", COMPL, "{\"stream\":true,\"prompt\":\"x\"}", true, NULL, true,
     API_STREAM_OPENAI},
    {"token prompt", COMPL, "{\"stream\":true,\"prompt\":[1,2,3]}", false,
     "the prompt is not a single string", true, API_STREAM_OPENAI},
    {"not an object", CHAT, "[1]", false, "the request is not a JSON object", false,
     API_STREAM_OPENAI},
    {"not JSON", COMPL, "{", false, "the request is not a JSON object", false, API_STREAM_OPENAI},
    /* paths without a continuation: the relay does not ask resume_request_ok */
    {"anthropic stream", "/v1/messages", "{\"stream\":true,\"messages\":[]}", false, NULL, true,
     API_STREAM_ANTHROPIC},
    {"responses stream", "/v1/responses", "{\"stream\":true,\"input\":\"x\"}", false, NULL, true,
     API_STREAM_RESPONSES},
    {"responses not streamed", "/v1/responses", "{\"input\":\"x\"}", false, NULL, false,
     API_STREAM_OPENAI},
    {"llama.cpp /completion", "/completion", "{\"stream\":true,\"prompt\":\"x\"}", false, NULL,
     true, API_STREAM_OPENAI},
};

static void test_resumable(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(RESUME); i++) {
        const resume_row_t *r = &RESUME[i];
        request_t rq = parse(r->path, r->body);
        assert_int_equal(rq.kind, resume_kind_for_path(r->path));
        char why[160] = "", why_today[160] = "";
        bool ok = request_resumable(&rq, why, sizeof why);
        if (ok != r->ok) fail_msg("%s: resumable %d (%s)", r->what, ok, why);
        if (rq.stream != r->stream || rq.shape != r->shape)
            fail_msg("%s: stream %d shape %d", r->what, rq.stream, (int)rq.shape);
        assert_true(ok || why[0]);
        if (rq.kind < 0) continue;
        bool today =
            resume_request_ok((resume_kind_t)rq.kind, r->body, strlen(r->body), why_today, 160);
        if (today != ok) fail_msg("%s: resume_request_ok says %d", r->what, today);
        if (!ok) assert_string_equal(why, why_today);
        if (r->why) assert_string_equal(why, r->why);
    }
    /* a NULL why is allowed */
    request_t rq = parse(CHAT, "{}");
    assert_false(request_resumable(&rq, NULL, 0));
}

/* ---- Anthropic bodies: api_anthropic_body_check ---- */

typedef struct {
    const char *what, *path, *body;
    int rc;          /* app/api_openai.c:api_anthropic_body_check (on Anthropic paths) */
    const char *err; /* its message */
} anthropic_row_t;

#define MSGS "/v1/messages"
#define REQ_MSG "messages: field required (a non-empty array of messages)"
#define MAX_TOK "max_tokens: must be a positive integer"
#define ONE_MSG(i)                                                                                 \
    "messages." #i ": each message needs a string 'role' and a 'content' that is a string or an "  \
    "array"

static const anthropic_row_t ANTHROPIC[] = {
    {"good", MSGS,
     "{\"model\":\"m\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 0,
     NULL},
    {"content blocks", MSGS, "{\"messages\":[{\"role\":\"user\",\"content\":[]}]}", 0, NULL},
    {"no messages", MSGS, "{\"model\":\"m\"}", -EINVAL, REQ_MSG},
    {"empty messages", MSGS, "{\"messages\":[]}", -EINVAL, REQ_MSG},
    {"messages a string", MSGS, "{\"messages\":\"hi\"}", -EINVAL, REQ_MSG},
    {"max_tokens 0", MSGS, "{\"max_tokens\":0,\"messages\":[{\"role\":\"u\",\"content\":\"\"}]}",
     -EINVAL, MAX_TOK},
    {"max_tokens a string", MSGS,
     "{\"max_tokens\":\"9\",\"messages\":[{\"role\":\"u\",\"content\":\"\"}]}", -EINVAL, MAX_TOK},
    {"max_tokens a real", MSGS,
     "{\"max_tokens\":1.5,\"messages\":[{\"role\":\"u\",\"content\":\"\"}]}", -EINVAL, MAX_TOK},
    {"max_tokens null", MSGS,
     "{\"max_tokens\":null,\"messages\":[{\"role\":\"u\",\"content\":\"\"}]}", -EINVAL, MAX_TOK},
    {"no content", MSGS, "{\"messages\":[{\"role\":\"user\"}]}", -EINVAL, ONE_MSG(0)},
    {"second role a number", MSGS,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":1,\"content\":\"x\"}]}",
     -EINVAL, ONE_MSG(1)},
    {"a message not an object", MSGS, "{\"messages\":[\"hi\"]}", -EINVAL, ONE_MSG(0)},
    {"content an object", MSGS, "{\"messages\":[{\"role\":\"user\",\"content\":{}}]}", -EINVAL,
     ONE_MSG(0)},
    {"count_tokens too", "/v1/messages/count_tokens", "{\"messages\":[]}", -EINVAL, REQ_MSG},
    {"not JSON: messages missing", MSGS, "{", -EINVAL, REQ_MSG},
    {"OpenAI path: not checked", CHAT, "{\"messages\":[]}", 0, NULL},
    {"no path: not checked", NULL, "{\"messages\":[]}", 0, NULL},
};

static void test_anthropic(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(ANTHROPIC); i++) {
        const anthropic_row_t *r = &ANTHROPIC[i];
        request_t rq = parse(r->path, r->body);
        if (rq.anthropic_rc != r->rc) fail_msg("%s: rc %d", r->what, rq.anthropic_rc);
        if (r->err) assert_string_equal(rq.anthropic_err, r->err);
    }
}

/* ---- limits ---- */

static void test_max_tokens(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int64_t want;
    } rows[] = {
        {"{}", -1},
        {"{\"max_tokens\":100}", 100},
        {"{\"max_tokens\":0}", 0},
        {"{\"max_completion_tokens\":7}", 7},
        {"{\"n_predict\":9}", 9},
        {"{\"n_predict\":-1}", -1},
        {"{\"max_tokens\":\"5\",\"n_predict\":3}", 3},
        {"{\"max_tokens\":5,\"max_completion_tokens\":6,\"n_predict\":7}", 5},
        {"{\"max_tokens\":1e3}", -1},
    };
    for (size_t i = 0; i < N(rows); i++) {
        request_t rq = parse(CHAT, rows[i].body);
        if (rq.max_tokens != rows[i].want)
            fail_msg("%s: max_tokens %lld", rows[i].body, (long long)rq.max_tokens);
    }
}

int main(void)
{
    make_bodies();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model),     cmocka_unit_test(test_no_body),
        cmocka_unit_test(test_keys),      cmocka_unit_test(test_images),
        cmocka_unit_test(test_prefix),    cmocka_unit_test(test_resumable),
        cmocka_unit_test(test_anthropic), cmocka_unit_test(test_max_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

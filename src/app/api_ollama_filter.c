/* The response filter of an Ollama inference request (api_ollama.h): the OpenAI answer, as
 * whoever writes it (httpd_respond, the proxy from llama-server, the relay from another node),
 * is parsed as an HTTP response (llhttp, response mode: chunked or not) and written again as
 * Ollama's: NDJSON lines in chunks for a stream, one JSON object for a whole answer or an
 * error. Bounded: a whole answer at most OLLAMA_MAX_WHOLE bytes, the lines of one write at most
 * FILTER_MAX_OUT; past them the answer ends with an Ollama error. */
#include <errno.h>
#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include "api_ollama.h"
#include "log.h"

#define FILTER_MAX_OUT (8u << 20)

typedef struct {
    httpd_filter_t f;
    httpd_req_t *req;
    ollama_req_t rq;
    ollama_resp_t rs;
    llhttp_t parser;
    llhttp_settings_t settings;
    int status;
    bool head_seen; /* the upstream head is parsed */
    bool streaming; /* a 2xx answer to a streamed request: NDJSON lines as they come */
    bool began;     /* our head is written */
    bool complete;  /* the upstream message is complete */
    bool broken;    /* the upstream bytes do not parse, or a bound was passed */
    buf_t whole;    /* a whole answer's body */
    buf_t out;      /* lines to write */
    char hname[32]; /* the upstream header being read (longer names are not kept) */
    size_t hname_len;
    char hvalue[512];
    size_t hvalue_len;
    bool hskip;
    char keep[1024]; /* the upstream's X-Mesh-* and Server-Timing lines, passed on */
    size_t keep_len;
    models_t *ms;
    model_entry_t *unload; /* keep_alive 0: unloaded when the request ends */
} flt_t;

void api_ollama_time(char *out, size_t len)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%06ldZ", day, (long)tv.tv_usec);
}

static uint64_t now_ns(void)
{
    return httpd_now_ns();
}

static void write_chunk(flt_t *f, const char *p, size_t n)
{
    if (!n) return;
    char h[24];
    int hl = snprintf(h, sizeof h, "%zx\r\n", n);
    httpd_write_through(f->req, h, (size_t)hl);
    httpd_write_through(f->req, p, n);
    httpd_write_through(f->req, "\r\n", 2);
}

static void begin_stream(flt_t *f)
{
    char head[2048], cors[384];
    if (httpd_cors_headers(f->req, cors, sizeof cors) < 0) cors[0] = '\0';
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                     "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n"
                     "X-Accel-Buffering: no\r\n%s%sConnection: close\r\n\r\n",
                     f->keep, cors);
    if (n > 0 && (size_t)n < sizeof head) httpd_write_through(f->req, head, (size_t)n);
    f->began = true;
}

static void flush_lines(flt_t *f)
{
    write_chunk(f, f->out.data, f->out.len);
    buf_reset(&f->out);
}

static void add_to(char *dst, size_t cap, size_t *len, const char *at, size_t n, bool *skip)
{
    if (*len + n >= cap) {
        *skip = true;
        return;
    }
    memcpy(dst + *len, at, n);
    *len += n;
    dst[*len] = '\0';
}

static int on_hfield(llhttp_t *p, const char *at, size_t len)
{
    flt_t *f = p->data;
    add_to(f->hname, sizeof f->hname, &f->hname_len, at, len, &f->hskip);
    return 0;
}

static int on_hvalue(llhttp_t *p, const char *at, size_t len)
{
    flt_t *f = p->data;
    add_to(f->hvalue, sizeof f->hvalue, &f->hvalue_len, at, len, &f->hskip);
    return 0;
}

/* Who served the answer and where its time went (X-Mesh-Node, X-Mesh-Route, Server-Timing):
 * passed on to the client; the rest of the upstream head is the OpenAI answer's. */
static int on_hdone(llhttp_t *p)
{
    flt_t *f = p->data;
    bool keep = !f->hskip && (strncasecmp(f->hname, "x-mesh-", 7) == 0 ||
                              strcasecmp(f->hname, "server-timing") == 0);
    size_t need = f->hname_len + f->hvalue_len + 4;
    if (keep && f->keep_len + need < sizeof f->keep)
        f->keep_len += (size_t)snprintf(f->keep + f->keep_len, sizeof f->keep - f->keep_len,
                                        "%s: %s\r\n", f->hname, f->hvalue);
    f->hname_len = f->hvalue_len = 0;
    f->hname[0] = f->hvalue[0] = '\0';
    f->hskip = false;
    return 0;
}

static int on_headers(llhttp_t *p)
{
    flt_t *f = p->data;
    f->status = p->status_code;
    f->head_seen = true;
    f->streaming = f->rq.stream && f->status >= 200 && f->status < 300;
    if (f->streaming) begin_stream(f);
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    flt_t *f = p->data;
    if (f->streaming) {
        int rc = ollama_stream_feed(&f->rs, at, len, now_ns(), &f->out);
        flush_lines(f);
        if (rc < 0) {
            f->broken = true;
            return HPE_USER;
        }
        return 0;
    }
    if (buf_append(&f->whole, at, len) < 0) {
        f->broken = true;
        return HPE_USER;
    }
    return 0;
}

static int on_complete(llhttp_t *p)
{
    flt_t *f = p->data;
    f->complete = true;
    return HPE_PAUSED;
}

static int flt_write(httpd_req_t *req, const void *data, size_t len)
{
    flt_t *f = req->filter->data;
    if (f->broken || f->complete) return 0;
    llhttp_errno_t e = llhttp_execute(&f->parser, data, len);
    if (e != HPE_OK && e != HPE_PAUSED) {
        if (!f->broken)
            LOGW("ollama", "the answer to %s does not parse: %s", f->rq.model,
                 llhttp_errno_name(e));
        f->broken = true;
    }
    return 0;
}

static void flt_end(httpd_req_t *req, bool complete, bool *keep_alive)
{
    flt_t *f = req->filter->data;
    if (!f->broken && !f->complete && f->head_seen) {
        /* an answer delimited by the end of its connection ends here */
        if (llhttp_finish(&f->parser) == HPE_OK) f->complete = true;
    }
    uint64_t now = now_ns();
    if (f->streaming) {
        ollama_stream_end(&f->rs, complete && f->complete && !f->broken, now, &f->out);
        flush_lines(f);
        httpd_write_through(req, "0\r\n\r\n", 5);
        *keep_alive = false;
        return;
    }
    int status = 502;
    buf_reset(&f->out);
    if (f->head_seen && f->complete && !f->broken)
        ollama_whole(&f->rs, f->status, f->whole.data ? f->whole.data : "", f->whole.len, now,
                     &f->out, &status);
    else
        ollama_error_json(f->whole.len >= OLLAMA_MAX_WHOLE ? "the answer is too large"
                                                           : "the answer broke off",
                          false, &f->out);
    char head[2048], cors[384];
    if (httpd_cors_headers(req, cors, sizeof cors) < 0) cors[0] = '\0';
    bool ka = *keep_alive && req->keep_alive;
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json; charset=utf-8\r\n"
                     "Content-Length: %zu\r\n%s%s%s\r\n",
                     status, httpd_status_text(status), f->out.len, f->keep, cors,
                     ka ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    if (n > 0 && (size_t)n < sizeof head) httpd_write_through(req, head, (size_t)n);
    if (f->out.len) httpd_write_through(req, f->out.data, f->out.len);
    *keep_alive = ka;
}

static void flt_done(httpd_req_t *req)
{
    flt_t *f = req->filter->data;
    if (f->unload) {
        LOGI("ollama", "keep_alive 0: unloading %s after the request", f->unload->mm->name);
        models_unload(f->ms, f->unload);
    }
    ollama_resp_free(&f->rs);
    ollama_req_free(&f->rq);
    buf_free(&f->whole);
    buf_free(&f->out);
    free(f);
}

int api_ollama_filter(httpd_req_t *req, ollama_req_t *rq, models_t *ms, model_entry_t *unload)
{
    flt_t *f = calloc(1, sizeof *f);
    if (!f) {
        ollama_req_free(rq);
        return -ENOMEM;
    }
    f->req = req;
    f->rq = *rq;
    f->ms = ms;
    f->unload = unload;
    char at[48];
    api_ollama_time(at, sizeof at);
    ollama_resp_init(&f->rs, &f->rq, at, req->start_ns);
    buf_init(&f->whole, OLLAMA_MAX_WHOLE);
    buf_init(&f->out, FILTER_MAX_OUT);
    llhttp_settings_init(&f->settings);
    f->settings.on_headers_complete = on_headers;
    f->settings.on_body = on_body;
    f->settings.on_header_field = on_hfield;
    f->settings.on_header_value = on_hvalue;
    f->settings.on_header_value_complete = on_hdone;
    f->settings.on_message_complete = on_complete;
    llhttp_init(&f->parser, HTTP_RESPONSE, &f->settings);
    f->parser.data = f;
    f->f = (httpd_filter_t){.write = flt_write, .end = flt_end, .done = flt_done, .data = f};
    req->filter = &f->f;
    req->body = f->rq.body;
    req->body_len = f->rq.body_len;
    req->rq_ok = false;
    return 0;
}

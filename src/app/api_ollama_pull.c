/* Ollama's POST /api/pull (api_ollama.h): the node's downloader (node_dl.h) fetches the model
 * reference (hf://ORG/REPO/FILE.gguf, ORG/REPO:QUANT, a catalog name, a URL) into the models
 * directory, as `--model REF` would, and the answer follows it: NDJSON progress lines
 * ({"status":"pulling manifest"}, {"status":"downloading …","digest","total","completed"} …,
 * {"status":"success"} or {"error":"…"}), or with "stream": false one JSON object at the end.
 * The download goes on if the client leaves. Polled every PULL_POLL_MS, at most one line a poll. */
#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_ollama.h"
#include "log.h"
#include "node_dl.h"

#define PULL_POLL_MS 200

typedef struct {
    httpd_req_t *req; /* NULL once the client is gone */
    uv_timer_t timer;
    node_dl_t *dl;
    char ref[NODE_DL_REF_MAX];
    char digest[72];
    bool stream;
    uint64_t last_bytes, last_total;
} pull_t;

static void pull_closed(uv_handle_t *h)
{
    free(h->data);
}

static void pull_stop(pull_t *p)
{
    uv_timer_stop(&p->timer);
    uv_close((uv_handle_t *)&p->timer, pull_closed);
}

static void put_line(pull_t *p, json_t *o)
{
    char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!js) return;
    httpd_write(p->req, js, strlen(js));
    httpd_write(p->req, "\n", 1);
    free(js);
}

static json_t *success(void)
{
    return json_pack("{s:s}", "status", "success");
}

/* The answer's end: success, or the download's error. */
static void pull_finish(pull_t *p, const char *err)
{
    httpd_req_t *req = p->req;
    p->req = NULL;
    req->on_abort = NULL;
    req->data = NULL;
    if (p->stream) {
        p->req = req;
        put_line(p, err ? json_pack("{s:s}", "error", err) : success());
        p->req = NULL;
        httpd_end(req, false);
    } else if (err) {
        httpd_respond_error(req, 500, "server_error", "download_failed", "%s", err);
    } else {
        httpd_respond_json(req, 200, success());
    }
    pull_stop(p);
}

static void on_poll(uv_timer_t *t)
{
    pull_t *p = t->data;
    const node_dl_job_t *j = node_dl_job(p->dl, p->ref);
    if (!j) return pull_finish(p, "the download is gone");
    if (!j->active) return pull_finish(p, j->failed ? (j->err[0] ? j->err : "failed") : NULL);
    if (!p->stream) return;
    uint64_t bytes, total;
    double rate;
    node_dl_progress(p->dl, j, &bytes, &total, &rate);
    if (bytes == p->last_bytes && total == p->last_total) return;
    p->last_bytes = bytes;
    p->last_total = total;
    char status[NODE_DL_NAME_MAX + 16];
    snprintf(status, sizeof status, "downloading %s", j->name);
    put_line(p, json_pack("{s:s,s:s,s:I,s:I}", "status", status, "digest", p->digest, "total",
                          (json_int_t)total, "completed", (json_int_t)bytes));
}

static void on_abort(httpd_req_t *req)
{
    pull_t *p = req->data;
    LOGI("ollama", "pull of %s: the client left; the download goes on", p->ref);
    p->req = NULL;
    pull_stop(p);
}

void api_ollama_pull(api_t *api, httpd_req_t *req)
{
    char ref[NODE_DL_REF_MAX], err[512], name[NODE_DL_NAME_MAX];
    bool stream = true;
    if (ollama_model_of(req->body, req->body_len, ref, sizeof ref, &stream, err, sizeof err) < 0) {
        httpd_respond_error(req, 400, "invalid_request_error", "invalid_body", "%s", err);
        return;
    }
    if (!api->dl) {
        httpd_respond_error(req, 501, "invalid_request_error", "no_downloads",
                            "this node does not download models (--client, or downloads are "
                            "disabled): pull on a node that serves models");
        return;
    }
    bool here =
        models_find(api->ms, ref) || (node_dl_ref_name(api->dl, ref, name, sizeof name) == 0 &&
                                      models_find(api->ms, name) && node_dl_on_disk(api->dl, ref));
    if (!here) {
        int rc = node_dl_start(api->dl, ref, err, sizeof err);
        if (rc < 0) {
            httpd_respond_error(req, rc == -EFBIG || rc == -EINVAL ? 400 : 503,
                                "invalid_request_error", "pull_refused", "%s", err);
            return;
        }
    }
    if (here || !node_dl_job(api->dl, ref)) { /* nothing to fetch */
        if (!stream) {
            httpd_respond_json(req, 200, success());
            return;
        }
        httpd_stream_begin(req, 200, "application/x-ndjson", NULL);
        const char *line = "{\"status\":\"success\"}\n";
        httpd_write(req, line, strlen(line));
        httpd_end(req, false);
        return;
    }
    pull_t *p = calloc(1, sizeof *p);
    if (!p) {
        httpd_respond_error(req, 500, "server_error", "no_memory", "out of memory");
        return;
    }
    p->req = req;
    p->dl = api->dl;
    p->stream = stream;
    snprintf(p->ref, sizeof p->ref, "%s", ref);
    unsigned char h[32];
    crypto_generichash(h, sizeof h, (const unsigned char *)ref, strlen(ref), NULL, 0);
    memcpy(p->digest, "sha256:", 7);
    sodium_bin2hex(p->digest + 7, sizeof p->digest - 7, h, sizeof h);
    uv_timer_init(api->loop, &p->timer);
    p->timer.data = p;
    req->data = p;
    req->on_abort = on_abort;
    LOGI("ollama", "pull of %s: downloading", ref);
    if (stream) {
        httpd_stream_begin(req, 200, "application/x-ndjson", NULL);
        put_line(p, json_pack("{s:s}", "status", "pulling manifest"));
    }
    uv_timer_start(&p->timer, on_poll, PULL_POLL_MS, PULL_POLL_MS);
}

/* model_fetch — see model_fetch.h. */
#include "model_fetch.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define MF_LIST_MAX (4u << 20)
#define MF_FILES_MAX 4096

typedef struct {
    dl_t *d;
    model_ref_t r;
    char ref[512];
    char dir[1024];
    char url_base[MODEL_REF_URL_MAX]; /* URL kind: the URL with its file name cut off */
    unsigned part, nparts;
    char first[2048];
    char cur[2048];                        /* the file being downloaded */
    char cur_src[MODEL_REF_URL_MAX + 100]; /* where it comes from (model_ref_source) */
    bool fetched;
    mf_opts_t o;
    mf_done_fn cb;
    void *data;
} mf_t;

void mf_default_dir(const char *models_dir, char *out, size_t len)
{
    const char *home = getenv("HOME");
    if (models_dir && *models_dir)
        snprintf(out, len, "%s", models_dir);
    else
        snprintf(out, len, "%s/.models", home && *home ? home : ".");
}

int mf_local_path(const model_ref_t *r, const char *dir, char *out, size_t len)
{
    if (!r->file[0]) return -EINVAL;
    int w = snprintf(out, len, "%s/%s", dir, model_ref_basename(r->file));
    return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

static void next_part(mf_t *m);

/* FILE.source beside a downloaded file records where it came from, so a second reference with
 * the same file name (another organisation's a.gguf) is not taken for it. */
static void source_path(const char *dest, char *out, size_t len)
{
    snprintf(out, len, "%s.source", dest);
}

static void source_write(const char *dest, const char *src)
{
    char p[2100], tmp[2120];
    source_path(dest, p, sizeof p);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    bool ok = fprintf(f, "%s\n", src) > 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, p) != 0) unlink(tmp);
}

int mf_source_of(const char *dest, char *out, size_t len)
{
    char p[2100];
    source_path(dest, p, sizeof p);
    FILE *f = fopen(p, "r");
    if (!f) return -errno;
    int rc = fgets(out, (int)len, f) ? 0 : -EIO;
    fclose(f);
    out[strcspn(out, "\r\n")] = 0;
    return rc;
}

/* dest (there) is r's file: it has no source record (put there by hand: taken as it is) or the
 * record names r's source. Else have gets the recorded source. */
static bool source_matches(const model_ref_t *r, const char *file, const char *dest, char *have,
                           size_t hl)
{
    char want[MODEL_REF_URL_MAX + 100];
    have[0] = 0;
    if (model_ref_source(r, file, want, sizeof want) != 0) return true;
    if (mf_source_of(dest, have, hl) != 0) return true;
    return strcmp(have, want) == 0;
}

bool mf_on_disk(const model_ref_t *r, const char *dir, char *path, size_t len)
{
    struct stat st;
    char have[MODEL_REF_URL_MAX + 100];
    if (mf_local_path(r, dir, path, len) != 0 || stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
        !source_matches(r, NULL, path, have, sizeof have))
        return false;
    if (!r->mmproj[0]) return true;
    /* a reference that names a projector is on disk with it (else fetched: the model's parts
     * are there and taken as they are, the projector is downloaded) */
    char local[MODEL_REF_FILE_MAX], proj[2048];
    return model_ref_mmproj_local(r->file, local, sizeof local) == 0 &&
           snprintf(proj, sizeof proj, "%s/%s", dir, local) < (int)sizeof proj &&
           stat(proj, &st) == 0 && S_ISREG(st.st_mode) &&
           source_matches(r, r->mmproj, proj, have, sizeof have);
}

static void end(mf_t *m, int rc, const char *err)
{
    m->cb(m->data, rc, err, rc == 0 ? m->first : NULL, rc == 0 && !m->fetched);
    free(m);
}

static void part_done(void *data, int rc, const char *err, const char *path)
{
    mf_t *m = data;
    if (rc) {
        end(m, rc, err);
        return;
    }
    m->fetched = true;
    source_write(m->cur, m->cur_src);
    m->part++;
    next_part(m);
}

/* Step m->part: part 1..nparts of the model, or, at nparts + 1, its vision projector (model_ref.h:
 * from the same repo and revision, saved beside the model as mmproj-<stem>.gguf). file: the file
 * in the repo (or the URL's); dest: where it goes. Returns 0, 1 (no such step) or -EINVAL. */
static int step_paths(mf_t *m, char *file, size_t fl, char *dest, size_t dl)
{
    char local[MODEL_REF_FILE_MAX];
    if (m->part > m->nparts) {
        if (m->part > m->nparts + 1 || !m->r.mmproj[0]) return 1;
        if (model_ref_mmproj_local(m->r.file, local, sizeof local) != 0) return -EINVAL;
        snprintf(file, fl, "%s", m->r.mmproj);
        snprintf(dest, dl, "%s/%s", m->dir, local);
        return 0;
    }
    snprintf(file, fl, "%s", m->r.file);
    if (m->nparts > 1 && model_ref_split_part(m->r.file, m->part, file, fl) != 0) return -EINVAL;
    snprintf(dest, dl, "%s/%s", m->dir, model_ref_basename(file));
    return 0;
}

static void next_part(mf_t *m)
{
    char err[1024];
    for (;;) {
        char file[MODEL_REF_FILE_MAX], dest[2048], url[MODEL_REF_URL_MAX], label[700];
        int rc = step_paths(m, file, sizeof file, dest, sizeof dest);
        if (rc == 1) break;
        if (rc) {
            end(m, -EINVAL, "bad split file name");
            return;
        }
        bool proj = m->part > m->nparts;
        if (m->part == 1) snprintf(m->first, sizeof m->first, "%s", dest);
        struct stat st;
        char have[MODEL_REF_URL_MAX + 100];
        if (stat(dest, &st) == 0 && S_ISREG(st.st_mode)) {
            if (!source_matches(&m->r, file, dest, have, sizeof have)) {
                snprintf(err, sizeof err,
                         "%.200s: %.300s in the models directory came from %.300s, another "
                         "%s with the same file name: remove it (mesh-llm models rm) or use "
                         "another --models-dir",
                         m->ref, dest, have, proj ? "projector" : "model");
                end(m, -EEXIST, err);
                return;
            }
            m->part++;
            continue;
        }
        snprintf(m->cur, sizeof m->cur, "%s", dest);
        model_ref_source(&m->r, file, m->cur_src, sizeof m->cur_src);
        if (m->r.kind == MODEL_REF_URL)
            rc = m->nparts > 1 ? (snprintf(url, sizeof url, "%s%s", m->url_base,
                                           model_ref_basename(file)) >= (int)sizeof url
                                      ? -ENAMETOOLONG
                                      : 0)
                               : (snprintf(url, sizeof url, "%s", m->r.url), 0);
        else
            rc = model_ref_hf_url(dl_hub(m->d), m->r.repo, m->r.rev, file, url, sizeof url);
        if (rc) {
            end(m, rc, "URL too long");
            return;
        }
        if (proj)
            snprintf(label, sizeof label, "%.400s (vision projector %.200s)", m->ref, file);
        else if (m->nparts > 1)
            snprintf(label, sizeof label, "%s (part %u of %u)", m->ref, m->part, m->nparts);
        else
            snprintf(label, sizeof label, "%s", m->ref);
        dl_req_t req = {.url = url,
                        .dest = dest,
                        .label = label,
                        .max_bytes = m->o.max_bytes,
                        .size_out = proj ? NULL : m->o.size_out};
        if (m->r.known && m->nparts <= 1 && !proj) req.sha256 = m->r.known->sha256;
        rc = dl_start(m->d, &req, part_done, m);
        if (rc) {
            snprintf(err, sizeof err, "%.300s: cannot download into %.400s: %s", m->ref, dest,
                     rc == -EBUSY ? "another mesh-llm is downloading it (its .part is locked)"
                                  : strerror(-rc));
            end(m, rc, err);
        }
        return;
    }
    end(m, 0, NULL);
}

static void have_file(mf_t *m)
{
    unsigned idx = 1, n = 1;
    if (model_ref_split(model_ref_basename(m->r.file), &idx, &n, NULL) && idx == 1 && n > 1)
        m->nparts = n;
    else
        m->nparts = 1;
    if (m->r.kind == MODEL_REF_URL) {
        const char *q = strpbrk(m->r.url, "?#");
        size_t end_at = q ? (size_t)(q - m->r.url) : strlen(m->r.url);
        size_t cut = end_at - strlen(m->r.file);
        snprintf(m->url_base, sizeof m->url_base, "%.*s", (int)cut, m->r.url);
    }
    m->part = 1;
    next_part(m);
}

static void listing_done(void *data, int rc, const char *err, long status, const char *body,
                         size_t len)
{
    mf_t *m = data;
    char msg[1024];
    if (rc) {
        snprintf(msg, sizeof msg, "%s: listing the repository: %s", m->ref, err);
        end(m, rc, msg);
        return;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    json_t *sib = json_object_get(root, "siblings");
    const char **files = NULL;
    size_t n = 0;
    if (json_is_array(sib) && json_array_size(sib) <= MF_FILES_MAX) {
        files = calloc(json_array_size(sib) + 1, sizeof *files);
        size_t i;
        json_t *v;
        json_array_foreach(sib, i, v)
        {
            const char *f = json_string_value(json_object_get(v, "rfilename"));
            if (f && files) files[n++] = f;
        }
    }
    int pick = files ? model_ref_pick_quant(files, n, m->r.quant) : -1;
    if (pick >= 0) snprintf(m->r.file, sizeof m->r.file, "%s", files[pick]);
    /* the repo's vision projector comes with the model, as with llama.cpp's -hf */
    int proj = pick >= 0 ? model_ref_pick_mmproj(files, n, m->r.file, m->r.quant) : -1;
    if (proj >= 0) snprintf(m->r.mmproj, sizeof m->r.mmproj, "%s", files[proj]);
    free(files);
    bool listed = json_is_array(sib);
    json_decref(root);
    if (!listed) {
        snprintf(msg, sizeof msg, "%s: the hub's file listing is not what was expected", m->ref);
        end(m, -EPROTO, msg);
        return;
    }
    if (pick < 0) {
        snprintf(msg, sizeof msg, "%s: the repository %s has no GGUF file of quantization %s",
                 m->ref, m->r.repo, m->r.quant);
        end(m, -ENOENT, msg);
        return;
    }
    LOGI("download", "%s: %s%s%s", m->ref, m->r.file, m->r.mmproj[0] ? " with its projector " : "",
         m->r.mmproj);
    have_file(m);
}

int mf_fetch(dl_t *d, const char *ref, const char *dir, mf_done_fn cb, void *data, char *err,
             size_t errlen)
{
    return mf_fetch_opts(d, ref, dir, NULL, cb, data, err, errlen);
}

int mf_fetch_opts(dl_t *d, const char *ref, const char *dir, const mf_opts_t *o, mf_done_fn cb,
                  void *data, char *err, size_t errlen)
{
    mf_t *m = calloc(1, sizeof *m);
    if (!m) return -ENOMEM;
    if (o) m->o = *o;
    int rc = model_ref_parse(ref, &m->r, err, errlen);
    if (rc == 0 && !model_ref_remote(&m->r)) {
        snprintf(err, errlen,
                 "'%s' is not something to download: give a catalog name (mesh-llm models "
                 "list), hf://ORG/REPO/FILE.gguf, ORG/REPO:QUANT or an https:// URL",
                 ref);
        rc = -EINVAL;
    }
    if (rc) {
        free(m);
        return rc;
    }
    m->d = d;
    snprintf(m->ref, sizeof m->ref, "%s", ref);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    m->cb = cb;
    m->data = data;
    if (m->r.kind == MODEL_REF_HF_QUANT) {
        char url[MODEL_REF_URL_MAX];
        snprintf(url, sizeof url, "%s/api/models/%s", dl_hub(d), m->r.repo);
        rc = dl_fetch(d, url, MF_LIST_MAX, listing_done, m);
        if (rc) {
            snprintf(err, errlen, "%s: %s", ref, strerror(-rc));
            free(m);
        }
        return rc;
    }
    have_file(m);
    return 0;
}

const char *mf_models_dir_arg(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i < argc && !dir; i++) {
        if (strcmp(argv[i], "--models-dir") == 0 && i + 1 < argc)
            dir = argv[i + 1];
        else if (strncmp(argv[i], "--models-dir=", 13) == 0)
            dir = argv[i] + 13;
    }
    return dir;
}

/* A download holds an exclusive flock on its .part while it writes it (download.c). */
static bool part_in_use(const char *pp)
{
    int fd = open(pp, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return busy;
}

/* The path of part i (1-based) of file in dir (file itself unless it is a split GGUF). */
static void part_path(const char *dir, const char *file, bool split, unsigned i, char *out,
                      size_t len)
{
    char f[MODEL_REF_FILE_MAX];
    if (!split || model_ref_split_part(file, i, f, sizeof f) != 0)
        snprintf(f, sizeof f, "%s", file);
    snprintf(out, len, "%s/%s", dir, f);
}

int mf_remove(const char *dir, const char *file, void (*removed)(void *data, const char *path),
              void *data, char *why, size_t whylen)
{
    why[0] = '\0';
    if (!*file || strchr(file, '/') || strcmp(file, ".") == 0 || strcmp(file, "..") == 0) {
        snprintf(why, whylen, "%s: not a file name", file);
        return -EINVAL;
    }
    unsigned idx, n = 1;
    bool split = model_ref_split(file, &idx, &n, NULL);
    if (!split) n = 1;
    char p[2048], pp[2100];
    for (unsigned i = 1; i <= n; i++) {
        part_path(dir, file, split, i, p, sizeof p);
        snprintf(pp, sizeof pp, "%s.part", p);
        if (part_in_use(pp)) {
            snprintf(why, whylen, "%s", pp);
            return -EBUSY;
        }
    }
    char local[MODEL_REF_FILE_MAX];
    bool proj = model_ref_mmproj_local(file, local, sizeof local) == 0;
    if (proj) {
        snprintf(pp, sizeof pp, "%s/%s.part", dir, local);
        if (part_in_use(pp)) {
            snprintf(why, whylen, "%s", pp);
            return -EBUSY;
        }
    }
    int count = 0, err = 0;
    for (unsigned i = 1; i <= n + (proj ? 1 : 0); i++) {
        if (i > n) /* its vision projector (model_ref.h) */
            snprintf(p, sizeof p, "%s/%s", dir, local);
        else
            part_path(dir, file, split, i, p, sizeof p);
        for (int k = 0; k < 3; k++) {
            static const char *const ext[] = {"", ".part", ".source"};
            snprintf(pp, sizeof pp, "%s%s", p, ext[k]);
            if (unlink(pp) == 0) {
                if (k < 2) count++;
                if (removed) removed(data, pp);
            } else if (errno != ENOENT && !err) {
                err = -errno;
                snprintf(why, whylen, "%s: %s", pp, strerror(errno));
            }
        }
    }
    return err ? err : count;
}

/* model_ref — parsing of model references (see model_ref.h). Pure: no I/O. */
#include "model_ref.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool ends_with_ci(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

static bool valid_repo_part(const char *s, size_t n)
{
    if (n == 0 || n > 96) return false;
    if (s[0] == '.' || s[0] == '-') return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.') return false;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '.' && s[i + 1] == '.') return false;
    return true;
}

/* A file path inside a repo: no "..", no empty segments, no leading '/', printable, no '?#%\'. */
static bool valid_repo_file(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= MODEL_REF_FILE_MAX || s[0] == '/' || s[n - 1] == '/') return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c >= 0x7f || c == '?' || c == '#' || c == '%' || c == '\\') return false;
        if (c == '/' && s[i + 1] == '/') return false;
    }
    const char *p = s;
    while (p) {
        if (strncmp(p, "..", 2) == 0 && (p[2] == '/' || p[2] == 0)) return false;
        p = strchr(p, '/');
        if (p) p++;
    }
    return true;
}

bool model_ref_is_sha256(const char *s)
{
    if (!s || strlen(s) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return true;
}

const char *model_ref_basename(const char *file)
{
    const char *slash = strrchr(file, '/');
    return slash ? slash + 1 : file;
}

bool model_ref_split(const char *file, unsigned *idx, unsigned *n, size_t *stem_len)
{
    /* ...-NNNNN-of-MMMMM.gguf */
    const char *suffix = "-00000-of-00000.gguf";
    size_t len = strlen(file), sl = strlen(suffix);
    if (len <= sl) return false;
    const char *t = file + len - sl;
    unsigned a = 0, b = 0;
    for (size_t i = 0; i < sl; i++) {
        char want = suffix[i], c = t[i];
        if (want == '0') {
            if (!isdigit((unsigned char)c)) return false;
        } else if (tolower((unsigned char)c) != want) {
            return false;
        }
    }
    for (int i = 1; i <= 5; i++)
        a = a * 10 + (unsigned)(t[i] - '0');
    for (int i = 10; i <= 14; i++)
        b = b * 10 + (unsigned)(t[i] - '0');
    if (a == 0 || b == 0 || a > b) return false;
    if (idx) *idx = a;
    if (n) *n = b;
    if (stem_len) *stem_len = len - sl;
    return true;
}

int model_ref_split_part(const char *file, unsigned idx, char *out, size_t len)
{
    unsigned i, n;
    size_t stem;
    if (!model_ref_split(file, &i, &n, &stem) || idx == 0 || idx > n) return -EINVAL;
    int w = snprintf(out, len, "%.*s-%05u-of-%05u.gguf", (int)stem, file, idx, n);
    return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

int model_ref_hf_url(const char *endpoint, const char *repo, const char *rev, const char *file,
                     char *out, size_t len)
{
    size_t el = strlen(endpoint);
    while (el > 0 && endpoint[el - 1] == '/')
        el--;
    int w = snprintf(out, len, "%.*s/%s/resolve/%s/%s", (int)el, endpoint, repo,
                     rev && *rev ? rev : "main", file);
    return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

int model_ref_pick_quant(const char *const *files, size_t n, const char *quant)
{
    int best = -1;
    for (size_t i = 0; i < n; i++) {
        const char *f = files[i];
        if (!ends_with_ci(f, ".gguf")) continue;
        const char *base = model_ref_basename(f);
        if (model_ref_is_mmproj(base)) continue;
        if (!strcasestr(base, quant)) continue;
        /* The quant must stand as a word: "Q4_K" does not pick "Q4_K_M" over "Q4_K_S" blindly,
         * but "Q4_K_M" in "model-Q4_K_M.gguf" or "model.Q4_K_M.gguf" does. */
        const char *at = strcasestr(base, quant);
        char after = at[strlen(quant)];
        if (isalnum((unsigned char)after) || after == '_') continue;
        unsigned idx;
        if (model_ref_split(base, &idx, NULL, NULL) && idx != 1) continue;
        if (best < 0 || strlen(f) < strlen(files[best])) best = (int)i;
    }
    return best;
}

bool model_ref_is_mmproj(const char *file)
{
    const char *base = model_ref_basename(file);
    return strncasecmp(base, "mmproj", 6) == 0 && ends_with_ci(base, ".gguf");
}

/* quant stands as a word in name (see model_ref_pick_quant) */
static bool names_quant(const char *name, const char *quant)
{
    if (!quant || !*quant) return false;
    for (const char *at = strcasestr(name, quant); at; at = strcasestr(at + 1, quant)) {
        char before = at == name ? '-' : at[-1], after = at[strlen(quant)];
        if (!isalnum((unsigned char)before) && !isalnum((unsigned char)after) && after != '_')
            return true;
    }
    return false;
}

/* A projector's rank: lower is better (model_ref_pick_mmproj's order). */
static int mmproj_rank(const char *base, const char *quant)
{
    static const char *const pref[] = {"F16", "BF16", "F32", "Q8_0"};
    if (names_quant(base, quant)) return 0;
    for (int i = 0; i < 4; i++)
        if (names_quant(base, pref[i])) return 1 + i;
    return 5;
}

int model_ref_pick_mmproj(const char *const *files, size_t n, const char *model, const char *quant)
{
    size_t dir = (size_t)(model_ref_basename(model) - model);
    int best = -1, best_rank = 0;
    for (size_t i = 0; i < n; i++) {
        const char *f = files[i];
        size_t fdir = (size_t)(model_ref_basename(f) - f);
        if (!model_ref_is_mmproj(f) || fdir != dir || strncmp(f, model, dir) != 0 ||
            !valid_repo_file(f))
            continue;
        int rank = mmproj_rank(model_ref_basename(f), quant);
        size_t fl = strlen(f), bl = best < 0 ? 0 : strlen(files[best]);
        if (best < 0 || rank < best_rank ||
            (rank == best_rank && (fl < bl || (fl == bl && strcmp(f, files[best]) < 0)))) {
            best = (int)i;
            best_rank = rank;
        }
    }
    return best;
}

int model_ref_mmproj_local(const char *model, char *out, size_t len)
{
    const char *base = model_ref_basename(model);
    size_t stem;
    if (!ends_with_ci(base, ".gguf") || model_ref_is_mmproj(base)) return -EINVAL;
    if (!model_ref_split(base, NULL, NULL, &stem)) stem = strlen(base) - 5;
    if (stem == 0) return -EINVAL;
    int w = snprintf(out, len, "mmproj-%.*s.gguf", (int)stem, base);
    return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

static int parse_hf_file(const char *s, model_ref_t *out, char *err, size_t errlen)
{
    /* ORG/REPO/FILE[@REV][?mmproj=FILE] */
    char buf[MODEL_REF_REPO_MAX + 2 * MODEL_REF_FILE_MAX + 80];
    if (strlen(s) >= sizeof buf) goto bad;
    strcpy(buf, s);
    char *q = strchr(buf, '?');
    if (q) {
        *q = 0;
        const char *proj = q + 1;
        if (strncmp(proj, "mmproj=", 7) != 0) goto bad;
        proj += 7;
        if (!valid_repo_file(proj) || !ends_with_ci(proj, ".gguf")) goto bad;
        snprintf(out->mmproj, sizeof out->mmproj, "%s", proj);
    }
    char *at = strrchr(buf, '@');
    if (at) {
        *at = 0;
        const char *rev = at + 1;
        if (!*rev || strlen(rev) >= sizeof out->rev || strchr(rev, '/')) goto bad;
        for (const char *p = rev; *p; p++)
            if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') goto bad;
        strcpy(out->rev, rev);
    }
    char *s1 = strchr(buf, '/');
    if (!s1) goto bad;
    char *s2 = strchr(s1 + 1, '/');
    if (!s2) goto bad;
    if (!valid_repo_part(buf, (size_t)(s1 - buf)) ||
        !valid_repo_part(s1 + 1, (size_t)(s2 - s1 - 1)))
        goto bad;
    if (!valid_repo_file(s2 + 1) || !ends_with_ci(s2 + 1, ".gguf")) goto bad;
    snprintf(out->repo, sizeof out->repo, "%.*s", (int)(s2 - buf), buf);
    snprintf(out->file, sizeof out->file, "%s", s2 + 1);
    if (out->mmproj[0] && (strcmp(out->mmproj, out->file) == 0 || model_ref_is_mmproj(out->file) ||
                           model_ref_mmproj_local(out->file, buf, sizeof buf) != 0))
        goto bad;
    out->kind = MODEL_REF_HF_FILE;
    return 0;
bad:
    out->mmproj[0] = 0;
    snprintf(err, errlen,
             "model reference 'hf://%.200s': expected hf://ORG/REPO/FILE.gguf, "
             "hf://ORG/REPO/FILE.gguf@REVISION or, with its vision projector, "
             "hf://ORG/REPO/FILE.gguf?mmproj=PROJECTOR.gguf",
             s);
    return -EINVAL;
}

int model_ref_parse(const char *s, model_ref_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    strcpy(out->rev, "main");
    if (!s || !*s) {
        snprintf(err, errlen, "empty model reference");
        return -EINVAL;
    }
    if (strncmp(s, "hf://", 5) == 0) return parse_hf_file(s + 5, out, err, errlen);
    if (strncasecmp(s, "https://", 8) == 0 || strncasecmp(s, "http://", 7) == 0) {
        size_t n = strlen(s);
        const char *host = strstr(s, "://") + 3;
        bool ok = n < sizeof out->url && *host && *host != '/';
        for (size_t i = 0; ok && i < n; i++)
            if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f) ok = false;
        if (!ok) {
            snprintf(err, errlen, "model reference '%.200s': not a valid URL", s);
            return -EINVAL;
        }
        strcpy(out->url, s);
        /* the file name: the last path segment without query or fragment */
        const char *path = strchr(host, '/');
        char seg[MODEL_REF_FILE_MAX] = "";
        if (path) {
            size_t end = strcspn(path, "?#");
            const char *last = path;
            for (size_t i = 0; i < end; i++)
                if (path[i] == '/') last = path + i + 1;
            size_t sl = (size_t)(path + end - last);
            if (sl < sizeof seg) snprintf(seg, sizeof seg, "%.*s", (int)sl, last);
        }
        if (!seg[0] || !valid_repo_file(seg) || seg[0] == '.' || !ends_with_ci(seg, ".gguf")) {
            snprintf(err, errlen, "model reference '%.200s': the URL must name a .gguf file", s);
            return -EINVAL;
        }
        strcpy(out->file, seg);
        out->kind = MODEL_REF_URL;
        return 0;
    }
    if (s[0] == '/' || s[0] == '.' || s[0] == '~') {
        out->kind = MODEL_REF_PATH;
        return 0;
    }
    const known_model_t *k = known_model_find(s);
    if (k) {
        out->kind = MODEL_REF_CATALOG;
        out->known = k;
        snprintf(out->repo, sizeof out->repo, "%s", k->repo);
        snprintf(out->file, sizeof out->file, "%s", k->file);
        if (k->mmproj) snprintf(out->mmproj, sizeof out->mmproj, "%s", k->mmproj);
        return 0;
    }
    const char *slash = strchr(s, '/');
    const char *colon = strrchr(s, ':');
    if (slash && !strchr(slash + 1, '/') && !ends_with_ci(s, ".gguf") &&
        (!colon || colon > slash)) {
        /* ORG/REPO[:QUANT] */
        size_t rl = colon ? (size_t)(colon - s) : strlen(s);
        const char *quant = colon ? colon + 1 : "Q4_K_M";
        bool ok = valid_repo_part(s, (size_t)(slash - s)) &&
                  valid_repo_part(slash + 1, rl - (size_t)(slash - s) - 1) && *quant &&
                  strlen(quant) < sizeof out->quant;
        for (const char *p = quant; ok && *p; p++)
            if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.') ok = false;
        if (!ok) {
            snprintf(err, errlen,
                     "model reference '%.200s': expected ORG/REPO:QUANT (e.g. "
                     "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M)",
                     s);
            return -EINVAL;
        }
        snprintf(out->repo, sizeof out->repo, "%.*s", (int)rl, s);
        snprintf(out->quant, sizeof out->quant, "%s", quant);
        out->kind = MODEL_REF_HF_QUANT;
        return 0;
    }
    out->kind = (slash || ends_with_ci(s, ".gguf")) ? MODEL_REF_PATH : MODEL_REF_NAME;
    return 0;
}

bool model_ref_remote(const model_ref_t *r)
{
    return r->kind == MODEL_REF_CATALOG || r->kind == MODEL_REF_HF_FILE ||
           r->kind == MODEL_REF_HF_QUANT || r->kind == MODEL_REF_URL;
}

int model_ref_source(const model_ref_t *r, const char *file, char *out, size_t len)
{
    int w;
    if (r->kind == MODEL_REF_URL) {
        size_t n = strcspn(r->url, "?#"), dir = n;
        while (dir > 0 && r->url[dir - 1] != '/')
            dir--;
        if (file && strcmp(file, r->file) != 0) /* a split part next to the first */
            w = snprintf(out, len, "%.*s%s", (int)dir, r->url, model_ref_basename(file));
        else
            w = snprintf(out, len, "%.*s", (int)n, r->url);
    } else {
        bool main_rev = !r->rev[0] || strcmp(r->rev, "main") == 0;
        w = snprintf(out, len, "hf://%s/%s%s%s", r->repo, file ? file : r->file,
                     main_rev ? "" : "@", main_rev ? "" : r->rev);
    }
    return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

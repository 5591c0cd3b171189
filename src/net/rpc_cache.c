#include "rpc_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define FNV_PRIME 0x100000001b3ull
#define CHUNK (4u << 20)
#define INDEX_MAX (64u << 20)
#define INDEX_MAGIC "mesh-llm rpc-cache index 1\n"
#define TMP_PREFIX ".mesh-llm-tmp."

uint64_t rpc_cache_fnv1a64(const void *p, size_t n, uint64_t h)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* ---- which layer a tensor belongs to ---- */

int64_t rpc_cache_tensor_layer(const char *name)
{
    return gguf_tensor_layer(name);
}

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- cache directory ---- */

static int put(char *buf, size_t len, size_t *at, const char *s)
{
    size_t n = strlen(s);
    if (n >= len - *at) return -ENAMETOOLONG;
    memcpy(buf + *at, s, n + 1);
    *at += n;
    return 0;
}

static int slash(char *buf, size_t len, size_t *at)
{
    return *at > 0 && buf[*at - 1] == '/' ? 0 : put(buf, len, at, "/");
}

int rpc_cache_dir(char *buf, size_t len)
{
    if (!buf || len == 0) return -EINVAL;
    buf[0] = '\0';
    size_t at = 0;
    int rc;
    const char *lc = getenv("LLAMA_CACHE");
    if (lc) {
        if (!*lc) return -EINVAL;
        rc = put(buf, len, &at, lc);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME");
        const char *home = getenv("HOME");
        if (xdg) {
            if (!*xdg) return -EINVAL;
            rc = put(buf, len, &at, xdg);
        } else {
            if (!home) {
                struct passwd *pw = getpwuid(getuid());
                if (!pw || !pw->pw_dir) return -ENOENT;
                home = pw->pw_dir;
            }
            rc = put(buf, len, &at, home);
            if (!rc) rc = put(buf, len, &at, "/.cache/");
        }
        if (!rc) rc = slash(buf, len, &at);
        if (!rc) rc = put(buf, len, &at, "llama.cpp");
    }
    if (!rc) rc = slash(buf, len, &at);
    if (!rc) rc = put(buf, len, &at, "rpc/");
    if (rc) buf[0] = '\0';
    return rc;
}

/* ---- file helpers ---- */

static int mkdir_p(const char *dir)
{
    char p[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0) return -EINVAL;
    if (n >= sizeof p) return -ENAMETOOLONG;
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -errno;
        p[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0) return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int path_join(char *out, size_t len, const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    int n = snprintf(out, len, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", name);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static atomic_uint tmp_seq;

/* Create a unique temporary file in dir: its fd, path in out. */
static int tmp_create(const char *dir, char *out, size_t len)
{
    for (int tries = 0; tries < 100; tries++) {
        char name[64];
        snprintf(name, sizeof name, TMP_PREFIX "%ld.%u", (long)getpid(),
                 atomic_fetch_add(&tmp_seq, 1));
        int rc = path_join(out, len, dir, name);
        if (rc) return rc;
        int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) return fd;
        if (errno != EEXIST) return -errno;
    }
    return -EEXIST;
}

/* Remove temporary files left in dir by processes that no longer exist. */
static void tmp_sweep(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!starts(e->d_name, TMP_PREFIX)) continue;
        char *end;
        long pid = strtol(e->d_name + strlen(TMP_PREFIX), &end, 10);
        if (pid <= 0 || *end != '.' || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char p[PATH_MAX];
        if (!path_join(p, sizeof p, dir, e->d_name)) unlink(p);
    }
    closedir(d);
}

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int pread_all(int fd, void *p, size_t n, uint64_t off)
{
    uint8_t *b = p;
    while (n) {
        ssize_t r = pread(fd, b, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        if (r == 0) return -EIO; /* the file shrank under us */
        b += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* ---- the index: GGUF identity -> tensor hashes ---- */

typedef struct {
    char name[GGUF_NAME_MAX];
    uint64_t hash, offset, size;
} entry_t;

typedef struct {
    entry_t *v;
    size_t n, cap;
} entries_t;

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const entry_t *)a)->name, ((const entry_t *)b)->name);
}

static int entries_add(entries_t *e, const char *name, uint64_t hash, uint64_t off, uint64_t sz)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        entry_t *v = realloc(e->v, cap * sizeof *v);
        if (!v) return -ENOMEM;
        e->v = v;
        e->cap = cap;
    }
    entry_t *x = &e->v[e->n++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->hash = hash;
    x->offset = off;
    x->size = sz;
    return 0;
}

static const entry_t *entries_find(const entries_t *e, const char *name)
{
    if (!e->n) return NULL;
    entry_t key;
    snprintf(key.name, sizeof key.name, "%s", name);
    return bsearch(&key, e->v, e->n, sizeof *e->v, entry_cmp);
}

typedef struct {
    char real[PATH_MAX];
    uint64_t size, mtime_ns;
    char index_path[PATH_MAX];
} ident_t;

static uint64_t stat_mtime_ns(const struct stat *st)
{
    return (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
}

static int ident_make(ident_t *id, const char *path, const struct stat *st, const char *index_dir)
{
    if (!realpath(path, id->real)) return -errno;
    id->size = (uint64_t)st->st_size;
    id->mtime_ns = stat_mtime_ns(st);
    uint64_t h = rpc_cache_fnv1a64(id->real, strlen(id->real) + 1, RPC_CACHE_FNV_BASIS);
    h = rpc_cache_fnv1a64(&id->size, sizeof id->size, h);
    h = rpc_cache_fnv1a64(&id->mtime_ns, sizeof id->mtime_ns, h);
    char name[17];
    snprintf(name, sizeof name, "%016" PRIx64, h);
    return path_join(id->index_path, sizeof id->index_path, index_dir, name);
}

/* Parse a decimal number ending at the delimiter d; advances *p past it. */
static int num(const char **p, const char *end, char d, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    size_t i = 0;
    for (; s + i < end && s[i] >= '0' && s[i] <= '9'; i++) {
        if (i >= 20 || __builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(s[i] - '0'), &v))
            return -1;
    }
    if (i == 0 || s + i >= end || s[i] != d || (i > 1 && s[0] == '0')) return -1;
    *p = s + i + 1;
    *out = v;
    return 0;
}

static int hex16(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    if (end - s < 17 || s[16] != ' ') return -1;
    for (int i = 0; i < 16; i++) {
        int c = s[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *p = s + 17;
    *out = v;
    return 0;
}

/* Parse an index file image; any malformed byte makes the whole index invalid (-EINVAL). */
static int index_parse(const char *buf, size_t len, const ident_t *id, size_t max_entries,
                       entries_t *out)
{
    char head[PATH_MAX + 128];
    int hn =
        snprintf(head, sizeof head, INDEX_MAGIC "file %s\nsize %" PRIu64 "\nmtime_ns %" PRIu64 "\n",
                 id->real, id->size, id->mtime_ns);
    if (hn < 0 || (size_t)hn >= sizeof head || len < (size_t)hn || memcmp(buf, head, (size_t)hn))
        return -EINVAL;
    const char *p = buf + hn, *end = buf + len;
    while (p < end) {
        uint64_t hash, off, sz;
        if (end - p < 2 || p[0] != 't' || p[1] != ' ') return -EINVAL;
        p += 2;
        if (hex16(&p, end, &hash) || num(&p, end, ' ', &off) || num(&p, end, ' ', &sz))
            return -EINVAL;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl || nl == p || nl - p >= GGUF_NAME_MAX) return -EINVAL;
        char name[GGUF_NAME_MAX];
        memcpy(name, p, (size_t)(nl - p));
        name[nl - p] = '\0';
        for (const char *c = name; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) return -EINVAL;
        if (out->n >= max_entries) return -EINVAL;
        int rc = entries_add(out, name, hash, off, sz);
        if (rc) return rc;
        p = nl + 1;
    }
    qsort(out->v, out->n, sizeof *out->v, entry_cmp);
    for (size_t i = 1; i < out->n; i++)
        if (strcmp(out->v[i - 1].name, out->v[i].name) == 0) return -EINVAL;
    return 0;
}

/* Load the index for id; a missing, unreadable or invalid index is just empty. */
static void index_load(const ident_t *id, size_t max_entries, entries_t *out)
{
    out->n = 0;
    int fd = open(id->index_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (uint64_t)st.st_size <= INDEX_MAX && (buf = malloc((size_t)st.st_size)) != NULL &&
        pread_all(fd, buf, (size_t)st.st_size, 0) == 0) {
        if (index_parse(buf, (size_t)st.st_size, id, max_entries, out)) out->n = 0;
    }
    free(buf);
    close(fd);
}

static int index_save(const ident_t *id, const char *index_dir, const entries_t *e)
{
    char tmp[PATH_MAX];
    int fd = tmp_create(index_dir, tmp, sizeof tmp);
    if (fd < 0) return fd;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int rc = -errno;
        close(fd);
        unlink(tmp);
        return rc;
    }
    fprintf(f, INDEX_MAGIC "file %s\nsize %" PRIu64 "\nmtime_ns %" PRIu64 "\n", id->real, id->size,
            id->mtime_ns);
    for (size_t i = 0; i < e->n; i++)
        fprintf(f, "t %016" PRIx64 " %" PRIu64 " %" PRIu64 " %s\n", e->v[i].hash, e->v[i].offset,
                e->v[i].size, e->v[i].name);
    int rc = ferror(f) ? -EIO : 0;
    if (fclose(f) != 0 && !rc) rc = -errno;
    if (!rc && rename(tmp, id->index_path) != 0) rc = -errno;
    if (rc) unlink(tmp);
    return rc;
}

/* ---- seeding ---- */

/* Copy one tensor's bytes into a temporary file in dir while hashing them; on success the
 * temporary's path is in tmp and the hash in *hash. */
static int copy_hash(int src, const gguf_tensor_t *t, const char *dir, uint8_t *buf, char *tmp,
                     size_t tmplen, uint64_t *hash)
{
    int fd = tmp_create(dir, tmp, tmplen);
    if (fd < 0) return fd;
    uint64_t h = RPC_CACHE_FNV_BASIS, done = 0;
    int rc = 0;
    while (done < t->size && !rc) {
        size_t n = t->size - done < CHUNK ? (size_t)(t->size - done) : CHUNK;
        rc = pread_all(src, buf, n, t->offset + done);
        if (!rc) {
            h = rpc_cache_fnv1a64(buf, n, h);
            rc = write_all(fd, buf, n);
        }
        done += n;
    }
    if (close(fd) != 0 && !rc) rc = -errno;
    if (rc) {
        unlink(tmp);
        return rc;
    }
    *hash = h;
    return 0;
}

/* Is there a regular file of exactly size bytes at path? */
static int present(const char *path, uint64_t size)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == size;
}

static int hash_path(char *out, size_t len, const char *dir, uint64_t hash)
{
    char name[17];
    snprintf(name, sizeof name, "%016" PRIx64, hash);
    return path_join(out, len, dir, name);
}

/* Seed one tensor (known: what the index says about it, or NULL); its hash in *hash and what
 * was done in r. */
static int seed_one(int src, const gguf_tensor_t *t, const char *dir, uint8_t *buf,
                    const entry_t *known, uint64_t *hash, rpc_cache_result_t *r)
{
    char dst[PATH_MAX], tmp[PATH_MAX];
    int rc;
    if (known) {
        rc = hash_path(dst, sizeof dst, dir, known->hash);
        if (rc) return rc;
        if (present(dst, t->size)) {
            r->n_present++;
            r->bytes_present += t->size;
            *hash = known->hash;
            return 0;
        }
    }
    uint64_t h;
    rc = copy_hash(src, t, dir, buf, tmp, sizeof tmp, &h);
    if (rc) return rc;
    if (!known || known->hash != h) { /* not in the index (or the index was wrong) */
        r->n_hashed++;
        r->bytes_hashed += t->size;
    }
    rc = hash_path(dst, sizeof dst, dir, h);
    if (!rc && present(dst, t->size)) {
        unlink(tmp);
        r->n_present++;
        r->bytes_present += t->size;
    } else if (!rc) {
        if (rename(tmp, dst) != 0) {
            rc = -errno;
            unlink(tmp);
            return rc;
        }
        r->n_seeded++;
        r->bytes_seeded += t->size;
    } else {
        unlink(tmp);
        return rc;
    }
    *hash = h;
    return 0;
}

static int selected(const gguf_tensor_t *t, uint32_t first, uint32_t end, bool output, int tied)
{
    int64_t l = rpc_cache_tensor_layer(t->name);
    if (l >= 0) return (uint64_t)l >= first && (uint64_t)l < end;
    if (l == RPC_LAYER_OUTPUT) return output;
    /* tied embeddings: without output.weight llama.cpp loads token_embd a second time as the
     * output layer's tensor */
    return output && tied && strcmp(t->name, "token_embd.weight") == 0;
}

/* ---- the seeding threads: tensors are read, hashed and written by up to SEED_THREADS
 * threads at once, in file order, so one thread's hashing overlaps another's writing ---- */

#define SEED_THREADS 4

typedef struct {
    const gguf_tensor_t *t;
    const entry_t *known;
    int rc; /* 0 done, < 0 failed, 1 not run */
    uint64_t hash;
    rpc_cache_result_t r;
} item_t;

typedef struct {
    int src;
    const char *dir;
    item_t *items;
    size_t n;
    atomic_size_t next;
    atomic_int failed; /* after a failure no new tensor is started */
} pool_t;

static void *seed_thread(void *arg)
{
    pool_t *p = arg;
    uint8_t *buf = malloc(CHUNK);
    for (;;) {
        if (atomic_load(&p->failed)) break;
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n) break;
        item_t *it = &p->items[i];
        it->rc = buf ? seed_one(p->src, it->t, p->dir, buf, it->known, &it->hash, &it->r) : -ENOMEM;
        if (it->rc) atomic_store(&p->failed, 1);
    }
    free(buf);
    return NULL;
}

static void seed_items(pool_t *p)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = cpus > 1 ? (size_t)cpus : 1;
    if (nt > SEED_THREADS) nt = SEED_THREADS;
    if (nt > p->n) nt = p->n;
    pthread_t th[SEED_THREADS];
    size_t started = 0;
    for (size_t k = 1; k < nt; k++) {
        if (pthread_create(&th[started], NULL, seed_thread, p) != 0) break;
        started++;
    }
    seed_thread(p); /* this thread is one of them */
    for (size_t k = 0; k < started; k++)
        pthread_join(th[k], NULL);
}

static void result_add(rpc_cache_result_t *to, const rpc_cache_result_t *r)
{
    to->n_seeded += r->n_seeded;
    to->n_present += r->n_present;
    to->bytes_seeded += r->bytes_seeded;
    to->bytes_present += r->bytes_present;
    to->n_hashed += r->n_hashed;
    to->bytes_hashed += r->bytes_hashed;
}

int rpc_cache_seed_sync(const char *gguf_path, const char *cache_dir, uint32_t layer_first,
                        uint32_t layer_end, bool output, rpc_cache_result_t *r)
{
    memset(r, 0, sizeof *r);
    if (!gguf_path || !cache_dir || !*gguf_path || !*cache_dir) return -EINVAL;
    char index_dir[PATH_MAX];
    int rc = path_join(index_dir, sizeof index_dir, cache_dir, RPC_CACHE_INDEX_DIR);
    if (rc) return rc;
    if ((rc = mkdir_p(cache_dir)) || (rc = mkdir_p(index_dir))) return rc;
    int src = open(gguf_path, O_RDONLY | O_CLOEXEC);
    if (src < 0) return -errno;
    gguf_tensors_t tt = {0};
    entries_t known = {0}, found = {0};
    item_t *items = NULL;
    ident_t *id = malloc(sizeof *id);
    struct stat st, st2;
    if (!id) {
        rc = -ENOMEM;
        goto out;
    }
    if (fstat(src, &st) != 0) {
        rc = -errno;
        goto out;
    }
    if ((rc = ident_make(id, gguf_path, &st, index_dir))) goto out;
    if ((rc = gguf_tensors_read_fd(src, &tt))) goto out;
    int tied = 1;
    for (size_t i = 0; i < tt.n_tensors; i++)
        if (strcmp(tt.tensors[i].name, "output.weight") == 0) tied = 0;
    index_load(id, tt.n_tensors, &known);
    tmp_sweep(cache_dir);
    tmp_sweep(index_dir);
    /* the work: the chosen layers' tensors above the threshold, in file order */
    items = calloc(tt.n_tensors + 1, sizeof *items);
    if (!items) {
        rc = -ENOMEM;
        goto out;
    }
    pool_t pool = {.src = src, .dir = cache_dir, .items = items};
    for (size_t i = 0; i < tt.n_tensors; i++) {
        const gguf_tensor_t *t = &tt.tensors[i];
        if (!selected(t, layer_first, layer_end, output, tied)) continue;
        if (t->size <= RPC_CACHE_THRESHOLD) {
            r->n_skipped_small++;
            continue;
        }
        const entry_t *k = entries_find(&known, t->name);
        if (k && (k->offset != t->offset || k->size != t->size)) k = NULL;
        items[pool.n++] = (item_t){.t = t, .known = k, .rc = 1};
    }
    atomic_init(&pool.next, 0);
    atomic_init(&pool.failed, 0);
    seed_items(&pool);
    /* the new index: the seeded tensors' hashes; what the index knew about the others (and,
     * after a failure, about the tensors not seeded); the first failure is the result */
    int dirty = 0;
    size_t w = 0;
    for (size_t i = 0; i < tt.n_tensors; i++) {
        const gguf_tensor_t *t = &tt.tensors[i];
        const item_t *it = w < pool.n && items[w].t == t ? &items[w++] : NULL;
        const entry_t *k = entries_find(&known, t->name);
        if (k && (k->offset != t->offset || k->size != t->size)) k = NULL;
        int arc = 0;
        if (it && it->rc == 0) {
            result_add(r, &it->r);
            arc = entries_add(&found, t->name, it->hash, t->offset, t->size);
            if (!k || it->hash != k->hash) dirty = 1;
        } else {
            if (it && it->rc < 0 && !rc) rc = it->rc;
            if (it && it->rc == -ENOMEM) goto out;
            if (k) arc = entries_add(&found, t->name, k->hash, k->offset, k->size);
        }
        if (arc) {
            rc = arc;
            goto out;
        }
    }
    /* The index is only valid for the file as it was: if it changed while we read it, the
     * hashes may describe neither version. */
    if (fstat(src, &st2) != 0) {
        rc = rc ? rc : -errno;
        goto out;
    }
    if (st2.st_size != st.st_size || stat_mtime_ns(&st2) != stat_mtime_ns(&st)) {
        rc = -ESTALE;
        goto out;
    }
    if (dirty || found.n != known.n) {
        int save_rc = index_save(id, index_dir, &found);
        rc = rc ? rc : save_rc;
    }
out:
    free(items);
    free(known.v);
    free(found.v);
    free(id);
    gguf_tensors_free(&tt);
    close(src);
    return rc;
}

typedef struct {
    uv_work_t req;
    char *gguf_path, *cache_dir;
    uint32_t first, end;
    bool output;
    void (*cb)(void *data, int status, const rpc_cache_result_t *r);
    void *data;
    int status;
    rpc_cache_result_t r;
} job_t;

static void job_work(uv_work_t *req)
{
    job_t *j = req->data;
    j->status = rpc_cache_seed_sync(j->gguf_path, j->cache_dir, j->first, j->end, j->output, &j->r);
}

static void job_done(uv_work_t *req, int status)
{
    job_t *j = req->data;
    if (status == UV_ECANCELED) j->status = -ECANCELED;
    j->cb(j->data, j->status, &j->r);
    free(j->gguf_path);
    free(j->cache_dir);
    free(j);
}

int rpc_cache_seed(uv_loop_t *loop, const char *gguf_path, const char *cache_dir,
                   uint32_t layer_first, uint32_t layer_end, bool output,
                   void (*cb)(void *data, int status, const rpc_cache_result_t *r), void *data)
{
    if (!loop || !gguf_path || !cache_dir || !cb || !*gguf_path || !*cache_dir) return -EINVAL;
    job_t *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    j->gguf_path = strdup(gguf_path);
    j->cache_dir = strdup(cache_dir);
    if (!j->gguf_path || !j->cache_dir) {
        free(j->gguf_path);
        free(j->cache_dir);
        free(j);
        return -ENOMEM;
    }
    j->first = layer_first;
    j->end = layer_end;
    j->output = output;
    j->cb = cb;
    j->data = data;
    j->req.data = j;
    int rc = uv_queue_work(loop, &j->req, job_work, job_done);
    if (rc) {
        free(j->gguf_path);
        free(j->cache_dir);
        free(j);
        return rc; /* libuv errors are negative errnos on Unix */
    }
    return 0;
}

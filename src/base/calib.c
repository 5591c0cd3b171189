/* calib — see calib.h. */
#include "calib.h"
#include "platform.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef float v4f __attribute__((vector_size(16)));

typedef struct calib_run calib_run_t;

typedef struct {
    calib_run_t *run;
    unsigned tid;
    float sink;
} calib_thread_t;

struct calib_run {
    const float *w, *x;
    unsigned threads;
    pthread_barrier_t barrier;
    pthread_mutex_t mu; /* the start gate: every thread starts, or none computes */
    pthread_cond_t cv;
    int gate; /* 0 wait, 1 go, -1 abort */
    bool stop;
    uint32_t passes;
    double t0, deadline;
    calib_thread_t th[CALIB_MAX_THREADS];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

unsigned calib_threads(void)
{
    const char *e = getenv("LLAMA_ARG_THREADS");
    if (e && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (*end == '\0' && v >= 1 && v <= CALIB_MAX_THREADS) return (unsigned)v;
    }
    int n = (int)plat_cpus() / 2;
    return n < 1 ? 1 : n > CALIB_MAX_THREADS ? CALIB_MAX_THREADS : (unsigned)n;
}

/* y[r] = Σ w[r][k] x[k] for rows [r0, r1): four vector accumulators per row */
static float gemv_rows(const float *w, const float *x, unsigned r0, unsigned r1)
{
    float acc = 0;
    for (unsigned r = r0; r < r1; r++) {
        const v4f *row = (const v4f *)(const void *)(w + (size_t)r * CALIB_COLS);
        const v4f *xv = (const v4f *)(const void *)x;
        v4f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (unsigned k = 0; k < CALIB_COLS / 4; k += 4) {
            a0 += row[k] * xv[k];
            a1 += row[k + 1] * xv[k + 1];
            a2 += row[k + 2] * xv[k + 2];
            a3 += row[k + 3] * xv[k + 3];
        }
        v4f s = (a0 + a1) + (a2 + a3);
        acc += s[0] + s[1] + s[2] + s[3];
    }
    return acc;
}

static void *calib_main(void *arg)
{
    calib_thread_t *t = arg;
    calib_run_t *run = t->run;
    unsigned r0 = (unsigned)((uint64_t)CALIB_ROWS * t->tid / run->threads);
    unsigned r1 = (unsigned)((uint64_t)CALIB_ROWS * (t->tid + 1) / run->threads);
    bool warm = true;
    pthread_mutex_lock(&run->mu);
    while (run->gate == 0)
        pthread_cond_wait(&run->cv, &run->mu);
    int gate = run->gate;
    pthread_mutex_unlock(&run->mu);
    if (gate < 0) return NULL;
    for (;;) {
        t->sink += gemv_rows(run->w, run->x, r0, r1);
        pthread_barrier_wait(&run->barrier);
        if (t->tid == 0) {
            double now = now_ms();
            if (warm) {
                run->t0 = now; /* the warm-up pass (page faults, caches) is not timed */
                run->deadline += now;
            } else {
                run->passes++;
                run->stop = now >= run->deadline || run->passes >= CALIB_MAX_PASSES;
            }
        }
        pthread_barrier_wait(&run->barrier);
        warm = false;
        if (run->stop) break;
    }
    return NULL;
}

int calib_gemv(unsigned threads, unsigned budget_ms, calib_result_t *out)
{
    if (!out) return -EINVAL;
    memset(out, 0, sizeof *out);
    if (threads == 0 || threads > CALIB_MAX_THREADS || budget_ms == 0) return -EINVAL;
    calib_run_t *run = calloc(1, sizeof *run);
    size_t wbytes = (size_t)CALIB_ROWS * CALIB_COLS * sizeof(float);
    float *w = aligned_alloc(64, wbytes), *x = aligned_alloc(64, CALIB_COLS * sizeof(float));
    if (!run || !w || !x) {
        free(run);
        free(w);
        free(x);
        return -ENOMEM;
    }
    for (size_t i = 0; i < (size_t)CALIB_ROWS * CALIB_COLS; i++)
        w[i] = (float)((i * 2654435761u) >> 24) / 256.0f - 0.5f;
    for (size_t k = 0; k < CALIB_COLS; k++)
        x[k] = (float)(k % 7) / 7.0f;
    run->w = w;
    run->x = x;
    run->threads = threads;
    run->deadline = budget_ms;
    pthread_barrier_init(&run->barrier, NULL, threads);
    pthread_mutex_init(&run->mu, NULL);
    pthread_cond_init(&run->cv, NULL);
    pthread_t tids[CALIB_MAX_THREADS];
    unsigned started = 0;
    int rc = 0;
    for (unsigned i = 1; i < threads; i++) {
        run->th[i] = (calib_thread_t){.run = run, .tid = i};
        if (pthread_create(&tids[i], NULL, calib_main, &run->th[i]) != 0) {
            rc = -EAGAIN;
            break;
        }
        started++;
    }
    pthread_mutex_lock(&run->mu);
    run->gate = rc == 0 ? 1 : -1;
    pthread_cond_broadcast(&run->cv);
    pthread_mutex_unlock(&run->mu);
    if (rc == 0) {
        run->th[0] = (calib_thread_t){.run = run, .tid = 0};
        calib_main(&run->th[0]);
    }
    for (unsigned i = 1; i <= started; i++)
        pthread_join(tids[i], NULL);
    double elapsed = now_ms() - run->t0;
    pthread_barrier_destroy(&run->barrier);
    pthread_mutex_destroy(&run->mu);
    pthread_cond_destroy(&run->cv);
    if (rc == 0 && run->passes > 0 && elapsed > 0) {
        double flops = 2.0 * CALIB_ROWS * CALIB_COLS * run->passes;
        double mflops = flops / (elapsed / 1e3) / 1e6;
        out->mflops = mflops < 1 ? 1 : mflops > 4e9 ? 4000000000u : (uint32_t)mflops;
        out->threads = threads;
        out->passes = run->passes;
        out->elapsed_ms = elapsed;
    }
    free(w);
    free(x);
    free(run);
    return rc;
}

/* calib — a short measurement of this machine's compute speed for the work a decoded token does
 * in each layer: an F32 matrix-vector product over a matrix larger than the caches (weights
 * streamed from memory, as in llama.cpp's decode of one token), split by rows over the threads
 * llama.cpp would use, one barrier per product (like ggml's per-operation sync). The result is
 * the total work over the wall time of the whole run (MFLOP/s, 2 flops per weight), so a node
 * that gets a share of a core (taskset, a busy neighbour, a cgroup quota) measures that share;
 * a median of short passes would hide it.
 *
 * Blocking (it runs threads and reads the clock): call it off the event loop (node/speed.h runs
 * it on the libuv thread pool). Bounded: at most budget_ms of products plus one warm-up pass,
 * and at most CALIB_MAX_PASSES products. */
#ifndef MESH_CALIB_H
#define MESH_CALIB_H

#include <stdint.h>

#define CALIB_ROWS 2048
#define CALIB_COLS 4096 /* 32 MiB of F32 weights */
#define CALIB_MAX_THREADS 64
#define CALIB_MAX_PASSES 100000
#define CALIB_BUDGET_MS 300

typedef struct {
    uint32_t mflops;  /* 0 when it could not run */
    unsigned threads; /* threads used */
    uint32_t passes;  /* matrix-vector products timed */
    double elapsed_ms;
} calib_result_t;

/* The threads llama.cpp's compute would use on this node: LLAMA_ARG_THREADS when set to 1..64
 * (the node's llama-server children read it), else half the CPUs this process may run on (at
 * least 1; ggml-rpc-server's default is half the hardware threads). */
unsigned calib_threads(void);

/* Measure with `threads` threads for about budget_ms. 0, -EINVAL (threads 0 or above
 * CALIB_MAX_THREADS, budget 0), -ENOMEM, -EAGAIN (a thread could not start). */
int calib_gemv(unsigned threads, unsigned budget_ms, calib_result_t *out);

#endif

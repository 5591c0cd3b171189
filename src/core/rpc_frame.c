/* rpc_frame — see rpc_frame.h. */
#include "rpc_frame.h"

#include <string.h>

/* ggml-rpc.cpp enum rpc_cmd (the pinned llama.cpp) and the commands rpc_serve_client answers
 * without a reply. */
enum {
    CMD_FREE_BUFFER = 4,
    CMD_BUFFER_CLEAR = 5,
    CMD_SET_TENSOR = 6,
    CMD_GRAPH_COMPUTE = 10,
    CMD_INIT_TENSOR = 12,
    CMD_GRAPH_RECOMPUTE = 16,
    CMD_MEMSET_TENSOR = 17,
};

bool rpc_frame_cmd_replies(uint8_t cmd)
{
    switch (cmd) {
    case CMD_FREE_BUFFER:
    case CMD_BUFFER_CLEAR:
    case CMD_SET_TENSOR:
    case CMD_GRAPH_COMPUTE:
    case CMD_INIT_TENSOR:
    case CMD_GRAPH_RECOMPUTE:
    case CMD_MEMSET_TENSOR:
        return false;
    default:
        return true;
    }
}

bool rpc_frame_cmd_computes(uint8_t cmd)
{
    return cmd == CMD_GRAPH_COMPUTE || cmd == CMD_GRAPH_RECOMPUTE;
}

void rpc_frame_init(rpc_frame_t *f, rpc_frame_kind_t kind)
{
    memset(f, 0, sizeof *f);
    f->kind = kind;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

size_t rpc_frame_feed(rpc_frame_t *f, const uint8_t *p, size_t n)
{
    size_t hdr_need = f->kind == RPC_FRAME_REQUESTS ? 9 : 8;
    size_t release = 0; /* of f->held + i: bytes through the last release point */
    size_t held0 = f->held;
    size_t i = 0;
    while (i < n) {
        if (!f->in_payload) {
            size_t take = hdr_need - f->hdr_len;
            if (take > n - i) take = n - i;
            memcpy(f->hdr + f->hdr_len, p + i, take);
            f->hdr_len = (uint8_t)(f->hdr_len + take);
            i += take;
            if (f->hdr_len < hdr_need) break;
            bool req = f->kind == RPC_FRAME_REQUESTS;
            f->size = le64(f->hdr + (req ? 1 : 0));
            f->left = f->size;
            f->reply = req ? rpc_frame_cmd_replies(f->hdr[0]) : true;
            f->in_payload = true;
        }
        size_t take = f->left < n - i ? (size_t)f->left : n - i;
        i += take;
        f->left -= take;
        if (f->left) break;
        /* a message ends here */
        if (f->kind == RPC_FRAME_REQUESTS && rpc_frame_cmd_computes(f->hdr[0])) f->computes++;
        f->in_payload = false;
        f->hdr_len = 0;
        if (f->reply || f->size > RPC_FRAME_HOLD_MAX) release = held0 + i; /* big ones streamed */
    }
    f->held = held0 + n;
    /* a large message streams as it comes; so does anything past the cap */
    bool big = f->in_payload && f->size > RPC_FRAME_HOLD_MAX;
    if (big || f->held - release > RPC_FRAME_HOLD_MAX) release = f->held;
    f->held -= release;
    return release;
}

size_t rpc_frame_release_all(rpc_frame_t *f)
{
    size_t n = f->held;
    f->held = 0;
    return n;
}

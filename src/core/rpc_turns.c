/* rpc_turns — see rpc_turns.h. */
#include "rpc_turns.h"

bool rpc_turns_note(rpc_turns_t *t, rpc_dir_t d, size_t n)
{
    if (!t || n == 0 || (d != RPC_DIR_TO_WORKER && d != RPC_DIR_TO_HOST)) return false;
    bool turn = d == RPC_DIR_TO_HOST && t->last == RPC_DIR_TO_WORKER;
    t->last = d;
    return turn;
}

#include "sendbuf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_MIN 16384
#define CHUNK_MAX 65536

struct sendbuf_chunk {
    sendbuf_chunk_t *next;
    size_t len, cap;
    uint8_t data[];
};

int sendbuf_append(sendbuf_t *b, const void *p, size_t n)
{
    const uint8_t *src = p;
    bool was_idle = b->unsent == 0;
    sendbuf_chunk_t *first = NULL;
    size_t first_off = 0;
    int rc = 0;
    while (n > 0) {
        sendbuf_chunk_t *t = b->tail;
        if (!t || t->len == t->cap) {
            size_t cap = n > CHUNK_MIN ? (n < CHUNK_MAX ? n : CHUNK_MAX) : CHUNK_MIN;
            t = malloc(sizeof *t + cap);
            if (!t) {
                rc = -ENOMEM;
                break;
            }
            t->next = NULL;
            t->len = 0;
            t->cap = cap;
            if (b->tail)
                b->tail->next = t;
            else
                b->head = t;
            b->tail = t;
        }
        if (!first) {
            first = t;
            first_off = t->len;
        }
        size_t take = t->cap - t->len < n ? t->cap - t->len : n;
        memcpy(t->data + t->len, src, take);
        t->len += take;
        src += take;
        n -= take;
        b->unacked += take;
        b->unsent += take;
    }
    if (was_idle && first) {
        b->cur = first;
        b->cur_off = first_off;
    }
    return rc;
}

size_t sendbuf_peek(const sendbuf_t *b, sendbuf_vec_t *v, size_t max)
{
    size_t nv = 0, off = b->cur_off, left = b->unsent;
    for (const sendbuf_chunk_t *k = b->cur; k && left > 0 && nv < max; k = k->next, off = 0) {
        size_t l = k->len - off < left ? k->len - off : left;
        if (l == 0) continue;
        v[nv].base = k->data + off;
        v[nv].len = l;
        nv++;
        left -= l;
    }
    return nv;
}

void sendbuf_sent(sendbuf_t *b, size_t n)
{
    b->unsent -= n < b->unsent ? n : b->unsent;
    while (n > 0 && b->cur) {
        size_t avail = b->cur->len - b->cur_off;
        size_t take = avail < n ? avail : n;
        b->cur_off += take;
        n -= take;
        if (b->cur_off == b->cur->len && b->cur->next) {
            b->cur = b->cur->next;
            b->cur_off = 0;
        } else if (take == 0) {
            break;
        }
    }
}

void sendbuf_acked(sendbuf_t *b, size_t n)
{
    b->unacked -= n < b->unacked ? n : b->unacked;
    while (n > 0 && b->head) {
        sendbuf_chunk_t *h = b->head;
        size_t avail = h->len - b->head_acked;
        size_t take = avail < n ? avail : n;
        b->head_acked += take;
        n -= take;
        /* a chunk goes once acknowledged and left behind by the writer */
        if (b->head_acked == h->len && (h->next || (b->cur == h && b->cur_off == h->len))) {
            if (b->cur == h) {
                b->cur = h->next;
                b->cur_off = 0;
            }
            b->head = h->next;
            if (!b->head) b->tail = NULL;
            b->head_acked = 0;
            free(h);
        } else if (take == 0) {
            break;
        }
    }
}

void sendbuf_free(sendbuf_t *b)
{
    for (sendbuf_chunk_t *k = b->head; k;) {
        sendbuf_chunk_t *n = k->next;
        free(k);
        k = n;
    }
    memset(b, 0, sizeof *b);
}

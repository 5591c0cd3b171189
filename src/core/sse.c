/* sse — see sse.h. */
#include "sse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void sse_init(sse_parser_t *p, size_t max_event)
{
    memset(p, 0, sizeof *p);
    p->max_event = max_event ? max_event : SSE_DEFAULT_MAX_EVENT;
}

void sse_free(sse_parser_t *p)
{
    free(p->line);
    free(p->data);
    size_t max = p->max_event;
    memset(p, 0, sizeof *p);
    p->max_event = max;
}

size_t sse_pending(const sse_parser_t *p)
{
    return p->line_len + p->data_len + (p->has_data || p->skip_event || p->event[0]);
}

static int grow(char **b, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 256;
    while (nc < need)
        nc *= 2;
    char *nb = realloc(*b, nc);
    if (!nb) return -ENOMEM;
    *b = nb;
    *cap = nc;
    return 0;
}

static void end_event(sse_parser_t *p, sse_event_fn cb, void *ud)
{
    if (p->skip_event) {
        p->dropped++;
    } else if (p->has_data) {
        p->events++;
        if (cb) cb(ud, p->event, p->data ? p->data : "", p->data_len);
    }
    p->data_len = 0;
    if (p->data) p->data[0] = '\0';
    p->event[0] = '\0';
    p->has_data = p->skip_event = false;
}

/* One complete line (without its terminator). */
static int do_line(sse_parser_t *p, sse_event_fn cb, void *ud)
{
    const char *l = p->line ? p->line : "";
    size_t n = p->line_len;
    p->line_len = 0;
    if (n == 0) {
        end_event(p, cb, ud);
        return 0;
    }
    if (l[0] == ':' || p->skip_event) return 0;
    const char *colon = memchr(l, ':', n);
    size_t fl = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vl = (size_t)(l + n - v);
    if (vl && *v == ' ') {
        v++;
        vl--;
    }
    if (fl == 4 && memcmp(l, "data", 4) == 0) {
        size_t need = p->data_len + (p->has_data ? 1 : 0) + vl;
        if (need > p->max_event) {
            p->skip_event = true;
            return 0;
        }
        if (grow(&p->data, &p->data_cap, need + 1)) return -ENOMEM;
        if (p->has_data) p->data[p->data_len++] = '\n';
        memcpy(p->data + p->data_len, v, vl);
        p->data_len += vl;
        p->data[p->data_len] = '\0';
        p->has_data = true;
    } else if (fl == 5 && memcmp(l, "event", 5) == 0) {
        size_t k = vl < sizeof p->event - 1 ? vl : sizeof p->event - 1;
        memcpy(p->event, v, k);
        p->event[k] = '\0';
    }
    return 0;
}

int sse_feed(sse_parser_t *p, const char *buf, size_t n, sse_event_fn cb, void *ud)
{
    size_t i = 0;
    while (i < n) {
        char c = buf[i];
        if (p->after_cr) {
            p->after_cr = false;
            if (c == '\n') {
                i++;
                continue;
            }
        }
        if (c == '\r' || c == '\n') {
            p->after_cr = c == '\r';
            i++;
            if (p->skip_line) {
                p->skip_line = false;
                p->line_len = 0;
                continue;
            }
            int rc = do_line(p, cb, ud);
            if (rc) {
                sse_free(p);
                return rc;
            }
            continue;
        }
        /* a run of line bytes */
        size_t j = i;
        while (j < n && buf[j] != '\r' && buf[j] != '\n')
            j++;
        size_t run = j - i;
        if (!p->skip_line) {
            if (p->line_len + run > p->max_event + 16) {
                /* a line no event could hold: drop the event it belongs to */
                p->skip_line = true;
                p->skip_event = true;
                p->line_len = 0;
            } else {
                if (grow(&p->line, &p->line_cap, p->line_len + run + 1)) {
                    sse_free(p);
                    return -ENOMEM;
                }
                memcpy(p->line + p->line_len, buf + i, run);
                p->line_len += run;
            }
        }
        i = j;
    }
    return 0;
}

/* sse — incremental parser of a text/event-stream body (pure, bounded).
 *
 * Bytes arrive in pieces of any size; each complete event (its lines ended by a blank line) is
 * handed to the callback with its "event" name (empty when none) and its data: the values of
 * its "data:" fields joined by "\n" (one leading space after the colon removed), as the WHATWG
 * EventSource parser does. Lines end with LF, CRLF or CR (also split across pieces). Comment
 * lines (":...") and other fields (id, retry) are ignored; an event without data is not
 * dispatched. Memory is bounded: an event whose data or a line longer than max_event bytes is
 * dropped whole (counted in `dropped`), and the parser resynchronises at the next blank line.
 * Bytes that do not end an event are held (at most max_event + a line) until more arrive. */
#ifndef MESH_SSE_H
#define MESH_SSE_H

#include <stdbool.h>
#include <stddef.h>

#define SSE_DEFAULT_MAX_EVENT (1u << 20)

typedef void (*sse_event_fn)(void *ud, const char *event, const char *data, size_t len);

typedef struct {
    char *line; /* the current, unfinished line */
    size_t line_len, line_cap;
    char *data; /* the data of the current event */
    size_t data_len, data_cap;
    char event[64];
    size_t max_event;
    bool has_data;   /* a data field was seen in the current event */
    bool skip_event; /* the current event overflowed: drop it at its blank line */
    bool skip_line;  /* the current line overflowed: ignore it up to its end */
    bool after_cr;   /* the previous byte was CR: a following LF belongs to it */
    size_t events;   /* dispatched */
    size_t dropped;  /* events dropped for size */
} sse_parser_t;

/* max_event 0 means SSE_DEFAULT_MAX_EVENT. Allocates nothing yet. */
void sse_init(sse_parser_t *p, size_t max_event);
/* Parse n bytes; cb (may be NULL) runs for each complete event, in order. Returns 0, or
 * -ENOMEM (the parser is then reset to an empty state; the event in progress is lost). */
int sse_feed(sse_parser_t *p, const char *buf, size_t n, sse_event_fn cb, void *ud);
/* Bytes held for the event in progress (0: at an event boundary). */
size_t sse_pending(const sse_parser_t *p);
void sse_free(sse_parser_t *p);

#endif

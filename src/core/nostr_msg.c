/* NIP-01 relay messages: strict parsing of what relays send, building what clients send. */
#include "nostr_msg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nostr_msg_free(nostr_msg_t *msg)
{
    if (msg->type == NOSTR_MSG_EVENT) nostr_event_free(&msg->event);
    msg->type = NOSTR_MSG_INVALID;
}

static bool copy_str(const json_t *j, char *out, size_t cap, bool truncate)
{
    if (!json_is_string(j)) return false;
    size_t n = json_string_length(j);
    if (n >= cap) {
        if (!truncate) return false;
        n = cap - 1;
    }
    memcpy(out, json_string_value(j), n);
    out[n] = 0;
    return strlen(out) == n || truncate;
}

static nostr_msg_type_t invalid(nostr_msg_t *msg, const char *why)
{
    snprintf(msg->message, sizeof msg->message, "%s", why);
    msg->type = NOSTR_MSG_INVALID;
    return NOSTR_MSG_INVALID;
}

nostr_msg_type_t nostr_msg_parse(const char *data, size_t len, nostr_msg_t *msg)
{
    memset(msg, 0, sizeof *msg);
    if (len > NOSTR_MSG_MAX) return invalid(msg, "message over the size cap");
    json_error_t je;
    json_t *a = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    if (!a) return invalid(msg, "not JSON");
    nostr_msg_type_t t = NOSTR_MSG_INVALID;
    const char *why = "not a NIP-01 relay message";
    const char *type = json_is_array(a) ? json_string_value(json_array_get(a, 0)) : NULL;
    size_t n = json_is_array(a) ? json_array_size(a) : 0;
    if (!type) goto out;
    if (strcmp(type, "EVENT") == 0 && n == 3) {
        if (!copy_str(json_array_get(a, 1), msg->sub_id, sizeof msg->sub_id, false)) goto out;
        char err[160];
        if (nostr_event_from_json(json_array_get(a, 2), &msg->event, err, sizeof err) != 0) {
            snprintf(msg->message, sizeof msg->message, "bad event: %s", err);
            why = NULL;
            goto out;
        }
        t = NOSTR_MSG_EVENT;
    } else if (strcmp(type, "EOSE") == 0 && n == 2) {
        if (copy_str(json_array_get(a, 1), msg->sub_id, sizeof msg->sub_id, false))
            t = NOSTR_MSG_EOSE;
    } else if (strcmp(type, "OK") == 0 && n == 4) {
        json_t *id = json_array_get(a, 1), *ok = json_array_get(a, 2);
        if (json_is_string(id) && json_string_length(id) == 64 && json_is_boolean(ok) &&
            copy_str(id, msg->event_id, sizeof msg->event_id, false) &&
            copy_str(json_array_get(a, 3), msg->message, sizeof msg->message, true)) {
            msg->ok = json_is_true(ok);
            t = NOSTR_MSG_OK;
        }
    } else if (strcmp(type, "NOTICE") == 0 && n == 2) {
        if (copy_str(json_array_get(a, 1), msg->message, sizeof msg->message, true))
            t = NOSTR_MSG_NOTICE;
    } else if (strcmp(type, "CLOSED") == 0 && n == 3) {
        if (copy_str(json_array_get(a, 1), msg->sub_id, sizeof msg->sub_id, false) &&
            copy_str(json_array_get(a, 2), msg->message, sizeof msg->message, true))
            t = NOSTR_MSG_CLOSED;
    }
out:
    json_decref(a);
    if (t == NOSTR_MSG_INVALID) {
        if (why) invalid(msg, why);
        msg->type = NOSTR_MSG_INVALID;
        return NOSTR_MSG_INVALID;
    }
    msg->type = t;
    return t;
}

static char *dump_new(json_t *a)
{
    if (!a) return NULL;
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

char *nostr_msg_event(const nostr_event_t *ev)
{
    json_t *e = nostr_event_to_json(ev);
    return e ? dump_new(json_pack("[s,o]", "EVENT", e)) : NULL;
}

static json_t *str_array(const char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

char *nostr_msg_req(const char *sub_id, const nostr_filter_t *f)
{
    if (!sub_id || strlen(sub_id) == 0 || strlen(sub_id) > NOSTR_SUBID_MAX) return NULL;
    json_t *flt = json_object();
    if (!flt) return NULL;
    if (f->n_kinds) {
        json_t *k = json_array();
        for (size_t i = 0; k && i < f->n_kinds && i < NOSTR_FILTER_MAX_VALS; i++)
            json_array_append_new(k, json_integer(f->kinds[i]));
        json_object_set_new(flt, "kinds", k);
    }
    if (f->n_t) json_object_set_new(flt, "#t", str_array(f->t_tags, f->n_t));
    if (f->n_d) json_object_set_new(flt, "#d", str_array(f->d_tags, f->n_d));
    if (f->since > 0) json_object_set_new(flt, "since", json_integer(f->since));
    if (f->limit > 0) json_object_set_new(flt, "limit", json_integer(f->limit));
    return dump_new(json_pack("[s,s,o]", "REQ", sub_id, flt));
}

char *nostr_msg_close(const char *sub_id)
{
    if (!sub_id || strlen(sub_id) > NOSTR_SUBID_MAX) return NULL;
    return dump_new(json_pack("[s,s]", "CLOSE", sub_id));
}

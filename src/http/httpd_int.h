/* Internal to the HTTP server's files (httpd.c, httpd_listen.c, httpd_respond.c). */
#ifndef MESH_HTTPD_INT_H
#define MESH_HTTPD_INT_H

#include "httpd.h"

/* httpd_listen.c: the listening socket, accepting, out-of-descriptor handling. */
int httpd_listen_open(httpd_t *s, const char *host, int port);
void httpd_listen_close(httpd_t *s);

/* httpd_respond.c: apply the web guard (httpd_guard.h) to a dispatched request; true when it
 * answered (preflight, 403, 415). Sets req->cors_origin for an allowed origin. */
bool httpd_guard_answer(httpd_req_t *req);

#endif

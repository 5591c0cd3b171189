/* console — the web console at GET / on the console port: one page (index.html, console.css,
 * console.js from src/app/console/), compiled into the binary; no network at run time. It is a
 * thin client of /api/events (falling back to polling /api/status), /api/join and the chat
 * endpoint. */
#ifndef MESH_CONSOLE_H
#define MESH_CONSOLE_H

#include <stdbool.h>

#include "httpd.h"

/* Answers req and returns true when it is for one of the console's files. */
bool console_handle(httpd_req_t *req);

#endif

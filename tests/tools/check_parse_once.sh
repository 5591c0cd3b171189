#!/bin/sh
# Parse once (issue 30 S15): an inference request's body is parsed by core/request.c alone
# (request_parse, called through http/meshstat.c:meshstat_parse_body, counted in
# mesh_llm_request_parses_total); every stage after reads the typed facts in httpd_req_t.rq.
# Every other JSON parse in src/ (json_load*) is listed below with how many there are in its
# file and what it reads: a parse in a file not listed, or one more in a listed file, fails.
# Prints each mismatch; exit 1 if any.
set -eu
src="${1:-$(dirname "$0")/../../src}"
allowed='
core/request.c 1 the one parse of an inference request body (request_parse)
core/ollama.c 1 Ollama API bodies (translated once into the OpenAI body, parsed again by request_parse), the OpenAI answers translated back
core/resume.c 3 resume_build: the failover rewrite of the body (only when a stream broke); resume_track_event, resume_splice_event: SSE events of the answer
core/metrics.c 1 usage and timings in the tail of an answer
core/wire.c 1 mesh wire frames
core/nostr_msg.c 1 Nostr relay messages
core/listing.c 1 Nostr listing content
node/models.c 1 llama-server timings in the tail of an answer
node/models_api.c 3 the management API body (/api/v1/models, not inference); stored stats and usage JSON
node/model_fetch.c 1 the model hub API answer
node/admission_keys.c 1 the API keys file
app/api_mgmt_join.c 1 the management API body (POST /api/join, not inference)
app/api_mgmt_assign.c 1 the management API body (POST /api/assign, /api/unassign; not inference)
app/cli_status.c 1 the /api/status answer read by the CLI
base/identity.c 1 the identity file
'
bad=0
found=$(cd "$src" && grep -c 'json_load[a-z_]*(' */*.c */*.h | grep -v ':0$' | tr ':' ' ')
echo "$found" | { rc=0; while read -r f n; do
  [ -n "$f" ] || continue
  want=$(echo "$allowed" | awk -v f="$f" '$1 == f { print $2 }')
  if [ -z "$want" ]; then
    echo "src/$f: $n JSON parse(s) not in the allow-list: an inference body is parsed once," \
      "in core/request.c (read httpd_req_t.rq / meshstat_parse_body), or list it here with why"
    rc=1
  elif [ "$n" != "$want" ]; then
    echo "src/$f: $n JSON parses, the allow-list says $want: a new parse of a request body?" \
      "(read httpd_req_t.rq), or update the list with why"
    rc=1
  fi
done; exit $rc; } || bad=1
echo "$allowed" | { rc=0; while read -r f n rest; do
  [ -n "$f" ] || continue
  echo "$found" | awk -v f="$f" '$1 == f { ok = 1 } END { exit !ok }' ||
    { echo "src/$f: listed but parses no JSON any more: drop it from the list"; rc=1; }
done; exit $rc; } || bad=1
exit $bad

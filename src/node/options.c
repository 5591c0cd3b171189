/* options — see options.h. The table is the single source: keep --help, the config keys and
 * docs/cli.md in it (docs/cli.md is regenerated with `mesh-llm --help-markdown`). */
#include "options.h"

#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "admit.h"
#include "demand.h"
#include "httpd.h"
#include "promote.h"
#include "rebalance.h"
#include "route_table.h"
#include "suggest.h"
#include "tunables.h"
#include "tunnel_rpc.h"
#include "util.h"

#define G_MODELS "Models"
#define G_MESH "Mesh"
#define G_DISCOVERY "Public discovery (Nostr)"
#define G_API "API"
#define G_OUTPUT "Configuration and output"

static const mesh_option_t OPTIONS[] = {
    {OPT_MODEL, "model", 0, OPTV_STRING, "MODEL[:TYPE]", G_MODELS, "models.model", NULL, NULL,
     OPTF_REPEAT | OPTF_MODEL,
     "serve a model (repeatable): a GGUF file path, a catalog name (mesh-llm models list), "
     "hf://ORG/REPO/FILE.gguf, ORG/REPO:QUANT or an https:// URL; a model not on disk is "
     "downloaded into the models directory while the node starts, with its vision projector "
     "when the reference brings one (a vision catalog model, hf://…?mmproj=PROJECTOR.gguf, the "
     "repo's mmproj file for ORG/REPO:QUANT). Its name is the file name without .gguf; its type "
     "(llm, embedding, reranking) is read from the file, a :TYPE suffix overrides it. With "
     "--join, a name that is neither a file nor a catalog model is asked of the mesh (listed as "
     "requested)."},
    {OPT_MODELS_DIR, "models-dir", 0, OPTV_STRING, "DIR", G_MODELS, "models_dir", NULL, NULL, 0,
     "every .gguf file in DIR is a known model, loaded on first use (models given with --model "
     "load at startup); default: ~/.models, where downloads land"},
    {OPT_MAX_LOADED, "max-loaded-models", 0, OPTV_INTS, "L [E [R]]", G_MODELS, "max_loaded_models",
     NULL, "1 1 1", 0,
     "how many llm, embedding and reranking models stay loaded at once; the least recently used "
     "idle model of a type is unloaded to make room"},
    {OPT_CTX, "ctx-size", 0, OPTV_INT, "N", G_MODELS, "ctx_size", NULL, "the model's", OPTF_MODEL,
     "the context of each of a model's parallel slots (in the config file also per model); "
     "llama-server gets --ctx-size slots × N"},
    {OPT_SLOTS, "slots", 0, OPTV_INT, "N", G_MODELS, "slots", NULL, "as many as fit, up to 4",
     OPTF_MODEL,
     "parallel slots of each model's llama-server: requests it decodes at once, each with a "
     "context of its own (in the config file also per model). By default as many as fit the "
     "memory free when the model loads, up to 4 and at least 1; the memory counted is the "
     "weights and one KV cache per slot"},
    {OPT_LLAMA_ARGS, "llamacpp-args", 0, OPTV_STRING, "\"ARGS\"", G_MODELS, "llamacpp_args", NULL,
     NULL, OPTF_MODEL,
     "extra arguments for every llama-server child (in the config file also per model), not the "
     "flags the node manages: --port, --host, -m, --alias, ..."},
    {OPT_DRAFT, "draft", 0, OPTV_STRING, "NAME|PATH", G_MODELS, "draft", NULL, NULL, 0,
     "draft model for speculative decoding of this node's llm models (a GGUF file, or a catalog "
     "name whose file is in the models directory); by default a catalog model gets its catalog "
     "draft when that file is on disk"},
    {OPT_NO_DRAFT, "no-draft", 0, OPTV_SWITCH, NULL, G_MODELS, "no_draft", NULL, NULL, 0,
     "no draft model, not even the catalog's"},
    {OPT_MMPROJ, "mmproj", 0, OPTV_STRING, "MODEL=PATH", G_MODELS, "models.mmproj", NULL, NULL,
     OPTF_REPEAT | OPTF_MODEL,
     "vision projector of MODEL (repeatable): its llama-server accepts images; requests with "
     "images to a model without one are refused (400). In the config file: the mmproj = PATH "
     "of a models entry"},
    {OPT_PIN, "pin", 0, OPTV_STRING, "MODEL", G_MODELS, "pin", NULL, NULL, OPTF_REPEAT,
     "keep MODEL loaded whatever the LRU says (repeatable)"},
    {OPT_BIN_DIR, "bin-dir", 0, OPTV_STRING, "DIR", G_MODELS, "bin_dir", "MESH_LLM_BIN_DIR", NULL,
     0,
     "where llama-server and ggml-rpc-server live (default: $MESH_LLM_BIN_DIR, the installed "
     "PREFIX/libexec/mesh-llm/cpu, the build's llama.cpp, ~/.cache/mesh-llm, then PATH)"},

    {OPT_JOIN, "join", 0, OPTV_STRING, "TOKEN|@FILE", G_MESH, "mesh.join", "MESH_LLM_JOIN", NULL,
     OPTF_REPEAT | OPTF_SECRET,
     "join the mesh of the node that printed TOKEN (repeatable: tried in order until one "
     "answers). The token holds the mesh secret: prefer @FILE (tokens read from FILE), "
     "$MESH_LLM_JOIN or the config file, which other users cannot see in ps"},
    {OPT_OWN_MESH, "own-mesh", 0, OPTV_SWITCH, NULL, G_MESH, "mesh.own_mesh", NULL, NULL, 0,
     "form this node's own mesh (the one it created before, else a new one) even without a "
     "model: others join its token"},
    {OPT_MESH_NAME, "mesh-name", 0, OPTV_STRING, "NAME", G_MESH, "mesh.name", NULL, NULL, 0,
     "create a named mesh (its id is derived from NAME and this node's key, so it survives "
     "restarts)"},
    {OPT_BIND_PORT, "bind-port", 0, OPTV_INT, "N", G_MESH, "mesh.bind_port", NULL, "any free", 0,
     "UDP port for QUIC between nodes"},
    {OPT_MAX_VRAM, "max-vram", 0, OPTV_NUMBER, "GB", G_MESH, "mesh.max_vram", NULL, "detected", 0,
     "memory this node offers to the mesh (on a CPU-only node half of the available RAM)"},
    {OPT_OFFLOAD_RAM, "offload-ram", 0, OPTV_NUMBER, "GB", G_MESH, "mesh.offload_ram", NULL, "0", 0,
     "RAM this node lends beside its accelerators' memory for the layers of a model that do not "
     "fit on them (partial offload: such a model runs slower, but here); needs an accelerator"},
    {OPT_DEVICE, "device", 0, OPTV_STRING, "LIST", G_MESH, "mesh.device", NULL, "all listed", 0,
     "the accelerators this node uses, by the names llama-server --list-devices gives (Vulkan0, "
     "CUDA1, ...; comma-separated), or none for the CPU only: they alone are offered, and the "
     "node's llama-server and rpc-server children get only them"},
    {OPT_SPLIT, "split", 0, OPTV_SWITCH, NULL, G_MESH, "mesh.split", NULL, NULL, 0,
     "serve this node's models as a split over several nodes (llama.cpp RPC) even when one node "
     "could hold them"},
    {OPT_SPLIT_PRIVATE, "split-private", 0, OPTV_SWITCH, NULL, G_MESH, "mesh.split_private", NULL,
     NULL, 0,
     "when this node hosts a split, keep the token embedding and the output layer on it: its "
     "workers see hidden states only, never token ids or logits. Other nodes then relay its "
     "requests only to a plain replica, else refuse them (403 private_split: this node would "
     "read them) unless a request sends X-Mesh-Private: allow-host"},
    {OPT_CLIENT, "client", 0, OPTV_SWITCH, NULL, G_MESH, "mesh.client", NULL, NULL, 0,
     "route requests through the mesh only: serve no model and lend no memory"},
    {OPT_NO_PORTMAP, "no-portmap", 0, OPTV_SWITCH, NULL, G_MESH, "mesh.no_portmap", NULL, NULL, 0,
     "do not ask the router (NAT-PMP, UPnP-IGD) to forward this node's QUIC port; by default a "
     "mapping is asked for, renewed and deleted on exit, and its address announced"},
    {OPT_RELAY, "relay", 0, OPTV_SWITCH, NULL, G_MESH, "mesh.relay", NULL, NULL, 0,
     "offer this node as a relay for members that cannot reach each other (behind NATs that "
     "defeat hole punching); it forwards their encrypted QUIC packets and cannot read them. For a "
     "node with a public address"},
    {OPT_STUN, "stun", 0, OPTV_STRING, "HOST:PORT", G_MESH, "mesh.stun", NULL, NULL, OPTF_REPEAT,
     "a STUN server (repeatable, at most 4; port 3478 when left out): asked from the QUIC port "
     "at start and every 5 minutes what address the internet sees this node at, which is then "
     "announced as a reflexive candidate (behind a NAT: the router's public address)"},
    {OPT_TURN, "turn", 0, OPTV_STRING, "turn:HOST:PORT", G_MESH, "mesh.turn", NULL, NULL, 0,
     "a TURN server (RFC 8656, e.g. coturn) that relays for this node: it allocates a relayed "
     "address there from the QUIC port and announces it; peers that cannot reach this node "
     "otherwise (both behind symmetric NATs) connect through it. The server sees only encrypted "
     "QUIC. Needs --turn-user and a password"},
    {OPT_TURN_USER, "turn-user", 0, OPTV_STRING, "NAME", G_MESH, "mesh.turn_user", NULL, NULL, 0,
     "the TURN server's username (long-term credentials)"},
    {OPT_TURN_PASSWORD_FILE, "turn-password-file", 0, OPTV_STRING, "FILE", G_MESH,
     "mesh.turn_password_file", NULL, NULL, 0,
     "the TURN password, read from FILE (one line); also $MESH_LLM_TURN_PASSWORD or the config "
     "file's mesh.turn_password. Never on the command line"},
    {OPT_TURN_PASSWORD, "turn-password", 0, OPTV_STRING, "PASSWORD", G_MESH, "mesh.turn_password",
     "MESH_LLM_TURN_PASSWORD", NULL, OPTF_SECRET | OPTF_HIDDEN,
     "the TURN password (config file and environment only: refused on the command line)"},

    {OPT_PUBLISH, "publish", 0, OPTV_SWITCH, NULL, G_DISCOVERY, "discovery.publish", NULL, NULL, 0,
     "list this node's mesh on Nostr relays (name from --mesh-name, region from --region) so "
     "others can find it"},
    {OPT_AUTO, "auto", 0, OPTV_SWITCH, NULL, G_DISCOVERY, "discovery.auto", NULL, NULL, 0,
     "find a public mesh, pick the best (region, last mesh, capacity, your models), join it; "
     "none: start a new mesh"},
    {OPT_REGION, "region", 0, OPTV_STRING, "R", G_DISCOVERY, "discovery.region", NULL, NULL, 0,
     "this node's region (listed; preferred by --auto)"},
    {OPT_NOSTR_RELAY, "nostr-relay", 0, OPTV_STRING, "URL", G_DISCOVERY, "discovery.nostr_relay",
     "MESH_LLM_NOSTR_RELAYS", "a few public relays", OPTF_REPEAT,
     "a ws:// or wss:// relay (repeatable; the environment variable takes a comma-separated "
     "list)"},

    {OPT_PORT, "port", 0, OPTV_INT, "N", G_API, "api.port", NULL, "9337", 0,
     "OpenAI API port on 127.0.0.1 (0 = any free)"},
    {OPT_CONSOLE, "console", 0, OPTV_INT, "N", G_API, "api.console", NULL, "3131", 0,
     "management API and web console port (0 = any free)"},
    {OPT_OLLAMA_PORT, "ollama-port", 0, OPTV_INT, "N", G_API, "api.ollama_port", NULL, "off", 0,
     "also serve the inference API (Ollama's /api/chat, /api/tags, … and /v1) on this port, e.g. "
     "11434, where Ollama's clients look by default; it binds like --port"},
    {OPT_HEADLESS, "headless", 0, OPTV_SWITCH, NULL, G_API, "api.headless", NULL, NULL, 0,
     "no management API / console"},
    {OPT_LISTEN_ALL, "listen-all", 0, OPTV_SWITCH, NULL, G_API, "api.listen_all", NULL, NULL, 0,
     "bind the API and console on all interfaces, not 127.0.0.1 (anyone on the network can then "
     "use them: add an API key)"},
    {OPT_API_KEY_FILE, "api-key-file", 0, OPTV_STRING, "FILE", G_API, "api.key_file", NULL, NULL, 0,
     "require 'Authorization: Bearer KEY' on /v1/* and /api/*, KEY read from FILE"},
    {OPT_API_KEY, "api-key", 0, OPTV_STRING, "KEY", G_API, "api.key", "MESH_LLM_API_KEY", NULL,
     OPTF_SECRET,
     "the same with KEY itself (shows the key in ps: prefer --api-key-file, $MESH_LLM_API_KEY "
     "or the config file)"},
    {OPT_API_KEYS, "api-keys", 0, OPTV_STRING, "FILE", G_API, "api.keys_file", NULL, NULL, 0,
     "API keys with names and tiers (concurrency, queue share, tokens per minute)"},
    {OPT_QUEUE_LEN, "queue-len", 0, OPTV_INT, "N", G_API, "api.queue_len", NULL, "256", 0,
     "requests that may wait per model when its slots are busy (more get 429; "
     "$MESH_LLM_QUEUE_WAIT_MS bounds the wait, default 600000 = 10 min, then 503)"},
    {OPT_ALLOW_ORIGIN, "allow-origin", 0, OPTV_STRING, "ORIGIN", G_API, "api.allow_origin", NULL,
     "none", OPTF_REPEAT,
     "let web pages of ORIGIN (like http://localhost:5173) call the APIs from a browser "
     "(repeatable); that origin can then read the invite token (the mesh secret), join other "
     "meshes and load/unload models"},
    {OPT_MAX_BODY, "max-body-size", 0, OPTV_STRING, "BYTES", G_API, "api.max_body_size", NULL, "8M",
     0, "largest accepted request body (K/M/G suffixes)"},
    {OPT_MAX_CONNS, "max-connections", 0, OPTV_INT, "N", G_API, "api.max_connections", NULL, "4096",
     0, "client connections the API holds at once; one more is answered 503 and closed"},

    {OPT_CONFIG, "config", 0, OPTV_STRING, "FILE", G_OUTPUT, NULL, NULL, "$MESH_LLM_HOME/config", 0,
     "read settings from FILE (libconfig format, see docs/config.md); without --config, "
     "$MESH_LLM_HOME/config (~/.mesh-llm/config) when it exists. Flags override environment "
     "variables, which override the file"},
    {OPT_LOG_FORMAT, "log-format", 0, OPTV_STRING, "pretty|json", G_OUTPUT, "log.format", NULL,
     "pretty", 0, "log style on stderr"},
    {OPT_VERBOSE, "verbose", 'v', OPTV_SWITCH, NULL, G_OUTPUT, "log.verbose", NULL, NULL, 0,
     "debug logs, including llama-server's own output at its info level (devices, layers "
     "offloaded)"},
    {OPT_HELP, "help", 'h', OPTV_SWITCH, NULL, G_OUTPUT, NULL, NULL, NULL, 0,
     "this help (mesh-llm help COMMAND: a command's)"},
    {OPT_VERSION, "version", 0, OPTV_SWITCH, NULL, G_OUTPUT, NULL, NULL, NULL, 0,
     "print the version"},
    {OPT_HELP_MARKDOWN, "help-markdown", 0, OPTV_SWITCH, NULL, G_OUTPUT, NULL, NULL, NULL,
     OPTF_HIDDEN, "print the CLI reference (docs/cli.md)"},
};

#define N_OPTIONS (sizeof OPTIONS / sizeof OPTIONS[0])

/* How tunables_load reads a row (options.h:tun_kind_t) into its field of tunables_t. */
#define T_FIELD(kind_, f) .kind = (kind_), .off = offsetof(tunables_t, f)
#define T_MS(f) T_FIELD(TUN_MS, f), .min = 1, .max = TUN_MS_MAX
#define T_MS0(f) T_FIELD(TUN_MS0, f), .min = 0, .max = TUN_MS0_MAX
#define T_U64(f, lo, hi) T_FIELD(TUN_U64, f), .min = (lo), .max = (hi)
#define T_ULONG(f, lo, hi) T_FIELD(TUN_ULONG, f), .min = (lo), .max = (hi)
#define T_BOOL(f, hi) T_FIELD(TUN_BOOL, f), .min = 0, .max = (hi)
#define T_TEXT(f) T_FIELD(TUN_TEXT, f)
#define T_CHOICE(f) T_FIELD(TUN_CHOICE, f)
#define T_OPTION .kind = TUN_OPTION

/* The environment variables, sorted by name. A timer's value is its default in ms (its cost is
 * in docs/timings.md); 0 and a def text where the code computes it. The last column says how
 * tunables_load reads it: the parser its call site uses (tests/unit/test_tunables.c). */
static const mesh_env_t ENV_VARS[] = {
    {"MESH_LLM_API_KEY", 0, "none", "text", ENVF_SECRET,
     "the API key a node requires (as --api-key) and that 'mesh-llm status' sends", T_OPTION},
    {"MESH_LLM_AUTO_LISTEN_MS", 4000, NULL, "ms", 0,
     "--auto with no listing yet: how long it keeps listening (asking the relays again halfway)",
     T_MS(auto_listen_ms)},
    {"MESH_LLM_AUTO_WAIT_MS", 15000, NULL, "ms", 0,
     "--auto: how long it waits for every relay to answer before it decides with what arrived",
     T_MS(auto_wait_ms)},
    {"MESH_LLM_BIN_DIR", 0, "searched", "path", 0,
     "where llama-server and ggml-rpc-server live (as --bin-dir)", T_OPTION},
    {"MESH_LLM_CACHE", 0, "~/.cache/mesh-llm", "path", 0,
     "the cache whose pinned llama.cpp build is searched for the binaries", T_TEXT(cache)},
    {"MESH_LLM_CONNECT_WAIT_MS", 15000, NULL, "ms", 0,
     "a request whose hosts are all still being connected to (a member that just came up, a hole "
     "punch or a relay under way) waits this long for a connection before 503 host_unreachable",
     T_MS(connect_wait_ms)},
    {"MESH_LLM_DEMAND_WINDOW_MS", DEMAND_WINDOW_MS, NULL, "ms", ENVF_TEST,
     "the window of the requests-per-minute count announced to the mesh", T_MS(demand_window_ms)},
    {"MESH_LLM_DL_BACKOFF_MS", 500, NULL, "ms", 0,
     "first wait before a failed download is retried (doubling, at most 8000)",
     T_MS(dl_backoff_ms)},
    {"MESH_LLM_DL_FOLLOW_URLS", 0, "0 (off)", "0/1", 0,
     "1: also download http(s):// URLs that other nodes announce (by default only catalog "
     "names and hub references are followed for others)",
     T_BOOL(dl_follow_urls, TUN_MS_MAX)},
    {"MESH_LLM_DL_MIN_RATE", 1024, NULL, "bytes/s", 0,
     "a download slower than this over MESH_LLM_DL_STALL_MS counts as stalled and is retried",
     T_U64(dl_min_rate, 1, TUN_MS_MAX)},
    {"MESH_LLM_DL_RETRIES", 5, NULL, "count", 0,
     "retries of a download that makes no progress before it is given up (0: none)",
     T_U64(dl_retries, 0, TUN_MS_MAX)},
    {"MESH_LLM_DL_STALL_MS", 60000, NULL, "ms", 0,
     "a download that receives nothing this long is retried (rounded up to seconds)",
     T_MS(dl_stall_ms)},
    {"MESH_LLM_EVENTS_MAX_QUEUE", 262144, NULL, "bytes", 0,
     "an /api/events client whose unsent bytes would pass this is dropped",
     T_U64(events_max_queue, 1, TUN_MS_MAX)},
    {"MESH_LLM_EVENTS_MS", 2000, NULL, "ms", 0, "period of the /api/events status snapshots",
     T_MS(events_ms)},
    {"MESH_LLM_FIRST_BYTE_MS", 30000, NULL, "ms", 0,
     "a host that sends no first byte of a reply this long is given up and the request retried "
     "on another",
     T_MS(first_byte_ms)},
    {"MESH_LLM_FIRST_BYTE_MS_PER_KB", 2000, NULL, "ms per KiB", 0,
     "added to MESH_LLM_FIRST_BYTE_MS per KiB of request body", T_MS(first_byte_ms_per_kb)},
    {"MESH_LLM_HANDSHAKE_MS", 5000, NULL, "ms", 0,
     "a QUIC dial plus admission that does not complete is given up", T_MS(handshake_ms)},
    {"MESH_LLM_HANG_TIMEOUT_MS", 30000, NULL, "ms", 0,
     "a child that stops answering /health this long is restarted", T_MS(hang_timeout_ms)},
    {"MESH_LLM_HEALTH_INTERVAL_MS", 5000, NULL, "ms", 0, "period of a child's /health check",
     T_MS(health_interval_ms)},
    {"MESH_LLM_HEALTH_TIMEOUT_MS", 5000, NULL, "ms", 0, "timeout of a child's /health check",
     T_MS(health_timeout_ms)},
    {"MESH_LLM_HEARTBEAT_MS", 60000, NULL, "ms", 0, "gossip heartbeat", T_MS(heartbeat_ms)},
    {"MESH_LLM_HOME", 0, "~/.mesh-llm", "path", 0,
     "the state directory (node key, mesh id, config, lock): one node per home", T_TEXT(home)},
    {"MESH_LLM_HTTP_IDLE_MS", 60000, NULL, "ms", 0,
     "an API or console connection idle this long is closed", T_MS(http_idle_ms)},
    {"MESH_LLM_HTTP_MAX_BUFFERED", HTTPD_DEFAULT_BUFFER_CAP, NULL, "bytes", 0,
     "request bytes all HTTP connections may buffer together (at least 4096)",
     T_U64(http_max_buffered, 4096, 1ULL << 40)},
    {"MESH_LLM_HTTP_READ_MS", 30000, NULL, "ms", 0, "a request that does not arrive in full",
     T_MS(http_read_ms)},
    {"MESH_LLM_HTTP_WRITE_MS", 30000, NULL, "ms", 0, "a response the client does not read",
     T_MS(http_write_ms)},
    {"MESH_LLM_IDLE_UNLOAD_MS", PROMO_IDLE_MS, NULL, "ms", 0,
     "a model nobody asked for this long is unloaded (standbys step back)", T_MS(idle_unload_ms)},
    {"MESH_LLM_JOIN", 0, "none", "tokens", ENVF_SECRET,
     "invite tokens to join, comma-separated (as --join)", T_OPTION},
    {"MESH_LLM_LIVE_MS", 2000, NULL, "ms", 0,
     "a QUIC connection with a stream open is closed after this long without a packet",
     T_MS(live_ms)},
    {"MESH_LLM_LOAD_TIMEOUT_MS", 0, "2 min + 1 min per GiB of model", "ms", 0,
     "a child that does not become ready this long is given up", T_MS(load_timeout_ms)},
    {"MESH_LLM_MIN_SERVE_MS", PROMO_MIN_SERVE_MS, NULL, "ms", 0,
     "a promoted node serves at least this long", T_MS(min_serve_ms)},
    {"MESH_LLM_NOSTR_CA_FILE", 0, "none", "path", ENVF_TEST,
     "a PEM file of extra certificate authorities for wss:// relays", T_TEXT(nostr_ca_file)},
    {"MESH_LLM_NOSTR_OPEN_TIMEOUT_MS", 10000, NULL, "ms", 0,
     "a relay connection that does not open this long is given up", T_MS(nostr_open_timeout_ms)},
    {"MESH_LLM_NOSTR_RELAYS", 0, "a few public relays", "list", 0,
     "Nostr relays, comma-separated (as --nostr-relay); \"none\": no relay", T_OPTION},
    {"MESH_LLM_NOSTR_RETRY_MS", 1000, NULL, "ms", 0,
     "first wait before a lost relay is reconnected (doubling)", T_MS(nostr_retry_ms)},
    {"MESH_LLM_PLAN_WAIT_MS", 30000, NULL, "ms", 0,
     "a request for a model being planned or starting on a split waits this long, then 503",
     T_MS(plan_wait_ms)},
    {"MESH_LLM_PORTMAP", 1, NULL, "0/1", 0,
     "0 (or off): do not ask the router for a port mapping (as --no-portmap; the tests set it: "
     "their nodes must not talk to this machine's router)",
     T_BOOL(portmap, TUN_MS_MAX)},
    {"MESH_LLM_PREFIX_AFFINITY", 1, NULL, "0/1", 0,
     "0 (or off): do not prefer the host that served a request's prompt prefix before",
     T_BOOL(prefix_affinity, TUN_MS_MAX)},
    {"MESH_LLM_PROBE_MS", 5000, "5000 for --auto; gossip: min(heartbeat / 4, 2000)", "ms", 0,
     "a suspected peer that does not answer a ping this long is dead; --auto's probe of a "
     "listed mesh",
     T_MS(probe_ms)},
    {"MESH_LLM_PROGRESS_MS", 3000, "3000 (mesh-llm download on a terminal: 250)", "ms", 0,
     "period of download progress lines", T_MS(progress_ms)},
    {"MESH_LLM_PUBLISH_INTERVAL_MS", 60000, NULL, "ms", 0,
     "--publish: the listing is republished this often", T_MS(publish_interval_ms)},
    {"MESH_LLM_PUBLISH_TTL_MS", 0, "2 x MESH_LLM_PUBLISH_INTERVAL_MS", "ms", 0,
     "--publish: the listing's expiry", T_MS(publish_ttl_ms)},
    {"MESH_LLM_QUEUE_WAIT_MS", ADMIT_DEFAULT_WAIT_MS, NULL, "ms", 0,
     "a request waits this long for a slot, then 503 (0 .. 1 day)", T_MS0(queue_wait_ms)},
    {"MESH_LLM_QUIC_CC", 0, "bbr2", "reno|cubic|bbr|bbr2", 0, "QUIC congestion control",
     T_CHOICE(quic_cc)},
    {"MESH_LLM_QUIC_IDLE_MS", 30000, NULL, "ms", 0,
     "an idle QUIC connection (no stream) whose peer is gone is closed", T_MS(quic_idle_ms)},
    {"MESH_LLM_QUIC_RETRY_AFTER", 16, NULL, "count", 0,
     "inbound QUIC connections not yet admitted before a new one must pass a Retry (0: always; at "
     "most 64)",
     T_U64(quic_retry_after, 0, 64)},
    {"MESH_LLM_REBALANCE_GAIN_PCT", RB_GAIN_PCT, NULL, "%", 0,
     "a running split moves to a layout its workers' observed stage times favour only when it "
     "predicts at least this much less compute time per token",
     T_U64(rebalance_gain_pct, 0, 1000)},
    {"MESH_LLM_REBALANCE_TICKS", RB_TICKS, NULL, "count", 0,
     "ticks in a row a better layout must stay the best before the split moves to it (0: 3)",
     T_U64(rebalance_ticks, 0, 1000)},
    {"MESH_LLM_REBALANCE_TICK_MS", RB_TICK_MS, NULL, "ms", 0,
     "how often a split host re-plans its layout from the workers' observed stage times",
     T_MS(rebalance_tick_ms)},
    {"MESH_LLM_RELAY_RATE", 16777216, NULL, "bytes/s", 0,
     "--relay: the most a relayed pair may send through this node a second (0: no cap)",
     T_U64(relay_rate, 0, TUN_MS_MAX)},
    {"MESH_LLM_RETRY_DIAL_MS", 5000, NULL, "ms", 0,
     "a retried request waits this long for a dial to another host", T_MS(retry_dial_ms)},
    {"MESH_LLM_ROUTE_REFRESH_MS", RT_REFRESH_MS, NULL, "ms", 0,
     "a passive node asks an active node for the routing table this often", T_MS(route_refresh_ms)},
    {"MESH_LLM_RPC_COALESCE", 1, NULL, "0/1", ENVF_TEST,
     "0 (or off): write each read of a split's RPC bytes at once, not coalesced per burst",
     T_BOOL(rpc_coalesce, TUN_MS_MAX)},
    {"MESH_LLM_RPC_CONNECT_MS", 5000, NULL, "ms", 0,
     "a split worker's rpc-server must accept the tunnel within this", T_MS(rpc_connect_ms)},
    {"MESH_LLM_RPC_QUIET_MS", TUNNEL_RPC_QUIET_MS, NULL, "ms", 0,
     "a split host probes a worker whose RPC reply is this late", T_MS(rpc_quiet_ms)},
    {"MESH_LLM_SPEED_MFLOPS", 0, "measured", "MFLOPS", ENVF_TEST,
     "the speed announced instead of measuring it (0: none announced)",
     T_ULONG(speed_mflops, 0, 100000000)},
    {"MESH_LLM_SWITCH_FAIR_MS", 10000, NULL, "ms", 0,
     "a model waiting for the memory another holds gets it after this (0 .. 1 day)",
     T_MS0(switch_fair_ms)},
    {"MESH_LLM_TEST_CHILD_PORT", 0, "a free port", "port", ENVF_TEST,
     "the first child of the process gets this port", T_U64(test_child_port, 1, 65535)},
    {"MESH_LLM_TURN_PASSWORD", 0, "none", "text", ENVF_SECRET,
     "the TURN server's password (as --turn-password-file's content)", T_OPTION},
    {"MESH_LLM_VERBOSE", 0, "0 (off)", "0/1", 0, "1 (or on): debug logs of 'mesh-llm discover'",
     T_BOOL(verbose, TUN_MS_MAX)},
};

#define N_ENV (sizeof ENV_VARS / sizeof ENV_VARS[0])
_Static_assert(N_ENV <= TUNABLES_MAX_VARS, "raise TUNABLES_MAX_VARS (tunables.h)");

const mesh_env_t *options_env_all(size_t *n)
{
    *n = N_ENV;
    return ENV_VARS;
}

static int env_cmp(const void *name, const void *e)
{
    return strcmp(name, ((const mesh_env_t *)e)->name);
}

/* the table is sorted (test_options checks it) */
const mesh_env_t *options_env(const char *name)
{
    return bsearch(name, ENV_VARS, N_ENV, sizeof ENV_VARS[0], env_cmp);
}

uint64_t options_env_default(const char *name)
{
    const mesh_env_t *e = options_env(name);
    return e ? e->value : 0;
}

uint64_t options_env_ms(const char *name)
{
    return env_ms(name, options_env_default(name));
}

/* the launchers' own node (app/cli_agents.c), the same for the four */
#define AGENT_NODE_HELP                                                                            \
    "With no node running here, --model NAME (a file, a catalog name) or --join TOKEN|@FILE "      \
    "starts one for the session, its output shown until it serves the model, stopped when the "    \
    "agent exits (--keep-node keeps it; --wait SECONDS bounds its start, default 1800). "

static const mesh_command_t COMMANDS[] = {
    {"status", "[--console PORT]", "summary of the node running here (its mesh, models, peers)",
     "Asks the node's management API on 127.0.0.1 (default port 3131; $MESH_LLM_API_KEY when "
     "the node requires a key)."},
    {"join", "TOKEN|@FILE [--console PORT] [--timeout SECONDS]",
     "make the node running here join a mesh",
     "For an idle node (started with no --model, --join or --models-dir): the same as the "
     "console's join button or POST /api/join."},
    {"assign", "MODEL [--node ID] [--console PORT] [--timeout SECONDS] [--no-wait]",
     "make the node running here serve MODEL, whatever the mesh's rules",
     "MODEL: a model on this node's disk (one the mesh serves, if the file is here), or a "
     "catalog name / hf:// reference, downloaded first. What must go is unloaded: the model the "
     "mesh gave the node, and --model ones whose slot or memory MODEL needs (back when no "
     "assignment remains). An assigned model is never demoted or idle-unloaded by the mesh, "
     "and the mesh gives the node nothing else in its place. Waits until it serves (--timeout, "
     "default 600; --no-wait returns at once). Only the node's own operator assigns (POST "
     "/api/assign on its console, from this machine or with $MESH_LLM_API_KEY): a peer never "
     "can, so --node ID of another node prints the command to run on that node's machine. "
     "Shown in mesh-llm status and GET /api/status (\"assignments\")."},
    {"unassign", "MODEL [--console PORT]", "give an assigned model back to the mesh's rules",
     "POST /api/unassign: the model stays loaded, but the mesh's rules (idle unload, demotion, "
     "the model manager's LRU) apply to it again; --model models the assignment pushed out are "
     "planned again."},
    {"models", "list|installed|search TEXT|rm NAME [--models-dir DIR] [--max-vram GB]",
     "the model catalog and the models on disk",
     "list: the catalog, with what fits the memory this node offers; installed: the GGUF files "
     "in the models directory (default ~/.models); search TEXT: catalog entries matching TEXT; "
     "rm NAME: delete a downloaded model."},
    {"download", "REF [--models-dir DIR]", "download a model into the models directory",
     "REF: a catalog name (mesh-llm models list), hf://ORG/REPO/FILE.gguf[@REV], ORG/REPO:QUANT, "
     "or an https:// URL of a GGUF. The file goes to the models directory (default ~/.models)."},
    {"discover", "[--region R] [--model M] [--json] [--nostr-relay URL]... [--timeout SECONDS]",
     "list public meshes (Nostr)",
     "Lists the meshes that Nostr relays announce (--publish); --auto joins the best one."},
    {"config", "check FILE", "validate a config file",
     "Reports syntax errors with their line numbers and unknown keys (with the closest known "
     "key); exit status 0 when FILE is valid, 2 when it is not. The format: docs/config.md."},
    {"service", "install|uninstall|status|unit [--exec PATH]",
     "run the node as a systemd user service",
     "install: write ~/.config/systemd/user/mesh-llm.service (running this binary with "
     "--config ~/.config/mesh-llm/config) and print the systemctl line that enables it; "
     "uninstall: remove the unit; status: is it installed, which node holds the state directory; "
     "unit: print the unit. docs/install.md."},
    {"claude",
     "[--model NAME] [--join TOKEN|@FILE] [--api URL|--port PORT] [--console PORT] [--keep-node] "
     "[--wait SECONDS] [--] [ARGS...]",
     "run Claude Code against the mesh",
     "Finds the node running here (its console on 127.0.0.1:3131 names its API; else the API on "
     "127.0.0.1:9337; --api URL or --port PORT names another), picks the best model it serves for "
     "a coding "
     "agent (ready, its chat template takes tools, the largest; --model NAME picks one), and "
     "runs 'claude' with ARGS (e.g. -p \"hi\"), pointed at the mesh: ANTHROPIC_BASE_URL, "
     "ANTHROPIC_AUTH_TOKEN and ANTHROPIC_MODEL (the Anthropic API: /v1/messages), telemetry and "
     "update checks off. " AGENT_NODE_HELP "Its settings live in "
     "$MESH_LLM_HOME/agents/claude, never in your own; the key is $MESH_LLM_API_KEY when set "
     "(through the environment only), else a placeholder. Install it with: npm i -g "
     "@anthropic-ai/claude-code. "
     "docs/agents.md."},
    {"codex",
     "[--model NAME] [--join TOKEN|@FILE] [--api URL|--port PORT] [--console PORT] [--keep-node] "
     "[--wait SECONDS] [--] [ARGS...]",
     "run Codex against the mesh",
     "Finds the node running here (its console on 127.0.0.1:3131 names its API; else the API on "
     "127.0.0.1:9337; --api URL or --port PORT names another), picks the best model it serves for "
     "a coding "
     "agent (ready, its chat template takes tools, the largest; --model NAME picks one), and "
     "runs 'codex' with ARGS (e.g. exec \"hi\"), pointed at the mesh: -c overrides of a model "
     "provider mesh (the Responses API: /v1/responses) and the model, a CODEX_HOME of its own, "
     "analytics and the update check off. " AGENT_NODE_HELP "Its settings live in "
     "$MESH_LLM_HOME/agents/codex, never in your own; the key is $MESH_LLM_API_KEY when set "
     "(through the environment only), else a placeholder. Install it with: npm i -g @openai/codex. "
     "docs/agents.md."},
    {"opencode",
     "[--model NAME] [--join TOKEN|@FILE] [--api URL|--port PORT] [--console PORT] [--keep-node] "
     "[--wait SECONDS] [--] [ARGS...]",
     "run opencode against the mesh",
     "Finds the node running here (its console on 127.0.0.1:3131 names its API; else the API on "
     "127.0.0.1:9337; --api URL or --port PORT names another), picks the best model it serves for "
     "a coding "
     "agent (ready, its chat template takes tools, the largest; --model NAME picks one), and "
     "runs 'opencode' with ARGS (e.g. run \"hi\"), pointed at the mesh: OPENCODE_CONFIG_CONTENT "
     "with an OpenAI-compatible provider mesh (/v1/chat/completions) and the model mesh/MODEL, "
     "autoupdate, sharing and the models.dev fetch off. " AGENT_NODE_HELP "Its settings live in "
     "$MESH_LLM_HOME/agents/opencode, never in your own; the key is $MESH_LLM_API_KEY when set "
     "(through the environment only), else a placeholder. Install it with: npm i -g opencode-ai. "
     "docs/agents.md."},
    {"pi",
     "[--model NAME] [--join TOKEN|@FILE] [--api URL|--port PORT] [--console PORT] [--keep-node] "
     "[--wait SECONDS] [--] [ARGS...]",
     "run pi against the mesh",
     "Finds the node running here (its console on 127.0.0.1:3131 names its API; else the API on "
     "127.0.0.1:9337; --api URL or --port PORT names another), picks the best model it serves for "
     "a coding "
     "agent (ready, its chat template takes tools, the largest; --model NAME picks one), and "
     "runs 'pi' with ARGS (e.g. -p \"hi\"), pointed at the mesh: a models.json with a provider "
     "mesh (/v1/chat/completions) in PI_CODING_AGENT_DIR, --provider mesh --model MODEL, "
     "PI_OFFLINE=1. " AGENT_NODE_HELP "Its settings live in "
     "$MESH_LLM_HOME/agents/pi, never in your own; the key is $MESH_LLM_API_KEY when set "
     "(through the environment only), else a placeholder. Install it with: npm i -g "
     "@mariozechner/pi-coding-agent. "
     "docs/agents.md."},
    {"help", "[COMMAND|environment]", "this help, a command's, or the environment variables", NULL},
};

#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

const mesh_option_t *options_all(size_t *n)
{
    *n = N_OPTIONS;
    return OPTIONS;
}

const mesh_option_t *options_by_id(int id)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (OPTIONS[i].id == id) return &OPTIONS[i];
    return NULL;
}

const mesh_option_t *options_by_name(const char *name)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (strcmp(OPTIONS[i].name, name) == 0) return &OPTIONS[i];
    return NULL;
}

const mesh_option_t *options_by_key(const char *key)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (OPTIONS[i].key && strcmp(OPTIONS[i].key, key) == 0) return &OPTIONS[i];
    return NULL;
}

const char *options_suggest(const char *typed)
{
    const char *names[N_OPTIONS];
    for (size_t i = 0; i < N_OPTIONS; i++)
        names[i] = OPTIONS[i].flags & OPTF_HIDDEN ? NULL : OPTIONS[i].name;
    return suggest_closest(typed, names, N_OPTIONS);
}

const mesh_command_t *options_commands(size_t *n)
{
    *n = N_COMMANDS;
    return COMMANDS;
}

const mesh_command_t *options_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(COMMANDS[i].name, name) == 0) return &COMMANDS[i];
    return NULL;
}

const char *options_command_suggest(const char *typed)
{
    const char *names[N_COMMANDS];
    for (size_t i = 0; i < N_COMMANDS; i++)
        names[i] = COMMANDS[i].name;
    return suggest_closest(typed, names, N_COMMANDS);
}

/* ---- printing ---- */

/* text wrapped at width, every line after the first indented by indent columns (the first is
 * where the caller left the cursor, at column col) */
static void wrap(FILE *out, const char *text, size_t col, size_t indent, size_t width)
{
    const char *p = text;
    while (*p) {
        size_t w = strcspn(p, " ");
        if (col > indent && col + 1 + w > width) {
            fprintf(out, "\n%*s", (int)indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', out);
            col++;
        }
        fwrite(p, 1, w, out);
        col += w;
        p += w;
        while (*p == ' ')
            p++;
    }
    fputc('\n', out);
}

/* "-v, --verbose" or "--port N" */
static size_t option_label(const mesh_option_t *o, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s%c%s--%s%s%s", o->short_name ? "-" : "",
                     o->short_name ? o->short_name : ' ', o->short_name ? ", " : "", o->name,
                     o->metavar ? " " : "", o->metavar ? o->metavar : "");
    if (!o->short_name) { /* drop the placeholder space */
        memmove(buf, buf + 1, strlen(buf));
        n--;
    }
    return n < 0 ? 0 : (size_t)n;
}

#define HELP_COL 26
#define HELP_WIDTH 96

void options_usage(FILE *out)
{
    fputs("mesh-llm " MESH_VERSION " — pool machines into one OpenAI-compatible LLM API\n\n"
          "Usage: mesh-llm [OPTIONS]            run a node (see the options below)\n",
          out);
    for (size_t i = 0; i < N_COMMANDS; i++) {
        char head[160];
        snprintf(head, sizeof head, "       mesh-llm %s", COMMANDS[i].name);
        fprintf(out, "%-36s %s\n", head, COMMANDS[i].summary);
    }
    fputs("Run 'mesh-llm help COMMAND' for a command's options.\n", out);
    const char *group = NULL;
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const mesh_option_t *o = &OPTIONS[i];
        if (o->flags & OPTF_HIDDEN) continue;
        if (!group || strcmp(group, o->group) != 0) {
            group = o->group;
            fprintf(out, "\n%s:\n", group);
        }
        char label[96], text[1024];
        size_t n = option_label(o, label, sizeof label);
        snprintf(text, sizeof text, "%s%s%s%s%s%s%s", o->help, o->def ? " (default: " : "",
                 o->def ? o->def : "", o->def ? ")" : "", o->env ? " [env: " : "",
                 o->env ? o->env : "", o->env ? "]" : "");
        fprintf(out, "  %s", label);
        if (n + 2 >= HELP_COL) {
            fprintf(out, "\n%*s", HELP_COL, "");
        } else {
            fprintf(out, "%*s", (int)(HELP_COL - 2 - n), "");
        }
        wrap(out, text, HELP_COL, HELP_COL, HELP_WIDTH);
    }
    fputs(
        "\nWithout --model, a node that joins a mesh is given a model by the mesh, or stays a\n"
        "standby worker that lends memory to split models. With none of --model, --models-dir,\n"
        "--join, --client, --own-mesh, --mesh-name, --auto, --publish the node starts idle:\n"
        "management API and console only, until a join (the console, POST /api/join, or\n"
        "'mesh-llm join TOKEN'). State (node key, mesh id) lives in $MESH_LLM_HOME (default\n"
        "~/.mesh-llm).\n"
        "\n"
        "Environment: the MESH_LLM_* variables (timers, paths, test knobs) are listed with their\n"
        "defaults by 'mesh-llm help environment'.\n"
        "\n"
        "When ready, one line goes to stdout:\n"
        "  mesh-llm ready api=PORT console=PORT quic=PORT id=NODE_ID token=INVITE_TOKEN\n"
        "\n"
        "Example:\n"
        "  mesh-llm --model ~/.models/stories260K.gguf\n"
        "  open http://127.0.0.1:3131 (the console), or:\n"
        "  curl localhost:9337/v1/chat/completions -H 'Content-Type: application/json' -d "
        "'{\"model\":\"stories260K\",\"max_tokens\":32,\"messages\":[{\"role\":\"user\","
        "\"content\":\"Hi\"}]}'\n",
        out);
}

void options_command_usage(const mesh_command_t *c, FILE *out)
{
    fprintf(out, "Usage: mesh-llm %s %s\n\n", c->name, c->args);
    wrap(out, c->summary, 0, 0, HELP_WIDTH);
    if (c->help) {
        fputc('\n', out);
        wrap(out, c->help, 0, 0, HELP_WIDTH);
    }
}

/* an environment variable's default as text */
static const char *env_default(const mesh_env_t *e, char *buf, size_t len)
{
    if (e->def) return e->def;
    snprintf(buf, len, "%llu", (unsigned long long)e->value);
    return buf;
}

void options_env_usage(FILE *out)
{
    fputs("Environment variables read by mesh-llm (flags and the config file hold the rest).\n"
          "Timers are in ms; their costs are in docs/timings.md. [test]: for tests only.\n"
          "Read once at start: an empty value is unset, a value not accepted keeps the default\n"
          "(the node logs it); a 0/1 switch also takes off/on, false/true or no/yes.\n",
          out);
    for (size_t i = 0; i < N_ENV; i++) {
        const mesh_env_t *e = &ENV_VARS[i];
        char num[32], text[1024];
        snprintf(text, sizeof text, "%s (default: %s; %s)%s", e->help,
                 env_default(e, num, sizeof num), e->unit, e->flags & ENVF_TEST ? " [test]" : "");
        fprintf(out, "\n  %s\n%*s", e->name, 6, "");
        wrap(out, text, 6, 6, HELP_WIDTH);
    }
}

/* a table cell: '|' escaped */
static void md_cell(FILE *out, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '|') fputc('\\', out);
        fputc(*s, out);
    }
}

void options_markdown(FILE *out)
{
    fputs("<!-- Generated by `mesh-llm --help-markdown` from the option table (src/node/options.c)."
          " Do not edit: edit the table and regenerate. -->\n"
          "# mesh-llm command line\n\n"
          "```text\nmesh-llm [OPTIONS]\n",
          out);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "mesh-llm %s %s\n", COMMANDS[i].name, COMMANDS[i].args);
    fputs("```\n\n"
          "Every option can also be set in the config file (`--config FILE`, default "
          "`$MESH_LLM_HOME/config`; see [config.md](config.md)) under the key shown, and some "
          "through an environment variable. Precedence: command-line flags, then environment "
          "variables, then the config file, then the defaults.\n\n"
          "## Commands\n\n",
          out);
    for (size_t i = 0; i < N_COMMANDS; i++) {
        const mesh_command_t *c = &COMMANDS[i];
        fprintf(out, "### mesh-llm %s\n\n`mesh-llm %s %s`\n\n%c%s.%s%s\n\n", c->name, c->name,
                c->args, toupper((unsigned char)c->summary[0]), c->summary + 1, c->help ? " " : "",
                c->help ? c->help : "");
    }
    const char *group = NULL;
    fputs("## Options\n", out);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const mesh_option_t *o = &OPTIONS[i];
        if (o->flags & OPTF_HIDDEN) continue;
        if (!group || strcmp(group, o->group) != 0) {
            group = o->group;
            fprintf(out,
                    "\n### %s\n\n| Option | Config key | Environment | Default | Description |\n"
                    "|---|---|---|---|---|\n",
                    group);
        }
        char label[96];
        option_label(o, label, sizeof label);
        fputs("| `", out);
        md_cell(out, label);
        fputs("` | ", out);
        if (o->key) {
            fputc('`', out);
            md_cell(out, o->key);
            fputc('`', out);
        }
        fputs(" | ", out);
        if (o->env) fprintf(out, "`%s`", o->env);
        fputs(" | ", out);
        md_cell(out, o->def);
        fputs(" | ", out);
        md_cell(out, o->help);
        if ((o->flags & OPTF_REPEAT) && !strstr(o->help, "repeatable"))
            fputs(" *(repeatable)*", out);
        if (o->flags & OPTF_SECRET) fputs(" *(secret)*", out);
        fputs(" |\n", out);
    }
    fputs(
        "\n## Environment variables\n\n"
        "Every `MESH_LLM_*` variable the node reads (`mesh-llm help environment` prints the "
        "same list). Timers are in milliseconds; [timings.md](timings.md) gives what each one "
        "bounds and what it costs. A value a variable does not accept (not a number, out of "
        "range) leaves the default (the node logs it); an empty value is unset; a 0/1 switch also "
        "takes off/on, false/true or no/yes. Each is read once at start. Variables marked "
        "*(test)* are for tests and benchmarks.\n\n"
        "| Variable | Default | Unit | Description |\n|---|---|---|---|\n",
        out);
    for (size_t i = 0; i < N_ENV; i++) {
        const mesh_env_t *e = &ENV_VARS[i];
        char num[32];
        fprintf(out, "| `%s` | ", e->name);
        md_cell(out, env_default(e, num, sizeof num));
        fputs(" | ", out);
        md_cell(out, e->unit);
        fputs(" | ", out);
        md_cell(out, e->help);
        if (e->flags & ENVF_TEST) fputs(" *(test)*", out);
        if (e->flags & ENVF_SECRET) fputs(" *(secret)*", out);
        fputs(" |\n", out);
    }
}

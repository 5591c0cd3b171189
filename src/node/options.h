/* options — the one table of mesh-llm's options. It drives the argv parser (config.c), --help,
 * the config file's keys (config_file.c), the MESH_LLM_* environment variables and the CLI
 * reference page docs/cli.md (mesh-llm --help-markdown), so they cannot disagree. It also holds
 * the subcommands' names, summaries and usage (mesh-llm help [COMMAND]). */
#ifndef MESH_OPTIONS_H
#define MESH_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Option ids: getopt_long's return values (above any short option character). */
enum {
    OPT_MODEL = 256,
    OPT_MODELS_DIR,
    OPT_MAX_LOADED,
    OPT_CTX,
    OPT_SLOTS,
    OPT_LLAMA_ARGS,
    OPT_DRAFT,
    OPT_NO_DRAFT,
    OPT_MMPROJ,
    OPT_PIN,
    OPT_BIN_DIR,
    OPT_JOIN,
    OPT_OWN_MESH,
    OPT_MESH_NAME,
    OPT_BIND_PORT,
    OPT_MAX_VRAM,
    OPT_OFFLOAD_RAM,
    OPT_DEVICE,
    OPT_SPLIT,
    OPT_SPLIT_PRIVATE,
    OPT_CLIENT,
    OPT_RELAY,
    OPT_STUN,
    OPT_TURN,
    OPT_TURN_USER,
    OPT_TURN_PASSWORD_FILE,
    OPT_TURN_PASSWORD,
    OPT_NO_PORTMAP,
    OPT_PUBLISH,
    OPT_AUTO,
    OPT_REGION,
    OPT_NOSTR_RELAY,
    OPT_PORT,
    OPT_CONSOLE,
    OPT_OLLAMA_PORT,
    OPT_HEADLESS,
    OPT_LISTEN_ALL,
    OPT_API_KEY_FILE,
    OPT_API_KEY,
    OPT_API_KEYS,
    OPT_QUEUE_LEN,
    OPT_ALLOW_ORIGIN,
    OPT_MAX_BODY,
    OPT_MAX_CONNS,
    OPT_CONFIG,
    OPT_LOG_FORMAT,
    OPT_VERBOSE,
    OPT_HELP,
    OPT_VERSION,
    OPT_HELP_MARKDOWN,
};

/* How a config file gives an option's value (the argv form is always text). */
typedef enum {
    OPTV_SWITCH = 0, /* no value on the command line; true/false in the file */
    OPTV_STRING,
    OPTV_INT,
    OPTV_NUMBER, /* integer or float in the file */
    OPTV_INTS,   /* several integers after the flag; an array of integers in the file */
} opt_value_t;

enum {
    OPTF_REPEAT = 1u << 0, /* may be given several times; a list in the file */
    OPTF_SECRET = 1u << 1, /* its value is a secret: never logged, never in children's argv */
    OPTF_HIDDEN = 1u << 2, /* not in --help or docs/cli.md */
    OPTF_MODEL = 1u << 3,  /* a per-model setting: a key of an entry of the file's models list */
};

typedef struct {
    int id;
    const char *name;    /* long name, without "--" */
    char short_name;     /* 0: none */
    opt_value_t value;   /* what it takes */
    const char *metavar; /* the value's placeholder in --help (NULL for a switch) */
    const char *group;   /* heading in --help */
    const char *key;     /* config file key: "key", "section.key" or "models.key"; NULL: none */
    const char *env;     /* environment variable, or NULL */
    const char *def;     /* the default, as text, or NULL */
    unsigned flags;      /* OPTF_* */
    const char *help;    /* one paragraph; wrapped when printed */
} mesh_option_t;

/* The table, in --help order. */
const mesh_option_t *options_all(size_t *n);
const mesh_option_t *options_by_id(int id);
const mesh_option_t *options_by_name(const char *name);
const mesh_option_t *options_by_key(const char *key);
/* The closest long option to a mistyped one (without "--"), or NULL. */
const char *options_suggest(const char *typed);

/* The subcommands (mesh-llm COMMAND ...). */
typedef struct {
    const char *name;
    const char *args;    /* its usage after the name */
    const char *summary; /* one line */
    const char *help;    /* the rest of its help text (may be NULL) */
} mesh_command_t;
const mesh_command_t *options_commands(size_t *n);
const mesh_command_t *options_command(const char *name);
const char *options_command_suggest(const char *typed);

/* The MESH_LLM_* environment variables the node reads (the four that stand for an option are
 * also in the option table's env field). Each call site names its variable, and a timer's call
 * site takes its default from here (options_env_ms), so the code and the docs cannot disagree;
 * tests/integration/test_cli.py checks that every variable the sources name is listed and that
 * every listed one is read. tunables_load (tunables.h) reads every one that does not stand for
 * an option into one typed struct, driven by the kind, field and range columns of this table. */
enum {
    ENVF_TEST = 1u << 0,   /* for tests and benchmarks only */
    ENVF_SECRET = 1u << 1, /* its value is a secret */
};
/* How tunables_load (tunables.h) reads a variable into its field of tunables_t: one kind per
 * parser the call sites use today, so that moving a call site to its tunable changes nothing.
 * An empty value counts as unset. A value a kind does not accept leaves the default (and is
 * reported). Every switch is a TUN_BOOL, one rule for all (S11 unified three). */
typedef enum {
    TUN_NONE = 0, /* not filled in: tests/unit/test_tunables.c refuses the row */
    TUN_MS,       /* uint64_t: a decimal integer min..max, min 1, max 7 days (util.c:env_ms) */
    TUN_MS0,      /* uint64_t: the same, 0 .. 1 day (admission.c:env_ms0) */
    TUN_U64,      /* uint64_t: a decimal integer min..max (parse_u64: digits only) */
    TUN_ULONG,    /* uint64_t: strtoul's syntax (leading space, sign), min..max (speed.c) */
    TUN_BOOL,     /* bool: 0..max (true when not 0) or off/on, false/true, no/yes, any case */
    TUN_TEXT,     /* char[TUN_PATH_MAX]: the value as is ("" when unset) */
    TUN_CHOICE,   /* char[TUN_CHOICE_MAX]: one of the words of unit ("a|b|c"); default def */
    TUN_OPTION,   /* stands for an option (its env field): read with the options by config*.c,
                     bin_find.c, nostr_pool.c, cli_status.c; no field of tunables_t */
} tun_kind_t;
#define TUN_MS_MAX (86400000ULL * 7) /* 7 days */
#define TUN_MS0_MAX 86400000ULL      /* 1 day */
typedef struct {
    const char *name;
    uint64_t value;   /* the numeric default the code applies (0 for a text variable) */
    const char *def;  /* the default as shown; NULL: value */
    const char *unit; /* "ms", "bytes", "count", "path", "text", ... */
    unsigned flags;   /* ENVF_* */
    const char *help;
    tun_kind_t kind;   /* how it is read (TUN_OPTION: with the options) */
    size_t off;        /* its field: offsetof(tunables_t, ...) */
    uint64_t min, max; /* the numbers accepted (TUN_MS, TUN_MS0, TUN_U64, TUN_ULONG, TUN_BOOL) */
} mesh_env_t;
const mesh_env_t *options_env_all(size_t *n);
const mesh_env_t *options_env(const char *name); /* NULL: not in the table */
/* The table's numeric default of variable name (0 when it is not in the table). */
uint64_t options_env_default(const char *name);
/* env_ms(name, its table default): a timer in ms, 1 ms .. 7 days, else the default. */
uint64_t options_env_ms(const char *name);

/* mesh-llm --help */
void options_usage(FILE *out);
/* mesh-llm help COMMAND: its usage and help text */
void options_command_usage(const mesh_command_t *c, FILE *out);
/* mesh-llm help environment: the variables with their defaults */
void options_env_usage(FILE *out);
/* docs/cli.md (mesh-llm --help-markdown) */
void options_markdown(FILE *out);

#endif

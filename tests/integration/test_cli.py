"""The command line a new user meets (issue 26, item 7) and the config file: --help agrees with
what the binary does, `mesh-llm help [COMMAND]`, "did you mean", `mesh-llm config check`, a node
configured from a file, and the CLI reference generated from the option table."""
import os
import re
import subprocess

from harness.node import MESH_BIN, ROOT, cmdline, free_port, model_path, wait_for

DOCS = os.path.join(ROOT, "docs")
COMMANDS = ["status", "join", "assign", "unassign", "models", "download", "discover", "config", "claude", "codex",
            "opencode", "pi", "help"]


def run(*args, env=None, timeout=20):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([MESH_BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=e)


def test_help_lists_the_commands_and_what_model_accepts():
    r = run("--help")
    assert r.returncode == 0
    for c in COMMANDS:
        assert re.search(rf"^\s+mesh-llm {c}\s", r.stdout, re.M), f"{c} missing from --help"
    model = r.stdout[r.stdout.index("--model "):r.stdout.index("--models-dir")]
    for src in ("catalog name", "hf://", "https://"):
        assert src in model, f"--model help does not say it accepts {src}"
    assert "not downloaded" not in r.stdout
    assert "--config FILE" in r.stdout


def test_help_command_and_command_help():
    r = run("help")
    assert r.returncode == 0 and "Usage: mesh-llm [OPTIONS]" in r.stdout
    for c in COMMANDS:
        r = run("help", c)
        assert r.returncode == 0 and r.stdout.startswith(f"Usage: mesh-llm {c} "), (c, r)
    r = run("status", "--help")
    assert r.returncode == 0 and r.stdout.startswith("Usage: mesh-llm status ")
    r = run("help", "sttaus")
    assert r.returncode == 2 and "did you mean 'status'?" in r.stderr


def test_unknown_option_hint_once_with_suggestion():
    r = run("--prot", "9000")
    assert r.returncode == 2
    assert "unknown option '--prot'; did you mean --port?" in r.stderr
    assert r.stderr.count("--help") == 1, r.stderr
    r = run("--modle=x.gguf")
    assert r.returncode == 2 and "did you mean --model?" in r.stderr
    r = run("--frobnicate")
    assert r.returncode == 2 and "did you mean" not in r.stderr and "--frobnicate" in r.stderr


def test_unknown_command_suggestion():
    r = run("stauts")
    assert r.returncode == 2 and "did you mean 'mesh-llm status'?" in r.stderr, r.stderr
    r = run("dowload", "x")
    assert r.returncode == 2 and "did you mean 'mesh-llm download'?" in r.stderr


def test_config_check_reports_lines_and_unknown_keys(tmp_path):
    f = tmp_path / "bad.cfg"
    f.write_text("# comment\n"
                 "api = {\n"
                 "  prot = 9000;\n"
                 "};\n"
                 "mesh = { split = \"yes\"; };\n"
                 "modles = [\"a.gguf\"];\n")
    r = run("config", "check", str(f))
    assert r.returncode == 2
    assert f"{f}:3: unknown key 'api.prot'; did you mean 'api.port'?" in r.stdout
    assert f"{f}:5: mesh.split takes true or false" in r.stdout
    assert f"{f}:6: unknown key 'modles'; did you mean 'models'?" in r.stdout
    f.write_text("api = {\n  port = ;\n};\n")
    r = run("config", "check", str(f))
    assert r.returncode == 2 and f"{f}:2: syntax error" in r.stdout
    # the node refuses the same file, naming the line
    r = run("--config", str(f))
    assert r.returncode == 2 and f"{f}:2:" in r.stderr


def test_config_md_example_is_valid(tmp_path):
    text = open(os.path.join(DOCS, "config.md")).read()
    blocks = re.findall(r"```libconfig\n(.*?)```", text, re.S)
    assert len(blocks) == 1
    f = tmp_path / "example.cfg"
    f.write_text(blocks[0])
    r = run("config", "check", str(f))
    assert r.returncode == 0 and r.stdout.strip() == f"{f}: OK", r.stdout


def test_cli_md_is_generated_from_the_table():
    """docs/cli.md is `mesh-llm --help-markdown`; regenerate it after editing the table."""
    r = run("--help-markdown")
    assert r.returncode == 0
    with open(os.path.join(DOCS, "cli.md")) as f:
        assert f.read() == r.stdout, "docs/cli.md is stale: build/mesh-llm --help-markdown > docs/cli.md"
    # every option of the reference is in --help, and every config key of it passes check
    helptext = run("--help").stdout
    for opt in re.findall(r"^\| `(?:-\w, )?(--[\w-]+)", r.stdout, re.M):
        assert re.search(rf"{opt}\b", helptext), f"{opt} in docs/cli.md but not in --help"
    for c in COMMANDS:
        assert f"### mesh-llm {c}\n" in r.stdout


def source_env_reads():
    """{name: path} of the MESH_LLM_* names in the C sources' string literals (comments skipped),
    outside the table itself, and {name: {(literal default, path)}} of the env_ms/env_ms0 calls
    that still name one (directly or through a #define); and the getenv("MESH_LLM_...") calls
    outside node/{options,tunables,config*}.c, as [(path, name)]."""
    src = os.path.join(ROOT, "src")
    token = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|/\*.*?\*/|//[^\n]*', re.S)
    names, codes, macros, defaults, getenvs = {}, {}, {}, {}, []
    for d, _, files in os.walk(src):
        for fn in files:
            path = os.path.join(d, fn)
            if not fn.endswith((".c", ".h")) or os.path.relpath(path, src) == "node/options.c":
                continue
            with open(path) as f:
                text = f.read()
            code = token.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else " ", text)
            for lit in re.findall(r'"(?:[^"\\\n]|\\.)*"', code):
                for n in re.findall(r"MESH_LLM_[A-Z0-9_]+", lit):
                    names.setdefault(n, path)
            codes[path] = code
            macros.update(re.findall(r'#define\s+(\w+)\s+"(MESH_LLM_\w+)"', code))
            rel = os.path.relpath(path, src)
            if not re.match(r"node/(options|tunables|config\w*)\.c$", rel):
                getenvs += [(rel, n) for n in re.findall(r'getenv\(\s*"(MESH_LLM_\w+)"', code)]
    for path, code in codes.items():
        for ref, lit in re.findall(r'\benv_ms0?\(\s*("?\w+"?)\s*,\s*(\d+)\s*\)', code):
            defaults.setdefault(macros.get(ref, ref.strip('"')), set()).add((int(lit), path))
    return names, defaults, getenvs


def test_every_environment_variable_is_in_the_table():
    """Every MESH_LLM_* variable a source names is in the table (docs/cli.md's environment
    section, mesh-llm help environment); every listed one is read — by tunables_load, which
    reads every row (tests/unit/test_tunables.c checks each row has its field and parser), or,
    for the variables of options, by the option code; no getenv("MESH_LLM_...") outside
    node/{options,tunables,config*}.c but the reads tests/tools/check_env.sh still lists (issue
    30 S11); and a call site that still gives its default as a literal gives the table's."""
    md = run("--help-markdown").stdout
    assert "## Environment variables" in md
    table = dict(re.findall(r"^\| `(MESH_LLM_\w+)` \| ([^|]+?) \|", md, re.M))
    names, defaults, getenvs = source_env_reads()
    missing = sorted(set(names) - set(table))
    assert not missing, f"read by the sources, not in ENV_VARS of src/node/options.c: " + \
        ", ".join(f"{n} ({names[n]})" for n in missing)
    # the variables of options are read with them (config_secrets.c, bin_find.c, nostr_pool.c)
    for name in ("MESH_LLM_JOIN", "MESH_LLM_API_KEY", "MESH_LLM_BIN_DIR", "MESH_LLM_NOSTR_RELAYS"):
        assert name in names and name in table, name
    with open(os.path.join(ROOT, "tests", "tools", "check_env.sh")) as f:
        pending = set(re.findall(r"^(\S+\.c) (MESH_LLM_\w+) ", f.read(), re.M))
    stray = sorted(set(getenvs) - pending)
    assert not stray, "getenv of a tunable at a call site (take it from config_t.tun / the " \
        f"opts given at init): {stray}"
    helpenv = run("help", "environment")
    assert helpenv.returncode == 0
    assert set(re.findall(r"^  (MESH_LLM_\w+)$", helpenv.stdout, re.M)) == set(table)
    for name, sites in sorted(defaults.items()):
        for lit, path in sites:
            if lit == 0 and not table[name].isdigit():
                continue  # 0: the code computes the default, which the table describes
            assert table[name].isdigit() and int(table[name]) == lit, \
                f"{path}: {name} defaults to {lit}, the table says {table[name]}"
    assert "help environment" in run("--help").stdout
    # docs/timings.md names every timer, with the table's default where a row gives one number
    with open(os.path.join(DOCS, "timings.md")) as f:
        timings = f.read()
    timers = re.findall(r"^\| `(MESH_LLM_\w+)` \| [^|]+ \| ms", md, re.M)
    assert len(timers) > 30
    for name in timers:
        assert f"`{name}`" in timings, f"{name} is a timer missing from docs/timings.md"
    rows = re.findall(r"^\| [^|]+ \| (\d+) \| `(MESH_LLM_\w+)` \|", timings, re.M)
    assert len(rows) > 10
    for value, name in rows:
        assert table[name] == value, f"docs/timings.md: {name} {value}, the table: {table[name]}"


def test_node_reads_its_home_config(start_node, tmp_path):
    """$MESH_LLM_HOME/config, read without --config: the API port and a per-model ctx_size and
    slots (llama-server gets slots x ctx_size)."""
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    (home / "config").write_text(
        "# a node from its config file\n"
        f"api = {{ port = {port}; }};\n"
        f"models = ( {{ model = \"{model_path('stories260K')}\"; ctx_size = 320; slots = 3; }} "
        ");\n")
    n = start_node(env={"MESH_LLM_HOME": str(home)})
    assert n.api_port == port
    _, _, argv = wait_for(lambda: n.child_for("stories260K"), timeout=30, what="the child")
    assert argv[argv.index("--ctx-size") + 1] == "960" and argv[argv.index("-np") + 1] == "3"
    assert f"settings read from {home}/config" in n.stderr()
    # a flag overrides the file
    n.stop()
    m = start_node("--port", "0", env={"MESH_LLM_HOME": str(home)})
    assert m.api_port != port


def test_join_token_from_config_file_stays_secret(start_node, tmp_path):
    a = start_node("--model", model_path("stories260K"), "--port", "0")
    cfg = tmp_path / "b.cfg"
    cfg.write_text(f"mesh = {{ join = \"{a.token}\"; }};\napi = {{ port = 0; }};\n")
    os.chmod(cfg, 0o600)
    b = start_node("--config", str(cfg))
    wait_for(lambda: a.id in b.peer_states(), timeout=30, what="B sees A")
    err = b.stderr()
    assert "on the command line" not in err and "chmod 600" not in err
    assert a.token not in err
    secret = a.token
    for pid in [b.pid] + list(b.child_pids):
        assert not any(secret in arg for arg in cmdline(pid))
    b.stop()
    # the same file readable by others: a warning, still no token in the log
    os.chmod(cfg, 0o644)
    c = start_node("--config", str(cfg))
    assert "chmod 600" in c.stderr() and a.token not in c.stderr()

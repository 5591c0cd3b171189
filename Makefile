# mesh-llm — the two commands: `make run` and `make test`. Everything else is optional.
#   make            build build/mesh-llm and (once) the pinned llama.cpp it runs (installs
#                   missing Debian packages)
#   make llama      build (once) or locate the pinned llama.cpp binaries
#   make install    PREFIX (default /usr/local; DESTDIR honoured): bin/mesh-llm, the llama.cpp
#                   it runs in libexec/mesh-llm/cpu, the man page, the systemd user unit
#   make uninstall  remove what make install installed (same PREFIX and DESTDIR)
#   make run        start a node serving MODEL=path/to/model.gguf (default: first ~/.models/*.gguf)
#   make test       unit, integration, 60 s chaos soak, the same under ASan+UBSan, fuzz smoke;
#                   ends with one line per stage: passed, failed, skipped and why (summary.py)
#   make fuzz       every libFuzzer target for FUZZ_SECONDS each (tests/fuzz/README.md)
#   make bench      benchmarks against plain llama.cpp
PYTHON   ?= /usr/bin/python3
BUILD    ?= build
ASAN     ?= build-asan
FUZZ     ?= build-fuzz
FUZZ_SECONDS ?= 300
MODEL    ?=
ARGS     ?=
PYTEST_ARGS ?=
GEN      := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all install uninstall deps deps-test llama llama-vulkan build build-asan build-fuzz run test unit integration soak-smoke asan fuzz-smoke fuzz soak soak-smoke bench bench-model bench-replicas bench-tunnel-impaired bench-sse bench-split-speed bench-split-latency format clean

all: build llama

# tests and benchmarks send nothing to this machine's router (no port mapping: the network rule)
test unit integration asan soak soak-smoke fuzz-smoke bench bench-%: export MESH_LLM_PORTMAP = 0

# make install / uninstall (docs/install.md); FLAVOUR: the llama.cpp build's flavour (cpu, vulkan,
# cuda, rocm: scripts/llama.sh --flavour, recorded by CMake; src/node/bin_find.c)
PREFIX   ?= /usr/local
DESTDIR  ?=
FLAVOUR  = $(shell cat $(BUILD)/llama-flavour 2>/dev/null || echo cpu)
LLAMA_BINS := llama-server ggml-rpc-server
I_BIN    = $(DESTDIR)$(PREFIX)/bin
I_LIBEXEC = $(DESTDIR)$(PREFIX)/libexec/mesh-llm
I_MAN    = $(DESTDIR)$(PREFIX)/share/man/man1
I_UNIT   = $(DESTDIR)$(PREFIX)/lib/systemd/user

# the build's llama.cpp (recorded by CMake: sudo make install, whose HOME is root's, finds it),
# else scripts/llama.sh's (which builds it when missing)
install: build
	@set -e; llama="$$(cat $(BUILD)/llama-bin-dir)"; \
	[ -x "$$llama/llama-server" ] || llama="$$(scripts/llama.sh)"; \
	install -d "$(I_BIN)" "$(I_LIBEXEC)/$(FLAVOUR)" "$(I_MAN)" "$(I_UNIT)"; \
	install -m 755 $(BUILD)/mesh-llm "$(I_BIN)/mesh-llm"; \
	for b in $(LLAMA_BINS); do install -m 755 "$$llama/$$b" "$(I_LIBEXEC)/$(FLAVOUR)/$$b"; done; \
	for so in "$$llama"/*.so*; do [ ! -e "$$so" ] || cp -P "$$so" "$(I_LIBEXEC)/$(FLAVOUR)/"; done; \
	[ ! -f "$$llama/FLAVOUR" ] || install -m 644 "$$llama/FLAVOUR" "$(I_LIBEXEC)/$(FLAVOUR)/FLAVOUR"; \
	install -m 644 $(BUILD)/mesh-llm.1 "$(I_MAN)/mesh-llm.1"; \
	$(BUILD)/mesh-llm service unit --exec "$(PREFIX)/bin/mesh-llm" >"$(I_UNIT)/mesh-llm.service"; \
	chmod 644 "$(I_UNIT)/mesh-llm.service"; \
	echo "installed $(PREFIX)/bin/mesh-llm (llama.cpp in $(PREFIX)/libexec/mesh-llm/$(FLAVOUR))"

uninstall:
	rm -f "$(I_BIN)/mesh-llm" "$(I_MAN)/mesh-llm.1" "$(I_UNIT)/mesh-llm.service"
	rm -rf "$(I_LIBEXEC)"

deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test

llama: deps
	@scripts/llama.sh >/dev/null

# the Vulkan flavour too, for the GPU path's tests on Mesa's lavapipe (tests/integration/test_gpu_vulkan.py)
llama-vulkan: deps-test
	@MESH_LLM_FLAVOR=vulkan scripts/llama.sh >/dev/null

build: deps
	@[ -f $(BUILD)/CMakeCache.txt ] || cmake -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESH_TESTS=ON >/dev/null
	@cmake --build $(BUILD) -j$$(nproc)

build-asan: deps-test
	@[ -f $(ASAN)/CMakeCache.txt ] || cmake -S . -B $(ASAN) $(GEN) -DCMAKE_BUILD_TYPE=Debug -DMESH_SANITIZE=ON -DMESH_TESTS=ON >/dev/null
	@cmake --build $(ASAN) -j$$(nproc)

build-fuzz: deps-test
	@[ -f $(FUZZ)/CMakeCache.txt ] || CC=clang cmake -S . -B $(FUZZ) $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESH_FUZZ=ON -DMESH_TESTS=OFF >/dev/null
	@cmake --build $(FUZZ) -j$$(nproc) --target fuzzers

run: build
	@scripts/run.sh "$(MODEL)" $(ARGS)

# the stages, then tests/tools/summary.py: one line per stage (passed, failed, skipped with the
# skipped tests' names and reasons) from ctest's logs and the junit files the pytest runs write to
# $(BUILD)/junit/; printed when a stage fails too, whose exit status make test keeps
test: deps-test llama llama-vulkan
	@[ -f $(BUILD)/CMakeCache.txt ] && grep -q 'CMOCKA_FOUND:INTERNAL=1' $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESH_TESTS=ON >/dev/null
	@$(MAKE) --no-print-directory build build-asan
	@mkdir -p $(BUILD)/junit && touch $(BUILD)/junit/.start
	@st=0; $(MAKE) --no-print-directory unit integration soak-smoke asan fuzz-smoke || st=$$?; \
	  $(PYTHON) tests/tools/summary.py --build $(BUILD) --asan $(ASAN) --fuzz $(FUZZ) \
	    --since $(BUILD)/junit/.start; exit $$st

unit:
	@echo "== unit tests"
	@ctest --test-dir $(BUILD) --output-on-failure

integration:
	@echo "== integration tests (real llama-server children, shared models)"
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" MESH_LLM_BIN=$(CURDIR)/$(BUILD)/mesh-llm \
	  MESH_LLM_VULKAN_BIN_DIR="$$(MESH_LLM_FLAVOR=vulkan scripts/llama.sh --cache-dir)" \
	  $(PYTHON) -m pytest -q -rs -p no:cacheprovider --junitxml=$(BUILD)/junit/integration.xml \
	  tests/integration $(PYTEST_ARGS)

asan:
	@echo "== unit tests under ASan+UBSan"
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir $(ASAN) --output-on-failure
	@echo "== integration tests under ASan+UBSan"
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" MESH_LLM_BIN=$(CURDIR)/$(ASAN)/mesh-llm \
	  MESH_LLM_VULKAN_BIN_DIR="$$(MESH_LLM_FLAVOR=vulkan scripts/llama.sh --cache-dir)" \
	  $(PYTHON) -m pytest -q -rs -p no:cacheprovider --junitxml=$(BUILD)/junit/integration-asan.xml \
	  tests/integration $(PYTEST_ARGS)

fuzz-smoke: build-fuzz
	@echo "== fuzz smoke (libFuzzer: seed corpora + bounded new inputs)"
	@scripts/fuzz.sh smoke $(FUZZ)

# chaos soak: faults under load over impaired links (tests/soak, tests/harness/soak.py)
SOAK_SECONDS ?= 600
soak: build
	@echo "== chaos soak ($(SOAK_SECONDS) s)"
	@SOAK_SECONDS=$(SOAK_SECONDS) MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" MESH_LLM_BIN=$(CURDIR)/$(BUILD)/mesh-llm \
	  $(PYTHON) -m pytest -q -s -rs -p no:cacheprovider --junitxml=$(BUILD)/junit/soak.xml \
	  tests/soak $(PYTEST_ARGS)

# the 60-second chaos soak, part of make test: the release build, then the ASan build
soak-smoke:
	@echo "== chaos soak, 60 s (release build)"
	@SOAK_SECONDS=60 MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" MESH_LLM_BIN=$(CURDIR)/$(BUILD)/mesh-llm \
	  $(PYTHON) -m pytest -q -rs -p no:cacheprovider --junitxml=$(BUILD)/junit/soak-smoke.xml tests/soak
	@echo "== chaos soak, 60 s (ASan+UBSan build)"
	@SOAK_SECONDS=60 MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" MESH_LLM_BIN=$(CURDIR)/$(ASAN)/mesh-llm \
	  $(PYTHON) -m pytest -q -rs -p no:cacheprovider --junitxml=$(BUILD)/junit/soak-smoke-asan.xml \
	  tests/soak

fuzz: build-fuzz
	@FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh long $(FUZZ)

# the realistic-size benchmark model (scripts/bench-model.sh), made once
BENCH_MODEL ?= $(or $(MESH_LLM_CACHE),$(HOME)/.cache/mesh-llm)/bench/synth-363m.gguf

bench-model: build
	@scripts/bench-model.sh $(BUILD)/mesh-gguf-synth $(BENCH_MODEL)

# proxy and route run twice: the tiny shared model (thousands of tokens/s: the worst case for
# any per-token cost) and the realistic-size one (tens of tokens/s, like a small real model)
bench: build llama bench-model
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/proxy
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/proxy --model $(BENCH_MODEL) --tokens 64
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/route --mesh-llm $(BUILD)/mesh-llm
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/route --mesh-llm $(BUILD)/mesh-llm --model $(BENCH_MODEL) --rounds 20 --tokens 64 --concurrency 8
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/split --mesh-llm $(BUILD)/mesh-llm
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/split-heal --mesh-llm $(BUILD)/mesh-llm
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/rpc-clients --model $(BENCH_MODEL)
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/switch
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/prefix --mesh-llm $(BUILD)/mesh-llm
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/sse --mesh-llm $(BUILD)/mesh-llm
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/failure-detect --mesh-llm $(BUILD)/mesh-llm
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/nat --mesh-llm $(BUILD)/mesh-llm
	@$(MAKE) --no-print-directory bench-replicas
	@$(MAKE) --no-print-directory bench-download
	@$(BUILD)/mesh-bench-tunnel
	@$(MAKE) --no-print-directory bench-tunnel-impaired
	@$(MAKE) --no-print-directory bench-split-latency
	@$(MAKE) --no-print-directory bench-split-draft
	@$(MAKE) --no-print-directory bench-split-speed
	@$(BUILD)/mesh-bench-gossip
	@$(BUILD)/mesh-bench-route-sim

# one model on one node vs two (llama-server -t 1 each), 8 streams through a client node
bench-replicas: build llama bench-model
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/replicas --mesh-llm $(BUILD)/mesh-llm
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/replicas --mesh-llm $(BUILD)/mesh-llm --model $(BENCH_MODEL) --tokens 32 --rounds 1

# the QUIC tunnel vs TCP across one impaired link (RTT 1-50 ms, loss 0-3 %), mesh-netimp
bench-tunnel-impaired: build
	@$(PYTHON) bench/tunnel-impaired --build $(BUILD)

# speculative decoding on a split: the 363M model over 2 namespaced nodes at RTT 5/20 ms, with and
# without a draft on the host (bench/split-draft; needs root for the namespaces)
.PHONY: bench-split-draft
bench-split-draft: build llama bench-model
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/split-draft --mesh-llm $(BUILD)/mesh-llm --model $(BENCH_MODEL)

# the 363M model split over 2 and 3 nodes in network namespaces at RTT 0-50 ms (mesh-netimp):
# mesh vs plain llama-server --rpc over TCP vs solo; round trips and bytes per token, the bound
bench-split-latency: build llama bench-model
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/split-latency --mesh-llm $(BUILD)/mesh-llm --model $(BENCH_MODEL)

# 50 console clients on /api/events of a 10-node mesh: node CPU and RSS
bench-sse: build llama
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/sse --mesh-llm $(BUILD)/mesh-llm

# kill -9 at default settings: detection, first answer, mesh-wide agreement (p50/p99)
.PHONY: bench-failure-detect
bench-failure-detect: build llama
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/failure-detect --mesh-llm $(BUILD)/mesh-llm

# mesh-llm's downloader (CLI and a node's /api/v1/load) vs curl -o, 128 MiB from a local server
.PHONY: bench-split-speed
# speed-aware vs memory-proportional split, one node limited by a cgroup CPU quota (root)
bench-split-speed: build llama bench-model
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/split-speed --mesh-llm $(BUILD)/mesh-llm --model $(BENCH_MODEL)

.PHONY: bench-download
bench-download: build llama
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/download --mesh-llm $(BUILD)/mesh-llm

format:
	@clang-format -i src/*/*.c src/*/*.h tests/unit/*.c tests/fuzz/*.c

clean:
	rm -rf $(BUILD) $(ASAN) $(FUZZ)

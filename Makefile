# mesh-llm — the two commands: `make run` and `make test`. Everything else is optional.
#   make            build build/mesh-llm (installs missing Debian packages)
#   make llama      build (once) or locate the pinned llama.cpp binaries
#   make run        start a node serving MODEL=path/to/model.gguf (default: first ~/.models/*.gguf)
#   make test       unit tests, integration tests, unit tests again under ASan+UBSan
#   make bench      benchmarks against plain llama.cpp
PYTHON   ?= /usr/bin/python3
BUILD    ?= build
ASAN     ?= build-asan
MODEL    ?=
ARGS     ?=
PYTEST_ARGS ?=
GEN      := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all deps deps-test llama build build-asan run test unit integration asan bench format clean

all: build

deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test

llama: deps
	@scripts/llama.sh >/dev/null

build: deps
	@[ -f $(BUILD)/CMakeCache.txt ] || cmake -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESH_TESTS=ON >/dev/null
	@cmake --build $(BUILD) -j$$(nproc)

build-asan: deps-test
	@[ -f $(ASAN)/CMakeCache.txt ] || cmake -S . -B $(ASAN) $(GEN) -DCMAKE_BUILD_TYPE=Debug -DMESH_SANITIZE=ON -DMESH_TESTS=ON >/dev/null
	@cmake --build $(ASAN) -j$$(nproc)

run: build
	@scripts/run.sh "$(MODEL)" $(ARGS)

test: deps-test llama
	@[ -f $(BUILD)/CMakeCache.txt ] && grep -q 'CMOCKA_FOUND:INTERNAL=1' $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESH_TESTS=ON >/dev/null
	@$(MAKE) --no-print-directory build build-asan
	@$(MAKE) --no-print-directory unit integration asan

unit:
	@echo "== unit tests"
	@ctest --test-dir $(BUILD) --output-on-failure

integration:
	@echo "== integration tests (real llama-server children, shared models)"
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" MESH_LLM_BIN=$(CURDIR)/$(BUILD)/mesh-llm \
	  $(PYTHON) -m pytest -q -p no:cacheprovider tests/integration $(PYTEST_ARGS)

asan:
	@echo "== unit tests under ASan+UBSan"
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir $(ASAN) --output-on-failure
	@echo "== integration tests under ASan+UBSan"
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" MESH_LLM_BIN=$(CURDIR)/$(ASAN)/mesh-llm \
	  $(PYTHON) -m pytest -q -p no:cacheprovider tests/integration $(PYTEST_ARGS)

bench: build llama
	@MESH_LLM_BIN_DIR="$$(scripts/llama.sh)" $(PYTHON) bench/proxy

format:
	@clang-format -i src/*.c src/*.h tests/unit/*.c

clean:
	rm -rf $(BUILD) $(ASAN)

# The user-facing commands. Each target sets up what it needs first, so on a
# fresh machine `make run` and `make test` are all a user types.
#   make run     set up, build, run the main job on the emulated device
#   make test    set up, build, run every test (format, GoogleTest, pytest,
#                the upstream test relay, the C++ tests under ASan+UBSan
#                and TSan, and each fuzz target for FUZZ_SECONDS)
#   make bench   run every benchmark; one JSON file each in bench-results/
#   make sweep   run every text architecture of transformers (tiny seeded
#                configs) on spyre against the CPU, eager/strict/compiled/
#                generate; sweep-results/sweep.json, sweep.md and a plot
#   make fuzz    each libFuzzer target (clang) for FUZZ_SECONDS from the kept
#                corpus; fails on any finding
#   make fuzz-corpus  runs `make fuzz`, then keeps the inputs that found new
#                coverage in the corpus (commit them)
#   make soak    a tiny transformer on spyre for SOAK_SECONDS (120): results
#                checked, device memory and host RSS flat
#   make relay-opmap  re-records test/relay/op_map.json (the ATen ops each
#                test dispatches to spyre; `select --diff` reads it)
#   make asan / make tsan / make format / make format-check / make clean

PYTHON ?= python3
JOBS ?= $(shell nproc)
BUILD_DIR ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DSPYRE_WERROR=ON
SETUP_STAMP := $(BUILD_DIR)/.setup-done
CXX_SOURCES = $(shell git ls-files '*.cpp' '*.h' 2>/dev/null)

.PHONY: all setup build python run test test-cpp test-python test-python-after-relay test-relay tsan-build tsan-tests relay-opmap soak bench sweep asan tsan \
        fuzz fuzz-corpus format format-check clean

all: build

# Idempotent: installs only what is missing (see scripts/setup.sh).
setup: $(SETUP_STAMP)
$(SETUP_STAMP): scripts/setup.sh
	bash scripts/setup.sh
	@mkdir -p $(BUILD_DIR) && touch $@

build: setup
	cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_FLAGS)
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The PyTorch extension, built in place against the installed torch wheel.
python: build
	@if [ -f csrc/CMakeLists.txt ]; then \
	  $(PYTHON) -m pip install --no-build-isolation --no-deps -q -e . ; fi

run: python
	$(PYTHON) scripts/main_job.py

test-cpp: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# --durations: the slowest tests in every log, to keep `make test` short.
PYTEST = $(PYTHON) -m pytest -q --durations=25 test/python
test-python: python
	$(PYTEST)

# `make test` runs the relay first; the pytest run then checks the relay's
# reports (test_relay_opinfo.py) on that full run instead of running the
# OpInfo forward tests a second time.
test-python-after-relay: test-relay
	SPYRE_RELAY_REPORTS=test-results $(PYTEST)

# The upstream test relay with the project's config (docs/relay.md); its JSON
# summary and JUnit XML are the CI artefacts in test-results/.
test-relay: python
	$(PYTHON) -m torch_spyre.testing validate --strict test/relay/spyre.yaml
	$(PYTHON) -m torch_spyre.testing run --config test/relay/spyre.yaml \
	  --report-dir test-results

# Refreshes test/relay/op_map.json, the ATen ops each test dispatches to
# spyre, which `select --diff` reads (about 4 minutes).
relay-opmap: python
	$(PYTHON) -m torch_spyre.testing record-ops --config test/relay/spyre.yaml

SOAK_SECONDS ?= 120
soak: python
	SPYRE_SOAK_SECONDS=$(SOAK_SECONDS) $(PYTHON) -m pytest -q -s \
	  test/python/test_robustness.py -k soak

# The relay and pytest keep about one of the two cores busy (subprocesses
# starting, servers, the emulator thread), and TSan's C++ tests need about
# 13 minutes of one core: `make test` runs them side by side, TSan's ctest on
# one job, its log printed after the Python tests. Same tests, same checks.
test: format-check test-cpp asan tsan-build fuzz
	@$(MAKE) --no-print-directory tsan-tests TSAN_JOBS=1 > build-tsan/tests.log 2>&1 & \
	tsan=$$!; \
	$(MAKE) --no-print-directory test-python-after-relay; python=$$?; \
	wait $$tsan; tsan_status=$$?; \
	echo "== TSan C++ tests (run beside the Python tests): build-tsan/tests.log"; \
	cat build-tsan/tests.log; \
	test $$python -eq 0 && test $$tsan_status -eq 0

# Sanitizer builds run the C++ tests only (the Python extension would need a
# sanitized interpreter). Each keeps its own build directory.
asan: setup
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSPYRE_WERROR=ON -DSPYRE_BUILD_BENCHMARKS=OFF -DSPYRE_SANITIZE='address;undefined'
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 SPYRE_SIM_MEMORY_GB=16 SPYRE_SIM_INLINE_CYCLES=0 \
	  ctest --test-dir build-asan --output-on-failure -j $(JOBS)

tsan: tsan-build
	$(MAKE) --no-print-directory tsan-tests

tsan-build: setup
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSPYRE_WERROR=ON -DSPYRE_BUILD_BENCHMARKS=OFF -DSPYRE_SANITIZE=thread
	cmake --build build-tsan -j $(JOBS)

TSAN_JOBS ?= $(JOBS)
tsan-tests:
	TSAN_OPTIONS=halt_on_error=1 SPYRE_SIM_MEMORY_GB=16 SPYRE_SIM_INLINE_CYCLES=0 \
	  ctest --test-dir build-tsan --output-on-failure -j $(TSAN_JOBS)

# Coverage-guided fuzzing (clang's libFuzzer, with ASan+UBSan). Each target
# starts from its kept corpus (read only) and writes what it finds to a
# scratch directory; a crash, leak, timeout or sanitizer report fails the
# run and leaves the input in $(FUZZ_DIR) (crash-*, timeout-*).
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = program_loader_fuzzer:test/data/program_corpus

fuzz: setup
	cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DSPYRE_WERROR=ON \
	  -DSPYRE_BUILD_BENCHMARKS=OFF -DSPYRE_BUILD_FUZZERS=ON
	@set -e; for entry in $(FUZZ_TARGETS); do \
	  target=$${entry%%:*}; corpus=$${entry#*:}; \
	  cmake --build $(FUZZ_DIR) -j $(JOBS) --target $$target; \
	  rm -rf $(FUZZ_DIR)/found-$$target; mkdir -p $(FUZZ_DIR)/found-$$target; \
	  echo "fuzz: $$target for $(FUZZ_SECONDS) s from $$corpus"; \
	  (cd $(FUZZ_DIR) && ./bin/$$target -max_total_time=$(FUZZ_SECONDS) \
	    -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
	    found-$$target $(CURDIR)/$$corpus); \
	done

fuzz-corpus: fuzz
	@set -e; for entry in $(FUZZ_TARGETS); do \
	  target=$${entry%%:*}; corpus=$${entry#*:}; \
	  $(FUZZ_DIR)/bin/$$target -merge=1 $$corpus $(FUZZ_DIR)/found-$$target; \
	done

bench: python
	@mkdir -p bench-results
	$(PYTHON) benchmarks/run_all.py --build-dir $(BUILD_DIR) --out bench-results

# One child process per architecture; resumable with
# `python -m torch_spyre.models sweep --out sweep-results --resume`.
sweep: python
	$(PYTHON) -m torch_spyre.models sweep --out sweep-results

format:
	clang-format -i $(CXX_SOURCES)

format-check: setup
	clang-format --dry-run -Werror $(CXX_SOURCES)

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan $(FUZZ_DIR) bench-results test-results

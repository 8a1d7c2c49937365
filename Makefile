# raio developer commands. Every target installs missing Debian packages first
# (scripts/install-deps.sh is idempotent), then configures and builds with Ninja.
BUILD_DIR ?= build
RELEASE_DIR ?= build-release
JOBS ?= 2
CMAKE_FLAGS ?=

ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 20

.PHONY: deps build demo lora test bench bench-llm bench-train bench-peers release sanitize sanitize-build \
  tsan tsan-build flake-hunt fuzz clean format

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main example on the embedded local cluster: distributed MLP training and a
# hyperparameter search on the UCI digits data set (examples/digits).
demo: build
	$(BUILD_DIR)/examples/digits/digits

# LoRA fine-tuning of the bundled stories260K model on quiz questions from bsdgames, with
# raio::train (2 data-parallel workers, a checkpoint per epoch) and the adapter served by
# the LLM engine (examples/lora). Each run gets a fresh name under $(BUILD_DIR)/lora_runs.
lora: build
	$(BUILD_DIR)/examples/lora/lora_quiz --storage $(abspath $(BUILD_DIR))/lora_runs

# Unit, integration and chaos tests (everything but the `slow` label).
# A failed test is rerun once with only its failed cases; one that then passes is reported
# FLAKY (scripts/run_tests.py).
test: build
	python3 scripts/run_tests.py --build-dir $(BUILD_DIR) --stage test -- -j $(JOBS) -LE slow

$(RELEASE_DIR)/build.ninja:
	cmake -S . -B $(RELEASE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DRAIO_BUILD_TESTS=OFF $(CMAKE_FLAGS)

release: deps $(RELEASE_DIR)/build.ninja
	cmake --build $(RELEASE_DIR) -j $(JOBS)

# Microbenchmarks, Release build; prints a table. Then the same paths on 3 nodes of this
# machine (head + 2 node daemons), each row beside its same-node figure, and the jobs API's
# submit-to-RUNNING latency and a 100-job burst (bench/README.md).
bench: release
	$(RELEASE_DIR)/bench/raio_bench
	$(RELEASE_DIR)/bench/multinode_bench
	/usr/bin/python3 bench/jobs_bench.py $(RELEASE_DIR)/bin/raio

# LLM serving on the bundled stories260K model: engine vs a plain C forward pass, and
# continuous vs static batching at 1-64 concurrent streams (bench/llm/README.md).
bench-llm: release
	$(RELEASE_DIR)/bench/llm/llm_bench

# Training: step time of raio::train (1 and 2 workers) vs a plain libtorch loop, all-reduce
# vs Gloo alone, checkpoint save/restore vs plain file copies (bench/train/README.md).
bench-train: release
	$(RELEASE_DIR)/bench/train/train_bench

# The same workloads on Dask distributed (Debian's python3-distributed, a LocalCluster with
# one worker process per CPU), side by side with the ratio; see bench/README.md.
bench-peers: release
	bash bench/peers.sh $(RELEASE_DIR)

# Unit and integration tests built with address and undefined-behaviour sanitizers (line
# tables only, -g1: reports keep file and line, the build is faster). The LLM
# library is left out: ASan refuses the RTLD_DEEPBIND load that keeps libsentencepiece's
# bundled protobuf apart from libprotobuf (docs/design/llm.md, "Known gaps").
ASAN_ENV = ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ASAN_CTEST_ARGS = -E install_standalone_project

sanitize-build: deps
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
	  -DRAIO_BUILD_BENCH=OFF -DRAIO_BUILD_LLM=OFF -DRAIO_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build $(ASAN_DIR) -j $(JOBS)

sanitize: sanitize-build
	$(ASAN_ENV) python3 scripts/run_tests.py --build-dir $(ASAN_DIR) --stage sanitize -- \
	  -j $(JOBS) -LE slow $(ASAN_CTEST_ARGS)

# Unit and integration tests under ThreadSanitizer, built with clang, which also checks the
# locking annotations (-Wthread-safety, as errors). Full debug info (-g): with line tables
# only, inlined frames lose their qualified names and tsan.supp's patterns stop matching.
# The LLM library, examples and benchmarks are left out. raio::Mutex is a std::mutex there
# (src/raio/common/mutex.h: TSan cannot see the uninstrumented absl::Mutex of Debian's
# abseil); tsan.supp lists what is suppressed.
TSAN_ENV = TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tsan.supp"
TSAN_CTEST_ARGS = -L "unit|integration" -E "install_standalone_project"

tsan-build: deps
	cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DRAIO_BUILD_BENCH=OFF -DRAIO_BUILD_LLM=OFF -DRAIO_BUILD_EXAMPLES=OFF \
	  -DRAIO_SANITIZE=thread -DRAIO_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(TSAN_DIR) -j $(JOBS)

tsan: tsan-build
	$(TSAN_ENV) python3 scripts/run_tests.py --build-dir $(TSAN_DIR) --stage tsan -- \
	  -j $(JOBS) -LE slow $(TSAN_CTEST_ARGS)

# The flake hunt (docs/design/testing.md): the plain suite FLAKE_REPS times, the ASan and
# TSan suites FLAKE_SANITIZER_REPS times each, with one core kept busy; prints how often
# each test case failed. FLAKE_BUILDS picks the builds (plain asan tsan).
FLAKE_REPS ?= 10
FLAKE_SANITIZER_REPS ?= 3
FLAKE_BUILDS ?= plain asan tsan
flake-hunt: $(if $(filter plain,$(FLAKE_BUILDS)),build) \
            $(if $(filter asan,$(FLAKE_BUILDS)),sanitize-build) \
            $(if $(filter tsan,$(FLAKE_BUILDS)),tsan-build)
	$(ASAN_ENV) $(TSAN_ENV) python3 scripts/flake_hunt.py --busy-cores 1 \
	  $(if $(filter plain,$(FLAKE_BUILDS)),$(BUILD_DIR):$(FLAKE_REPS)) \
	  $(if $(filter asan,$(FLAKE_BUILDS)),$(ASAN_DIR):$(FLAKE_SANITIZER_REPS):'$(ASAN_CTEST_ARGS)') \
	  $(if $(filter tsan,$(FLAKE_BUILDS)),$(TSAN_DIR):$(FLAKE_SANITIZER_REPS):'$(TSAN_CTEST_ARGS)')

# libFuzzer targets for the frame, message and value decoders (clang, with address and
# undefined-behaviour sanitizers), each run for FUZZ_SECONDS from fuzz/corpus, which
# stays untouched; fails on any crash. See fuzz/README.md.
fuzz: deps
	cmake -S fuzz -B $(FUZZ_DIR) -G Ninja -DCMAKE_CXX_COMPILER=clang++
	cmake --build $(FUZZ_DIR) -j $(JOBS)
	bash fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR) $(RELEASE_DIR) $(ASAN_DIR) $(TSAN_DIR) $(FUZZ_DIR)

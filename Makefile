# raio developer commands. Every target installs missing Debian packages first
# (scripts/install-deps.sh is idempotent), then configures and builds with Ninja.
BUILD_DIR ?= build
RELEASE_DIR ?= build-release
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: deps build demo test bench release clean format

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main example on the embedded local cluster.
demo: build
	$(BUILD_DIR)/examples/quickstart

# Unit, integration and chaos tests (everything but the `slow` label).
test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) -LE slow

$(RELEASE_DIR)/build.ninja:
	cmake -S . -B $(RELEASE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DRAIO_BUILD_TESTS=OFF $(CMAKE_FLAGS)

release: deps $(RELEASE_DIR)/build.ninja
	cmake --build $(RELEASE_DIR) -j $(JOBS)

# Microbenchmarks, Release build; prints a table.
bench: release
	$(RELEASE_DIR)/bench/raio_bench

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR) $(RELEASE_DIR)

# tandem: `make run` serves the bundled model on :8000 (1 prefill + 1 decode worker behind the
# frontend; MODE=agg for one process), `make test` builds and runs every test.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure build run test bench clean format

all: build

setup:
	@bash scripts/setup.sh

# Re-running CMake is cheap once configured, and applies CMAKE_FLAGS given on a later call.
configure: setup
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) > $(BUILD_DIR).configure.log \
	  || (cat $(BUILD_DIR).configure.log; exit 1)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

HOST ?= 127.0.0.1
PORT ?= 8000
MODE ?= disagg
run: build
	$(BUILD_DIR)/tandem run --mode $(MODE) --host $(HOST) --port $(PORT)

test: build
	bash scripts/test-setup.sh
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) \
	  || { bash $(CURDIR)/scripts/ctest-failures.sh .; exit 1; }

bench: build
	$(BUILD_DIR)/bench/engine_bench

format:
	find src tests bench -name '*.h' -o -name '*.cc' -o -name '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)

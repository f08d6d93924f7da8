# Thin wrapper for the README's commands; all logic lives in CMake.
BUILD ?= build
JOBS  ?= $(shell nproc)
WERROR ?= $(or $(AR_WERROR),OFF)
CMAKE_FLAGS ?=

.PHONY: setup build test demo bench clean
setup:
	./scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DAR_WERROR=$(WERROR) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Main job on the built-in default: convert the stories260K fixture, generate, evaluate.
demo: build
	./scripts/demo.sh $(BUILD)

bench: build
	$(BUILD)/bench/block_bench

clean:
	rm -rf $(BUILD)

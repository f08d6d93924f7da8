# Thin wrapper for the README's commands; all logic lives in CMake.
BUILD ?= build
JOBS  ?= $(shell nproc)
WERROR ?= $(or $(AR_WERROR),OFF)
CMAKE_FLAGS ?=
# Fuzzing (docs/reliability.md, "Fuzzing"): clang build with AR_FUZZ=ON; seconds per target.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 10
FUZZ_JOBS ?= 1
FUZZ_SMOKE ?= 1

.PHONY: setup build test demo bench clean fuzz-build fuzz fuzz-smoke
setup:
	./scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DAR_WERROR=$(WERROR) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
ifneq ($(FUZZ_SMOKE),0)
	$(MAKE) fuzz-smoke
endif

# libFuzzer targets (clang, ASan+UBSan) in $(FUZZ_BUILD).
fuzz-build: setup
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAR_FUZZ=ON \
	  -DAR_WERROR=$(WERROR) $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

# Every target for FUZZ_SECONDS over its corpus (FUZZ_JOBS targets at a time).
fuzz: fuzz-build
	FUZZ_JOBS=$(FUZZ_JOBS) FUZZ_KEEP_GOING=1 ./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# Every target briefly (part of `make test`): replays the corpora and regressions, then mutates.
fuzz-smoke: fuzz-build
	FUZZ_JOBS=1 ./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SMOKE_SECONDS)

# Main job on the built-in default: convert the stories260K fixture, generate, evaluate.
demo: build
	./scripts/demo.sh $(BUILD)

bench: build
	$(BUILD)/bench/block_bench

clean:
	rm -rf $(BUILD)

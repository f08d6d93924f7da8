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
# The Python package's test venv (make test-python).
PY_VENV ?= $(BUILD)/venv-py
# The x86-64-v2 build (docs/ARCHITECTURE.md, "ISA levels"): proves every wider path sits in a
# dispatched function; its tests run with the dispatch capped at scalar.
V2_BUILD ?= build-v2
V2_TESTS ?= test_isa test_exp test_qdq test_kernels_cpu test_ops_ref_fd test_signround

.PHONY: setup build test test-python test-isa test-v2 test-emulated demo bench clean fuzz-build fuzz fuzz-smoke
setup:
	./scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DAR_WERROR=$(WERROR) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# The suite at the CPU's own ISA level, then capped at the levels between it and avx2 (the script
# says which labels), at avx2 (all of it) and at scalar (kernels, quant),
# with a table of levels x labels; then the x86-64-v2 build, the kernels on emulated CPUs without
# AVX-512 (Zen 3) and without AVX (Nehalem), and the fuzz smoke run.
test: build
	./scripts/test_isa_levels.sh $(BUILD) $(JOBS)
	$(MAKE) test-python
	$(MAKE) test-v2
	./scripts/test_emulated.sh $(BUILD) $(V2_BUILD)
ifneq ($(FUZZ_SMOKE),0)
	$(MAKE) fuzz-smoke
endif

# The Python package (python/, docs/python.md): a venv in $(PY_VENV) (its tools from PyPI), `pip install .` with
# $(BUILD) as scikit-build-core's build directory (the libraries are built already: only the module
# and the CLI are linked; the same flags as `make build`, since scikit-build-core starts a fresh cache
# when the venv moves), then its pytest suite.
test-python: build
	python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q --upgrade scikit-build-core nanobind pytest numpy
	CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PY_VENV)/bin/pip install -q \
	  --no-build-isolation -C build-dir=$(BUILD) -C cmake.define.AR_WERROR=$(WERROR) .
	$(PY_VENV)/bin/python -m pytest -q python/tests

test-isa: build
	./scripts/test_isa_levels.sh $(BUILD) $(JOBS)

# The CLI and the kernel, QDQ and tuning tests built for x86-64-v2 with warnings as errors: no
# instruction above SSE4.2 outside the dispatched functions (objdump), and the tests pass capped at
# scalar, where nothing above the baseline runs at all.
test-v2: setup
	cmake -S . -B $(V2_BUILD) -DCMAKE_BUILD_TYPE=Release -DAR_WERROR=ON -DAR_BASELINE=x86-64-v2 $(CMAKE_FLAGS)
	cmake --build $(V2_BUILD) -j $(JOBS) --target autoround $(V2_TESTS)
	./scripts/check_isa_baseline.sh x86-64-v2 $(V2_BUILD)/src/cli/autoround $(V2_BUILD)/src/*/libar_*.a
	for t in $(V2_TESTS); do AR_CPU_ISA=scalar OPENBLAS_CORETYPE=Nehalem $(V2_BUILD)/tests/$$t --gtest_brief=1 || exit 1; done

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

# The kernels under QEMU as a Zen 3 (v3 build) and a Nehalem (v2 build): scripts/test_emulated.sh.
test-emulated: build test-v2
	./scripts/test_emulated.sh $(BUILD) $(V2_BUILD)

bench: build
	$(BUILD)/bench/block_bench

clean:
	rm -rf $(BUILD) $(V2_BUILD)

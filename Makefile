# The two commands users need: `make run` and `make test`. Both install missing Debian packages first.
BUILD     ?= build
JOBS      ?= $(shell nproc)
NP        ?= 4
DECK      ?= inputs/quickstart.yaml
# `make run` replaces the previous quickstart results (`conductor run` itself refuses to write over a run).
RUN_OVERRIDES ?= run.overwrite=true
CMAKE_ARGS ?=
# Open MPI refuses root without these; vader's single-copy mechanism fails in containers without ptrace.
export OMPI_ALLOW_RUN_AS_ROOT = 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = 1
export OMPI_MCA_btl_vader_single_copy_mechanism = none
MPIRUN    ?= mpirun --oversubscribe

.PHONY: all deps configure build install run test test-faults test-fast test-no-policy test-asan test-tsan bench policy format format-check clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Installs the binary, bin/conductor-analysis (the analysis tools' launcher), bin/conductor-launch and, under
# PREFIX/share/conductor, the analysis tools, job scripts and inputs; the docs under PREFIX/share/doc/conductor.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

run: deps build
	scripts/conductor-launch $(MPIRUN) -np $(NP) $(BUILD)/conductor run $(DECK) $(RUN_OVERRIDES)

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

# The fault suite alone (tests/faults): bad input, killed ranks, full disks, signals; part of `make test` too.
test-faults: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L faults

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE 'slow|slurm'

# The build without the global tier (-DCONDUCTOR_POLICY=OFF, no LibTorch) in build-nopolicy, and its test suite.
test-no-policy: deps
	JOBS=$(JOBS) scripts/test-no-policy.sh build-nopolicy

# Sanitizer builds (own build folders; CUDA off): AddressSanitizer + UndefinedBehaviorSanitizer over the unit
# and MPI tests, ThreadSanitizer over the global tier's planner thread (the PolicyScheduler tests and the
# runtime's ppo run), built -O2 -g (RelWithDebInfo: -O0 kernels make training tests minutes long). The first
# finding fails the test; scripts/sanitizers/ holds the dependencies' suppressions.
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan

$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONDUCTOR_SANITIZE=address,undefined $(CMAKE_ARGS)

$(TSAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONDUCTOR_SANITIZE=thread $(CMAKE_ARGS)

test-asan: deps $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1200 -L 'unit|mpi'

test-tsan: deps $(TSAN_BUILD)/CMakeCache.txt
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target conductor policy_tests
	cd $(TSAN_BUILD) && ctest --output-on-failure --timeout 1200 -R '^policy_tests$$'
	. $(TSAN_BUILD)/tests/sanitizer_env.sh && CONDUCTOR_BINARY=$(CURDIR)/$(TSAN_BUILD)/conductor OMP_NUM_THREADS=1 \
	  MPIEXEC=mpiexec /usr/bin/python3 tests/runtime/test_runtime.py GlobalTierTest

# Regenerates the shipped PPO policy (minutes on 2 cores) from its deck.
policy: build
	$(BUILD)/conductor train-policy inputs/policies/default.yaml run.output=$(BUILD)/policy-default
	cp $(BUILD)/policy-default/policy.pt inputs/policies/default.pt

bench: deps build
	bench/run.sh $(BUILD)

# clang-format over the tree (.clang-format); format-check lists files that differ and fails.
format:
	scripts/format.sh

format-check:
	scripts/format.sh --check

clean:
	rm -rf $(BUILD)

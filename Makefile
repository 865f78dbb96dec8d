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

.PHONY: all deps configure build run test test-faults test-fast test-no-policy bench policy format format-check clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: deps build
	$(MPIRUN) -np $(NP) $(BUILD)/conductor run $(DECK) $(RUN_OVERRIDES)

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

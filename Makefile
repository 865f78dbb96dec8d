# The two commands users need: `make run` and `make test`. Both install missing Debian packages first.
BUILD     ?= build
JOBS      ?= $(shell nproc)
# ctest runs three times as many tests as cores: most of a test's time waits on the processes it starts (mpiexec and
# its ranks, a Slurm cluster, a stop's deadline), so on 2 cores -j 4 ended the suite about a minute sooner than -j 2
# (CPU time about 290 s of a 400 s run at -j 2), and -j 6 another 10-40 s (256 s -> 218-246 s, session 23): the
# 4-rank tests (the Slurm job, 40 s) no longer hold every slot. The tests whose timing is compared run alone
# (RUN_SERIAL).
TEST_JOBS ?= $(shell echo $$(( $(JOBS) * 3 )))
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

.PHONY: all deps configure build build-tests install run test test-faults test-fast test-no-policy test-gpu-kit test-asan test-tsan test-asan-policy test-tsan-policy bench bench-smoke policy format format-check clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

# CMAKE_ARGS given: cmake runs every time (cheap when nothing changed), so `make test CMAKE_ARGS=-DX=ON` reaches an
# already configured build folder too (the rule above runs only when its CMakeCache.txt is missing); the build type
# is set only on the first configure, so an existing folder keeps its own.
ifneq ($(strip $(CMAKE_ARGS)),)
configure:
	cmake -S . -B $(BUILD) $(if $(wildcard $(BUILD)/CMakeCache.txt),,-DCMAKE_BUILD_TYPE=Release) $(CMAKE_ARGS)
else
configure: $(BUILD)/CMakeCache.txt
endif

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Installs the binary, bin/conductor-analysis (the analysis tools' launcher), bin/conductor-launch and, under
# PREFIX/share/conductor, the analysis tools, job scripts and inputs; the docs under PREFIX/share/doc/conductor.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

run: deps build
	scripts/conductor-launch $(MPIRUN) -np $(NP) $(BUILD)/conductor run $(DECK) $(RUN_OVERRIDES)

# Builds the command and the tests (target `conductor_tests`), not the benchmarks (`make` or `make bench` builds those).
build-tests: configure
	cmake --build $(BUILD) -j $(JOBS) --target conductor_tests

test: deps build-tests
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS) --timeout 600

# The fault suite alone (tests/faults): bad input, killed ranks, full disks, signals; part of `make test` too.
test-faults: build-tests
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L faults

test-fast: build-tests
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE 'slow|slurm'

# The build without the global tier (-DCONDUCTOR_POLICY=OFF, no LibTorch) in build-nopolicy, and its test suite.
test-no-policy: deps
	JOBS=$(JOBS) scripts/test-no-policy.sh build-nopolicy

# The device kit (docs/gpu.md): rebuilds .gpu-kit from Debian's packages (network: apt), hides the system's copies
# of those libraries in a mount namespace, builds against the kit alone and runs the CPU tests (root).
test-gpu-kit:
	JOBS=$(JOBS) scripts/test-gpu-kit.sh build-gpu-kit

# Sanitizer builds (own build folders; CUDA off; -O1 -g), the first finding fails the test; scripts/sanitizers/
# holds the dependencies' suppressions. CI runs test-asan and test-tsan:
# - test-asan: AddressSanitizer + UndefinedBehaviorSanitizer over the unit and MPI tests of the build without
#   LibTorch (scripts/test-no-policy.sh: also proves that build links no LibTorch). Uninstrumented LibTorch makes
#   every process start seconds slower under ASan, which would take CI past its budget; the global tier's code
#   is sanitized by test-asan-policy (manual).
# - test-tsan: ThreadSanitizer over the planner thread (sched::PlanAhead, the only thread besides OpenMP's: the
#   runtime starts it only for the global tier). test-tsan-policy (manual) adds the PPO planner's tests and the
#   runtime's ppo run.
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
SANITIZER_TESTS ?= -L unit|mpi

test-asan: deps
	JOBS=$(JOBS) CMAKE_ARGS="-DCONDUCTOR_SANITIZE=address,undefined $(CMAKE_ARGS)" CTEST_ARGS="$(SANITIZER_TESTS)" \
	  scripts/test-no-policy.sh $(ASAN_BUILD)

test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONDUCTOR_SANITIZE=thread -DCONDUCTOR_POLICY=OFF \
	  -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON $(CMAKE_ARGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target planner_tests
	cd $(TSAN_BUILD) && ctest --output-on-failure --timeout 600 -R '^(PlanAhead|StaticPlanner)\.'

test-asan-policy: deps
	cmake -S . -B $(ASAN_BUILD)-policy -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONDUCTOR_SANITIZE=address,undefined $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD)-policy -j $(JOBS)
	cd $(ASAN_BUILD)-policy && ctest --output-on-failure -j $(JOBS) --timeout 1200 -L 'unit|mpi'

test-tsan-policy: deps
	cmake -S . -B $(TSAN_BUILD)-policy -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONDUCTOR_SANITIZE=thread $(CMAKE_ARGS)
	cmake --build $(TSAN_BUILD)-policy -j $(JOBS) --target conductor planner_tests policy_tests
	cd $(TSAN_BUILD)-policy && ctest --output-on-failure --timeout 1200 -R '^(policy_tests|PlanAhead\..*|StaticPlanner\..*)$$'
	. $(TSAN_BUILD)-policy/tests/sanitizer_env.sh && CONDUCTOR_BINARY=$(CURDIR)/$(TSAN_BUILD)-policy/conductor \
	  OMP_NUM_THREADS=1 MPIEXEC=mpiexec /usr/bin/python3 tests/runtime/test_runtime.py GlobalTierTest

# Regenerates the shipped PPO policy (minutes on 2 cores) from its deck; $(BUILD)/policy-default is its scratch
# folder, replaced each time (run.overwrite=true).
policy: build
	$(BUILD)/conductor train-policy inputs/policies/default.yaml run.output=$(BUILD)/policy-default run.overwrite=true
	cp $(BUILD)/policy-default/policy.pt inputs/policies/default.pt

bench: deps build
	bench/run.sh $(BUILD)

# The simulator benchmarks that walk every shipped deck (the heavy-variability table, the layer splits), run to
# their end in seconds; their tables go to $(BUILD)/bench-smoke.txt. CI runs it: a deck change that breaks a
# benchmark's overrides fails here, not in the next session's closing note.
# bench/check_arguments.sh: every benchmark answers --help and refuses a bad argument (exit 2) before it runs.
bench-smoke: build
	$(BUILD)/bench/bench_sim --heavy inputs > $(BUILD)/bench-smoke.txt
	$(BUILD)/bench/bench_sim --split >> $(BUILD)/bench-smoke.txt
	$(BUILD)/bench/bench_sim --schedules >> $(BUILD)/bench-smoke.txt
	bench/check_arguments.sh $(BUILD)

# clang-format over the tree (.clang-format); format-check lists files that differ and fails.
format:
	scripts/format.sh

format-check:
	scripts/format.sh --check

clean:
	rm -rf $(BUILD)

// The whole runtime on GPUs: `runtime::train` with backend cuda at pipeline 2 (ops queued on the stream and
// timed with CUDA events, tensors over the data transport named on the command line, readiness headers over
// MPI) computes the losses of single-process CPU training of the same deck within fp32 tolerance.
//   mpiexec -n 2 cuda_runtime_test mpi    two ranks on one GPU (cuda.allow_gpu_sharing), host-staged MPI
//   mpiexec -n 2 cuda_runtime_test nccl   one GPU per rank, NCCL point-to-point
// `--probe MODE` (run without mpiexec by ctest first) exits 77 with the reason when the GPUs are missing.
#include <mpi.h>

#include "cuda_probe.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/model/cuda/device.hpp"
#include "conductor/model/reference.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/runtime/training.hpp"
#include "conductor/util/error.hpp"

using namespace conductor;

namespace {

config::Deck deck_for(const std::string& transport, const std::string& schedule, const std::string& execution,
                      const std::string& backend) {
  config::LoadOptions o;
  o.command = config::Command::Run;
  o.world_size = 2;
  o.source_name = "cuda_runtime_test";
  const std::string out = (std::filesystem::temp_directory_path() / ("conductor-cuda-rt-" + transport)).string();
  o.overrides = {"backend=" + backend,
                 "parallel.pipeline=2",
                 "parallel.microbatches=4",
                 "parallel.microbatch_size=2",
                 "model.n_layers=4",
                 "model.d_model=64",
                 "model.n_heads=4",
                 "model.seq_len=32",
                 "run.steps=3",
                 "run.output=" + out,
                 "trace.enabled=true",
                 "schedule.kind=" + schedule,
                 "schedule.execution=" + execution,
                 "noise.kind=gaussian",
                 "noise.level=0.2"};
  if (backend == "cuda") {
    o.overrides.push_back("cuda.transport=" + transport);
    o.overrides.push_back(std::string("cuda.allow_gpu_sharing=") + (transport == "mpi" ? "true" : "false"));
  }
  return config::parse_deck("", o);
}

int run_checks(const std::string& transport, int rank) {
  int failures = 0;
  for (const auto& [schedule, execution] : std::vector<std::pair<std::string, std::string>>{
           {"zb-2p", "readiness"}, {"1f1b", "strict"}, {"zb-v", "readiness"}}) {
    const config::Deck deck = deck_for(transport, schedule, execution, "cuda");
    const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
    if (rank != 0) continue;
    const std::vector<double> reference =
        model::train_reference(config::resolve(deck_for(transport, schedule, execution, "cpu")));
    if (outcome.losses.size() != reference.size()) {
      std::fprintf(stderr, "FAIL %s %s: %zu losses, reference has %zu\n", schedule.c_str(), execution.c_str(),
                   outcome.losses.size(), reference.size());
      ++failures;
      continue;
    }
    for (std::size_t k = 0; k < reference.size(); ++k) {
      // fp32 on both sides; cuBLAS and OpenBLAS sum in different orders.
      const double tol = 1e-4 * std::max(1.0, std::abs(reference[k]));
      const bool ok = std::abs(outcome.losses[k] - reference[k]) <= tol;
      std::printf("%s %s %s step %zu: cuda %.7f cpu %.7f %s\n", transport.c_str(), schedule.c_str(), execution.c_str(),
                  k, outcome.losses[k], reference[k], ok ? "ok" : "FAIL");
      if (!ok) ++failures;
    }
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode;
  if (const int code = conductor::test::cuda_probe(argc, argv, "runtime", mode); code >= 0) return code;
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int failures = 0;
  try {
    failures = run_checks(mode, rank);
  } catch (const CollectiveExit& e) {
    MPI_Finalize();
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Bcast(&failures, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  if (rank == 0) std::printf("%s\n", failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}

// The whole runtime on GPUs: `runtime::train` with backend cuda at pipeline 2 (ops queued on the stream and
// timed with CUDA events, tensors over the data transport named on the command line, readiness headers over
// MPI) computes the losses of single-process CPU training of the same deck within fp32 tolerance.
//   mpiexec -n 2 cuda_runtime_test mpi    two ranks on one GPU (cuda.allow_gpu_sharing), host-staged MPI
//   mpiexec -n 2 cuda_runtime_test nccl   one GPU per rank, NCCL point-to-point
// Every op the GPU runs is one NVTX range named like its trace row (checked through a static NVTX injection).
// `--probe MODE` (run without mpiexec by ctest first) exits 77 with the reason when the GPUs are missing.
#include <mpi.h>
#include <cstdint>
// This file defines the static injection (below) instead of the header's weak placeholder, declared here with
// the type of nvtxTypes.h's NvtxInitializeInjectionNvtxFunc_t because NVTX's own code refers to it.
extern "C" int (*InitializeInjectionNvtx2_fnptr)(const void* (*)(std::uint32_t));
#define NVTX_STATIC_INJECTION_IMPL
#include <nvtx3/nvToolsExt.h>

#include "cuda_probe.hpp"

#include <algorithm>
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
#include "conductor/trace/summary.hpp"
#include "conductor/trace/trace_reader.hpp"
#include "conductor/util/error.hpp"

using namespace conductor;

// NVTX ranges this process opened and closed, recorded by the injection NVTX calls at its first use (the way
// Nsight Systems attaches, linked in statically: nvtx3/nvtxDetail/nvtxInit.h).
namespace nvtx_probe {
std::vector<std::string> pushed;
int popped = 0;
int NVTX_API push(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) {
  pushed.emplace_back(a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "?");
  return 0;
}
int NVTX_API pop(nvtxDomainHandle_t) {
  ++popped;
  return 0;
}
int NVTX_API inject(NvtxGetExportTableFunc_t get) {
  const auto* cb = static_cast<const NvtxExportTableCallbacks*>(get(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (cb == nullptr || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}
}  // namespace nvtx_probe
extern "C" {
NvtxInitializeInjectionNvtxFunc_t InitializeInjectionNvtx2_fnptr = nvtx_probe::inject;
}

namespace {

// This rank's NVTX ranges of the run just finished against its compute rows in the trace (rank 0 wrote it).
int check_nvtx(const config::Deck& deck, int rank) {
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<std::string> expected;
  for (const auto& e : trace::read_trace(deck.run.output + "/trace.h5").events) {
    if (e.rank != rank || !trace::is_compute(e.kind)) continue;
    char name[64];
    std::snprintf(name, sizeof name, "%s%d stage %d step %d", trace::to_string(e.kind), e.microbatch, e.stage, e.step);
    expected.emplace_back(name);
  }
  std::vector<std::string> got = nvtx_probe::pushed;
  const int popped = nvtx_probe::popped;
  nvtx_probe::pushed.clear();
  nvtx_probe::popped = 0;
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  const bool ok = !expected.empty() && got == expected && popped == static_cast<int>(got.size());
  std::printf("rank %d: %zu NVTX ranges (%d closed) for %zu ops in the trace %s\n", rank, got.size(), popped,
              expected.size(), ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

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
    failures += check_nvtx(deck, rank);
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

int main(int argc, char** argv) { return conductor::test::mpi_checks_main(argc, argv, "runtime", run_checks); }

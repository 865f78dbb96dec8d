// Computation migration on GPUs (docs/migration.md): `runtime::train` with backend cuda at pipeline 2, every op of
// each rank giving 2 of its 4 head and MLP groups and, on the last stage, LM-head vocabulary groups (F, B, W and BW,
// both halves) to the other rank, host-staged
// (the helper uploads the request, runs the kernels on its GPU, downloads the answer). Losses and final weights
// equal single-process training of the same deck on the same GPU (migration on, the same units and groups) bit
// for bit, and the trace shows the slices moved: the cuda twin of runtime_migration_equality's
// ForcedHeadsMigration.
//   mpiexec -n 2 cuda_migration_test mpi    two ranks on one GPU (cuda.allow_gpu_sharing), host-staged MPI
//   mpiexec -n 2 cuda_migration_test nccl   one GPU per rank, NCCL point-to-point for the pipeline's tensors
// `--probe MODE` (run without mpiexec by ctest first) exits 77 with the reason when the GPUs are missing.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/model/checkpoint.hpp"
#include "conductor/model/cuda/cuda_backend.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/runtime/training.hpp"
#include "conductor/trace/trace_reader.hpp"
#include "conductor/util/error.hpp"
#include "cuda_probe.hpp"

using namespace conductor;

namespace {

config::Deck migration_deck(const std::string& transport, const std::string& schedule, const std::string& execution,
                            const std::string& ckpt) {
  config::LoadOptions o;
  o.command = config::Command::Run;
  o.world_size = 2;
  o.source_name = "cuda_migration_test";
  const std::string out = (std::filesystem::temp_directory_path() / ("conductor-cuda-mig-" + transport)).string();
  o.overrides = {"backend=cuda",
                 "cuda.transport=" + transport,
                 std::string("cuda.allow_gpu_sharing=") + (transport == "mpi" ? "true" : "false"),
                 "parallel.pipeline=2",
                 "parallel.microbatches=4",
                 "parallel.microbatch_size=2",
                 "model.n_layers=4",
                 "model.d_model=32",
                 "model.n_heads=4",
                 "model.seq_len=16",
                 "run.steps=3",
                 "run.output=" + out,
                 "run.overwrite=true",
                 "trace.enabled=true",
                 "schedule.kind=" + schedule,
                 "schedule.execution=" + execution,
                 "noise.kind=gaussian",
                 "noise.level=0.2",
                 "migration.enabled=true",
                 "migration.units=[mlp, heads, vocab]",
                 "migration.slices=4",
                 "migration.link=nvlink",
                 R"(migration.force=["0->1:F,B,W,BW:2","1->0:F,B,W,BW:2"])",
                 "checkpoint.path=" + ckpt};
  return config::parse_deck("", o);
}

// Single-process training of the deck on this GPU: every virtual stage in one model, F then full backward per
// microbatch (the reference trainer's order), tensors between stages in device memory. Writes the final weights.
std::vector<float> reference(const plan::Plan& plan, std::vector<double>& losses) {
  model::cuda::CudaBackend gpu;
  model::StageModel m(plan, {0, 1}, 2, &gpu);
  const std::size_t bytes = m.activation_elements() * sizeof(float);
  const model::DeviceBuffer act(gpu, bytes), grad(gpu, bytes);  // between virtual stages 0 and 1
  for (int step = 0; step < plan.run.steps; ++step) {
    m.begin_step(step);
    for (int mb = 0; mb < m.num_microbatches(); ++mb) {
      m.forward(0, mb, nullptr, act.f());
      m.forward(1, mb, act.f(), nullptr);
      m.backward_full(1, mb, nullptr, grad.f());
      m.backward_full(0, mb, grad.f(), nullptr);
    }
    m.optimizer_step(std::sqrt(m.local_grad_sq_norm()), step);
    losses.push_back(m.step_loss());
  }
  std::vector<float> weights = m.read(0, model::Buffer::Params);
  const std::vector<float> last = m.read(1, model::Buffer::Params);
  weights.insert(weights.end(), last.begin(), last.end());
  return weights;
}

// The run's final weights (its checkpoint), read on this GPU.
std::vector<float> run_weights(const plan::Plan& plan, const std::string& ckpt) {
  model::cuda::CudaBackend gpu;
  model::StageModel m(plan, {0, 1}, 2, &gpu);
  m.load_checkpoint(model::resolve_checkpoint(ckpt));
  std::vector<float> weights = m.read(0, model::Buffer::Params);
  const std::vector<float> last = m.read(1, model::Buffer::Params);
  weights.insert(weights.end(), last.begin(), last.end());
  return weights;
}

int run_checks(const std::string& transport, int rank) {
  int failures = 0;
  for (const auto& [schedule, execution] :
       std::vector<std::pair<std::string, std::string>>{{"zb-h1", "strict"}, {"1f1b", "readiness"}}) {
    const std::string what = transport + " " + schedule + " " + execution;
    const std::string ckpt =
        (std::filesystem::temp_directory_path() / ("conductor-cuda-mig-ckpt-" + transport)).string();
    const config::Deck deck = migration_deck(transport, schedule, execution, ckpt);
    const plan::Plan plan = config::resolve(deck);
    const runtime::RunOutcome outcome = runtime::train(plan, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != 0) continue;
    std::vector<double> losses;
    const std::vector<float> weights = reference(plan, losses);
    bool ok = outcome.losses == losses;
    for (std::size_t k = 0; k < losses.size() && k < outcome.losses.size(); ++k) {
      std::printf("%s step %zu: run %.9g single process %.9g\n", what.c_str(), k, outcome.losses[k], losses[k]);
    }
    const bool same_weights = run_weights(plan, ckpt) == weights;
    int owner_ops = 0, help_ops = 0;
    for (const trace::OpEvent& e : trace::read_trace(outcome.output_dir + "/trace.h5").events) {
      if (e.kind <= trace::EventKind::BW && e.migrated > 0) ++owner_ops;
      if (e.kind >= trace::EventKind::HELP_F && e.kind <= trace::EventKind::HELP_BW) ++help_ops;
    }
    ok = ok && same_weights && owner_ops > 0 && help_ops > 0;
    std::printf("%s: losses %s, final weights %s, %d owner ops gave slices, %d help rows: %s\n", what.c_str(),
                outcome.losses == losses ? "equal" : "DIFFER", same_weights ? "equal" : "DIFFER", owner_ops, help_ops,
                ok ? "ok" : "FAIL");
    if (!ok) ++failures;
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) { return conductor::test::mpi_checks_main(argc, argv, "migration", run_checks); }

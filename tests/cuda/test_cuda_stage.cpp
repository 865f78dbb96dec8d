// Full training steps with the CUDA backend against the CPU backend: the same StageModel code, the same deck,
// only the Backend differs. Two virtual stages, so an activation and a gradient cross a stage boundary.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../model/model_test_util.hpp"
#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/model/backend.hpp"
#include "conductor/model/cuda/cuda_backend.hpp"
#include "conductor/model/stage.hpp"

namespace {

using conductor::model::Backend;
using conductor::model::Buffer;
using conductor::model::DeviceBuffer;
using conductor::model::StageModel;
namespace cu = conductor::model::cuda;

conductor::config::Deck small_deck() {
  conductor::config::Deck d;
  d.model.vocab = 50;
  d.model.seq_len = 40;
  d.model.d_model = 32;
  d.model.n_heads = 4;
  d.model.n_layers = 2;
  d.model.mlp_ratio = 4;
  d.parallel.pipeline = 2;
  d.parallel.virtual_chunks = 1;
  d.parallel.microbatches = 3;
  d.parallel.microbatch_size = 2;
  d.run.steps = 3;
  return d;
}

using model_test::rel_err;

// F then full backward per microbatch through all virtual stages; the tensors between stages live in the
// model's backend memory (device memory for CUDA).
double run_step(StageModel& m, int step) {
  Backend& be = m.backend();
  const int S = m.num_virtual_stages();
  const std::size_t bytes = m.activation_elements() * sizeof(float);
  std::vector<DeviceBuffer> act, grad;
  for (int i = 0; i <= S; i++) {
    act.emplace_back(be, bytes);
    grad.emplace_back(be, bytes);
  }
  m.begin_step(step);
  for (int mb = 0; mb < m.num_microbatches(); mb++) {
    for (int vs = 0; vs < S; vs++)
      m.forward(vs, mb, vs == 0 ? nullptr : act[vs].f(), vs == S - 1 ? nullptr : act[vs + 1].f());
    for (int vs = S - 1; vs >= 0; vs--) {
      m.backward_full(vs, mb, vs == S - 1 ? nullptr : grad[vs + 1].f(), vs == 0 ? nullptr : grad[vs].f());
    }
  }
  return m.step_loss();
}

// loss_tol: step 0 (identical weights); later steps compare after AdamW updates, whose first steps are close
// to lr * sign(g): gradient elements near zero can round to different signs, which moves the loss by more
// than fp32 rounding, hence a looser bound there.
void compare_training(cu::CudaOptions options, double loss0_tol, double grad_tol, double later_loss_tol) {
  const auto deck = small_deck();
  cu::CudaBackend gpu(options);
  StageModel cpu_model(conductor::config::resolve(deck), {0, 1}, 2);
  StageModel gpu_model(conductor::config::resolve(deck), {0, 1}, 2, &gpu);
  for (int step = 0; step < deck.run.steps; step++) {
    const double lc = run_step(cpu_model, step), lg = run_step(gpu_model, step);
    EXPECT_LE(std::abs(lg - lc) / std::abs(lc), step == 0 ? loss0_tol : later_loss_tol)
        << "step " << step << ": cpu loss " << lc << ", cuda loss " << lg;
    if (step == 0) {
      for (int vs = 0; vs < 2; vs++) {
        for (const auto& t : cpu_model.tensors(vs)) {
          EXPECT_LE(rel_err(gpu_model.read_tensor(vs, Buffer::Grads, t.name),
                            cpu_model.read_tensor(vs, Buffer::Grads, t.name)),
                    grad_tol)
              << "gradient of " << t.name;
        }
      }
    }
    const double nc = std::sqrt(cpu_model.local_grad_sq_norm()), ng = std::sqrt(gpu_model.local_grad_sq_norm());
    EXPECT_LE(std::abs(ng - nc) / nc, grad_tol) << "step " << step << " gradient norm";
    cpu_model.optimizer_step(nc, step);
    gpu_model.optimizer_step(ng, step);
  }
}

// fp32: loss at step 0 to 1e-5 (a sum of fp32 roundings, as the kernels); gradients per tensor to 1e-4 (they
// pass through ~20 kernels, and small tensors such as LayerNorm biases sum values that largely cancel);
// losses after updates to 1e-4 (see compare_training).
TEST(CudaStage, TrainingStepsMatchCpuInFp32) { compare_training(cu::CudaOptions{}, 1e-5, 1e-4, 1e-4); }

// bf16 GEMMs and attention (tensor cores): each product carries ~3e-3 relative error (see test_cuda_kernels.cpp);
// a gradient passes through about six chained products per layer pair, so ~1e-2, bound 5e-2. The loss at init
// depends on logits of std ~0.1 around ln(V), so its relative error is far smaller than the logits': bound 5e-3,
// and 2e-2 after updates.
TEST(CudaStage, TrainingStepsMatchCpuInBf16) {
  compare_training(cu::CudaOptions{-1, cu::Precision::bf16, false}, 5e-3, 5e-2, 2e-2);
}

}  // namespace

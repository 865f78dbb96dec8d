// Benchmark of the CPU trainer: step time (forward + backward + AdamW) of our kernels against the same model in
// LibTorch at the same thread count, for two model sizes; GEMM GFLOP/s of our backend against raw cblas_sgemm
// on the model's GEMM shapes. Threads: OMP_NUM_THREADS (both sides use omp_get_max_threads()).
//   OMP_NUM_THREADS=1 build/bench/bench_model [steps]
#include <cblas.h>
#include <omp.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "bench_main.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/model/matmul.hpp"
#include "conductor/model/stage.hpp"
#include "torch_gpt.hpp"

using namespace conductor;
using namespace conductor::model;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Size {
  const char* name;
  int V, T, C, NH, L, B, M;
};

using test::TorchGpt;  // the same GPT in LibTorch ops, weights copied from ours

config::Deck deck_for(const Size& s) {
  config::Deck d;
  d.model.vocab = s.V;
  d.model.seq_len = s.T;
  d.model.d_model = s.C;
  d.model.n_heads = s.NH;
  d.model.n_layers = s.L;
  d.parallel.pipeline = 1;
  d.parallel.microbatches = s.M;
  d.parallel.microbatch_size = s.B;
  d.run.steps = 1000;
  return d;
}

double model_flops(const Size& s) {
  // 6 x (matmul parameters) x tokens for the GEMMs + attention (QK^T and AV, forward 4*B*T*T*C/2 causal
  // counted as full) x 3 for forward + backward.
  const double tokens = static_cast<double>(s.B) * s.T * s.M;
  const double params = s.L * 12.0 * s.C * s.C + static_cast<double>(s.V) * s.C;
  const double attn = s.L * 4.0 * s.B * static_cast<double>(s.T) * s.T * s.C * s.M;
  return 6.0 * params * tokens + 3.0 * attn;
}

void bench_step(const Size& s, int steps) {
  const config::Deck deck = deck_for(s);
  StageModel ours(config::resolve(deck), {0}, 1);
  TorchGpt ref(ours);
  auto mk = [&](double wd) {
    auto o = std::make_unique<torch::optim::AdamWOptions>(deck.optim.lr);
    o->betas({deck.optim.beta1, deck.optim.beta2}).eps(deck.optim.eps).weight_decay(wd);
    return o;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(ref.decay, mk(deck.optim.weight_decay));
  groups.emplace_back(ref.no_decay, mk(0.0));
  torch::optim::AdamW opt(groups, torch::optim::AdamWOptions(deck.optim.lr));
  std::vector<torch::Tensor> all;
  for (auto& [n, t] : ref.p) all.push_back(t);
  // Steps alternate between the two implementations so a busy machine slows both alike.
  std::vector<double> t_ours, t_torch;
  std::vector<int> in, tg;
  double loss_ours = 0, loss_torch = 0;
  for (int i = 0; i < steps + 2; i++) {
    double t0 = now();
    ours.begin_step(i);
    for (int mb = 0; mb < s.M; mb++) {
      ours.forward(0, mb, nullptr, nullptr);
      ours.backward_full(0, mb, nullptr, nullptr);
    }
    ours.optimizer_step(std::sqrt(ours.local_grad_sq_norm()), i);
    if (i >= 2) t_ours.push_back(now() - t0);
    loss_ours = ours.step_loss();

    std::vector<torch::Tensor> toks, tgts;
    for (int mb = 0; mb < s.M; mb++) {
      ours.data().microbatch(i, mb, in, tg);
      toks.push_back(torch::tensor(std::vector<int64_t>(in.begin(), in.end())));
      tgts.push_back(torch::tensor(std::vector<int64_t>(tg.begin(), tg.end())));
    }
    t0 = now();
    opt.zero_grad();
    double total = 0;
    for (int mb = 0; mb < s.M; mb++) {
      auto loss = ref.forward(toks[mb], tgts[mb], s.L).second / s.M;
      loss.backward();
      total += loss.item<double>();
    }
    torch::nn::utils::clip_grad_norm_(all, deck.optim.grad_clip);
    opt.step();
    if (i >= 2) t_torch.push_back(now() - t0);
    loss_torch = total;
  }
  const double a = median(t_ours), b = median(t_torch);
  std::printf(
      "%-7s V=%d T=%d C=%d NH=%d L=%d B=%d m=%d (%.2fM params): ours %8.2f ms/step (%5.2f GFLOP/s), "
      "LibTorch %8.2f ms/step; ours/LibTorch %.2f (last loss %.5f vs %.5f)\n",
      s.name, s.V, s.T, s.C, s.NH, s.L, s.B, s.M, ours.parameter_count(0) / 1e6, 1e3 * a, model_flops(s) / a / 1e9,
      1e3 * b, a / b, loss_ours, loss_torch);
}

// Our matmul kernels against the bare cblas_sgemm each of them runs, on the model's product shapes.
void bench_gemm(const Size& s, int reps) {
  Backend& be = cpu_backend();
  const int N = s.B * s.T, C = s.C, F = 4 * s.C, V = s.V;
  enum class Pass { forward, backward_input, backward_weight };
  struct Shape {
    const char* what;
    Pass pass;
    int C, OC;  // the matmul's input and output channels
    WeightLayout layout;
    int m, n, k;  // the GEMM it runs
    bool ta, tb;
  };
  const Shape shapes[] = {
      {"qkv fwd  ln@W^T", Pass::forward, C, 3 * C, WeightLayout::out_in, N, 3 * C, C, false, true},
      {"fc fwd   ln@W^T", Pass::forward, C, F, WeightLayout::out_in, N, F, C, false, true},
      {"fcproj fwd g@W", Pass::forward, F, C, WeightLayout::in_out, N, C, F, false, false},
      {"fc dW    dh^T@ln", Pass::backward_weight, C, F, WeightLayout::out_in, F, C, N, true, false},
      {"fc dX    dh@W", Pass::backward_input, C, F, WeightLayout::out_in, N, C, F, false, false},
      {"lm head  ln@W^T", Pass::forward, C, V, WeightLayout::out_in, N, V, C, false, true},
  };
  double ours_total = 0, raw_total = 0, flops_total = 0;
  for (const auto& sh : shapes) {
    std::vector<float> a(static_cast<std::size_t>(sh.m) * sh.k, 0.01f), b(static_cast<std::size_t>(sh.k) * sh.n, 0.02f),
        c(static_cast<std::size_t>(sh.m) * sh.n, 0.0f);
    // The weight gradient accumulates (beta 1); the others overwrite (beta 0).
    const float beta = sh.pass == Pass::backward_weight ? 1.0f : 0.0f;
    auto ours = [&] {
      switch (sh.pass) {
        case Pass::forward:
          matmul_forward(c.data(), a.data(), b.data(), nullptr, 1, N, sh.C, sh.OC, sh.layout, Accumulate::no, be);
          break;
        case Pass::backward_input:
          matmul_backward_input(c.data(), a.data(), b.data(), 1, N, sh.C, sh.OC, sh.layout, Accumulate::no, be);
          break;
        case Pass::backward_weight:
          matmul_backward_weight(c.data(), nullptr, a.data(), b.data(), 1, N, sh.C, sh.OC, sh.layout, be);
          break;
      }
    };
    auto raw = [&] {
      cblas_sgemm(CblasRowMajor, sh.ta ? CblasTrans : CblasNoTrans, sh.tb ? CblasTrans : CblasNoTrans, sh.m, sh.n, sh.k,
                  1.0f, a.data(), sh.ta ? sh.m : sh.k, b.data(), sh.tb ? sh.k : sh.n, beta, c.data(), sh.n);
    };
    ours();
    raw();
    std::vector<double> to, tr;  // alternating, so machine load hits both alike
    for (int r = 0; r < reps; r++) {
      double t0 = now();
      ours();
      to.push_back(now() - t0);
      t0 = now();
      raw();
      tr.push_back(now() - t0);
    }
    const double t_ours = median(to), t_raw = median(tr);
    const double flops = 2.0 * sh.m * sh.n * sh.k;
    ours_total += t_ours;
    raw_total += t_raw;
    flops_total += flops;
    std::printf("  gemm %-17s m=%5d n=%5d k=%5d: ours %7.2f GFLOP/s, cblas_sgemm %7.2f GFLOP/s, ratio %.3f\n", sh.what,
                sh.m, sh.n, sh.k, flops / t_ours / 1e9, flops / t_raw / 1e9, t_raw / t_ours);
  }
  std::printf("  gemm total (%s): ours %.2f GFLOP/s vs cblas_sgemm %.2f GFLOP/s (ratio %.3f)\n", s.name,
              flops_total / ours_total / 1e9, flops_total / raw_total / 1e9, raw_total / ours_total);
}

}  // namespace

static int run(int argc, char** argv) {
  if (argc > 2) throw bench::BadArgument("one argument at most (STEPS), got " + std::to_string(argc - 1));
  const int steps = argc > 1 ? bench::int_argument("STEPS", argv[1], 1, 100000) : 10;
  const int threads = omp_get_max_threads();
  torch::set_num_threads(threads);
  std::printf("bench_model: %d thread(s) (OMP_NUM_THREADS), median of %d steps after 2 warm-up steps\n", threads,
              steps);
  const Size sizes[] = {
      {"small", 256, 64, 64, 4, 4, 4, 8},     // the quickstart model, 8 microbatches of 4 x 64 tokens
      {"medium", 256, 128, 256, 8, 4, 8, 2},  // d 256, 4 layers, 2 microbatches of 8 x 128 tokens
  };
  for (const auto& s : sizes) bench_step(s, steps);
  for (const auto& s : sizes) bench_gemm(s, std::max(21, 3 * steps));
  return 0;
}

int main(int argc, char** argv) {
  return conductor::bench::guarded_main("bench_model", run, argc, argv,
                                        "usage: bench_model [STEPS (1 .. 100000, default 10)]\n");
}

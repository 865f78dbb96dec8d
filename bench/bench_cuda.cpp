// CUDA backend benchmark and CUDA-vs-CPU loss agreement (jobs/device-check.sh runs both).
//
//   bench_cuda [--layers 4] [--batch 8] [--microbatches 4] [--steps 4] [--precision bf16|fp32] [--tf32]
//              [--peak-tflops X]
//     Times training steps of one pipeline stage shaped like a GPT-2 1.5B middle stage (d_model 1600, 25 heads
//     of 64, MLP 6400, sequence 1024, `--layers` layers, no embedding or LM head) on one GPU: F and full
//     backward of every microbatch, then the gradient norm and AdamW. Reports tokens/s and MFU.
//     FLOPs per token as llm.c counts them (gpt2_estimate_mfu): 6 N + 6 L C T, N the stage's parameters (here
//     L layers of 12 C^2 + 13 C: weights, biases, LayerNorms), the causal attention products at half the square
//     (recomputation, LayerNorm, GELU, softmax and the optimizer are not counted):
//       C = 1600, T = 1024: 6 x 30.74M + 6 x 1.64M = 194.27 MFLOP per layer per token.
//     MFU = achieved FLOP/s / peak dense FLOP/s of the precision (H100/H200 SXM: 989 TFLOP/s bf16, 495 TF32;
//     A100: 312 bf16; fp32 without TF32 uses the non-tensor peak: H100/H200 67, A100 19.5).
//
//   bench_cuda --quickstart inputs/quickstart.yaml [--steps 10]
//     Trains the deck's model (all virtual stages in one process) on the CPU and on the GPU (fp32) and prints
//     the two loss curves; exits 1 unless they agree to 1e-5 relative at step 0 (same weights: fp32 rounding
//     only) and to 1e-3 at every later step (AdamW's first updates are close to lr * sign(g), so gradient
//     elements near zero may round to different signs on the two backends and the runs drift apart slowly).
#include <cstdio>

#ifndef CONDUCTOR_HAVE_CUDA
int main() {
  std::printf("skipped: built without CUDA\n");
  return 0;
}
#else

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_main.hpp"
#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/model/cuda/cuda_backend.hpp"
#include "conductor/model/cuda/device.hpp"
#include "conductor/model/stage.hpp"

namespace {

using conductor::model::Backend;
using conductor::model::DeviceBuffer;
using conductor::model::StageModel;
namespace cu = conductor::model::cuda;

struct Args {
  int layers = 4, batch = 8, microbatches = 4, steps = 4;
  std::string precision = "bf16";
  bool tf32 = false;
  double peak_tflops = 0;
  std::string quickstart;
};

constexpr const char* kUsage =
    "usage: bench_cuda [--layers N] [--batch N] [--microbatches N] [--steps N] [--precision bf16|fp32] [--tf32]\n"
    "                  [--peak-tflops X] [--quickstart DECK]   (what each measures: the top of bench/bench_cuda.cpp)\n";

// Bad values are a BadArgument (exit 2): std::stoi's exceptions ended the benchmark with abort (a core dump).
Args parse(int argc, char** argv) {
  using conductor::bench::BadArgument;
  using conductor::bench::int_argument;
  Args a;
  for (int i = 1; i < argc; i++) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw BadArgument(k + " needs a value");
      return argv[++i];
    };
    if (k == "--layers") {
      a.layers = int_argument("--layers", value(), 1, 4096);
    } else if (k == "--batch") {
      a.batch = int_argument("--batch", value(), 1, 1 << 20);
    } else if (k == "--microbatches") {
      a.microbatches = int_argument("--microbatches", value(), 1, 1 << 20);
    } else if (k == "--steps") {
      a.steps = int_argument("--steps", value(), 1, 100000);
    } else if (k == "--precision") {
      a.precision = value();
      if (a.precision != "bf16" && a.precision != "fp32")
        throw BadArgument("--precision: expected bf16 or fp32, got '" + a.precision + "'");
    } else if (k == "--tf32") {
      a.tf32 = true;
    } else if (k == "--peak-tflops") {
      const std::string v = value();
      char* end = nullptr;
      a.peak_tflops = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(a.peak_tflops > 0 && a.peak_tflops < 1e6))
        throw BadArgument("--peak-tflops: expected a number of TFLOP/s above 0, got '" + v + "'");
    } else if (k == "--quickstart") {
      a.quickstart = value();
    } else {
      throw BadArgument("unknown option '" + k + "'");
    }
  }
  return a;
}

double peak_tflops(const std::string& gpu, const std::string& precision, bool tf32) {
  const bool hopper = gpu.find("H100") != std::string::npos || gpu.find("H200") != std::string::npos ||
                      gpu.find("GH200") != std::string::npos;
  const bool a100 = gpu.find("A100") != std::string::npos;
  if (precision == "bf16") return hopper ? 989.4 : a100 ? 312.0 : 0.0;
  if (tf32) return hopper ? 494.7 : a100 ? 156.0 : 0.0;
  return hopper ? 66.9 : a100 ? 19.5 : 0.0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int bench_stage(const Args& a) {
  cu::CudaOptions options;
  options.precision = cu::parse_precision(a.precision);
  options.tf32 = a.tf32;
  cu::CudaBackend gpu(options);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, gpu.device());

  conductor::config::Deck d;
  d.model.vocab = 50257;
  d.model.seq_len = 1024;
  d.model.d_model = 1600;
  d.model.n_heads = 25;
  d.model.mlp_ratio = 4;
  d.model.n_layers = a.layers + 2;
  d.model.layers_per_stage = {1, a.layers, 1};  // we hold only the middle stage
  d.parallel.pipeline = 3;
  d.parallel.microbatches = a.microbatches;
  d.parallel.microbatch_size = a.batch;
  d.run.steps = a.steps + 1;
  StageModel model(conductor::config::resolve(d), {1}, 3, &gpu);

  const std::size_t n = model.activation_elements(), bytes = n * sizeof(float);
  std::vector<float> host(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& x : host) x = dist(rng);
  DeviceBuffer in(gpu, bytes), out(gpu, bytes), gout(gpu, bytes), gin(gpu, bytes);
  gpu.upload(in.get(), host.data(), bytes);
  for (auto& x : host) x = 1e-3f * dist(rng);
  gpu.upload(gout.get(), host.data(), bytes);

  auto step = [&](int s) {
    model.begin_step(s);
    for (int mb = 0; mb < a.microbatches; mb++) {
      model.forward(1, mb, in.f(), out.f());
      model.backward_full(1, mb, gout.f(), gin.f());
    }
    model.optimizer_step(std::sqrt(model.local_grad_sq_norm()), s);
    gpu.synchronize();
  };
  step(0);  // warm-up: allocations, cuBLAS heuristics
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 1; s <= a.steps; s++) step(s);
  const double secs = seconds_since(t0) / a.steps;

  const double C = d.model.d_model, T = d.model.seq_len;
  const double params = static_cast<double>(model.parameter_count(1));
  const double flop_per_token = 6.0 * params + 6.0 * a.layers * C * T;  // llm.c's count (header comment)
  const double tokens = static_cast<double>(a.microbatches) * a.batch * T;
  const double tflops = flop_per_token * tokens / secs / 1e12;
  const double peak = a.peak_tflops > 0 ? a.peak_tflops : peak_tflops(prop.name, a.precision, a.tf32);
  std::printf("bench_cuda stage: %s, %d layers x (d 1600, 25 heads, F 6400), T 1024, %d x %d sequences/step, %s%s\n",
              prop.name, a.layers, a.microbatches, a.batch, a.precision.c_str(), a.tf32 ? " +tf32" : "");
  std::printf("  step %.1f ms, %.0f tokens/s, %.1f TFLOP/s (%.2f GFLOP/token)\n", secs * 1e3, tokens / secs, tflops,
              flop_per_token / 1e9);
  if (peak > 0) {
    std::printf("  MFU %.1f%% of %.1f TFLOP/s peak\n", 100.0 * tflops / peak, peak);
  } else {
    std::printf("  MFU unknown: no peak for this GPU (pass --peak-tflops)\n");
  }
  return 0;
}

std::vector<double> train(const conductor::config::Deck& d, Backend* backend, int steps) {
  const int S = d.parallel.pipeline * d.parallel.virtual_chunks;
  std::vector<int> all(S);
  for (int i = 0; i < S; i++) all[i] = i;
  StageModel m(conductor::config::resolve(d), all, S, backend);
  Backend& be = m.backend();
  const std::size_t bytes = m.activation_elements() * sizeof(float);
  std::vector<DeviceBuffer> act, grad;
  for (int i = 0; i <= S; i++) {
    act.emplace_back(be, bytes);
    grad.emplace_back(be, bytes);
  }
  std::vector<double> losses;
  for (int step = 0; step < steps; step++) {
    m.begin_step(step);
    for (int mb = 0; mb < m.num_microbatches(); mb++) {
      for (int vs = 0; vs < S; vs++) {
        m.forward(vs, mb, vs == 0 ? nullptr : act[vs].f(), vs == S - 1 ? nullptr : act[vs + 1].f());
      }
      for (int vs = S - 1; vs >= 0; vs--) {
        m.backward_full(vs, mb, vs == S - 1 ? nullptr : grad[vs + 1].f(), vs == 0 ? nullptr : grad[vs].f());
      }
    }
    m.optimizer_step(std::sqrt(m.local_grad_sq_norm()), step);
    losses.push_back(m.step_loss());
  }
  return losses;
}

int quickstart(const Args& a) {
  std::ifstream f(a.quickstart);
  if (!f) {
    std::fprintf(stderr, "bench_cuda: cannot read %s\n", a.quickstart.c_str());
    return 2;
  }
  std::stringstream text;
  text << f.rdbuf();
  conductor::config::LoadOptions opts;
  opts.source_name = a.quickstart;
  conductor::config::Deck d = conductor::config::parse_deck(text.str(), opts);
  const int steps = a.steps;
  const auto t0 = std::chrono::steady_clock::now();
  const auto cpu = train(d, &conductor::model::cpu_backend(), steps);
  const double cpu_s = seconds_since(t0);
  cu::CudaBackend gpu;
  const auto t1 = std::chrono::steady_clock::now();
  const auto gpu_losses = train(d, &gpu, steps);
  const double gpu_s = seconds_since(t1);
  double worst = 0;
  bool ok = true;
  for (int s = 0; s < steps; s++) {
    const double rel = std::abs(gpu_losses[s] - cpu[s]) / std::abs(cpu[s]);
    const double bound = s == 0 ? 1e-5 : 1e-3;
    worst = std::max(worst, rel);
    ok = ok && rel <= bound;
    std::printf("  step %2d: cpu %.6f  cuda %.6f  rel %.2e (bound %.0e)\n", s, cpu[s], gpu_losses[s], rel, bound);
  }
  std::printf("bench_cuda quickstart: %d steps, cpu %.2f s, cuda %.2f s, max rel loss difference %.2e: %s\n", steps,
              cpu_s, gpu_s, worst, ok ? "AGREE" : "DISAGREE");
  return ok ? 0 : 1;
}

}  // namespace

static int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (cu::device_count() == 0) {
    std::printf("skipped: no CUDA device (%s)\n", cu::no_device_reason());
    return 0;
  }
  return a.quickstart.empty() ? bench_stage(a) : quickstart(a);
}

int main(int argc, char** argv) { return conductor::bench::guarded_main("bench_cuda", run, argc, argv, kUsage); }

#endif  // CONDUCTOR_HAVE_CUDA

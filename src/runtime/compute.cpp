#include "conductor/runtime/compute.hpp"

#include <cmath>
#include <limits>
#include <thread>

#include "conductor/model/backend.hpp"
#include "conductor/model/stage.hpp"
#ifdef CONDUCTOR_HAVE_CUDA
#include "conductor/model/cuda/cuda_backend.hpp"
#include "conductor/model/cuda/device.hpp"
#endif
#include "conductor/runtime/clock.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/util/error.hpp"

namespace conductor::runtime {

void sleep_until_ns(std::int64_t deadline_ns) {
  // The kernel wakes a sleeper late (tens of us, more on a busy node); sleep to just short of the deadline and
  // yield the rest, so emulated ops last their modelled time without spinning a core for long.
  constexpr std::int64_t kYieldWindowNs = 150'000;
  for (;;) {
    const std::int64_t left = deadline_ns - steady_now_ns();
    if (left <= 0) return;
    if (left > kYieldWindowNs) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(left - kYieldWindowNs));
    } else {
      std::this_thread::yield();
    }
  }
}

namespace {

std::int64_t ms_to_ns(double ms) { return static_cast<std::int64_t>(std::llround(ms * 1e6)); }

// Real math on this rank's virtual stages; the noise model adds its perturbation on top of the cost model's
// nominal time as a real delay after the op, so a straggler window or jitter slows the real run as modelled.
// With a device backend (cuda) the messages stay in host memory and each op stages its input and output
// through device buffers (the host-staged transport); the op is synchronised so its host timing is its time.
class ModelCompute final : public Compute {
 public:
  ModelCompute(const config::Deck& deck, const sched::Schedule& s, int rank, const sim::NoiseModel& noise,
               std::unique_ptr<model::Backend> device_backend)
      : schedule_(s), rank_(rank), noise_(noise), backend_(std::move(device_backend)) {
    std::vector<int> held;
    for (int c = 0; c < s.v; ++c) held.push_back(s.stage_of(rank, c));
    model_ = std::make_unique<model::StageModel>(deck, held, s.num_stages(), backend_.get());
    holds_last_ = model_->holds(s.num_stages() - 1);
    if (backend_) {
      const std::size_t bytes = model_->activation_elements() * sizeof(float);
      d_in_ = model::DeviceBuffer(*backend_, bytes);
      d_out_ = model::DeviceBuffer(*backend_, bytes);
    }
  }
  ~ModelCompute() override {
    model_.reset();  // before the backend that owns its memory
    d_in_.reset();
    d_out_.reset();
  }
  std::size_t payload_floats() const override { return model_->activation_elements(); }
  std::int64_t tensor_bytes() const override {
    return static_cast<std::int64_t>(model_->activation_elements() * sizeof(float));
  }
  void begin_step(int step) override { model_->begin_step(step); }
  void run(int step, const sched::Action& a, int stage, const float* in, float* out) override {
    const std::size_t bytes = static_cast<std::size_t>(tensor_bytes());
    const float* op_in = in;
    float* op_out = out;
    if (backend_) {
      if (in) backend_->upload(d_in_.get(), in, bytes);
      op_in = in ? static_cast<const float*>(d_in_.get()) : nullptr;
      op_out = out ? static_cast<float*>(d_out_.get()) : nullptr;
    }
    switch (a.kind) {
      case sched::OpKind::F: model_->forward(stage, a.microbatch, op_in, op_out); break;
      case sched::OpKind::B: model_->backward_input(stage, a.microbatch, op_in, op_out); break;
      case sched::OpKind::W: model_->backward_weight(stage, a.microbatch); break;
      case sched::OpKind::BW: model_->backward_full(stage, a.microbatch, op_in, op_out); break;
    }
    if (backend_) {
      if (out) backend_->download(out, d_out_.get(), bytes);
      backend_->synchronize();
    }
    if (noise_.any()) {
      const double nominal = noise_.cost().op_time(rank_, a.kind, schedule_.v);
      const double noisy = noise_.compute_time_ms(step, rank_, a.chunk, a.microbatch, a.kind);
      if (noisy > nominal) sleep_until_ns(steady_now_ns() + ms_to_ns(noisy - nominal));
    }
  }
  double step_loss() const override {
    return holds_last_ ? model_->step_loss() : std::numeric_limits<double>::quiet_NaN();
  }
  bool has_loss() const override { return holds_last_; }
  double local_grad_sq_norm() const override { return model_->local_grad_sq_norm(); }
  void optimizer_step(double norm, int step) override { model_->optimizer_step(norm, step); }
  model::StageModel* model() override { return model_.get(); }

 private:
  const sched::Schedule& schedule_;
  int rank_;
  const sim::NoiseModel& noise_;
  std::unique_ptr<model::Backend> backend_;  // null: the deck's cpu backend, owned by the model
  model::DeviceBuffer d_in_, d_out_;         // [B,T,C] staging buffers on the device
  std::unique_ptr<model::StageModel> model_;
  bool holds_last_ = false;
};

// No math: each op sleeps for its (noisy) cost-model time.
class EmulatedCompute final : public Compute {
 public:
  EmulatedCompute(const config::Deck& deck, int rank, const sim::NoiseModel& noise)
      : rank_(rank), noise_(noise), bytes_(static_cast<std::int64_t>(sched::activation_bytes(deck))) {}
  std::size_t payload_floats() const override { return 0; }
  std::int64_t tensor_bytes() const override { return bytes_; }
  void begin_step(int) override {}
  void run(int step, const sched::Action& a, int, const float*, float*) override {
    const double ms = noise_.compute_time_ms(step, rank_, a.chunk, a.microbatch, a.kind);
    sleep_until_ns(steady_now_ns() + ms_to_ns(ms));
  }
  double step_loss() const override { return std::numeric_limits<double>::quiet_NaN(); }
  bool has_loss() const override { return false; }
  double local_grad_sq_norm() const override { return 0.0; }
  void optimizer_step(double, int) override {}

 private:
  int rank_;
  const sim::NoiseModel& noise_;
  std::int64_t bytes_;
};

}  // namespace

std::unique_ptr<Compute> make_compute(const config::Deck& deck, const sched::Schedule& s, int rank,
                                      const sim::NoiseModel& noise, MPI_Comm comm) {
  if (deck.backend == "emulated") return std::make_unique<EmulatedCompute>(deck, rank, noise);
  if (deck.backend == "cpu") return std::make_unique<ModelCompute>(deck, s, rank, noise, nullptr);
#ifdef CONDUCTOR_HAVE_CUDA
  if (deck.backend == "cuda") {
    // Collective: every rank fails together when a rank has no GPU (or too few GPUs without sharing).
    model::cuda::CudaOptions options;
    options.device = model::cuda::select_device(comm, deck.cuda.allow_gpu_sharing);
    options.precision = model::cuda::parse_precision(deck.model.precision);
    options.tf32 = deck.cuda.tf32;
    return std::make_unique<ModelCompute>(deck, s, rank, noise, model::cuda::make_cuda_backend(options));
  }
#endif
  (void)comm;
  throw InputError("backend = '" + deck.backend + "' cannot run in this build (allowed: cpu, emulated)");
}

}  // namespace conductor::runtime

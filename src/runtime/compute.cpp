#include "conductor/runtime/compute.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <thread>
#include <utility>

#include "conductor/model/backend.hpp"
#include "conductor/model/layer_split.hpp"
#include "conductor/model/stage.hpp"
#ifdef CONDUCTOR_HAVE_CUDA
#include "conductor/model/cuda/cuda_backend.hpp"
#include "conductor/runtime/cuda/device_selection.hpp"
#include "conductor/runtime/cuda/gpu_clock.hpp"
// Header-only NVTX 3: without a tool attached (Nsight Systems) each call is a check of a null pointer.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#endif
#include "conductor/runtime/clock.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/trace/event.hpp"
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

// One action of a virtual stage on the stage model (host or device backend alike).
void run_stage_op(model::StageModel& model, const sched::Action& a, int stage, const float* in, float* out) {
  switch (a.kind) {
    case sched::OpKind::F: model.forward(stage, a.microbatch, in, out); break;
    case sched::OpKind::B: model.backward_input(stage, a.microbatch, in, out); break;
    case sched::OpKind::W: model.backward_weight(stage, a.microbatch); break;
    case sched::OpKind::BW: model.backward_full(stage, a.microbatch, in, out); break;
  }
}

// What the noise model adds to an op of real math: its noisy time beyond the cost model's nominal one (ms).
double injected_extra_ms(const sim::NoiseModel& noise, int step, int rank, const sched::Action& a, int v) {
  if (!noise.any()) return 0.0;
  const double nominal = noise.cost().op_time(rank, a.kind, v);
  return std::max(0.0, noise.compute_time_ms(step, rank, a.chunk, a.microbatch, a.kind) - nominal);
}

// Payload buffers in a backend's memory, recycled across ops and steps (the executor takes one per received
// input and per produced output, and gives it back once consumed or sent).
class BufferPool {
 public:
  BufferPool(model::Backend& backend, std::size_t floats) : backend_(backend), floats_(floats) {}
  float* take() {
    if (floats_ == 0) return nullptr;
    if (free_.empty()) {
      all_.emplace_back(backend_, floats_ * sizeof(float));
      return all_.back().f();
    }
    float* b = free_.back();
    free_.pop_back();
    return b;
  }
  void give(float* b) {
    if (b) free_.push_back(b);
  }
  void clear() {
    free_.clear();
    all_.clear();
  }

 private:
  model::Backend& backend_;
  std::size_t floats_;
  std::vector<model::DeviceBuffer> all_;
  std::vector<float*> free_;
};

// What the real-math backends share: the stage model of this rank's virtual stages, payload buffers from a
// pool in the backend's memory, and the step-level calls.
class StageCompute : public Compute {
 public:
  std::size_t payload_floats() const override { return model_->activation_elements(); }
  std::int64_t tensor_bytes() const override {
    return static_cast<std::int64_t>(model_->activation_elements() * sizeof(float));
  }
  float* take_buffer() override { return pool_->take(); }
  void give_buffer(float* b) override { pool_->give(b); }
  double step_loss() const override {
    return holds_last_ ? model_->step_loss() : std::numeric_limits<double>::quiet_NaN();
  }
  bool has_loss() const override { return holds_last_; }
  double local_grad_sq_norm() const override { return model_->local_grad_sq_norm(); }
  void optimizer_step(double norm, int step) override { model_->optimizer_step(norm, step); }
  void optimizer_step_unclipped(int step) override { model_->optimizer_step_unclipped(step); }
  std::size_t keep_backup() override { return model_->keep_backup(); }
  void restore_backup() override { model_->restore_backup(); }
  model::StageModel* model() override { return model_.get(); }

  // Computation migration with the trainer's kernels, on any backend (the model stages a helper's request through
  // its backend's memory): the MLP column groups and the attention head groups of F, B, W and BW (both halves), and
  // the LM head's vocabulary groups. None where the stage has none of them.
  SliceMoves slice_moves(sched::OpKind kind, int stage) const override {
    return requests_per_op(kind, stage) > 0 ? SliceMoves::Real : SliceMoves::None;
  }
  void keep_share(double share) override { share_ = share; }
  void set_progress(std::function<bool()> progress) override { progress_ = std::move(progress); }
  void give_slices(int slices, HelpSender send, HelpReceiver receive) override {
    give_ = slices;
    send_ = std::move(send);
    receive_ = std::move(receive);
  }
  std::vector<float> compute_slices(sched::OpKind kind, int slices, const std::vector<float>& input) override {
    switch (kind) {
      case sched::OpKind::F: return model_->forward_help(slices, input);
      case sched::OpKind::B: return model_->backward_input_help(slices, input);
      case sched::OpKind::W: return model_->weight_grads(slices, input);
      case sched::OpKind::BW: break;
    }
    throw Error("compute: a helper's request names BW: its requests are its B half's and W half's (compute.hpp)");
  }
  void land_slices(const sched::Action& a, int stage, const std::vector<float>& answer) override {
    model_->land_weight_grads(stage, a.microbatch, answer);
  }
  int requests_per_op(sched::OpKind kind, int stage) const override {
    // F, B: one request per layer and grouped unit, and one for the LM head's vocabulary groups on the last stage
    // (0: the op has nothing to give, slice_moves says None). W: one, when a unit of the stage is grouped and the
    // stage has layers (a stage of 0 layers gives no layer W; it crashed the helper), or it holds the LM head. BW: its
    // B half's, then its W half's.
    const int units = (model_->mlp_groups() > 1 ? 1 : 0) + (model_->head_groups() > 1 ? 1 : 0);
    const bool head = model_->vocab_groups() > 1 && stage == static_cast<int>(layers_.size()) - 1;
    const int per_layer = units * layers_[static_cast<std::size_t>(stage)] + (head ? 1 : 0);
    const int weight = (units > 0 && layers_[static_cast<std::size_t>(stage)] > 0) || head ? 1 : 0;
    switch (kind) {
      case sched::OpKind::F:
      case sched::OpKind::B: return per_layer;
      case sched::OpKind::W: return weight;
      case sched::OpKind::BW: break;
    }
    return per_layer + weight;
  }

 protected:
  StageCompute(const plan::Plan& plan, const sched::Schedule& s, int rank, const sim::NoiseModel& noise)
      : schedule_(s), rank_(rank), noise_(noise), layers_(model::split_layers(plan.model, s.num_stages())) {}
  // backend: the device backend the model runs on, or nullptr for the plan's cpu backend (owned by the model).
  void build(const plan::Plan& plan, model::Backend* backend) {
    std::vector<int> held;
    for (int c = 0; c < schedule_.v; ++c) held.push_back(schedule_.stage_of(rank_, c));
    model_ = std::make_unique<model::StageModel>(plan, held, schedule_.num_stages(), backend);
    holds_last_ = model_->holds(schedule_.num_stages() - 1);
    pool_ = std::make_unique<BufferPool>(backend ? *backend : model::cpu_backend(), model_->activation_elements());
  }
  // The op on the model, with its last give_ slices on a helper when give_slices asked for it. Blocks the host
  // where migration needs the device's results: F and B (and BW's B half) wait for each layer's answer, and W's
  // helper input is downloaded once its B is done (on cuda the backend's download waits for the stream).
  void run_op(const sched::Action& a, int stage, const float* in, float* out) {
    if (give_ > 0 && (a.kind == sched::OpKind::F || a.kind == sched::OpKind::B)) {
      model_->give_groups(std::exchange(give_, 0), {std::move(send_), std::move(receive_)});  // per layer
      run_stage_op(*model_, a, stage, in, out);
    } else if (give_ > 0) {
      run_giving(a, stage, in, out);
    } else {
      run_stage_op(*model_, a, stage, in, out);
    }
  }
  // The noise model's injected extra delay of this op (ms), scaled by the share it keeps (keep_share).
  double injected_ms(int step, const sched::Action& a) {
    return injected_extra_ms(noise_, step, rank_, a, schedule_.v) * std::exchange(share_, 1.0);
  }

  const sched::Schedule& schedule_;
  int rank_;
  const sim::NoiseModel& noise_;
  std::unique_ptr<model::StageModel> model_;
  std::unique_ptr<BufferPool> pool_;
  bool holds_last_ = false;
  std::function<bool()> progress_;  // set_progress

 private:
  // W or BW with its last give_ groups on a helper. BW: its B half gives the same groups as a B op does (per layer,
  // each answer awaited), then, as W: the helper's input out, then W of the rest (the answer lands after the op).
  void run_giving(const sched::Action& a, int stage, const float* in, float* out) {
    const int slices = std::exchange(give_, 0);
    const HelpSender send = std::move(send_);
    if (a.kind == sched::OpKind::BW) {
      model_->give_groups(slices, {send, std::move(receive_)});
      model_->backward_input(stage, a.microbatch, in, out);
    }
    std::vector<float> input = model_->weight_inputs(stage, a.microbatch, slices);
    send(std::move(input), model_->weight_grads_floats(stage, slices));
    model_->backward_weight(stage, a.microbatch);
  }

  std::vector<int> layers_;  // per virtual stage (any rank's: a helper serves them all)
  double share_ = 1.0;       // of the next op's injected extra delay (keep_share)
  int give_ = 0;             // slices the next op gives to a helper (give_slices)
  HelpSender send_;
  HelpReceiver receive_;  // F, B, BW's B half
};

// Real math on this rank's virtual stages on the host (cpu backend): launch() runs the op. The noise model adds
// its perturbation on top of the cost model's nominal time as a real delay after the op, so a straggler window
// or jitter slows the real run as modelled.
class HostModelCompute final : public StageCompute {
 public:
  HostModelCompute(const plan::Plan& plan, const sched::Schedule& s, int rank, const sim::NoiseModel& noise)
      : StageCompute(plan, s, rank, noise) {
    build(plan, nullptr);
  }
  void begin_step(int step) override { model_->begin_step(step); }
  OpTicket launch(int step, const sched::Action& a, int stage, const float* in, float* out) override {
    last_.start_ns = steady_now_ns();
    run_op(a, stage, in, out);
    if (const double extra = injected_ms(step, a); extra > 0) {
      sleep_with_progress_until_ns(steady_now_ns() + trace::ms_to_ns(extra), progress_);  // migration's messages move
    }
    last_.end_ns = steady_now_ns();
    return ++tickets_;
  }
  bool finished(OpTicket, OpSpan& span) override {
    span = last_;
    return true;
  }

 private:
  OpSpan last_;
  OpTicket tickets_ = 0;
};

#ifdef CONDUCTOR_HAVE_CUDA
// Real math on this rank's GPU: launch() queues the op's kernels on the backend's stream between two GPU clock
// marks and returns; finished() asks the marks (cudaEventQuery), so the host never blocks on the GPU during a
// step and the trace times each op on the GPU's own clock. The noise model's extra time is a GPU-side delay
// kernel inside the op, so a modelled straggler slows the device, not the host. Payload buffers are device
// memory: the data transport moves them (NCCL, or host-staged MPI for ranks that share a GPU).
//
// Each launch is an NVTX range in the domain "conductor", named like the trace's ops ("F3 stage 1 step 5",
// coloured by kind): Nsight Systems shows it on the host thread and projects it onto the kernels it queued.
class NvtxOpRange {
 public:
  NvtxOpRange(int step, const sched::Action& a, int stage) {
    char name[64];
    std::snprintf(name, sizeof name, "%s%d stage %d step %d", sched::to_string(a.kind), a.microbatch, stage, step);
    nvtxEventAttributes_t attr{};
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.colorType = NVTX_COLOR_ARGB;
    attr.color = colour(a.kind);
    attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attr.message.ascii = name;
    nvtxDomainRangePushEx(domain(), &attr);
  }
  ~NvtxOpRange() { nvtxDomainRangePop(domain()); }
  NvtxOpRange(const NvtxOpRange&) = delete;
  NvtxOpRange& operator=(const NvtxOpRange&) = delete;

 private:
  static nvtxDomainHandle_t domain() {
    static const nvtxDomainHandle_t d = nvtxDomainCreateA("conductor");
    return d;
  }
  static std::uint32_t colour(sched::OpKind k) {  // analysis/timeline.py's colours
    switch (k) {
      case sched::OpKind::F: return 0xFF4C72B0;
      case sched::OpKind::B: return 0xFFDD8452;
      case sched::OpKind::W: return 0xFF55A868;
      default: return 0xFFC44E52;
    }
  }
};

class DeviceModelCompute final : public StageCompute {
 public:
  DeviceModelCompute(const plan::Plan& plan, const sched::Schedule& s, int rank, const sim::NoiseModel& noise,
                     std::unique_ptr<model::cuda::CudaBackend> backend)
      : StageCompute(plan, s, rank, noise), backend_(std::move(backend)), depth_(plan.cuda.queue_depth) {
    build(plan, backend_.get());
    clock_ = std::make_unique<cuda::GpuClock>(backend_->stream());
  }
  ~DeviceModelCompute() override {
    // Everything that owns device memory or events goes before the backend (its stream and context).
    if (backend_) backend_->synchronize();
    pool_.reset();
    model_.reset();
    clock_.reset();
  }
  void begin_step(int step) override {
    clock_->reanchor();  // the stream is idle between steps: re-anchor GPU time to host time once per step
    model_->begin_step(step);
  }
  OpTicket launch(int step, const sched::Action& a, int stage, const float* in, float* out) override {
    const NvtxOpRange range(step, a, stage);
    Marks marks;
    marks.start = clock_->mark();
    run_op(a, stage, in, out);  // host-synchronous where it gives slices (StageCompute::run_op)
    if (const double extra = injected_ms(step, a); extra > 0) {
      backend_->delay(trace::ms_to_ns(extra));  // on the GPU: it delays exactly the ops queued behind it
    }
    marks.end = clock_->mark();
    const OpTicket t = ++tickets_;
    in_flight_.emplace(t, marks);
    return t;
  }
  bool finished(OpTicket t, OpSpan& span) override {
    auto it = in_flight_.find(t);
    if (it == in_flight_.end()) throw Error("cuda compute: unknown op ticket " + std::to_string(t));
    if (!clock_->query(it->second.end)) return false;
    span.start_ns = clock_->steady_ns(it->second.start);
    span.end_ns = clock_->steady_ns(it->second.end);
    clock_->recycle(it->second.start);
    clock_->recycle(it->second.end);
    in_flight_.erase(it);
    return true;
  }
  int queue_depth() const override { return depth_; }
  void* device_stream() const override { return backend_->stream(); }
  double peak_memory_bytes() const override {
    cudaMemPool_t pool = nullptr;
    std::uint64_t high = 0;
    if (cudaDeviceGetMemPool(&pool, backend_->device()) != cudaSuccess ||
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high) != cudaSuccess)
      return 0.0;
    return static_cast<double>(high);
  }

 private:
  struct Marks {
    cudaEvent_t start = nullptr, end = nullptr;
  };
  std::unique_ptr<model::cuda::CudaBackend> backend_;
  int depth_ = 2;  // cuda.queue_depth
  std::unique_ptr<cuda::GpuClock> clock_;
  std::map<OpTicket, Marks> in_flight_;
  OpTicket tickets_ = 0;
};
#endif

// No math: each op sleeps for its (noisy) cost-model time.
class EmulatedCompute final : public Compute {
 public:
  EmulatedCompute(const plan::Plan& plan, int rank, const sim::NoiseModel& noise)
      : rank_(rank), noise_(noise), bytes_(static_cast<std::int64_t>(plan.activation_bytes)) {}
  std::size_t payload_floats() const override { return 0; }
  std::int64_t tensor_bytes() const override { return bytes_; }
  float* take_buffer() override { return nullptr; }
  void give_buffer(float*) override {}
  void begin_step(int) override {}
  OpTicket launch(int step, const sched::Action& a, int, const float*, float*) override {
    last_.start_ns = steady_now_ns();
    const double ms = noise_.compute_time_ms(step, rank_, a.chunk, a.microbatch, a.kind) * share_;
    share_ = 1.0;
    sleep_with_progress_until_ns(last_.start_ns + trace::ms_to_ns(ms), progress_);
    last_.end_ns = steady_now_ns();
    return ++tickets_;
  }
  bool finished(OpTicket, OpSpan& span) override {
    span = last_;
    return true;
  }
  double step_loss() const override { return std::numeric_limits<double>::quiet_NaN(); }
  bool has_loss() const override { return false; }
  double local_grad_sq_norm() const override { return 0.0; }
  void optimizer_step(double, int) override {}
  SliceMoves slice_moves(sched::OpKind, int) const override { return SliceMoves::Modelled; }
  void keep_share(double share) override { share_ = share; }
  void set_progress(std::function<bool()> progress) override { progress_ = std::move(progress); }

 private:
  int rank_;
  double share_ = 1.0;  // of the next op's time (keep_share)
  std::function<bool()> progress_;
  const sim::NoiseModel& noise_;
  std::int64_t bytes_;
  OpSpan last_;
  OpTicket tickets_ = 0;
};

}  // namespace

void sleep_with_progress_until_ns(std::int64_t deadline_ns, const std::function<bool()>& progress) {
  constexpr std::int64_t kProgressEveryNs = 100'000;
  while (progress && steady_now_ns() < deadline_ns && progress()) {
    sleep_until_ns(std::min(deadline_ns, steady_now_ns() + kProgressEveryNs));
  }
  sleep_until_ns(deadline_ns);
}

void Compute::keep_share(double) { throw Error("this backend has no computation migration (keep_share)"); }
void Compute::give_slices(int, HelpSender, HelpReceiver) {
  throw Error("this backend computes no real slices for a helper (give_slices)");
}
std::vector<float> Compute::compute_slices(sched::OpKind, int, const std::vector<float>&) {
  throw Error("this backend computes no real slices for a helper (compute_slices)");
}
int Compute::requests_per_op(sched::OpKind, int) const { return 1; }
void Compute::land_slices(const sched::Action&, int, const std::vector<float>&) {
  throw Error("this backend computes no real slices for a helper (land_slices)");
}

double Compute::peak_memory_bytes() const {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports kilobytes
}

std::unique_ptr<Compute> make_compute(const plan::Plan& plan, const sched::Schedule& s, int rank,
                                      const sim::NoiseModel& noise, MPI_Comm comm) {
  if (plan.backend == "emulated") return std::make_unique<EmulatedCompute>(plan, rank, noise);
  if (plan.backend == "cpu") return std::make_unique<HostModelCompute>(plan, s, rank, noise);
#ifdef CONDUCTOR_HAVE_CUDA
  if (plan.backend == "cuda") {
    // Collective: every rank fails together when a rank has no GPU (or too few GPUs without sharing).
    model::cuda::CudaOptions options;
    options.device = cuda::select_device(comm, plan.cuda.allow_gpu_sharing);
    options.precision = model::cuda::parse_precision(plan.model.precision);
    options.tf32 = plan.cuda.tf32;
    return std::make_unique<DeviceModelCompute>(plan, s, rank, noise,
                                                std::make_unique<model::cuda::CudaBackend>(options));
  }
#endif
  (void)comm;
  throw InputError("backend = '" + plan.backend + "' cannot run in this build (allowed: cpu, emulated)");
}

}  // namespace conductor::runtime

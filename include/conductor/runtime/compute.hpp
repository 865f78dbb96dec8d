#pragma once
// What an op does on this rank. `cpu` (and later `cuda`) run the real trainer (model::StageModel); `emulated`
// runs no math: each op takes its cost-model time, so the runtime's logic can be exercised with many ranks on
// few cores and compared with the simulator. Both inject the plan's noise model as real delays.
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <mpi.h>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/schedule.hpp"
#include "conductor/sim/noise.hpp"

namespace conductor::model {
class StageModel;
}

namespace conductor::runtime {

// An op's start and end on the host steady clock (steady_now_ns()); device backends measure them with GPU
// events mapped to that clock.
struct OpSpan {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

using OpTicket = std::int64_t;

class Compute {
 public:
  virtual ~Compute() = default;
  // Floats of one activation/gradient message payload (0 for the emulated backend's stand-ins).
  virtual std::size_t payload_floats() const = 0;
  // Bytes the real tensor would have (recorded in the trace even when only a stand-in travels).
  virtual std::int64_t tensor_bytes() const = 0;
  // Payload buffers of payload_floats() floats in the memory this backend computes on (host for cpu, device
  // for cuda): what the data transport moves. Recycled: give back what you take. nullptr when no payload.
  virtual float* take_buffer() = 0;
  virtual void give_buffer(float* buffer) = 0;
  virtual void begin_step(int step) = 0;
  // Queues one action of virtual stage `stage`. in: the received activation (F) or gradient (B, BW), or
  // nullptr where the stage has none; out: where F's activation or B/BW's input gradient goes, or nullptr.
  // Host backends run the op before returning; device backends enqueue it on their stream and return at once.
  // Both buffers must stay untouched until finished() says the op is done.
  virtual OpTicket launch(int step, const sched::Action& action, int stage, const float* in, float* out) = 0;
  // Computation migration (docs/migration.md). How an op of `kind` of virtual stage `stage` can give slices to a
  // helper: Modelled (the emulated backend sleeps the modelled share; the helper sleeps the slices' time), Real (the
  // trainer's kernels: cpu and cuda, the MLP column and attention head groups of F, B, W and BW (both halves), and on
  // cpu the LM-head vocabulary groups; the helper stages its request through its backend's memory), None (also a
  // Real backend's op whose stage has none of the grouped units, e.g. `vocab` alone on a stage without the LM head).
  enum class SliceMoves { None, Modelled, Real };
  virtual SliceMoves slice_moves(sched::OpKind kind, int stage) const {
    (void)kind;
    (void)stage;
    return SliceMoves::None;
  }
  // The next launch() keeps `share` (0..1] of its op's modelled time (Modelled: its whole duration; Real: the
  // noise model's injected extra delay, which scales with the work kept: a host sleep on cpu, the GPU-side delay
  // kernel on cuda).
  virtual void keep_share(double share);
  // Real, owner: the next launch() gives the last `slices` slices to a helper. F, B: per layer, send(the layer's
  // input, floats of the answer expected) and, after its own groups, receive() (blocking: the next layer needs the
  // sum), so the answers are in when launch() returns. W: send(the helper's input), then it computes the rest; the
  // op's weight gradients wait for land_slices. BW: its B half as B (the same groups, per layer, each answer
  // received), then its W half as W. A device backend's launch() is then synchronous with the host: the request is
  // downloaded and the answer uploaded.
  using HelpSender = std::function<void(std::vector<float> input, std::size_t answer_floats)>;
  using HelpReceiver = std::function<std::vector<float>()>;
  virtual void give_slices(int slices, HelpSender send, HelpReceiver receive);
  // Real, helper: the answer to one request of another rank's op for its last `slices` slices, from its input. kind:
  // F, B or W; a BW's requests are B's (its first requests_per_op(B) ones) and then W's (its last), in that order.
  virtual std::vector<float> compute_slices(sched::OpKind kind, int slices, const std::vector<float>& input);
  // Real, helper: the requests one op of `kind` of virtual stage `stage` makes (F, B: one per layer and grouped unit,
  // and one for the LM head's vocabulary groups; W: one; BW: B's and W's).
  virtual int requests_per_op(sched::OpKind kind, int stage) const;
  // Real, owner: the helper's answer for action a of virtual stage `stage` is in.
  virtual void land_slices(const sched::Action& a, int stage, const std::vector<float>& answer);
  // Called over and over while an op of a host backend waits (emulated: sleeps), as long as it returns true: the
  // executor keeps migration's payloads moving (a rendezvous moves only while its sender polls). Empty: none.
  virtual void set_progress(std::function<bool()> progress) { (void)progress; }
  // Non-blocking: true once the op finished, with its span (then the ticket is released).
  virtual bool finished(OpTicket ticket, OpSpan& span) = 0;
  // Launched, unfinished ops the executor may keep queued: 1 for host backends; cuda.queue_depth (2 by
  // default) for a GPU, so the next op is queued while one runs and the GPU never waits for the host to pick.
  virtual int queue_depth() const { return 1; }
  // Loss of the step (meaningful on the rank holding the last virtual stage; NaN without math).
  virtual double step_loss() const = 0;
  virtual bool has_loss() const = 0;
  virtual double local_grad_sq_norm() const = 0;
  virtual void optimizer_step(double global_grad_norm, int step) = 0;
  // Optimizer post-validation (docs/post-validation.md): the update with gradient scale 1, taken before the global
  // norm is known, and the copy of weights, AdamW moments and gradients that undoes it (keep_backup returns its
  // bytes). No-ops without math.
  virtual void optimizer_step_unclipped(int step) { (void)step; }
  virtual std::size_t keep_backup() { return 0; }
  virtual void restore_backup() {}
  virtual model::StageModel* model() { return nullptr; }
  // Peak bytes of the memory this backend computes in, so far: the process's peak resident set on the host
  // (cpu, emulated); the high watermark of CUDA's stream-ordered allocator on the GPU (cuda).
  virtual double peak_memory_bytes() const;
  // The backend's stream for device backends (a cudaStream_t), which device transports order after.
  virtual void* device_stream() const { return nullptr; }
};

// The plan's backend for `rank` of schedule `s`; noise is the plan's noise model (applied as real delays).
// Collective over comm for backend cuda (GPU selection by the node-local rank).
std::unique_ptr<Compute> make_compute(const plan::Plan& plan, const sched::Schedule& s, int rank,
                                      const sim::NoiseModel& noise, MPI_Comm comm);

// Sleeps until `deadline_ns` on the steady clock (sleep, not spin: oversubscribed ranks share cores).
void sleep_until_ns(std::int64_t deadline_ns);
// The same, calling `progress` every 100 us while it returns true (Compute::set_progress).
void sleep_with_progress_until_ns(std::int64_t deadline_ns, const std::function<bool()>& progress);

}  // namespace conductor::runtime

#pragma once
// What an op does on this rank. `cpu` (and later `cuda`) run the real trainer (model::StageModel); `emulated`
// runs no math: each op takes its cost-model time, so the runtime's logic can be exercised with many ranks on
// few cores and compared with the simulator. Both inject the deck's noise model as real delays.
#include <cstddef>
#include <memory>
#include <vector>

#include <mpi.h>

#include "conductor/config/deck.hpp"
#include "conductor/sched/schedule.hpp"
#include "conductor/sim/noise.hpp"

namespace conductor::model {
class StageModel;
}

namespace conductor::runtime {

class Compute {
 public:
  virtual ~Compute() = default;
  // Floats of one activation/gradient message payload (0 for the emulated backend's stand-ins).
  virtual std::size_t payload_floats() const = 0;
  // Bytes the real tensor would have (recorded in the trace even when only a stand-in travels).
  virtual std::int64_t tensor_bytes() const = 0;
  virtual void begin_step(int step) = 0;
  // Runs one action of virtual stage `stage`. in: the received activation (F) or gradient (B, BW), or nullptr
  // where the stage has none; out: where F's activation or B/BW's input gradient goes, or nullptr.
  virtual void run(int step, const sched::Action& action, int stage, const float* in, float* out) = 0;
  // Loss of the step (meaningful on the rank holding the last virtual stage; NaN without math).
  virtual double step_loss() const = 0;
  virtual bool has_loss() const = 0;
  virtual double local_grad_sq_norm() const = 0;
  virtual void optimizer_step(double global_grad_norm, int step) = 0;
  virtual model::StageModel* model() { return nullptr; }
};

// The deck's backend for `rank` of schedule `s`; noise is the deck's noise model (applied as real delays).
// Collective over comm for backend cuda (GPU selection by the node-local rank).
std::unique_ptr<Compute> make_compute(const config::Deck& deck, const sched::Schedule& s, int rank,
                                      const sim::NoiseModel& noise, MPI_Comm comm);

// Sleeps until `deadline_ns` on the steady clock (sleep, not spin: oversubscribed ranks share cores).
void sleep_until_ns(std::int64_t deadline_ns);

}  // namespace conductor::runtime

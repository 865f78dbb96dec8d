#pragma once
// The step's numbers and what is done about non-finite ones (issue 17).
//
// StepReducer: one reduction per step carries the loss, whether a rank was asked to stop, and the sum of
// squares of every gradient tensor, laid out [virtual stage][tensor]. Each entry has exactly one contributing
// rank (the others add 0.0), so the reduction is exact whatever its order, and the global norm is the same
// sequential sum over (virtual stage, tensor) that model::StageModel::local_grad_sq_norm computes on one
// process: bit-identical to the single-process reference. It also names the first virtual stage whose
// gradients are not finite, for free. The reduction runs point to point under the watchdog (every rank sends
// its row to rank 0, which sums and sends the result back), so a rank that never arrives is named: rank 0
// knows which row is missing, and the other ranks wait 1.5x as long for rank 0, which therefore speaks first
// unless it is rank 0 that is silent.
//
// With schedule.post_validation the same row travels by MPI_Iallreduce (start/finish), so that a rank steps its
// optimizer while the others still compute; the per-peer naming of a silent rank is then the watchdog's plain
// timeout.
//
// NonfiniteGuard: a step whose loss or global gradient norm is NaN/Inf stops the run (exit 1, no checkpoint)
// or, with optim.skip_nonfinite_steps = N > 0, is skipped: no update of weights or AdamW moments, while the
// data, the learning-rate schedule and AdamW's step count advance as if it had been taken (the next step is
// step k+1 in every respect); more than N skipped steps in a run stop it. A loss above kDivergenceFactor x the
// run's first loss prints one warning.
#include <string>
#include <vector>

#include <mpi.h>

#include "conductor/runtime/compute.hpp"
#include "conductor/runtime/watchdog.hpp"
#include "conductor/util/mpi.hpp"

namespace conductor::runtime {

struct StepNumbers {
  double loss = 0.0;          // the step's loss (0 without math)
  double grad_sq_norm = 0.0;  // global sum of squares of the gradients
  bool stop = false;          // some rank was asked to stop (SIGTERM/SIGINT)
  int nonfinite_stage = -1;   // first virtual stage whose gradients hold NaN/Inf (-1: none)
};

class StepReducer {
 public:
  // Collective over comm (agrees on the layout).
  StepReducer(Compute& compute, int num_virtual_stages, MPI_Comm comm);
  // Collective: every rank's contribution of this step. CONDUCTOR_INJECT_NAN=RANK:STEP[,RANK:STEP...] (tests)
  // makes that rank's first gradient entry NaN at that step; CONDUCTOR_INJECT_CLIP (same form) adds 1e30 to it,
  // so that clipping applies at that step alone (its update is scaled by about grad_clip / 1e15).
  StepNumbers reduce(int step, bool stop_here, const Watchdog& watchdog) const;

  // The same numbers, non-blocking (optimizer post-validation): start() posts an MPI_Iallreduce of the same
  // row, finish() waits for it under the watchdog. Exact like reduce(): each entry has one contributing rank.
  class Pending {
   public:
    Pending() = default;
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;
    ~Pending();

   private:
    friend class StepReducer;
    std::vector<double> local_, global_;
    MPI_Request request_ = MPI_REQUEST_NULL;
    int step_ = 0;
  };
  void start(int step, bool stop_here, Pending& pending) const;
  // Non-blocking: whether the reduction is in (finish() then returns at once). Polled between ops.
  bool test(Pending& pending) const;
  StepNumbers finish(Pending& pending, const Watchdog& watchdog) const;

 private:
  std::vector<double> local_row(int step, bool stop_here) const;
  StepNumbers numbers_of(const std::vector<double>& global) const;
  void sum_over_ranks(const std::vector<double>& local, std::vector<double>& global, int step,
                      const Watchdog& watchdog) const;
  Compute& compute_;
  int num_vs_;
  int per_stage_ = 0;  // entries per virtual stage: the most tensors any stage has
  int rank_ = 0, size_ = 1;
  mpi::DupComm comm_;  // its own matching space
};

class NonfiniteGuard {
 public:
  static constexpr double kDivergenceFactor = 10.0;
  enum class Verdict { Update, Skip, Stop };
  // skipped: steps a resumed run's earlier attempts skipped (its checkpoint's manifest); the limit counts the run.
  NonfiniteGuard(int skip_limit, int last_stage_rank, int skipped = 0)
      : skip_limit_(skip_limit), last_stage_rank_(last_stage_rank), skipped_(skipped) {}
  // Same answer on every rank (the numbers are allreduced). message(): what to print (rank 0) for Skip/Stop.
  Verdict judge(const StepNumbers& n, int step, int stage_rank_of_nonfinite, bool has_math);
  const std::string& message() const { return message_; }
  // A one-time divergence warning ("" when none is due), rank 0; grad_clip: optim.grad_clip (its advice).
  std::string divergence(double loss, int step, double grad_clip);
  int skipped() const { return skipped_; }

 private:
  int skip_limit_;
  int last_stage_rank_;
  int skipped_ = 0;
  double first_loss_ = 0.0;
  bool have_first_ = false, warned_ = false;
  std::string message_;
};

// Whether every parameter and AdamW moment this rank holds is finite (checked before a checkpoint is written);
// `where` names the first non-finite tensor. True without a model.
bool state_is_finite(Compute& compute, std::string& where);

}  // namespace conductor::runtime

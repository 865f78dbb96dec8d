#include "conductor/runtime/numerics.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "conductor/model/stage.hpp"
#include "conductor/runtime/fault_injection.hpp"

namespace conductor::runtime {

namespace {

std::string format_value(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

StepReducer::StepReducer(Compute& compute, int num_virtual_stages, MPI_Comm comm)
    : compute_(compute), num_vs_(num_virtual_stages), comm_(comm) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  int mine = 0;
  if (compute.model()) {
    for (const auto& row : compute.model()->grad_sq_norms()) mine = std::max(mine, static_cast<int>(row.size()));
  }
  MPI_Allreduce(&mine, &per_stage_, 1, MPI_INT, MPI_MAX, comm);
}

void StepReducer::sum_over_ranks(const std::vector<double>& local, std::vector<double>& global, int step,
                                 const Watchdog& watchdog) const {
  const int n = static_cast<int>(local.size());
  const std::string of_step = " of step " + std::to_string(step + 1) + " (end-of-step reduction)";  // from 1
  constexpr int kUp = 1, kDown = 2;
  if (rank_ != 0) {
    std::vector<MPI_Request> r(2);
    MPI_Isend(local.data(), n, MPI_DOUBLE, 0, kUp, comm_.get(), &r[0]);
    MPI_Irecv(global.data(), n, MPI_DOUBLE, 0, kDown, comm_.get(), &r[1]);
    watchdog.wait_all(
        r, [&](std::size_t) { return "rank 0's reduced loss and gradient norms" + of_step; },
        [](std::size_t) { return 0; });
    return;
  }
  std::vector<std::vector<double>> rows(static_cast<std::size_t>(size_), std::vector<double>(local.size()));
  std::vector<MPI_Request> r(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
  for (int k = 1; k < size_; ++k) {
    MPI_Irecv(rows[static_cast<std::size_t>(k)].data(), n, MPI_DOUBLE, k, kUp, comm_.get(),
              &r[static_cast<std::size_t>(k)]);
  }
  const auto rank_k = [](std::size_t k) { return static_cast<int>(k); };  // request k is rank k's
  watchdog.wait_all(
      r, [&](std::size_t k) { return "the loss and gradient norms of rank " + std::to_string(k) + of_step; }, rank_k);
  global = local;
  for (int k = 1; k < size_; ++k) {
    for (std::size_t i = 0; i < global.size(); ++i) global[i] += rows[static_cast<std::size_t>(k)][i];
  }
  for (int k = 1; k < size_; ++k) {
    MPI_Isend(global.data(), n, MPI_DOUBLE, k, kDown, comm_.get(), &r[static_cast<std::size_t>(k)]);
  }
  watchdog.wait_all(
      r, [&](std::size_t k) { return "rank " + std::to_string(k) + " to take the reduced numbers" + of_step; }, rank_k);
}

std::vector<double> StepReducer::local_row(int step, bool stop_here) const {
  // [loss, stop, stage 0's tensors..., stage 1's tensors..., ...]; zero where this rank holds nothing.
  const std::size_t width = static_cast<std::size_t>(per_stage_);
  std::vector<double> local(2 + static_cast<std::size_t>(num_vs_) * width, 0.0);
  local[0] = compute_.has_loss() ? compute_.step_loss() : 0.0;
  local[1] = stop_here ? 1.0 : 0.0;
  if (model::StageModel* m = compute_.model()) {
    const auto rows = m->grad_sq_norms();
    for (std::size_t vs = 0; vs < rows.size(); ++vs) {
      for (std::size_t k = 0; k < rows[vs].size(); ++k) local[2 + vs * width + k] = rows[vs][k];
    }
    double& first = local[2 + static_cast<std::size_t>(m->virtual_stages_held().front()) * width];
    if (injected_at("CONDUCTOR_INJECT_NAN", rank_, step)) first = std::numeric_limits<double>::quiet_NaN();
    if (injected_at("CONDUCTOR_INJECT_CLIP", rank_, step)) first += 1e30;
  }
  return local;
}

StepNumbers StepReducer::numbers_of(const std::vector<double>& global) const {
  const std::size_t width = static_cast<std::size_t>(per_stage_);
  StepNumbers n;
  n.loss = global[0];
  n.stop = global[1] > 0;
  for (int vs = 0; vs < num_vs_; ++vs) {
    double stage_sum = 0.0;
    for (std::size_t k = 0; k < width; ++k) {
      const double v = global[2 + static_cast<std::size_t>(vs) * width + k];
      n.grad_sq_norm += v;  // sequential in (stage, tensor) order, as on one process; padding adds 0.0
      stage_sum += v;
    }
    if (n.nonfinite_stage < 0 && !std::isfinite(stage_sum)) n.nonfinite_stage = vs;
  }
  return n;
}

StepNumbers StepReducer::reduce(int step, bool stop_here, const Watchdog& watchdog) const {
  const std::vector<double> local = local_row(step, stop_here);
  std::vector<double> global(local.size(), 0.0);
  sum_over_ranks(local, global, step, watchdog);
  return numbers_of(global);
}

StepReducer::Pending::~Pending() {
  // Only on an error path (finish() completes it): the request must not outlive the buffers it writes.
  if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
}

void StepReducer::start(int step, bool stop_here, Pending& pending) const {
  pending.local_ = local_row(step, stop_here);
  pending.global_.assign(pending.local_.size(), 0.0);
  pending.step_ = step;
  MPI_Iallreduce(pending.local_.data(), pending.global_.data(), static_cast<int>(pending.local_.size()), MPI_DOUBLE,
                 MPI_SUM, comm_.get(), &pending.request_);
}

bool StepReducer::test(Pending& pending) const {
  int done = 1;
  if (pending.request_ != MPI_REQUEST_NULL) MPI_Test(&pending.request_, &done, MPI_STATUS_IGNORE);
  return done != 0;
}

StepNumbers StepReducer::finish(Pending& pending, const Watchdog& watchdog) const {
  std::vector<MPI_Request> r{pending.request_};
  pending.request_ = MPI_REQUEST_NULL;
  watchdog.wait_all(r, [&](std::size_t) {
    return "the global gradient norm and non-finite check of step " + std::to_string(pending.step_) +
           " (post-validation allreduce)";
  });
  return numbers_of(pending.global_);
}

NonfiniteGuard::Verdict NonfiniteGuard::judge(const StepNumbers& n, int step, int stage_rank_of_nonfinite,
                                              bool has_math) {
  message_.clear();
  const bool loss_ok = !has_math || std::isfinite(n.loss);
  const bool norm_ok = std::isfinite(n.grad_sq_norm);
  if (loss_ok && norm_ok) return Verdict::Update;
  std::string what = "step " + std::to_string(step + 1) + ": ";
  if (!norm_ok) {
    what += "non-finite gradient norm (first in stage " + std::to_string(n.nonfinite_stage) + ", rank " +
            std::to_string(stage_rank_of_nonfinite) + ")";
  }
  if (!loss_ok) {
    what += std::string(norm_ok ? "" : ", ") + "non-finite loss " + format_value(n.loss) + " (last stage, rank " +
            std::to_string(last_stage_rank_) + ")";
  }
  if (skipped_ < skip_limit_) {
    ++skipped_;
    message_ = what + "; step skipped, weights and optimizer state unchanged (" + std::to_string(skipped_) + " of " +
               std::to_string(skip_limit_) + " allowed by optim.skip_nonfinite_steps)";
    return Verdict::Skip;
  }
  message_ = what + "; stopping with no update and no checkpoint of this step (" +
             (skip_limit_ == 0 ? std::string("optim.skip_nonfinite_steps = 0")
                               : std::to_string(skipped_) +
                                     " steps already skipped, the limit of "
                                     "optim.skip_nonfinite_steps") +
             ")";
  return Verdict::Stop;
}

std::string NonfiniteGuard::divergence(double loss, int step, double grad_clip) {
  if (!std::isfinite(loss)) return "";
  if (!have_first_) {
    have_first_ = true;
    first_loss_ = loss;
    return "";
  }
  if (warned_ || !(loss > kDivergenceFactor * first_loss_) || first_loss_ <= 0) return "";
  warned_ = true;
  return "step " + std::to_string(step + 1) + ": loss " + format_value(loss) + " is above " +
         format_value(kDivergenceFactor) + "x the run's first loss (" + format_value(first_loss_) +
         "): training may be diverging (" +
         (grad_clip > 0 ? "lower optim.lr or optim.grad_clip = " + format_value(grad_clip)
                        : std::string("lower optim.lr or set optim.grad_clip, now 0: no clipping")) +
         "); warned once";
}

bool state_is_finite(Compute& compute, std::string& where) {
  model::StageModel* m = compute.model();
  if (!m) return true;
  for (int vs : m->virtual_stages_held()) {
    for (model::Buffer b : {model::Buffer::Params, model::Buffer::AdamM, model::Buffer::AdamV}) {
      const std::vector<float> values = m->read(vs, b);
      for (const auto& t : m->tensors(vs)) {
        for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) {
          if (std::isfinite(values[i])) continue;
          const char* kind = b == model::Buffer::Params ? "weights" : "AdamW moments";
          where = std::string(kind) + " of " + t.name + " (stage " + std::to_string(vs) + ")";
          return false;
        }
      }
    }
  }
  return true;
}

}  // namespace conductor::runtime

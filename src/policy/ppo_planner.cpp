#include "conductor/policy/ppo_planner.hpp"

#include <torch/utils.h>  // set_num_threads (not <torch/torch.h>: compile time)

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <optional>

#include "conductor/policy/policy.hpp"
#include "conductor/policy/ppo.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/engine.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/trace/event.hpp"
#include "conductor/util/error.hpp"

namespace conductor::policy {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Inference on a few hundred candidates is fastest on one thread, and at run time the planner thread shares
// rank 0's cores with the stage it trains. Set once per calling thread: LibTorch's setting reaches OpenMP
// through the caller's own thread state, so setting it on rank 0's main thread would also shrink the CPU
// trainer's OpenMP and OpenBLAS threads there.
void single_threaded_inference() {
  thread_local bool done = false;
  if (!done) {
    torch::set_num_threads(1);
    done = true;
  }
}

class PpoPlanner final : public sched::OrderPlanner {
 public:
  PpoPlanner(const plan::Plan& resolved, sched::Schedule generated, Policy policy,
             std::optional<sched::PolicySource> source = std::nullopt)
      : policy_(std::move(policy)), source_(std::move(source)), base_(std::move(generated)), estimate_(resolved.costs) {
    const int p = base_.p, v = base_.v;
    // Per-rank vectors, so per-rank estimates can replace them.
    sched::CostModel c = estimate_;
    estimate_.forward.assign(p, 0);
    estimate_.backward_input.assign(p, 0);
    estimate_.backward_weight.assign(p, 0);
    for (int r = 0; r < p; ++r) {
      estimate_.forward[r] = c.op_time(r, sched::OpKind::F, v) * v;
      estimate_.backward_input[r] = c.op_time(r, sched::OpKind::B, v) * v;
      estimate_.backward_weight[r] = c.op_time(r, sched::OpKind::W, v) * v;
    }
    env_.heuristic = policy_.heuristic;
    env_.memory_limit = sched::memory_limit_for(resolved, base_);
    env_.memory_after_b = estimate_.memory_after_b;
    exec_.execution = sched::parse_execution(resolved.schedule.execution);
    exec_.hint = sched::parse_hint(resolved.schedule.hint);
    exec_.wide_spread = resolved.schedule.wide_spread;
    exec_.memory_limit = env_.memory_limit;
    exec_.memory_after_b = env_.memory_after_b;
    env_.migration = env_migration(resolved, base_);  // the local tier decides inside the rollouts too
    // Post-validated steps overlap (each rank starts step k+1 when it is done with step k): the rollouts and the
    // check run a window of two steps, as training's do (ppo.cpp), so an order that ends each step as soon but
    // overlaps worse is seen (it ran 4% slower than the generator's order, noise-free, with one-step checks).
    env_.overlap_steps = resolved.schedule.post_validation;
    env_.steps = env_.overlap_steps ? 2 : 1;
    exec_.migration = env_.migration;
    ema_ = resolved.scheduler.ema;
    verify_ = resolved.scheduler.verify_samples;
    seed_ = resolved.run.seed;
  }
  const char* name() const override { return "ppo"; }
  const sched::PolicySource* policy_source() const override { return source_ ? &*source_ : nullptr; }

  sched::Schedule initial_order() override {
    const auto t0 = Clock::now();
    sched::Schedule out = plan(0);
    stats_.last_latency_ms = ms_since(t0);
    return out;
  }

  sched::Schedule next_order(const sched::StepObservation& obs) override {
    single_threaded_inference();
    const auto t0 = Clock::now();
    if (obs.events) observe(*obs.events);
    sched::Schedule out = plan(obs.step + 2);
    stats_.last_latency_ms = ms_since(t0);
    return out;
  }

  const PpoStats& stats() const {
    stats_.estimate = estimate_;
    return stats_;
  }

 private:
  void observe(const std::vector<trace::OpEvent>& events) {
    const int p = base_.p, v = base_.v;
    // sum[r][kind], count[r][kind] of chunk-op times (ms); kinds F, B, W, BW.
    std::vector<std::array<double, 4>> sum(p, {0, 0, 0, 0}), sq(p, {0, 0, 0, 0});
    std::vector<std::array<int, 4>> cnt(p, {0, 0, 0, 0});
    double comm_sum = 0;
    int comm_cnt = 0;
    for (const auto& e : events) {
      const double ms = static_cast<double>(e.end_ns - e.start_ns) * trace::kTickMs;
      if (e.kind == trace::EventKind::SEND) {
        comm_sum += ms;
        ++comm_cnt;
        continue;
      }
      const int k = static_cast<int>(e.kind);
      // A migrated op's span is its owner's share and the help's, not the op's time alone: skipped.
      if (k < 0 || k > 3 || e.rank < 0 || e.rank >= p || e.migrated > 0) continue;
      sum[e.rank][k] += ms;
      sq[e.rank][k] += ms * ms;
      ++cnt[e.rank][k];
    }
    // The trace counts whole nanoseconds: a mean within that rounding of the estimate says nothing new, and
    // blending it in would move a noise-free estimate off the costs by a rounding (and with it the policy's
    // order and migration's ties: a noise-free run's steps changed from the third on, slower by 0.3%).
    // `tolerance`: the rounding the mean can carry (a chunk op's v ticks scaled up to the stage's op; one tick for a
    // transfer).
    auto blend = [&](double& est, double observed, double tolerance) {
      if (std::abs(observed - est) > tolerance) est = (1.0 - ema_) * est + ema_ * observed;
    };
    const double op_tolerance = trace::kTickMs * v;
    double rel_var = 0;
    int rel_n = 0;
    for (int r = 0; r < p; ++r) {
      double* est[3] = {&estimate_.forward[r], &estimate_.backward_input[r], &estimate_.backward_weight[r]};
      for (int k = 0; k < 3; ++k) {
        if (cnt[r][k] > 0) blend(*est[k], sum[r][k] / cnt[r][k] * v, op_tolerance);
      }
      if (cnt[r][3] > 0) {  // fused BW: keep the estimate's B:W split
        const double b = *est[1], w = *est[2];
        const double share = (b + w) > 0 ? b / (b + w) : 0.5;
        const double bw = sum[r][3] / cnt[r][3] * v;
        blend(*est[1], bw * share, op_tolerance);
        blend(*est[2], bw * (1.0 - share), op_tolerance);
      }
      for (int k = 0; k < 4; ++k) {
        if (cnt[r][k] < 2) continue;
        const double mean = sum[r][k] / cnt[r][k];
        if (mean <= 0) continue;
        double var = std::max(0.0, sq[r][k] / cnt[r][k] - mean * mean);
        if (var <= trace::kTickMs * trace::kTickMs) var = 0;  // the same times, but for the trace's rounding
        rel_var += var / (mean * mean) * cnt[r][k];
        rel_n += cnt[r][k];
      }
    }
    if (comm_cnt > 0) blend(estimate_.comm, comm_sum / comm_cnt, trace::kTickMs);
    if (rel_n > 0) {
      const double level = std::sqrt(rel_var / rel_n);
      stats_.estimated_level = observed_any_ ? (1.0 - ema_) * stats_.estimated_level + ema_ * level : level;
      observed_any_ = true;
    }
  }

  // The time `order` takes: one step's makespan, or with overlapping steps a window of two (the second released
  // on each rank at its end of the first), first op start to last op end.
  template <class Compute, class Comm>
  double window(const sched::Schedule& order, sched::ExecOptions exec, const Compute& compute, const Comm& comm) const {
    if (!env_.overlap_steps) return sched::execute(order, exec, compute, comm).makespan();
    exec.release.assign(static_cast<std::size_t>(order.p), 0.0);
    const sched::ExecResult first = sched::execute(order, exec, compute, comm);
    exec.release = first.last_end;
    const sched::ExecResult second = sched::execute(order, exec, compute, comm);
    return std::max(first.end, second.end) - first.start;
  }

  sched::Schedule plan(int step) {
    const int v = base_.v;
    const sched::CostModel& est = estimate_;
    auto compute = [&](int r, const sched::Action& a) { return est.op_time(r, a.kind, v); };
    auto comm = [&](const sched::Transfer&) { return est.comm_time(); };
    sched::Schedule order;
    greedy_makespan(policy_, base_, env_, est, compute, comm, &order);
    order.name = "ppo:" + base_.name;
    stats_.used_policy_order = true;
    if (verify_ <= 0) return order;
    // Check on noise draws of the estimate, executed as the runtime will execute it.
    const int draws = stats_.estimated_level > 0 ? verify_ : 1;
    sched::ExecOptions exec = exec_;
    if (!exec.migration.empty()) {  // as the simulator: decisions on the estimate, a helper at its drawn speed
      exec.estimate = compute;
    }
    // As the simulator too: a transfer's estimate in the decisions' bounds and an announcement's delay. Left at 0,
    // migration's offers were judged on windows a transfer shorter, the check predicted other helps than the run
    // made, and a noise-free policy order slower than the generator's passed it (p = 8 1f1b with migration and
    // cost.comm = 0.07: 75.07 against 69.65 ms).
    exec.comm_estimate = est.comm_time();
    exec.announce_latency = est.comm_time();
    double mine = 0, theirs = 0;
    for (int k = 0; k < draws; ++k) {
      EpisodeDraw d;
      d.seed = sim::hash_words({seed_, 0x51ed, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(k)});
      d.level = stats_.estimated_level;
      d.cost = est;
      const auto c = draw_compute(d, v);
      const auto m = draw_comm(d);
      if (!exec.migration.empty()) {
        exec.helper_speed = [&](int r, const sched::Action& a) {
          const double expected = compute(r, a);
          return expected > 0 ? c(r, a) / expected : 1.0;
        };
      }
      mine += window(order, exec, c, m);
      theirs += window(base_, exec, c, m);
    }
    if (theirs < mine) {
      stats_.used_policy_order = false;
      return base_;
    }
    return order;
  }

  Policy policy_;
  std::optional<sched::PolicySource> source_;  // the file the policy was loaded from
  sched::Schedule base_;
  sched::CostModel estimate_;
  EnvOptions env_;
  sched::ExecOptions exec_;
  double ema_ = 0.5;
  int verify_ = 0;
  unsigned long long seed_ = 0;
  bool observed_any_ = false;
  mutable PpoStats stats_;
};

}  // namespace

std::unique_ptr<sched::OrderPlanner> make_ppo_planner(const plan::Plan& plan, const sched::Schedule& generated) {
  sched::PolicySource source;
  Policy policy = load_policy(resolve_policy_path(plan.scheduler.policy_path), &source);
  return std::make_unique<PpoPlanner>(plan, generated, std::move(policy), std::move(source));
}

std::unique_ptr<sched::OrderPlanner> make_ppo_planner(const plan::Plan& plan, const sched::Schedule& generated,
                                                      const Policy& policy) {
  return std::make_unique<PpoPlanner>(plan, generated, policy);
}

const PpoStats* ppo_stats(const sched::OrderPlanner& planner) {
  const auto* ppo = dynamic_cast<const PpoPlanner*>(&planner);
  return ppo ? &ppo->stats() : nullptr;
}

}  // namespace conductor::policy

#include "conductor/policy/env.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "conductor/util/error.hpp"

namespace conductor::policy {

double time_unit(const sched::CostModel& cost, int v) {
  const std::size_t n = std::max({cost.forward.size(), cost.backward_input.size(), cost.backward_weight.size()});
  double sum = 0.0;
  for (std::size_t r = 0; r < n; ++r) {
    const int rank = static_cast<int>(r);
    sum += cost.op_time(rank, sched::OpKind::F, v) + cost.op_time(rank, sched::OpKind::B, v) +
           cost.op_time(rank, sched::OpKind::W, v);
  }
  const double unit = sum / (3.0 * static_cast<double>(std::max<std::size_t>(1, n)));
  return unit > 0 ? unit : 1.0;
}

double Rollout::idle() const {
  double work = 0.0;
  for (double b : busy) work += b;
  return static_cast<double>(busy.size()) * makespan() - work;
}

namespace {

float clampf(double x, double lo, double hi) { return static_cast<float>(std::min(hi, std::max(lo, x))); }

}  // namespace

// Candidate features (kNumFeatures = 19), all dimensionless:
//   0-2  op kind one-hot (F, B or BW, W)          3  stage / (S-1)          4  chunk / (v-1)
//   5    microbatch / m                            6  this rank's progress (done / actions)
//   7    time since ready / unit (<= 8)            8  predicted duration / unit
//   9    next stage's rank: idle for (+) or busy for (-) / unit, /4, clipped to +-2
//   10   previous stage's rank, the same          11 the op's output consumer, the same (0: no consumer)
//   12   ready ops on the consumer (<= 4) / 4      13 memory in use / limit    14 the op's memory change / limit
//   15   heuristic rank among candidates (0 = the hint's choice)               16 heuristic rank == 0
//   17   candidates / kMaxCandidates               18 list positions ahead of the rank's next listed op / (3v)
// unit = mean chunk-op time of the predicted cost model. Unlimited memory uses 2p as the scale.
std::vector<sched::Migration> env_migration(const plan::Plan& plan, const sched::Schedule& schedule) {
  return sched::migrations(plan.migration, plan.costs, schedule.p, schedule.v);
}

Rollout rollout(const sched::Schedule& s, const EnvOptions& opt, const sched::CostModel& predicted,
                const sched::ComputeTimeFn& compute, const sched::CommTimeFn& comm, const Chooser& choose,
                std::vector<Decision>* record) {
  const int p = s.p;
  const int S = s.num_stages();
  const double unit = time_unit(predicted, s.v);
  const double mem_scale = (opt.memory_limit > 0 && std::isfinite(opt.memory_limit)) ? opt.memory_limit : 2.0 * p;
  double mem_delta[4];
  for (int k = 0; k < 4; ++k)
    mem_delta[k] = sched::memory_delta(static_cast<sched::OpKind>(k), s.v, opt.memory_after_b);

  std::vector<int> cand;  // list positions offered, best first
  std::vector<int> head(static_cast<std::size_t>(s.v) * 4);
  Decision d;
  // The engine (sched::execute) runs the step; at each free rank this picker offers the driver's candidates
  // (the arbiter's ranking under the heuristic hint) to the chooser and records the decision.
  auto picker = [&](int r, sched::RankDriver& drv, const sched::EngineView& view) -> int {
    const sched::Arbiter& rs = drv.arbiter();
    const auto& drivers = *view.ranks;
    const double now = view.now;
    auto idle_signal = [&](int q) -> float {
      if (q < 0) return 0.0f;
      const sched::RankDriver& other = drivers[static_cast<std::size_t>(q)];
      const double x = other.running() ? -((*view.busy_until)[q] - now) / unit : (now - other.free_since()) / unit;
      return clampf(x / 4.0, -2.0, 2.0);
    };
    // Per (kind, chunk), the best-ranked (earliest-listed) candidate: a later microbatch of the same kind and
    // chunk is the same decision made worse, it only delays the earlier one.
    std::fill(head.begin(), head.end(), 0);
    cand.clear();
    for (int i : drv.candidates(now)) {
      const sched::Action& a = rs.actions()[i];
      int& seen = head[static_cast<std::size_t>(a.chunk) * 4 + static_cast<int>(a.kind)];
      if (seen) continue;
      seen = 1;
      cand.push_back(i);
    }
    if (cand.empty()) return -1;
    const int n = std::min<int>(static_cast<int>(cand.size()), kMaxCandidates);
    if (n < 2) return cand[0];
    d.rank = r;
    d.time = now;
    d.num_candidates = n;
    double pred[4];
    const float progress = static_cast<float>(rs.num_done()) / static_cast<float>(std::max(1, rs.size()));
    for (int k = 0; k < 4; ++k) pred[k] = predicted.op_time(r, static_cast<sched::OpKind>(k), s.v);
    for (int c = 0; c < n; ++c) {
      const int i = cand[c];
      d.index[c] = i;
      const sched::Action& a = rs.actions()[i];
      const int stage = s.stage_of(r, a.chunk);
      const int next_rank = stage + 1 < S ? s.rank_of(stage + 1) : -1;
      const int prev_rank = stage > 0 ? s.rank_of(stage - 1) : -1;
      const bool fwd = a.kind == sched::OpKind::F;
      const bool bwd = a.kind == sched::OpKind::B || a.kind == sched::OpKind::BW;
      int consumer = fwd ? next_rank : bwd ? prev_rank : -1;
      if (consumer == r) consumer = -1;  // same-rank delivery: nobody waits on a message
      float* x = &d.features[static_cast<std::size_t>(c) * kNumFeatures];
      x[0] = fwd ? 1.0f : 0.0f;
      x[1] = bwd ? 1.0f : 0.0f;
      x[2] = a.kind == sched::OpKind::W ? 1.0f : 0.0f;
      x[3] = S > 1 ? static_cast<float>(stage) / static_cast<float>(S - 1) : 0.0f;
      x[4] = s.v > 1 ? static_cast<float>(a.chunk) / static_cast<float>(s.v - 1) : 0.0f;
      x[5] = static_cast<float>(a.microbatch) / static_cast<float>(s.m);
      x[6] = progress;
      x[7] = clampf((now - drv.ready_at(i)) / unit, 0.0, 8.0);
      x[8] = clampf(pred[static_cast<int>(a.kind)] / unit, 0.0, 8.0);
      x[9] = next_rank == r ? 0.0f : idle_signal(next_rank);
      x[10] = prev_rank == r ? 0.0f : idle_signal(prev_rank);
      x[11] = idle_signal(consumer);
      x[12] = consumer >= 0
                  ? static_cast<float>(std::min(drivers[static_cast<std::size_t>(consumer)].arbiter().num_ready(), 4)) /
                        4.0f
                  : 0.0f;
      x[13] = static_cast<float>(rs.memory_in_use() / mem_scale);
      x[14] = static_cast<float>(mem_delta[static_cast<int>(a.kind)] / mem_scale);
      x[15] = static_cast<float>(c);
      x[16] = c == 0 ? 1.0f : 0.0f;
      x[17] = static_cast<float>(n) / static_cast<float>(kMaxCandidates);
      x[18] = clampf(static_cast<double>(i - rs.next_in_list()) / (3.0 * s.v), 0.0, 8.0);
    }
    int idle = 0;
    for (int q = 0; q < p; ++q) idle += drivers[static_cast<std::size_t>(q)].running() ? 0 : 1;
    const double work = unit * 3.0 * s.v * s.m;  // one rank's work per step, roughly
    d.global[0] = static_cast<float>(now / work);
    d.global[1] = static_cast<float>(view.done) / static_cast<float>(view.total);
    d.global[2] = progress;
    d.global[3] = static_cast<float>(idle) / static_cast<float>(p);
    d.global[4] = static_cast<float>(rs.memory_in_use() / mem_scale);
    d.global[5] = static_cast<float>(n) / static_cast<float>(kMaxCandidates);
    d.global[6] = static_cast<float>((view.horizon - now) / work);
    int min_done = rs.size();
    for (int q = 0; q < p; ++q)
      min_done = std::min(min_done, drivers[static_cast<std::size_t>(q)].arbiter().num_done());
    d.global[7] = 1.0f - static_cast<float>(min_done) / static_cast<float>(std::max(1, rs.size()));
    const int c = choose(d);
    if (c < 0 || c >= n) {
      throw Error("policy chose candidate " + std::to_string(c) + " of " + std::to_string(n) + " on rank " +
                  std::to_string(r));
    }
    d.chosen = c;
    d.idle = view.idle;
    if (record) record->push_back(d);
    return d.index[c];
  };

  sched::ExecOptions eo;
  eo.execution = sched::Execution::Readiness;
  eo.hint = opt.heuristic;
  eo.memory_limit = opt.memory_limit;
  eo.memory_after_b = opt.memory_after_b;
  eo.record_ops = false;
  eo.picker = picker;
  if (!opt.migration.empty()) {
    // As the simulator: the decision plans with the predicted (noise-free) times; set only with migration, since
    // a backfill heuristic's announcements would use it too.
    eo.migration = opt.migration;
    eo.estimate = [&](int rank, const sched::Action& a) { return predicted.op_time(rank, a.kind, s.v); };
    eo.helper_speed = [&](int rank, const sched::Action& a) {
      const double expected = predicted.op_time(rank, a.kind, s.v);
      return expected > 0 ? compute(rank, a) / expected : 1.0;
    };
  }
  Rollout out;
  out.busy.assign(static_cast<std::size_t>(p), 0.0);
  double idle_before = 0.0;  // the idle of the window's earlier steps, so a decision's idle counts from its start
  double step_end = 0.0;
  // Overlapping steps release each rank at its own end of the previous step (all at 0 for the first, as
  // sim::StepClock does: a rank that is done with its ops is then not idle in this step, it runs the next one).
  if (opt.overlap_steps) eo.release.assign(static_cast<std::size_t>(p), 0.0);
  for (int k = 0; k < std::max(1, opt.steps); ++k) {
    if (k > 0 && !opt.overlap_steps) eo.release.assign(static_cast<std::size_t>(p), step_end);
    sched::ExecResult res;
    const std::size_t first = record ? record->size() : 0;
    try {
      res = sched::execute(s, eo, compute, comm);
    } catch (const Error& e) {
      throw Error(std::string("policy rollout: ") + e.what());
    }
    double idle_end = 0.0;  // the step's idle at its last decision; the steps' sum is a lower bound of the window's
    if (record) {
      for (std::size_t t = first; t < record->size(); ++t) {
        idle_end = (*record)[t].idle;
        (*record)[t].idle += idle_before;
      }
    }
    idle_before += idle_end;
    if (k == 0) {
      out.order = std::move(res.order);
      out.start = res.start;
    }
    out.end = std::max(out.end, res.end);
    step_end = res.end;
    for (int r = 0; r < p; ++r) out.busy[static_cast<std::size_t>(r)] += res.busy[static_cast<std::size_t>(r)];
    if (opt.overlap_steps) eo.release = res.last_end;
  }
  return out;
}

}  // namespace conductor::policy

#include "conductor/sched/generators.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "conductor/sched/engine.hpp"
#include "conductor/sched/torch_csv.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/util/error.hpp"

namespace conductor::sched {

const std::vector<std::string>& generator_kinds() {
  static const std::vector<std::string> kinds = {"gpipe", "1f1b", "1f1b-interleaved", "zb-h1",    "zb-h2", "zb-1p",
                                                 "zb-2p", "zb-v", "zb-v-greedy",      "dualpipev"};
  return kinds;
}

namespace {

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

Schedule empty_schedule(int p, int m, int v, Placement placement, const std::string& name) {
  Schedule s;
  s.p = p;
  s.m = m;
  s.v = v;
  s.placement = placement;
  s.name = name;
  s.ranks.assign(p, {});
  return s;
}

Action act(OpKind k, int mb, int chunk = 0) { return Action{k, mb, chunk}; }

void check_shape(const std::string& kind, int p, int m, int v) {
  if (p < 1 || m < 1 || v < 1) {
    throw InputError(kind + ": pipeline, microbatches and virtual must be >= 1 (got p=" + std::to_string(p) +
                     ", m=" + std::to_string(m) + ", v=" + std::to_string(v) + ")");
  }
}

// Per-stage order of one Zero Bubble greedy variant (the paper's heuristic: simulate each stage's timeline,
// put F and B as early as dependencies allow, put W where F or B would otherwise wait or memory is short).
class ZbGreedy {
 public:
  ZbGreedy(int p, int m, const CostModel& cost, double limit) : S_(p), m_(m), comm_(cost.comm), limit_(limit) {
    for (int j = 0; j < p; ++j) {
      cost_[0].push_back(cost.op_time(j, OpKind::F, 1));
      cost_[1].push_back(cost.op_time(j, OpKind::B, 1));
      cost_[2].push_back(cost.op_time(j, OpKind::W, 1));
    }
    mem_[0] = 1.0;
    mem_[1] = -(1.0 - cost.memory_after_b);
    mem_[2] = -cost.memory_after_b;
  }

  // Returns false when the variant cannot fit the memory limit.
  bool run(bool allow_bubble_before_first_b, bool prioritize_b, bool no_bubble_greedy) {
    for (auto& c : count_) c.assign(S_, 0);
    for (auto& t : t_) t.assign(static_cast<std::size_t>(S_) * m_, 0.0);
    mem_used_.assign(S_, 0.0);
    end_.assign(S_, 0.0);
    bubble_.assign(S_, 0.0);
    order_.assign(S_, {});
    int* f = count_[0].data();
    int* b = count_[1].data();
    int* w = count_[2].data();
    for (int i = 0; i < m_; ++i) {
      std::vector<int> need(S_, 0);
      if (i == 0) {
        for (int j = 0; j < S_; ++j) put(j, 0);
        double last_t = 0.0;
        for (int j = S_ - 1; j >= 0; --j) {
          if (j == S_ - 1) {
            last_t = t(0, j, 0) + cost_[1][j];
            continue;
          }
          double mem = mem_used_[j], clock = end_[j];
          while (f[j] + need[j] < m_ && mem + mem_[0] <= limit_ + 1e-9) {
            if (allow_bubble_before_first_b ? clock + cost_[0][j] > last_t + comm_ : clock >= last_t + comm_) break;
            mem += mem_[0];
            clock += cost_[0][j];
            ++need[j];
          }
          last_t = std::max(clock, last_t + comm_) + cost_[1][j];
        }
        for (int j = 1; j < S_; ++j) {
          while (need[j] > 0 && need[j] >= need[j - 1] && f[j] + need[j] < m_) --need[j];
        }
        for (int j = 0; j < S_; ++j) {
          for (int k = 0; k < need[j]; ++k) {
            if (mem_used_[j] + mem_[0] > limit_ + 1e-9) return false;
            put(j, 0);
          }
        }
        for (int j = S_ - 1; j >= 0; --j) put(j, 1);
        continue;
      }
      for (int j = 0; j < S_; ++j) {
        if (f[j] >= m_) continue;
        if (j + 1 < S_ && f[j] >= f[j + 1] + 2 && prioritize_b) {
          const double next_plus_fw = end_[j + 1] + cost_[0][j + 1] + cost_[1][j + 1] + comm_;
          if (end_[j] >= next_plus_fw) continue;
          double w_cost = 0.0, mem_with_w = mem_used_[j] + mem_[0];
          for (int k = 0; mem_with_w > limit_ + 1e-9 && w[j] + k < b[j]; ++k) {
            w_cost += cost_[2][j];
            mem_with_w += mem_[2];
          }
          if (end_[j] + cost_[0][j] + w_cost <= next_plus_fw) {
            need[j] = 1;
            continue;
          }
          if (next_plus_fw - end_[j] <= max_bubble() - bubble_[j]) continue;
        }
        need[j] = 1;
      }
      for (int j = S_ - 2; j >= 0; --j) need[j] = std::min(need[j], need[j + 1]);
      for (int j = 0; j < S_; ++j) {
        if (!need[j]) continue;
        while (mem_used_[j] + mem_[0] > limit_ + 1e-9) {
          if (w[j] >= b[j]) return false;
          put(j, 2);
        }
        if (j > 0) fill_w(j, t(0, j - 1, f[j]) + comm_, no_bubble_greedy);
        put(j, 0);
      }
      for (int j = S_ - 1; j >= 0; --j) {
        if (b[j] != i || f[j] <= i) return false;  // the heuristic lost its invariant: drop the variant
        if (j + 1 < S_) fill_w(j, t(1, j + 1, i) + comm_, no_bubble_greedy);
        if (j == 0 && f[j] == m_) {
          while (w[j] < b[j]) put(j, 2);
        }
        put(j, 1);
      }
    }
    for (int j = 0; j < S_; ++j) {
      while (w[j] < m_) put(j, 2);
    }
    return true;
  }

  const std::vector<std::vector<Action>>& order() const { return order_; }

 private:
  double& t(int k, int j, int mb) { return t_[k][static_cast<std::size_t>(j) * m_ + mb]; }
  double max_bubble() const { return *std::max_element(bubble_.begin(), bubble_.end()); }

  void put(int j, int k) {
    const int mb = count_[k][j];
    const double c = cost_[k][j];
    double done = end_[j] + c;
    const double no_bubble = done;
    if (k == 0 && j > 0) done = std::max(done, t(0, j - 1, mb) + comm_ + c);
    if (k == 1 && j + 1 < S_) done = std::max(done, t(1, j + 1, mb) + comm_ + c);
    if (count_[0][j] > 0) bubble_[j] += done - no_bubble;
    end_[j] = done;
    t(k, j, mb) = done;
    mem_used_[j] += mem_[k];
    ++count_[k][j];
    order_[j].push_back(act(k == 0 ? OpKind::F : k == 1 ? OpKind::B : OpKind::W, mb));
  }

  // Put W on stage j while they finish before `until` (the next F/B's input); maybe one more that overruns
  // it, when that overrun fits within the largest bubble seen so far (or always, without no_bubble_greedy).
  void fill_w(int j, double until, bool no_bubble_greedy) {
    int* b = count_[1].data();
    int* w = count_[2].data();
    while (w[j] < b[j] && end_[j] + cost_[2][j] <= until) put(j, 2);
    if (w[j] < b[j] && end_[j] < until) {
      if (until - end_[j] <= max_bubble() - bubble_[j]) {
        if (no_bubble_greedy) put(j, 2);
      } else {
        put(j, 2);
      }
    }
  }

  int S_, m_;
  double comm_, limit_;
  std::vector<double> cost_[3];
  double mem_[3];
  std::vector<int> count_[3];
  std::vector<double> t_[3];
  std::vector<double> mem_used_, end_, bubble_;
  std::vector<std::vector<Action>> order_;
};

ComputeTimeFn planned_compute(const Schedule& s, const CostModel& cost) {
  return [&cost, v = s.v](int rank, const Action& a) { return cost.op_time(rank, a.kind, v); };
}

// Runs `base` under readiness with `hint` at `limit` (noise-free) and returns the realized order.
Schedule realize(const Schedule& base, const CostModel& cost, double limit, Hint hint) {
  ExecOptions o;
  o.execution = Execution::Readiness;
  o.hint = hint;
  o.memory_limit = limit;
  o.memory_after_b = cost.memory_after_b;
  const ExecResult r = execute(base, o, planned_compute(base, cost), [&cost](const Transfer&) { return cost.comm; });
  return realized(base, r);
}

// Noise-free strict run of a schedule: (longest rank span, makespan).
std::pair<double, double> planned_spans(const Schedule& s, const CostModel& cost) {
  ExecOptions o;
  o.memory_after_b = cost.memory_after_b;
  o.record_ops = false;
  const ExecResult r = execute(s, o, planned_compute(s, cost), [&cost](const Transfer&) { return cost.comm; });
  double span = 0.0;
  for (int q = 0; q < s.p; ++q) span = std::max(span, r.last_end[q] - r.first_start[q]);
  return {span, r.makespan()};
}

// Keeps the valid candidate that is best under the objective (the first on ties).
struct Best {
  ZbObjective objective = ZbObjective::Makespan;
  Schedule schedule;
  std::pair<double, double> score{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  bool found = false;
  void offer(Schedule s, const CostModel& cost, double limit) {
    if (!validate(s, limit, cost.memory_after_b).ok) return;
    auto [span, makespan] = planned_spans(s, cost);
    if (objective == ZbObjective::Makespan) span = 0.0;
    const bool better = span < score.first - 1e-9 || (span < score.first + 1e-9 && makespan < score.second - 1e-9);
    if (better) {
      score = {span, makespan};
      schedule = std::move(s);
      found = true;
    }
  }
};

}  // namespace

double planned_makespan(const Schedule& s, const CostModel& cost) {
  ExecOptions o;
  o.memory_after_b = cost.memory_after_b;
  return execute(s, o, planned_compute(s, cost), [&cost](const Transfer&) { return cost.comm; }).makespan();
}

Schedule gpipe(int p, int m) {
  check_shape("gpipe", p, m, 1);
  Schedule s = empty_schedule(p, m, 1, Placement::Loop, "gpipe");
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < m; ++i) s.ranks[r].push_back(act(OpKind::F, i));
    for (int i = 0; i < m; ++i) s.ranks[r].push_back(act(OpKind::BW, i));
  }
  return s;
}

Schedule one_f_one_b(int p, int m) {
  check_shape("1f1b", p, m, 1);
  Schedule s = empty_schedule(p, m, 1, Placement::Loop, "1f1b");
  for (int r = 0; r < p; ++r) {
    const int warm = std::min(p - r - 1, m);
    auto& l = s.ranks[r];
    for (int i = 0; i < warm; ++i) l.push_back(act(OpKind::F, i));
    for (int i = 0; i + warm < m; ++i) {
      l.push_back(act(OpKind::F, i + warm));
      l.push_back(act(OpKind::BW, i));
    }
    for (int i = m - warm; i < m; ++i) l.push_back(act(OpKind::BW, i));
  }
  return s;
}

Schedule interleaved_1f1b(int p, int m, int v) {
  check_shape("1f1b-interleaved", p, m, v);
  if (v < 2) throw InputError("1f1b-interleaved needs v >= 2 chunks per rank (got v = " + std::to_string(v) + ")");
  if (m % p != 0) {
    throw InputError("1f1b-interleaved runs microbatches in groups of p (Megatron's rule): m = " + std::to_string(m) +
                     " is not a multiple of p = " + std::to_string(p));
  }
  Schedule s = empty_schedule(p, m, v, Placement::Loop, "1f1b-interleaved");
  const int total = m * v, group = p * v;
  // Virtual microbatch k -> (chunk, microbatch): groups of p microbatches visit chunk 0, 1, ..., v-1 in turn.
  auto mb_of = [&](int k) { return (k / group) * p + k % p; };
  auto fwd_chunk = [&](int k) { return (k % group) / p; };
  auto bwd_chunk = [&](int k) { return v - 1 - (k % group) / p; };
  for (int r = 0; r < p; ++r) {
    const int warm = m == p ? total : std::min((p - r - 1) * 2 + (v - 1) * p, total);
    auto& l = s.ranks[r];
    for (int k = 0; k < warm; ++k) l.push_back(act(OpKind::F, mb_of(k), fwd_chunk(k)));
    for (int k = 0; k + warm < total; ++k) {
      l.push_back(act(OpKind::F, mb_of(k + warm), fwd_chunk(k + warm)));
      l.push_back(act(OpKind::BW, mb_of(k), bwd_chunk(k)));
    }
    for (int k = total - warm; k < total; ++k) l.push_back(act(OpKind::BW, mb_of(k), bwd_chunk(k)));
  }
  return s;
}

namespace {
// The handcrafted Zero Bubble shape: `warm(r)` warm-up F, then B, [W], F where W runs only once more than
// `defer(r)` W are pending; the remaining W close the list.
template <class Warm, class Defer>
Schedule zb_handcrafted(int p, int m, const std::string& name, Warm warm_of, Defer defer_of) {
  check_shape(name, p, m, 1);
  Schedule s = empty_schedule(p, m, 1, Placement::Loop, name);
  for (int r = 0; r < p; ++r) {
    auto& l = s.ranks[r];
    const int warm = std::min(warm_of(r), m), defer = defer_of(r);
    int nf = 0, nb = 0, nw = 0;
    for (; nf < warm; ++nf) l.push_back(act(OpKind::F, nf));
    while (nb < m) {
      l.push_back(act(OpKind::B, nb++));
      if (nb - nw > defer) l.push_back(act(OpKind::W, nw++));
      if (nf < m) l.push_back(act(OpKind::F, nf++));
    }
    while (nw < m) l.push_back(act(OpKind::W, nw++));
  }
  return s;
}
}  // namespace

Schedule zb_h1(int p, int m) {
  return zb_handcrafted(
      p, m, "zb-h1", [p](int r) { return p - r; }, [](int r) { return r; });
}

Schedule zb_h2(int p, int m) {
  return zb_handcrafted(
      p, m, "zb-h2", [p](int r) { return 2 * (p - r) - 1; }, [](int r) { return 2 * r; });
}

Schedule zb_auto(int p, int m, const CostModel& cost, double limit, const std::string& name, ZbObjective objective) {
  check_shape(name, p, m, 1);
  if (limit < 1.0 - 1e-9) {
    throw MemoryLimitError(name + ": memory limit " + fmt(limit) + " M_F is below one microbatch's activations");
  }
  Best best;
  best.objective = objective;
  ZbGreedy greedy(p, m, cost, limit);
  for (bool allow : {true, false}) {
    for (bool prio : {true, false}) {
      for (bool nbg : {true, false}) {
        if (!greedy.run(allow, prio, nbg)) continue;
        Schedule s = empty_schedule(p, m, 1, Placement::Loop, name);
        s.ranks = greedy.order();
        best.offer(std::move(s), cost, limit);
      }
    }
  }
  // The handcrafted shapes that fit the limit, as they are and realized by the readiness arbiter (the greedy
  // arbiter as a planner: it fills W into waits the fixed shape leaves when stage costs differ).
  for (Schedule base : {zb_h1(p, m), zb_h2(p, m)}) {
    if (!validate(base, limit, cost.memory_after_b).ok) continue;
    base.name = name;
    best.offer(base, cost, limit);
    for (Hint h : {Hint::Schedule, Hint::BFW, Hint::BF}) {
      Schedule s = realize(base, cost, limit, h);
      s.name = name;
      best.offer(std::move(s), cost, limit);
    }
  }
  if (!best.found) {
    throw MemoryLimitError(name + ": no schedule for p = " + std::to_string(p) + ", m = " + std::to_string(m) +
                           " fits the memory limit of " + fmt(limit) + " M_F per rank");
  }
  return best.schedule;
}

Schedule zb_v_greedy(int p, int m, const CostModel& cost, double limit) {
  check_shape("zb-v-greedy", p, m, 2);
  if (limit < 1.0 - 1e-9) {
    throw MemoryLimitError("zb-v-greedy: memory limit " + fmt(limit) + " M_F is below one microbatch's activations");
  }
  // Base list per rank, microbatch-major along the V: down (chunk 0), up (chunk 1), back down the V. Its
  // order is the reservation order of the arbiter's memory rule, so chunk-0 forwards running ahead never
  // starve the chunk-1 forward that turns a microbatch around.
  Schedule base = empty_schedule(p, m, 2, Placement::V, "zb-v-greedy");
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < m; ++i) {
      for (Action a : {act(OpKind::F, i, 0), act(OpKind::F, i, 1), act(OpKind::B, i, 1), act(OpKind::W, i, 1),
                       act(OpKind::B, i, 0), act(OpKind::W, i, 0)}) {
        base.ranks[r].push_back(a);
      }
    }
  }
  Best best;
  for (Hint h : {Hint::BFW, Hint::BF, Hint::Schedule}) {
    Schedule s = realize(base, cost, limit, h);
    best.offer(std::move(s), cost, limit);
  }
  if (!best.found) throw Error("zb-v-greedy: no candidate schedule validated (generator bug)");
  return best.schedule;
}

Schedule generate(const std::string& kind, int p, int m, int v, const CostModel& cost, double memory_limit,
                  ZbObjective objective) {
  check_shape(kind, p, m, v);
  const double limit = memory_limit > 0 ? memory_limit : default_memory_limit(kind, p, m, v);
  if (plan::v_shaped_kind(kind)) {
    if (v != 2) {
      throw InputError(kind + " places two chunks per rank in a V: v must be 2 (got " + std::to_string(v) + ")");
    }
    if (kind == "zb-v") return zb_v(p, m, cost, limit);
    if (kind == "zb-v-greedy") return zb_v_greedy(p, m, cost, limit);
    return dualpipe_v(p, m, limit, cost.memory_after_b);
  }
  if (kind == "1f1b-interleaved") {
    Schedule s = interleaved_1f1b(p, m, v);
    validate_or_throw(s, limit, cost.memory_after_b, kind + " with memory limit " + fmt(limit) + " M_F");
    return s;
  }
  if (v != 1) {
    throw InputError(kind + " uses one chunk per rank (got v = " + std::to_string(v) +
                     "); use 1f1b-interleaved, zb-v, zb-v-greedy or dualpipev for virtual chunks");
  }
  Schedule s;
  if (kind == "gpipe")
    s = gpipe(p, m);
  else if (kind == "1f1b")
    s = one_f_one_b(p, m);
  else if (kind == "zb-h1")
    s = zb_h1(p, m);
  else if (kind == "zb-h2")
    s = zb_h2(p, m);
  else if (kind == "zb-1p" || kind == "zb-2p")
    return zb_auto(p, m, cost, limit, kind, objective);
  else
    throw InputError(
        "unknown schedule kind '" + kind +
        "' (gpipe, 1f1b, 1f1b-interleaved, zb-h1, zb-h2, zb-1p, zb-2p, zb-v, zb-v-greedy, dualpipev, file:PATH)");
  validate_or_throw(s, limit, cost.memory_after_b, kind + " with memory limit " + fmt(limit) + " M_F");
  return s;
}

namespace {
double plan_limit(const plan::Plan& plan) {
  const auto& l = plan.memory.rank_limit;
  return l.empty() ? 0.0 : *std::max_element(l.begin(), l.end());
}
}  // namespace

std::vector<double> rank_memory_limits(const plan::Plan& plan, const Schedule& s) {
  if (!plan.memory.rank_limit.empty()) return plan.memory.rank_limit;
  const auto peak = list_peak_memory(s, plan.costs.memory_after_b);
  const double limit = peak.empty() ? 0.0 : *std::max_element(peak.begin(), peak.end());
  return std::vector<double>(static_cast<std::size_t>(s.p), limit);
}

double memory_limit_for(const plan::Plan& plan, const Schedule& s) {
  const std::vector<double> limits = rank_memory_limits(plan, s);
  return limits.empty() ? 0.0 : *std::max_element(limits.begin(), limits.end());
}

Schedule make_schedule(const plan::Plan& plan) {
  const CostModel cost = plan.costs;
  const std::string& kind = plan.schedule.kind;
  const int p = plan.pipeline.p, m = plan.pipeline.m, v = plan.pipeline.v;
  if (kind.rfind("file:", 0) == 0) {
    ScheduleShape shape{p, m, v, std::nullopt};
    if (plan.schedule.placement != "auto")
      shape.placement = plan.schedule.placement == "v" ? Placement::V : Placement::Loop;
    try {
      return import_schedule(kind.substr(5), shape, plan_limit(plan), cost.memory_after_b);
    } catch (const InputError& e) {
      // The key too: a message naming only the file does not say which setting read it.
      throw InputError("schedule.kind = " + kind + ": " + e.what());
    }
  }
  // Overlapping steps run at the pace of the longest rank span (docs/post-validation.md), synchronous steps at
  // the step's makespan.
  const ZbObjective objective = plan.schedule.post_validation ? ZbObjective::StageSpan : ZbObjective::Makespan;
  try {
    return generate(kind, p, m, v, cost, plan_limit(plan), objective);
  } catch (const MemoryLimitError& e) {
    if (plan.memory.limit_key.empty()) throw;
    // The user's limit is what the list cannot fit: name the key, the schedule kind's own limit (what 0 takes:
    // docs/deck.md) and the list's peak under it (the least limit that list runs in).
    std::string own = fmt(default_memory_limit(kind, p, m, v)) + " M_F";
    try {
      const Schedule s = generate(kind, p, m, v, cost, 0.0, objective);
      const auto peak = list_peak_memory(s, cost.memory_after_b);
      own += ", its list's peak " + fmt(*std::max_element(peak.begin(), peak.end())) + " M_F";
    } catch (const InputError&) {
      own += ", where the generator fails too";
    }
    throw InputError(std::string(e.what()) + " (the limit is " + plan.memory.limit_key + " = " + fmt(plan_limit(plan)) +
                     "; 0 takes the schedule's own limit, here " + own + ")");
  }
}

}  // namespace conductor::sched

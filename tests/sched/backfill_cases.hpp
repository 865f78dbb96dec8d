#pragma once
// What the backfilling property tests share (test_backfill.cpp, the fast p in {2, 4, 8} grid; test_backfill_wide.cpp,
// the slow p up to 64 grid): the four cost shapes and one noise-free engine run with exact estimates.
#include <string>
#include <vector>

#include "conductor/sched/engine.hpp"
#include "conductor/sched/generators.hpp"

namespace conductor::sched::backfill_cases {

struct Shape {
  std::string name;
  CostModel cost;
};

// uniform (F = B = W), W < F, comm-heavy (comm = F), a heavy last stage.
inline std::vector<Shape> shapes(int p) {
  std::vector<Shape> out;
  out.push_back({"uniform", uniform_cost(1, 1, 1, 0.05)});
  out.push_back({"w<f", uniform_cost(1, 1, 0.4, 0.05)});
  out.push_back({"comm=F", uniform_cost(1, 1, 1, 1.0)});
  CostModel heavy = uniform_cost(1, 1, 1, 0.05);
  heavy.forward.assign(p, 1.0);
  heavy.backward_input.assign(p, 1.0);
  heavy.backward_weight.assign(p, 1.0);
  heavy.forward.back() = heavy.backward_input.back() = 1.5;
  heavy.backward_weight.back() = 1.2;
  out.push_back({"heavy last", heavy});
  return out;
}

// One step on the engine with the cost model's times (rank `factor_rank` slowed by `factor`) and the noise-free
// cost model as backfilling's estimates.
inline ExecResult run(const Schedule& s, const CostModel& cost, Execution mode, Hint hint, double limit,
                      double factor_rank = -1, double factor = 1.0) {
  ExecOptions eo;
  eo.execution = mode;
  eo.hint = hint;
  eo.memory_limit = limit;
  eo.record_ops = false;
  eo.estimate = [&](int r, const Action& a) { return cost.op_time(r, a.kind, s.v); };
  eo.comm_estimate = cost.comm_time();
  eo.announce_latency = cost.comm_time();
  return execute(
      s, eo, [&](int r, const Action& a) { return cost.op_time(r, a.kind, s.v) * (r == factor_rank ? factor : 1.0); },
      [&](const Transfer&) { return cost.comm_time(); });
}

// Noise-free, every generator x m in {p, 2p, 4p} x the four shapes at pipeline depth p: calls
// check(kind, m, shape, strict makespan, backfill makespan) per case; returns the number of cases.
template <typename Check>
int for_each_noise_free_case(int p, Check&& check) {
  int cases = 0;
  for (const Shape& shape : shapes(p)) {
    for (const std::string& kind : generator_kinds()) {
      for (int m : {p, 2 * p, 4 * p}) {
        const int v = (kind == "1f1b-interleaved" || plan::v_shaped_kind(kind)) ? 2 : 1;
        if (kind == "1f1b-interleaved" && m % p != 0) continue;
        Schedule s;
        try {
          s = generate(kind, p, m, v, shape.cost);
        } catch (const InputError&) {
          continue;  // a combination the generator refuses (documented there)
        }
        const double limit = default_memory_limit(kind, p, m, v);
        const double strict = run(s, shape.cost, Execution::Strict, Hint::Schedule, limit).makespan();
        const double backfill = run(s, shape.cost, Execution::Readiness, Hint::Backfill, limit).makespan();
        check(kind, m, shape, strict, backfill);
        ++cases;
      }
    }
  }
  return cases;
}

}  // namespace conductor::sched::backfill_cases

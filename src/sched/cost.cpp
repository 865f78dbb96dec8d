#include "conductor/sched/cost.hpp"

#include "conductor/util/error.hpp"

namespace conductor::sched {

namespace {
double per_rank(const std::vector<double>& v, int rank) {
  if (v.empty()) return 0.0;
  return v.size() == 1 ? v[0] : v[static_cast<std::size_t>(rank) % v.size()];
}
}  // namespace

double CostModel::op_time(int rank, OpKind kind, int v) const {
  double t = 0.0;
  switch (kind) {
    case OpKind::F: t = per_rank(forward, rank); break;
    case OpKind::B: t = per_rank(backward_input, rank); break;
    case OpKind::W: t = per_rank(backward_weight, rank); break;
    case OpKind::BW: t = per_rank(backward_input, rank) + per_rank(backward_weight, rank); break;
  }
  return t / v;
}

double CostModel::work_per_microbatch(int rank) const {
  return per_rank(forward, rank) + per_rank(backward_input, rank) + per_rank(backward_weight, rank);
}

CostModel uniform_cost(double f, double b, double w, double comm, double memory_after_b) {
  CostModel c;
  c.forward = {f};
  c.backward_input = {b};
  c.backward_weight = {w};
  c.comm = comm;
  c.memory_after_b = memory_after_b;
  return c;
}

}  // namespace conductor::sched

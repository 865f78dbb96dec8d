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

double memory_after_b_from_model(int d_model, int n_heads, int seq_len) {
  const double h = d_model, a = n_heads, s = seq_len;
  return 32.0 * h / (34.0 * h + 5.0 * a * s);
}

double activation_bytes(const config::Deck& d) {
  return 4.0 * d.parallel.microbatch_size * static_cast<double>(d.model.seq_len) * d.model.d_model;
}

CostModel cost_from_model(const config::Deck& d) {
  const int p = d.parallel.pipeline;
  const double tokens = static_cast<double>(d.parallel.microbatch_size) * d.model.seq_len;
  const double h = d.model.d_model, s = d.model.seq_len;
  const double mm = 24.0 * tokens * h * h, att = 4.0 * tokens * s * h;
  const double head = 2.0 * tokens * h * d.model.vocab;
  const double flops_per_ms = d.cost.device_tflops * 1e12 / 1e3;
  CostModel c;
  c.forward.assign(p, 0.0);
  c.backward_input.assign(p, 0.0);
  c.backward_weight.assign(p, 0.0);
  for (int r = 0; r < p; ++r) {
    // Layers split as evenly as possible, the first ranks taking the remainder.
    const int layers = d.model.n_layers / p + (r < d.model.n_layers % p ? 1 : 0);
    double f = layers * (mm + att), b = layers * (mm + 2 * att), w = layers * mm;
    if (r == p - 1) {
      f += head;
      b += head;
      w += head;
    }
    c.forward[r] = f / flops_per_ms;
    c.backward_input[r] = b / flops_per_ms;
    c.backward_weight[r] = w / flops_per_ms;
  }
  return c;
}

CostModel from_deck(const config::Deck& d) {
  CostModel c;
  if (d.cost.device_tflops > 0) {
    c = cost_from_model(d);
  } else {
    c.forward = d.cost.forward;
    c.backward_input = d.cost.backward_input;
    c.backward_weight = d.cost.backward_weight;
  }
  c.comm = d.cost.comm;
  if (d.cost.bandwidth_gbps > 0) c.comm += activation_bytes(d) / (d.cost.bandwidth_gbps * 1e9) * 1e3;
  c.memory_after_b = d.cost.memory_after_b >= 0
                         ? d.cost.memory_after_b
                         : memory_after_b_from_model(d.model.d_model, d.model.n_heads, d.model.seq_len);
  return c;
}

}  // namespace conductor::sched

#include "conductor/sched/migration.hpp"

#include <algorithm>
#include <cmath>

namespace conductor::sched {

namespace {

double per_rank(const std::vector<double>& v, int rank) {
  if (v.empty()) return 0.0;
  return v.size() == 1 ? v[0] : v[static_cast<std::size_t>(rank) % v.size()];
}

// One chunk's share of a whole-rank op's costs (the bytes and messages of its layers).
plan::SliceCosts per_chunk(plan::SliceCosts c, int v) {
  c.bytes_fixed /= v;
  c.bytes_per_slice /= v;
  c.messages = (c.messages + v - 1) / v;
  return c;
}

// B and W of one op: fractions weighted by their times, bytes and messages added.
plan::SliceCosts combined(const plan::SliceCosts& b, const plan::SliceCosts& w, double tb, double tw) {
  plan::SliceCosts c;
  const double sb = b.sliced_fraction * tb, sw = w.sliced_fraction * tw;
  c.sliced_fraction = tb + tw > 0 ? (sb + sw) / (tb + tw) : 0.0;
  c.helper_factor = sb + sw > 0 ? (sb * b.helper_factor + sw * w.helper_factor) / (sb + sw) : 1.0;
  c.bytes_fixed = b.bytes_fixed + w.bytes_fixed;
  c.bytes_per_slice = b.bytes_per_slice + w.bytes_per_slice;
  c.messages = b.messages + w.messages;
  return c;
}

}  // namespace

Migration::Migration(const plan::Migration& m, const plan::Costs& costs, int rank, int v)
    : enabled_(m.enabled && rank < static_cast<int>(m.ops.size())),
      slices_(std::max(1, m.slices)),
      max_slices_(static_cast<int>(std::floor(m.max_fraction * std::max(1, m.slices) + 1e-9))),
      bytes_per_ms_(m.bandwidth_gbps * 1e9 / 1e3),
      latency_ms_(m.latency_ms),
      memory_unit_bytes_(m.memory_unit_bytes) {
  if (!enabled_) return;
  const auto& ops = m.ops[static_cast<std::size_t>(rank)];
  for (int k = 0; k < 3; ++k) kinds_[static_cast<std::size_t>(k)] = per_chunk(ops[static_cast<std::size_t>(k)], v);
  kinds_[3] =
      combined(kinds_[1], kinds_[2], per_rank(costs.backward_input, rank), per_rank(costs.backward_weight, rank));
  if (bytes_per_ms_ <= 0) enabled_ = false;  // no bandwidth: no free transfers, so no migration
}

Offload Migration::split(OpKind kind, double estimate, int slices, const HelpOffer& offer) const {
  const plan::SliceCosts& c = kinds_[static_cast<std::size_t>(kind)];
  const double slice = estimate * c.sliced_fraction / slices_;  // one slice on the owner
  Offload o;
  o.helper = offer.rank;
  o.slices = slices;
  o.owner_time = estimate - slices * slice;
  o.helper_compute = slices * slice * c.helper_factor * offer.speed;
  o.bytes = c.bytes_fixed + slices * c.bytes_per_slice;
  o.help_time = o.bytes / bytes_per_ms_ + c.messages * latency_ms_ + o.helper_compute;
  o.op_time = std::max(o.owner_time, o.help_time);
  const std::size_t r = static_cast<std::size_t>(offer.rank);
  o.memory = r < memory_unit_bytes_.size() && memory_unit_bytes_[r] > 0 ? o.bytes / memory_unit_bytes_[r] : 0.0;
  return o;
}

Offload Migration::decide(OpKind kind, double now, double estimate, const std::vector<HelpOffer>& offers) const {
  Offload best;
  best.op_time = best.owner_time = estimate;
  if (!enabled_ || estimate <= 0 || kinds_[static_cast<std::size_t>(kind)].sliced_fraction <= 0) return best;
  const double gain_needed = 1e-9 * std::max(1.0, estimate);  // a tie is no reason to move bytes
  for (const HelpOffer& offer : offers) {
    for (int k = 1; k <= max_slices_; ++k) {
      const Offload o = split(kind, estimate, k, offer);
      if (now + o.help_time > offer.until + 1e-9 || o.memory > offer.memory_free) continue;
      if (o.op_time < best.op_time - gain_needed) best = o;
    }
  }
  return best;
}

std::vector<Migration> migrations(const plan::Migration& migration, const plan::Costs& costs, int p, int v) {
  std::vector<Migration> out;
  if (!migration.enabled) return out;
  out.reserve(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) out.emplace_back(migration, costs, r, v);
  return out;
}

}  // namespace conductor::sched

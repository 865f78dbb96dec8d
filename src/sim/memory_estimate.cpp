#include "conductor/sim/memory_estimate.hpp"

namespace conductor::sim {

namespace {

// Bytes per op, measured (peak RSS of one simulated step, minus the binary's own, over the op count; p = 64,
// m = 32768..131072, 1f1b and zb-h1), rounded up: the schedule, the engine's state and the step's figures
// (70 measured); per-op events with their copies for the summary and the trace writer (220); SEND/RECV
// events of the transfers on top (545).
constexpr double kBytesPerOp = 80.0;
constexpr double kEventBytesPerOp = 240.0;
constexpr double kCommEventBytesPerOp = 600.0;

}  // namespace

std::uint64_t ops_per_step(const SimSize& s) {
  return static_cast<std::uint64_t>(s.p) * static_cast<std::uint64_t>(s.m) * static_cast<std::uint64_t>(s.v) *
         static_cast<std::uint64_t>(s.ops_per_microbatch);
}

std::uint64_t estimate_bytes(const SimSize& s) {
  double per_op = kBytesPerOp;
  if (s.events) per_op += kEventBytesPerOp + (s.comm_events ? kCommEventBytesPerOp : 0.0);
  return static_cast<std::uint64_t>(static_cast<double>(ops_per_step(s)) * per_op);
}

}  // namespace conductor::sim

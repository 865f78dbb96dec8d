#pragma once
// The simulator's memory, estimated from the deck's sizes before anything is allocated (the size guard of
// `conductor simulate`): every microbatch op of the schedule is held a few times over (the order, the engine's
// per-op state and timings, the realized order) and, when events are recorded, as trace events (and their
// copies for the summary and the trace writer), plus the SEND/RECV events of its transfers.
#include <cstdint>

namespace conductor::sim {

struct SimSize {
  std::int64_t p = 1, m = 1, v = 1;
  int ops_per_microbatch = 3;  // F, B, W per chunk (2 where B and W are one op)
  bool events = false;         // per-op trace events recorded
  bool comm_events = false;    // SEND/RECV events too
};

// Ops of one step: p x m x v x ops_per_microbatch.
std::uint64_t ops_per_step(const SimSize& size);

// Peak bytes of simulating one step of that size (steps run one after another and reuse the memory).
std::uint64_t estimate_bytes(const SimSize& size);

}  // namespace conductor::sim

#pragma once
// The records every trace holds, whoever wrote it (the simulator or the MPI runtime). The HDF5 layout of
// these records is documented in docs/trace.md; field names here are the dataset field names there.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace conductor::trace {

inline constexpr int kSchemaVersion = 1;

// The trace's clock counts whole nanoseconds; op times, costs and the deck are in milliseconds.
inline constexpr double kNsPerMs = 1e6;
inline constexpr double kTickMs = 1.0 / kNsPerMs;  // one tick of the trace's clock, in ms

// A time in ms on the trace's clock: rounded to the nearest tick.
inline std::int64_t ms_to_ns(double ms) { return static_cast<std::int64_t>(std::llround(ms * kNsPerMs)); }

// HDF5 enum "kind" of /events. Values are part of the schema: append, never renumber.
enum class EventKind : std::int8_t {
  F = 0,         // forward
  B = 1,         // backward for the input
  W = 2,         // backward for the weights
  BW = 3,        // full backward (B and W fused)
  SEND = 4,      // a tensor leaving this rank (start = posted, end = completed)
  RECV = 5,      // a tensor arriving at this rank (start = posted, end = arrived)
  ANNOUNCE = 6,  // an input's expected arrival announced to this rank (backfill; see docs/trace.md)
  // Computation migration: slices of another rank's (peer's) F, B, W or BW op computed on this rank.
  HELP_F = 7,
  HELP_B = 8,
  HELP_W = 9,
  HELP_BW = 10,
};

const char* to_string(EventKind kind);

// One op (or one transfer) of one rank in one step. Times are integer ns on the run's common clock.
struct OpEvent {
  std::int32_t step = 0;
  std::int32_t rank = 0;
  std::int32_t stage = 0;  // virtual stage index (chunk * p + rank for loop placement)
  std::int32_t chunk = 0;  // virtual chunk on this rank
  std::int32_t microbatch = 0;
  EventKind kind = EventKind::F;
  std::int64_t ready_ns = 0;  // inputs arrived and memory fits (compute); posted (comm)
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t bytes = 0;    // activation/gradient bytes moved (comm) or held (compute)
  std::int64_t wait_ns = 0;  // idle time on this rank right before this op started
  std::int32_t peer = -1;    // the other rank of a transfer; -1 for compute
  // Slices computed on another rank than the op's owner (owner's row: sent away; HELP_* row: computed here).
  // 16 bits: migration.slices goes to 4096 (8 bits wrapped 128 to -128 and 256 to 0: a help read as none).
  std::int16_t migrated = 0;
};

// Per-step figures, as computed by the writer of the trace (rank 0 or the simulator).
struct StepRecord {
  std::int32_t step = 0;
  double loss = 0.0;  // NaN where no loss exists (simulator, emulated backend)
  std::int64_t start_ns = 0;
  std::int64_t makespan_ns = 0;  // last op end - first op start over all ranks
  double bubble_ratio = 0.0;     // 1 - busy(F+B+W over ranks) / (ranks x makespan)
  double samples_per_s = 0.0;
  double lower_bound_ns = 0.0;  // largest per-rank compute of this step
  // Mean over ranks of 1 - busy / (the rank's last op end - first op start): the Zero Bubble paper's measure.
  // NaN when read from a trace that has no such column and whose events cannot give it.
  double stage_bubble_ratio = 0.0;
};

// Root attributes of a trace.
struct RunInfo {
  std::string deck;  // resolved deck YAML
  std::int32_t world_size = 1;
  std::string schedule;                // schedule.kind
  std::string execution;               // strict | readiness
  std::string hint;                    // schedule.hint
  std::string backend;                 // cpu | emulated | cuda | simulator
  std::string source;                  // "runtime" | "simulator"
  std::vector<std::string> hostnames;  // one per rank (the simulator writes "simulator")
  std::string git_revision;
  std::int32_t pipeline = 1, microbatches = 1, virtual_chunks = 1;
  // The clock every *_ns time is read on, written as the `clock` and `epoch_unix_ns` attributes of /events and
  // /steps: a description, and the UNIX time (ns) of time 0 on it where it has one (the simulator's has none).
  std::string clock = "simulated: virtual time in ns, 0 at the start of the first step; no wall-clock epoch";
  std::optional<std::int64_t> epoch_unix_ns;
};

}  // namespace conductor::trace

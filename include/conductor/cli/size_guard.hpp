#pragma once
// The size guard: a deck estimated to need more memory than the machine has available (or than
// run.memory_limit_gb) is refused, with the estimate and the limit, before anything is allocated.
#include <cstdint>
#include <string>

#include "conductor/config/deck.hpp"

namespace conductor::cli {

// MemAvailable from /proc/meminfo; elsewhere free pages x page size (sysconf); 0 when neither is known.
std::uint64_t available_memory_bytes();

// run.memory_limit_gb in bytes, or when it is 0 the less of available_memory_bytes() and what this process's memory
// cgroup has left (Slurm's --mem, a container's limit); `source` says which.
std::uint64_t memory_limit_bytes(const config::Deck& deck, std::string& source);
// What this process's memory cgroup has left (its limit less its use: Slurm's --mem, a container's limit), or 0
// where it has none: cgroup v2 (ROOT/PATH/memory.max, memory.current) or v1 (ROOT/memory/PATH/
// memory.limit_in_bytes, memory.usage_in_bytes), PATH read from `self_cgroup`.
std::uint64_t cgroup_memory_left(const std::string& self_cgroup = "/proc/self/cgroup",
                                 const std::string& root = "/sys/fs/cgroup");
// This process's address-space limit (RLIMIT_AS, ulimit -v) less what it maps already, or 0 when unlimited: what
// one process may still allocate.
std::uint64_t address_space_left();

// `conductor simulate`: the simulator's estimate for the deck (sim/memory_estimate.hpp), with events when
// traced or when a step has at most `events_up_to` ops (simulate then summarizes from them); InputError above
// the limit.
void check_simulate_size(const config::Deck& deck, std::uint64_t events_up_to);

// `conductor simulate` with a trace: a run whose trace cannot fit in the space free where run.output lies is refused
// before it starts (it would fill the disk for hours). The estimate is a floor (kTraceFloorBytesPerEvent per op
// event, far below what the compressed rows take), so a run that would fit is never refused.
// Above the floor but below what traces of small, noisy steps take per op event (kTraceTypicalBytesPerEvent, their
// transfers' rows included: docs/trace.md measures 8-19 bytes a row, and a 2-rank quickstart filled a disk at ~31
// bytes an op event), the run starts with a warning that it may fill the file system.
inline constexpr std::uint64_t kTraceFloorBytesPerEvent = 4;
inline constexpr std::uint64_t kTraceTypicalBytesPerEvent = 40;
void check_trace_space(const config::Deck& deck);

// `conductor run`, collective over MPI_COMM_WORLD: each rank estimates its own trainer (runtime/memory_estimate.hpp),
// the ranks of a node add theirs up, and a node above the limit ends every rank with exit 2.
void check_run_size(const config::Deck& deck);

// `conductor validate` (a run's rules), without the run's ranks: a deck whose run.memory_limit_gb (a node's) is below
// what its largest rank alone needs is refused as conductor run would refuse it on any node; the limit from the
// machine's memory is the run's node's, so checked there only. InputError naming the rank.
void check_rank_sizes_against_deck_limit(const config::Deck& deck);

}  // namespace conductor::cli

#pragma once
// The run's common clock: every rank's steady clock, shifted by an offset to rank 0's, measured at start-up
// by ping-pong (the offset from the exchange with the smallest round trip). Trace times are ns on this clock.
#include <cstdint>

#include <mpi.h>

namespace conductor::runtime {

std::int64_t steady_now_ns();
// CPU time of the calling thread: overheads measured on a loaded node without the time it was descheduled.
std::int64_t thread_cpu_ns();

class CommonClock {
 public:
  // Collective over comm.
  explicit CommonClock(MPI_Comm comm, int rounds = 16);
  std::int64_t now_ns() const { return steady_now_ns() + offset_ns_; }
  std::int64_t to_common(std::int64_t local_ns) const { return local_ns + offset_ns_; }
  std::int64_t offset_ns() const { return offset_ns_; }
  std::int64_t uncertainty_ns() const { return best_rtt_ns_ / 2; }

 private:
  std::int64_t offset_ns_ = 0;
  std::int64_t best_rtt_ns_ = 0;
};

}  // namespace conductor::runtime

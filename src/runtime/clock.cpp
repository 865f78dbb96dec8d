#include "conductor/runtime/clock.hpp"

#include <chrono>
#include <ctime>
#include <limits>

namespace conductor::runtime {

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

CommonClock::CommonClock(MPI_Comm comm, int rounds) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  constexpr int kTag = 32000;
  best_rtt_ns_ = 0;
  for (int peer = 1; peer < size; ++peer) {
    if (rank == 0) {
      for (int r = 0; r < rounds; ++r) {
        std::int64_t ping = 0, t0 = 0;
        MPI_Recv(&ping, 1, MPI_INT64_T, peer, kTag, comm, MPI_STATUS_IGNORE);
        t0 = steady_now_ns();
        MPI_Send(&t0, 1, MPI_INT64_T, peer, kTag, comm);
      }
    } else if (rank == peer) {
      std::int64_t best = std::numeric_limits<std::int64_t>::max();
      for (int r = 0; r < rounds; ++r) {
        const std::int64_t sent = steady_now_ns();
        std::int64_t remote = 0;
        MPI_Send(&sent, 1, MPI_INT64_T, 0, kTag, comm);
        MPI_Recv(&remote, 1, MPI_INT64_T, 0, kTag, comm, MPI_STATUS_IGNORE);
        const std::int64_t back = steady_now_ns();
        const std::int64_t rtt = back - sent;
        if (rtt < best) {
          best = rtt;
          // rank 0 read its clock about half way through the round trip.
          offset_ns_ = remote - (sent + rtt / 2);
        }
      }
      best_rtt_ns_ = best;
    }
  }
}

}  // namespace conductor::runtime

#include "conductor/runtime/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include "conductor/runtime/clock.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/mpi.hpp"

namespace conductor::runtime {

Watchdog::Watchdog(double seconds, int rank) : configured_(seconds), seconds_(0), limit_ns_(0), rank_(rank) {
  set_limit(seconds);
}

void Watchdog::set_limit(double seconds) {
  seconds_ = seconds;
  limit_ns_ = seconds > 0 ? static_cast<std::int64_t>(std::llround(seconds * 1e9)) : 0;
}

void Watchdog::bound_by_steps(double slowest_step_s, double factor) {
  if (configured_ <= 0 || factor <= 0) return;
  factor_ = factor;
  set_limit(std::min(configured_, std::max(kFloorS, factor * slowest_step_s)));
}

namespace {

MPI_Comm& channel() {
  static MPI_Comm comm = MPI_COMM_NULL;  // freed by MPI_Finalize; a fired rank never returns
  return comm;
}

constexpr int kFiredTag = 1;

// Tells every other rank that this one fired (whom it waited for, and whether it fired because another had: a
// join), listens for `window_s`, and returns whether this rank is the one that reports (Watchdog::reporter).
bool reports(int rank, int peer, bool joined, double window_s) {
  MPI_Comm comm = channel();
  if (comm == MPI_COMM_NULL) return true;
  int size = 1;
  MPI_Comm_size(comm, &size);
  const int mine[3] = {rank, peer, joined ? 1 : 0};
  std::vector<MPI_Request> sends;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    sends.emplace_back();
    MPI_Isend(mine, 3, MPI_INT, r, kFiredTag, comm, &sends.back());  // never completed: this process ends
  }
  std::map<int, Watchdog::Fired> fired{{rank, {peer, joined}}};
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(window_s);
  while (std::chrono::steady_clock::now() < end) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kFiredTag, comm, &flag, &st);
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    int theirs[3];
    MPI_Recv(theirs, 3, MPI_INT, st.MPI_SOURCE, kFiredTag, comm, MPI_STATUS_IGNORE);
    fired[theirs[0]] = {theirs[1], theirs[2] != 0};
  }
  return Watchdog::reporter(fired) == rank;
}

}  // namespace

int Watchdog::reporter(const std::map<int, Fired>& fired) {
  for (const auto& [r, f] : fired) {
    if (f.peer >= 0 && !fired.count(f.peer)) return r;  // the lowest rank that waited on a silent peer
  }
  for (const auto& [r, f] : fired) {
    if (!f.joined) return r;
  }
  return fired.empty() ? -1 : fired.begin()->first;
}

bool Watchdog::another_fired() {
  MPI_Comm comm = channel();
  if (comm == MPI_COMM_NULL) return false;
  int flag = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, kFiredTag, comm, &flag, MPI_STATUS_IGNORE);  // left queued for reports() to read
  return flag != 0;
}

void Watchdog::open_channel(MPI_Comm comm) {
  if (channel() == MPI_COMM_NULL) MPI_Comm_dup(comm, &channel());
}

void Watchdog::fire(const std::string& what, double waited_s, int peer) const {
  // Long enough for ranks that time out on the same stop to hear of each other, short beside the limit.
  const double window_s = std::clamp(seconds_ / 4, 0.2, 2.0);
  if (!reports(rank_, peer, another_fired(), window_s)) {
    // Another rank reports; it exits after its window and the launcher ends this one. Exit anyway, later.
    std::this_thread::sleep_for(std::chrono::duration<double>(window_s + 3.0));
    std::_Exit(kExitFailure);
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", waited_s);
  log::error("watchdog: rank " + std::to_string(rank_) + " waited " + secs + " s for " + what +
             "; no message arrived; aborting (runtime.watchdog_s = " + format_double(configured_) +
             (seconds_ < configured_
                  ? "; " + format_double(seconds_) + " s here: runtime.watchdog_steps = " + format_double(factor_) +
                        " x the slowest step so far, at least " + format_double(kFloorS) + " s"
                  : std::string()) +
             ")");
  std::fflush(nullptr);
  std::_Exit(kExitFailure);
}

void Watchdog::wait(MPI_Request& request, const std::string& what) const {
  std::vector<MPI_Request> one{request};
  wait_all(one, [&](std::size_t) { return what; });
  request = one[0];
}

void Watchdog::wait_all(std::vector<MPI_Request>& requests, const std::function<std::string(std::size_t)>& what,
                        const std::function<int(std::size_t)>& peer) const {
  Timer timer(*this, steady_now_ns());
  std::int64_t sleep_ns = 1'000;
  while (true) {
    std::size_t first_pending = requests.size();
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);  // sets the request to MPI_REQUEST_NULL when done
      if (!done && first_pending == requests.size()) first_pending = i;
    }
    if (first_pending == requests.size()) return;
    const std::int64_t now = steady_now_ns();
    if (timer.expired(now) || another_fired()) {
      fire(what(first_pending), timer.waited_s(now), peer ? peer(first_pending) : -1);
    }
    // Back off to 200 us: a collective waits for the slowest rank's step, and idle ranks share cores.
    std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
    sleep_ns = std::min<std::int64_t>(200'000, sleep_ns * 2);
  }
}

void watched_allreduce(const Watchdog& w, const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm, const std::string& what) {
  MPI_Request r;
  MPI_Iallreduce(send, recv, count, type, op, comm, &r);
  w.wait(r, what);
}

void watched_bcast(const Watchdog& w, void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
                   const std::string& what) {
  MPI_Request r;
  MPI_Ibcast(buffer, count, type, root, comm, &r);
  w.wait(r, what);
}

void watched_gather(const Watchdog& w, const void* send, int send_count, MPI_Datatype send_type, void* recv,
                    int recv_count, MPI_Datatype recv_type, int root, MPI_Comm comm, const std::string& what) {
  MPI_Request r;
  MPI_Igather(send, send_count, send_type, recv, recv_count, recv_type, root, comm, &r);
  w.wait(r, what);
}

void watched_check_all(const Watchdog& w, bool ok, const std::string& message, int exit_code, MPI_Comm comm,
                       const std::string& what) {
  mpi::check_all(ok, message, exit_code, comm, [&](const int* in, int* out, MPI_Op op) {
    watched_allreduce(w, in, out, 1, MPI_INT, op, comm, what);
  });
}

std::string watched_broadcast_text(const Watchdog& w, std::string text, MPI_Comm comm, const std::string& what) {
  long long n = static_cast<long long>(text.size());
  watched_bcast(w, &n, 1, MPI_LONG_LONG, 0, comm, what);
  text.resize(static_cast<std::size_t>(n));
  if (n > 0) watched_bcast(w, text.data(), static_cast<int>(n), MPI_CHAR, 0, comm, what);
  return text;
}

void watched_gatherv(const Watchdog& w, const void* send, int send_count, MPI_Datatype send_type, void* recv,
                     const int* recv_counts, const int* displs, MPI_Datatype recv_type, int root, MPI_Comm comm,
                     const std::string& what) {
  MPI_Request r;
  MPI_Igatherv(send, send_count, send_type, recv, recv_counts, displs, recv_type, root, comm, &r);
  w.wait(r, what);
}

}  // namespace conductor::runtime

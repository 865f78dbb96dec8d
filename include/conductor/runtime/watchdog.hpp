#pragma once
// The watchdog (runtime.watchdog_s): a rank that hears nothing from a peer it waits on for that long ends the
// run with one message naming the peer and what it waited for, and exits non-zero; mpirun then ends every other
// rank (a rank that exits with a non-zero code makes mpirun terminate the job), the stopped one included.
//
// Two places wait on peers:
//  - the executor (executor.cpp), for an op's input: it already reads the clock on every poll, so the check is
//    one comparison; only time spent with nothing of its own to run or finish counts (its own compute, a queued
//    GPU op or an injected delay never does);
//  - the collectives between steps (gradient norm and loss, event and peak gathers, the order's broadcast):
//    they are issued non-blocking and polled with the same deadline (wait()), naming the collective, since
//    which peer is missing from a collective is not known to the ranks that joined it.
// The exit is a plain _Exit(kExitFailure) after the message, not MPI_Abort (whose banner would bury it).
//
// One message per job: when a rank stops, several ranks time out at about the same moment (those waiting on it,
// and those waiting on them). Each one that fires tells the others on the watchdog's channel (open_channel())
// whom it waited for and listens for a short while; the one that reports is the lowest rank whose awaited peer
// did not fire itself (the silent one; else the lowest that fired), the others exit without a message. A rank
// that waits when another fires joins at once (another_fired()) instead of at its own limit: a rank waiting on
// the stopped one may have started waiting later than one waiting on it, and fired after that one's window had
// closed, so that one found its peer silent and named the wrong rank (4 ranks, one stopped: rank 3 named rank 2).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <mpi.h>

namespace conductor::runtime {

class Watchdog {
 public:
  // A step's waits are bounded by runtime.watchdog_steps x the slowest step so far, at least kFloorS.
  static constexpr double kFloorS = 30.0;

  // seconds <= 0: never fires.
  Watchdog(double seconds, int rank);
  double seconds() const { return seconds_; }  // the limit now: runtime.watchdog_s, or less once bounded
  // Once a step has run, a wait much longer than any step is no step's: the limit becomes min(runtime.watchdog_s,
  // max(kFloorS, factor x slowest_step_s)) (factor: runtime.watchdog_steps; 0 leaves it), so a stopped peer ends
  // the run within about 30 s where its steps take a second (300 s before). The waits outside steps (a
  // checkpoint's files, a validation pass) keep the configured limit: they use a Watchdog not bounded.
  void bound_by_steps(double slowest_step_s, double factor);
  std::int64_t limit_ns() const { return limit_ns_; }
  // True once a wait that began at since_ns (steady clock) has lasted past the limit at now_ns.
  bool expired(std::int64_t since_ns, std::int64_t now_ns) const {
    return limit_ns_ > 0 && now_ns - since_ns > limit_ns_;
  }
  // Measures one wait. A gap between two polls longer than a second (or half the limit) means this process
  // itself did not run (SIGSTOP, then SIGCONT from mpiexec ending the job): the wait restarts there, so a
  // stopped rank that is resumed never blames the peers it could not hear while it was stopped.
  class Timer {
   public:
    Timer(const Watchdog& w, std::int64_t now_ns) : w_(w), since_(now_ns), last_(now_ns) {}
    void restart(std::int64_t now_ns) { since_ = last_ = now_ns; }
    // Call on every poll; true once the wait has lasted past the limit.
    bool expired(std::int64_t now_ns) {
      if (now_ns - last_ > std::min<std::int64_t>(1'000'000'000, w_.limit_ns_ / 2)) since_ = now_ns;
      last_ = now_ns;
      return w_.expired(since_, now_ns);
    }
    double waited_s(std::int64_t now_ns) const { return static_cast<double>(now_ns - since_) * 1e-9; }

   private:
    const Watchdog& w_;
    std::int64_t since_, last_;
  };
  // Collective over comm, once per run (a duplicate of it becomes the channel every Watchdog of this process
  // uses to agree on who reports); without it every rank that fires prints.
  static void open_channel(MPI_Comm comm);
  // Prints "rank R waited S s for WHAT; no message arrived; aborting" (if this rank is the one that reports) and
  // ends this process (exit 1). peer: the rank it waited for (-1: unknown, e.g. a collective).
  [[noreturn]] void fire(const std::string& what, double waited_s, int peer = -1) const;
  // True once another rank's fire() has told this one (its message is left for fire() to read): a rank waiting
  // on a peer then fires too, whatever its own wait so far.
  static bool another_fired();
  // What a rank that fired knows of another (and of itself): whom it waited for (-1: a collective) and whether it
  // fired because another had (a join).
  struct Fired {
    int peer;
    bool joined;
  };
  // Of the ranks that fired, by rank, the one that reports: the lowest whose peer is silent (did not fire), else
  // the lowest that fired on its own. A rank that joins after the others' windows closed (one resumed by mpiexec's
  // SIGCONT after a stop, waiting in a collective) thus never adds a second message.
  static int reporter(const std::map<int, Fired>& fired);
  // Completes a non-blocking MPI operation, polling it under the deadline; `what` names it in the message.
  void wait(MPI_Request& request, const std::string& what) const;
  // Completes every request; on expiry, what(i) names the first one still pending, and peer(i), where given, the
  // rank it waits for (so that the ranks that fire agree on a silent one: see reporter()).
  void wait_all(std::vector<MPI_Request>& requests, const std::function<std::string(std::size_t)>& what,
                const std::function<int(std::size_t)>& peer = {}) const;

 private:
  void set_limit(double seconds);

  double configured_;  // runtime.watchdog_s
  double factor_ = 0;  // runtime.watchdog_steps, once bound_by_steps applied it
  double seconds_;
  std::int64_t limit_ns_;
  int rank_;
};

// mpi::broadcast_text from rank 0 under the watchdog: a rank that never joins ends the run after its limit with a
// message naming `what`, instead of leaving the others blocked in MPI_Bcast.
std::string watched_broadcast_text(const Watchdog& w, std::string text, MPI_Comm comm, const std::string& what);

// Collectives of the step loop through Watchdog::wait (non-blocking, same deadline).
void watched_allreduce(const Watchdog& w, const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm, const std::string& what);
void watched_bcast(const Watchdog& w, void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
                   const std::string& what);
void watched_gather(const Watchdog& w, const void* send, int send_count, MPI_Datatype send_type, void* recv,
                    int recv_count, MPI_Datatype recv_type, int root, MPI_Comm comm, const std::string& what);
void watched_gatherv(const Watchdog& w, const void* send, int send_count, MPI_Datatype send_type, void* recv,
                     const int* recv_counts, const int* displs, MPI_Datatype recv_type, int root, MPI_Comm comm,
                     const std::string& what);
// mpi::check_all with its agreement watched: the lowest failed rank says `message`, every rank throws
// CollectiveExit with the agreed code; a rank that never joins ends the run after the deadline, naming `what`.
void watched_check_all(const Watchdog& w, bool ok, const std::string& message, int exit_code, MPI_Comm comm,
                       const std::string& what);

}  // namespace conductor::runtime

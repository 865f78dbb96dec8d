#pragma once
// MPI ownership and the two ways to fail without hanging:
//  - check_all(): collective (every rank calls it at the same point): the flags are allreduced, the lowest
//    failing rank prints its message once, and every rank throws CollectiveExit with the same exit code.
//  - abort_all(): one rank, anywhere: prints its message and MPI_Abort()s the whole job.
#include <mpi.h>

#include <functional>
#include <string>

namespace conductor::mpi {

// CONDUCTOR_INIT_TIMEOUT_S unset: as runtime.watchdog_s's default, the longest a rank waits on a peer before a
// step has run.
inline constexpr double kDefaultInitTimeoutS = 300;
// The least timeout: mpirun ends a job 2 s after its first exit, so a stopped rank it resumes (SIGCONT) must not
// time out sooner itself; and a healthy start-up takes seconds (0.001 s aborted every run).
inline constexpr double kMinInitTimeoutS = 5;

// RAII owner of MPI_Init/MPI_Finalize. MPI is initialised only by commands that run distributed.
class Session {
 public:
  // init_timeout_s > 0: a process whose MPI_Init has not returned after that long (a rank of the job that never
  // started, or was stopped, holds every other in MPI_Init for ever, where no watchdog runs yet) says so and exits
  // 1; the launcher then ends the job. The lowest launch rank says it first, rank 1 3 s later and the others 6 s
  // later, so one message reaches the user where the launcher ends the job at the first exit.
  Session(int* argc, char*** argv, double init_timeout_s = 0);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

// RAII owner of a duplicate of a communicator (collective to create and to free): its own matching space,
// so messages of different planes never match each other.
class DupComm {
 public:
  explicit DupComm(MPI_Comm parent) { MPI_Comm_dup(parent, &comm_); }
  ~DupComm() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  DupComm(const DupComm&) = delete;
  DupComm& operator=(const DupComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

bool initialized();
int world_rank();  // 0 when MPI is not initialised
int world_size();  // 1 when MPI is not initialised

// Collective: ok=false on any rank ends every rank with exit_code. The message of the lowest failing rank
// is printed (tagged with that rank); returns normally only when every rank is ok.
// reduce: how its two integer allreduces are made (empty: MPI_Allreduce; the runtime passes its watchdog's).
using IntAllreduce = std::function<void(const int* in, int* out, MPI_Op op)>;
void check_all(bool ok, const std::string& message, int exit_code, MPI_Comm comm = MPI_COMM_WORLD,
               const IntAllreduce& reduce = {});

// Non-collective: print and abort every rank of the job now.
[[noreturn]] void abort_all(const std::string& message, int exit_code);

// Collective: rank 0's text on every rank (the argument is ignored on the others).
std::string broadcast_text(std::string text, MPI_Comm comm);

// Rank 0 reads a file and broadcasts it; every rank returns the same text or throws the same InputError.
std::string read_and_broadcast(const std::string& path, MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace conductor::mpi

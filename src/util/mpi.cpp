#include "conductor/util/mpi.hpp"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/text_file.hpp"

namespace conductor::mpi {

namespace {

// The launcher's rank of this process before MPI_Init (Open MPI, PMIx, MPICH/Intel MPI or srun's variable), or -1.
int launch_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end == '\0' && r >= 0 && r <= INT32_MAX) return static_cast<int>(r);
  }
  return -1;
}

// Ends this process unless MPI_Init returns within the timeout (Session's comment). A thread that only sleeps on
// a condition variable: it never calls MPI.
class InitGuard {
 public:
  explicit InitGuard(double timeout_s) {
    if (timeout_s <= 0) return;
    const int rank = launch_rank();
    // The lowest launch rank first, rank 1 3 s later, the others 6 s later: mpirun answers the first exit with
    // SIGKILL 2 s on (after SIGCONT and SIGTERM, which a rank in start-up only notes), so a second message comes
    // only where ranks 0 and 1 are the ones that never started.
    const double wait_s = timeout_s + 3.0 * std::min(std::max(rank, 0), 2);
    thread_ = std::thread([this, timeout_s, wait_s, rank] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (done_cv_.wait_for(lock, std::chrono::duration<double>(wait_s), [this] { return done_; })) return;
      char host[256] = "?";
      gethostname(host, sizeof host - 1);
      std::fprintf(stderr,
                   "%sconductor: error: MPI start-up (MPI_Init) did not complete within %g s on host %s (pid %ld): "
                   "a rank of the job never started, was stopped or cannot reach this one; aborting "
                   "(CONDUCTOR_INIT_TIMEOUT_S = %g; unset: %g)\n",
                   rank >= 0 ? ("[rank " + std::to_string(rank) + "] ").c_str() : "", wait_s, host,
                   static_cast<long>(getpid()), timeout_s, kDefaultInitTimeoutS);
      std::fflush(stderr);
      std::_Exit(kExitFailure);
    });
  }
  ~InitGuard() {
    if (!thread_.joinable()) return;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_all();
    thread_.join();
  }
  InitGuard(const InitGuard&) = delete;
  InitGuard& operator=(const InitGuard&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

Session::Session(int* argc, char*** argv, double init_timeout_s) {
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    const InitGuard guard(init_timeout_s);
    MPI_Init(argc, argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  // Errors on communication come back as codes we turn into messages, not silent aborts.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  log::set_rank(rank_, size_);
}

Session::~Session() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool initialized() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

int world_rank() {
  if (!initialized()) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  if (!initialized()) return 1;
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

void check_all(bool ok, const std::string& message, int exit_code, MPI_Comm comm, const IntAllreduce& reduce) {
  if (!initialized()) {
    if (!ok) {
      log::error(message);
      throw CollectiveExit(exit_code);
    }
    return;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto allreduce = [&](const int* in, int* out, MPI_Op op) {
    if (reduce) return reduce(in, out, op);
    MPI_Allreduce(in, out, 1, MPI_INT, op, comm);
  };
  int mine = ok ? size : rank;
  int first_failed = size;
  allreduce(&mine, &first_failed, MPI_MIN);
  if (first_failed == size) return;
  if (rank == first_failed) log::error(message);
  int code = ok ? 0 : exit_code;
  int agreed = 0;
  allreduce(&code, &agreed, MPI_MAX);
  throw CollectiveExit(agreed);
}

void abort_all(const std::string& message, int exit_code) {
  log::error(message);
  if (initialized()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

std::string broadcast_text(std::string text, MPI_Comm comm) {
  long long n = static_cast<long long>(text.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm);
  text.resize(static_cast<std::size_t>(n));
  if (n > 0) MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, 0, comm);
  return text;
}

// A deck or fragment read from a pipe: the deck's own limit (1 MB) is checked on the file's size, which a pipe
// does not have; this bounds what is read.
constexpr std::uintmax_t kMaxPipedInputBytes = 1u << 20;

std::string read_and_broadcast(const std::string& path, MPI_Comm comm) {
  std::string text, problem;
  int rank = initialized() ? world_rank() : 0;
  std::error_code ec;
  if (rank == 0 && std::filesystem::is_fifo(path, ec)) {
    // A named pipe blocks its reader until a writer opens it: read_text_input waits a bounded time.
    try {
      text = read_text_input(path, "input file", kMaxPipedInputBytes);
    } catch (const InputError& e) {
      problem = e.what();
    }
  } else if (rank == 0) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      problem = path + ": cannot open file (does it exist and is it readable?)";
    } else {
      std::ostringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
  }
  if (initialized()) {
    // Broadcast [problem flag, length] then the bytes (the text, or the problem).
    long long header[2] = {problem.empty() ? 0 : 1,
                           static_cast<long long>(problem.empty() ? text.size() : problem.size())};
    MPI_Bcast(header, 2, MPI_LONG_LONG, 0, comm);
    std::string& payload = header[0] ? problem : text;
    payload.resize(static_cast<size_t>(header[1]));
    if (header[1] > 0) MPI_Bcast(payload.data(), static_cast<int>(header[1]), MPI_CHAR, 0, comm);
  }
  if (!problem.empty()) throw InputError(problem);
  return text;
}

}  // namespace conductor::mpi

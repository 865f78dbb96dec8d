// gtest main for tests under mpiexec: rank 0 prints the usual report, other ranks print only their failures
// (tagged with the rank), and a failure on any rank fails the test on every rank. The runs a test trains print
// warnings and errors only (CONDUCTOR_LOG=info brings their step lines back): dozens of runs' progress lines
// pushed a failure's message out of the part of a log CI shows.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "conductor/util/log.hpp"

namespace {
class FailureOnlyPrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailureOnlyPrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (std::getenv("CONDUCTOR_LOG") == nullptr) conductor::log::set_level(conductor::log::Level::Warn);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailureOnlyPrinter(rank));  // gtest takes ownership
  }
  int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !local_failed) {
    std::fprintf(stderr, "[mpi_gtest_main] a test failed on another rank\n");
  }
  MPI_Finalize();
  return any_failed;
}

// gtest main for tests under mpiexec: rank 0 prints the usual report, other ranks print only their failures
// (tagged with the rank), and a failure on any rank fails the test on every rank. The runs a test trains print
// warnings and errors only (CONDUCTOR_LOG=info brings their step lines back): dozens of runs' progress lines
// pushed a failure's message out of the part of a log CI shows. Every rank's temporary folder ($TMPDIR, gtest's
// TEST_TMPDIR) is one folder rank 0 makes for this run and removes at the end: the run folders and checkpoints the
// tests write under fixed names leave nothing behind and never meet another test run's.
#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "conductor/util/log.hpp"
#include "scratch_dir.hpp"

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
  std::unique_ptr<conductor::test_support::ScratchDir> scratch;
  std::array<char, 4096> folder{};
  if (rank == 0) {
    scratch = std::make_unique<conductor::test_support::ScratchDir>("conductor-mpi-test");
    scratch->path().string().copy(folder.data(), folder.size() - 1);
  }
  MPI_Bcast(folder.data(), static_cast<int>(folder.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  setenv("TMPDIR", folder.data(), 1);
  setenv("TEST_TMPDIR", (std::string(folder.data()) + "/").c_str(), 1);
  int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !local_failed) {
    std::fprintf(stderr, "[mpi_gtest_main] a test failed on another rank\n");
  }
  MPI_Finalize();
  return any_failed;
}

// An imported torch.distributed.pipelining CSV trains to the single-rank losses bit for bit: at p = 2 a loop
// placement schedule with split (I, W) and full (B) backwards and idle slots, at p = 4 a V placement schedule with
// an OVERLAP_F_B pair (files next to this test, in torch's compute-only format). The placement is inferred from the
// stage indices, and the run's schedule is the file's.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/model/reference.hpp"
#include "conductor/runtime/training.hpp"
#include "conductor/sched/generators.hpp"
#include "mpi_world.hpp"
#include "tiny_deck.hpp"

using namespace conductor;

namespace {

using conductor::test_support::world_rank;
using conductor::test_support::world_size;

TEST(TorchCsvImport, TrainsToSingleRankLosses) {
  const int p = world_size();
  ASSERT_TRUE(p == 2 || p == 4) << "runs at p = 2 (loop) or p = 4 (V)";
  const char* source_dir = std::getenv("CONDUCTOR_SOURCE_DIR");
  ASSERT_NE(source_dir, nullptr);
  const std::string csv =
      std::string(source_dir) + (p == 2 ? "/tests/runtime/torch_loop_p2.csv" : "/tests/runtime/torch_v_p4.csv");
  const int v = p == 2 ? 1 : 2;
  const plan::Plan plan = config::resolve(
      conductor::test_support::tiny_run_deck("csv", v,
                                             {"parallel.microbatches=4", "model.n_layers=" + std::to_string(p * v),
                                              "schedule.kind=file:" + csv, "schedule.execution=strict"}));
  const sched::Schedule schedule = sched::make_schedule(plan);
  EXPECT_EQ(schedule.placement, p == 2 ? sched::Placement::Loop : sched::Placement::V);
  const runtime::RunOutcome outcome = runtime::train(plan, MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  const std::vector<double> reference = model::train_reference(plan);
  ASSERT_EQ(outcome.losses.size(), reference.size());
  for (std::size_t k = 0; k < reference.size(); ++k) EXPECT_EQ(outcome.losses[k], reference[k]) << "step " << k;
  EXPECT_NE(outcome.losses.front(), outcome.losses.back());
}

}  // namespace

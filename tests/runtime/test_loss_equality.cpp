// Same math under every schedule: pipeline-parallel losses equal single-rank training bit for bit (weight
// gradients are added in microbatch order and the global norm is summed in one fixed order), for every schedule
// kind, strict and readiness execution, at the pipeline size this binary runs with.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "conductor/cli/global_tier.hpp"
#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/model/reference.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/runtime/training.hpp"
#include "mpi_world.hpp"
#include "tiny_deck.hpp"

using namespace conductor;

namespace {

using conductor::test_support::world_rank;
using conductor::test_support::world_size;

config::Deck tiny_deck(const std::string& kind, const std::string& execution, const std::string& hint = "schedule",
                       const std::vector<std::string>& extra = {}) {
  const int v = (kind == "1f1b-interleaved" || plan::v_shaped_kind(kind)) ? 2 : 1;
  std::vector<std::string> o = {"schedule.kind=" + kind, "schedule.execution=" + execution, "schedule.hint=" + hint};
  o.insert(o.end(), extra.begin(), extra.end());
  return conductor::test_support::tiny_run_deck("eq", v, o);
}

class LossEquality : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {};

TEST_P(LossEquality, MatchesSingleRank) {
  const auto& [kind, execution, hint] = GetParam();
  const config::Deck deck = tiny_deck(kind, execution, hint);
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  const std::vector<double> reference = model::train_reference(config::resolve(deck));
  ASSERT_EQ(outcome.losses.size(), reference.size());
  for (std::size_t k = 0; k < reference.size(); ++k) {
    EXPECT_EQ(outcome.losses[k], reference[k]) << kind << " " << execution << " step " << k;
  }
  // Training happened: the loss moved.
  EXPECT_NE(outcome.losses.front(), outcome.losses.back());
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, LossEquality,
                         ::testing::Combine(::testing::Values("gpipe", "1f1b", "1f1b-interleaved", "zb-h1", "zb-h2",
                                                              "zb-1p", "zb-2p", "zb-v", "zb-v-greedy", "dualpipev"),
                                            ::testing::Values("strict", "readiness"), ::testing::Values("schedule")),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (auto& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

INSTANTIATE_TEST_SUITE_P(ReadinessHints, LossEquality,
                         ::testing::Combine(::testing::Values("zb-2p"), ::testing::Values("readiness"),
                                            ::testing::Values("bf", "bfw", "backfill", "critical")),
                         [](const auto& info) { return "zb_2p_" + std::get<2>(info.param); });

// critical ranks by whether an op feeds another rank, which differs between a rank's chunks on these lists.
INSTANTIATE_TEST_SUITE_P(CriticalOnChunks, LossEquality,
                         ::testing::Combine(::testing::Values("zb-v", "1f1b-interleaved"),
                                            ::testing::Values("readiness"), ::testing::Values("critical")),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_critical";
                           for (auto& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// model.layers_per_stage: balanced moves layers between ranks (a large vocabulary makes the LM-head stage heavy,
// so the split is not the even one); the math must not change.
TEST(LossEqualityBalanced, MatchesSingleRank) {
  const config::Deck deck = tiny_deck("zb-2p", "strict", "schedule",
                                      {"model.vocab=1024", "cost.device_tflops=1", "model.layers_per_stage=balanced"});
  const int p = world_size();
  std::vector<int> even(static_cast<std::size_t>(p), 2);
  ASSERT_NE(deck.model.layers_per_stage, even);  // p = 2: [3, 1]; p = 4: [3, 2, 2, 1]
  EXPECT_EQ(deck.model.layers_per_stage.back(), 1);
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  const std::vector<double> reference = model::train_reference(config::resolve(deck));
  ASSERT_EQ(outcome.losses.size(), reference.size());
  for (std::size_t k = 0; k < reference.size(); ++k) EXPECT_EQ(outcome.losses[k], reference[k]) << "step " << k;
  EXPECT_NE(outcome.losses.front(), outcome.losses.back());
}

// Backfilling with a straggler: producers announce, consumers start ops out of list order (the replay test
// checks that they do), and the math is still the single-rank math.
TEST(LossEqualityBackfill, StragglerMatchesSingleRank) {
  for (const std::string kind : {"1f1b", "zb-h1"}) {
    const config::Deck deck = tiny_deck(kind, "readiness", "backfill",
                                        {"run.steps=4", "noise.kind=[gaussian,straggler]", "noise.level=0.3",
                                         "noise.straggler_rank=0", "noise.straggler_factor=2"});
    const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
    if (world_rank() != 0) continue;
    const std::vector<double> reference = model::train_reference(config::resolve(deck));
    ASSERT_EQ(outcome.losses.size(), reference.size());
    for (std::size_t k = 0; k < reference.size(); ++k)
      EXPECT_EQ(outcome.losses[k], reference[k]) << kind << " step " << k;
  }
}

#if CONDUCTOR_HAVE_POLICY
// The global tier changes the order between steps (planned on rank 0's planner thread, one step ahead), never
// the math: with scheduler.kind ppo (the shipped policy) and a straggler that makes it replan, losses still equal
// single-rank training. The planner is wired in as the conductor command does it.
TEST(LossEqualityGlobalTier, PpoOrdersMatchSingleRank) {
  for (const char* execution : {"strict", "readiness"}) {
    const config::Deck deck = tiny_deck("zb-2p", execution, "schedule",
                                        {"run.steps=5", "scheduler.kind=ppo", "noise.kind=straggler",
                                         "noise.straggler_rank=0", "noise.straggler_factor=1.5"});
    const runtime::RunOutcome outcome =
        runtime::train(config::resolve(deck), MPI_COMM_WORLD, cli::planner_factory(config::resolve(deck)));
    if (world_rank() != 0) continue;
    const std::vector<double> reference = model::train_reference(config::resolve(deck));
    ASSERT_EQ(outcome.losses.size(), reference.size());
    for (std::size_t k = 0; k < reference.size(); ++k)
      EXPECT_EQ(outcome.losses[k], reference[k]) << "ppo " << execution << " step " << k;
  }
}
#endif  // CONDUCTOR_HAVE_POLICY

}  // namespace

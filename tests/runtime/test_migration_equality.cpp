// Computation migration on the cpu backend moves real slices (W's MLP column groups, and BW's weight half) and
// never changes the math: with forced patterns (migration.force) and with decided migrations under a straggler
// and jitter, losses equal single-rank training bit for bit, for several schedule families, strict and readiness,
// at the pipeline size this binary runs with. The trace shows the slices did move (owner rows with migrated
// slices, HELP_W / HELP_BW rows on the helper), so a run where nothing moved cannot pass.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <string>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/model/reference.hpp"
#include "conductor/runtime/training.hpp"
#include "conductor/trace/trace_reader.hpp"
#include "mpi_world.hpp"
#include "tiny_deck.hpp"

using namespace conductor;

namespace {

using conductor::test_support::world_rank;
using conductor::test_support::world_size;

config::Deck migration_deck(const std::string& kind, const std::string& execution,
                            const std::vector<std::string>& extra) {
  const int v = kind == "1f1b-interleaved" ? 2 : 1;
  std::vector<std::string> o = {"trace.enabled=true",     "schedule.kind=" + kind, "schedule.execution=" + execution,
                                "migration.enabled=true", "migration.units=[mlp]", "migration.slices=4",
                                "migration.link=nvlink"};
  o.insert(o.end(), extra.begin(), extra.end());
  return conductor::test_support::tiny_run_deck("mig", v, o);
}

// Every rank gives `slices` slices of its W and BW ops to the next rank.
std::string ring_pattern(int slices) {
  const int p = world_size();
  std::string list = "migration.force=[";
  for (int r = 0; r < p; ++r) {
    // Appended piece by piece: GCC 12's -Wrestrict misfires on a chain of std::string operator+ here.
    if (r > 0) list += ',';
    list += '"';
    list += std::to_string(r);
    list += "->";
    list += std::to_string((r + 1) % p);
    list += ":W,BW:";
    list += std::to_string(slices);
    list += '"';
  }
  return list + "]";
}

struct Moved {
  int owner_ops = 0;   // owner rows with slices sent away
  int helper_ops = 0;  // HELP_W / HELP_BW rows
  bool helpers_right = true;
};

Moved moved(const std::string& dir, int forced_shift) {
  Moved m;
  const trace::Trace t = trace::read_trace((std::filesystem::path(dir) / "trace.h5").string());
  for (const trace::OpEvent& e : t.events) {
    if (e.kind == trace::EventKind::HELP_W || e.kind == trace::EventKind::HELP_BW) {
      ++m.helper_ops;
      if (forced_shift > 0 && e.rank != (e.peer + forced_shift) % world_size()) m.helpers_right = false;
    } else if (e.migrated > 0) {
      ++m.owner_ops;
    }
  }
  return m;
}

void expect_single_rank_losses(const config::Deck& deck, const runtime::RunOutcome& outcome, const std::string& what) {
  const std::vector<double> reference = model::train_reference(config::resolve(deck));
  ASSERT_EQ(outcome.losses.size(), reference.size()) << what;
  for (std::size_t k = 0; k < reference.size(); ++k)
    EXPECT_EQ(outcome.losses[k], reference[k]) << what << " step " << k;
  EXPECT_NE(outcome.losses.front(), outcome.losses.back()) << what;
}

class ForcedMigration : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(ForcedMigration, MatchesSingleRank) {
  const auto& [kind, execution] = GetParam();
  const config::Deck deck = migration_deck(kind, execution, {ring_pattern(2)});
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  expect_single_rank_losses(deck, outcome, kind + " " + execution);
  const Moved m = moved(outcome.output_dir, 1);
  // Every W and BW of every rank moved (3 steps, 2p microbatches, v chunks per rank).
  const int v = deck.parallel.virtual_chunks;
  EXPECT_EQ(m.owner_ops, 3 * 2 * world_size() * world_size() * v) << kind;
  EXPECT_EQ(m.helper_ops, m.owner_ops) << kind;
  EXPECT_TRUE(m.helpers_right) << kind;
}

INSTANTIATE_TEST_SUITE_P(Families, ForcedMigration,
                         ::testing::Combine(::testing::Values("1f1b", "zb-h1", "1f1b-interleaved"),
                                            ::testing::Values("strict", "readiness")),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (auto& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// Every slice moved (slices = migration.slices): the owner computes no MLP weight gradient of its own.
TEST(ForcedMigrationAllSlices, MatchesSingleRank) {
  const config::Deck deck = migration_deck("zb-h1", "strict", {ring_pattern(4), "migration.max_fraction=1"});
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  expect_single_rank_losses(deck, outcome, "all slices");
  EXPECT_GT(moved(outcome.output_dir, 1).helper_ops, 0);
}

// Decided migrations: rank 0 is a straggler (its ops take 3x their cost-model time, injected as real delays),
// the others jitter; the decision (sched::Migration::decide, as in the emulated runtime) moves slices of its W
// and BW ops to idle peers.
TEST(DecidedMigration, StragglerMatchesSingleRank) {
  for (const std::string execution : {"strict", "readiness"}) {
    const config::Deck deck =
        migration_deck("zb-h1", execution,
                       {"run.steps=4", "noise.kind=[gaussian,straggler]", "noise.level=0.2", "noise.straggler_rank=0",
                        "noise.straggler_factor=3", "cost.forward=[2]", "cost.backward_input=[2]",
                        "cost.backward_weight=[2]", "migration.max_fraction=1"});
    const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
    if (world_rank() != 0) continue;
    expect_single_rank_losses(deck, outcome, "decided " + execution);
    EXPECT_GT(moved(outcome.output_dir, 0).helper_ops, 0) << "no migration was decided (" << execution << ")";
  }
}

}  // namespace

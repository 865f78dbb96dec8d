// Computation migration on the cpu backend moves real slices (the MLP column groups and the attention head groups of
// F, B, W and BW, both halves; the LM head's vocabulary groups of F, B and BW) and never changes the math: with forced
// patterns (migration.force) and with decided migrations under a straggler and jitter, losses equal single-rank
// training bit for bit, for several schedule families, strict and readiness, at the pipeline size this binary runs
// with. The trace shows the slices did move (owner rows with migrated slices, HELP_F / HELP_B / HELP_W / HELP_BW rows
// on the helper, one per request: a BW's B half asks per layer as a B does, then its W half once), so a run where
// nothing moved, or where a BW moved only its W half, cannot pass.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <map>
#include <string>
#include <tuple>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/model/checkpoint.hpp"
#include "conductor/model/reference.hpp"
#include "conductor/model/stage.hpp"
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

// Every rank gives `slices` slices of its ops of `kinds` (W and BW unless said) to the next rank.
std::string ring_pattern(int slices, const std::string& kinds = "W,BW") {
  const int p = world_size();
  std::string list = "migration.force=[";
  for (int r = 0; r < p; ++r) {
    // Appended piece by piece: GCC 12's -Wrestrict misfires on a chain of std::string operator+ here.
    if (r > 0) list += ',';
    list += '"';
    list += std::to_string(r);
    list += "->";
    list += std::to_string((r + 1) % p);
    list += ':';
    list += kinds;
    list += ':';
    list += std::to_string(slices);
    list += '"';
  }
  return list + "]";
}

struct Moved {
  int owner_ops = 0;                           // owner rows with slices sent away
  int helper_ops = 0;                          // HELP_W / HELP_BW rows
  int owner_f = 0, owner_b = 0, owner_bw = 0;  // owner F / B / BW rows with slices sent away
  int help_f = 0, help_b = 0;                  // HELP_F / HELP_B rows (one per layer)
  int help_w = 0, help_bw = 0;                 // HELP_W rows (one per op), HELP_BW rows (per layer, then one)
  std::map<std::tuple<int, int, int, int>, int> bw_requests;  // HELP_BW rows per (step, owner, chunk, microbatch)
  bool helpers_right = true;
};

Moved moved(const std::string& dir, int forced_shift) {
  Moved m;
  const trace::Trace t = trace::read_trace((std::filesystem::path(dir) / "trace.h5").string());
  for (const trace::OpEvent& e : t.events) {
    const bool help_fb = e.kind == trace::EventKind::HELP_F || e.kind == trace::EventKind::HELP_B;
    if (e.kind == trace::EventKind::HELP_W || e.kind == trace::EventKind::HELP_BW || help_fb) {
      if (help_fb) {
        ++(e.kind == trace::EventKind::HELP_F ? m.help_f : m.help_b);
      } else {
        ++m.helper_ops;
        ++(e.kind == trace::EventKind::HELP_W ? m.help_w : m.help_bw);
      }
      if (e.kind == trace::EventKind::HELP_BW) ++m.bw_requests[{e.step, e.peer, e.chunk, e.microbatch}];
      if (forced_shift > 0 && e.rank != (e.peer + forced_shift) % world_size()) m.helpers_right = false;
    } else if (e.migrated > 0) {
      ++m.owner_ops;
      if (e.kind == trace::EventKind::F) ++m.owner_f;
      if (e.kind == trace::EventKind::B) ++m.owner_b;
      if (e.kind == trace::EventKind::BW) ++m.owner_bw;
    }
  }
  return m;
}

// The final weights of a run (its checkpoint under `dir`) equal those of single-rank training of the same deck,
// bit for bit (rank 0 reads both).
void expect_single_rank_weights(config::Deck deck, const std::string& dir, const std::string& what) {
  const std::string ref_dir = dir + "-reference";
  std::filesystem::remove_all(ref_dir);
  deck.checkpoint.path = ref_dir;
  const plan::Plan plan = config::resolve(deck);
  model::train_reference(plan);
  const int stages = deck.parallel.pipeline * deck.parallel.virtual_chunks;
  std::vector<int> all(static_cast<std::size_t>(stages));
  for (int vs = 0; vs < stages; ++vs) all[static_cast<std::size_t>(vs)] = vs;
  model::StageModel run(plan, all, stages), ref(plan, all, stages);
  run.load_checkpoint(model::resolve_checkpoint(dir));
  ref.load_checkpoint(model::resolve_checkpoint(ref_dir));
  for (int vs = 0; vs < stages; ++vs) {
    EXPECT_EQ(run.read(vs, model::Buffer::Params), ref.read(vs, model::Buffer::Params)) << what << " vstage " << vs;
  }
  // The next case's run starts without a checkpoint of this one to read by mistake, and none is left behind.
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(ref_dir);
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
  // Every W and BW of every rank moved (3 steps, 2p microbatches, v chunks per rank): a W in one request, a BW's B
  // half in one per layer (2p layers over p v chunks) and then its W half in one.
  const int v = deck.parallel.virtual_chunks, ops = 3 * 2 * world_size() * world_size() * v, layers = 2 / v;
  const int bw = kind == "zb-h1" ? 0 : ops;
  EXPECT_EQ(m.owner_ops, ops) << kind;
  EXPECT_EQ(m.owner_bw, bw) << kind;
  EXPECT_EQ(m.help_w, ops - bw) << kind;
  EXPECT_EQ(m.help_bw, bw * (layers + 1)) << kind;
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

// F and B move too: every op of every rank gives 2 of 4 MLP groups of every layer to the next rank (F and B one
// request per layer, W one per op, BW one per layer for its B half and one for its W half), and losses and final
// weights equal single-rank training of the same deck (migration on with the same 4 groups: the MLP summed group by
// group) bit for bit.
class ForcedFBMigration : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(ForcedFBMigration, MatchesSingleRank) {
  const auto& [kind, execution] = GetParam();
  const std::string ckpt =
      (std::filesystem::temp_directory_path() / ("conductor-migfb-ckpt-" + std::to_string(world_size()))).string();
  const config::Deck deck = migration_deck(kind, execution, {ring_pattern(2, "F,B,W,BW"), "checkpoint.path=" + ckpt});
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  expect_single_rank_losses(deck, outcome, kind + " " + execution);
  expect_single_rank_weights(deck, ckpt, kind + " " + execution);
  const Moved m = moved(outcome.output_dir, 1);
  // 3 steps, 2p microbatches per chunk, v chunks per rank, p ranks; every F and B moved, on the helper one row per
  // layer (2p layers over p v chunks).
  const int v = deck.parallel.virtual_chunks, p = world_size(), ops = 3 * 2 * p * v * p, layers = 2 / v;
  EXPECT_EQ(m.owner_f, ops) << kind;
  EXPECT_EQ(m.help_f, ops * layers) << kind;
  EXPECT_EQ(m.owner_b, kind == "zb-h1" ? ops : 0) << kind;
  EXPECT_EQ(m.help_b, m.owner_b * layers) << kind;
  EXPECT_EQ(m.owner_bw, kind == "zb-h1" ? 0 : ops) << kind;
  EXPECT_EQ(m.help_bw, m.owner_bw * (layers + 1)) << kind;  // its B half per layer, then its W half
  EXPECT_EQ(m.owner_ops, (kind == "zb-h1" ? 3 : 2) * ops) << kind;
  EXPECT_TRUE(m.helpers_right) << kind;
}

INSTANTIATE_TEST_SUITE_P(Families, ForcedFBMigration,
                         ::testing::Values(std::make_tuple("zb-h1", "strict"), std::make_tuple("zb-h1", "readiness"),
                                           std::make_tuple("1f1b", "strict"),
                                           std::make_tuple("1f1b-interleaved", "readiness")),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (auto& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// A (units, kind, execution) case's test name: "mlp,heads", "zb-h1", "strict" -> mlp_heads_zb_h1_strict.
std::string units_kind_execution(
    const ::testing::TestParamInfo<std::tuple<std::string, std::string, std::string>>& info) {
  std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" + std::get<2>(info.param);
  for (auto& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// Attention head groups move (unit heads, alone or with the MLP's): every op of every rank gives 2 of 4 head groups
// (one head each; 4 heads here) of every layer to the next rank (F and B one request per layer and unit, W one per
// op, BW its B half's and one for its W half), and losses and final weights equal single-rank training of the same deck
// (migration on with the same units: the attention summed head group by head group) bit for bit.
class ForcedHeadsMigration : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {};

TEST_P(ForcedHeadsMigration, MatchesSingleRank) {
  const auto& [units, kind, execution] = GetParam();
  const std::string what = units + " " + kind + " " + execution;
  const std::string ckpt =
      (std::filesystem::temp_directory_path() / ("conductor-migheads-ckpt-" + std::to_string(world_size()))).string();
  const config::Deck deck = migration_deck(
      kind, execution,
      {"model.n_heads=4", "migration.units=[" + units + "]", ring_pattern(2, "F,B,W,BW"), "checkpoint.path=" + ckpt});
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  expect_single_rank_losses(deck, outcome, what);
  expect_single_rank_weights(deck, ckpt, what);
  const Moved m = moved(outcome.output_dir, 1);
  // 3 steps, 2p microbatches per chunk, v chunks per rank, p ranks; every op moved, on the helper one F / B row per
  // layer and unit (2p layers over p v chunks), one W row per op, and per BW its B half's rows and one.
  const int v = deck.parallel.virtual_chunks, p = world_size(), ops = 3 * 2 * p * v * p, layers = 2 / v;
  const int per_layer = units == "heads" ? 1 : 2;
  const int owner_b = kind == "zb-h1" ? ops : 0;
  EXPECT_EQ(m.owner_f, ops) << what;
  EXPECT_EQ(m.help_f, ops * layers * per_layer) << what;
  EXPECT_EQ(m.owner_b, owner_b) << what;
  EXPECT_EQ(m.help_b, owner_b * layers * per_layer) << what;
  EXPECT_EQ(m.owner_ops, (kind == "zb-h1" ? 3 : 2) * ops) << what;
  EXPECT_EQ(m.owner_bw, ops - owner_b) << what;
  EXPECT_EQ(m.help_w, owner_b) << what;
  EXPECT_EQ(m.help_bw, m.owner_bw * (layers * per_layer + 1)) << what;
  EXPECT_TRUE(m.helpers_right) << what;
}

INSTANTIATE_TEST_SUITE_P(Units, ForcedHeadsMigration,
                         ::testing::Values(std::make_tuple("heads", "zb-h1", "strict"),
                                           std::make_tuple("heads", "1f1b", "readiness"),
                                           std::make_tuple("mlp,heads", "zb-h1", "readiness"),
                                           std::make_tuple("mlp,heads", "1f1b-interleaved", "strict")),
                         units_kind_execution);

// The LM head's vocabulary groups move (unit vocab, alone or with the MLP's): every op of every rank gives 2 of 4
// groups to the next rank; the last stage's F and B send one LM-head request each (the hidden state out, the
// vocabulary-parallel loss's statistics or the hidden state's gradient back), and losses and final weights equal
// single-rank training of the same deck (migration on, the loss computed group by group) bit for bit. With vocab
// alone only the last stage's ops have slices to give (its W one request with the LM head's part; its BW the B half's
// LM-head request and then that one).
class ForcedVocabMigration : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {};

TEST_P(ForcedVocabMigration, MatchesSingleRank) {
  const auto& [units, kind, execution] = GetParam();
  const std::string what = units + " " + kind + " " + execution;
  const std::string ckpt =
      (std::filesystem::temp_directory_path() / ("conductor-migvocab-ckpt-" + std::to_string(world_size()))).string();
  const config::Deck deck = migration_deck(
      kind, execution, {"migration.units=[" + units + "]", ring_pattern(2, "F,B,W,BW"), "checkpoint.path=" + ckpt});
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  expect_single_rank_losses(deck, outcome, what);
  expect_single_rank_weights(deck, ckpt, what);
  const Moved m = moved(outcome.output_dir, 1);
  // 3 steps, 2p microbatches per chunk, v chunks per rank, p ranks; the last stage's F and B (1f1b's: its BW's B
  // half) have one LM-head request more than their layers' (2p layers over p v chunks).
  const int v = deck.parallel.virtual_chunks, p = world_size(), ops = 3 * 2 * p * v * p, layers = 2 / v;
  const int head_ops = 3 * 2 * p;  // the last stage's F (or B)
  const bool mlp = units != "vocab", zb = kind == "zb-h1";
  EXPECT_EQ(m.owner_f, mlp ? ops : head_ops) << what;
  EXPECT_EQ(m.help_f, (mlp ? ops * layers : 0) + head_ops) << what;
  EXPECT_EQ(m.owner_b, zb ? (mlp ? ops : head_ops) : 0) << what;
  EXPECT_EQ(m.help_b, zb ? (mlp ? ops * layers : 0) + head_ops : 0) << what;
  EXPECT_EQ(m.owner_bw, zb ? 0 : (mlp ? ops : head_ops)) << what;
  EXPECT_EQ(m.help_w, zb ? (mlp ? ops : head_ops) : 0) << what;
  // A BW: its layers' B requests, the LM head's (last stage), its W half's.
  EXPECT_EQ(m.help_bw, zb ? 0 : m.owner_bw * ((mlp ? layers : 0) + 1) + head_ops) << what;
  EXPECT_TRUE(m.helpers_right) << what;
}

INSTANTIATE_TEST_SUITE_P(Units, ForcedVocabMigration,
                         ::testing::Values(std::make_tuple("vocab", "zb-h1", "strict"),
                                           std::make_tuple("vocab", "1f1b", "readiness"),
                                           std::make_tuple("mlp,vocab", "zb-h1", "readiness"),
                                           std::make_tuple("mlp,vocab", "1f1b-interleaved", "strict")),
                         units_kind_execution);

// Every slice moved (slices = migration.slices, max_fraction 1): the owner computes no group of its own, and losses
// equal single-rank training's; every kind of help ran.
void expect_every_slice_moved(const config::Deck& deck, const std::string& what) {
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  expect_single_rank_losses(deck, outcome, what);
  const Moved m = moved(outcome.output_dir, 1);
  EXPECT_GT(m.helper_ops, 0) << what;
  EXPECT_GT(m.help_f, 0) << what;
  EXPECT_GT(m.help_b, 0) << what;
}

// A stage of 0 layers (layers_per_stage allows it) has no layer W to give: its forced W moves nothing, and the
// run still equals single-rank training. Before, it sent a W request of 0 floats and the helper's
// "weight-gradient input of 0 floats is not a whole number of layers" ended the job with exit 1.
TEST(ForcedMigration, StageWithoutLayersGivesNoW) {
  const int p = world_size();
  std::string split = "model.layers_per_stage=[0";
  for (int r = 1; r < p; ++r) split += ",2";
  split += "]";
  const config::Deck deck =
      migration_deck("zb-h1", "strict", {"model.n_layers=" + std::to_string(2 * (p - 1)), split, ring_pattern(2)});
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  expect_single_rank_losses(deck, outcome, "a stage of 0 layers");
}

// The MLP's column groups.
TEST(ForcedMigrationAllSlices, MatchesSingleRank) {
  expect_every_slice_moved(migration_deck("zb-h1", "strict", {ring_pattern(4, "F,B,W,BW"), "migration.max_fraction=1"}),
                           "all slices");
}

// Every head group and MLP group.
TEST(ForcedHeadsMigrationAllSlices, MatchesSingleRank) {
  expect_every_slice_moved(migration_deck("zb-h1", "readiness",
                                          {"model.n_heads=4", "migration.units=[mlp,heads]",
                                           ring_pattern(4, "F,B,W,BW"), "migration.max_fraction=1"}),
                           "all head and MLP groups");
}

// Decided migrations: rank 0 is a straggler (its ops take 3x their cost-model time, injected as real delays),
// the others jitter; the decision (sched::Migration::decide, as in the emulated runtime) moves slices of its F,
// B, W and BW ops to idle peers.
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
    const Moved m = moved(outcome.output_dir, 0);
    EXPECT_GT(m.helper_ops + m.help_f + m.help_b, 0) << "no migration was decided (" << execution << ")";
    EXPECT_GT(m.help_f + m.help_b, 0) << "no F or B migration was decided (" << execution << ")";
  }
}

// A schedule of fused BW ops (1f1b), decided: rank 0 is a 3x straggler, the others jitter. Every BW that gives
// slices gives them in both halves: on its helper one HELP_BW row per layer (2 here) for its B half, then one for its
// W half.
TEST(DecidedMigration, FusedBackwardStragglerMatchesSingleRank) {
  const config::Deck deck =
      migration_deck("1f1b", "readiness",
                     {"run.steps=4", "noise.kind=[gaussian,straggler]", "noise.level=0.2", "noise.straggler_rank=0",
                      "noise.straggler_factor=3", "cost.forward=[2]", "cost.backward_input=[2]",
                      "cost.backward_weight=[2]", "migration.max_fraction=1"});
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  expect_single_rank_losses(deck, outcome, "decided, 1f1b");
  const Moved m = moved(outcome.output_dir, 0);
  EXPECT_GT(m.owner_bw, 0) << "no BW migration was decided";
  EXPECT_EQ(static_cast<int>(m.bw_requests.size()), m.owner_bw);
  for (const auto& [op, requests] : m.bw_requests) {
    EXPECT_EQ(requests, 3) << "step " << std::get<0>(op) << " owner " << std::get<1>(op) << " microbatch "
                           << std::get<3>(op);
  }
}

// The same with the attention head groups moving too (units mlp and heads, readiness).
TEST(DecidedMigration, HeadsStragglerMatchesSingleRank) {
  const config::Deck deck = migration_deck(
      "zb-h1", "readiness",
      {"model.n_heads=4", "migration.units=[mlp,heads]", "run.steps=4", "noise.kind=[gaussian,straggler]",
       "noise.level=0.2", "noise.straggler_rank=0", "noise.straggler_factor=3", "cost.forward=[2]",
       "cost.backward_input=[2]", "cost.backward_weight=[2]", "migration.max_fraction=1"});
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  expect_single_rank_losses(deck, outcome, "decided, heads");
  const Moved m = moved(outcome.output_dir, 0);
  EXPECT_GT(m.helper_ops + m.help_f + m.help_b, 0) << "no migration was decided";
}

// The LM head's vocabulary groups alone (units [vocab]), decided: the last stage is a 3x straggler, the others
// jitter; only its ops have slices to give, and they do.
TEST(DecidedMigration, VocabStragglerOnTheLastStageMatchesSingleRank) {
  const config::Deck deck = migration_deck(
      "zb-h1", "readiness",
      {"migration.units=[vocab]", "run.steps=4", "noise.kind=[gaussian,straggler]", "noise.level=0.2",
       "noise.straggler_rank=" + std::to_string(world_size() - 1), "noise.straggler_factor=3", "cost.forward=[2]",
       "cost.backward_input=[2]", "cost.backward_weight=[2]", "migration.max_fraction=1"});
  const runtime::RunOutcome outcome = runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  expect_single_rank_losses(deck, outcome, "decided, vocab");
  const Moved m = moved(outcome.output_dir, 0);
  EXPECT_GT(m.help_f + m.help_b, 0) << "no LM-head migration of F or B was decided";
}

}  // namespace

// Real tokenized data and the validation loss under the same-math rule: training on an llm.c shard set or a
// Megatron dataset, pipelined over this binary's rank count, gives the single-rank losses and validation losses
// bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/model/reference.hpp"
#include "conductor/runtime/training.hpp"
#include "mpi_world.hpp"
#include "tiny_deck.hpp"
#include "token_file_writers.hpp"

using namespace conductor;

namespace {

using conductor::test_support::world_rank;
using conductor::test_support::world_size;

// A corpus with learnable structure: each token mostly follows from the previous one.
std::vector<int> corpus(int n, int vocab, unsigned seed) {
  std::vector<int> t(static_cast<std::size_t>(n));
  unsigned x = seed;
  int cur = 1;
  for (int i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    cur = (x >> 16) % 8 == 0 ? static_cast<int>((x >> 8) % vocab) : (cur * 7 + 3) % vocab;
    t[static_cast<std::size_t>(i)] = cur;
  }
  return t;
}

// Rank 0 writes the files; every rank reads them after the barrier.
std::string data_dir() {
  const auto dir = std::filesystem::temp_directory_path() / ("conductor-data-eq-" + std::to_string(world_size()));
  if (world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    using namespace token_files_test;
    write_llmc((dir / "shard_train_000.bin").string(), corpus(3000, 300, 1));
    write_llmc((dir / "shard_train_001.bin").string(), corpus(2000, 300, 2));
    write_llmc((dir / "shard_val_000.bin").string(), corpus(1500, 300, 3));
    std::vector<std::vector<int>> docs;
    for (unsigned d = 0; d < 60; d++) docs.push_back(corpus(50 + static_cast<int>(d % 7) * 10, 300, 10 + d));
    write_megatron((dir / "corpus_text_document").string(), docs);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir.string();
}

config::Deck deck(const std::string& kind, const std::vector<std::string>& data) {
  const int v = kind == "zb-v" ? 2 : 1;
  std::vector<std::string> o = {"model.vocab=300", "run.steps=4", "schedule.kind=" + kind, "eval.every=2",
                                "eval.batches=3"};
  o.insert(o.end(), data.begin(), data.end());
  return conductor::test_support::tiny_run_deck("data-run", v, o);
}

void expect_single_rank_bits(const config::Deck& d, const std::string& what) {
  const runtime::RunOutcome outcome = runtime::train(config::resolve(d), MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  std::vector<double> valid;
  const std::vector<double> reference = model::train_reference(config::resolve(d), -1, &valid);
  ASSERT_EQ(outcome.losses.size(), reference.size()) << what;
  for (std::size_t k = 0; k < reference.size(); ++k)
    EXPECT_EQ(outcome.losses[k], reference[k]) << what << " step " << k;
  ASSERT_EQ(outcome.valid_losses.size(), 2u) << what;  // after steps 2 and 4
  ASSERT_EQ(valid.size(), 2u) << what;
  for (std::size_t k = 0; k < valid.size(); ++k) {
    EXPECT_EQ(outcome.valid_losses[k].first, 2 * static_cast<int>(k) + 1) << what;
    EXPECT_EQ(outcome.valid_losses[k].second, valid[k]) << what << " evaluation " << k;
  }
  // summary.json carries them, steps counted from 1 as in the step lines.
  std::ifstream in(outcome.output_dir + "/summary.json");
  const nlohmann::json summary = nlohmann::json::parse(in);
  ASSERT_EQ(summary.at("valid_losses").size(), 2u) << what;
  EXPECT_EQ(summary["valid_losses"][1]["step"].get<int>(), 4) << what;
  EXPECT_EQ(summary["final_valid_loss"].get<double>(), valid[1]) << what;
  EXPECT_NE(outcome.losses.front(), outcome.losses.back()) << what;  // training happened
  EXPECT_NE(valid[1], valid[0]) << what;                             // and the evaluations saw the change
}

}  // namespace

TEST(DataEquality, LlmcShardsMatchSingleRank) {
  const std::string dir = data_dir();
  for (const std::string kind : {"1f1b", "zb-v"}) {
    expect_single_rank_bits(deck(kind, {"data.source=llmc", "data.path=" + dir + "/shard_train_*.bin",
                                        "data.valid_path=" + dir + "/shard_val_*.bin"}),
                            "llmc " + kind);
  }
}

TEST(DataEquality, MegatronDatasetMatchesSingleRank) {
  const std::string dir = data_dir();
  for (const std::string kind : {"zb-h1", "zb-v"}) {
    expect_single_rank_bits(
        deck(kind, {"data.source=megatron", "data.path=" + dir + "/corpus_text_document", "data.valid_fraction=0.2"}),
        "megatron " + kind);
  }
}

TEST(DataEquality, SyntheticValidationMatchesSingleRank) { expect_single_rank_bits(deck("1f1b", {}), "synthetic"); }

// HDF5 checkpoints: restart is bit-identical; a checkpoint of another shape or split is refused clearly.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "conductor/config/resolve.hpp"
#include "conductor/model/reference.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/error.hpp"
#include "model_test_util.hpp"

using namespace conductor;
using namespace conductor::model;
using namespace model_test;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = testing::TempDir() + "conductor_ckpt_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

config::Deck restart_deck() {
  auto d = tiny_deck();
  d.parallel.pipeline = 2;  // two virtual stages, two files
  d.run.steps = 6;
  d.optim.warmup_steps = 2;
  d.optim.lr = 1e-2;
  return d;
}

}  // namespace

// N steps straight == k steps, checkpoint, a new process-like restart from the files, N - k steps: bit for bit.
TEST(Checkpoint, RestartIsBitIdentical) {
  const int N = 6, k = 2;
  auto straight = restart_deck();
  straight.checkpoint.path = fresh_dir("straight");
  const std::vector<double> all = train_reference(config::resolve(straight));
  ASSERT_EQ(all.size(), static_cast<std::size_t>(N));

  auto first = restart_deck();
  first.checkpoint.path = fresh_dir("first");
  first.checkpoint.every = 100;  // only the final (step k) checkpoint is written
  const std::vector<double> head = train_reference(config::resolve(first), k);
  ASSERT_EQ(head.size(), static_cast<std::size_t>(k));

  auto second = restart_deck();
  second.checkpoint.resume = first.checkpoint.path;
  second.checkpoint.path = fresh_dir("second");
  const std::vector<double> tail = train_reference(config::resolve(second));
  ASSERT_EQ(tail.size(), static_cast<std::size_t>(N - k));

  for (int i = 0; i < N; i++) {
    const double resumed = i < k ? head[i] : tail[i - k];
    EXPECT_EQ(std::memcmp(&all[i], &resumed, sizeof(double)), 0) << "step " << i << ": " << all[i] << " vs " << resumed;
  }
  // Final weights and AdamW moments, loaded back from both final checkpoints, are identical.
  StageModel a(config::resolve(straight), {0, 1}, 2), b(config::resolve(straight), {0, 1}, 2);
  EXPECT_EQ(a.load_checkpoint(straight.checkpoint.path), N);
  EXPECT_EQ(b.load_checkpoint(second.checkpoint.path), N);
  for (int vs : {0, 1}) {
    for (Buffer w : {Buffer::Params, Buffer::AdamM, Buffer::AdamV}) {
      const auto x = a.read(vs, w), y = b.read(vs, w);
      ASSERT_EQ(x.size(), y.size());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << "vstage " << vs;
    }
  }
  // And they differ from the initialisation (training happened).
  StageModel init(config::resolve(straight), {0, 1}, 2);
  EXPECT_NE(init.read(0, Buffer::Params), a.read(0, Buffer::Params));
}

TEST(Checkpoint, WrongShapeIsRefusedNamingFileDatasetAndShapes) {
  auto deck = tiny_deck();
  const std::string dir = fresh_dir("shape");
  StageModel small(config::resolve(deck), {0}, 1);
  small.save_checkpoint(dir, 3);
  deck.model.d_model = 12;
  StageModel wide(config::resolve(deck), {0}, 1);
  try {
    wide.load_checkpoint(dir);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(StageModel::checkpoint_file(dir, 0)), std::string::npos) << msg;
    EXPECT_NE(msg.find("/params/wte"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[13, 8]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[13, 12]"), std::string::npos) << msg;
  }
}

TEST(Checkpoint, OtherSplitMissingFilesAndOtherSeedAreRefused) {
  auto deck = tiny_deck();
  const std::string dir = fresh_dir("split");
  StageModel one(config::resolve(deck), {0}, 1);
  one.save_checkpoint(dir, 1);
  auto two_deck = deck;
  two_deck.parallel.pipeline = 2;
  StageModel two(config::resolve(two_deck), {0}, 2);
  try {
    two.load_checkpoint(dir);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("virtual-stage split"), std::string::npos) << e.what();
  }
  StageModel last(config::resolve(two_deck), {1}, 2);
  EXPECT_THROW(last.load_checkpoint(dir), InputError);  // vstage_1.h5 does not exist
  auto seeded = deck;
  seeded.run.seed += 1;
  StageModel other(config::resolve(seeded), {0}, 1);
  try {
    other.load_checkpoint(dir);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("run.seed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(one.load_checkpoint(dir), 1);
}

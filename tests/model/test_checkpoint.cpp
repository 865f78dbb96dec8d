// HDF5 checkpoints: restart is bit-identical; a checkpoint of another shape or split is refused clearly; steps are
// atomic folders with a manifest, `latest` and checkpoint.keep; damaged or mixed files are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "conductor/config/resolve.hpp"
#include "conductor/model/checkpoint.hpp"
#include "conductor/model/reference.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/checksum.hpp"
#include "conductor/util/error.hpp"
#include "model_test_util.hpp"
#include "scratch_dir.hpp"

using namespace conductor;
using namespace conductor::model;
using namespace model_test;

namespace {

// Not made yet, in a folder of this process removed at exit.
std::string fresh_dir(const std::string& name) {
  static const test_support::ScratchDir scratch("conductor_ckpt");
  return (scratch / name).string();
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
  EXPECT_EQ(a.load_checkpoint(resolve_checkpoint(straight.checkpoint.path)), N);
  EXPECT_EQ(b.load_checkpoint(resolve_checkpoint(second.checkpoint.path)), N);
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
  const std::string root = fresh_dir("shape");
  StageModel small(config::resolve(deck), {0}, 1);
  write_checkpoint(small, root, 3, 2, 1, 1);
  const std::string dir = resolve_checkpoint(root);
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
  const std::string root = fresh_dir("split");
  StageModel one(config::resolve(deck), {0}, 1);
  write_checkpoint(one, root, 1, 2, 1, 1);
  const std::string dir = resolve_checkpoint(root);
  auto two_deck = deck;
  two_deck.parallel.pipeline = 2;
  StageModel two(config::resolve(two_deck), {0}, 2);
  try {
    two.load_checkpoint(dir);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("split into 1 virtual stage ("), std::string::npos) << e.what();
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

namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Steps 1..4 of a two-virtual-stage model under `root`, keeping `keep`.
config::Deck four_steps(const std::string& root, int keep) {
  auto deck = restart_deck();
  StageModel model(config::resolve(deck), {0, 1}, 2);
  for (int step = 1; step <= 4; step++) write_checkpoint(model, root, step, keep, 2, 1);
  return deck;
}

template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InputError";
  return "";
}

}  // namespace

TEST(CheckpointSteps, StepFoldersManifestLatestAndKeep) {
  const std::string root = fresh_dir("keep");
  four_steps(root, 2);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-000003", "step-000004"}));
  EXPECT_EQ(read_text(fs::path(root) / "latest"), "step-000004\n");
  const Manifest m = read_manifest(root + "/step-000004");
  EXPECT_EQ(m.step, 4);
  EXPECT_EQ(m.pipeline, 2);
  EXPECT_EQ(m.num_virtual_stages, 2);
  ASSERT_EQ(m.files.size(), 2u);
  for (const auto& f : m.files) {
    const auto bytes = util::read_file_bytes(root + "/step-000004/" + f.name);
    EXPECT_EQ(bytes.size(), f.bytes);
    EXPECT_EQ(util::crc32(bytes.data(), bytes.size()), f.crc32) << f.name;
  }
  const std::string all = fresh_dir("keep_all");
  four_steps(all, 0);
  EXPECT_TRUE(fs::is_directory(all + "/step-000001"));
}

TEST(CheckpointSteps, ResumeAcceptsRootOrStepFolder) {
  const std::string root = fresh_dir("resolve");
  const auto deck = four_steps(root, 2);
  EXPECT_EQ(resolve_checkpoint(root), root + "/step-000004");
  StageModel model(config::resolve(deck), {0, 1}, 2);
  EXPECT_EQ(model.load_checkpoint(resolve_checkpoint(root + "/step-000003")), 3);
  EXPECT_NE(input_error([&] { resolve_checkpoint(root + "/nope"); }).find("no such folder"), std::string::npos);
  // A file (a deck given by mistake) is said to be one, not "no such folder".
  EXPECT_NE(input_error([&] { resolve_checkpoint(root + "/latest"); }).find("a file, not a folder"), std::string::npos);
}

TEST(CheckpointSteps, FlippedBytesAreRefusedNamingTheFile) {
  const std::string root = fresh_dir("flip");
  const auto deck = four_steps(root, 2);
  const std::string file = root + "/step-000004/vstage_1.h5";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) / 2));
    f.put('\x5a');
  }
  StageModel model(config::resolve(deck), {0, 1}, 2);
  const std::string msg = input_error([&] { model.load_checkpoint(resolve_checkpoint(root)); });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("CRC-32"), std::string::npos) << msg;
}

TEST(CheckpointSteps, FileFromAnotherStepIsRefused) {
  const std::string root = fresh_dir("mixed");
  const auto deck = four_steps(root, 2);
  fs::copy_file(root + "/step-000003/vstage_1.h5", root + "/step-000004/vstage_1.h5",
                fs::copy_options::overwrite_existing);
  StageModel model(config::resolve(deck), {1}, 2);
  const std::string msg = input_error([&] { model.load_checkpoint(root + "/step-000004"); });
  EXPECT_NE(msg.find("step-000004/vstage_1.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("another step"), std::string::npos) << msg;
}

TEST(CheckpointSteps, MissingManifestIsRefused) {
  const std::string root = fresh_dir("nomanifest");
  const auto deck = four_steps(root, 2);
  fs::remove(root + "/step-000004/manifest.txt");
  EXPECT_NE(input_error([&] { resolve_checkpoint(root); }).find("no manifest.txt"), std::string::npos);
  StageModel model(config::resolve(deck), {0, 1}, 2);
  EXPECT_NE(input_error([&] { model.load_checkpoint(root + "/step-000004"); }).find("has no manifest.txt"),
            std::string::npos);
}

// An empty manifest said "line 0: empty file"; a folder where a listed file belongs said "is missing".
TEST(CheckpointSteps, EmptyManifestAndAFolderForAFileSaySo) {
  const std::string root = fresh_dir("emptymanifest");
  const auto deck = four_steps(root, 2);
  const std::string step = root + "/step-000004";
  std::ofstream(step + "/manifest.txt", std::ios::trunc).flush();
  EXPECT_EQ(input_error([&] { read_manifest(step); }),
            "checkpoint manifest '" + step +
                "/manifest.txt' is empty (a step written by conductor starts with 'conductor-checkpoint 1')");
  const std::string other = root + "/step-000003";
  fs::remove(other + "/vstage_1.h5");
  fs::create_directory(other + "/vstage_1.h5");
  StageModel model(config::resolve(deck), {0, 1}, 2);
  const std::string msg = input_error([&] { model.load_checkpoint(other); });
  EXPECT_NE(msg.find("checkpoint file '" + other + "/vstage_1.h5' is not a regular file (a folder?)"),
            std::string::npos)
      << msg;
}

// A manifest whose shape does not add up (an edit, or lines from two checkpoints) is refused naming it and the
// numbers, not resumed: pipeline x virtual must be virtual_stages, with one file line per virtual stage.
TEST(CheckpointSteps, InconsistentManifestIsRefused) {
  const std::string root = fresh_dir("inconsistent");
  four_steps(root, 2);
  const std::string step = root + "/step-000004", path = step + "/manifest.txt";
  const std::string good = read_text(path);
  const auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const std::size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    std::ofstream(path, std::ios::trunc) << text;
  };
  edited("\npipeline 2\n", "\npipeline 3\n");
  std::string msg = input_error([&] { read_manifest(step); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("pipeline 3 x virtual 1 != virtual_stages 2"), std::string::npos) << msg;
  const std::size_t second = good.find("\nfile vstage_1.h5");
  ASSERT_NE(second, std::string::npos);
  std::ofstream(path, std::ios::trunc) << good.substr(0, second + 1) + good.substr(good.find('\n', second + 1) + 1);
  msg = input_error([&] { read_manifest(step); });
  EXPECT_NE(msg.find("lists 1 file lines for virtual_stages 2"), std::string::npos) << msg;
  std::ofstream(path, std::ios::trunc) << good;
  EXPECT_EQ(read_manifest(step).num_virtual_stages, 2);
}

// A write that fails (here: the file is /dev/full) throws naming the file and the system's reason.
TEST(CheckpointSteps, FailedWriteNamesFileAndReason) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string dir = fresh_dir("full");
  fs::create_directories(dir);
  fs::create_symlink("/dev/full", dir + "/vstage_0.h5");
  auto deck = tiny_deck();
  StageModel model(config::resolve(deck), {0}, 1);
  try {
    model.save_checkpoint(dir, 7);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("checkpoint step 7"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir + "/vstage_0.h5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
  }
}

// A full disk at the new `latest` (after every file of the step is written) renamed the step into place and left
// `latest` on the step before: a complete step no pointer named, which a resume from the root wrote over. Now the
// step stays partial and is abandoned, `latest` unmoved, and the message names the step.
TEST(CheckpointSteps, FullDiskAtLatestCommitsNothing) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string root = fresh_dir("full_latest");
  const auto deck = four_steps(root, 2);
  fs::create_symlink("/dev/full", root + "/latest.tmp");
  StageModel model(config::resolve(deck), {0, 1}, 2);
  try {
    write_checkpoint(model, root, 5, 2, 2, 1);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("checkpoint step 5: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(root + "/latest.tmp"), std::string::npos) << msg;
    EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-000003", "step-000004"}));
  EXPECT_EQ(read_text(fs::path(root) / "latest"), "step-000004\n");
  write_checkpoint(model, root, 5, 2, 2, 1);  // room again: the step commits
  EXPECT_EQ(read_text(fs::path(root) / "latest"), "step-000005\n");
}

// The manifest records the data files the run read (size and CRC-32 of each); a path is the rest of its line,
// so spaces survive, and a newline or backslash is escaped. A manifest written before the record existed reads
// as data_recorded false (and resumes: the runtime warns).
TEST(CheckpointSteps, ManifestRecordsTheDataFiles) {
  const std::string root = fresh_dir("data_record");
  four_steps(root, 2);
  const std::string step = root + "/step-000004";
  Manifest synthetic = read_manifest(step);
  EXPECT_TRUE(synthetic.data_recorded);
  EXPECT_TRUE(synthetic.data.empty());
  EXPECT_NE(read_text(fs::path(step) / "manifest.txt").find("\ndata_files 0\n"), std::string::npos);

  Manifest m = synthetic;
  m.data = {{"/data/fine web/train_000.bin", 200001024, 0x1a2b3c4d}, {"odd\\name\nx.bin", 7, 0}};
  const std::string text = manifest_text(m);
  EXPECT_NE(text.find("data_files 2\ndata bytes 200001024 crc32 0x1a2b3c4d path /data/fine web/train_000.bin\n"
                      "data bytes 7 crc32 0x00000000 path odd\\\\name\\nx.bin\n"),
            std::string::npos)
      << text;
  {
    std::ofstream out(fs::path(step) / "manifest.txt", std::ios::trunc);
    out << text;
  }
  const Manifest back = read_manifest(step);
  ASSERT_EQ(back.data.size(), 2u);
  EXPECT_EQ(back.data[0].path, "/data/fine web/train_000.bin");
  EXPECT_EQ(back.data[0].bytes, 200001024u);
  EXPECT_EQ(back.data[0].crc32, 0x1a2b3c4du);
  EXPECT_EQ(back.data[1].path, "odd\\name\nx.bin");

  std::string old = text.substr(0, text.find("data_files"));
  {
    std::ofstream out(fs::path(step) / "manifest.txt", std::ios::trunc);
    out << old;
  }
  EXPECT_FALSE(read_manifest(step).data_recorded);
  {
    std::ofstream out(fs::path(step) / "manifest.txt", std::ios::trunc);
    out << old << "data_files 2\ndata bytes 7 crc32 0x00000000 path x.bin\n";
  }
  EXPECT_NE(input_error([&] { read_manifest(step); }).find("says data_files 2 but has 1 data lines"),
            std::string::npos);
  {
    std::ofstream out(fs::path(step) / "manifest.txt", std::ios::trunc);
    out << old << "data_files 1\ndata bytes 7 crc32 0x00000000 path\n";
  }
  EXPECT_NE(input_error([&] { read_manifest(step); }).find("expected 'data bytes N crc32 0xXXXXXXXX path PATH'"),
            std::string::npos);
}

// One data file's manifest line reads back as written, whatever its path holds (the run's cross-rank check of the
// data files sends the same lines).
TEST(CheckpointSteps, DataFileLineRoundTrips) {
  for (const std::string path : {"a.bin", "with space/b c.bin", "new\nline.bin", "back\\slash.bin", " lead"}) {
    const DataFileIdentity d{path, 123456789012ULL, 0xdeadbeefU};
    const std::string line = data_file_line(d);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    DataFileIdentity back;
    ASSERT_TRUE(parse_data_file_line(line, back)) << line;
    EXPECT_EQ(back.path, d.path);
    EXPECT_EQ(back.bytes, d.bytes);
    EXPECT_EQ(back.crc32, d.crc32);
  }
  DataFileIdentity back;
  EXPECT_FALSE(parse_data_file_line("data bytes 7 crc32 0x00000000 path", back));
  EXPECT_FALSE(parse_data_file_line("file a crc32 0x00000000 bytes 7", back));
}

TEST(CheckpointSteps, DataDifferencesNameTheFileAndWhatDiffers) {
  const std::vector<DataFileIdentity> then = {{"a.bin", 100, 1}, {"b.bin", 200, 2}, {"c.bin", 300, 3}};
  EXPECT_TRUE(data_differences(then, then).empty());
  const std::vector<DataFileIdentity> now = {{"a.bin", 100, 9}, {"b.bin", 50, 2}, {"d.bin", 10, 4}};
  EXPECT_EQ(data_differences(then, now),
            (std::vector<std::string>{
                "'a.bin' has other contents (CRC-32 0x00000009 now, 0x00000001 then, the same 100 bytes)",
                "'b.bin' has 50 bytes now, 200 then", "'d.bin' is new (not read by the checkpoint's run)",
                "'c.bin' is no longer read (300 bytes then)"}));
}

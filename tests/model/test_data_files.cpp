// Tokenized data on disk (llm.c shards, Megatron indexed datasets), the validation split and the validation loss.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "conductor/config/resolve.hpp"
#include "conductor/config/schema.hpp"
#include "conductor/model/reference.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/checksum.hpp"
#include "conductor/util/error.hpp"
#include "model_test_util.hpp"
#include "scratch_dir.hpp"
#include "token_file_writers.hpp"

using namespace conductor;
using namespace conductor::model;
using namespace token_files_test;

namespace {

// An empty folder in one of this process, removed at exit.
std::string temp_dir(const std::string& name) {
  static const test_support::ScratchDir scratch("conductor-data");
  const auto dir = scratch / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Token i of a corpus is its position (mod vocab), so a window shows where it came from.
std::vector<int> positions(int from, int n, int vocab) {
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; i++) t[static_cast<std::size_t>(i)] = (from + i) % vocab;
  return t;
}

config::Deck file_deck(const std::string& source, const std::string& path) {
  config::Deck deck = model_test::tiny_deck();
  deck.model.vocab = 4096;
  deck.data.source = source;
  deck.data.path = path;
  return deck;
}

// Every row (inputs then the last target) is seq_len + 1 consecutive positions; returns the rows' first tokens.
std::vector<int> row_starts(const std::vector<int>& in, const std::vector<int>& tg, int T) {
  std::vector<int> starts;
  for (std::size_t r = 0; r * T < in.size(); r++) {
    const int first = in[r * T];
    for (int t = 0; t < T; t++) {
      EXPECT_EQ(in[r * T + t], first + t) << "row " << r;
      EXPECT_EQ(tg[r * T + t], first + t + 1) << "row " << r;
    }
    starts.push_back(first);
  }
  return starts;
}

std::string error_of(const config::Deck& deck) {
  try {
    DataSource d(config::resolve(deck));
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(DataFiles, LlmcShardsAreReadAsWindowsInsideOneShard) {
  const std::string dir = temp_dir("llmc");
  write_llmc(dir + "/train_000.bin", positions(0, 200, 4096));
  write_llmc(dir + "/train_001.bin", positions(1000, 300, 4096));
  const config::Deck deck = file_deck("llmc", dir + "/train_*.bin");
  ASSERT_EQ(config::resolve(deck).data.train_files.size(), 2u);
  DataSource src(config::resolve(deck));
  std::vector<int> in, tg;
  bool first_shard = false, second_shard = false;
  for (int step = 0; step < 20; step++) {
    src.microbatch(step, 0, in, tg);
    for (int s : row_starts(in, tg, deck.model.seq_len)) {
      first_shard |= s + deck.model.seq_len < 200;
      second_shard |= s >= 1000 && s + deck.model.seq_len < 1300;
      EXPECT_TRUE(s + deck.model.seq_len < 200 || (s >= 1000 && s + deck.model.seq_len < 1300)) << s;
    }
  }
  EXPECT_TRUE(first_shard && second_shard);
}

TEST(DataFiles, MegatronDatasetIsOneTokenStream) {
  const std::string dir = temp_dir("megatron");
  // Documents of 7 tokens: windows of 7 cross document boundaries, as Megatron's GPT dataset does.
  std::vector<std::vector<int>> docs;
  for (int d = 0; d < 40; d++) docs.push_back(positions(7 * d, 7, 4096));
  write_megatron(dir + "/corpus_text_document", docs);
  for (const std::string& path : {dir + "/corpus_text_document", dir + "/corpus_text_document.idx", dir + "/corpus*"}) {
    const config::Deck deck = file_deck("megatron", path);
    ASSERT_EQ(config::resolve(deck).data.train_files, std::vector<std::string>{dir + "/corpus_text_document"}) << path;
    DataSource src(config::resolve(deck));
    std::vector<int> in, tg;
    src.microbatch(3, 1, in, tg);
    for (int s : row_starts(in, tg, deck.model.seq_len)) EXPECT_LE(s + deck.model.seq_len, 279);
  }
  write_megatron(dir + "/wide", docs, 4);  // int32 tokens
  DataSource wide(config::resolve(file_deck("megatron", dir + "/wide")));
  std::vector<int> in, tg;
  wide.microbatch(0, 0, in, tg);
  row_starts(in, tg, 6);
}

TEST(DataFiles, ValidFractionHoldsTheTailOutOfTraining) {
  const std::string dir = temp_dir("fraction");
  write_llmc(dir + "/a.bin", positions(0, 400, 4096));
  config::Deck deck = file_deck("llmc", dir + "/a.bin");
  deck.data.valid_fraction = 0.25;  // tokens 300..399
  DataSource src(config::resolve(deck));
  std::vector<int> in, tg;
  const int T = deck.model.seq_len;
  for (int step = 0; step < 30; step++) {
    src.microbatch(step, step % 3, in, tg);
    for (int s : row_starts(in, tg, T)) EXPECT_LE(s + T, 299) << "a training row reaches the held-out tail";
  }
  std::vector<int> starts;
  for (int b = 0; b < 3; b++) {
    src.valid_microbatch(b, in, tg);
    for (int s : row_starts(in, tg, T)) starts.push_back(s);
  }
  // Consecutive windows of the tail, stride seq_len, the same at every call.
  for (std::size_t k = 0; k < starts.size(); k++) EXPECT_EQ(starts[k], 300 + static_cast<int>(k) * T);
  std::vector<int> again, tg2;
  src.valid_microbatch(1, again, tg2);
  src.valid_microbatch(1, in, tg);
  EXPECT_EQ(again, in);
}

TEST(DataFiles, TokenIdsMustBeBelowVocab) {
  const std::string dir = temp_dir("vocab");
  std::vector<int> tokens = positions(0, 100, 50);
  tokens[77] = 50256;
  write_llmc(dir + "/a.bin", tokens);
  config::Deck deck = file_deck("llmc", dir + "/a.bin");
  deck.model.vocab = 50000;
  const std::string e = error_of(deck);
  EXPECT_TRUE(has(e, "data.path: '" + dir + "/a.bin' holds token id 50256 (token 77 of the file)")) << e;
  EXPECT_TRUE(has(e, "model.vocab = 50000")) << e;
  deck.model.vocab = 50257;
  EXPECT_EQ(error_of(deck), "(no error)");
  // The validation files are checked too, under their own key.
  write_llmc(dir + "/ok.bin", positions(0, 100, 50));
  deck.data.path = dir + "/ok.bin";
  deck.data.valid_path = dir + "/a.bin";
  deck.model.vocab = 60;
  EXPECT_TRUE(has(error_of(deck), "data.valid_path: '" + dir + "/a.bin' holds token id 50256")) << error_of(deck);
  // So is a header error (before, it named the file alone, so a shard in both globs read as a training file's).
  std::ofstream(dir + "/short.bin") << "not a shard";
  deck.data.valid_path = dir + "/short.bin";
  EXPECT_TRUE(has(error_of(deck), "data.valid_path: '" + dir + "/short.bin' is 11 bytes, shorter than the"))
      << error_of(deck);
}

TEST(DataFiles, BadLlmcShardsNameFileAndExpectation) {
  const std::string dir = temp_dir("bad-llmc");
  const std::string f = dir + "/a.bin";
  const config::Deck deck = file_deck("llmc", f);
  write_llmc(f, positions(0, 100, 50), 12345);
  EXPECT_TRUE(has(error_of(deck), "'" + f + "' is not an llm.c token shard: header magic 12345, expected 20240520"))
      << error_of(deck);
  write_llmc(f, positions(0, 100, 50), 20240520, 2);
  EXPECT_TRUE(has(error_of(deck), "'" + f + "': llm.c header version 2 with magic 20240520, expected version 1"))
      << error_of(deck);
  write_llmc(f, positions(0, 100, 50));
  truncate_to(f, 1024 + 150);
  EXPECT_TRUE(has(error_of(deck), "'" + f +
                                      "': the llm.c header says 100 tokens of 2 bytes (1224 bytes with the "
                                      "header) but the file has 1174 bytes"))
      << error_of(deck);
  truncate_to(f, 100);
  EXPECT_TRUE(has(error_of(deck), "'" + f + "' is 100 bytes, shorter than the 1024-byte header")) << error_of(deck);
  write_llmc(f, positions(0, 5, 50));
  EXPECT_TRUE(has(error_of(deck), "data.path: '" + f + "' holds no window of model.seq_len + 1 = 7 tokens"))
      << error_of(deck);
}

TEST(DataFiles, BadMegatronDatasetsNameFileAndExpectation) {
  const std::string dir = temp_dir("bad-megatron");
  const std::string p = dir + "/d";
  const config::Deck deck = file_deck("megatron", p);
  const std::vector<std::vector<int>> docs = {positions(0, 30, 50), positions(30, 20, 50)};
  write_megatron(p, docs);
  ASSERT_EQ(error_of(deck), "(no error)");
  patch(p + ".idx", 0, "MMIDIDY");
  EXPECT_TRUE(has(error_of(deck), "'" + p +
                                      ".idx' is not a Megatron indexed-dataset index: it starts with "
                                      "\"MMIDIDY\\x00\\x00\", expected \"MMIDIDX\\x00\\x00\""))
      << error_of(deck);
  write_megatron(p, docs);
  patch(p + ".idx", 9, std::string("\x02", 1));
  EXPECT_TRUE(has(error_of(deck), "'" + p + ".idx': index version 2, expected 1")) << error_of(deck);
  write_megatron(p, docs);
  patch(p + ".idx", 17, std::string("\x07", 1));
  EXPECT_TRUE(has(error_of(deck), "'" + p + ".idx': token dtype code 7 is not an integer type")) << error_of(deck);
  write_megatron(p, docs);
  truncate_to(p + ".idx", 40);
  EXPECT_TRUE(has(error_of(deck), "'" + p +
                                      ".idx': the header says 2 sequences and 3 document indices, which need "
                                      "82 bytes, but the file has 40"))
      << error_of(deck);
  write_megatron(p, docs);
  truncate_to(p + ".bin", 90);
  EXPECT_TRUE(has(error_of(deck), "'" + p + ".bin' has 90 bytes but '" + p + ".idx' describes 50 tokens of 2 bytes"))
      << error_of(deck);
  write_megatron(p, docs);
  patch(p + ".idx", 34 + 8 + 8, std::string("\x10\0\0\0\0\0\0\0", 8));  // the second sequence's pointer
  EXPECT_TRUE(has(error_of(deck), "data.path: '" + p +
                                      ".idx': sequence 1 starts at byte 16, but sequence 0 (30 tokens from byte 0) "
                                      "ends at byte 60 (sequences stored back to back, as Megatron's builder writes "
                                      "them: that size or this pointer is wrong)"))
      << error_of(deck);
  write_megatron(p, docs);
  patch(p + ".idx", 34, std::string("\x1f", 1));  // the first sequence's size: 31, so the second starts late
  EXPECT_TRUE(has(error_of(deck), "'" + p +
                                      ".idx': sequence 1 starts at byte 60, but sequence 0 (31 tokens from "
                                      "byte 0) ends at byte 62"))
      << error_of(deck);
  write_megatron(p, docs);
  patch(p + ".idx", 34 + 8, std::string("\x02", 1));  // the first sequence's pointer
  EXPECT_TRUE(has(error_of(deck), "'" + p +
                                      ".idx': sequence 0 starts at byte 2, but the first sequence starts at "
                                      "byte 0 (sequences stored back to back, as Megatron's builder writes "
                                      "them: its pointer is wrong)"))
      << error_of(deck);
  write_megatron(p, docs);
  patch(p + ".idx", 26, std::string("\0", 1));  // no document index
  EXPECT_TRUE(has(error_of(deck), "'" + p +
                                      ".idx': the header says 2 sequences and 0 document indices; an index "
                                      "lists at least the first document's start (0)"))
      << error_of(deck);
  write_megatron(p, docs);
  patch(p + ".idx", 34 + 24 + 16, std::string("\x01", 1));  // the last document index
  EXPECT_TRUE(has(error_of(deck), "'" + p + ".idx': document index 2 is 1; the document indices must rise from 0"))
      << error_of(deck);
  write_megatron(p, docs);
  std::filesystem::remove(p + ".bin");
  EXPECT_TRUE(has(error_of(deck), "cannot open '" + p + ".bin'")) << error_of(deck);
}

TEST(DataFiles, DeckChecksPathsAndValidationData) {
  const std::string dir = temp_dir("deck");
  write_llmc(dir + "/a.bin", positions(0, 100, 50));
  const auto problems = [](const std::vector<std::string>& overrides) {
    config::LoadOptions o;
    o.command = config::Command::Validate;
    o.source_name = "deck.yaml";
    o.overrides = overrides;
    try {
      config::parse_deck("", o);
    } catch (const DeckError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_TRUE(has(problems({"data.source=llmc", "data.path=" + dir + "/nothing_*.bin"}),
                  "data.path = '" + dir + "/nothing_*.bin' matches no file (llm.c token shards)"));
  EXPECT_TRUE(has(problems({"data.source=megatron", "data.path=" + dir + "/nothing"}),
                  "data.path = '" + dir + "/nothing' matches no Megatron dataset (PREFIX.idx + PREFIX.bin)"));
  // a.bin without a.idx: the prefix's missing index is named.
  EXPECT_TRUE(has(problems({"data.source=megatron", "data.path=" + dir + "/a"}), "names '" + dir + "/a.idx', "));
  EXPECT_TRUE(has(problems({"data.source=llmc", "data.path=" + dir + "/a.bin", "eval.every=5"}),
                  "eval.every = 5 needs validation data: set data.valid_path or data.valid_fraction"));
  EXPECT_TRUE(has(problems({"data.valid_path=" + dir + "/a.bin"}),
                  "data.valid_path = '" + dir + "/a.bin' is set but data.source = 'synthetic' does not read it"));
  EXPECT_EQ(problems({"data.source=llmc", "data.path=" + dir + "/a.bin", "eval.every=5", "data.valid_fraction=0.1"}),
            "(no error)");
  EXPECT_EQ(problems({"eval.every=5"}), "(no error)");  // synthetic data has its own validation stream
}

// The validation loss is a forward pass only: training is bit-identical with and without it, and the loss is
// that of the validation batches (not the training ones).
TEST(DataFiles, ValidationLossLeavesTrainingUnchanged) {
  config::Deck deck = model_test::tiny_deck();
  deck.parallel.pipeline = 1;
  deck.parallel.virtual_chunks = 1;
  deck.eval.every = 2;
  deck.eval.batches = 3;
  std::vector<double> valid;
  const std::vector<double> with = train_reference(config::resolve(deck), -1, &valid);
  deck.eval.every = 0;
  const std::vector<double> without = train_reference(config::resolve(deck));
  EXPECT_EQ(with, without);
  ASSERT_EQ(valid.size(), 3u);  // after steps 2, 4 and the last (5)
  for (double v : valid) EXPECT_TRUE(std::isfinite(v) && v > 0);
  EXPECT_NE(valid[0], valid[2]);  // the model changed between evaluations
  // A fresh model: the validation loss equals the mean of the batches' mean token losses computed by hand from
  // the logits of the same tokens.
  const plan::Plan plan = config::resolve(deck);
  StageModel m(plan, {0}, 1);
  const double loss = reference_eval_loss(m, 2);
  double by_hand = 0;
  std::vector<float> act;
  for (int b = 0; b < 2; b++) by_hand += m.eval_forward(0, b, nullptr, nullptr);
  EXPECT_EQ(loss, by_hand / 2);
  EXPECT_NEAR(loss, std::log(static_cast<double>(deck.model.vocab)), 0.5);  // near-uniform predictions at init
}

TEST(DataFiles, LlamaThreeShardsAreUint32AndNotMixedWithGptTwo) {
  const std::string dir = temp_dir("llama");
  write_llmc(dir + "/l_000.bin", positions(1000, 300, 4096), 20240801, 7, 4);  // Llama 3 layout, uint32
  DataSource alone(config::resolve(file_deck("llmc", dir + "/l_*.bin")));
  std::vector<int> in, tg;
  alone.microbatch(0, 0, in, tg);
  for (int s : row_starts(in, tg, model_test::tiny_deck().model.seq_len)) EXPECT_GE(s, 1000);
  // A GPT-2 shard (uint16) beside it: two tokenizers' ids in one stream, refused naming both files.
  write_llmc(dir + "/l_001.bin", positions(0, 300, 4096));
  const std::string e = error_of(file_deck("llmc", dir + "/l_*.bin"));
  EXPECT_TRUE(has(e, "data.path: '" + dir + "/l_001.bin' holds uint16 tokens, '" + dir +
                         "/l_000.bin' uint32 tokens: shards of two tokenizers"))
      << e;
}

namespace {
// The deck's problems for data keys given as YAML (every check of `conductor validate`), "" when none.
std::string deck_problems(const std::string& data_yaml) {
  config::LoadOptions o;
  o.source_name = "deck.yaml";
  o.command = config::Command::Simulate;
  try {
    config::parse_deck("model: {vocab: 4096}\ndata: " + data_yaml + "\n", o);
  } catch (const DeckError& e) {
    std::string all;
    for (const auto& p : e.problems()) all += p + "\n";
    return all;
  }
  return "";
}
}  // namespace

// A literal path wins over its glob reading; a glob's match that is no file is named, not skipped; validation
// files that are training files are refused; a named pipe is refused before it is opened (every rank hung).
TEST(DataFiles, PathsNameExactlyTheFilesTheyRead) {
  namespace fs = std::filesystem;
  const std::string dir = temp_dir("paths");
  fs::create_directories(dir + "/run[1]");
  fs::create_directories(dir + "/run1");
  write_llmc(dir + "/run[1]/x.bin", positions(2000, 300, 4096));
  write_llmc(dir + "/run1/x.bin", positions(0, 300, 4096));
  EXPECT_EQ(config::expand_data_path("llmc", dir + "/run[1]/x.bin"), std::vector<std::string>{dir + "/run[1]/x.bin"});

  write_llmc(dir + "/s_000.bin", positions(0, 300, 4096));
  fs::create_symlink(dir + "/gone.bin", dir + "/s_001.bin");
  fs::create_directories(dir + "/s_002.bin");
  const std::string e = deck_problems("{source: llmc, path: '" + dir + "/s_*.bin'}");
  EXPECT_TRUE(has(e, "names '" + dir + "/s_001.bin', a symbolic link to '" + dir + "/gone.bin', which does not exist"))
      << e;
  EXPECT_TRUE(has(e, "names '" + dir + "/s_002.bin', which is a folder, not a data file")) << e;
  // A loop of links: before, it read as a link to a file that does not exist.
  fs::create_symlink(dir + "/loop_b.bin", dir + "/loop_a.bin");
  fs::create_symlink(dir + "/loop_a.bin", dir + "/loop_b.bin");
  const std::string loop = deck_problems("{source: llmc, path: '" + dir + "/loop_a.bin'}");
  EXPECT_TRUE(has(loop, "names '" + dir + "/loop_a.bin', a symbolic link to '" + dir +
                            "/loop_b.bin' in a loop of links (it never reaches a file)"))
      << loop;
  // A path that matches nothing says where it was looked for: ~ is not a shell's, a relative path starts at the
  // working folder.
  const std::string home = deck_problems("{source: llmc, path: '~/shards/*.bin'}");
  EXPECT_TRUE(has(home,
                  "data.path = '~/shards/*.bin' matches no file (llm.c token shards) (a leading ~ is not "
                  "expanded: a deck is not read by a shell; write the folder out)"))
      << home;
  const std::string relative = deck_problems("{source: llmc, path: 'no_such_folder/*.bin'}");
  EXPECT_TRUE(
      has(relative, "(a relative path, looked for from the working folder " + fs::current_path().string() + ")"))
      << relative;

  const std::string overlap =
      deck_problems("{source: llmc, path: '" + dir + "/run1/*.bin', valid_path: '" + dir + "/run1/x.bin'}");
  EXPECT_TRUE(has(overlap, "which data.path names too")) << overlap;
  EXPECT_EQ(deck_problems("{source: llmc, path: '" + dir + "/run1/x.bin', valid_path: '" + dir + "/s_000.bin'}"), "");

  // A Megatron glob over prefixes, one of them without its .idx: named, not skipped (the run trained without it).
  write_megatron(dir + "/p0", {{1, 2, 3}});
  write_megatron(dir + "/p1", {{4, 5, 6}});
  fs::remove(dir + "/p1.idx");
  for (const std::string& path : {dir + "/p*.bin", dir + "/p*", dir + "/p1.bin"}) {
    const std::string missing = deck_problems("{source: megatron, path: '" + path + "'}");
    EXPECT_TRUE(has(missing, "names '" + dir + "/p1.idx', ")) << path << ": " << missing;
  }

  write_megatron(dir + "/m", {{1, 2, 3}});
  fs::remove(dir + "/m.bin");
  ASSERT_EQ(::mkfifo((dir + "/m.bin").c_str(), 0600), 0);
  const std::string fifo = deck_problems("{source: megatron, path: '" + dir + "/m'}");
  EXPECT_TRUE(has(fifo, "names '" + dir + "/m.bin', which is a named pipe")) << fifo;
  try {
    DataFile f(dir + "/m.bin");
    FAIL() << "a named pipe was opened";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "is not a regular file (a named pipe)")) << e.what();
  }
}

// The start-up scan (token ids and CRC-32) of a shard cut short after it was opened names the key too.
TEST(DataFiles, ShardTruncatedDuringTheScanNamesTheKey) {
  const std::string dir = temp_dir("scan-truncated");
  const std::string shard = dir + "/train_000.bin";
  write_llmc(shard, positions(0, 3000, 4096));
  const TokenSpan span = read_llmc_shard(shard);
  truncate_to(shard, 1024 + 2 * 10);
  std::string message;
  try {
    (void)scan_token_file(span, 4096, "data.valid_path");
  } catch (const InputError& e) {
    message = e.what();
  }
  EXPECT_EQ(message.rfind("data.valid_path: '" + shard + "' is now 1044 bytes", 0), 0u) << message;
}

// A shard cut short while a run reads it (a shorter file copied over it) was read through a mapping: the next
// window past the new end killed the process with SIGBUS (no message). Now a read is one InputError naming the
// file, the step, the bytes asked for and the file's size now; after defer_read_errors() it is recorded instead
// (the runtime ends every rank with it) and the rows read are token 0.
TEST(DataFiles, ShardTruncatedUnderTheRunIsAnErrorNamingIt) {
  const std::string dir = temp_dir("truncated");
  const std::string shard = dir + "/train_000.bin";
  write_llmc(shard, positions(0, 3000, 4096));
  const config::Deck deck = file_deck("llmc", shard);
  DataSource src(config::resolve(deck)), deferred(config::resolve(deck));
  deferred.defer_read_errors();
  std::vector<int> in, tg;
  src.microbatch(0, 0, in, tg);
  row_starts(in, tg, deck.model.seq_len);
  truncate_to(shard, 1024 + 2 * 10);  // the header and 10 tokens: every window now ends past the end
  std::string message;
  try {
    src.microbatch(3, 1, in, tg);
  } catch (const InputError& e) {
    message = e.what();
  }
  EXPECT_TRUE(
      has(message, "data.path: step 4 (microbatch 1): '" + shard + "' is now 1044 bytes, but 14 bytes at offset"))
      << message;
  EXPECT_TRUE(has(message, "it had 7024 bytes when the run opened it (truncated or rewritten while the run reads it)"))
      << message;

  EXPECT_EQ(deferred.read_error(), "");
  deferred.microbatch(3, 1, in, tg);
  EXPECT_TRUE(has(deferred.read_error(), "data.path: step 4 (microbatch 1): '" + shard + "' is now 1044 bytes"))
      << deferred.read_error();
  EXPECT_EQ(std::count(in.begin(), in.end(), 0) + std::count(tg.begin(), tg.end(), 0),
            static_cast<std::ptrdiff_t>(in.size() + tg.size()));
  deferred.microbatch(5, 0, in, tg);  // the first error is kept
  EXPECT_TRUE(has(deferred.read_error(), "step 4 (microbatch 1)")) << deferred.read_error();
}

// A shard rewritten in place (the same size) with ids past the vocabulary: refused as each row is read, naming the
// shard among several (the message said "the file" alone), the step and the row.
TEST(DataFiles, ShardRewrittenInPlaceNamesTheFile) {
  const std::string dir = temp_dir("rewritten");
  write_llmc(dir + "/train_000.bin", positions(0, 3000, 4096));
  write_llmc(dir + "/train_001.bin", positions(0, 3000, 4096));
  const config::Deck deck = file_deck("llmc", dir + "/train_*.bin");
  DataSource src(config::resolve(deck));
  std::vector<int> in, tg;
  src.microbatch(0, 0, in, tg);
  write_llmc(dir + "/train_001.bin", std::vector<int>(3000, 65535));  // same size: ids past the vocabulary
  std::string message;
  for (int step = 1; step < 50 && message.empty(); ++step) {
    try {
      src.microbatch(step, 0, in, tg);
    } catch (const InputError& e) {
      message = e.what();
    }
  }
  EXPECT_TRUE(has(message, "token id 65535 (row ")) << message;
  EXPECT_TRUE(has(message, "is outside the vocabulary (model.vocab = 4096): '" + dir +
                               "/train_001.bin' was rewritten since the run opened it"))
      << message;
  EXPECT_TRUE(has(message, "data.path: step ")) << message;
}

// What conductor validate reads of the data (the headers): shards of two token types are refused there too, as
// the run refuses them (validate answered 0).
TEST(DataFiles, HeaderCheckRefusesShardsOfTwoTokenTypes) {
  const std::string dir = temp_dir("mixed");
  write_llmc(dir + "/s_000.bin", positions(0, 300, 4096));
  write_llmc(dir + "/s_001.bin", positions(0, 300, 4096), 20240801, 7, 4);
  std::string e;
  try {
    check_data_headers(config::resolve(file_deck("llmc", dir + "/s_*.bin")));
  } catch (const InputError& x) {
    e = x.what();
  }
  EXPECT_TRUE(has(e, "data.path: '" + dir + "/s_001.bin' holds uint32 tokens, '" + dir +
                         "/s_000.bin' uint16 tokens: shards of two tokenizers"))
      << e;
}

// What a checkpoint records of the data: per file read, its path as data.path gave it, its size and the CRC-32 of
// the whole file (megatron: PREFIX.bin), in the order read (training files, then validation files).
TEST(DataFiles, FilesAreIdentifiedBySizeAndCrc) {
  const std::string dir = temp_dir("identity");
  write_llmc(dir + "/train_000.bin", positions(0, 300, 4096));
  write_llmc(dir + "/train_001.bin", positions(7, 500, 4096));
  write_llmc(dir + "/val.bin", positions(3, 400, 4096));
  config::Deck deck = file_deck("llmc", dir + "/train_*.bin");
  deck.data.valid_path = dir + "/val.bin";
  const DataSource src(config::resolve(deck));
  ASSERT_EQ(src.files().size(), 3u);
  const std::vector<std::string> names = {dir + "/train_000.bin", dir + "/train_001.bin", dir + "/val.bin"};
  for (std::size_t i = 0; i < names.size(); i++) {
    const auto bytes = util::read_file_bytes(names[i]);
    EXPECT_EQ(src.files()[i].path, names[i]);
    EXPECT_EQ(src.files()[i].bytes, bytes.size());
    EXPECT_EQ(src.files()[i].crc32, util::crc32(bytes.data(), bytes.size())) << names[i];
  }
  std::vector<std::vector<int>> docs(3, positions(0, 50, 4096));
  write_megatron(dir + "/m", docs);
  const DataSource m(config::resolve(file_deck("megatron", dir + "/m")));
  ASSERT_EQ(m.files().size(), 1u);
  EXPECT_EQ(m.files()[0].path, dir + "/m.bin");
  EXPECT_EQ(m.files()[0].bytes, 300u);
  EXPECT_TRUE(DataSource(config::resolve(model_test::tiny_deck())).files().empty());  // synthetic
}

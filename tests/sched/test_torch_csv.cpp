// torch.distributed.pipelining's CSV: round trips for every generator, the grid of a hand-checked export, the
// placement read from stage indices, and one clear error per kind of bad file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "conductor/sched/generators.hpp"
#include "conductor/sched/torch_csv.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/util/error.hpp"
#include "scratch_dir.hpp"

using namespace conductor;
using namespace conductor::sched;

namespace {

// In a folder of this process and test: ctest -j runs these tests as parallel processes, and one shared
// bad.csv was rewritten by one test while another read it. The process's folder goes at exit.
std::string write_temp(const std::string& name, const std::string& text) {
  static const test_support::ScratchDir scratch("conductor-csv");
  const std::filesystem::path dir = scratch / ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

// The message import_schedule() throws for `text` written to `name`, or "no error".
std::string import_error(const std::string& text, ScheduleShape shape, const std::string& name = "bad.csv") {
  const std::string path = write_temp(name, text);
  try {
    (void)import_schedule(path, shape, 0, 0);
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;  // every message starts with the file
    return what.substr(path.size() + 2);
  }
  return "no error";
}

// Two imports of one schedule written two ways hold the same per-rank lists.
void expect_same_lists(const Schedule& a, const Schedule& b) {
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (std::size_t r = 0; r < a.ranks.size(); ++r) EXPECT_EQ(a.ranks[r], b.ranks[r]) << "rank " << r;
}

}  // namespace

TEST(TorchCsv, RoundTripsEveryGenerator) {
  for (const auto& kind : generator_kinds()) {
    for (int p : {2, 3, 4}) {
      const int v = plan::v_shaped_kind(kind) || kind == "1f1b-interleaved" ? 2 : 1;
      const int m = kind == "1f1b-interleaved" ? 2 * p : 8;
      const Schedule s = generate(kind, p, m, v, uniform_cost(1, 1, 1));
      const std::string path = write_temp("roundtrip.csv", to_torch_csv(s));
      const Schedule t = import_schedule(path, ScheduleShape{p, m, v, std::nullopt}, 0, 0);
      EXPECT_EQ(t.placement, s.placement) << kind << " p " << p;
      EXPECT_EQ(t.ranks, s.ranks) << kind << " p " << p;
      EXPECT_EQ(to_torch_csv(t), to_torch_csv(s)) << kind;
    }
  }
}

TEST(TorchCsv, ExportsTheLockStepGrid) {
  // 1F1B, p = 2, m = 2, unit times: rank 1's F0 waits a slot for rank 0's, rank 0's B0 (full: torch's B) for
  // rank 1's.
  EXPECT_EQ(to_torch_csv(one_f_one_b(2, 2)), "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n");
  // Split backward: torch's I is conductor's B.
  const Schedule zb = zb_h1(2, 1);
  EXPECT_EQ(to_torch_csv(zb), "0F0,,,0I0,0W0\n,1F0,1I0,1W0\n");
}

TEST(TorchCsv, ReadsTorchFields) {
  // Idle fields, spaces, quotes, CRLF line ends, an OVERLAP_F_B pair and a trailing blank line.
  CsvReading reading;
  const std::string text =
      "0F0,0F1,,\"0I0\",(0W0;0F2)OVERLAP_F_B,0I1,0W1,,,0B2\r\n,1F0, 1I0 ,1F1,1I1,1W0,1W1,1F2,1B2\r\n\n";
  const Schedule s = parse_torch_csv(text, "t.csv", ScheduleShape{2, 3, 1, std::nullopt}, &reading);
  EXPECT_EQ(s.ranks[0], (std::vector<Action>{{OpKind::F, 0, 0},
                                             {OpKind::F, 1, 0},
                                             {OpKind::B, 0, 0},
                                             {OpKind::W, 0, 0},
                                             {OpKind::F, 2, 0},
                                             {OpKind::B, 1, 0},
                                             {OpKind::W, 1, 0},
                                             {OpKind::BW, 2, 0}}));
  EXPECT_EQ(reading.field_of[0], (std::vector<int>{0, 1, 3, 4, 4, 5, 6, 9}));
  EXPECT_FALSE(reading.torch25_letters);
  EXPECT_EQ(s.ranks[1].front(), (Action{OpKind::F, 0, 0}));
  EXPECT_EQ(reading.field_of[1].front(), 1);
  EXPECT_TRUE(validate(s, 0, 0).ok) << validate(s, 0, 0).message();
}

TEST(TorchCsv, InfersThePlacementFromStageIndices) {
  // p = 2, two chunks: rank 0 holds stages 0 and 3 in a V, 0 and 2 in a loop.
  const std::string v_csv = "0F0,,,3F0,3B0,,,0B0\n,1F0,2F0,,,2B0,1B0\n";
  const Schedule v = parse_torch_csv(v_csv, "v.csv", ScheduleShape{2, 1, 2, std::nullopt});
  EXPECT_EQ(v.placement, Placement::V);
  EXPECT_EQ(v.ranks[0][1], (Action{OpKind::F, 0, 1}));
  EXPECT_EQ(to_torch_csv(v), v_csv);  // the canonical grid reads back the same
  const std::string loop_csv = "0F0,,2F0,,,2B0,,0B0\n,1F0,,3F0,3B0,,1B0\n";
  EXPECT_EQ(parse_torch_csv(loop_csv, "l.csv", ScheduleShape{2, 1, 2, std::nullopt}).placement, Placement::Loop);
  // A placement the deck states wins, and a stage off its rank under it is an error.
  EXPECT_EQ(import_error(v_csv, ScheduleShape{2, 1, 2, Placement::Loop}),
            "rank 0, position 3: stage 3 is on rank 1 under loop placement");
  EXPECT_EQ(import_error("0F0,,1F0\n,1F0\n", ScheduleShape{2, 1, 2, std::nullopt}),
            "the stage indices fit neither loop placement (rank 0, position 2: stage 1 belongs on rank 1) nor V "
            "placement (rank 0, position 2: stage 1 belongs on rank 1)");
}

TEST(TorchCsvErrors, UnknownAction) {
  EXPECT_EQ(import_error("0F0,0X0\n1F0,1B0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "rank 0, position 1: unknown action '0X0': expected STAGE KIND MICROBATCH with KIND F, I, W or B (such "
            "as 2I3), or (A;B)OVERLAP_F_B");
}

// torch's runtime format (compute actions with its sends, receives and FSDP actions around them) reads as the
// compute-only file it was lowered from. Before, it was refused.
TEST(TorchCsv, RuntimeFormatReadsAsItsComputeOnlyActions) {
  const ScheduleShape shape{2, 2, 1, std::nullopt};
  const std::string compute = "0F0,0F1,0I0,0W0,0I1,0W1\n,1F0,1I0,1W0,1F1,1I1,1W1\n";
  const std::string runtime =
      "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0I0,0W0,0RECV_B1,0I1,0W1,0REDUCE_GRAD\n"
      ",1RECV_F0,1F0,1I0,1SEND_B0,1W0,1RECV_F1,1F1,1I1,1SEND_B1,1W1,1RESHARD\n";
  expect_same_lists(import_schedule(write_temp("compute.csv", compute), shape, 0, 0),
                    import_schedule(write_temp("runtime.csv", runtime), shape, 0, 0));
}

// torch 2.5 wrote B for the backward (for the input when a W of its stage and microbatch follows) and BW for the
// full backward, with batched SEND_F_RECV_B / SEND_B_RECV_F transfers in its runtime format. Before, such a file
// was refused ("2W0 splits a backward that position 5 already runs as BW").
TEST(TorchCsv, ReadsTorch25Letters) {
  // p = 2, v = 2 (loop): stages 0 and 2 split their backward, stages 1 and 3 run it whole.
  const ScheduleShape shape{2, 2, 2, std::nullopt};
  const std::string now =
      "0F0,0F1,2F0,2F1,,,2I0,2W0,2I1,2W1,,,0I0,0W0,0I1,0W1\n"
      ",1F0,1F1,3F0,3B0,3F1,3B1,,,1B0,,1B1\n";
  const std::string then =
      "0F0,0F1,2F0,0SEND_F_RECV_B1,2F1,,,2B0,2W0,2B1,2W1,,,0B0,0W0,0B1,0W1\n"
      ",1F0,1F1,3F0,3BW0,3F1,1SEND_B_RECV_F0,3BW1,,,1BW0,,1BW1\n";
  const Schedule a = import_schedule(write_temp("now.csv", now), shape, 0, 0);
  const Schedule b = import_schedule(write_temp("then.csv", then), shape, 0, 0);
  expect_same_lists(a, b);
  EXPECT_EQ(b.ranks[0][4], (Action{OpKind::B, 0, 1}));   // 2B0 with 2W0: the backward for the input
  EXPECT_EQ(b.ranks[1][3], (Action{OpKind::BW, 0, 1}));  // 3BW0: the full backward
  CsvReading reading;
  (void)parse_torch_csv(then, "then.csv", shape, &reading);
  EXPECT_TRUE(reading.torch25_letters);
  // Without a BW, a B with a W of its stage and microbatch alone marks torch 2.5's letters; a B without one
  // stays the full backward.
  const std::string then_b =
      "0F0,0F1,2F0,2F1,,,2B0,2W0,2B1,2W1,,,0B0,0W0,0B1,0W1\n"
      ",1F0,1F1,3F0,3B0,3F1,3B1,,,1B0,,1B1\n";
  expect_same_lists(a, import_schedule(write_temp("then_b.csv", then_b), shape, 0, 0));
  // Messages name actions in the file's letters.
  EXPECT_EQ(import_error("0F0,,,0B0,0W0\n,1F0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "invalid schedule: rank 1, end of list: missing the backward of stage 1, microbatch 0 (1B0+1W0 or 1BW0)");
  // One file, one version's letters.
  EXPECT_EQ(import_error("0F0,,,0I0,0W0\n,1F0,1BW0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "rank 1, position 2: BW is torch 2.5's full backward, but the file also has I (rank 0, position 3), "
            "torch 2.6's backward for the input, whose full backward is B: one file uses one version's letters");
}

TEST(TorchCsvErrors, RuntimeActionInsideAPairIsRefused) {
  EXPECT_EQ(import_error("0F0,(0F1;0SEND_F0)OVERLAP_F_B\n,1F0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "rank 0, position 1: action '0SEND_F0' is one of torch's runtime actions (communication, resharding), "
            "which an OVERLAP_F_B pair cannot hold: a pair names two compute actions, F and I, W or B (in "
            "'(0F1;0SEND_F0)OVERLAP_F_B')");
}

TEST(TorchCsvErrors, MissingOp) {
  EXPECT_EQ(import_error("0F0,,,0B0\n,1F0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "invalid schedule: rank 1, end of list: missing the backward of stage 1, microbatch 0 (1I0+1W0 or 1B0)");
  EXPECT_EQ(import_error("0F0,,,0I0\n,1F0,1B0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "invalid schedule: rank 0, end of list: missing 0W0 (stage 0)");
}

TEST(TorchCsvErrors, DuplicateOp) {
  EXPECT_EQ(import_error("0F0,,0F0,0B0\n,1F0,1B0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "invalid schedule: rank 0, position 2: action 0F0 appears twice (first at position 0)");
}

TEST(TorchCsvErrors, Cycle) {
  // Rank 0 runs microbatch 0's backward before microbatch 1's forward; rank 1 wants microbatch 1 first.
  EXPECT_EQ(import_error("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n", ScheduleShape{2, 2, 1, std::nullopt}),
            "invalid schedule: rank 0, position 1: 0B0 waits for 1B0 on rank 1, which never runs: the lists wait on "
            "each other (a cycle)");
}

TEST(TorchCsvErrors, BackwardBeforeForward) {
  EXPECT_EQ(import_error("0F0,,,,0B0\n,1B0,,1F0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "invalid schedule: rank 1, position 1: 1B0 comes before its forward 1F0 (position 3)");
}

TEST(TorchCsvErrors, WrongRankCount) {
  EXPECT_EQ(import_error("0F0,0B0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "1 rank lines but parallel.pipeline = 2 (torch's CSV holds one line per rank)");
}

// The count says what it holds that cannot be a rank line: blank lines, or conductor's text form saved as .csv.
TEST(TorchCsvErrors, WrongRankCountSaysWhatTheLinesAre) {
  EXPECT_EQ(import_error("\n0F0,0B0\n,1F0,1B0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "3 rank lines (1 of them blank) but parallel.pipeline = 2 (torch's CSV holds one line per rank)");
  const std::string text = "# conductor schedule\npipeline 2\nmicrobatches 1\nrank 0: 0F0 0BW0\nrank 1: 0F0 0BW0\n";
  EXPECT_EQ(import_error(text, ScheduleShape{2, 1, 1, std::nullopt}),
            "5 rank lines but parallel.pipeline = 2 (torch's CSV holds one line per rank); it reads like conductor's "
            "text form (`conductor schedule` prints it without --format csv): name the file other than .csv, or "
            "export it with --format csv");
  // A '#' comment in an otherwise valid CSV is named by its line, not taken for the text form.
  EXPECT_EQ(import_error("# saved by hand\n0F0,0B0\n,1F0,1B0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "3 rank lines but parallel.pipeline = 2 (torch's CSV holds one line per rank); line 1 is a '#' comment, "
            "which torch's CSV has no room for: remove it");
}

TEST(TorchCsvErrors, OutOfRange) {
  EXPECT_EQ(import_error("0F0,0F4\n,1F0\n", ScheduleShape{2, 2, 1, std::nullopt}),
            "rank 0, position 1: action '0F4' names microbatch 4 but parallel.microbatches = 2");
  EXPECT_EQ(import_error("0F0,,2F0\n,1F0\n", ScheduleShape{2, 1, 1, std::nullopt}),
            "rank 0, position 2: action '2F0' names stage 2 but the deck has 2 stages (parallel.pipeline x "
            "parallel.virtual = 2 x 1)");
}

// Numbers past any deck's range are named as out of range (before: "unknown action", the digits past 2^20
// left unread).
TEST(TorchCsvErrors, HugeNumbersAreOutOfRange) {
  const ScheduleShape shape{2, 2, 1, std::nullopt};
  EXPECT_EQ(import_error("0F0,0F2147483648,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n", shape),
            "rank 0, position 1: action '0F2147483648' names microbatch over 1073741823 but parallel.microbatches = 2");
  EXPECT_EQ(import_error("0F0,0F10485770,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n", shape),
            "rank 0, position 1: action '0F10485770' names microbatch 10485770 but parallel.microbatches = 2");
  EXPECT_EQ(import_error("4294967296F1,0F0\n,1F0\n", shape),
            "rank 0, position 0: action '4294967296F1' names stage over 1073741823 but the deck has 2 stages "
            "(parallel.pipeline x parallel.virtual = 2 x 1)");
}

// torch's runtime actions are skipped, but their stage and microbatch are the deck's (before: any number passed);
// a quoted field's inner spaces are stripped, as torch's _Action.from_str does.
TEST(TorchCsvErrors, RuntimeActionsAreRangeChecked) {
  const ScheduleShape shape{2, 2, 1, std::nullopt};
  EXPECT_EQ(import_error("0F0,9SEND_F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n", shape),
            "rank 0, position 1: action '9SEND_F0' names stage 9 but the deck has 2 stages (parallel.pipeline x "
            "parallel.virtual = 2 x 1)");
  EXPECT_EQ(import_error("0F0,0SEND_F7,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n", shape),
            "rank 0, position 1: action '0SEND_F7' names microbatch 7 but parallel.microbatches = 2");
  EXPECT_EQ(import_error("0UNSHARD,0F0,0F1,,0B0,,0B1,0RESHARD\n,1F0,1B0,1F1,1B1\n", shape), "no error");
  EXPECT_EQ(import_error("\" 0F0 \",0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n", shape), "no error");
}

// A malformed runtime action on its own is an unknown action (before: the message for one inside a pair).
TEST(TorchCsvErrors, MalformedRuntimeActionOutsideAPair) {
  EXPECT_EQ(import_error("0SEND_F0x,0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n", ScheduleShape{2, 2, 1, std::nullopt}),
            "rank 0, position 0: unknown action '0SEND_F0x': torch's runtime actions are STAGE TYPE [MICROBATCH] "
            "(such as 1RECV_F0 or 0UNSHARD); compute actions are STAGE KIND MICROBATCH with KIND F, I, W or B (such "
            "as 2I3), or (A;B)OVERLAP_F_B");
}

// The text form: a number past 2^30 is named (before: "expected CHUNK KIND MICROBATCH"), a header key given
// twice is refused (before: the last one won).
TEST(TextFormErrors, HugeNumberAndRepeatedHeaderKey) {
  const ScheduleShape shape{2, 2, 1, std::nullopt};
  // The text form's messages start "file:line: ".
  const auto error = [&](const std::string& name, const std::string& text) -> std::string {
    const std::string path = write_temp(name, text);
    try {
      (void)import_schedule(path, shape, 0, 0);
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path + ":", 0), 0u) << what;
      return what.substr(path.size() + 1);
    }
    return "no error";
  };
  EXPECT_EQ(error("big.txt", "pipeline 2\nmicrobatches 2\nrank 0: 0F0 0F2147483648 0B0 0B1\nrank 1: 0F0 0B0 0F1 0B1\n"),
            "3: action '0F2147483648': '0F2147483648' holds a number of 2^30 or more: a chunk must be below "
            "parallel.virtual and a microbatch below parallel.microbatches");
  EXPECT_EQ(
      error("dup.txt", "pipeline 3\nmicrobatches 2\npipeline 2\nrank 0: 0F0 0F1 0B0 0B1\nrank 1: 0F0 0B0 0F1 0B1\n"),
      "3: 'pipeline' is given twice");
}

// A memory overflow names the op in torch's notation only (before: "after 1F1", conductor's name of torch's 2F1).
TEST(TorchCsvErrors, MemoryOverflowNamesTheOpInTorchNotation) {
  const std::string path = write_temp("mem.csv", "0F0,0F1,2F0,2F1,2B0,2B1,0B0,0B1\n,1F0,1F1,3F0,3B0,3F1,3B1,1B0,1B1\n");
  try {
    (void)import_schedule(path, ScheduleShape{2, 2, 2, std::nullopt}, 1.5, 0);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              path +
                  ": invalid schedule: rank 0, position 3: 2F1 does not fit in memory: with it, memory in use "
                  "would be 2 M_F, over the limit of 1.5 M_F");
  }
}

TEST(TorchCsv, DetectsTheFormat) {
  EXPECT_TRUE(is_torch_csv("x.CSV", "pipeline 2\n"));
  EXPECT_TRUE(is_torch_csv("x.sched", "\n0F0,0B0\n"));
  EXPECT_TRUE(is_torch_csv("x", ",1F0\n"));
  EXPECT_FALSE(is_torch_csv("x.sched", "# comment\npipeline 2\n"));
  EXPECT_FALSE(is_torch_csv("x.txt", "pipeline 2\nmicrobatches 1\n"));
}

TEST(TorchCsv, TextFormThroughImport) {
  const Schedule s = one_f_one_b(2, 2);
  const std::string path = write_temp("text.sched", to_text(s));
  EXPECT_EQ(import_schedule(path, ScheduleShape{2, 2, 1, std::nullopt}, 0, 0).ranks, s.ranks);
  EXPECT_EQ(import_error(to_text(s), ScheduleShape{2, 2, 1, Placement::V}, "text.sched"),
            "the schedule has placement loop but the deck's schedule.placement is v");
  EXPECT_EQ(import_error(to_text(s), ScheduleShape{2, 4, 1, std::nullopt}, "text.sched"),
            "the schedule is for pipeline 2, microbatches 2, virtual 1 but the deck has 2, 4, 1");
  // A file for another pipeline is named as such before its missing rank lines (before: "no 'rank 2:' line",
  // which invites adding one).
  EXPECT_EQ(import_error("pipeline 3\nmicrobatches 2\nrank 0: 0F0 0B0 0W0 0F1 0B1 0W1\n"
                         "rank 1: 0F0 0B0 0W0 0F1 0B1 0W1\n",
                         ScheduleShape{2, 2, 1, std::nullopt}, "short.sched"),
            "the schedule is for pipeline 3, microbatches 2, virtual 1 but the deck has 2, 2, 1");
}

// A backward both split and whole is named in the file's letters at both places (torch 2.6: I + W against B;
// before, conductor's "B and W" and "BW" were printed for a torch file, and a W alone read as "split into B
// and W").
TEST(TorchCsvErrors, SplitAndWholeBackwardNamedInTheFilesLetters) {
  const ScheduleShape shape{2, 2, 1, std::nullopt};
  const std::string rank1 = ",1F0,1F1,1B0,1B1\n";
  EXPECT_EQ(import_error("0F0,0F1,,,0I0,0W0,0B0,0B1\n" + rank1, shape),
            "invalid schedule: rank 0, position 6: action 0B0 runs whole a backward that position 4 already splits "
            "(0I0)");
  EXPECT_EQ(import_error("0F0,0F1,,,0I1,0W1,0W0,0B0\n" + rank1, shape),
            "invalid schedule: rank 0, position 7: action 0B0 runs whole a backward that position 6 already splits "
            "(0W0)");
  EXPECT_EQ(import_error("0F0,0F1,,,0B0,0I0,0B1\n" + rank1, shape),
            "invalid schedule: rank 0, position 5: action 0I0 splits a backward that position 4 already runs whole "
            "(0B0)");
}

TEST(TorchCsv, ReadsAByteOrderMarkAndLoneCarriageReturns) {
  // A spreadsheet's UTF-8 mark, and old Mac line ends (a lone CR), which Python's csv reads as lines too.
  const std::string path = write_temp("mac.csv",
                                      "\xEF\xBB\xBF"
                                      "0F0,0F1,,0B0,,0B1\r,1F0,1B0,1F1,1B1\r");
  const Schedule s = import_schedule(path, ScheduleShape{2, 2, 1, std::nullopt}, 0, 0);
  EXPECT_EQ(s.ranks, one_f_one_b(2, 2).ranks);
}

TEST(TorchCsvErrors, OverlapPairNamesTwoActions) {
  const ScheduleShape shape{2, 2, 1, std::nullopt};
  EXPECT_EQ(import_error("0F0,(0F1)OVERLAP_F_B,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n", shape),
            "rank 0, position 1: '(0F1)OVERLAP_F_B' names 1 actions; an OVERLAP_F_B pair names two, (F;B) such as "
            "(0F1;1B0)OVERLAP_F_B");
  EXPECT_EQ(import_error("0F0,(0F1;0B0;0B1)OVERLAP_F_B\n,1F0,1B0,1F1,1B1\n", shape).substr(0, 60),
            "rank 0, position 1: '(0F1;0B0;0B1)OVERLAP_F_B' names 3 actio");
}

TEST(TorchCsvErrors, BinaryBytesAreQuotedEscaped) {
  // A binary file's bytes never reach the terminal raw, and a long field is cut.
  const std::string err = import_error(
      "0F0,0\x01\xff"
      "F\n,1F0\n",
      ScheduleShape{2, 1, 1, std::nullopt});
  EXPECT_EQ(err.substr(0, 47), "rank 0, position 1: unknown action '0\\x01\\xFFF'") << err;
  const std::string long_field = "0F0," + std::string(500, 'Z') + "\n,1F0\n";
  EXPECT_NE(import_error(long_field, ScheduleShape{2, 1, 1, std::nullopt}).find(std::string(60, 'Z') + "...'"),
            std::string::npos);
}

// The text form: round trip for every generator, and errors that name the line and token.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "conductor/sched/generators.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/util/error.hpp"

using namespace conductor;
using namespace conductor::sched;

TEST(Text, RoundTripsEveryGenerator) {
  for (const auto& kind : generator_kinds()) {
    const int v = plan::v_shaped_kind(kind) || kind == "1f1b-interleaved" ? 2 : 1;
    const Schedule s = generate(kind, 4, 8, v, uniform_cost(1, 1, 1));
    const Schedule t = parse_text(to_text(s), "x");
    EXPECT_EQ(t.p, s.p);
    EXPECT_EQ(t.m, s.m);
    EXPECT_EQ(t.v, s.v);
    EXPECT_EQ(t.placement, s.placement);
    EXPECT_EQ(t.ranks, s.ranks) << kind;
  }
}

TEST(Text, ParsesTheDocumentedForm) {
  const Schedule s = parse_text(
      "# two stages\npipeline 2\nmicrobatches 1\nvirtual 1\nplacement loop\n"
      "rank 0: 0F0\n  0BW0\nrank 1: 0F0 0B0 0W0\n",
      "t");
  ASSERT_EQ(s.ranks.size(), 2u);
  EXPECT_EQ(s.ranks[0], (std::vector<Action>{{OpKind::F, 0, 0}, {OpKind::BW, 0, 0}}));
  EXPECT_EQ(s.ranks[1].size(), 3u);
  EXPECT_TRUE(validate(s, 0, 0).ok);
}

TEST(Text, ErrorsNameLineAndToken) {
  auto error_of = [](const std::string& text) {
    try {
      (void)parse_text(text, "bad.sched");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("pipeline 2\nmicrobatches 2\nrank 0: 0F0 0X1\n"),
            "bad.sched:3: action '0X1': the kind must be F, B, W or BW");
  EXPECT_EQ(error_of("pipeline 2\nmicrobatches 2\nrank 0: 0F5\n"),
            "bad.sched:3: action '0F5': microbatch 5 but microbatches = 2");
  EXPECT_EQ(error_of("pipeline 2\nmicrobatches 2\nrank 2: 0F0\n"), "bad.sched:3: rank '2' is not in 0 .. 1");
  EXPECT_EQ(error_of("rank 0: 0F0\n"),
            "bad.sched:1: 'pipeline' and 'microbatches' must come before the first 'rank' line");
  EXPECT_EQ(error_of("pipeline 2\nmicrobatches 2\nrank 0: 0F0\n"),
            "bad.sched: no 'rank 1:' line (its 'pipeline 2' line asks for ranks 0 .. 1)");
  EXPECT_EQ(error_of("pipeline 2\nmicrobatches 2\nplacement z\n"),
            "bad.sched:3: placement must be 'loop' or 'v', got 'z'");
}

TEST(Text, SaveAndLoad) {
  const std::string path = ::testing::TempDir() + "/conductor_text_test.sched";
  const Schedule s = zb_h2(3, 5);
  save_schedule(s, path);
  const Schedule t = load_schedule(path);
  EXPECT_EQ(t.ranks, s.ranks);
  EXPECT_EQ(t.name, "file:" + path);
  std::remove(path.c_str());
  EXPECT_THROW((void)load_schedule(path), InputError);
}

// A UTF-16 file (PowerShell's `>`) is named as such, not read as garbled rank lines.
TEST(Text, Utf16FileIsNamed) {
  const std::string path = ::testing::TempDir() + "/conductor_utf16.csv";
  const std::string ascii = "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n";
  for (const bool bom : {true, false}) {
    {
      std::ofstream out(path, std::ios::binary);
      if (bom) out << '\xFF' << '\xFE';
      for (const char c : ascii) out << c << '\0';
    }
    try {
      (void)read_schedule_file(path);
      ADD_FAILURE() << "a UTF-16 file was read";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(bom ? "a UTF-16 byte order mark" : "NUL bytes"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("save a UTF-16 file"), std::string::npos) << e.what();
    }
  }
  std::remove(path.c_str());
}

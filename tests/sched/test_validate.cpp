// The validator rejects hand-broken schedules with the right rank, position and reason.
#include <gtest/gtest.h>

#include "conductor/sched/generators.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/util/error.hpp"

using namespace conductor;
using namespace conductor::sched;

namespace {
int find(const std::vector<Action>& l, Action a) {
  for (int i = 0; i < static_cast<int>(l.size()); ++i) {
    if (l[i] == a) return i;
  }
  return -1;
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST(Validate, AcceptsGenerated) {
  EXPECT_TRUE(validate(one_f_one_b(4, 8), 4, 0).ok);
  EXPECT_TRUE(validate(zb_h1(4, 8), 4, 0.4).ok);
}

TEST(Validate, SameRankSwapIsReportedAtTheBackward) {
  Schedule s = one_f_one_b(4, 8);
  auto& last = s.ranks[3];  // last stage: F0 BW0 F1 BW1 ...
  const int f3 = find(last, {OpKind::F, 3, 0}), b3 = find(last, {OpKind::BW, 3, 0});
  std::swap(last[f3], last[b3]);
  const Violation v = validate(s, 4, 0);
  ASSERT_FALSE(v.ok);
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.position, f3);
  EXPECT_TRUE(has(v.reason, "0BW3 comes before its forward 0F3")) << v.message();
}

TEST(Validate, WBeforeBIsReported) {
  Schedule s = zb_h1(3, 4);
  auto& l = s.ranks[1];
  const int b = find(l, {OpKind::B, 2, 0}), w = find(l, {OpKind::W, 2, 0});
  std::swap(l[b], l[w]);
  const Violation v = validate(s, 0, 0);
  ASSERT_FALSE(v.ok);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.position, b);
  EXPECT_TRUE(has(v.reason, "0W2 comes before its 0B2")) << v.message();
}

TEST(Validate, CrossRankSwapDeadlocks) {
  Schedule s;
  s.p = 2;
  s.m = 2;
  s.ranks = {{{OpKind::F, 0, 0}, {OpKind::BW, 0, 0}, {OpKind::F, 1, 0}, {OpKind::BW, 1, 0}},
             {{OpKind::F, 1, 0}, {OpKind::BW, 1, 0}, {OpKind::F, 0, 0}, {OpKind::BW, 0, 0}}};
  const Violation v = validate(s, 0, 0);
  ASSERT_FALSE(v.ok);
  EXPECT_EQ(v.rank, 0);
  EXPECT_EQ(v.position, 1);
  EXPECT_TRUE(has(v.reason, "0BW0 waits for 0BW0 (stage 1) on rank 1, position 3")) << v.message();
  EXPECT_TRUE(has(v.reason, "circular wait")) << v.message();
}

TEST(Validate, MissingOpIsReported) {
  Schedule s = zb_h1(4, 8);
  auto& l = s.ranks[2];
  l.erase(l.begin() + find(l, {OpKind::W, 5, 0}));
  const Violation v = validate(s, 4, 0);
  ASSERT_FALSE(v.ok);
  EXPECT_EQ(v.rank, 2);
  EXPECT_TRUE(has(v.reason, "missing 0W5")) << v.message();
}

TEST(Validate, DuplicateAndOutOfRangeAreReported) {
  Schedule s = one_f_one_b(2, 3);
  s.ranks[1].push_back({OpKind::F, 1, 0});
  Violation v = validate(s, 0, 0);
  ASSERT_FALSE(v.ok);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.position, static_cast<int>(s.ranks[1].size()) - 1);
  EXPECT_TRUE(has(v.reason, "appears twice")) << v.message();

  Schedule t = one_f_one_b(2, 3);
  t.ranks[0][0].microbatch = 7;
  v = validate(t, 0, 0);
  ASSERT_FALSE(v.ok);
  EXPECT_TRUE(has(v.reason, "microbatch 7 but m = 3")) << v.message();

  Schedule u = zb_h1(2, 3);
  u.ranks[0].push_back({OpKind::BW, 0, 0});
  v = validate(u, 0, 0);
  ASSERT_FALSE(v.ok);
  EXPECT_TRUE(has(v.reason, "already split")) << v.message();
}

TEST(Validate, MemoryOverflowIsReportedWhereItHappens) {
  const Schedule s = one_f_one_b(4, 8);  // rank 0 runs 4 forwards before its first backward
  Violation v = validate(s, 3, 0);
  ASSERT_FALSE(v.ok);
  EXPECT_EQ(v.rank, 0);
  EXPECT_EQ(v.position, 3);
  EXPECT_TRUE(
      has(v.reason, "0F3 does not fit in memory: with it, memory in use would be 4 M_F, over the limit of 3 M_F"))
      << v.message();
  // With W deferred, a = 1 keeps ZB-H2's rank 1 above 2p - 2 = 6 at some point but within 2p = 8.
  EXPECT_TRUE(validate(zb_h2(4, 8), 8, 1.0).ok);
  EXPECT_FALSE(validate(zb_h2(4, 8), 6, 1.0).ok);
}

TEST(Validate, ThrowingFormNamesTheSource) {
  Schedule s = one_f_one_b(2, 2);
  s.ranks[0].pop_back();
  try {
    validate_or_throw(s, 0, 0, "my.sched");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "my.sched: invalid schedule: rank 0")) << e.what();
  }
}

// The error's type says whether memory is why (make_schedule names the deck key that set the limit only then),
// whatever words the source's name holds.
TEST(Validate, ThrowingFormTypesAMemoryStop) {
  EXPECT_THROW(validate_or_throw(one_f_one_b(4, 8), 3, 0, "1f1b"), MemoryLimitError);
  Schedule s = one_f_one_b(2, 2);
  s.ranks[0].pop_back();
  try {
    validate_or_throw(s, 0, 0, "1f1b with memory limit 4 M_F");
    FAIL();
  } catch (const MemoryLimitError& e) {
    FAIL() << "a missing op is not a memory stop: " << e.what();
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "invalid schedule: rank 0")) << e.what();
  }
}

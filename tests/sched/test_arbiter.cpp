// The arbiter: strict vs readiness picks, hint rankings, the memory reservation rule, same-rank delivery.
#include <gtest/gtest.h>

#include <algorithm>

#include "conductor/sched/arbiter.hpp"
#include "conductor/sched/engine.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/util/error.hpp"

using namespace conductor;
using namespace conductor::sched;

namespace {
Schedule one_rank(std::vector<Action> list, int m, int p = 1) {
  Schedule s;
  s.p = p;
  s.m = m;
  s.ranks.assign(p, {});
  s.ranks[0] = std::move(list);
  return s;
}
}  // namespace

TEST(Arbiter, StrictRunsTheListInOrderAndWaitsForInputs) {
  const Schedule s = one_f_one_b(2, 4);  // rank 1 (last): F0 BW0 F1 BW1 ...
  Arbiter st(s, 1, 2, 0);
  EXPECT_EQ(st.pick(Execution::Strict, Hint::Schedule), -1);  // F0 waits for rank 0's activation
  const int f1 = st.index_of(OpKind::F, 0, 1);
  st.input_arrived(f1);
  EXPECT_EQ(st.pick(Execution::Strict, Hint::Schedule), -1);     // strict: F1 is ready but F0 is next
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::Schedule), f1);  // readiness runs it
  const int f0 = st.index_of(OpKind::F, 0, 0);
  st.input_arrived(f0);
  EXPECT_EQ(st.pick(Execution::Strict, Hint::Schedule), f0);
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::Schedule), f0);  // earliest in the list
  st.start(f0);
  EXPECT_DOUBLE_EQ(st.memory_in_use(), 1.0);
  st.complete(f0);
  const int b0 = st.backward_index(0, 0);
  EXPECT_TRUE(st.is_ready(b0));  // last stage: B needs only its own F
  EXPECT_EQ(st.pick(Execution::Strict, Hint::Schedule), b0);
}

TEST(Arbiter, HintsRankReadyWork) {
  // One stage, split backward: F0 F1 B0 W0 B1 W1 with everything of mb 0 done but W0, F1 not started.
  const Schedule s = one_rank({{OpKind::F, 0, 0},
                               {OpKind::F, 1, 0},
                               {OpKind::F, 2, 0},
                               {OpKind::B, 0, 0},
                               {OpKind::W, 0, 0},
                               {OpKind::B, 1, 0},
                               {OpKind::W, 1, 0},
                               {OpKind::B, 2, 0},
                               {OpKind::W, 2, 0}},
                              3);
  Arbiter st(s, 0, 10, 0.5);
  st.start(0);
  st.complete(0);  // F0
  st.start(3);
  st.complete(3);  // B0 (out of list order): W0 and F1 ready, B1 not
  EXPECT_TRUE(st.is_ready(1));
  EXPECT_TRUE(st.is_ready(4));
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::Schedule), 1);  // F1 (position 1) before W0 (position 4)
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::BF), 4);        // backward work first
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::BFW), 1);       // W only fills: F first
  st.start(1);
  st.complete(1);                                          // F1 -> B1 ready
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::BFW), 5);  // B1 before F2 and W0
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::BF), 4);   // W0 (position 4) before B1 (5)
}

// critical: an op another rank waits for first (list order among them, B or F alike), then the rank's own B or F,
// W last. On ZB-H1 (p = 3) the first stage's B feeds no one and its F feeds the pipeline; a middle stage's B and F
// both feed a neighbour.
TEST(Arbiter, CriticalRanksWorkAnotherRankWaitsForFirst) {
  const Schedule s = zb_h1(3, 6);
  Arbiter first(s, 0, 100, 0);
  const int b0 = first.backward_index(0, 0);
  int next_f = -1;  // the first F listed after B0
  for (int i = 0; i < first.size(); ++i) {
    if (first.actions()[i].kind != OpKind::F) continue;
    if (i < b0) {
      first.start(i);
      first.complete(i);
    } else if (next_f < 0) {
      next_f = i;
    }
  }
  first.input_arrived(b0);
  ASSERT_TRUE(first.is_ready(b0) && first.is_ready(next_f));
  ASSERT_FALSE(first.feeds_another_rank(b0));
  ASSERT_TRUE(first.feeds_another_rank(next_f));
  EXPECT_EQ(first.pick(Execution::Readiness, Hint::Schedule), b0);
  EXPECT_EQ(first.pick(Execution::Readiness, Hint::BFW), b0);
  EXPECT_EQ(first.pick(Execution::Readiness, Hint::Critical), next_f);  // the F rank 1 waits for
  first.start(b0);
  first.complete(b0);  // W0 ready
  const int w0 = first.index_of(OpKind::W, 0, 0);
  std::vector<int> ranked;
  first.candidates(Execution::Readiness, Hint::Critical, ranked);
  ASSERT_GE(ranked.size(), 2u);  // the ready forwards (they fit: the limit is ample), in list order, then W0
  EXPECT_EQ(ranked.front(), next_f);
  EXPECT_EQ(ranked.back(), w0);
  EXPECT_TRUE(std::is_sorted(ranked.begin(), ranked.end() - 1));
  EXPECT_EQ(first.pick(Execution::Readiness, Hint::Critical), next_f);

  // A middle stage: F1 (listed before B0) and B0 both ready: list order, where bfw takes B0.
  Arbiter middle(s, 1, 100, 0);
  const int f0 = middle.index_of(OpKind::F, 0, 0), f1 = middle.index_of(OpKind::F, 0, 1);
  const int mb0 = middle.backward_index(0, 0);
  middle.input_arrived(f0);
  middle.start(f0);
  middle.complete(f0);
  middle.input_arrived(f1);
  middle.input_arrived(mb0);
  ASSERT_LT(f1, mb0);
  ASSERT_TRUE(middle.feeds_another_rank(f1) && middle.feeds_another_rank(mb0));
  EXPECT_EQ(middle.pick(Execution::Readiness, Hint::BFW), mb0);
  EXPECT_EQ(middle.pick(Execution::Readiness, Hint::Critical), f1);
  EXPECT_EQ(parse_hint("critical"), Hint::Critical);
  EXPECT_STREQ(to_string(Hint::Critical), "critical");
}

TEST(Arbiter, MemoryLimitAndReservation) {
  // Limit 2: F0 F1 fill it; F2 must wait for a backward even though ready.
  const Schedule s = one_rank({{OpKind::F, 0, 0},
                               {OpKind::F, 1, 0},
                               {OpKind::BW, 0, 0},
                               {OpKind::F, 2, 0},
                               {OpKind::BW, 1, 0},
                               {OpKind::BW, 2, 0}},
                              3);
  Arbiter st(s, 0, 2, 0);
  for (int i : {0, 1}) {
    EXPECT_EQ(st.pick(Execution::Readiness, Hint::Schedule), i);
    st.start(i);
  }
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::Schedule), -1);  // F2 does not fit, F0/F1 still running
  EXPECT_FALSE(st.fits(3));
  st.complete(0);
  st.complete(1);
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::Schedule), 2);  // BW0
  st.start(2);
  st.complete(2);
  EXPECT_TRUE(st.fits(3));
  EXPECT_DOUBLE_EQ(st.peak_memory(), 2.0);
}

TEST(Arbiter, ReservationKeepsEarlierListedForwards) {
  // V placement, p = 1: stage 0 (chunk 0) and stage 1 (chunk 1) on one rank; each chunk F takes 1/2 M_F.
  Schedule s;
  s.p = 1;
  s.m = 3;
  s.v = 2;
  s.placement = Placement::V;
  s.ranks = {{}};
  for (int i = 0; i < 3; ++i) {
    for (Action a :
         {Action{OpKind::F, i, 0}, Action{OpKind::F, i, 1}, Action{OpKind::BW, i, 1}, Action{OpKind::BW, i, 0}}) {
      s.ranks[0].push_back(a);
    }
  }
  Arbiter st(s, 0, 1.0, 0);
  // All chunk-0 forwards are ready at once (stage 0 has no input).
  st.start(0);     // 0F0: 0.5 in use, 1F0 (listed next) reserves 0.5 more
  st.complete(0);  // delivers 1F0's input on the same rank
  EXPECT_TRUE(st.is_ready(1));
  const int f0_1 = st.index_of(OpKind::F, 0, 1);  // chunk 0, microbatch 1
  EXPECT_FALSE(st.fits(f0_1));                    // 0F1 would take the memory 1F0 was promised
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::BFW), 1);
  EXPECT_EQ(st.pick(Execution::Readiness, Hint::Schedule), 1);
}

TEST(Arbiter, NewlyReadyAndErrors) {
  const Schedule s = one_f_one_b(2, 2);
  Arbiter st(s, 0, 2, 0);
  const auto first = st.take_newly_ready();
  EXPECT_EQ(first.size(), 2u);  // rank 0: both forwards are ready at the start
  EXPECT_TRUE(st.take_newly_ready().empty());
  EXPECT_THROW(st.complete(0), Error);  // not started
  st.start(0);
  EXPECT_THROW(st.start(0), Error);
  st.reset();
  EXPECT_FALSE(st.is_started(0));
  EXPECT_EQ(st.take_newly_ready().size(), 2u);
  EXPECT_EQ(parse_hint("bfw"), Hint::BFW);
  EXPECT_THROW(parse_execution("eager"), InputError);
}

TEST(Arbiter, ReadinessIsNeverIdleWhileReadyWorkFits) {
  // Run a noisy-looking step (uneven op times) and check, for every op, that no earlier-ending idle gap on its
  // rank had a ready, fitting op: i.e. each op either starts when the rank frees up or when it became ready.
  const Schedule s = generate("zb-h1", 4, 12, 1, uniform_cost(1, 1, 1));
  ExecOptions o;
  o.execution = Execution::Readiness;
  o.hint = Hint::BFW;
  o.memory_limit = 4;
  o.memory_after_b = 0.3;
  const auto r = execute(
      s, o, [](int rank, const Action& a) { return 1.0 + 0.37 * ((rank * 7 + a.microbatch * 3 + int(a.kind)) % 5); },
      [](const Transfer&) { return 0.2; });
  for (const auto& op : r.ops) {
    // Idle time ends only because this op just became ready (memory cannot change while a rank idles).
    if (op.wait > 1e-12) {
      EXPECT_DOUBLE_EQ(op.ready, op.start) << "rank " << op.rank;
    }
  }
}

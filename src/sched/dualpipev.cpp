// DualPipeV: DeepSeek's DualPipe folded into a V (two chunks per rank, V placement), as torch.distributed.pipelining
// schedules it (ScheduleDualPipeV), rewritten here. Eight phases per rank r of p:
//   1  2(p-r-1) chunk-0 forwards                 5  p-r-1 x (BW chunk 1, pair F chunk 1 + BW chunk 0)
//   2  r+1 x (F chunk 0, F chunk 1)              6  r+1 x (backward chunk 1, backward chunk 0): full backwards,
//   3  p-r-1 x (B chunk 1, W, F chunk 1)            split into B (W deferred) from the middle iteration on
//   4  m-2p+r+1 x (pair F chunk 0 + BW chunk 1,  7  p-r-1 x (W, backward chunk 0)
//                  pair F chunk 1 + BW chunk 0)  8  r+1 x W
// W run in the order of their B. A "pair" is a forward and a full backward of other microbatches that DualPipe
// overlaps (one's compute hides the other's communication); conductor's lists have no pair type, so a pair is the
// forward followed by the backward, two consecutive actions (torch's CSV `(F;B)OVERLAP_F_B` reads back the same).
#include <deque>

#include "conductor/sched/generators.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/util/error.hpp"

namespace conductor::sched {

namespace {

// One rank's list under construction: microbatch counters per (kind, chunk) and the pending W queue.
class RankList {
 public:
  explicit RankList(std::vector<Action>& out) : out_(out) {}

  void f(int chunk) { out_.push_back(Action{OpKind::F, next_f_[chunk]++, chunk}); }
  // A backward of chunk: full (BW), or input only (B) with its W queued.
  void b(int chunk, bool split) {
    const int mb = next_b_[chunk]++;
    out_.push_back(Action{split ? OpKind::B : OpKind::BW, mb, chunk});
    if (split) pending_w_.push_back(Action{OpKind::W, mb, chunk});
  }
  void w() {
    if (pending_w_.empty()) return;  // as torch: a W slot with nothing pending is skipped
    out_.push_back(pending_w_.front());
    pending_w_.pop_front();
  }
  void pair(int f_chunk, int b_chunk) {
    f(f_chunk);
    b(b_chunk, false);
  }

 private:
  std::vector<Action>& out_;
  int next_f_[2] = {0, 0};
  int next_b_[2] = {0, 0};
  std::deque<Action> pending_w_;
};

void dualpipev_rank(int p, int m, int r, std::vector<Action>& out) {
  RankList l(out);
  for (int i = 0; i < 2 * (p - r - 1); ++i) l.f(0);
  for (int i = 0; i < r + 1; ++i) {
    l.f(0);
    l.f(1);
  }
  for (int i = 0; i < p - r - 1; ++i) {
    l.b(1, true);
    l.w();
    l.f(1);
  }
  for (int i = 0; i < m - 2 * p + r + 1; ++i) {
    l.pair(0, 1);  // torch does not overlap the first of these on the last rank; in a list it is the same
    l.pair(1, 0);
  }
  for (int i = 0; i < p - r - 1; ++i) {
    l.b(1, false);
    l.pair(1, 0);
  }
  // The last backwards split off their W (run in phases 7 and 8) from the middle iteration on: chunk 1 first on
  // odd ranks, chunk 0 first on even ones.
  bool split = false;
  const int n6 = r + 1;
  for (int i = 0; i < n6; ++i) {
    if (i == n6 / 2 && r % 2 == 1) split = true;
    l.b(1, split);
    if (i == n6 / 2 && r % 2 == 0) split = true;
    l.b(0, split);
  }
  for (int i = 0; i < p - r - 1; ++i) {
    l.w();
    l.b(0, split);
  }
  for (int i = 0; i < r + 1; ++i) l.w();
}

}  // namespace

Schedule dualpipe_v(int p, int m, double memory_limit, double memory_after_b) {
  if (p < 1 || m < 2 * p) {
    throw InputError("dualpipev needs at least as many microbatches as virtual stages: m >= 2p (got p = " +
                     std::to_string(p) + ", m = " + std::to_string(m) + ")");
  }
  Schedule s;
  s.p = p;
  s.m = m;
  s.v = 2;
  s.placement = Placement::V;
  s.name = "dualpipev";
  s.ranks.assign(p, {});
  for (int r = 0; r < p; ++r) dualpipev_rank(p, m, r, s.ranks[r]);
  validate_or_throw(s, memory_limit, memory_after_b, "dualpipev");
  return s;
}

}  // namespace conductor::sched

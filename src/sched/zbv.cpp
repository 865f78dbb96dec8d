// ZB-V as published: the Zero Bubble authors' greedy search for the V-shaped schedule (arXiv 2401.10241, section
// 6; their scheduler/zbv.py), rewritten here. Each rank holds chunk 0 (stage r, going down the V) and chunk 1
// (stage 2p-1-r, coming back up). The search simulates every rank's timeline under the cost model and the
// memory limit: a warm-up of forwards shaped so the first chunk-1 forward of each rank meets its input, then
// 2m rounds of one backward and one forward per rank, W filling the waits in front of them; a variant whose
// largest per-rank bubble shrinks when the ranks' bubbles of the previous pass are "approved" is searched again.
//
// Naming inside the search follows the V's direction, not the chunk index: pass 0 is the first op of its kind a
// microbatch meets on a rank (F: chunk 0; B and W: chunk 1, the top of the V going backward), pass 1 the second.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "conductor/sched/generators.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"

namespace conductor::sched {

namespace {

constexpr int kF = 0, kB = 1, kW = 2;

struct ZbvResult {
  std::vector<std::vector<Action>> ranks;
  double max_bubble = std::numeric_limits<double>::infinity();
  bool ok = false;
};

class ZbvSearch {
 public:
  ZbvSearch(int p, int m, const CostModel& cost, double limit) : S_(p), m_(m), comm_(cost.comm), limit_(limit) {
    for (int r = 0; r < p; ++r) {
      cost_[kF].push_back(cost.op_time(r, OpKind::F, 2));
      cost_[kB].push_back(cost.op_time(r, OpKind::B, 2));
      cost_[kW].push_back(cost.op_time(r, OpKind::W, 2));
    }
    mem_[kF] = memory_delta(OpKind::F, 2, cost.memory_after_b);
    mem_[kB] = memory_delta(OpKind::B, 2, cost.memory_after_b);
    mem_[kW] = memory_delta(OpKind::W, 2, cost.memory_after_b);
  }

  // One pass of the search and, while it helps, passes that approve the previous pass's per-rank bubbles
  // (a rank may then idle up to the largest bubble minus its own before it fills a wait with W).
  ZbvResult search(bool fill_f, bool fill_b, const std::vector<double>& approved) {
    ZbvResult r;
    r.ok = run(fill_f, fill_b, approved);
    if (!r.ok) return r;
    r.ranks = order_;
    r.max_bubble = *std::max_element(bubble_.begin(), bubble_.end());
    const std::vector<double> bubbles = bubble_;
    const double approved_max = approved.empty() ? -1.0 : *std::max_element(approved.begin(), approved.end());
    if (approved_max < 0 || r.max_bubble < approved_max) {
      ZbvResult next = search(fill_f, fill_b, bubbles);
      if (next.ok && next.max_bubble < r.max_bubble) return next;
    }
    return r;
  }

  // Why variants were dropped, over every pass so far: an op past the memory limit, or an op whose input's
  // producer was not yet placed (the published warm-up's shape assumes even stage costs).
  bool over_memory = false, out_of_order = false;

 private:
  double& end(int kind, int pass, int rank, int mb) {
    return end_[((static_cast<std::size_t>(kind) * 2 + pass) * S_ + rank) * m_ + mb];
  }
  int& count(int rank, int kind, int pass) { return count_[static_cast<std::size_t>(rank) * 6 + kind * 2 + pass]; }

  // The cross-rank input of (kind, pass) on `rank` for microbatch mb, or nullptr: pass 0 comes from rank-1,
  // pass 1 from rank+1 (F: activation; B: gradient); W and the ends of the V have none.
  const double* input(int kind, int pass, int rank, int mb) {
    if (kind == kW) return nullptr;
    if (pass == 0 && rank > 0) return &end(kind, 0, rank - 1, mb);
    if (pass == 1 && rank + 1 < S_) return &end(kind, 1, rank + 1, mb);
    return nullptr;
  }

  double max_bubble(int rank) const {
    double b = *std::max_element(bubble_.begin(), bubble_.end());
    if (!approved_.empty()) b = std::max(b, approved_max_ - approved_[rank]);
    return b;
  }

  // Appends (kind, pass) on `rank`; false when the published search would assert (dependency not yet placed,
  // memory over the limit, more than m of a kind): the variant is dropped.
  bool put(int kind, int pass, int rank) {
    const int mb = count(rank, kind, pass);
    if (mb >= m_) return false;
    if (mem_used_[rank] + mem_[kind] > limit_ + 1e-9) {
      over_memory = true;
      return false;
    }
    const double c = cost_[kind][rank];
    const double no_bubble = clock_[rank] + c;
    double done = no_bubble;
    if (const double* in = input(kind, pass, rank, mb)) {
      if (*in < 0) {
        out_of_order = true;
        return false;
      }
      done = std::max(done, *in + comm_ + c);
    }
    if (count(rank, kF, 0) > 0) bubble_[rank] += done - no_bubble;
    end(kind, pass, rank, mb) = done;
    clock_[rank] = done;
    mem_used_[rank] += mem_[kind];
    ++count(rank, kind, pass);
    // F pass p is chunk p; B and W pass p is chunk 1-p (the backward climbs the V from its top).
    const int chunk = kind == kF ? pass : 1 - pass;
    const OpKind k = kind == kF ? OpKind::F : kind == kB ? OpKind::B : OpKind::W;
    order_[rank].push_back(Action{k, mb, chunk});
    if (kind == kB) pending_w_[rank].push_back(pass);
    return true;
  }

  bool put_w(int rank) {
    if (pending_w_[rank].empty()) return false;
    const int pass = pending_w_[rank].front();
    pending_w_[rank].pop_front();
    return put(kW, pass, rank);
  }

  // W in front of (kind, pass) on `rank` while they end before its input arrives; one more that overruns the
  // input when the wait is longer than the bubble this rank may still take (and `fill` allows it).
  bool fill_before(int kind, int pass, int rank, bool fill) {
    const double* in = input(kind, pass, rank, count(rank, kind, pass));
    if (in == nullptr) return true;  // no input to wait for: nothing to fill
    while (!pending_w_[rank].empty() && *in + comm_ >= clock_[rank] + cost_[kW][rank]) {
      if (!put_w(rank)) return false;
    }
    if (!pending_w_[rank].empty() && *in + comm_ - clock_[rank] > max_bubble(rank) - bubble_[rank] && fill) {
      return put_w(rank);
    }
    return true;
  }

  bool run(bool fill_f, bool fill_b, const std::vector<double>& approved) {
    approved_ = approved;
    approved_max_ = approved.empty() ? -1.0 : *std::max_element(approved.begin(), approved.end());
    count_.assign(static_cast<std::size_t>(S_) * 6, 0);
    end_.assign(static_cast<std::size_t>(6) * S_ * m_, -1.0);
    clock_.assign(S_, 0.0);
    mem_used_.assign(S_, 0.0);
    bubble_.assign(S_, 0.0);
    pending_w_.assign(S_, {});
    order_.assign(S_, {});
    return warm_up() && steady(fill_f, fill_b) && drain();
  }

  bool warm_up() {
    for (int r = 0; r < S_; ++r) {
      if (!put(kF, 0, r)) return false;
    }
    // From the bottom of the V up: rank r runs chunk-0 forwards (and ranks below it with it) while they fit
    // before rank r+1's first chunk-1 forward arrives and leave memory for the rest of the warm-up.
    for (int r = S_ - 1; r >= 0; --r) {
      if (r < S_ - 1) {
        const double arrival = end(kF, 1, r + 1, 0) + comm_;
        while (mem_used_[r] + mem_[kF] * (2 + 2 * r) <= limit_ + 1e-9 && clock_[r] + cost_[kF][r] <= arrival &&
               count(r, kF, 0) < m_) {
          for (int j = 0; j <= r; ++j) {
            if (!put(kF, 0, j)) return false;
          }
        }
      }
      if (!put(kF, 1, r)) return false;
    }
    // Each rank catches up to the one above it in forwards (alternating the passes from the bottom).
    int pass = 0;
    for (int r = 1; r < S_; ++r) {
      for (int guard = 0; count(r, kF, 0) + count(r, kF, 1) < count(r - 1, kF, 0) + count(r - 1, kF, 1) ||
                          (count(r, kF, 1) <= count(r - 1, kF, 1) && count(r - 1, kF, 1) < m_);
           ++guard) {
        if (guard > 4 * m_) return false;
        for (int j = S_ - 1; j >= r; --j) {
          if (count(j, kF, pass) < m_ && !put(kF, pass, j)) return false;
        }
        pass = 1 - pass;
      }
    }
    return true;
  }

  // Which pass of B rank r runs next: the second (chunk 0) once its input is there or the first is done.
  int next_b_pass(int r) {
    if (count(r, kB, 1) >= count(r, kB, 0)) return 0;
    if (r == S_ - 1) return 1;
    return end(kB, 1, r + 1, count(r, kB, 1)) >= 0 || count(r, kB, 0) >= m_ ? 1 : 0;
  }

  // Which pass of F rank r runs next, or -1 for none this round.
  int next_f_pass(int r) {
    if (count(r, kF, 1) >= count(r, kF, 0)) return 0;
    if (r == S_ - 1) return 1;
    if (end(kF, 1, r + 1, count(r, kF, 1)) >= 0) return 1;
    if (count(r, kF, 0) < m_ && (r == 0 || end(kF, 0, r - 1, count(r, kF, 0)) >= 0)) return 0;
    return -1;
  }

  bool steady(bool fill_f, bool fill_b) {
    for (int round = 0; round < 2 * m_; ++round) {
      for (int r = 0; r < S_; ++r) {
        while (mem_used_[r] + mem_[kB] > limit_ + 1e-9) {
          if (!put_w(r)) return false;
        }
      }
      // Second-pass B from the top rank down, then first-pass B from rank 0 up (the gradient's own paths).
      std::vector<std::pair<int, int>> bs;
      for (int r = S_ - 1; r >= 0; --r) {
        if (next_b_pass(r) == 1) bs.emplace_back(r, 1);
      }
      for (int r = 0; r < S_; ++r) {
        if (next_b_pass(r) == 0) bs.emplace_back(r, 0);
      }
      for (const auto& [r, pass] : bs) {
        if (!fill_before(kB, pass, r, pass == 1 || fill_b) || !put(kB, pass, r)) return false;
      }
      for (int r = 0; r < S_; ++r) {
        if (count(r, kF, 1) >= m_) continue;
        const int pass = next_f_pass(r);
        if (pass < 0) continue;
        while (mem_used_[r] + mem_[kF] > limit_ + 1e-9) {
          if (!put_w(r)) return false;
        }
        if (!fill_before(kF, pass, r, fill_f) || !put(kF, pass, r)) return false;
      }
    }
    return true;
  }

  bool drain() {
    for (int r = 0; r < S_; ++r) {
      while (!pending_w_[r].empty()) {
        if (!put_w(r)) return false;
      }
    }
    for (int r = 0; r < S_; ++r) {
      if (order_[r].size() != static_cast<std::size_t>(6 * m_)) return false;
    }
    return true;
  }

  int S_, m_;
  double comm_, limit_;
  std::vector<double> cost_[3];
  double mem_[3];
  std::vector<int> count_;
  std::vector<double> end_, clock_, mem_used_, bubble_;
  std::vector<std::deque<int>> pending_w_;
  std::vector<std::vector<Action>> order_;
  std::vector<double> approved_;
  double approved_max_ = -1.0;
};

}  // namespace

Schedule zb_v(int p, int m, const CostModel& cost, double limit) {
  if (p < 1 || m < 1) {
    throw InputError("zb-v: pipeline and microbatches must be >= 1 (got p=" + std::to_string(p) +
                     ", m=" + std::to_string(m) + ")");
  }
  // The published search's four variants (W before a waiting B resp. F allowed or not); the smallest largest
  // per-rank bubble wins, the first on ties.
  const auto best_of = [](ZbvSearch& search) {
    ZbvResult best;
    for (bool fill_b : {true, false}) {
      for (bool fill_f : {true, false}) {
        ZbvResult r = search.search(fill_f, fill_b, {});
        if (r.ok && r.max_bubble < best.max_bubble) best = std::move(r);
      }
    }
    return best;
  };
  ZbvSearch search(p, m, cost, limit);
  ZbvResult best = best_of(search);
  // The published search is no monotone function of the limit: a looser one lets its warm-up hold more forwards,
  // which with uneven costs can place an op before its producer where a tighter limit worked (p = 3, m = 9 found
  // a V at 3 and 4 M_F, none at 3.5). A schedule within a tighter limit is within this one: the whole M_F below
  // it, then the kind's own limit (what 0 takes), are tried in turn; the message below is the given limit's.
  for (const double tighter : {std::ceil(limit) - 1.0, default_memory_limit("zb-v", p, m, 2)}) {
    if (best.ok || !(tighter < limit) || tighter < 1.0) continue;
    ZbvSearch retry(p, m, cost, tighter);
    best = best_of(retry);
  }
  if (!best.ok) {
    // A tight limit also makes a variant place an op before its producer (its warm-up holds fewer forwards):
    // the same search without a limit tells which of the two failed it.
    ZbvSearch unlimited(p, m, cost, std::numeric_limits<double>::infinity());
    if (std::isfinite(limit) && best_of(unlimited).ok) search.over_memory = true, search.out_of_order = false;
    std::string why;
    if (search.out_of_order) {
      why =
          "it places an op before its input's producer: its warm-up assumes even stage costs, and these are "
          "uneven (e.g. a slower first stage)";
    }
    if (search.over_memory) {
      why += std::string(why.empty() ? "" : "; ") + "the memory limit of " + format_double(limit) +
             " M_F per rank is below what it needs (about p M_F)";
    }
    const std::string message = "zb-v: the published V search finds no schedule for p = " + std::to_string(p) +
                                ", m = " + std::to_string(m) + " (" + why + "); zb-v-greedy fits any costs and limit";
    if (search.over_memory) throw MemoryLimitError(message);
    throw InputError(message);
  }
  Schedule s;
  s.p = p;
  s.m = m;
  s.v = 2;
  s.placement = Placement::V;
  s.name = "zb-v";
  s.ranks = std::move(best.ranks);
  validate_or_throw(s, limit, cost.memory_after_b, "zb-v (generator)");
  return s;
}

}  // namespace conductor::sched

#include "conductor/sched/migration.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace conductor::sched {

namespace {

double per_rank(const std::vector<double>& v, int rank) {
  if (v.empty()) return 0.0;
  return v.size() == 1 ? v[0] : v[static_cast<std::size_t>(rank) % v.size()];
}

// One chunk's share of a whole-rank op's costs (the bytes and messages of its layers).
plan::SliceCosts per_chunk(plan::SliceCosts c, int v) {
  c.bytes_fixed /= v;
  c.bytes_per_slice /= v;
  c.weight_bytes_per_slice /= v;
  c.messages = (c.messages + v - 1) / v;
  return c;
}

// B and W of one op: fractions weighted by their times, bytes and messages added.
plan::SliceCosts combined(const plan::SliceCosts& b, const plan::SliceCosts& w, double tb, double tw) {
  plan::SliceCosts c;
  const double sb = b.sliced_fraction * tb, sw = w.sliced_fraction * tw;
  c.sliced_fraction = tb + tw > 0 ? (sb + sw) / (tb + tw) : 0.0;
  c.helper_factor = sb + sw > 0 ? (sb * b.helper_factor + sw * w.helper_factor) / (sb + sw) : 1.0;
  c.bytes_fixed = b.bytes_fixed + w.bytes_fixed;
  c.bytes_per_slice = b.bytes_per_slice + w.bytes_per_slice;
  c.weight_bytes_per_slice = b.weight_bytes_per_slice + w.weight_bytes_per_slice;
  c.messages = b.messages + w.messages;
  return c;
}

}  // namespace

Migration::Migration(const plan::Migration& m, const plan::Costs& costs, int rank, int v)
    : enabled_(m.enabled && rank < static_cast<int>(m.ops.size())),
      slices_(std::max(1, m.slices)),
      max_slices_(static_cast<int>(std::floor(m.max_fraction * std::max(1, m.slices) + 1e-9))),
      max_helpers_(std::max(1, m.helpers)),
      bytes_per_ms_(m.bandwidth_gbps * 1e9 / 1e3),
      latency_ms_(m.latency_ms),
      memory_unit_bytes_(m.memory_unit_bytes) {
  if (!enabled_) return;
  replicas_ = m.replicas;
  replica_peers_ = m.replicas ? std::max(1, m.replica_peers) : 0;
  if (static_cast<std::size_t>(rank) < m.replica_bytes.size())
    replica_bytes_ = m.replica_bytes[static_cast<std::size_t>(rank)];
  const auto& ops = m.ops[static_cast<std::size_t>(rank)];
  for (int k = 0; k < 3; ++k) kinds_[static_cast<std::size_t>(k)] = per_chunk(ops[static_cast<std::size_t>(k)], v);
  kinds_[3] =
      combined(kinds_[1], kinds_[2], per_rank(costs.backward_input, rank), per_rank(costs.backward_weight, rank));
  if (bytes_per_ms_ <= 0) enabled_ = false;  // no bandwidth: no free transfers, so no migration
}

Offload Migration::split(OpKind kind, double estimate, int slices, const HelpOffer& offer) const {
  const plan::SliceCosts& c = kinds_[static_cast<std::size_t>(kind)];
  const double slice = estimate * c.sliced_fraction / slices_;  // one slice on the owner
  Offload o;
  o.helper = offer.rank;
  o.slices = slices;
  o.owner_time = estimate - slices * slice;
  o.helper_compute = helper_compute(c, slice, slices, offer);
  o.bytes = c.bytes_fixed + slices * bytes_per_slice(c, offer);
  o.help_time = help_time(c, slice, slices, offer);
  o.op_time = std::max(o.owner_time, o.help_time);
  o.memory = in_memory_units(offer.rank, o.bytes);
  return o;
}

// reach() and best_slices() run for every offer of every decision: inlined into decide(), whose loop then
// computes what they share (the fixed transfers, a slice's helper time) once per decision.
[[gnu::always_inline]] inline Migration::Reach Migration::reach(const plan::SliceCosts& c, double slice, double now,
                                                                const HelpOffer& offer, double fixed) const {
  // help(k) = fixed + k per_slice is increasing in k: slices_at takes the largest k with help(k) <= the bound.
  Reach r;
  r.fixed = fixed;
  const double slice_bytes = bytes_per_slice(c, offer);
  r.per_slice = slice_bytes / bytes_per_ms_ + slice * c.helper_factor * offer.speed;
  r.window = window(now, offer.until);
  r.cap = r.per_slice > 0 ? max_slices_ : 0;
  const std::size_t q = static_cast<std::size_t>(offer.rank);
  if (q < memory_unit_bytes_.size() && memory_unit_bytes_[q] > 0 && std::isfinite(offer.memory_free)) {
    const double room = offer.memory_free * memory_unit_bytes_[q] - c.bytes_fixed;  // bytes of slices it can hold
    if (room < 0) r.cap = 0;
    // min(cap, floor(y)) for a whole cap: floor (a dozen instructions without SSE4.1) only where y is below it,
    // and for 0 <= y < cap the integer conversion's truncation is that floor.
    if (const double y = room / slice_bytes + 1e-12; slice_bytes > 0 && y < r.cap)
      r.cap = y >= 0 ? static_cast<double>(static_cast<long long>(y)) : std::floor(y);
  }
  return r;
}

double Migration::step_of(const Reach& r, int k, double lo, double hi) {
  // slices_at(r, tau) >= k when (tau - fixed) / per_slice + 1e-12 >= k: a guess within a few ulps, then checked.
  double tau = std::clamp(r.fixed + (k - 1e-12) * r.per_slice, std::nextafter(lo, hi), hi);
  for (int tries = 0; tries < 8; ++tries) {
    if (slices_at(r, tau) >= k) {
      const double below = std::nextafter(tau, lo);
      if (below <= lo || slices_at(r, below) < k) return tau;
      tau = below;
    } else {
      if (tau >= hi) break;
      tau = std::nextafter(tau, hi);
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

[[gnu::always_inline]] inline std::pair<int, double> Migration::best_slices(const plan::SliceCosts& c, const Reach& r,
                                                                            double estimate, double slice, int most,
                                                                            const HelpOffer& offer) const {
  // The owner's part, estimate - k slice, falls with k and the helper's, fixed + k per_slice, grows (both
  // monotone in floating point too), so the op's end, the larger of the two, falls and then rises: it is least
  // at the last level where the owner's part is still the larger, or the next. The crossing in closed form
  // finds that level to within rounding, which can put it one level off only where the two parts are equal to
  // a few ulps: there both levels end within the rounding of each other and the one below ends a slice later, so
  // comparing the level with the next, each evaluated as split() computes it, is exact. Ties go to the fewest
  // slices (the fewest bytes).
  const auto end_at = [&](int k) { return std::max(estimate - k * slice, help_time(c, slice, k, offer)); };
  // clamp(floor(y), 1, most): between the two (most is whole) the conversion's truncation is the floor; NaN: 1.
  const double y = (estimate - r.fixed) / (slice + r.per_slice);
  const int k = std::isnan(y) || y < 1.0 ? 1 : y >= most ? most : static_cast<int>(y);
  const double end = end_at(k);
  if (k < most) {
    const double after = end_at(k + 1);
    if (after < end) return {k + 1, after};
  }
  return {k, end};
}

int Migration::most_slices(OpKind kind, double now, double estimate, const HelpOffer& offer) const {
  const plan::SliceCosts& c = kinds_[static_cast<std::size_t>(kind)];
  if (!enabled_ || estimate <= 0 || c.sliced_fraction <= 0) return 0;
  return most_of(reach(c, estimate * c.sliced_fraction / slices_, now, offer, fixed_time(c)), estimate);
}

namespace {

// The op run by its owner alone.
Offload alone(double estimate) {
  Offload o;
  o.op_time = o.owner_time = estimate;
  return o;
}

}  // namespace

// One decision with several helpers per op (or a reference search), docs/migration.md, "The decision": the
// earliest end tau of the op. Each offer takes the most slices it can finish within tau, the owner the rest (at
// most every slice moves); tau is feasible when the owner's part fits too. Feasibility grows with tau, so bisect
// on it; the best `n` offers at tau are the ones that take the most slices (ties: the first offered).
//
// Only the offers that can take a slice within the op's time alone take part (k is nondecreasing in tau): the
// candidates, in the offers' order, each with its k at both ends of the bisection's bracket. The arrays are kept
// per thread, so a decision allocates nothing once they have grown (the engine decides at every op start).
class Migration::Several {
 public:
  Several(const Migration& m, const plan::SliceCosts& c, double now, double estimate, double slice, double fixed,
          const std::vector<HelpOffer>& offers, Search search)
      : m_(m),
        c_(c),
        estimate_(estimate),
        slice_(slice),
        offers_(offers),
        search_(search),
        n_(std::min<std::size_t>(offers.size(), static_cast<std::size_t>(m.max_helpers_))) {
    live_.clear();
    for (std::size_t i = 0; i < offers.size(); ++i) {
      Candidate x;
      x.reach = m.reach(c, slice, now, offers[i], fixed);
      x.k_hi = slices_at(x.reach, estimate);
      if (x.k_hi <= 0) continue;
      x.offer = i;
      x.k_lo = slices_at(x.reach, 0.0);
      live_.push_back(x);
    }
  }
  bool any() const { return !live_.empty(); }
  // The bisection's feasible end: located where it can be, else the bisection itself.
  double feasible_end() const {
    const double least = locate();
    return std::isnan(least) ? bisect() : bisect_to(least);
  }
  // The parts at the feasible end `hi`, or "alone" when they do not end the op sooner than by `gain_needed`.
  Offload hand_out(OpKind kind, double hi, double gain_needed) const;

 private:
  struct Candidate {
    Reach reach;
    std::size_t offer = 0;
    int k = 0, k_lo = 0, k_hi = 0, k_mid = 0;
  };
  struct Arrays {
    std::vector<Candidate> live;
    std::vector<int> ks;
    std::vector<std::size_t> order;  // positions in live
  };
  // Per thread, reached once per decision (a thread_local's every use checks that it is built).
  static Arrays& arrays() {
    thread_local Arrays a;
    return a;
  }

  // Inlined where they are called, as the bisection's loops need them.
  [[gnu::always_inline]] static inline int total(const std::vector<Candidate>& live, std::size_t n, int slices,
                                                 int Candidate::*field, std::vector<int>& ks);
  double locate_one(const Candidate& x) const;
  double locate() const;
  [[gnu::always_inline]] inline bool settles_at(double threshold) const;
  double bisect_to(double least) const;
  double bisect() const;
  // The slices the owner needs to give away to end by tau.
  int needs(double tau) const { return static_cast<int>(std::ceil((estimate_ - tau) / slice_ - 1e-9)); }

  const Migration& m_;
  Arrays& arrays_ = arrays();
  std::vector<Candidate>& live_ = arrays_.live;
  std::vector<std::size_t>& order_ = arrays_.order;
  const plan::SliceCosts& c_;
  const double estimate_, slice_;
  const std::vector<HelpOffer>& offers_;
  const Search search_;
  const std::size_t n_;  // the most helpers
};

// The slices moved at a bracket end (field: k_lo, k_hi or k_mid): min(slices, the sum of the n largest k).
// (Static, its inputs passed: the bisection's loop keeps them in registers, not behind `this`.)
inline int Migration::Several::total(const std::vector<Candidate>& live, std::size_t n, int slices,
                                     int Candidate::*field, std::vector<int>& ks) {
  int sum = 0;
  if (n >= live.size()) {
    for (const Candidate& x : live) sum += x.*field;
  } else if (n == 1) {
    for (const Candidate& x : live) sum = std::max(sum, x.*field);
  } else if (n <= 8) {
    // The n largest kept in order in a small array: no allocation, no sort.
    std::array<int, 8> top{};
    for (const Candidate& x : live) {
      int k = x.*field;
      for (std::size_t j = 0; j < n && k > 0; ++j) {
        if (k > top[j]) std::swap(k, top[j]);
      }
    }
    for (std::size_t j = 0; j < n; ++j) sum += top[j];
  } else {
    ks.clear();
    for (const Candidate& x : live) ks.push_back(x.*field);
    std::nth_element(ks.begin(), ks.begin() + static_cast<std::ptrdiff_t>(n - 1), ks.end(), std::greater<int>());
    for (std::size_t j = 0; j < n; ++j) sum += ks[j];
  }
  return std::min(sum, slices);
}

// Feasibility is monotone in tau (t is), so the bisection's every step is a comparison of its midpoint with the
// least feasible tau, its threshold: where that is located exactly, the bisection is that comparison alone.
// With one candidate the guess is in closed form: its k steps near fixed + k per_slice, and the owner's part
// estimate - slice k falls as k grows; the first level j whose step lies at or past the owner's part with j
// slices is near (estimate - fixed) / (per_slice + slice), and the threshold is the earlier of that step and the
// owner's part with j - 1 slices. Then checked: the least tau is the one feasible where the double below it is
// not, found within a few ulps of the guess (NaN: not found; the bisection decides).
double Migration::Several::locate_one(const Candidate& x) const {
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  const double estimate = estimate_, slice = slice_;
  const auto feasible = [&](double tau) {
    return estimate - slice * std::min(m_.slices_, slices_at(x.reach, tau)) <= tau;
  };
  const double level = std::ceil((estimate - x.reach.fixed) / (x.reach.per_slice + slice));
  const int j = static_cast<int>(std::clamp(level, x.k_lo + 1.0, x.k_hi + 1.0));
  const double step =
      j > x.k_hi ? std::numeric_limits<double>::infinity() : x.reach.fixed + (j - 1e-12) * x.reach.per_slice;
  const double guess = std::min(estimate - slice * (j - 1), step);
  if (!(guess > 0 && guess <= estimate)) return kNone;
  double tau = guess;
  const bool up = !feasible(tau);
  for (int tries = 0; tries < 16; ++tries) {
    const double other = std::nextafter(tau, up ? estimate : 0.0);
    if (other <= 0 || other == tau) return kNone;
    if (up ? feasible(other) : !feasible(other)) return up ? other : tau;
    tau = other;
  }
  return kNone;
}

// One candidate, or one helper per op: the op is feasible at tau when one candidate alone makes it so (the total
// is the largest k), so the least feasible tau is the least of the candidates' own thresholds. Several helpers
// share the slices, and the bisection decides (NaN).
double Migration::Several::locate() const {
  double least = std::numeric_limits<double>::quiet_NaN();
  if (search_ == Search::Bisection || (live_.size() != 1 && n_ != 1)) return least;
  for (const Candidate& x : live_) {
    const double own = locate_one(x);
    if (std::isnan(own)) return own;
    least = std::isnan(least) ? own : std::min(least, own);
  }
  return least;
}

// Once the bisection's threshold (the least feasible end) is known, the bisection ends at an hi in [threshold,
// threshold + width): its lo stays below the threshold, its hi at or above, and it stops once hi - lo <= width.
// What follows reads hi only through each candidate's k and the slices the owner needs, both monotone step
// functions of hi; where each is the same at both ends of that interval, it is the same at hi, and hi = the
// threshold decides alike without replaying the midpoints (most decisions: the threshold is a step of one of
// them, and the next step is a slice away). Otherwise the midpoints are replayed, to the bit.
inline bool Migration::Several::settles_at(double threshold) const {
  const double width = 1e-7 * estimate_;
  const double beyond = std::nextafter(threshold + width, estimate_ + width);
  if (needs(threshold) != needs(beyond)) return false;
  for (const Candidate& x : live_) {
    if (slices_at(x.reach, threshold) != slices_at(x.reach, beyond)) return false;
  }
  return true;
}

// The bisection's end from its located threshold `least`.
double Migration::Several::bisect_to(double least) const {
  if (settles_at(least)) return least;
  double lo = 0, hi = estimate_;
  for (int it = 0; it < 60 && hi - lo > 1e-7 * estimate_; ++it) {
    const double tau = 0.5 * (lo + hi);
    (tau >= least ? hi : lo) = tau;
  }
  return hi;
}

// The bisection itself (the threshold not located: a guess too far, or a threshold at 0). A candidate whose k is
// the same at both ends of the bracket has it at every tau between them (slices_at's steps are monotone in
// floating point too), so only the others are evaluated at the midpoint. Once one candidate alone moves, by one
// slice, the ks at a midpoint are those of one end, and which one is a comparison with where its step lies
// (step_at); once the total is the same at both ends it is constant between them. The rest of the bisection
// then needs no evaluation: the same midpoints, and the same end, in arithmetic alone.
double Migration::Several::bisect() const {
  const double estimate = estimate_, slice = slice_, width = 1e-7 * estimate;
  std::vector<Candidate>& live = live_;
  std::vector<int>& ks = arrays_.ks;
  const std::size_t n = n_;
  const int slices = m_.slices_;
  double lo = 0, hi = estimate;
  int at_lo = total(live, n, slices, &Candidate::k_lo, ks), at_hi = total(live, n, slices, &Candidate::k_hi, ks);
  double step_at = std::numeric_limits<double>::quiet_NaN();
  for (int it = 0; it < 60 && hi - lo > width; ++it) {
    if (at_lo == at_hi) {
      // Constant from here on (both ends keep the same total): feasibility is one comparison with the same
      // threshold at every midpoint (lo is below it, hi at or above), so the rest of the bisection is settled as
      // above, or this loop without the bookkeeping.
      const double need = estimate - slice * at_lo;
      if (search_ != Search::Bisection && settles_at(need)) return need;
      for (; it < 60 && hi - lo > width; ++it) {
        const double tau = 0.5 * (lo + hi);
        (need <= tau ? hi : lo) = tau;
      }
      return hi;
    }
    const double tau = 0.5 * (lo + hi);
    const bool stepped = !std::isnan(step_at);
    int t = at_lo;
    if (stepped) {
      t = tau >= step_at ? at_hi : at_lo;
    } else {
      for (Candidate& x : live) x.k_mid = x.k_lo == x.k_hi ? x.k_lo : slices_at(x.reach, tau);
      t = total(live, n, slices, &Candidate::k_mid, ks);
    }
    const bool feasible = estimate - slice * t <= tau;
    if (feasible) {
      hi = tau, at_hi = t;
    } else {
      lo = tau, at_lo = t;
    }
    if (stepped) continue;  // each end keeps its ks; the step alone decides between them
    const Candidate* mover = nullptr;
    int movers = 0;
    for (Candidate& x : live) {
      (feasible ? x.k_hi : x.k_lo) = x.k_mid;
      if (x.k_lo != x.k_hi) ++movers, mover = &x;
    }
    if (movers == 1 && mover->k_hi == mover->k_lo + 1) step_at = step_of(mover->reach, mover->k_hi, lo, hi);
  }
  return hi;
}

// At the feasible end: the best n candidates (the most slices; ties: the first offered), each capped by what is
// left of the slices; then the slices the owner need not keep, trimmed from the helpers whose parts end last
// (ties: the first offered).
Offload Migration::Several::hand_out(OpKind kind, double hi, double gain_needed) const {
  for (Candidate& x : live_) x.k = slices_at(x.reach, hi);
  order_.resize(live_.size());
  for (std::size_t j = 0; j < order_.size(); ++j) order_[j] = j;
  if (n_ < offers_.size()) {
    const std::ptrdiff_t top = static_cast<std::ptrdiff_t>(std::min(n_, order_.size()));
    std::partial_sort(order_.begin(), order_.begin() + top, order_.end(), [&](std::size_t a, std::size_t b) {
      return live_[a].k != live_[b].k ? live_[a].k > live_[b].k : a < b;
    });
  }
  int moved = 0;
  for (std::size_t j = 0; j < order_.size(); ++j) {
    Candidate& x = live_[order_[j]];
    if (j >= n_) x.k = 0;
    x.k = std::min(x.k, m_.slices_ - moved);
    moved += x.k;
  }
  const int needed = std::max(0, needs(hi));
  while (moved > needed) {
    Candidate* last = nullptr;
    double last_time = 0;
    for (Candidate& x : live_) {
      if (x.k <= 0) continue;
      const double t = m_.help_time(c_, slice_, x.k, offers_[x.offer]);
      if (!last || t > last_time) last = &x, last_time = t;
    }
    --last->k;
    --moved;
  }
  Offload best = alone(estimate_);
  best.owner_time = estimate_ - moved * slice_;
  best.op_time = best.owner_time;
  for (const std::size_t j : order_) {
    const Candidate& x = live_[j];
    if (x.k <= 0) continue;
    const Offload o = m_.split(kind, estimate_, x.k, offers_[x.offer]);
    HelpPart h{o.helper, o.slices, o.helper_compute, o.help_time, o.bytes, o.memory};
    best.op_time = std::max(best.op_time, o.help_time);
    if (best.helper < 0) {
      best.helper = h.helper, best.slices = h.slices, best.helper_compute = h.helper_compute;
      best.help_time = h.help_time, best.bytes = h.bytes, best.memory = h.memory;
    } else {
      best.more.push_back(h);
    }
  }
  if (best.helper >= 0 && best.op_time < estimate_ - gain_needed) return best;
  return alone(estimate_);
}

// One helper per op (the default): each offer's own best split (closed form, best_slices), the earliest end among
// them (ties: the first offered), if it ends the op sooner than alone by `gain_needed`.
// Inlined into decide(): it runs at every op start.
[[gnu::always_inline]] inline Offload Migration::decide_one(OpKind kind, double now, double estimate,
                                                            const std::vector<HelpOffer>& offers,
                                                            double gain_needed) const {
  const plan::SliceCosts& c = kinds_[static_cast<std::size_t>(kind)];
  const double slice = estimate * c.sliced_fraction / slices_;
  const double fixed = fixed_time(c);  // every offer's fixed transfers
  int best_k = 0;
  double best_end = estimate - gain_needed;
  std::size_t best_offer = 0;
  for (std::size_t i = 0; i < offers.size(); ++i) {
    const Reach r = reach(c, slice, now, offers[i], fixed);
    const int most = most_of(r, estimate);
    if (most <= 0) continue;
    // No split of this offer ends before max(its one-slice help, its least owner's part, the parts' crossing) in
    // exact arithmetic; with a margin far above rounding, an offer whose bound is past the best end so far cannot
    // beat it, so its best split is not sought (the decision is the same).
    const double floor_end = std::max({r.fixed + r.per_slice, estimate - most * slice,
                                       (estimate * r.per_slice + r.fixed * slice) / (slice + r.per_slice)});
    if (floor_end > best_end + 1e-9 * std::max(1.0, best_end)) continue;
    const auto [k, end] = best_slices(c, r, estimate, slice, most, offers[i]);  // k >= 1
    if (end < best_end) best_k = k, best_end = end, best_offer = i;
  }
  return best_k > 0 ? split(kind, estimate, best_k, offers[best_offer]) : alone(estimate);
}

Offload Migration::decide(OpKind kind, double now, double estimate, const std::vector<HelpOffer>& offers,
                          Search search) const {
  const plan::SliceCosts& c = kinds_[static_cast<std::size_t>(kind)];
  if (!enabled_ || estimate <= 0 || c.sliced_fraction <= 0 || offers.empty()) return alone(estimate);
  const double gain_needed = 1e-9 * std::max(1.0, estimate);  // a tie is no reason to move bytes
  if (max_helpers_ == 1 && search == Search::Direct) return decide_one(kind, now, estimate, offers, gain_needed);
  const Several several(*this, c, now, estimate, estimate * c.sliced_fraction / slices_, fixed_time(c), offers, search);
  if (!several.any()) return alone(estimate);
  return several.hand_out(kind, several.feasible_end(), gain_needed);
}

std::vector<HelpPart> Offload::parts() const {
  std::vector<HelpPart> out;
  if (helper < 0) return out;
  out.push_back(HelpPart{helper, slices, helper_compute, help_time, bytes, memory});
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

InputChains::InputChains(const Schedule& s) {
  const std::size_t p = static_cast<std::size_t>(s.p);
  // Per rank, the list position of each (chunk, microbatch)'s F and of its B or BW.
  const std::size_t slots = static_cast<std::size_t>(s.v) * static_cast<std::size_t>(s.m);
  std::vector<std::vector<int>> f(p, std::vector<int>(slots, -1)), b(p, std::vector<int>(slots, -1));
  const auto slot = [&](int chunk, int mb) { return static_cast<std::size_t>(chunk) * s.m + mb; };
  for (std::size_t r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind == OpKind::F) f[r][slot(a.chunk, a.microbatch)] = static_cast<int>(i);
      if (a.kind == OpKind::B || a.kind == OpKind::BW) b[r][slot(a.chunk, a.microbatch)] = static_cast<int>(i);
    }
  }
  std::vector<std::size_t> sizes(p);
  for (std::size_t r = 0; r < p; ++r) sizes[r] = s.ranks[r].size();
  size_lists(sizes);
  for (std::size_t r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const auto in = input_of(s, static_cast<int>(r), s.ranks[r][i]);
      if (!in || in->local()) continue;
      const std::size_t from = static_cast<std::size_t>(in->from_rank);
      Link& link = links_[first_[r] + i];
      link.rank = in->from_rank;
      link.position = (in->payload == Payload::Activation ? f : b)[from][slot(in->from_chunk, in->microbatch)];
    }
  }
}

void InputChains::size_lists(const std::vector<std::size_t>& sizes) {
  first_.assign(sizes.size() + 1, 0);
  for (std::size_t r = 0; r < sizes.size(); ++r) first_[r + 1] = first_[r] + sizes[r];
  links_.assign(first_.back(), Link{});
}

InputChains::InputChains(const std::vector<std::vector<std::int32_t>>& consumer,
                         const std::vector<std::vector<std::int32_t>>& consumer_rank) {
  const std::size_t p = consumer.size();
  std::vector<std::size_t> sizes(p);
  for (std::size_t r = 0; r < p; ++r) sizes[r] = consumer[r].size();
  size_lists(sizes);
  for (std::size_t r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < consumer[r].size(); ++i) {
      const std::int32_t to = consumer_rank[r][i], pos = consumer[r][i];
      if (to < 0 || pos < 0) continue;
      links_[at(to, pos)] = Link{static_cast<int>(r), static_cast<int>(i)};
    }
  }
}

namespace {

// PeerKnowledge's function objects under the member names InputChains::bound calls.
struct Calls {
  const PeerKnowledge& k;
  double expected(int r, int i) const { return k.expected(r, i); }
  bool waiting(int r, int i) const { return k.waiting(r, i); }
  bool has_estimates() const { return static_cast<bool>(k.estimate); }
  double estimate(int r, int i) const { return k.estimate(r, i); }
  double comm;
};

}  // namespace

double InputChains::earliest_input(int q, int index, int owner, double now, const PeerKnowledge& known) const {
  return earliest_input_from(q, index, owner, now, Calls{known, known.comm});
}

bool ReplicaPlan::holds(int owner, int rank) const { return std::isfinite(ready_at(owner, rank)); }

double ReplicaPlan::ready_at(int owner, int rank) const {
  if (holders.empty()) return std::numeric_limits<double>::infinity();
  const auto& h = holders[static_cast<std::size_t>(owner)];
  const auto it = std::find(h.begin(), h.end(), rank);
  return it == h.end() ? std::numeric_limits<double>::infinity()
                       : ready[static_cast<std::size_t>(owner)][static_cast<std::size_t>(it - h.begin())];
}

ReplicaPlan place_replicas(const std::vector<Migration>& migrations, std::vector<double> room) {
  ReplicaPlan plan;
  const int p = static_cast<int>(migrations.size());
  if (p == 0 || !migrations[0].replicas()) return plan;
  plan.holders.resize(static_cast<std::size_t>(p));
  plan.ready.resize(static_cast<std::size_t>(p));
  plan.held.assign(static_cast<std::size_t>(p), 0.0);
  for (int r = 0; r < p; ++r) {
    const Migration& m = migrations[static_cast<std::size_t>(r)];
    if (!m.enabled() || m.replica_bytes() <= 0) continue;
    double sent = 0;
    for (int d = 1; d < p && static_cast<int>(plan.holders[static_cast<std::size_t>(r)].size()) < m.replica_peers();
         ++d) {
      for (const int q : {(r + d) % p, (r - d + p) % p}) {
        const std::size_t k = static_cast<std::size_t>(q);
        auto& mine = plan.holders[static_cast<std::size_t>(r)];
        if (q == r || static_cast<int>(mine.size()) >= m.replica_peers() || plan.holds(r, q)) continue;
        const double need = m.in_memory_units(q, m.replica_bytes());
        if (need > room[k]) continue;
        room[k] -= need;
        plan.held[k] += need;
        mine.push_back(q);
        sent += m.transfer_time(m.replica_bytes());
        plan.ready[static_cast<std::size_t>(r)].push_back(sent);
      }
    }
  }
  return plan;
}

std::vector<Migration> migrations(const plan::Migration& migration, const plan::Costs& costs, int p, int v) {
  std::vector<Migration> out;
  if (!migration.enabled) return out;
  out.reserve(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) out.emplace_back(migration, costs, r, v);
  return out;
}

}  // namespace conductor::sched

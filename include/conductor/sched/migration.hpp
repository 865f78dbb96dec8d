#pragma once
// Computation migration's decision (docs/migration.md), one function shared by every clock: when a rank starts an
// op, it may give k of the op's equal slices (attention head groups, MLP column groups, LM-head vocabulary
// groups) to one idle peer, which computes them while the owner computes the rest; the op ends when both parts
// are in. The engine (engine.cpp) builds the offers from its drivers; the runtime will build them from its
// peers' announcements. Owned by the rank's RankDriver (driver.hpp).
//
// The rule (a baseline, like backfilling's): a peer may help only when it is idle and the help, transfers
// included, ends before its own next op's input is expected (or the peer has finished its step), within its
// memory limit. Among those offers (up to migration.helpers of them) and k = 1 .. max_fraction x slices each,
// the owner takes the split that ends the op earliest, and only if that is earlier than running it alone: the
// owner's predicted finish exceeds the helpers' by more than the transfers cost. With exact estimates (noise-free) the
// help therefore never delays the helper's own next op, and the owner's op ends no later: a strict step is never slower
// than without it.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::sched {

// A peer able to help now.
struct HelpOffer {
  int rank = -1;
  double until = std::numeric_limits<double>::infinity();        // the help must end by then
  double memory_free = std::numeric_limits<double>::infinity();  // M_F the peer may still hold
  double speed = 1.0;    // the peer's time factor for this work (noise; 1 = the cost model's time)
  bool replica = false;  // it holds the owner's weight replicas, refreshed: no weight slices move
};

// One helper's part of a migrated op.
struct HelpPart {
  int helper = -1;
  int slices = 0;
  double helper_compute = 0;  // the helper's compute (at its speed)
  double help_time = 0;       // the helper's part: transfers out, compute, transfers back
  double bytes = 0;           // over the owner-helper link, both directions
  double memory = 0;          // M_F the helper holds while it helps (the bytes in its memory unit)
};

// The decision for one op: helper -1 = the owner runs it alone (then op_time = owner_time = the estimate).
// The first helper's part is in the fields below; with migration.helpers > 1 (the simulator only) `more` holds
// the others.
struct Offload {
  int helper = -1;
  int slices = 0;
  double op_time = 0;         // the op's predicted duration (owner and every helper's part in)
  double owner_time = 0;      // the owner's compute: fixed part and the slices it keeps
  double helper_compute = 0;  // the helper's compute (at its speed)
  double help_time = 0;       // the helper's part: transfers out, compute, transfers back
  double bytes = 0;           // over the owner-helper link, both directions
  double memory = 0;          // M_F the helper holds while it helps (the bytes in its memory unit)
  std::vector<HelpPart> more;
  // Every helper's part, the first one first (empty when alone).
  std::vector<HelpPart> parts() const;
};

class Migration {
 public:
  Migration() = default;  // disabled: decide() always answers "alone"
  // The plan's migration for `rank`'s ops of one chunk (v chunks per rank share its costs evenly); `costs` are
  // the plan's (they weight B and W in a combined BW op).
  Migration(const plan::Migration& migration, const plan::Costs& costs, int rank, int v);

  bool enabled() const { return enabled_; }
  int max_slices() const { return max_slices_; }
  int max_helpers() const { return max_helpers_; }
  // The op of `kind`, estimated to take `estimate` alone, starting at `now`: the offload among `offers` (up to
  // migration.helpers of them, each within its window, memory and max_fraction) that ends the op earliest.
  // How decide() finds the op's earliest end. Direct (the default): with one helper per op, each candidate's
  // best number of slices in closed form, the exact optimum; with several, as Located. Located: the bisection's
  // threshold located where it can be (the bisection's outcome from it, the same to the bit). Bisection: the
  // bisection on the op's end at every midpoint (to 1e-7 of the op's time; the reference the tests hold the
  // others to).
  enum class Search { Direct, Located, Bisection };
  Offload decide(OpKind kind, double now, double estimate, const std::vector<HelpOffer>& offers,
                 Search search = Search::Direct) const;
  // The most slices of the op `offer` can take: within its window and memory, max_fraction and the op's time
  // alone (0: none).
  int most_slices(OpKind kind, double now, double estimate, const HelpOffer& offer) const;
  // The op with `slices` slices on `offer`'s rank (no feasibility check).
  Offload split(OpKind kind, double estimate, int slices, const HelpOffer& offer) const;
  // What a caller may skip before building offers (the engine's shortcut; decisions unchanged). least_help: the
  // fixed transfers of a help with a `kind` op estimated at `estimate` alone, which every help pays, or NaN when
  // decide() answers "alone" whatever the offers (migration off, nothing sliced, or the fixed transfers alone
  // outlast the op). takes_any: whether decide() may give any slice to a peer whose help must end by `until`
  // (false: the very test decide() makes finds no room for the fixed transfers, so that offer takes nothing;
  // with one helper per op such an offer changes nothing and need not be built).
  double least_help(OpKind kind, double estimate) const {  // inline: asked at every op start
    const plan::SliceCosts& c = kinds_[static_cast<std::size_t>(kind)];
    if (!enabled_ || estimate <= 0 || c.sliced_fraction <= 0) return std::numeric_limits<double>::quiet_NaN();
    const double fixed = fixed_time(c);
    // Every offer's bound, min(estimate, window) - fixed, is below 0 (slices_at: no slice).
    return estimate - fixed < 0 ? std::numeric_limits<double>::quiet_NaN() : fixed;
  }
  static bool takes_any(double least_help, double now, double estimate, double until) {
    return std::min(estimate, window(now, until)) - least_help >= 0;
  }

  // Replicas (migration.weights: replicas): whether they are kept, on how many peers, this rank's replica bytes
  // (its whole share, every chunk), a transfer's time over the link, and `bytes` in `rank`'s memory unit (M_F).
  bool replicas() const { return replicas_; }
  int replica_peers() const { return replica_peers_; }
  double replica_bytes() const { return replica_bytes_; }
  double transfer_time(double bytes) const { return bytes / bytes_per_ms_ + latency_ms_; }
  double in_memory_units(int rank, double bytes) const {
    const std::size_t r = static_cast<std::size_t>(rank);
    return r < memory_unit_bytes_.size() && memory_unit_bytes_[r] > 0 ? bytes / memory_unit_bytes_[r] : 0.0;
  }

 private:
  // Bytes per slice moved for `offer` (no weight slices to a replica holder).
  double bytes_per_slice(const plan::SliceCosts& c, const HelpOffer& offer) const {
    return c.bytes_per_slice - (offer.replica ? c.weight_bytes_per_slice : 0.0);
  }
  // The helper's compute and its whole part (transfers out, compute, transfers back) for `slices` slices of an
  // op whose slice takes `slice` on the owner: split() and decide() compute them here alone.
  double helper_compute(const plan::SliceCosts& c, double slice, int slices, const HelpOffer& offer) const {
    return slices * slice * c.helper_factor * offer.speed;
  }
  double help_time(const plan::SliceCosts& c, double slice, int slices, const HelpOffer& offer) const {
    return (c.bytes_fixed + slices * bytes_per_slice(c, offer)) / bytes_per_ms_ + c.messages * latency_ms_ +
           helper_compute(c, slice, slices, offer);
  }
  // The fixed transfers of any help with a `c` op, and an offer's room for its help: reach() and the shortcuts
  // above compute them here alone, so both find the same bits.
  double fixed_time(const plan::SliceCosts& c) const {
    return c.bytes_fixed / bytes_per_ms_ + c.messages * latency_ms_;
  }
  static double window(double now, double until) { return until + 1e-9 - now; }
  // What an offer can take, for one decision: help(k) = fixed + k per_slice must end within its window, and k
  // within cap (max_fraction and its memory). `fixed`: fixed_time(c), the same for every offer of a decision.
  struct Reach {
    double fixed = 0, per_slice = 0, window = 0, cap = 0;
  };
  Reach reach(const plan::SliceCosts& c, double slice, double now, const HelpOffer& offer, double fixed) const;
  // One helper's best split of an op: the k in 1 .. most (most >= 1, within its reach) whose op ends earliest
  // (ties: the fewest), and that end.
  std::pair<int, double> best_slices(const plan::SliceCosts& c, const Reach& r, double estimate, double slice, int most,
                                     const HelpOffer& offer) const;
  // The most slices an offer can take within `tau` ms of help (0: none). Inline: the decision's bisection calls it.
  static int slices_at(const Reach& r, double tau) {
    const double bound = std::min(tau, r.window) - r.fixed;
    if (bound < 0 || r.cap <= 0) return 0;
    // min(cap, floor(y)) for a whole cap; below it, 0 <= y (bound >= 0 and per_slice > 0 where cap > 0), so the
    // integer conversion's truncation is the floor.
    const double y = bound / r.per_slice + 1e-12;
    const double k = y < r.cap ? static_cast<double>(static_cast<long long>(y)) : r.cap;
    return k > 0 ? static_cast<int>(k) : 0;
  }
  // The most slices `r` can take of an op that takes `estimate` alone: within its reach and the op's slices.
  int most_of(const Reach& r, double estimate) const { return std::min(slices_at(r, estimate), slices_); }
  // The least tau in (lo, hi] at which `r` takes k slices, given that it takes fewer at lo and k at hi (NaN when
  // a close guess and a few ulps around it do not find it: the caller evaluates instead).
  static double step_of(const Reach& r, int k, double lo, double hi);
  // decide()'s two ways: one helper per op (the default), and several (or a reference search: migration.cpp).
  Offload decide_one(OpKind kind, double now, double estimate, const std::vector<HelpOffer>& offers,
                     double gain_needed) const;
  class Several;

  bool enabled_ = false;
  int slices_ = 1, max_slices_ = 0, max_helpers_ = 1;
  double bytes_per_ms_ = 0, latency_ms_ = 0;
  bool replicas_ = false;
  int replica_peers_ = 0;
  double replica_bytes_ = 0;
  std::array<plan::SliceCosts, 4> kinds_{};  // per chunk: F, B, W, BW
  std::vector<double> memory_unit_bytes_;    // per rank
};

// What a deciding owner knows of the ranks' progress, in its decision's clock (ms), for the bound below. The
// engine knows every rank's state at once; the runtime knows its peers' last status messages.
struct PeerKnowledge {
  // The announced arrival of rank r's list op i's cross-rank input (NaN: not known).
  std::function<double(int r, int i)> expected;
  // Known not to have started and to wait for its cross-rank input (false: it may start at once).
  std::function<bool(int r, int i)> waiting;
  // Rank r's op i alone (empty: no estimates, so no bound).
  std::function<double(int r, int i)> estimate;
  double comm = 0;  // a transfer's estimate
};

// The producer chain of every list op's cross-rank input (from the schedule's lists) and the earliest arrival of
// a peer's awaited input that follows it: the bound an offer's window comes from (docs/migration.md, "The
// decision"), one function for the simulator, the PPO environment and the runtime.
class InputChains {
 public:
  InputChains() = default;
  explicit InputChains(const Schedule& s);
  // The same chains from their links seen from the producers (what the engine builds anyway): per rank and list
  // op, the list position and rank of its output's cross-rank consumer (-1: none).
  InputChains(const std::vector<std::vector<std::int32_t>>& consumer,
              const std::vector<std::vector<std::int32_t>>& consumer_rank);
  // The earliest arrival of the input rank q's list op `index` waits for, for a help of `owner`'s op decided at
  // `now` (NaN: nothing known): its announced time when known; infinity when its producer is `owner` (its
  // producing op comes after the op being decided, and so after any help of it); else, with estimates, no
  // earlier than the producer's op could end if it started now, or once its own input came (followed up the
  // pipeline, p links at most), plus the transfer. With exact knowledge a lower bound.
  double earliest_input(int q, int index, int owner, double now, const PeerKnowledge& known) const;
  // The same bound on any `known` with PeerKnowledge's members as plain member functions (expected(r, i),
  // waiting(r, i), has_estimates(), estimate(r, i)) and `comm`: the engine's, whose calls are then inlined at
  // every op start instead of going through std::function.
  template <class Known>
  double earliest_input_from(int q, int index, int owner, double now, const Known& known) const {
    return bound(q, index, owner, now, known, static_cast<int>(first_.size()) - 1);
  }
  // Rank q's list op `index`'s place in one array over every rank's list (of size(): the chains keep theirs so;
  // the engine keeps its per-op state beside them).
  std::size_t at(int q, int index) const {
    return first_[static_cast<std::size_t>(q)] + static_cast<std::size_t>(index);
  }
  std::size_t size() const { return links_.size(); }
  // The rank producing rank q's list op `index`'s cross-rank input, or -1.
  int producer(int q, int index) const { return links_[at(q, index)].rank; }
  // And the producing op's position in that rank's list, or -1.
  int producer_op(int q, int index) const { return links_[at(q, index)].position; }

 private:
  template <class Known>
  double bound(int q, int index, int owner, double now, const Known& known, int depth) const {
    const double announced = known.expected(q, index);
    if (!std::isnan(announced)) return announced;
    const Link& link = links_[at(q, index)];
    const int from = link.rank, y = link.position;
    if (from == owner) return std::numeric_limits<double>::infinity();
    if (from < 0 || y < 0 || depth <= 0 || !known.has_estimates()) return std::numeric_limits<double>::quiet_NaN();
    double start = now;
    if (known.waiting(from, y) && producer(from, y) >= 0) {
      const double in = bound(from, y, owner, now, known, depth - 1);
      if (!std::isnan(in)) start = std::max(start, in);  // unknown: it may come at once
    }
    return start + known.estimate(from, y) + known.comm;
  }
  // Per rank and list op (at(q, i), one array for all: the bound reads it at every offer): the producer's rank
  // and the producing op's list position there, or -1, -1.
  struct Link {
    int rank = -1, position = -1;
  };
  void size_lists(const std::vector<std::size_t>& sizes);  // first_ and links_ for lists of these sizes
  std::vector<std::size_t> first_;                         // per rank, its first op's place in links_; then the total
  std::vector<Link> links_;
};

// Where replicas are kept (migration.weights: replicas) and what they cost: per owner, the peers holding its
// weight slices (the nearest in the ring first: rank r+1, r-1, r+2, ...; up to its replica_peers, each with room
// for it), and per rank the M_F it holds. room: per rank, M_F left in its budget after its own schedule's peak
// (infinity: unlimited); a holder's budget for its own ops and its helps shrinks by what it holds. Each owner
// sends its holders their refresh after the optimizer step, one after the other from the step's start (`ready`).
struct ReplicaPlan {
  std::vector<std::vector<int>> holders;   // per owner
  std::vector<std::vector<double>> ready;  // per owner and holder: when the refresh is in (ms from the step's start)
  std::vector<double> held;                // per rank, M_F
  bool holds(int owner, int rank) const;
  double ready_at(int owner, int rank) const;  // infinity where `rank` holds none of `owner`'s
};
ReplicaPlan place_replicas(const std::vector<Migration>& migrations, std::vector<double> room);

// Per rank, the plan's migration (empty when disabled): what ExecOptions::migration takes.
std::vector<Migration> migrations(const plan::Migration& migration, const plan::Costs& costs, int p, int v);

}  // namespace conductor::sched

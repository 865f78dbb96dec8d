#include "conductor/sched/engine.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <queue>
#include <string>
#include <utility>

#include "conductor/sched/validate.hpp"
#include "conductor/util/error.hpp"

namespace conductor::sched {

double ExecResult::max_rank_bubble() const {
  double worst = 0.0;
  for (std::size_t r = 0; r < busy.size(); ++r) {
    if (last_end[r] >= first_start[r]) worst = std::max(worst, last_end[r] - first_start[r] - busy[r]);
  }
  return worst;
}

namespace {

enum class EventType : std::uint8_t { Done = 0, Arrive = 1, Announce = 2, HelpDone = 3, Release = 4 };

struct Event {
  double time;
  std::uint64_t seq;  // insertion order breaks ties deterministically
  EventType type;
  int rank;
  int index;
  int transfer;         // index into transfers (Arrive with record_transfers), else -1
  double expected = 0;  // Announce: when the input is expected
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

// Rank r's configured activation-memory limit (M_F; 0: none), less the replicas it holds (replicas: none when
// null). The drivers' budgets start from it, and a helper's free memory is counted against it.
double rank_limit(const ExecOptions& opt, int r, const ReplicaPlan* replicas) {
  const std::size_t u = static_cast<std::size_t>(r);
  double limit = opt.rank_memory_limit.empty() ? opt.memory_limit : opt.rank_memory_limit.at(u);
  if (replicas && !replicas->held.empty() && limit > 0) limit -= replicas->held[u];
  return limit;
}

// Computation migration's state in the engine: until when each rank helps, when each rank's inputs are expected
// (set when their producer starts), and the memory helpers hold. The bound on a peer's awaited input is the
// shared one (InputChains), on what the engine knows: every rank's state.
class Helpers {
 public:
  // consumer, consumer_rank: per rank and list op, the list position and rank of its output's cross-rank
  // consumer (-1: none), the chains' links seen from the producers.
  Helpers(const ExecOptions& opt, const std::vector<RankDriver>& drivers, const ReplicaPlan& replicas,
          const std::vector<std::vector<std::int32_t>>& consumer,
          const std::vector<std::vector<std::int32_t>>& consumer_rank)
      : opt_(opt), drivers_(drivers), replicas_(replicas), on_(!opt.migration.empty()) {
    if (!on_) return;
    const std::size_t p = drivers.size();
    busy_until_.assign(p, -std::numeric_limits<double>::infinity());
    free_.assign((p + 63) / 64, 0);
    for (std::size_t r = 0; r < p; ++r) free_[r / 64] |= std::uint64_t{1} << (r % 64);
    peak_.assign(p, 0.0);
    limit_.resize(p);
    for (std::size_t r = 0; r < p; ++r) limit_[r] = rank_limit(opt, static_cast<int>(r), &replicas);
    chains_ = InputChains(consumer, consumer_rank);
    expected_.assign(chains_.size(), kUnknown);
    if (opt.estimate) estimates_.assign(chains_.size(), kUnknown);
    comm = opt.comm_estimate;
  }
  Helpers(const Helpers&) = delete;
  Helpers& operator=(const Helpers&) = delete;
  bool on() const { return on_; }
  bool helping(int r, double now) const { return on_ && busy_until_[static_cast<std::size_t>(r)] > now; }
  void expect(int rank, int index, double at) {
    if (on_) expected_[at_op(rank, index)] = at;
  }
  double peak(int r) const { return on_ ? peak_[static_cast<std::size_t>(r)] : 0.0; }

  // Rank r neither runs an op nor helps (free) or it does: kept as bits, so that offers() visits only the free
  // ranks, in rank order, instead of every rank at every op start.
  void set_free(int r, bool free) {
    if (!on_) return;
    const auto u = static_cast<std::size_t>(r);  // unsigned: the shift and the word without a sign's fix-up
    const std::uint64_t bit = std::uint64_t{1} << (u % 64);
    std::uint64_t& word = free_[u / 64];
    word = free ? word | bit : word & ~bit;
  }

  // Every peer of `owner` that can help with `action` (estimated at `estimate` alone) now: idle, not helping,
  // and either done with its step or waiting for an input whose earliest arrival is known (the help must end by
  // then); its free memory. None when the owner's decision answers "alone" whatever the offers; with one helper
  // per op, not the peers whose window cannot hold the help's fixed transfers (the decision gives them nothing,
  // so it is the same without them, and their speed and memory are not looked up).
  const std::vector<HelpOffer>& offers(int owner, const Action& action, double now, double estimate) {
    offers_.clear();
    const Migration& m = drivers_[static_cast<std::size_t>(owner)].migration();
    const double least = m.least_help(action.kind, estimate);
    if (std::isnan(least)) return offers_;
    const double fixed = m.max_helpers() == 1 ? least : -std::numeric_limits<double>::infinity();
    for (std::size_t w = 0; w < free_.size(); ++w) {
      for (std::uint64_t bits = free_[w]; bits != 0; bits &= bits - 1) {
        const int q = static_cast<int>(64 * w) + std::countr_zero(bits);
        offer(q, owner, action, now, estimate, fixed);
      }
    }
    return offers_;
  }
  // offers(): peer q's offer, if it can make one that may take a slice (`fixed`: the help's fixed transfers).
  void offer(int q, int owner, const Action& action, double now, double estimate, double fixed) {
    const RankDriver& d = drivers_[static_cast<std::size_t>(q)];
    if (q == owner || d.running() || helping(q, now)) return;
    HelpOffer o;
    o.rank = q;
    const Arbiter& a = d.arbiter();
    if (!a.finished()) {
      const int next = a.next_in_list();
      if (a.is_ready(next)) return;  // about to run
      const double at = chains_.earliest_input_from(q, next, owner, now, *this);
      if (std::isnan(at)) return;  // nothing known
      o.until = at;
    }
    if (!Migration::takes_any(fixed, now, estimate, o.until)) return;
    if (const double limit = device_limit(q); limit > 0) o.memory_free = limit - a.memory_in_use();
    o.speed = opt_.helper_speed ? opt_.helper_speed(q, action) : 1.0;
    o.replica = !replicas_.holders.empty() && now >= replicas_.ready_at(owner, q);
    offers_.push_back(o);
  }

  // Rank q's memory for helping (M_F): the configured limit less its replicas, not the driver's budget. Backfill
  // budgets a rank's own ops to its list's peak, which orders its forwards; a helper's slices use the device's
  // memory, as under strict execution.
  double device_limit(int q) const { return limit_[static_cast<std::size_t>(q)]; }

  // What the engine knows, for InputChains's bound (PeerKnowledge's members): the announced arrival of rank r's
  // list op i's input, whether that op waits for it, and its estimate (kept: the same every time it is asked).
  double expected(int r, int i) const { return expected_[at_op(r, i)]; }
  bool waiting(int r, int i) const {
    const Arbiter& a = drivers_[static_cast<std::size_t>(r)].arbiter();
    return !a.is_ready(i) && !a.is_started(i);
  }
  bool has_estimates() const { return !estimates_.empty(); }
  double estimate(int r, int i) const {
    double& e = estimates_[at_op(r, i)];
    if (std::isnan(e))
      e = opt_.estimate(r, drivers_[static_cast<std::size_t>(r)].arbiter().actions()[static_cast<std::size_t>(i)]);
    return e;
  }
  double comm = 0;  // a transfer's estimate

  // The helper of `o` starts helping at `now`. `mark`: its free bit is cleared (and set again by a wake-up at
  // the help's end); else it stays set, and offer() tells it is helping by the time.
  void engage(const HelpPart& o, double now, bool mark) {
    const std::size_t q = static_cast<std::size_t>(o.helper);
    busy_until_[q] = now + o.help_time;
    if (mark) set_free(o.helper, false);
    peak_[q] = std::max(peak_[q], drivers_[q].arbiter().memory_in_use() + o.memory);
  }
  double busy_until(int r) const { return busy_until_[static_cast<std::size_t>(r)]; }

 private:
  static constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  const ExecOptions& opt_;
  const std::vector<RankDriver>& drivers_;
  const ReplicaPlan& replicas_;
  bool on_;
  std::vector<double> busy_until_, peak_;
  std::vector<double> limit_;        // per rank, device_limit(): fixed for the step
  std::vector<std::uint64_t> free_;  // set_free()'s bits, rank r at bit r % 64 of word r / 64
  // Per rank and list op, rank r's op i at the chains' at(r, i) (one array each: read at every offer).
  std::size_t at_op(int r, int i) const { return chains_.at(r, i); }
  std::vector<double> expected_;
  InputChains chains_;
  mutable std::vector<double> estimates_;  // per rank and list op (NaN: not asked yet)
  std::vector<HelpOffer> offers_;
};

// Replicas' room: per rank, the M_F its budget leaves after its own list's peak (infinity: unlimited).
std::vector<double> replica_room(const Schedule& s, const ExecOptions& opt) {
  std::vector<double> room(static_cast<std::size_t>(s.p), std::numeric_limits<double>::infinity());
  for (int r = 0; r < s.p; ++r) {
    const double limit = rank_limit(opt, r, nullptr);
    if (limit > 0)
      room[static_cast<std::size_t>(r)] = std::max(0.0, limit - list_peak_memory(s, r, opt.memory_after_b));
  }
  return room;
}

}  // namespace

namespace {

// The input action `index` of rank `r` waits for: its producer's (rank, list position), or (-1, -1).
std::pair<int, int> producer_of(const Schedule& s, const std::vector<RankDriver>& d, int r, int index) {
  const auto in = input_of(s, r, d[static_cast<std::size_t>(r)].arbiter().actions()[static_cast<std::size_t>(index)]);
  if (!in) return {-1, -1};
  const Arbiter& from = d[static_cast<std::size_t>(in->from_rank)].arbiter();
  const int pos = in->payload == Payload::Activation ? from.index_of(OpKind::F, in->from_chunk, in->microbatch)
                                                     : from.backward_index(in->from_chunk, in->microbatch);
  return {in->from_rank, pos};
}

std::string fmt_mem(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

// Why each unfinished rank is stuck; ranks stuck on memory first (they are the cause), then by rank.
std::vector<Stuck> stuck_ranks(const Schedule& s, const std::vector<RankDriver>& d) {
  std::vector<Stuck> out;
  for (int r = 0; r < s.p; ++r) {
    const Arbiter& a = d[static_cast<std::size_t>(r)].arbiter();
    if (a.finished()) continue;
    Stuck st;
    st.rank = r;
    st.position = a.next_in_list();
    const Action& x = a.actions()[static_cast<std::size_t>(st.position)];
    if (a.is_ready(st.position) && !a.fits(st.position)) {
      st.memory = true;
      // Not naming x again: a schedule file's messages name it in the file's own notation (validate.cpp).
      st.reason = "with it, memory in use would be " + fmt_mem(a.memory_in_use() + memory_delta(OpKind::F, s.v, 0.0)) +
                  " M_F, over the limit of " + fmt_mem(a.memory_limit()) + " M_F";
    } else if (const auto [pr, pp] = producer_of(s, d, r, st.position); pr >= 0 && pp >= 0) {
      const Arbiter& b = d[static_cast<std::size_t>(pr)].arbiter();
      const Action& y = b.actions()[static_cast<std::size_t>(pp)];
      const int behind = b.next_in_list();
      st.reason = to_string(x) + " waits for " + to_string(y) + " (stage " + std::to_string(s.stage_of(pr, y.chunk)) +
                  ") on rank " + std::to_string(pr) + ", position " + std::to_string(pp) +
                  ", which waits behind rank " + std::to_string(pr) + "'s position " + std::to_string(behind) + " (" +
                  (behind < b.size() ? to_string(b.actions()[static_cast<std::size_t>(behind)]) : std::string("end")) +
                  "): a circular wait, the lists deadlock";
    } else {
      st.reason = to_string(x) + " never becomes ready (" + std::to_string(a.num_done()) + "/" +
                  std::to_string(a.size()) + " done)";
    }
    out.push_back(std::move(st));
  }
  std::stable_sort(out.begin(), out.end(), [](const Stuck& x, const Stuck& y) { return x.memory && !y.memory; });
  return out;
}

}  // namespace

namespace {

// The drivers of every rank, one per rank, with the engine's options for each (replicas shrink the budget).
std::vector<RankDriver> make_drivers(const Schedule& s, const ExecOptions& opt, const ComputeTimeFn& compute,
                                     const ReplicaPlan& replicas) {
  std::vector<RankDriver> drivers;
  drivers.reserve(static_cast<std::size_t>(s.p));
  for (int r = 0; r < s.p; ++r) {
    DriverOptions d;
    d.execution = opt.execution;
    d.hint = opt.hint;
    d.memory_limit = rank_limit(opt, r, &replicas);
    d.memory_after_b = opt.memory_after_b;
    d.spread = opt.spread;
    d.late_delay = opt.late_delay;
    d.arrival_spread = opt.arrival_spread;
    d.wide_spread = opt.wide_spread;
    if (!opt.migration.empty()) d.migration = opt.migration.at(static_cast<std::size_t>(r));
    if (opt.estimate) {
      d.estimate = [&opt, r](const Action& a) { return opt.estimate(r, a); };
    } else {
      d.estimate = [&compute, r](const Action& a) { return compute(r, a); };
    }
    drivers.emplace_back(s, r, d);
  }
  return drivers;
}

// One execution in virtual time: free ranks pick (in rank order), then every event at the next time is applied
// before anyone picks again. The drivers decide; this loop only keeps the clock, the events and the results.
class EventLoop {
 public:
  EventLoop(const Schedule& s, const ExecOptions& opt, const ComputeTimeFn& compute, const CommTimeFn& comm)
      : s_(s),
        opt_(opt),
        compute_(compute),
        comm_(comm),
        // Replicas (migration.weights: replicas) take their room first: what a rank holds shrinks its own budget.
        replicas_(opt.migration.empty() || !opt.migration[0].replicas()
                      ? ReplicaPlan{}
                      : place_replicas(opt.migration, replica_room(s, opt))),
        drivers_(make_drivers(s, opt, compute, replicas_)),
        announcing_(opt.execution == Execution::Readiness && opt.hint == Hint::Backfill),
        custom_(static_cast<bool>(opt.picker)),
        wake_on_touch_(!announcing_ && !custom_) {
    link_consumers();
    helpers_.emplace(opt, drivers_, replicas_, dest_, dest_rank_);
    for (std::size_t r = 0; r < replicas_.holders.size(); ++r) {
      for (std::size_t j = 0; j < replicas_.holders[r].size(); ++j) {
        res_.refreshes.push_back(ReplicaRefresh{static_cast<int>(r), replicas_.holders[r][j],
                                                opt.migration[r].replica_bytes(), replicas_.ready[r][j]});
      }
    }
    if (custom_) {  // kept only for a custom picker (the policy environment): busy horizons and idle time
      busy_until_.assign(static_cast<std::size_t>(s.p), 0.0);
      view_.ranks = &drivers_;
      view_.busy_until = &busy_until_;
      for (const RankDriver& d : drivers_) view_.total += d.arbiter().size();
    }
  }

  ExecResult run() {
    is_touched_.assign(static_cast<std::size_t>(s_.p), 0);
    for (int r = 0; r < s_.p; ++r) touch(r);
    for (int r = 0; r < static_cast<int>(opt_.release.size()); ++r) {
      if (opt_.release[r] > now_) queue_.push(Event{opt_.release[r], seq_++, EventType::Release, r, -1, -1});
    }
    for (;;) {
      std::sort(touched_.begin(), touched_.end());
      for (int r : touched_) {
        is_touched_[r] = 0;
        pick(r);
      }
      touched_.clear();
      if (queue_.empty()) break;
      if (custom_ && !first_) count_idle();
      now_ = queue_.top().time;
      while (!queue_.empty() && queue_.top().time == now_) {
        const Event e = queue_.top();
        queue_.pop();
        apply(e);
        touch(e.rank);
      }
    }
    return finish();
  }

 private:
  // Per rank and list op: the list position and rank of its output's cross-rank consumer, or -1.
  void link_consumers() {
    const int p = s_.p;
    res_.busy.assign(p, 0.0);
    res_.first_start.assign(p, 0.0);
    res_.last_end.assign(p, 0.0);
    res_.peak_memory.assign(p, 0.0);
    res_.order.assign(p, {});
    if (opt_.record_ops) res_.ops.reserve(s_.num_actions());
    // At most one help per op with one helper (more with several): reserved once, not grown op by op.
    if (!opt_.migration.empty()) res_.migrations.reserve(s_.num_actions());
    dest_.resize(p);
    dest_rank_.resize(p);
    for (int r = 0; r < p; ++r) {
      const Arbiter& a = drivers_[r].arbiter();
      dest_[r].assign(a.size(), -1);
      dest_rank_[r].assign(a.size(), -1);
      for (int i = 0; i < a.size(); ++i) {
        if (auto out = output_of(s_, r, a.actions()[i]); out && !out->local()) {
          dest_[r][i] = drivers_[out->to_rank].arbiter().consumer_of(*out);
          dest_rank_[r][i] = out->to_rank;
        }
      }
      res_.order[r].reserve(a.size());
    }
  }

  void touch(int r) {
    if (!is_touched_[r]) {
      is_touched_[r] = 1;
      touched_.push_back(r);
    }
  }
  bool released(int r) const { return opt_.release.empty() || opt_.release.at(r) <= now_; }

  // A free rank (not running, not helping, its step released) picks its next op, if any, and starts it.
  void pick(int r) {
    RankDriver& drv = drivers_[r];
    if (drv.running() || !released(r)) return;
    if (helpers_->helping(r, now_)) {
      if (wake_on_touch_) wake_after_help(r);
      return;
    }
    int i = -1;
    if (custom_) {
      view_.now = now_;
      i = opt_.picker(r, drv, view_);
      if (i >= 0 && !(drv.arbiter().is_ready(i) && drv.arbiter().fits(i))) {
        throw Error("engine: the picker chose list position " + std::to_string(i) + " on rank " + std::to_string(r) +
                    ", which is not ready or does not fit in memory");
      }
    } else {
      i = drv.next(now_);
    }
    if (i >= 0) start(r, i);
  }

  void start(int r, int i) {
    RankDriver& drv = drivers_[r];
    const OpStart op = drv.start(i, now_);
    helpers_->set_free(r, false);
    const Action& act = drv.arbiter().actions()[i];
    const double dur = compute_(r, act);
    // Alone the op takes `dur` (its estimate `predicted`); with a helper, the longer of the owner's part (its
    // share of `dur`) and the helper's (transfers and slices at the helper's speed).
    const bool predict = helpers_->on() || (announcing_ && dest_[r][i] >= 0);
    double busy = dur, took = dur, predicted = dur;
    if (predict && opt_.estimate)
      predicted = helpers_->has_estimates() ? helpers_->estimate(r, i) : opt_.estimate(r, act);
    if (helpers_->on()) offload(r, i, act, dur, busy, took, predicted);
    if (first_) {
      res_.start = now_;
      first_ = false;
    }
    if (opt_.record_ops) {
      // With a release time, the rank's idle time before it belongs to the previous step.
      const double from = opt_.release.empty() ? op.ready : opt_.release[r];
      res_.ops.push_back(OpTiming{r, i, std::max(op.ready, from), now_, now_ + took,
                                  opt_.release.empty() ? op.wait : std::min(op.wait, now_ - from)});
    }
    res_.order[r].push_back(i);
    res_.busy[r] += busy;
    if (custom_) {
      busy_until_[r] = now_ + took;
      view_.horizon = std::max(view_.horizon, now_ + took);
    }
    queue_.push(Event{now_ + took, seq_++, EventType::Done, r, i, -1});
    if (dest_[r][i] >= 0 && (announcing_ || helpers_->on())) {
      const int to = dest_rank_[r][i];
      const double expected = now_ + predicted + opt_.comm_estimate;
      helpers_->expect(to, dest_[r][i], expected);
      if (announcing_) {
        queue_.push(Event{now_ + opt_.announce_latency, seq_++, EventType::Announce, to, dest_[r][i], -1, expected});
      }
    }
  }

  // Migration: the driver's offload decision for rank r's op i, and every helper's part engaged. Updates the
  // owner's busy time and the op's time (took) and predicted time.
  void offload(int r, int i, const Action& act, double dur, double& busy, double& took, double& predicted) {
    const std::vector<HelpOffer>& offers = helpers_->offers(r, act, now_, predicted);
    if (offers.empty()) return;  // the decision would answer "alone"
    const Offload o = drivers_[r].offload(i, now_, predicted, offers);
    if (o.helper < 0) return;
    busy = took = predicted > 0 ? o.owner_time * dur / predicted : 0.0;
    predicted = o.op_time;
    // Every helper's part, the first one first (Offload::parts(), without building the list).
    const auto help = [&](const HelpPart& h) {
      took = std::max(took, h.help_time);
      helpers_->engage(h, now_, !wake_on_touch_);
      res_.busy[h.helper] += h.helper_compute;
      res_.migrations.push_back(
          MigrationTiming{r, i, h.helper, h.slices, now_, now_ + h.help_time, h.bytes, h.helper_compute});
      if (!wake_on_touch_) queue_.push(Event{now_ + h.help_time, seq_++, EventType::HelpDone, h.helper, -1, -1});
    };
    help(HelpPart{o.helper, o.slices, o.helper_compute, o.help_time, o.bytes, o.memory});
    for (const HelpPart& h : o.more) help(h);
  }

  // A rank reached (touched) while it helps picks when the help ends: one HelpDone for it, queued once.
  void wake_after_help(int r) {
    if (wake_pending_.empty()) wake_pending_.assign(static_cast<std::size_t>(s_.p), 0);
    if (wake_pending_[r]) return;
    wake_pending_[r] = 1;
    queue_.push(Event{helpers_->busy_until(r), seq_++, EventType::HelpDone, r, -1, -1});
  }

  // The custom picker's idle time: ranks neither running nor helping until the next event.
  void count_idle() {
    int idle_ranks = 0;
    for (int q = 0; q < s_.p; ++q) {
      // With release times (overlapping steps) a rank before its release or done with its ops is in its
      // previous or next step, not idle in this one.
      const bool elsewhere =
          !opt_.release.empty() && (!released(q) || drivers_[q].arbiter().num_done() == drivers_[q].arbiter().size());
      idle_ranks += drivers_[q].running() || helpers_->helping(q, now_) || elsewhere ? 0 : 1;
    }
    view_.idle += idle_ranks * (queue_.top().time - now_);
  }

  void apply(const Event& e) {
    if (e.type == EventType::Done) {
      drivers_[e.rank].complete(e.index, now_);
      helpers_->set_free(e.rank, !drivers_[e.rank].running());  // a rank that runs an op never helps
      ++view_.done;
      res_.end = std::max(res_.end, now_);
      if (const int consumer = dest_[e.rank][e.index]; consumer >= 0) {
        const auto out = output_of(s_, e.rank, drivers_[e.rank].arbiter().actions()[e.index]);
        int tidx = -1;
        const double arrive = now_ + comm_(*out);
        if (opt_.record_transfers) {
          tidx = static_cast<int>(res_.transfers.size());
          res_.transfers.push_back(TransferTiming{*out, now_, arrive});
        }
        queue_.push(Event{arrive, seq_++, EventType::Arrive, out->to_rank, consumer, tidx});
      }
    } else if (e.type == EventType::Arrive) {
      drivers_[e.rank].input_arrived(e.index, now_);
    } else if (e.type == EventType::HelpDone) {
      if (wake_on_touch_) wake_pending_[e.rank] = 0;
      helpers_->set_free(e.rank, !drivers_[e.rank].running());
    } else if (e.type == EventType::Announce) {
      drivers_[e.rank].announce(e.index, e.expected, now_);
    }
    // Release: the rank's step may start; touched by the loop, so it picks.
  }

  ExecResult finish() {
    for (int r = 0; r < s_.p; ++r) {
      res_.peak_memory[r] = std::max(drivers_[r].arbiter().peak_memory(), helpers_->peak(r)) +
                            (replicas_.held.empty() ? 0.0 : replicas_.held[static_cast<std::size_t>(r)]);
      res_.first_start[r] = drivers_[r].started_any() ? drivers_[r].first_start() : 0.0;
      res_.last_end[r] = drivers_[r].started_any() ? drivers_[r].last_end() : 0.0;
    }
    std::vector<Stuck> stuck = stuck_ranks(s_, drivers_);
    if (!stuck.empty()) {
      std::string what = "schedule '" + s_.name + "' deadlocks under " + to_string(opt_.execution) +
                         " execution (memory limit " + std::to_string(opt_.memory_limit) + " M_F):";
      for (const Stuck& st : stuck) {
        what +=
            " rank " + std::to_string(st.rank) + " at position " + std::to_string(st.position) + ": " + st.reason + ";";
      }
      throw DeadlockError(what, std::move(stuck));
    }
    return std::move(res_);
  }

  const Schedule& s_;
  const ExecOptions& opt_;
  const ComputeTimeFn& compute_;
  const CommTimeFn& comm_;
  const ReplicaPlan replicas_;
  std::vector<RankDriver> drivers_;
  const bool announcing_, custom_;
  // A helper picks again when its help ends (a HelpDone event). Where its pick depends only on its own events (not
  // on the clock: strict, and the readiness rankings but backfill, which ranks by the time left to an input, and
  // no custom picker), one is needed only if something reached it while it helped: its pick at the end is then
  // the one the event would have made, and most helps, which end before the helper's input comes, push and pop
  // no event.
  const bool wake_on_touch_;
  std::vector<char> wake_pending_;  // per rank: a HelpDone is queued for its current help (wake_on_touch_)
  std::vector<std::vector<std::int32_t>> dest_, dest_rank_;  // see link_consumers()
  std::optional<Helpers> helpers_;                           // needs dest_ and dest_rank_ (its chains' links)
  ExecResult res_;
  std::vector<double> busy_until_;
  EngineView view_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  std::uint64_t seq_ = 0;
  std::vector<int> touched_;
  std::vector<char> is_touched_;
  double now_ = 0.0;
  bool first_ = true;
};

}  // namespace

ExecResult execute(const Schedule& s, const ExecOptions& opt, const ComputeTimeFn& compute, const CommTimeFn& comm) {
  return EventLoop(s, opt, compute, comm).run();
}

Schedule realized(const Schedule& s, const ExecResult& result) {
  Schedule out = s;
  for (int r = 0; r < s.p; ++r) {
    out.ranks[r].clear();
    for (int i : result.order[r]) out.ranks[r].push_back(s.ranks[r][i]);
  }
  return out;
}

}  // namespace conductor::sched

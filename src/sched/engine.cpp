#include "conductor/sched/engine.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
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
    expected_.resize(p);
    for (std::size_t r = 0; r < p; ++r) expected_[r].assign(drivers[r].arbiter().actions().size(), kUnknown);
    chains_ = InputChains(consumer, consumer_rank);
    if (opt.estimate) {
      estimates_.resize(p);
      for (std::size_t r = 0; r < p; ++r) estimates_[r].assign(drivers[r].arbiter().actions().size(), kUnknown);
    }
    comm = opt.comm_estimate;
  }
  Helpers(const Helpers&) = delete;
  Helpers& operator=(const Helpers&) = delete;
  bool on() const { return on_; }
  bool helping(int r, double now) const { return on_ && busy_until_[static_cast<std::size_t>(r)] > now; }
  void expect(int rank, int index, double at) {
    if (on_) expected_[static_cast<std::size_t>(rank)][static_cast<std::size_t>(index)] = at;
  }
  double peak(int r) const { return on_ ? peak_[static_cast<std::size_t>(r)] : 0.0; }

  // Rank r neither runs an op nor helps (free) or it does: kept as bits, so that offers() visits only the free
  // ranks, in rank order, instead of every rank at every op start.
  void set_free(int r, bool free) {
    if (!on_) return;
    const std::uint64_t bit = std::uint64_t{1} << (r % 64);
    std::uint64_t& word = free_[static_cast<std::size_t>(r / 64)];
    word = free ? word | bit : word & ~bit;
  }

  // Every peer of `owner` that can help with `action` now: idle, not helping, and either done with its step or
  // waiting for an input whose earliest arrival is known (the help must end by then); its free memory.
  const std::vector<HelpOffer>& offers(int owner, const Action& action, double now) {
    offers_.clear();
    for (std::size_t w = 0; w < free_.size(); ++w) {
      for (std::uint64_t bits = free_[w]; bits != 0; bits &= bits - 1) {
        const int q = static_cast<int>(64 * w) + std::countr_zero(bits);
        offer(q, owner, action, now);
      }
    }
    return offers_;
  }
  // offers(): peer q's offer, if it can make one.
  void offer(int q, int owner, const Action& action, double now) {
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
    if (a.memory_limit() > 0) o.memory_free = a.memory_limit() - a.memory_in_use();
    o.speed = opt_.helper_speed ? opt_.helper_speed(q, action) : 1.0;
    o.replica = now >= replicas_.ready_at(owner, q);
    offers_.push_back(o);
  }

  // What the engine knows, for InputChains's bound (PeerKnowledge's members): the announced arrival of rank r's
  // list op i's input, whether that op waits for it, and its estimate (kept: the same every time it is asked).
  double expected(int r, int i) const { return expected_[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)]; }
  bool waiting(int r, int i) const {
    const Arbiter& a = drivers_[static_cast<std::size_t>(r)].arbiter();
    return !a.is_ready(i) && !a.is_started(i);
  }
  bool has_estimates() const { return !estimates_.empty(); }
  double estimate(int r, int i) const {
    double& e = estimates_[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
    if (std::isnan(e))
      e = opt_.estimate(r, drivers_[static_cast<std::size_t>(r)].arbiter().actions()[static_cast<std::size_t>(i)]);
    return e;
  }
  double comm = 0;  // a transfer's estimate

  // The helper of `o` starts helping at `now`.
  void engage(const HelpPart& o, double now) {
    const std::size_t q = static_cast<std::size_t>(o.helper);
    busy_until_[q] = now + o.help_time;
    set_free(o.helper, false);
    peak_[q] = std::max(peak_[q], drivers_[q].arbiter().memory_in_use() + o.memory);
  }

 private:
  static constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  const ExecOptions& opt_;
  const std::vector<RankDriver>& drivers_;
  const ReplicaPlan& replicas_;
  bool on_;
  std::vector<double> busy_until_, peak_;
  std::vector<std::uint64_t> free_;  // set_free()'s bits, rank r at bit r % 64 of word r / 64
  std::vector<std::vector<double>> expected_;
  InputChains chains_;
  mutable std::vector<std::vector<double>> estimates_;  // per rank and list op (NaN: not asked yet)
  std::vector<HelpOffer> offers_;
};

// Replicas' room: per rank, the M_F its budget leaves after its own list's peak (infinity: unlimited).
std::vector<double> replica_room(const Schedule& s, const ExecOptions& opt) {
  std::vector<double> room(static_cast<std::size_t>(s.p), std::numeric_limits<double>::infinity());
  for (int r = 0; r < s.p; ++r) {
    const double limit =
        opt.rank_memory_limit.empty() ? opt.memory_limit : opt.rank_memory_limit.at(static_cast<std::size_t>(r));
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
      st.reason = "memory in use " + fmt_mem(a.memory_in_use() + memory_delta(OpKind::F, s.v, 0.0)) + " M_F after " +
                  to_string(x) + " exceeds the limit of " + fmt_mem(a.memory_limit()) + " M_F";
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

ExecResult execute(const Schedule& s, const ExecOptions& opt, const ComputeTimeFn& compute, const CommTimeFn& comm) {
  const int p = s.p;
  // Replicas (migration.weights: replicas) take their room first: what a rank holds shrinks its own budget.
  const ReplicaPlan replicas = opt.migration.empty() || !opt.migration[0].replicas()
                                   ? ReplicaPlan{}
                                   : place_replicas(opt.migration, replica_room(s, opt));
  std::vector<RankDriver> drivers;
  drivers.reserve(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    DriverOptions d;
    d.execution = opt.execution;
    d.hint = opt.hint;
    d.memory_limit =
        opt.rank_memory_limit.empty() ? opt.memory_limit : opt.rank_memory_limit.at(static_cast<std::size_t>(r));
    if (!replicas.held.empty() && d.memory_limit > 0) d.memory_limit -= replicas.held[static_cast<std::size_t>(r)];
    d.memory_after_b = opt.memory_after_b;
    d.spread = opt.spread;
    d.late_delay = opt.late_delay;
    if (!opt.migration.empty()) d.migration = opt.migration.at(static_cast<std::size_t>(r));
    if (opt.estimate) {
      d.estimate = [&opt, r](const Action& a) { return opt.estimate(r, a); };
    } else {
      d.estimate = [&compute, r](const Action& a) { return compute(r, a); };
    }
    drivers.emplace_back(s, r, d);
  }

  ExecResult res;
  res.busy.assign(p, 0.0);
  res.first_start.assign(p, 0.0);
  res.last_end.assign(p, 0.0);
  res.peak_memory.assign(p, 0.0);
  res.order.assign(p, {});
  if (opt.record_ops) res.ops.reserve(s.num_actions());
  // Cross-rank consumer of each action's output (list index on the destination rank), or -1.
  // dest_rank: that consumer's rank.
  std::vector<std::vector<std::int32_t>> dest(p), dest_rank(p);
  for (int r = 0; r < p; ++r) {
    const Arbiter& a = drivers[r].arbiter();
    dest[r].assign(a.size(), -1);
    dest_rank[r].assign(a.size(), -1);
    for (int i = 0; i < a.size(); ++i) {
      if (auto out = output_of(s, r, a.actions()[i]); out && !out->local()) {
        dest[r][i] = drivers[out->to_rank].arbiter().consumer_of(*out);
        dest_rank[r][i] = out->to_rank;
      }
    }
    res.order[r].reserve(a.size());
  }
  const bool announcing = opt.execution == Execution::Readiness && opt.hint == Hint::Backfill;
  Helpers helpers(opt, drivers, replicas, dest, dest_rank);
  for (std::size_t r = 0; r < replicas.holders.size(); ++r) {
    for (std::size_t j = 0; j < replicas.holders[r].size(); ++j) {
      res.refreshes.push_back(ReplicaRefresh{static_cast<int>(r), replicas.holders[r][j],
                                             opt.migration[r].replica_bytes(), replicas.ready[r][j]});
    }
  }
  // Kept only for a custom picker (the policy environment): busy horizons and idle time.
  const bool custom = static_cast<bool>(opt.picker);
  std::vector<double> busy_until(custom ? p : 0, 0.0);
  EngineView view;
  if (custom) {
    view.ranks = &drivers;
    view.busy_until = &busy_until;
    for (int r = 0; r < p; ++r) view.total += drivers[r].arbiter().size();
  }

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue;
  std::uint64_t seq = 0;
  std::vector<int> touched;
  std::vector<char> is_touched(p, 0);
  auto touch = [&](int r) {
    if (!is_touched[r]) {
      is_touched[r] = 1;
      touched.push_back(r);
    }
  };

  double now = 0.0;
  for (int r = 0; r < p; ++r) touch(r);
  const auto released = [&](int r) { return opt.release.empty() || opt.release.at(r) <= now; };
  for (int r = 0; r < static_cast<int>(opt.release.size()); ++r) {
    if (opt.release[r] > now) queue.push(Event{opt.release[r], seq++, EventType::Release, r, -1, -1});
  }
  bool first = true;
  for (;;) {
    // Free ranks pick, in rank order.
    std::sort(touched.begin(), touched.end());
    for (int r : touched) {
      is_touched[r] = 0;
      RankDriver& drv = drivers[r];
      if (drv.running() || helpers.helping(r, now) || !released(r)) continue;
      int i = -1;
      if (custom) {
        view.now = now;
        i = opt.picker(r, drv, view);
        if (i >= 0 && !(drv.arbiter().is_ready(i) && drv.arbiter().fits(i))) {
          throw Error("engine: the picker chose list position " + std::to_string(i) + " on rank " + std::to_string(r) +
                      ", which is not ready or does not fit in memory");
        }
      } else {
        i = drv.next(now);
      }
      if (i < 0) continue;
      const OpStart op = drv.start(i, now);
      helpers.set_free(r, false);
      const Action& act = drv.arbiter().actions()[i];
      const double dur = compute(r, act);
      // Alone the op takes `dur` (its estimate `predicted`); with a helper, the longer of the owner's part (its
      // share of `dur`) and the helper's (transfers and slices at the helper's speed).
      const bool predict = helpers.on() || (announcing && dest[r][i] >= 0);
      double busy = dur, took = dur, predicted = dur;
      if (predict && opt.estimate) predicted = helpers.has_estimates() ? helpers.estimate(r, i) : opt.estimate(r, act);
      if (helpers.on()) {
        const Offload o = drv.offload(i, now, predicted, helpers.offers(r, act, now));
        if (o.helper >= 0) {
          busy = took = predicted > 0 ? o.owner_time * dur / predicted : 0.0;
          predicted = o.op_time;
          // Every helper's part, the first one first (Offload::parts(), without building the list).
          const auto help = [&](const HelpPart& h) {
            took = std::max(took, h.help_time);
            helpers.engage(h, now);
            res.busy[h.helper] += h.helper_compute;
            res.migrations.push_back(
                MigrationTiming{r, i, h.helper, h.slices, now, now + h.help_time, h.bytes, h.helper_compute});
            queue.push(Event{now + h.help_time, seq++, EventType::HelpDone, h.helper, -1, -1});
          };
          help(HelpPart{o.helper, o.slices, o.helper_compute, o.help_time, o.bytes, o.memory});
          for (const HelpPart& h : o.more) help(h);
        }
      }
      if (first) {
        res.start = now;
        first = false;
      }
      if (opt.record_ops) {
        // With a release time, the rank's idle time before it belongs to the previous step.
        const double from = opt.release.empty() ? op.ready : opt.release[r];
        res.ops.push_back(OpTiming{r, i, std::max(op.ready, from), now, now + took,
                                   opt.release.empty() ? op.wait : std::min(op.wait, now - from)});
      }
      res.order[r].push_back(i);
      res.busy[r] += busy;
      if (custom) {
        busy_until[r] = now + took;
        view.horizon = std::max(view.horizon, now + took);
      }
      queue.push(Event{now + took, seq++, EventType::Done, r, i, -1});
      if (dest[r][i] >= 0 && (announcing || helpers.on())) {
        const int to = dest_rank[r][i];
        const double expected = now + predicted + opt.comm_estimate;
        helpers.expect(to, dest[r][i], expected);
        if (announcing) {
          queue.push(Event{now + opt.announce_latency, seq++, EventType::Announce, to, dest[r][i], -1, expected});
        }
      }
    }
    touched.clear();
    if (queue.empty()) break;
    if (custom && !first) {
      int idle_ranks = 0;
      for (int q = 0; q < p; ++q) {
        // With release times (overlapping steps) a rank before its release or done with its ops is in its
        // previous or next step, not idle in this one.
        const bool elsewhere =
            !opt.release.empty() && (!released(q) || drivers[q].arbiter().num_done() == drivers[q].arbiter().size());
        idle_ranks += drivers[q].running() || helpers.helping(q, now) || elsewhere ? 0 : 1;
      }
      view.idle += idle_ranks * (queue.top().time - now);
    }
    now = queue.top().time;
    // Apply every event at this time before anyone picks.
    while (!queue.empty() && queue.top().time == now) {
      const Event e = queue.top();
      queue.pop();
      if (e.type == EventType::Done) {
        drivers[e.rank].complete(e.index, now);
        helpers.set_free(e.rank, !drivers[e.rank].running());  // a rank that runs an op never helps
        ++view.done;
        res.end = std::max(res.end, now);
        if (const int consumer = dest[e.rank][e.index]; consumer >= 0) {
          const auto out = output_of(s, e.rank, drivers[e.rank].arbiter().actions()[e.index]);
          int tidx = -1;
          const double arrive = now + comm(*out);
          if (opt.record_transfers) {
            tidx = static_cast<int>(res.transfers.size());
            res.transfers.push_back(TransferTiming{*out, now, arrive});
          }
          queue.push(Event{arrive, seq++, EventType::Arrive, out->to_rank, consumer, tidx});
        }
      } else if (e.type == EventType::Arrive) {
        drivers[e.rank].input_arrived(e.index, now);
      } else if (e.type == EventType::HelpDone || e.type == EventType::Release) {
        if (e.type == EventType::HelpDone) helpers.set_free(e.rank, !drivers[e.rank].running());
        // The helper is free again, or the rank's step may start: touched below, so it picks.
      } else {
        drivers[e.rank].announce(e.index, e.expected, now);
      }
      touch(e.rank);
    }
  }

  for (int r = 0; r < p; ++r) {
    res.peak_memory[r] = std::max(drivers[r].arbiter().peak_memory(), helpers.peak(r)) +
                         (replicas.held.empty() ? 0.0 : replicas.held[static_cast<std::size_t>(r)]);
    res.first_start[r] = drivers[r].started_any() ? drivers[r].first_start() : 0.0;
    res.last_end[r] = drivers[r].started_any() ? drivers[r].last_end() : 0.0;
  }
  std::vector<Stuck> stuck = stuck_ranks(s, drivers);
  if (!stuck.empty()) {
    std::string what = "schedule '" + s.name + "' deadlocks under " + to_string(opt.execution) +
                       " execution (memory limit " + std::to_string(opt.memory_limit) + " M_F):";
    for (const Stuck& st : stuck) {
      what +=
          " rank " + std::to_string(st.rank) + " at position " + std::to_string(st.position) + ": " + st.reason + ";";
    }
    throw DeadlockError(what, std::move(stuck));
  }
  return res;
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

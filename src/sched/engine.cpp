#include "conductor/sched/engine.hpp"

#include <algorithm>
#include <queue>
#include <string>

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

enum class EventType : std::uint8_t { Done = 0, Arrive = 1 };

struct Event {
  double time;
  std::uint64_t seq;  // insertion order breaks ties deterministically
  EventType type;
  int rank;
  int index;
  int transfer;  // index into transfers (Arrive with record_transfers), else -1
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

}  // namespace

ExecResult execute(const Schedule& s, const ExecOptions& opt, const ComputeTimeFn& compute, const CommTimeFn& comm) {
  const int p = s.p;
  std::vector<RankState> st;
  st.reserve(p);
  for (int r = 0; r < p; ++r) {
    const double limit = opt.rank_memory_limit.empty() ? opt.memory_limit : opt.rank_memory_limit.at(r);
    st.emplace_back(s, r, limit, opt.memory_after_b);
  }

  ExecResult res;
  res.busy.assign(p, 0.0);
  res.first_start.assign(p, 0.0);
  res.last_end.assign(p, 0.0);
  res.peak_memory.assign(p, 0.0);
  res.order.assign(p, {});
  if (opt.record_ops) res.ops.reserve(s.num_actions());
  // Cross-rank consumer of each action's output (list index on the destination rank), or -1.
  std::vector<std::vector<std::int32_t>> dest(p);
  for (int r = 0; r < p; ++r) {
    dest[r].assign(st[r].size(), -1);
    for (int i = 0; i < st[r].size(); ++i) {
      if (auto out = output_of(s, r, st[r].actions()[i]); out && !out->local())
        dest[r][i] = st[out->to_rank].consumer_of(*out);
    }
  }
  std::vector<std::vector<double>> ready_at(p);
  for (int r = 0; r < p; ++r) {
    ready_at[r].assign(st[r].size(), 0.0);
    res.order[r].reserve(st[r].size());
  }
  std::vector<char> running(p, 0);
  std::vector<double> free_since(p, 0.0);
  std::vector<char> started_any(p, 0);
  // Kept only for a custom picker (the policy environment): ready lists, busy horizons, idle time.
  const bool custom = static_cast<bool>(opt.picker);
  std::vector<std::vector<int>> ready(custom ? p : 0);
  std::vector<double> busy_until(custom ? p : 0, 0.0);
  EngineView view;
  if (custom) {
    view.ranks = &st;
    view.running = &running;
    view.free_since = &free_since;
    view.busy_until = &busy_until;
    view.ready_at = &ready_at;
    view.ready = &ready;
    for (int r = 0; r < p; ++r) view.total += st[r].size();
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
  auto stamp_ready = [&](int r, double t) {
    for (int i : st[r].newly_ready()) {
      ready_at[r][i] = t;
      if (custom) ready[r].push_back(i);
    }
    st[r].clear_newly_ready();
  };

  double now = 0.0;
  for (int r = 0; r < p; ++r) {
    stamp_ready(r, 0.0);
    touch(r);
  }
  bool first = true;
  for (;;) {
    // Free ranks pick, in rank order.
    std::sort(touched.begin(), touched.end());
    for (int r : touched) {
      is_touched[r] = 0;
      if (running[r]) continue;
      int i = -1;
      if (custom) {
        view.now = now;
        i = opt.picker(r, view);
        if (i >= 0) {
          const auto it = std::find(ready[r].begin(), ready[r].end(), i);
          if (it == ready[r].end() || !st[r].fits(i)) {
            throw Error("engine: the picker chose list position " + std::to_string(i) + " on rank " +
                        std::to_string(r) + ", which is not ready or does not fit in memory");
          }
          ready[r].erase(it);
        }
      } else {
        i = st[r].pick(opt.execution, opt.hint);
      }
      if (i < 0) continue;
      st[r].start(i);
      const Action& a = st[r].actions()[i];
      const double dur = compute(r, a);
      OpTiming op;
      op.rank = r;
      op.index = i;
      op.ready = ready_at[r][i];
      op.start = now;
      op.end = now + dur;
      op.wait = started_any[r] ? now - free_since[r] : now;
      if (!started_any[r]) res.first_start[r] = now;
      if (first) {
        res.start = now;
        first = false;
      }
      started_any[r] = 1;
      running[r] = 1;
      if (opt.record_ops) res.ops.push_back(op);
      res.order[r].push_back(i);
      res.busy[r] += dur;
      if (custom) {
        busy_until[r] = op.end;
        view.horizon = std::max(view.horizon, op.end);
      }
      queue.push(Event{op.end, seq++, EventType::Done, r, i, -1});
    }
    touched.clear();
    if (queue.empty()) break;
    if (custom && !first) {
      int idle_ranks = 0;
      for (int q = 0; q < p; ++q) idle_ranks += running[q] ? 0 : 1;
      view.idle += idle_ranks * (queue.top().time - now);
    }
    now = queue.top().time;
    // Apply every event at this time before anyone picks.
    while (!queue.empty() && queue.top().time == now) {
      const Event e = queue.top();
      queue.pop();
      if (e.type == EventType::Done) {
        RankState& rs = st[e.rank];
        rs.complete(e.index);
        ++view.done;
        running[e.rank] = 0;
        free_since[e.rank] = now;
        res.last_end[e.rank] = now;
        res.end = std::max(res.end, now);
        const Action& a = rs.actions()[e.index];
        if (const int consumer = dest[e.rank][e.index]; consumer >= 0) {
          const auto out = output_of(s, e.rank, a);
          {
            int tidx = -1;
            const double arrive = now + comm(*out);
            if (opt.record_transfers) {
              tidx = static_cast<int>(res.transfers.size());
              res.transfers.push_back(TransferTiming{*out, now, arrive});
            }
            queue.push(Event{arrive, seq++, EventType::Arrive, out->to_rank, consumer, tidx});
          }
        }
        stamp_ready(e.rank, now);
        touch(e.rank);
      } else {
        st[e.rank].input_arrived(e.index);
        stamp_ready(e.rank, now);
        touch(e.rank);
      }
    }
  }

  std::string stuck;
  for (int r = 0; r < p; ++r) {
    res.peak_memory[r] = st[r].peak_memory();
    if (!st[r].finished()) {
      const int next = st[r].next_in_list();
      stuck += " rank " + std::to_string(r) + " at position " + std::to_string(next) + " (" +
               (next < st[r].size() ? to_string(st[r].actions()[next]) : std::string("end")) + ", " +
               std::to_string(st[r].num_done()) + "/" + std::to_string(st[r].size()) + " done);";
    }
  }
  if (!stuck.empty()) {
    throw Error("schedule '" + s.name + "' deadlocks under " + to_string(opt.execution) + " execution (memory limit " +
                std::to_string(opt.memory_limit) + " M_F):" + stuck);
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

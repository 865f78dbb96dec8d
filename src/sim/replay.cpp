#include "conductor/sim/replay.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>

#include "conductor/util/error.hpp"

namespace conductor::sim {

namespace {

enum class What : std::int8_t { Arrive = 0, End = 1, Announce = 2, Start = 3 };

struct Item {
  std::int64_t time;
  What what;  // at equal times arrivals, ends and announcements come before starts: the runtime picks after them
  int index;  // list position on the rank
  std::int64_t expected = 0;  // Announce: the announced arrival
  bool operator<(const Item& o) const { return std::tie(time, what, index) < std::tie(o.time, o.what, o.index); }
};

bool is_compute(trace::EventKind k) { return static_cast<int>(k) <= static_cast<int>(trace::EventKind::BW); }

// The list position that consumes a RECV on rank r (see the header for the activation-first rule).
int consumer_of_recv(const sched::Schedule& s, const sched::Arbiter& a, int r, const trace::OpEvent& e,
                     std::map<std::pair<int, int>, int>& seen) {
  const int stage = e.stage, S = s.num_stages();
  const bool activation = stage > 0 && s.rank_of(stage - 1) == e.peer && s.rank_of(stage - 1) != r;
  const bool gradient = stage + 1 < S && s.rank_of(stage + 1) == e.peer && s.rank_of(stage + 1) != r;
  const int nth = seen[{stage, e.microbatch}]++;
  const bool is_activation = activation && (!gradient || nth == 0);
  if (!activation && !gradient) return -1;
  return is_activation ? a.index_of(sched::OpKind::F, e.chunk, e.microbatch) : a.backward_index(e.chunk, e.microbatch);
}

std::string where(int step, int rank, std::int64_t t, std::int64_t t0) {
  return "step " + std::to_string(step) + ", rank " + std::to_string(rank) + ", t = " + std::to_string(t - t0) + " ns";
}

}  // namespace

ReplayResult replay_step(const sched::Schedule& order, const std::vector<sched::DriverOptions>& options,
                         const std::vector<trace::OpEvent>& events, int step) {
  ReplayResult res;
  std::int64_t t0 = INT64_MAX;
  for (const auto& e : events) {
    if (e.step == step) t0 = std::min(t0, std::min(e.start_ns, e.ready_ns));
  }
  for (int r = 0; r < order.p; ++r) {
    sched::RankDriver driver(order, r, options.at(static_cast<std::size_t>(r)));
    const sched::Arbiter& a = driver.arbiter();
    std::vector<Item> items;
    std::map<std::pair<int, int>, int> recv_seen;
    std::vector<const trace::OpEvent*> recvs, announces;
    for (const auto& e : events) {
      if (e.step != step || e.rank != r) continue;
      if (e.kind == trace::EventKind::RECV) recvs.push_back(&e);
      if (e.kind == trace::EventKind::ANNOUNCE) announces.push_back(&e);
      if (!is_compute(e.kind)) continue;
      const int i = a.index_of(static_cast<sched::OpKind>(e.kind), e.chunk, e.microbatch);
      if (i < 0) throw InputError("replay: " + where(step, r, e.start_ns, t0) + ": the trace's op is not in the order");
      items.push_back({e.start_ns, What::Start, i});
      items.push_back({e.end_ns, What::End, i});
    }
    std::stable_sort(recvs.begin(), recvs.end(), [](auto* x, auto* y) { return x->end_ns < y->end_ns; });
    for (const auto* e : recvs) {
      const int i = consumer_of_recv(order, a, r, *e, recv_seen);
      if (i < 0) throw InputError("replay: " + where(step, r, e->end_ns, t0) + ": a RECV no op of the order consumes");
      items.push_back({e->end_ns, What::Arrive, i});
    }
    // Announcements: the activation's producer starts before the gradient's (causality, as for arrivals), so
    // ordering them by their producer's start gives the same activation-first rule.
    std::stable_sort(announces.begin(), announces.end(), [](auto* x, auto* y) { return x->start_ns < y->start_ns; });
    std::map<std::pair<int, int>, int> announce_seen;
    for (const auto* e : announces) {
      const int i = consumer_of_recv(order, a, r, *e, announce_seen);
      if (i < 0) {
        throw InputError("replay: " + where(step, r, e->end_ns, t0) + ": an ANNOUNCE no op of the order consumes");
      }
      items.push_back({e->end_ns, What::Announce, i, e->ready_ns});
    }
    std::sort(items.begin(), items.end());
    driver.begin(0.0);
    for (const Item& it : items) {
      const double t = static_cast<double>(it.time - t0);
      if (it.what == What::Arrive) {
        driver.input_arrived(it.index, t);
      } else if (it.what == What::End) {
        driver.complete(it.index, t);
      } else if (it.what == What::Announce) {
        driver.announce(it.index, static_cast<double>(it.expected - t0), t);
      } else {
        const int choice = driver.next(driver.latest());  // the runtime's choice (RankDriver::latest)
        if (choice != it.index && res.same) {
          res.same = false;
          res.message =
              where(step, r, it.time, t0) + ": the runtime started " +
              sched::to_string(a.actions()[static_cast<std::size_t>(it.index)]) + " but the driver chooses " +
              (choice < 0 ? std::string("to wait") : sched::to_string(a.actions()[static_cast<std::size_t>(choice)]));
        }
        if (it.index != a.next_in_list()) ++res.reordered;
        ++res.picks;
        driver.start(it.index, t);
      }
    }
    if (!driver.finished() && res.same) {
      res.same = false;
      res.message = "step " + std::to_string(step) + ", rank " + std::to_string(r) + ": the trace holds " +
                    std::to_string(a.num_done()) + " of the rank's " + std::to_string(a.size()) + " ops";
    }
  }
  return res;
}

}  // namespace conductor::sim

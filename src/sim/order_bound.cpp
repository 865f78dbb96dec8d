#include "conductor/sim/order_bound.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace conductor::sim {

namespace {

using sched::OpKind;

// Per (stage, microbatch): op times and the head / tail of each op (F, B or BW, W).
struct Node {
  double f = 0, b = 0, w = 0;  // durations; w = 0 without a split backward
  bool has_w = false;
  double head_f = 0, head_b = 0, head_w = 0;
  double tail_f = 0, tail_b = 0;  // a W's tail is 0: nothing depends on it
};

// Per rank, over one set of its ops: the least head, the work and the least tail.
struct Machine {
  double head = std::numeric_limits<double>::infinity(), work = 0, tail = std::numeric_limits<double>::infinity();
  void add(double h, double d, double t) {
    head = std::min(head, h);
    work += d;
    tail = std::min(tail, t);
  }
  double bound() const { return work > 0 ? head + work + tail : 0.0; }
};

}  // namespace

double order_bound_ms(const sched::Schedule& s, const NoiseModel& noise, int step) {
  const int stages = s.num_stages(), m = s.m;
  std::vector<Node> g(static_cast<std::size_t>(stages) * m);
  auto at = [&](int stage, int mb) -> Node& { return g[static_cast<std::size_t>(stage) * m + mb]; };
  for (int r = 0; r < s.p; ++r) {
    for (const sched::Action& a : s.ranks[r]) {
      Node& n = at(s.stage_of(r, a.chunk), a.microbatch);
      const double t = noise.compute_time_ms(step, r, a.chunk, a.microbatch, a.kind);
      if (a.kind == OpKind::F) n.f = t;
      else if (a.kind == OpKind::W) n.w = t, n.has_w = true;
      else n.b = t;  // B or BW
    }
  }
  auto comm = [&](int from, int to, int mb, sched::Payload payload) {
    return noise.comm_time_ms(step, from, to, mb, payload);
  };
  for (int j = 0; j < m; ++j) {
    // Heads: forwards up the stages, then backwards down them.
    for (int st = 1; st < stages; ++st)
      at(st, j).head_f = at(st - 1, j).head_f + at(st - 1, j).f + comm(st - 1, st, j, sched::Payload::Activation);
    for (int st = stages - 1; st >= 0; --st) {
      Node& n = at(st, j);
      n.head_b = n.head_f + n.f;
      if (st + 1 < stages) {
        const Node& up = at(st + 1, j);
        n.head_b = std::max(n.head_b, up.head_b + up.b + comm(st + 1, st, j, sched::Payload::Gradient));
      }
      n.head_w = n.head_b + n.b;
    }
    // Tails: a B's chain runs down the stages, an F's up them and back through its own B.
    for (int st = 0; st < stages; ++st) {
      Node& n = at(st, j);
      n.tail_b = n.w;
      if (st > 0) {
        const Node& down = at(st - 1, j);
        n.tail_b = std::max(n.tail_b, comm(st, st - 1, j, sched::Payload::Gradient) + down.b + down.tail_b);
      }
    }
    for (int st = stages - 1; st >= 0; --st) {
      Node& n = at(st, j);
      n.tail_f = n.b + n.tail_b;
      if (st + 1 < stages) {
        const Node& up = at(st + 1, j);
        n.tail_f = std::max(n.tail_f, comm(st, st + 1, j, sched::Payload::Activation) + up.f + up.tail_f);
      }
    }
  }
  double bound = 0;
  std::vector<Machine> all(s.p), no_w(s.p);
  for (int st = 0; st < stages; ++st) {
    const int r = s.rank_of(st);
    for (int j = 0; j < m; ++j) {
      const Node& n = at(st, j);
      for (Machine* k : {&all[r], &no_w[r]}) {
        k->add(n.head_f, n.f, n.tail_f);
        k->add(n.head_b, n.b, n.tail_b);
      }
      if (n.has_w) all[r].add(n.head_w, n.w, 0.0);
      bound = std::max({bound, n.head_f + n.f + n.tail_f, n.head_b + n.b + n.tail_b});
    }
  }
  for (int r = 0; r < s.p; ++r) bound = std::max({bound, all[r].bound(), no_w[r].bound()});
  return bound;
}

}  // namespace conductor::sim

#include "conductor/sim/order_bound.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace conductor::sim {

namespace {

using sched::OpKind;

// One op's stage and microbatch: op times and the head / tail of each op (F, B or BW, W).
struct Node {
  double f = 0, b = 0, w = 0;  // durations; w = 0 without a split backward
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
  // Which (stage, microbatch) splits its backward into B and W; otherwise its backward is one BW.
  std::vector<char> split(static_cast<std::size_t>(stages) * m, 0);
  for (int r = 0; r < s.p; ++r) {
    for (const sched::Action& a : s.ranks[r])
      if (a.kind == OpKind::W) split[static_cast<std::size_t>(s.stage_of(r, a.chunk)) * m + a.microbatch] = 1;
  }
  auto comm = [&](int from, int to, int mb, sched::Payload payload) {
    return noise.comm_time_ms(step, from, to, mb, payload);
  };
  double bound = 0;
  std::vector<Machine> all(s.p), no_w(s.p);
  std::vector<Node> g(static_cast<std::size_t>(stages));  // one microbatch's chain at a time
  for (int j = 0; j < m; ++j) {
    for (int st = 0; st < stages; ++st) {
      Node& n = g[st];
      const int r = s.rank_of(st), c = s.chunk_of(st);
      const bool has_w = split[static_cast<std::size_t>(st) * m + j] != 0;
      n.f = noise.compute_time_ms(step, r, c, j, OpKind::F);
      n.b = noise.compute_time_ms(step, r, c, j, has_w ? OpKind::B : OpKind::BW);
      n.w = has_w ? noise.compute_time_ms(step, r, c, j, OpKind::W) : 0.0;
    }
    // Heads: forwards up the stages, then backwards down them.
    g[0].head_f = 0;
    for (int st = 1; st < stages; ++st)
      g[st].head_f = g[st - 1].head_f + g[st - 1].f + comm(st - 1, st, j, sched::Payload::Activation);
    for (int st = stages - 1; st >= 0; --st) {
      Node& n = g[st];
      n.head_b = n.head_f + n.f;
      if (st + 1 < stages)
        n.head_b = std::max(n.head_b, g[st + 1].head_b + g[st + 1].b + comm(st + 1, st, j, sched::Payload::Gradient));
      n.head_w = n.head_b + n.b;
    }
    // Tails: a B's chain runs down the stages, an F's up them and back through its own B.
    for (int st = 0; st < stages; ++st) {
      Node& n = g[st];
      n.tail_b = n.w;
      if (st > 0)
        n.tail_b = std::max(n.tail_b, comm(st, st - 1, j, sched::Payload::Gradient) + g[st - 1].b + g[st - 1].tail_b);
    }
    for (int st = stages - 1; st >= 0; --st) {
      Node& n = g[st];
      n.tail_f = n.b + n.tail_b;
      if (st + 1 < stages)
        n.tail_f = std::max(n.tail_f, comm(st, st + 1, j, sched::Payload::Activation) + g[st + 1].f + g[st + 1].tail_f);
    }
    for (int st = 0; st < stages; ++st) {
      const Node& n = g[st];
      const int r = s.rank_of(st);
      for (Machine* k : {&all[r], &no_w[r]}) {
        k->add(n.head_f, n.f, n.tail_f);
        k->add(n.head_b, n.b, n.tail_b);
      }
      if (split[static_cast<std::size_t>(st) * m + j]) all[r].add(n.head_w, n.w, 0.0);
      bound = std::max({bound, n.head_f + n.f + n.tail_f, n.head_b + n.b + n.tail_b});
    }
  }
  for (int r = 0; r < s.p; ++r) bound = std::max({bound, all[r].bound(), no_w[r].bound()});
  return bound;
}

}  // namespace conductor::sim

#include "conductor/sched/validate.hpp"

#include <algorithm>

#include "conductor/sched/engine.hpp"
#include "conductor/util/error.hpp"

namespace conductor::sched {

std::string Violation::message() const {
  if (ok) return "valid";
  std::string where = "rank " + std::to_string(rank);
  where += position >= 0 ? ", position " + std::to_string(position) : std::string(", end of list");
  return where + ": " + reason;
}

namespace {

Violation fail(int rank, int position, std::string reason) {
  Violation v;
  v.ok = false;
  v.rank = rank;
  v.position = position;
  v.reason = std::move(reason);
  return v;
}

}  // namespace

namespace {

// Why rank `st.rank` is stuck, with actions named by `name`: the engine's own words name actions in the text form.
template <class Name>
std::string stuck_reason(const Schedule& s, const Stuck& st, const Name& name) {
  const Action& x = s.ranks[st.rank][st.position];
  if (st.memory) return name(st.rank, x) + " does not fit in memory: " + st.reason;
  const auto in = input_of(s, st.rank, x);
  if (!in) return name(st.rank, x) + " never becomes ready: " + st.reason;
  // The producer of the input: the forward of the stage before, or the backward (B or BW) of the stage after.
  OpKind kind = OpKind::F;
  if (in->payload == Payload::Gradient) {
    kind = OpKind::BW;
    for (const Action& y : s.ranks[in->from_rank]) {
      if (y.kind == OpKind::B && y.chunk == in->from_chunk && y.microbatch == in->microbatch) kind = OpKind::B;
    }
  }
  const Action producer{kind, in->microbatch, in->from_chunk};
  return name(st.rank, x) + " waits for " + name(in->from_rank, producer) + " on rank " +
         std::to_string(in->from_rank) + ", which never runs: the lists wait on each other (a cycle)";
}

}  // namespace

Violation validate(const Schedule& s, double memory_limit, double a, const Naming& naming) {
  const auto name = [&](int r, const Action& x) { return naming.action ? naming.action(r, x) : to_string(x); };
  const auto at = [&](int r, int i) { return std::to_string(naming.position ? naming.position(r, i) : i); };
  // fail() with the position as the file counts it.
  const auto report = [&](int r, int i, std::string reason) {
    return fail(r, i >= 0 && naming.position ? naming.position(r, i) : i, std::move(reason));
  };
  if (s.p < 1 || s.m < 1 || s.v < 1) return report(0, -1, "p, m and v must be positive");
  if (static_cast<int>(s.ranks.size()) != s.p) {
    return report(0, -1,
                  "the schedule has " + std::to_string(s.ranks.size()) + " rank lists for p = " + std::to_string(s.p));
  }
  if (s.placement == Placement::V && s.v != 2) return report(0, -1, "V placement needs exactly 2 chunks per rank");

  // 1. structure. pos[kind][stage * m + mb] = (rank list position) or -1.
  const std::size_t slots = static_cast<std::size_t>(s.num_stages()) * s.m;
  std::vector<int> pos[4];
  for (auto& v : pos) v.assign(slots, -1);
  for (int r = 0; r < s.p; ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& x = s.ranks[r][i];
      if (x.chunk < 0 || x.chunk >= s.v) {
        return report(
            r, i,
            "action " + name(r, x) + " names chunk " + std::to_string(x.chunk) + " but v = " + std::to_string(s.v));
      }
      if (x.microbatch < 0 || x.microbatch >= s.m) {
        return report(r, i,
                      "action " + name(r, x) + " names microbatch " + std::to_string(x.microbatch) +
                          " but m = " + std::to_string(s.m));
      }
      const std::size_t slot = static_cast<std::size_t>(s.stage_of(r, x.chunk)) * s.m + x.microbatch;
      int& p = pos[static_cast<int>(x.kind)][slot];
      if (p >= 0) return report(r, i, "action " + name(r, x) + " appears twice (first at position " + at(r, p) + ")");
      p = i;
      const bool split = x.kind == OpKind::B || x.kind == OpKind::W;
      // Both actions named as the file writes them (torch's letters differ from conductor's: its B is a BW).
      if (split && pos[static_cast<int>(OpKind::BW)][slot] >= 0) {
        const Action whole{OpKind::BW, x.microbatch, x.chunk};
        return report(r, i,
                      "action " + name(r, x) + " splits a backward that position " + at(r, pos[3][slot]) +
                          " already runs whole (" + name(r, whole) + ")");
      }
      if (x.kind == OpKind::BW && (pos[1][slot] >= 0 || pos[2][slot] >= 0)) {
        const OpKind part = pos[1][slot] >= 0 ? OpKind::B : OpKind::W;
        return report(r, i,
                      "action " + name(r, x) + " runs whole a backward that position " +
                          at(r, pos[static_cast<int>(part)][slot]) + " already splits (" +
                          name(r, Action{part, x.microbatch, x.chunk}) + ")");
      }
    }
  }
  for (int stage = 0; stage < s.num_stages(); ++stage) {
    const int r = s.rank_of(stage), c = s.chunk_of(stage);
    for (int mb = 0; mb < s.m; ++mb) {
      const std::size_t slot = static_cast<std::size_t>(stage) * s.m + mb;
      auto op = [&](OpKind k) { return name(r, Action{k, mb, c}); };
      if (pos[0][slot] < 0) return report(r, -1, "missing " + op(OpKind::F) + " (stage " + std::to_string(stage) + ")");
      const bool bw = pos[3][slot] >= 0, b = pos[1][slot] >= 0, w = pos[2][slot] >= 0;
      if (!bw && !b && !w)
        return report(r, -1,
                      "missing the backward of stage " + std::to_string(stage) + ", microbatch " + std::to_string(mb) +
                          " (" + op(OpKind::B) + "+" + op(OpKind::W) + " or " + op(OpKind::BW) + ")");
      if (!bw && !b) return report(r, -1, "missing " + op(OpKind::B) + " (stage " + std::to_string(stage) + ")");
      if (!bw && !w) return report(r, -1, "missing " + op(OpKind::W) + " (stage " + std::to_string(stage) + ")");
      // 2. same-stage order.
      const int f = pos[0][slot];
      const int back = bw ? pos[3][slot] : pos[1][slot];
      if (back < f)
        return report(r, back,
                      op(bw ? OpKind::BW : OpKind::B) + " comes before its forward " + op(OpKind::F) + " (position " +
                          at(r, f) + ")");
      if (!bw && pos[2][slot] < pos[1][slot]) {
        return report(r, pos[2][slot],
                      op(OpKind::W) + " comes before its " + op(OpKind::B) + " (position " + at(r, pos[1][slot]) + ")");
      }
    }
  }

  // 3. cross-stage order and memory: the lists executed in order (strict, unit op times, no comm time) must
  // finish within the memory limit. The engine is the one executor: its deadlock report names the cause.
  ExecOptions eo;
  eo.execution = Execution::Strict;
  eo.memory_limit = memory_limit;
  eo.memory_after_b = a;
  eo.record_ops = false;
  try {
    execute(
        s, eo, [](int, const Action&) { return 1.0; }, [](const Transfer&) { return 0.0; });
  } catch (const DeadlockError& e) {
    const Stuck& first = e.stuck.front();
    Violation v =
        report(first.rank, first.position, naming.action || first.memory ? stuck_reason(s, first, name) : first.reason);
    v.memory = first.memory;
    return v;
  }
  return Violation{};
}

void validate_or_throw(const Schedule& s, double memory_limit, double a, const std::string& what) {
  const Violation v = validate(s, memory_limit, a);
  if (v.ok) return;
  const std::string message = what + ": invalid schedule: " + v.message();
  if (v.memory) throw MemoryLimitError(message);
  throw InputError(message);
}

double list_peak_memory(const Schedule& s, int rank, double a) {
  double mem = 0.0, peak = 0.0;
  for (const auto& x : s.ranks.at(static_cast<std::size_t>(rank))) {
    mem += memory_delta(x.kind, s.v, a);
    peak = std::max(peak, mem);
  }
  return peak;
}

std::vector<double> list_peak_memory(const Schedule& s, double a) {
  std::vector<double> peak(s.p, 0.0);
  for (int r = 0; r < s.p && r < static_cast<int>(s.ranks.size()); ++r) peak[r] = list_peak_memory(s, r, a);
  return peak;
}

}  // namespace conductor::sched

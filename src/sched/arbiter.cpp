#include "conductor/sched/arbiter.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "conductor/util/error.hpp"

namespace conductor::sched {

namespace {
constexpr double kEps = 1e-9;
constexpr int kNone = std::numeric_limits<int>::max();

void heap_push(std::vector<int>& h, int v) {
  h.push_back(v);
  std::push_heap(h.begin(), h.end(), std::greater<int>());
}
void heap_pop(std::vector<int>& h) {
  std::pop_heap(h.begin(), h.end(), std::greater<int>());
  h.pop_back();
}
}  // namespace

Execution parse_execution(const std::string& s) {
  if (s == "strict") return Execution::Strict;
  if (s == "readiness") return Execution::Readiness;
  throw InputError("schedule.execution must be strict or readiness, got '" + s + "'");
}

Hint parse_hint(const std::string& s) {
  if (s == "schedule") return Hint::Schedule;
  if (s == "bf") return Hint::BF;
  if (s == "bfw") return Hint::BFW;
  if (s == "backfill") return Hint::Backfill;
  if (s == "critical") return Hint::Critical;
  throw InputError("schedule.hint must be schedule, bf, bfw, backfill or critical, got '" + s + "'");
}

const char* to_string(Execution e) { return e == Execution::Strict ? "strict" : "readiness"; }
const char* to_string(Hint h) {
  switch (h) {
    case Hint::Schedule: return "schedule";
    case Hint::BF: return "bf";
    case Hint::BFW: return "bfw";
    case Hint::Backfill: return "backfill";
    case Hint::Critical: return "critical";
  }
  return "?";
}

Arbiter::Arbiter(const Schedule& schedule, int rank, double memory_limit, double memory_after_b)
    : schedule_(&schedule), actions_(&schedule.ranks.at(rank)), rank_(rank) {
  limit_ = (memory_limit > 0 && std::isfinite(memory_limit)) ? memory_limit : std::numeric_limits<double>::infinity();
  for (int k = 0; k < 4; ++k) delta_[k] = memory_delta(static_cast<OpKind>(k), schedule.v, memory_after_b);
  const int n = size();
  const std::size_t slots = static_cast<std::size_t>(schedule.v) * schedule.m;
  f_index_.assign(slots, -1);
  b_index_.assign(slots, -1);
  w_index_.assign(slots, -1);
  deps0_.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    const Action& a = (*actions_)[i];
    if (a.chunk < 0 || a.chunk >= schedule.v || a.microbatch < 0 || a.microbatch >= schedule.m) {
      throw InputError("rank " + std::to_string(rank) + " position " + std::to_string(i) + ": action " + to_string(a) +
                       " is outside chunks 0.." + std::to_string(schedule.v - 1) + " / microbatches 0.." +
                       std::to_string(schedule.m - 1));
    }
    const std::size_t slot = static_cast<std::size_t>(a.chunk) * schedule.m + a.microbatch;
    auto& table = a.kind == OpKind::F ? f_index_ : a.kind == OpKind::W ? w_index_ : b_index_;
    if (table[slot] < 0) table[slot] = i;  // duplicates are the validator's to report
    int d = input_of(schedule, rank, a) ? 1 : 0;
    if (a.kind != OpKind::F) d += 1;  // B/BW after F, W after B (same stage)
    deps0_[i] = d;
  }
  slot_.assign(n, Slot{});
  for (int i = 0; i < n; ++i) {
    const Action& a = (*actions_)[i];
    if (a.kind == OpKind::F) slot_[i].local_next = backward_index(a.chunk, a.microbatch);
    if (a.kind == OpKind::B) slot_[i].local_next = index_of(OpKind::W, a.chunk, a.microbatch);
    if (auto out = output_of(schedule, rank, a); out && out->local()) slot_[i].local_consumer = consumer_of(*out);
    if (auto out = output_of(schedule, rank, a); out && !out->local()) slot_[i].remote_out = 1;
  }
  reset();
}

void Arbiter::reset() {
  const int n = size();
  for (int i = 0; i < n; ++i) {
    slot_[i].deps = deps0_[i];
    slot_[i].started = 0;
    slot_[i].done = 0;
  }
  for (int r = 0; r < 2; ++r) heap_b_[r].clear(), heap_f_[r].clear();
  heap_w_.clear();
  newly_ready_.clear();
  fenwick_.assign(n + 1, 0.0);
  for (int i = 0; i < n; ++i) {
    if ((*actions_)[i].kind == OpKind::F) fenwick_add(i, delta_[0]);
  }
  cursor_ = 0;
  num_done_ = 0;
  num_ready_ = 0;
  memory_ = peak_ = 0.0;
  for (int i = 0; i < n; ++i) {
    if (slot_[i].deps == 0) {
      slot_[i].deps = 1;
      satisfy(i);
    }
  }
}

void Arbiter::fenwick_add(int index, double delta) {
  for (int i = index + 1; i < static_cast<int>(fenwick_.size()); i += i & -i) fenwick_[i] += delta;
}

double Arbiter::reserved_through(int index) const {
  double s = 0.0;
  for (int i = index + 1; i > 0; i -= i & -i) s += fenwick_[i];
  return s;
}

void Arbiter::satisfy(int index) {
  if (index < 0) return;
  Slot& sl = slot_[index];
  if (sl.deps <= 0 || --sl.deps != 0 || sl.started) return;
  newly_ready_.push_back(index);
  ++num_ready_;
  switch ((*actions_)[index].kind) {
    case OpKind::F: heap_push(heap_f_[sl.remote_out], index); break;
    case OpKind::W: heap_push(heap_w_, index); break;
    default: heap_push(heap_b_[sl.remote_out], index); break;
  }
}

void Arbiter::input_arrived(int index) { satisfy(index); }

bool Arbiter::fits(int index) const {
  if ((*actions_)[index].kind != OpKind::F) return true;
  return memory_ + reserved_through(index) <= limit_ + kEps;
}

int Arbiter::pick(Execution mode, Hint hint) const {
  if (mode == Execution::Strict) {
    if (cursor_ >= size()) return -1;
    return (slot_[cursor_].deps == 0 && fits(cursor_)) ? cursor_ : -1;
  }
  const auto front = [](const std::vector<int>& h) { return h.empty() ? kNone : h.front(); };
  const int b = std::min(front(heap_b_[0]), front(heap_b_[1]));
  const int w = front(heap_w_);
  // Of all ready Fs only the earliest (the earlier of the two heaps' fronts) can fit when the other cannot: a later
  // one's reservation includes the earlier (unstarted) one. For critical's ranking each heap's front is a
  // candidate (the later of the two fits only if the earlier would fit too).
  const int f_of[2] = {front(heap_f_[0]), front(heap_f_[1])};
  const int first_f = std::min(f_of[0], f_of[1]);
  const int f = first_f != kNone && fits(first_f) ? first_f : kNone;
  int best = kNone;
  switch (hint) {
    case Hint::Schedule: best = std::min({b, f, w}); break;
    case Hint::BF: best = (b != kNone || w != kNone) ? std::min(b, w) : f; break;
    case Hint::BFW: best = b != kNone ? b : f != kNone ? f : w; break;
    case Hint::Critical: {
      // An op another rank waits for (a B on the backward chain, an F feeding the next stage) before the rank's
      // own B or F (the first stage's B, the last stage's F), each class in list order, and W only into idle
      // time. Within a class the list's order, not B first: bfw's B-first delays the F the next stage idles
      // for, and the first stage's own B the F that feeds the whole pipeline.
      const int remote_f = f_of[1] != kNone && fits(f_of[1]) ? f_of[1] : kNone;
      const int local_f = f_of[0] != kNone && fits(f_of[0]) ? f_of[0] : kNone;
      const int remote = std::min(front(heap_b_[1]), remote_f), local = std::min(front(heap_b_[0]), local_f);
      best = remote != kNone ? remote : local != kNone ? local : w;
      break;
    }
    case Hint::Backfill: {
      std::vector<int> ranked;
      candidates(mode, hint, ranked);
      return ranked.empty() ? -1 : ranked.front();
    }
  }
  return best == kNone ? -1 : best;
}

void Arbiter::candidates(Execution mode, Hint hint, std::vector<int>& out) const {
  out.clear();
  if (mode == Execution::Strict) {
    if (const int i = pick(mode, hint); i >= 0) out.push_back(i);
    return;
  }
  // The ranking classes of pick(): smaller first, then list position.
  auto rank_class = [&](int i) {
    const OpKind k = (*actions_)[i].kind;
    if (hint == Hint::Schedule) return 0;
    if (hint == Hint::BF) return k == OpKind::F ? 1 : 0;
    if (hint == Hint::Backfill) return slot_[i].remote_out ? 0 : 1;  // unblock another rank first
    if (hint == Hint::Critical) return slot_[i].remote_out ? 0 : k == OpKind::W ? 2 : 1;
    return k == OpKind::F ? 1 : k == OpKind::W ? 2 : 0;
  };
  std::vector<std::pair<int, int>> keyed;  // (class, position)
  for (const auto* h : {&heap_b_[0], &heap_b_[1], &heap_f_[0], &heap_f_[1], &heap_w_}) {
    for (int i : *h) {
      if (!slot_[i].started && fits(i)) keyed.emplace_back(rank_class(i), i);
    }
  }
  std::sort(keyed.begin(), keyed.end());
  for (const auto& [cls, i] : keyed) out.push_back(i);
}

void Arbiter::clean_heaps() {
  for (auto* h : {&heap_b_[0], &heap_b_[1], &heap_f_[0], &heap_f_[1], &heap_w_}) {
    while (!h->empty() && slot_[h->front()].started) heap_pop(*h);
  }
}

void Arbiter::start(int index) {
  if (index < 0 || index >= size() || slot_[index].started) {
    throw Error("arbiter: rank " + std::to_string(rank_) + " cannot start action " + std::to_string(index));
  }
  if (slot_[index].deps == 0) --num_ready_;
  slot_[index].started = 1;
  const OpKind k = (*actions_)[index].kind;
  if (k == OpKind::F) {
    memory_ += delta_[0];
    fenwick_add(index, -delta_[0]);
    peak_ = std::max(peak_, memory_);
  }
  clean_heaps();
  while (cursor_ < size() && slot_[cursor_].started) ++cursor_;
}

void Arbiter::complete(int index) {
  if (index < 0 || index >= size() || !slot_[index].started || slot_[index].done) {
    throw Error("arbiter: rank " + std::to_string(rank_) + " cannot complete action " + std::to_string(index));
  }
  slot_[index].done = 1;
  ++num_done_;
  const Action& a = (*actions_)[index];
  if (a.kind != OpKind::F) memory_ += delta_[static_cast<int>(a.kind)];
  satisfy(slot_[index].local_next);
  satisfy(slot_[index].local_consumer);
}

std::vector<int> Arbiter::take_newly_ready() {
  std::vector<int> out;
  out.swap(newly_ready_);
  return out;
}

int Arbiter::index_of(OpKind kind, int chunk, int microbatch) const {
  if (chunk < 0 || chunk >= schedule_->v || microbatch < 0 || microbatch >= schedule_->m) return -1;
  const std::size_t slot = static_cast<std::size_t>(chunk) * schedule_->m + microbatch;
  if (kind == OpKind::F) return f_index_[slot];
  if (kind == OpKind::W) return w_index_[slot];
  const int i = b_index_[slot];
  return (i >= 0 && (*actions_)[i].kind == kind) ? i : -1;
}

int Arbiter::backward_index(int chunk, int microbatch) const {
  if (chunk < 0 || chunk >= schedule_->v || microbatch < 0 || microbatch >= schedule_->m) return -1;
  return b_index_[static_cast<std::size_t>(chunk) * schedule_->m + microbatch];
}

int Arbiter::consumer_of(const Transfer& t) const {
  return t.payload == Payload::Activation ? index_of(OpKind::F, t.to_chunk, t.microbatch)
                                          : backward_index(t.to_chunk, t.microbatch);
}

}  // namespace conductor::sched

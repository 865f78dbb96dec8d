#pragma once
// The arbiter: what a free rank runs next. ONE implementation, called by the simulator (sim/) and by the MPI
// runtime (runtime/) with the same inputs, so the simulator's prediction is the runtime's behaviour on a
// different clock. Never fork this logic.
//
// The Arbiter holds one rank's actions in hint order (the schedule's list for that rank),
// which are started / done, which are ready, and the activation memory in use against the limit (units of
// M_F, see schedule.hpp). An action is READY when all its dependencies are satisfied:
//   - its cross-stage input (input_of() in schedule.hpp) arrived: the caller reports it with input_arrived()
//     (the runtime when the MPI receive completes, the simulator when the arrival event fires). Inputs produced
//     on the same rank (V placement, p = 1) are delivered by complete() itself; callers never report them;
//   - its same-stage predecessor completed (B/BW after F, W after B): tracked by complete().
//
// pick(mode, hint) returns the index of the action to start now, or -1 (stay idle until the next event):
//   strict:     the first action of the list not yet started, if ready and within memory; else -1.
//   readiness:  the best-ranked ready action within memory, never -1 while such an action exists. Ranking:
//                 schedule  the list position (the schedule's own order);
//                 bf        backward work (B, BW, W) before F, list position within each class;
//                 bfw       B/BW, then F, then W (W fills otherwise idle time), list position within a class;
//                 backfill  (decided by the driver, driver.hpp, which knows time): the list's next op when it can
//                           run, else a ready op that ends before the next op's input is expected. Here (no
//                           clock) it ranks ops whose output another rank waits for first, then list position.
// Memory: an F may start only if  in_use + (allocations of every not-started F listed up to and including it)
// <= limit. The list's memory plan is a reservation: a ready F overtaking the list may not take memory that an
// earlier-listed F was promised. This keeps readiness as deadlock-free as the list itself (e.g. under V
// placement, chunk-0 forwards cannot starve the chunk-1 forward that starts the backward pass). B, W, BW
// only free memory and always fit.
//
// Cost: pick() is O(1) (three min-heaps of ready positions, one Fenwick prefix sum, O(log n)); start(),
// complete() and input_arrived() are O(log n). One Arbiter per rank per step; reset() reuses it.
//
// candidates(mode, hint) is the same ranking as a list (every feasible choice, best first; its first element is
// pick()'s answer): a custom picker such as the PPO environment chooses among them instead of re-ranking.
//
// Callers do not drive an Arbiter directly: sched::RankDriver (driver.hpp) owns one per rank together with the
// step's times, and the engine, the MPI executor and the PPO environment all go through it.
#include <cstdint>
#include <string>
#include <vector>

#include "conductor/sched/schedule.hpp"

namespace conductor::sched {

enum class Execution : std::int8_t { Strict = 0, Readiness = 1 };
enum class Hint : std::int8_t { Schedule = 0, BF = 1, BFW = 2, Backfill = 3, Critical = 4 };

Execution parse_execution(const std::string& s);  // "strict" | "readiness"; InputError otherwise
Hint parse_hint(const std::string& s);  // "schedule" | "bf" | "bfw" | "backfill" | "critical"; InputError otherwise
const char* to_string(Execution e);
const char* to_string(Hint h);

class Arbiter {
 public:
  // memory_limit in M_F (<= 0 or infinity: unlimited); memory_after_b: the fraction a (schedule.hpp).
  Arbiter(const Schedule& schedule, int rank, double memory_limit, double memory_after_b);

  void reset();  // back to the start of a step (nothing started, no input arrived)

  // The cross-stage input of action `index` arrived (from another rank).
  void input_arrived(int index);
  // The action to run now, or -1. Does not change the state.
  int pick(Execution mode, Hint hint) const;
  // Every action pick() could choose now, best first (pick() == out.front() when not empty). O(r log r) in the
  // r ready actions: for custom pickers, not for the hot path.
  void candidates(Execution mode, Hint hint, std::vector<int>& out) const;
  // Action `index` starts (allocates its memory); normally the result of pick().
  void start(int index);
  // Action `index` finished: frees memory, satisfies same-stage dependents, delivers same-rank outputs.
  void complete(int index);

  // Indices of actions that became ready since the last call (for ready timestamps); clears the list.
  std::vector<int> take_newly_ready();
  // The same without allocating: read newly_ready(), then clear_newly_ready().
  const std::vector<int>& newly_ready() const { return newly_ready_; }
  void clear_newly_ready() { newly_ready_.clear(); }

  // Lookup: the list index of (kind, chunk, microbatch) on this rank, or -1. backward_index() finds the B or
  // the BW of (chunk, microbatch), whichever the list has.
  int index_of(OpKind kind, int chunk, int microbatch) const;
  int backward_index(int chunk, int microbatch) const;
  // The action that consumes a transfer arriving at this rank (F for an activation, B/BW for a gradient).
  int consumer_of(const Transfer& t) const;

  int rank() const { return rank_; }
  const std::vector<Action>& actions() const { return *actions_; }
  int size() const { return static_cast<int>(actions_->size()); }
  bool is_ready(int index) const { return slot_[index].deps == 0 && !slot_[index].started; }
  bool is_started(int index) const { return slot_[index].started != 0; }
  bool is_done(int index) const { return slot_[index].done != 0; }
  bool finished() const { return num_done_ == size(); }
  int num_done() const { return num_done_; }
  int num_ready() const { return num_ready_; }  // ready, not started (whether or not they fit in memory)
  int next_in_list() const { return cursor_; }  // first action not started (strict's next op)
  double memory_in_use() const { return memory_; }
  double peak_memory() const { return peak_; }
  double memory_limit() const { return limit_; }
  bool fits(int index) const;  // would starting `index` now respect the memory rule above?
  bool feeds_another_rank(int index) const { return slot_[index].remote_out != 0; }

 private:
  void satisfy(int index);
  void clean_heaps();
  double reserved_through(int index) const;  // Fenwick prefix sum of unstarted F allocations [0, index]
  void fenwick_add(int index, double delta);

  const Schedule* schedule_;
  const std::vector<Action>* actions_;
  int rank_;
  double limit_;
  double delta_[4];  // memory change per OpKind
  // Per action, what an event touches, in one 16-byte record (one cache line for a few actions): at p=1024 the
  // ranks' state is hundreds of MB and every event lands on a cold rank, so separate arrays cost a miss each.
  // local_next: the same-stage dependent (B/BW of an F, W of a B); local_consumer: the consumer of a same-rank
  // output; -1 for none.
  struct Slot {
    std::int32_t deps = 0;
    std::int32_t local_next = -1;
    std::int32_t local_consumer = -1;
    std::uint8_t started = 0;
    std::uint8_t done = 0;
    std::uint8_t remote_out = 0;  // its output goes to another rank (someone may be waiting for it)
  };
  std::vector<std::int32_t> deps0_;
  std::vector<Slot> slot_;
  // Min-heaps of ready, not started list positions: B (and BW) and F each kept apart by whether their output
  // feeds another rank ([1]) or stays on the rank ([0]), for critical's ranking; W.
  std::vector<int> heap_b_[2], heap_f_[2], heap_w_;
  std::vector<double> fenwick_;
  std::vector<int> f_index_, b_index_, w_index_;  // [chunk * m + microbatch] -> list index or -1
  std::vector<int> newly_ready_;
  int cursor_ = 0;
  int num_done_ = 0;
  int num_ready_ = 0;
  double memory_ = 0.0, peak_ = 0.0;
};

}  // namespace conductor::sched

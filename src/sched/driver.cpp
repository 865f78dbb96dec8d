#include "conductor/sched/driver.hpp"

#include <algorithm>

namespace conductor::sched {

RankDriver::RankDriver(const Schedule& schedule, int rank, const DriverOptions& options)
    : arbiter_(schedule, rank, options.memory_limit, options.memory_after_b), options_(options) {
  ready_at_.assign(static_cast<std::size_t>(arbiter_.size()), 0.0);
  begin(0.0);
}

void RankDriver::begin(double now) {
  arbiter_.reset();
  begin_ = free_since_ = first_start_ = last_end_ = now;
  started_ = 0;
  stamp_ready(now);
}

void RankDriver::stamp_ready(double now) {
  for (int i : arbiter_.newly_ready()) ready_at_[static_cast<std::size_t>(i)] = now;
  arbiter_.clear_newly_ready();
}

void RankDriver::input_arrived(int index, double now) {
  arbiter_.input_arrived(index);
  stamp_ready(now);
}

const std::vector<int>& RankDriver::candidates() {
  arbiter_.candidates(options_.execution, options_.hint, candidates_);
  return candidates_;
}

OpStart RankDriver::start(int index, double now) {
  arbiter_.start(index);
  OpStart op;
  op.index = index;
  op.ready = ready_at_[static_cast<std::size_t>(index)];
  op.start = now;
  op.wait = started_ > 0 ? now - free_since_ : now - begin_;
  if (started_ == 0) first_start_ = now;
  ++started_;
  return op;
}

void RankDriver::complete(int index, double now) {
  arbiter_.complete(index);
  free_since_ = now;
  last_end_ = std::max(last_end_, now);
  stamp_ready(now);
}

}  // namespace conductor::sched

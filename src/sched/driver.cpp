#include "conductor/sched/driver.hpp"

#include "conductor/sched/validate.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

namespace conductor::sched {

namespace {
const double kNotAnnounced = std::numeric_limits<double>::quiet_NaN();
constexpr double kSlack = 1e-9;  // an op that ends exactly when the input arrives delays nothing
// Backfilling under variability (DriverOptions::spread > 0) accepts an op that ends before the input with
// probability P: its estimate, scaled by exp(spread sqrt(2) z), z = the standard normal quantile of P (the
// difference of two independent log-normal times of equal sigma, the op's and the remaining wait's, with the
// estimates as their means). P depends on the spread, measured at both ends:
//  - heavy variability (sigma >= kHeavySpread): P = 0.4. bench_sim --heavy (sigma 1, before backfill switched to
//    critical there): 0.6 removes every loss and every win; 0.4 wins more than the plain means (0.5) on every zb
//    row and loses less. It applies from 0.5 up to the switch (DriverOptions::wide_spread, 0.6 by default), and
//    beyond it where a deck sets the switch higher to keep backfilling;
//  - small jitter: P = 0.6. bench_sim --scale 64 512 (sigma 0.1, zb-h1): with 0.4 (and 0.5) most backfills are
//    W or F just ahead of a B on the backward chain, in a gap of about one op; half of them overrun it and delay
//    the chain (0.0790 bubble vs strict 0.0773), and the work they move earlier shortens nothing.
constexpr double kHeavySpread = 0.5;
constexpr double kQuantile40 = -0.25334710313579978;  // the standard normal quantile of 0.4 (and -z of 0.6)

double fit_scale(double spread) {
  return std::exp(spread * std::sqrt(2.0) * (spread >= kHeavySpread ? kQuantile40 : -kQuantile40));
}
}  // namespace

Hint ranking(const DriverOptions& o) {
  const bool backfill = o.execution == Execution::Readiness && o.hint == Hint::Backfill;
  // A rank without spread (noise-free) keeps backfilling whatever the switch: its order is never slower than the
  // list's, and schedule.wide_spread = 0 made it critical, slower than strict in 61 of 704 noise-free cells.
  const double spread = std::max(o.spread, o.arrival_spread);
  return backfill && spread > 0 && spread >= o.wide_spread ? Hint::Critical : o.hint;
}

namespace {

// Backfilling's memory budget: what the hint list itself holds on this rank at its peak (its own plan), capped
// by the configured limit. A global limit (p M_F for 1F1B) would let later ranks run forwards beyond their own
// in-flight depth and delay the backward chain.
double budget(const Schedule& s, int rank, const DriverOptions& o, Hint ranking) {
  const bool backfill = o.execution == Execution::Readiness && ranking == Hint::Backfill;
  if (!backfill) return o.memory_limit;
  const double peak = list_peak_memory(s, rank, o.memory_after_b);
  return o.memory_limit > 0 ? std::min(o.memory_limit, peak) : peak;
}

}  // namespace

void MeasuredDurations::add(const Action& action, double duration) {
  auto& [sum, count] = sums_[{static_cast<int>(action.kind), action.chunk}];
  sum += duration;
  ++count;
  durations_[{static_cast<int>(action.kind), action.chunk}].push_back(duration);
}

double MeasuredDurations::spread() const {
  const auto [squares, degrees] = log_squares();
  return degrees > 0 ? std::sqrt(squares / degrees) : 0.0;
}

void MeasuredDurations::carry_spread(const MeasuredDurations& earlier) {
  std::tie(carried_squares_, carried_degrees_) = earlier.log_squares();
}

std::pair<double, int> MeasuredDurations::log_squares() const {
  double squares = carried_squares_;
  int degrees = carried_degrees_;
  std::vector<double> logs;
  for (const auto& [key, d] : durations_) {
    if (d.size() < 2) continue;
    logs.clear();
    for (double x : d) logs.push_back(std::log(std::max(x, 1e-300)));
    std::sort(logs.begin(), logs.end());
    double sum = 0.0;
    for (double l : logs) sum += l;
    const double mean = sum / static_cast<double>(logs.size());
    for (double l : logs) squares += (l - mean) * (l - mean);
    degrees += static_cast<int>(logs.size()) - 1;
  }
  return {squares, degrees};
}

OpEstimate MeasuredDurations::estimate() const {
  std::map<std::pair<int, int>, double> mean;
  for (const auto& [key, sc] : sums_) mean[key] = sc.first / sc.second;
  return [mean = std::move(mean)](const Action& a) {
    const auto it = mean.find({static_cast<int>(a.kind), a.chunk});
    return it == mean.end() ? std::numeric_limits<double>::infinity() : it->second;
  };
}

RankDriver::RankDriver(const Schedule& schedule, int rank, const DriverOptions& options)
    : ranking_(ranking(options)),
      arbiter_(schedule, rank, budget(schedule, rank, options, ranking_), options.memory_after_b),
      options_(options),
      fit_scale_(fit_scale(options.spread)) {
  ready_at_.assign(static_cast<std::size_t>(arbiter_.size()), 0.0);
  fits_at_.assign(static_cast<std::size_t>(arbiter_.size()), 0.0);
  for (int i = 0; i < arbiter_.size(); ++i) {
    if (arbiter_.actions()[static_cast<std::size_t>(i)].kind == OpKind::F) forwards_.push_back(i);
  }
  if (backfilling()) {
    expected_.assign(static_cast<std::size_t>(arbiter_.size()), kNotAnnounced);
    build_buckets();
    next_remote_.assign(static_cast<std::size_t>(arbiter_.size()), arbiter_.size());
    for (int i = arbiter_.size() - 2; i >= 0; --i) {
      const std::size_t u = static_cast<std::size_t>(i);
      next_remote_[u] = arbiter_.feeds_another_rank(i + 1) ? i + 1 : next_remote_[u + 1];
    }
  }
  begin(0.0);
}

// The estimates are taken once per driver (an OpEstimate is a function of the action): ops with bit-identical
// estimates share a bucket, so both the comparison and its result are the ones backfill_candidates makes.
void RankDriver::build_buckets() {
  std::map<std::tuple<bool, bool, std::uint64_t>, int> bucket;
  const auto& actions = arbiter_.actions();
  bucket_of_.assign(actions.size(), 0);
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const double estimate = options_.estimate ? options_.estimate(actions[i]) : 0.0;
    const bool local = !arbiter_.feeds_another_rank(static_cast<int>(i));
    const bool forward = actions[i].kind == OpKind::F;
    const auto [it, added] =
        bucket.try_emplace({local, forward, std::bit_cast<std::uint64_t>(estimate)}, static_cast<int>(buckets_.size()));
    if (added) buckets_.push_back(Bucket{estimate, local, forward, {}});
    bucket_of_[i] = it->second;
  }
}

void RankDriver::clean_bucket(int index) {
  auto& heap = buckets_[static_cast<std::size_t>(bucket_of_[static_cast<std::size_t>(index)])].heap;
  while (!heap.empty() && arbiter_.is_started(heap.front())) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<int>());
    heap.pop_back();
  }
}

void RankDriver::begin(double now) {
  arbiter_.reset();
  begin_ = free_since_ = first_start_ = last_end_ = latest_ = now;
  started_ = 0;
  std::fill(expected_.begin(), expected_.end(), kNotAnnounced);
  for (Bucket& b : buckets_) b.heap.clear();
  stamp_ready(now);
  fits_cursor_ = 0;
  for (const int i : forwards_) fits_at_[static_cast<std::size_t>(i)] = std::numeric_limits<double>::infinity();
  stamp_fits(now);
}

void RankDriver::stamp_fits(double now) {
  for (; fits_cursor_ < forwards_.size(); ++fits_cursor_) {
    const int i = forwards_[fits_cursor_];
    if (!arbiter_.is_started(i) && !arbiter_.fits(i)) return;
    // A started F was stamped before it started (it fit then); the guard keeps its stamp.
    double& at = fits_at_[static_cast<std::size_t>(i)];
    at = std::min(at, now);
  }
}

void RankDriver::stamp_ready(double now) {
  for (int i : arbiter_.newly_ready()) {
    ready_at_[static_cast<std::size_t>(i)] = now;
    if (buckets_.empty()) continue;
    auto& heap = buckets_[static_cast<std::size_t>(bucket_of_[static_cast<std::size_t>(i)])].heap;
    heap.push_back(i);
    std::push_heap(heap.begin(), heap.end(), std::greater<int>());
  }
  arbiter_.clear_newly_ready();
}

void RankDriver::input_arrived(int index, double now) {
  arbiter_.input_arrived(index);
  latest_ = std::max(latest_, now);
  stamp_ready(now);
}

void RankDriver::announce(int index, double expected_ready, double now) {
  latest_ = std::max(latest_, now);
  if (backfilling()) expected_[static_cast<std::size_t>(index)] = expected_ready;
}

int RankDriver::next(double now) const {
  if (!backfilling()) return arbiter_.pick(options_.execution, ranking_);
  const int i = arbiter_.next_in_list();
  if (i >= arbiter_.size()) return -1;
  if (arbiter_.is_ready(i) && arbiter_.fits(i)) return ahead_of(i);  // it, or its ready segment's remote op
  return backfill_first(now);
}

// The list's next op `next` is ready. When its output stays on this rank and the list's next op that feeds
// another rank is ready too, with only ready (or started) ops between them, that op goes first: the segment of
// ready ops ends at the same time in either order (one rank, no waits), so nothing after it starts later, and
// the other rank gets its input the segment's local work earlier. Under variability this is the case a late list
// leaves: a B arrived while the rank still had the W the list placed before it.
int RankDriver::ahead_of(int next) const {
  if (arbiter_.feeds_another_rank(next)) return next;
  for (int from = next, j = next_remote_[static_cast<std::size_t>(next)]; j < arbiter_.size();
       from = j, j = next_remote_[static_cast<std::size_t>(j)]) {
    for (int k = from + 1; k < j; ++k) {
      if (!arbiter_.is_started(k) && !arbiter_.is_ready(k)) return next;  // a local op between waits
    }
    if (arbiter_.is_started(j)) continue;  // backfilled already: look past it
    return arbiter_.is_ready(j) && arbiter_.fits(j) ? j : next;
  }
  return next;
}

const std::vector<int>& RankDriver::candidates(double now) {
  if (backfilling()) {
    backfill_candidates(now, candidates_);
  } else {
    arbiter_.candidates(options_.execution, ranking_, candidates_);
  }
  return candidates_;
}

void RankDriver::backfill_candidates(double now, std::vector<int>& out) const {
  out.clear();
  const int next = arbiter_.next_in_list();
  if (next >= arbiter_.size()) return;
  if (arbiter_.is_ready(next) && arbiter_.fits(next)) {
    out.push_back(ahead_of(next));
    return;
  }
  const double until = backfill_until(now);
  if (!(until > now)) return;
  arbiter_.candidates(Execution::Readiness, Hint::Backfill, out);
  if (std::isinf(until)) return;
  const auto& actions = arbiter_.actions();
  std::erase_if(out, [&](int j) {
    return !options_.estimate ||
           now + fit_scale_ * options_.estimate(actions[static_cast<std::size_t>(j)]) > until + kSlack;
  });
}

// Until when may other ops run without delaying the list's next op? Blocked on memory: only this rank's own ops
// free it, so anything may run. Waiting for an input: until its announced arrival; once that has passed (the
// input is late), until when it is still expected given that it is late (late_until: a congested transfer; else
// nothing starts: a late input may arrive any moment, and a long op started just before it loses to strict).
double RankDriver::backfill_until(double now) const {
  const int next = arbiter_.next_in_list();
  if (arbiter_.is_ready(next)) return std::numeric_limits<double>::infinity();
  const double expected = expected_[static_cast<std::size_t>(next)];
  // Its producer has not started: nothing is known, nothing is backfilled.
  if (std::isnan(expected)) return -std::numeric_limits<double>::infinity();
  return now > expected + kSlack ? late_until(next, now) : expected;
}

// The same choice as backfill_candidates(now).front() (the class, then the list position; among ops that fit
// in memory and, unless anything may run, end by `until`), from the first op of each bucket: O(buckets).
int RankDriver::backfill_first(double now) const {
  const double until = backfill_until(now);
  if (!(until > now)) return -1;
  const bool any = std::isinf(until);
  if (!any && !options_.estimate) return -1;
  constexpr int kNone = std::numeric_limits<int>::max();
  int best[2] = {kNone, kNone};  // feeds another rank, local
  for (const Bucket& b : buckets_) {
    if (b.heap.empty()) continue;
    const int j = b.heap.front();
    if (j >= best[b.local]) continue;
    if (!any && now + fit_scale_ * b.estimate > until + kSlack) continue;
    if (b.forward && !arbiter_.fits(j)) continue;
    best[b.local] = j;
  }
  const int first = best[0] != kNone ? best[0] : best[1];
  return first == kNone ? -1 : first;
}

// A late input's arrival, given that it is late: a transfer delayed by congestion (late_delay > 0) comes
// late_delay after it was expected, so the rank may work until then. Otherwise nothing is known (with exact
// estimates a late input may arrive any moment; tried: under log-normal noise, the conditional arrival given the
// lateness changed nothing measurable).
double RankDriver::late_until(int index, double now) const {
  const double expected = expected_[static_cast<std::size_t>(index)];
  if (options_.late_delay > 0 && now < expected + options_.late_delay) return expected + options_.late_delay;
  return -std::numeric_limits<double>::infinity();
}

OpStart RankDriver::start(int index, double now) {
  arbiter_.start(index);
  if (!buckets_.empty()) clean_bucket(index);
  OpStart op;
  op.index = index;
  op.ready = startable_at(index);
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
  latest_ = std::max(latest_, now);
  stamp_ready(now);
  stamp_fits(now);
}

}  // namespace conductor::sched

#include "conductor/sim/simulator.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "conductor/sched/cost.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sched/migration.hpp"
#include "conductor/sim/order_bound.hpp"
#include "conductor/trace/event.hpp"
#include "conductor/trace/summary.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"

namespace conductor::sim {

SimOptions SimOptions::from_plan(const plan::Plan& plan, const sched::Schedule& schedule) {
  SimOptions o;
  o.execution = sched::parse_execution(plan.schedule.execution);
  o.hint = sched::parse_hint(plan.schedule.hint);
  o.wide_spread = plan.schedule.wide_spread;
  o.rank_memory_limit = sched::rank_memory_limits(plan, schedule);
  o.memory_limit = sched::memory_limit_for(plan, schedule);
  o.record_events = plan.trace.enabled;
  o.comm_events = plan.trace.comm_events;
  o.samples_per_step = static_cast<double>(plan.pipeline.m) * plan.pipeline.microbatch_size;
  o.activation_bytes = static_cast<std::int64_t>(plan.activation_bytes);
  o.migration = plan.migration;
  o.overlap_steps = plan.schedule.post_validation;
  return o;
}

namespace {
// A time on the run's clock in the trace's nanoseconds. The deck check (config::resolve) keeps noise-free runs
// within 1e12 ms; random noise (lognormal or heterogeneous sigma up to 3, gaussian levels up to 100) can still
// draw past the 9.2e12 ms an int64 holds: stopped here, naming the keys, instead of wrapping to negative times.
std::int64_t to_ns(double ms) {
  constexpr double kMaxMs = 9.2e12;
  if (!(std::abs(ms) < kMaxMs)) {
    throw InputError("the simulated clock reached " + format_double(ms) + " ms, past the " + format_double(kMaxMs) +
                     " ms a trace holds (nanoseconds in 64 bits): the noise (noise.kind, noise.level, "
                     "noise.straggler_factor, noise.congestion_delay) drew op times that large from the deck's costs "
                     "(cost.*) over run.steps; "
                     "lower them");
  }
  return trace::ms_to_ns(ms);
}

// A time `ms` into the step whose origin is `origin_ns` on the run's clock, in the trace's nanoseconds: the sum
// checked as to_ns checks a time (each part may fit where the sum does not).
std::int64_t on_clock(std::int64_t origin_ns, double ms) {
  (void)to_ns(static_cast<double>(origin_ns) * trace::kTickMs + ms);
  return origin_ns + to_ns(ms);
}

// When a helper's compute starts: after the transfers out and before those back (half each: the cost model sums
// both directions), so it lies inside the owner's op.
double help_start(const sched::MigrationTiming& m) {
  return m.start + 0.5 * std::max(0.0, m.end - m.start - m.helper_compute);
}

// The trace row of rank `rank`'s compute on `owner`'s list op `index` (the owner's own row, or a helper's):
// its fields from the action, the times on the run's clock: the step's origin there (in whole nanoseconds) plus
// the times in the step, each rounded on its own, so steps of the same times have the same rows but their origin
// (rounding origin + time instead, a noise-free run's makespans differed by a nanosecond from step to step).
trace::OpEvent op_row(const sched::Schedule& s, int rank, int owner, int index, int step, std::int64_t origin_ns,
                      double ready, double start, double end) {
  const sched::Action& a = s.ranks[owner][index];
  trace::OpEvent e;
  e.step = step;
  e.rank = rank;
  e.stage = s.stage_of(owner, a.chunk);
  e.chunk = a.chunk;
  e.microbatch = a.microbatch;
  e.kind = static_cast<trace::EventKind>(a.kind);
  e.ready_ns = on_clock(origin_ns, ready);
  e.start_ns = on_clock(origin_ns, start);
  e.end_ns = on_clock(origin_ns, end);
  return e;
}

// The helper's row of a migrated op, as the runtime writes it (HELP_F/B/W/BW on the helper, peer = the owner,
// migrated = the slices, bytes both ways): its compute, ready when the payload is in (as in the runtime).
trace::OpEvent help_event(const sched::Schedule& s, const sched::MigrationTiming& m, int step, std::int64_t origin_ns) {
  const double start = help_start(m);
  trace::OpEvent e = op_row(s, m.helper, m.owner, m.index, step, origin_ns, start, start, start + m.helper_compute);
  e.kind = static_cast<trace::EventKind>(static_cast<int>(trace::EventKind::HELP_F) + static_cast<int>(e.kind));
  e.bytes = static_cast<std::int64_t>(std::llround(m.bytes));
  e.peer = m.owner;
  e.migrated = static_cast<std::int16_t>(m.slices);
  return e;
}

// One step; release_ms (overlapping steps): per rank, when it may start on the run's clock; null: the step
// starts at start_ms. rows_end_ns: per rank, where its rows of the previous step end in the trace (null: none).
StepResult run_step(const sched::Schedule& s, const NoiseModel& noise, const SimOptions& options, int step,
                    double start_ms, const std::vector<double>* release_ms,
                    const std::vector<std::int64_t>* rows_end_ns = nullptr) {
  sched::ExecOptions eo;
  // The engine's clock starts at the earliest release; `zero` is where its 0 lies on the run's clock.
  const double zero = release_ms ? *std::min_element(release_ms->begin(), release_ms->end()) : 0.0;
  if (release_ms) {
    for (double t : *release_ms) eo.release.push_back(t - zero);
  }
  eo.execution = options.execution;
  eo.hint = options.hint;
  eo.memory_limit = options.memory_limit;
  eo.rank_memory_limit = options.rank_memory_limit;
  eo.memory_after_b = noise.cost().memory_after_b;
  eo.record_transfers = options.record_events && options.comm_events;
  eo.record_ops = options.record_events;
  // Backfilling plans with the noise-free cost model: the straggler or the jitter is what it does not know.
  // Each rank's op time per kind, noise-free (the cost model's, per chunk), looked up by the estimate and, times
  // the op's factor, by its drawn time: asked at every op start, not worth the cost model's call each time.
  std::vector<std::array<double, 4>> op_times(static_cast<std::size_t>(s.p));
  for (int r = 0; r < s.p; ++r) {
    for (const sched::OpKind k : {sched::OpKind::F, sched::OpKind::B, sched::OpKind::W, sched::OpKind::BW})
      op_times[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)] = noise.cost().op_time(r, k, s.v);
  }
  const auto op_time = [&](int rank, const sched::Action& a) {
    return op_times[static_cast<std::size_t>(rank)][static_cast<std::size_t>(a.kind)];
  };
  eo.estimate = op_time;
  eo.comm_estimate = noise.cost().comm_time();
  eo.announce_latency = noise.cost().comm_time();
  eo.spread = noise.duration_spread();
  eo.wide_spread = options.wide_spread;
  eo.late_delay = noise.congestion_delay_ms();
  eo.arrival_spread = noise.arrival_spread();
  eo.migration = sched::migrations(options.migration, noise.cost(), s.p, s.v);
  // With migration every op start asks each idle peer's factor for that op (its speed as a helper), the very
  // factor the peer draws for its own op of the same chunk, microbatch and kind: drawn once per step here (NaN:
  // not yet), for both uses. The op's time is compute_time_ms's product, so the figures are the same.
  std::vector<double> factors;
  const auto factor = [&](int rank, const sched::Action& a) {
    double& f = factors[((static_cast<std::size_t>(rank) * s.v + a.chunk) * s.m + a.microbatch) * 4 +
                        static_cast<std::size_t>(a.kind)];
    if (std::isnan(f)) f = noise.compute_factor(step, rank, a.chunk, a.microbatch, a.kind);
    return f;
  };
  if (!eo.migration.empty()) {
    factors.assign(static_cast<std::size_t>(s.p) * s.v * s.m * 4, std::numeric_limits<double>::quiet_NaN());
    eo.helper_speed = factor;
  }
  const sched::ExecResult res = sched::execute(
      s, eo,
      [&](int rank, const sched::Action& a) {
        // compute_time_ms's product with the op time from the table, in both paths (so migration off, the
        // baseline of the simulator's speed, is as cheap); with migration the factor is drawn once (shared with
        // the op's helper speed).
        if (!factors.empty()) return op_time(rank, a) * factor(rank, a);
        return op_time(rank, a) * noise.compute_factor(step, rank, a.chunk, a.microbatch, a.kind);
      },
      [&](const sched::Transfer& t) { return noise.comm_time_ms(step, t); });

  StepResult r;
  r.step = step;
  // The step's clock starts at its first op; the run's clock places it at start_ms (synchronous steps).
  const double origin = release_ms ? zero : start_ms - res.start;
  r.start_ms = release_ms ? zero + res.start : start_ms;
  r.makespan_ms = res.makespan();
  r.num_ops = s.num_actions();
  r.busy_ms = res.busy;
  r.peak_memory = res.peak_memory;
  r.idle_ms.resize(s.p);
  double total_busy = 0.0;
  for (int k = 0; k < s.p; ++k) {
    r.idle_ms[k] = r.makespan_ms - r.busy_ms[k];
    total_busy += r.busy_ms[k];
    r.lower_bound_ms = std::max(r.lower_bound_ms, r.busy_ms[k]);
  }
  if (options.order_bound && eo.migration.empty()) r.order_bound_ms = order_bound_ms(s, noise, step);
  r.bubble_ratio = r.makespan_ms > 0 ? 1.0 - total_busy / (s.p * r.makespan_ms) : 0.0;
  // A rank's span holds its own ops and the slices it computed for others (its HELP rows in the trace).
  std::vector<double> first(res.first_start), last(res.last_end);
  std::vector<char> any(static_cast<std::size_t>(s.p), 0);
  for (int k = 0; k < s.p; ++k) any[k] = !res.order[k].empty();
  for (const sched::MigrationTiming& m : res.migrations) {
    const double from = help_start(m), to = from + m.helper_compute;
    const std::size_t h = static_cast<std::size_t>(m.helper);
    first[h] = any[h] ? std::min(first[h], from) : from;
    last[h] = any[h] ? std::max(last[h], to) : to;
    any[h] = 1;
  }
  std::vector<double> span(s.p, -1.0);
  for (int k = 0; k < s.p; ++k) {
    if (any[k]) span[k] = last[k] - first[k];
  }
  r.stage_bubble_ratio = trace::stage_bubble_ratio(r.busy_ms, span);
  // Where each rank's part of the step ends (its own ops and its help for others): the next step's release.
  r.rank_end_ms.resize(s.p);
  for (int k = 0; k < s.p; ++k) r.rank_end_ms[k] = origin + (any[k] ? last[k] : res.end);
  for (int k = 0; k < s.p; ++k) {
    if (span[k] > 0) r.max_stage_bubble_ratio = std::max(r.max_stage_bubble_ratio, 1.0 - r.busy_ms[k] / span[k]);
  }
  r.throughput = r.makespan_ms > 0 ? options.samples_per_step / (r.makespan_ms * 1e-3) : 0.0;
  // Bytes per link: one entry per help and refresh, then summed per link in that order (sum_links).
  std::vector<LinkBytes> links;
  links.reserve(res.migrations.size() + res.refreshes.size());
  for (std::size_t k = 0; k < res.migrations.size(); ++k) {
    const sched::MigrationTiming& m = res.migrations[k];
    // An op with several helpers has consecutive parts: counted once.
    const bool same_op = k > 0 && res.migrations[k - 1].owner == m.owner && res.migrations[k - 1].index == m.index;
    r.migrated_ops += same_op ? 0 : 1;
    r.migration_bytes += m.bytes;
    links.push_back(LinkBytes{m.owner, m.helper, m.bytes});
  }
  for (const sched::ReplicaRefresh& x : res.refreshes) {
    r.refresh_bytes += x.bytes;
    r.migration_bytes += x.bytes;
    links.push_back(LinkBytes{x.owner, x.holder, x.bytes});
  }
  r.link_bytes = sum_links(std::move(links), s.p);

  if (options.record_events) {
    r.events.reserve(res.ops.size() + 2 * res.transfers.size() + res.migrations.size());
    // Slices each migrated op sent away (the owner's row says so, as the runtime's does).
    std::map<std::pair<int, int>, int> sent;
    for (const sched::MigrationTiming& m : res.migrations) sent[{m.owner, m.index}] += m.slices;
    // The origin rounded on its own, and a nanosecond later where a rank's first row would otherwise start
    // before its last row of the previous step ends (the two roundings of one instant can differ by one).
    std::int64_t origin_ns = to_ns(origin);
    if (rows_end_ns && rows_end_ns->size() == static_cast<std::size_t>(s.p)) {
      const auto after = [&](int rank, double start) {
        const std::int64_t end = (*rows_end_ns)[static_cast<std::size_t>(rank)];
        if (end != std::numeric_limits<std::int64_t>::min()) origin_ns = std::max(origin_ns, end - to_ns(start));
      };
      for (const auto& op : res.ops) after(op.rank, op.start);
      for (const sched::MigrationTiming& m : res.migrations) after(m.helper, help_start(m));
    }
    for (const auto& op : res.ops) {
      trace::OpEvent e = op_row(s, op.rank, op.rank, op.index, step, origin_ns, op.ready, op.start, op.end);
      e.wait_ns = to_ns(op.wait);
      e.bytes = options.activation_bytes;  // the activation (or its gradient) it holds, as the runtime's rows
      if (const auto it = sent.find({op.rank, op.index}); it != sent.end())
        e.migrated = static_cast<std::int16_t>(it->second);
      r.events.push_back(e);
    }
    for (const sched::MigrationTiming& m : res.migrations) r.events.push_back(help_event(s, m, step, origin_ns));
    for (const auto& t : res.transfers) {
      trace::OpEvent e;
      e.step = step;
      e.microbatch = t.transfer.microbatch;
      e.ready_ns = e.start_ns = on_clock(origin_ns, t.sent);
      e.end_ns = on_clock(origin_ns, t.arrived);
      e.bytes = options.activation_bytes;
      e.kind = trace::EventKind::SEND;
      e.rank = t.transfer.from_rank;
      e.stage = t.transfer.from_stage;
      e.chunk = t.transfer.from_chunk;
      e.peer = t.transfer.to_rank;
      r.events.push_back(e);
      e.kind = trace::EventKind::RECV;
      e.rank = t.transfer.to_rank;
      e.stage = t.transfer.to_stage;
      e.chunk = t.transfer.to_chunk;
      e.peer = t.transfer.from_rank;
      r.events.push_back(e);
    }
  }
  return r;
}

}  // namespace

StepResult simulate_step(const sched::Schedule& s, const NoiseModel& noise, const SimOptions& options, int step,
                         double start_ms) {
  return run_step(s, noise, options, step, start_ms, nullptr);
}

StepResult StepClock::simulate(const sched::Schedule& s, const NoiseModel& noise, const SimOptions& options, int step) {
  const std::vector<std::int64_t>* floor = rows_end_ns_.empty() ? nullptr : &rows_end_ns_;
  StepResult r;
  if (!options.overlap_steps) {
    r = run_step(s, noise, options, step, clock_, nullptr, floor);
    clock_ = r.start_ms + r.makespan_ms;
  } else {
    if (release_.size() != static_cast<std::size_t>(s.p)) release_.assign(static_cast<std::size_t>(s.p), clock_);
    r = run_step(s, noise, options, step, 0.0, &release_, floor);
    release_ = r.rank_end_ms;
  }
  // Where each rank's rows (its ops and helps; transfers are rows of their own) end, for the next step.
  if (!r.events.empty()) {
    rows_end_ns_.resize(static_cast<std::size_t>(s.p), std::numeric_limits<std::int64_t>::min());
    for (const trace::OpEvent& e : r.events) {
      if (e.kind == trace::EventKind::SEND || e.kind == trace::EventKind::RECV) continue;
      std::int64_t& end = rows_end_ns_[static_cast<std::size_t>(e.rank)];
      end = std::max(end, e.end_ns);
    }
  }
  return r;
}

namespace {

// The run-level figures (RunResult's comment): span, throughput and global bubble over all steps and over
// steps 1.. (the steady state).
void finish_run_span(RunResult& run, int p) {
  if (run.steps.empty()) return;
  const auto end_of = [](const StepResult& s) { return s.start_ms + s.makespan_ms; };
  double busy_all = 0.0, busy_steady = 0.0, run_end = end_of(run.steps.front());
  for (std::size_t k = 0; k < run.steps.size(); ++k) {
    double busy = 0.0;
    for (double b : run.steps[k].busy_ms) busy += b;
    busy_all += busy;
    if (k > 0) busy_steady += busy;
    run_end = std::max(run_end, end_of(run.steps[k]));
  }
  const double n = static_cast<double>(run.steps.size());
  run.span_ms = run_end - run.steps.front().start_ms;
  run.run_throughput = run.span_ms > 0 ? n * run.samples_per_step / (run.span_ms * 1e-3) : 0.0;
  // Busy time never exceeds p x the span; the steps' makespans are the trace's (whole nanoseconds) and the busy
  // times are not, so a step without idle time could read a few 1e-9 below zero.
  const auto bubble = [p](double busy, double span) { return std::max(0.0, 1.0 - busy / (p * span)); };
  run.run_bubble_ratio = run.span_ms > 0 ? bubble(busy_all, run.span_ms) : 0.0;
  const double steady_ms = run_end - end_of(run.steps.front());
  if (run.steps.size() < 2 || steady_ms <= 0) {
    run.steady_throughput = run.run_throughput;
    run.steady_bubble_ratio = run.run_bubble_ratio;
    return;
  }
  run.steady_throughput = (n - 1) * run.samples_per_step / (steady_ms * 1e-3);
  run.steady_bubble_ratio = bubble(busy_steady, steady_ms);
}

}  // namespace

std::vector<LinkBytes> sum_links(std::vector<LinkBytes> links, int p) {
  std::vector<LinkBytes> out;
  const std::size_t cells = p > 0 ? static_cast<std::size_t>(p) * static_cast<std::size_t>(p) : 0;
  if (cells > 0 && cells <= 4 * links.size() + 1024) {
    // A p x p table: linear in the entries, where sorting them cost more than the rest of a step's figures.
    std::vector<double> table(cells, 0.0);
    std::vector<char> used(cells, 0);
    for (const LinkBytes& l : links) {
      const std::size_t at = static_cast<std::size_t>(l.from) * static_cast<std::size_t>(p) + l.to;
      table[at] += l.bytes;
      used[at] = 1;
    }
    for (std::size_t at = 0; at < cells; ++at) {
      if (used[at]) out.push_back(LinkBytes{static_cast<int>(at / p), static_cast<int>(at % p), table[at]});
    }
    return out;
  }
  const auto before = [](const LinkBytes& a, const LinkBytes& b) {
    return a.from != b.from ? a.from < b.from : a.to < b.to;
  };
  std::stable_sort(links.begin(), links.end(), before);  // stable: each link's bytes in the order given
  for (const LinkBytes& l : links) {
    if (out.empty() || out.back().from != l.from || out.back().to != l.to) out.push_back(LinkBytes{l.from, l.to, 0.0});
    out.back().bytes += l.bytes;
  }
  return out;
}

double bytes_on(const std::vector<LinkBytes>& links, int from, int to) {
  for (const LinkBytes& l : links) {
    if (l.from == from && l.to == to) return l.bytes;
  }
  return 0.0;
}

void finish_run(RunResult& run, int p) {
  finish_run_span(run, p);
  const double n = static_cast<double>(std::max<std::size_t>(1, run.steps.size()));
  run.mean_makespan_ms = run.mean_bubble_ratio = run.mean_lower_bound_ms = run.mean_throughput = 0.0;
  run.mean_order_bound_ms = 0.0;
  run.mean_stage_bubble_ratio = run.mean_max_stage_bubble_ratio = run.mean_migrated_ops = run.mean_migration_bytes =
      run.mean_refresh_bytes = 0.0;
  run.mean_link_bytes.clear();
  run.mean_busy_ms.assign(p, 0.0);
  run.mean_idle_ms.assign(p, 0.0);
  run.peak_memory.assign(p, 0.0);
  // The steps' samples over their summed time, not the mean of their rates: beside the mean step time it is
  // samples per step / that mean, as analysis/compare.py computes it (a mean of rates lets fast steps dominate).
  double samples = 0, time_ms = 0;
  for (const auto& s : run.steps) {
    run.mean_makespan_ms += s.makespan_ms / n;
    run.mean_bubble_ratio += s.bubble_ratio / n;
    run.mean_stage_bubble_ratio += s.stage_bubble_ratio / n;
    run.mean_max_stage_bubble_ratio += s.max_stage_bubble_ratio / n;
    run.mean_lower_bound_ms += s.lower_bound_ms / n;
    run.mean_order_bound_ms += s.order_bound_ms / n;
    samples += s.throughput * s.makespan_ms;  // samples x 1000, per step
    time_ms += s.makespan_ms;
    run.mean_migrated_ops += s.migrated_ops / n;
    run.mean_migration_bytes += s.migration_bytes / n;
    run.mean_refresh_bytes += s.refresh_bytes / n;
    for (const LinkBytes& l : s.link_bytes) run.mean_link_bytes.push_back(LinkBytes{l.from, l.to, l.bytes / n});
    for (int r = 0; r < p; ++r) {
      run.mean_busy_ms[r] += s.busy_ms[r] / n;
      run.mean_idle_ms[r] += s.idle_ms[r] / n;
      run.peak_memory[r] = std::max(run.peak_memory[r], s.peak_memory[r]);
    }
  }
  run.mean_link_bytes = sum_links(std::move(run.mean_link_bytes), p);
  run.mean_throughput = time_ms > 0 ? samples / time_ms : 0.0;
}

RunResult simulate_run(const sched::Schedule& schedule, const NoiseModel& noise, const SimOptions& options, int steps) {
  return simulate_run(schedule, noise, options, steps, [](const StepResult&) {});
}

}  // namespace conductor::sim

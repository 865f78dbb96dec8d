// `conductor schedule`: the deck's schedule (generated, or read from schedule.kind: file:PATH) printed as the text
// form, as torch.distributed.pipelining's CSV, or as an ASCII timeline of its first simulated step.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "conductor/cli/cli.hpp"
#include "conductor/cli/size_guard.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sched/torch_csv.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/sim/simulator.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"

namespace conductor::cli {

namespace {

// The step's makespan is spread over 100 to 400 characters: as few as let the shortest op show its whole label.
constexpr int kChartColumns = 100, kChartMaxColumns = 400;

// An op's label: its kind and microbatch ("F3", "BW12"); lower case for chunks >= 1, so the two chunks of an
// interleaved or V schedule stand apart.
std::string op_label(const trace::OpEvent& e) {
  std::string label = std::string(trace::to_string(e.kind)) + std::to_string(e.microbatch);
  if (e.chunk > 0)
    std::transform(label.begin(), label.end(), label.begin(), [](unsigned char c) { return std::tolower(c); });
  return label;
}

// One op's cells: its label, then '-' to its end. What does not fit its cells is cut (returns false).
bool draw_op(std::string& row, const trace::OpEvent& e, std::int64_t t0, double ns_per_column) {
  const auto first = static_cast<std::size_t>(std::llround(static_cast<double>(e.start_ns - t0) / ns_per_column));
  auto last = static_cast<std::size_t>(std::llround(static_cast<double>(e.end_ns - t0) / ns_per_column));
  last = std::min(std::max(last, first + 1), row.size());  // every op shows, however short
  const std::string label = op_label(e);
  for (std::size_t i = first; i < last; ++i) row[i] = i - first < label.size() ? label[i - first] : '-';
  return last - first >= label.size();
}

void print_chart(const std::string& deck_path, const sched::Schedule& schedule, const sim::StepResult& step) {
  std::int64_t t0 = 0, t1 = 0;
  bool any = false;
  for (const auto& e : step.events) {
    if (e.peer >= 0) continue;  // transfers: the chart shows compute only
    t0 = any ? std::min(t0, e.start_ns) : e.start_ns;
    t1 = any ? std::max(t1, e.end_ns) : e.end_ns;
    any = true;
  }
  // Columns for the op that needs the most per nanosecond (its label over its time), within the bounds.
  double columns = kChartColumns;
  for (const auto& e : step.events) {
    if (e.peer < 0 && e.end_ns > e.start_ns)
      columns = std::max(columns, static_cast<double>(op_label(e).size() + 1) * static_cast<double>(t1 - t0) /
                                      static_cast<double>(e.end_ns - e.start_ns));
  }
  const int width = static_cast<int>(std::min<double>(std::ceil(columns), kChartMaxColumns));
  const double ns_per_column = std::max<double>(1.0, static_cast<double>(t1 - t0) / width);
  std::vector<std::string> rows(static_cast<std::size_t>(schedule.p),
                                std::string(static_cast<std::size_t>(width), '.'));
  bool cut = false;
  for (const auto& e : step.events) {
    if (e.peer < 0) cut |= !draw_op(rows[static_cast<std::size_t>(e.rank)], e, t0, ns_per_column);
  }
  std::printf("%s: %s, p %d, m %d, v %d (%s placement); simulated step 0: makespan %.4g ms, bubble %.3f\n",
              deck_path.c_str(), schedule.name.c_str(), schedule.p, schedule.m, schedule.v,
              sched::to_string(schedule.placement), step.makespan_ms, step.bubble_ratio);
  std::printf(
      "one column = %.4g ms; F forward, B backward (input), W backward (weights), BW full backward, then the "
      "microbatch; lower case: chunk 1 and up; '.' idle%s\n",
      ns_per_column * 1e-6,
      cut ? "; ops too short for their label show its start (analysis/timeline.py draws every step in full)" : "");
  for (int r = 0; r < schedule.p; ++r) std::printf("rank %3d |%s|\n", r, rows[static_cast<std::size_t>(r)].c_str());
}

}  // namespace

int cmd_schedule(const Invocation& inv) {
  const std::string format = inv.has_flag("--format") ? inv.flags.at("--format") : "text";
  if (format != "text" && format != "csv" && format != "chart") {
    std::fprintf(stderr, "conductor: --format '%s' is not a format: text, csv or chart\n", printable(format).c_str());
    return kExitUsage;
  }
  const config::Deck deck = load_deck(inv, config::Command::Schedule);
  const plan::Plan plan = config::resolve(deck);
  sched::Schedule schedule;
  try {
    check_simulate_size(deck, 0);
    schedule = sched::make_schedule(plan);
  } catch (const InputError& e) {
    std::fprintf(stderr, "conductor: %s\n", e.what());
    return kExitUsage;
  }
  if (format == "text") {
    std::fputs(sched::to_text(schedule).c_str(), stdout);
  } else if (format == "csv") {
    std::fflush(stdout);
    try {
      sched::write_torch_csv(std::cout, schedule);
    } catch (const InputError& e) {  // too large to read back: refused before it writes
      std::fprintf(stderr, "conductor: %s\n", e.what());
      return kExitUsage;
    }
    std::cout.flush();
  } else {
    sim::SimOptions options = sim::SimOptions::from_plan(plan, schedule);
    options.record_events = true;
    const sim::NoiseModel noise = sim::NoiseModel::from_plan(plan, schedule);
    print_chart(inv.deck_path, schedule, sim::simulate_step(schedule, noise, options, 0));
  }
  return 0;
}

}  // namespace conductor::cli

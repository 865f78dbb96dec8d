#include "conductor/runtime/training.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "collective.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/runtime/checkpointing.hpp"
#include "conductor/runtime/clock.hpp"
#include "conductor/runtime/compute.hpp"
#include "conductor/runtime/executor.hpp"
#include "conductor/runtime/numerics.hpp"
#include "conductor/runtime/stop_signal.hpp"
#include "conductor/runtime/transport.hpp"
#include "conductor/runtime/watchdog.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sched/planner.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/sim/simulator.hpp"
#include "conductor/sim/summary_json.hpp"
#include "conductor/trace/summary.hpp"
#include "conductor/trace/trace_writer.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/mpi.hpp"
#include "conductor/version.hpp"

namespace conductor::runtime {

namespace {

// Rank 0's text broadcast to every rank.
std::string broadcast_text(std::string text, MPI_Comm comm) {
  long long n = static_cast<long long>(text.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm);
  text.resize(static_cast<std::size_t>(n));
  if (n > 0) MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, 0, comm);
  return text;
}

// The order of a step travels from rank 0 as the schedule's text form: the one representation every layer
// reads.
sched::Schedule broadcast_order(const sched::Schedule* order, int rank, MPI_Comm comm) {
  std::string text = broadcast_text(rank == 0 ? sched::to_text(*order) : std::string(), comm);
  if (rank == 0) return *order;
  sched::Schedule s = sched::parse_text(text, "order from rank 0");
  s.name = order ? order->name : s.name;
  return s;
}

std::vector<trace::OpEvent> gather_events(const std::vector<trace::OpEvent>& mine, int rank, int size, MPI_Comm comm,
                                          const Watchdog& watchdog, int step) {
  // With two ranks the missing one is known: the other.
  const std::string from = size == 2 ? " from rank " + std::to_string(1 - rank) : std::string();
  const std::string what = "the end-of-step gather of the trace events" + from + " (step " + std::to_string(step) + ")";
  int bytes = static_cast<int>(mine.size() * sizeof(trace::OpEvent));
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  watched_gather(watchdog, &bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm, what);
  std::vector<trace::OpEvent> all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < size; ++r) {
      displs[static_cast<std::size_t>(r)] = total;
      total += counts[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(total) / sizeof(trace::OpEvent));
  }
  watched_gatherv(watchdog, mine.data(), bytes, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, 0, comm,
                  what);
  return all;
}

std::vector<std::string> gather_hostnames(int rank, int size, MPI_Comm comm) {
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, comm);
  std::vector<std::string> hosts;
  if (rank == 0) {
    for (int r = 0; r < size; ++r) hosts.emplace_back(&all[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  }
  return hosts;
}

// The simulator's per-step record, from measured events, so the summary has the simulator's fields.
sim::StepResult step_result(const trace::StepRecord& rec, const std::vector<trace::OpEvent>& events, int p,
                            const std::vector<double>& peaks) {
  sim::StepResult r;
  r.step = rec.step;
  r.start_ms = static_cast<double>(rec.start_ns) * 1e-6;
  r.makespan_ms = static_cast<double>(rec.makespan_ns) * 1e-6;
  r.bubble_ratio = rec.bubble_ratio;
  r.stage_bubble_ratio = rec.stage_bubble_ratio;
  r.lower_bound_ms = rec.lower_bound_ns * 1e-6;
  r.throughput = rec.samples_per_s;
  r.busy_ms.assign(static_cast<std::size_t>(p), 0.0);
  for (const auto& e : events) {
    if (trace::is_compute(e.kind)) r.busy_ms[static_cast<std::size_t>(e.rank)] += (e.end_ns - e.start_ns) * 1e-6;
  }
  r.idle_ms.resize(static_cast<std::size_t>(p));
  for (int k = 0; k < p; ++k)
    r.idle_ms[static_cast<std::size_t>(k)] = r.makespan_ms - r.busy_ms[static_cast<std::size_t>(k)];
  r.peak_memory = peaks;
  r.num_ops = events.size();
  return r;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error(path.string() + ": cannot write");
}

// Fault injection for the tests of the failure paths: CONDUCTOR_INJECT_FAILURE=RANK:STEP[:kill] makes that
// rank throw (or die by SIGKILL) at the start of that step.
void maybe_inject_failure(int rank, int step) {
  const char* env = std::getenv("CONDUCTOR_INJECT_FAILURE");
  if (!env) return;
  int r = -1, s = -1;
  char how[16] = {0};
  if (std::sscanf(env, "%d:%d:%15s", &r, &s, how) < 2 || r != rank || s != step) return;
  if (std::string(how) == "kill") std::raise(SIGKILL);
  throw Error("injected failure on rank " + std::to_string(rank) + " at step " + std::to_string(step) +
              " (CONDUCTOR_INJECT_FAILURE)");
}

}  // namespace

RunOutcome train(const plan::Plan& plan, MPI_Comm comm, const sched::PlannerFactory& make_planner) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  install_stop_handlers();

  RunOutcome outcome;
  outcome.output_dir = plan.run.output;
  const std::filesystem::path out_dir(plan.run.output);

  // The schedule is generated (or loaded from file and validated) on rank 0 and travels as text.
  std::unique_ptr<sched::OrderPlanner> planner;
  std::optional<sched::PlanAhead> ahead;  // rank 0, replanning: the global tier's loop (a planner thread)
  sched::Schedule order0;
  const bool replanning = static_cast<bool>(make_planner);
  collectively(comm, kExitUsage, [&] {
    if (rank != 0) return;
    if (!replanning && plan.scheduler.kind != "static")
      throw InputError("scheduler.kind = '" + plan.scheduler.kind +
                       "' needs its planner (the conductor command wires it in)");
    const sched::Schedule generated = sched::make_schedule(plan);
    planner = replanning ? make_planner(generated) : std::make_unique<sched::StaticPlanner>(generated);
    if (replanning) ahead.emplace(*planner, plan.run.steps, sched::PlanAhead::Threading::Background);
    order0 = planner->initial_order();
  });
  sched::Schedule order = broadcast_order(rank == 0 ? &order0 : nullptr, rank, comm);

  const double memory_limit = sched::memory_limit_for(plan, order);
  const sched::CostModel cost = plan.costs;
  const sim::NoiseModel noise = sim::NoiseModel::from_plan(plan, order);
  const CommonClock clock(comm);
  const std::vector<std::string> hosts = gather_hostnames(rank, size, comm);

  std::unique_ptr<Compute> compute;
  std::unique_ptr<trace::TraceWriter> writer;
  int first_step = 0;
  collectively(comm, kExitUsage, [&] { compute = make_compute(plan, order, rank, noise, comm); });
  // Checkpoints (runtime/checkpointing.hpp): checked and loaded collectively before anything runs.
  if (compute->model() && !plan.checkpoint.path.empty()) probe_checkpoint_path(plan, comm);
  if (!plan.checkpoint.resume.empty()) first_step = resume_from_checkpoint(plan, compute->model(), comm);
  // Only now, with the deck and every input checked on every rank, rank 0 writes into the run folder (the
  // command checked beforehand that it holds no other run's results and can be written).
  collectively(comm, kExitUsage, [&] {
    if (rank != 0) return;
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) throw InputError("run.output = '" + out_dir.string() + "': cannot create the folder: " + ec.message());
    write_file(out_dir / "resolved.yaml", plan.deck_yaml);
    const std::string trace_path = (out_dir / "trace.h5").string();
    if (plan.trace.enabled && first_step > 0 && std::filesystem::exists(trace_path)) {
      // A resumed run (e.g. a requeued Slurm job) continues its trace: docs/trace.md, "Resumed runs".
      writer = std::make_unique<trace::TraceWriter>(trace_path, first_step);
      log::info("continuing the trace " + trace_path + " at step " + std::to_string(first_step + 1));
    } else if (plan.trace.enabled) {
      trace::RunInfo info;
      info.deck = plan.deck_yaml;
      info.world_size = size;
      info.schedule = plan.schedule.kind;
      info.execution = plan.schedule.execution;
      info.hint = plan.schedule.hint;
      info.backend = plan.backend;
      info.source = "runtime";
      info.hostnames = hosts;
      info.git_revision = kGitRevision;
      info.pipeline = order.p;
      info.microbatches = order.m;
      info.virtual_chunks = order.v;
      writer = std::make_unique<trace::TraceWriter>(trace_path, info);
    }
  });
  outcome.first_step = first_step;

  ExecutorOptions eo;
  eo.execution = sched::parse_execution(plan.schedule.execution);
  eo.hint = sched::parse_hint(plan.schedule.hint);
  eo.memory_limit = sched::rank_memory_limits(plan, order).at(static_cast<std::size_t>(rank));  // this rank's own
  eo.memory_after_b = cost.memory_after_b;
  eo.comm_events = plan.trace.comm_events;
  eo.inject_full_comm_time = plan.backend == "emulated";
  eo.watchdog_s = plan.runtime.watchdog_s;
  {
    MPI_Comm node;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    int local_ranks = 1;
    MPI_Comm_size(node, &local_ranks);
    MPI_Comm_free(&node);
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    eo.oversubscribed = static_cast<unsigned>(local_ranks) > cores;
  }
  // Two planes on communicators of their own: readiness headers (host MPI) and tensors (MPI, NCCL or
  // host-staged device copies), so neither ever matches the other's messages nor the run's collectives.
  mpi::DupComm control_comm(comm), data_comm(comm);
  MpiTransport control(control_comm.get());
  std::unique_ptr<Transport> data;
  std::string data_transport;
  collectively(comm, kExitFailure,
               [&] { data = make_data_transport(plan, order, rank, *compute, data_comm.get(), data_transport); });
  Executor executor(rank, control, *data, *compute, clock, noise, eo);

  const double samples = static_cast<double>(plan.pipeline.m) * plan.pipeline.microbatch_size;
  sim::RunResult measured;
  if (rank == 0) {
    log::info("conductor run: " + plan.run.name + ", " + std::to_string(size) + " ranks, schedule " +
              plan.schedule.kind + " (" + plan.schedule.execution +
              (eo.execution == sched::Execution::Readiness ? ", hint " + plan.schedule.hint : "") + "), backend " +
              plan.backend + " (tensors over " + data_transport + "), " + std::to_string(order.m) +
              " microbatches, steps " + std::to_string(first_step) + ".." + std::to_string(plan.run.steps - 1));
  }

  const Watchdog watchdog(plan.runtime.watchdog_s, rank);
  const StepReducer reducer(*compute, order.num_stages(), comm);
  NonfiniteGuard nonfinite(plan.optim.skip_nonfinite_steps, order.rank_of(order.num_stages() - 1));
  for (int step = first_step; step < plan.run.steps; ++step) {
    maybe_inject_failure(rank, step);
    StepOutcome so = executor.run_step(step, order);

    // One reduction carries the gradient norm, the loss and whether anyone was asked to stop; every rank gets
    // the same numbers, so every rank takes the same decision on a non-finite step without another message.
    const StepNumbers numbers = reducer.reduce(step, stop_requested(), watchdog);
    const bool has_math = compute->payload_floats() > 0;
    const int nonfinite_rank = numbers.nonfinite_stage >= 0 ? order.rank_of(numbers.nonfinite_stage) : -1;
    const NonfiniteGuard::Verdict verdict = nonfinite.judge(numbers, step, nonfinite_rank, has_math);
    if (verdict == NonfiniteGuard::Verdict::Update) compute->optimizer_step(std::sqrt(numbers.grad_sq_norm), step);
    const double loss = has_math ? numbers.loss : std::numeric_limits<double>::quiet_NaN();

    std::vector<trace::OpEvent> all = gather_events(so.events, rank, size, comm, watchdog, step);
    double peak = so.peak_memory;
    std::vector<double> peaks(static_cast<std::size_t>(size));
    watched_gather(watchdog, &peak, 1, MPI_DOUBLE, peaks.data(), 1, MPI_DOUBLE, 0, comm,
                   "the end-of-step gather of peak memory" +
                       (size == 2 ? " from rank " + std::to_string(1 - rank) : std::string()) + " (step " +
                       std::to_string(step) + ")");

    if (rank == 0) {
      std::vector<trace::OpEvent> compute_events;
      for (const auto& e : all) {
        if (trace::is_compute(e.kind)) compute_events.push_back(e);
      }
      trace::StepRecord rec = trace::summarize_step(compute_events, size, step, samples);
      rec.loss = loss;
      if (writer) {
        writer->append_events(all);
        writer->append_step(rec);
        writer->flush();
      }
      measured.steps.push_back(step_result(rec, compute_events, size, peaks));
      outcome.losses.push_back(loss);
      char line[256];
      std::snprintf(line, sizeof line, "step %4d/%d  loss %s  time %8.2f ms  bubble %.3f  samples/s %9.1f", step + 1,
                    plan.run.steps, has_math ? json_number(loss).c_str() : "  -   ",
                    static_cast<double>(rec.makespan_ns) * 1e-6, rec.bubble_ratio, rec.samples_per_s);
      log::info(line);
      if (verdict != NonfiniteGuard::Verdict::Update) {
        (verdict == NonfiniteGuard::Verdict::Skip ? log::warn : log::error)(nonfinite.message());
      } else if (const std::string warning = nonfinite.divergence(loss, step); !warning.empty()) {
        log::warn(warning);
      }
    }
    outcome.steps_done = step + 1 - first_step;
    if (verdict == NonfiniteGuard::Verdict::Stop) {
      outcome.nonfinite = true;  // the step is in the trace; the model is not updated and not checkpointed
      break;
    }

    const bool stopping = numbers.stop;
    const bool last = step + 1 == plan.run.steps;
    if (compute->model() && !plan.checkpoint.path.empty()) {
      const bool due = last || stopping || (plan.checkpoint.every > 0 && (step + 1) % plan.checkpoint.every == 0);
      if (due) {
        collectively(comm, kExitFailure, [&] {
          // Never a checkpoint of non-finite state (NaN weights pass the loss check for one step: the update
          // that made them ran after it).
          if (std::string where; !state_is_finite(*compute, where))
            throw Error("step " + std::to_string(step + 1) + ": non-finite " + where +
                        " after the update; stopping without writing the checkpoint");
        });
        save_checkpoint_step(plan, *compute->model(), step + 1, comm);
      }
    }
    // The global tier (rank 0) plans while the ranks train: the order computed from step k's timings is
    // ready by the end of step k+1 and runs at step k+2, so the policy's latency never stalls the pipeline.
    if (!last && !stopping && replanning) {
      collectively(comm, kExitFailure, [&] {
        if (rank != 0) return;
        std::optional<sched::Schedule> next = ahead->after_step(step, order, std::move(all));  // planner errors too
        if (!next) return;
        sched::validate_or_throw(*next, memory_limit, cost.memory_after_b, "the global scheduler's order");
        order0 = std::move(*next);
      });
      order = broadcast_order(rank == 0 ? &order0 : nullptr, rank, comm);
    }
    if (stopping) {
      outcome.stop_signal = stop_requested() ? stop_signal_number() : SIGTERM;
      if (rank == 0) log::warn("stop requested (signal): stopped after step " + std::to_string(step + 1));
      break;
    }
  }

  if (rank == 0) {
    if (writer) writer->close();
    if (ahead) ahead->finish();  // stopped early: let the planner finish before reading its figures
    const std::vector<double> scheduler_latency_ms = ahead ? ahead->latency_ms() : std::vector<double>();
    const int orders_from_policy = ahead ? ahead->orders_from_planner() : 0;
    sim::finish_run(measured, size);
    const double final_loss = outcome.losses.empty() ? std::numeric_limits<double>::quiet_NaN() : outcome.losses.back();
    const sim::TrainingFigures training{first_step, outcome.losses, orders_from_policy, scheduler_latency_ms};
    write_file(out_dir / "summary.json",
               sim::dump_json(sim::summary_json(measured, plan, order, memory_limit, training)) + "\n");
    if (!scheduler_latency_ms.empty()) {
      double latency_sum = 0;
      for (double l : scheduler_latency_ms) latency_sum += l;
      char line[160];
      std::snprintf(line, sizeof line,
                    "global tier: %d steps ran its orders, planning latency mean %.3f ms (overlapped with training)",
                    orders_from_policy, latency_sum / static_cast<double>(scheduler_latency_ms.size()));
      log::info(line);
    }
    char line[256];
    std::snprintf(
        line, sizeof line,
        "summary: %d steps, mean step %.2f ms, bubble ratio %.3f, %.1f samples/s, makespan/lower bound %.3f%s%s",
        outcome.steps_done, measured.mean_makespan_ms, measured.mean_bubble_ratio, measured.mean_throughput,
        measured.mean_lower_bound_ms > 0 ? measured.mean_makespan_ms / measured.mean_lower_bound_ms : 0.0,
        outcome.losses.empty() || !std::isfinite(final_loss) ? "" : ", final loss ",
        outcome.losses.empty() || !std::isfinite(final_loss) ? "" : json_number(final_loss).c_str());
    log::info(line);
    log::info("results: " + (out_dir / "summary.json").string() + ", " +
              (writer ? (out_dir / "trace.h5").string() + ", " : std::string()) + (out_dir / "resolved.yaml").string());
  }
  return outcome;
}

}  // namespace conductor::runtime

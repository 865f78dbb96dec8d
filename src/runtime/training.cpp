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
#include "conductor/model/optimizer.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/runtime/checkpointing.hpp"
#include "conductor/runtime/clock.hpp"
#include "conductor/runtime/compute.hpp"
#include "conductor/runtime/evaluation.hpp"
#include "conductor/runtime/executor.hpp"
#include "conductor/runtime/numerics.hpp"
#include "conductor/runtime/run_report.hpp"
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

// The order of a step travels from rank 0 as the schedule's text form: the one representation every layer
// reads.
sched::Schedule broadcast_order(const sched::Schedule* order, int rank, MPI_Comm comm) {
  std::string text = mpi::broadcast_text(rank == 0 ? sched::to_text(*order) : std::string(), comm);
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

// Fault injection for the tests of the failure paths: CONDUCTOR_INJECT_FAILURE=RANK:STEP[:kill] makes that
// rank throw (or die by SIGKILL) at the start of that step.
void maybe_inject_failure(int rank, int step) {
  const char* env = std::getenv("CONDUCTOR_INJECT_FAILURE");
  if (!env) return;
  int r = -1, s = -1;
  char how[16] = {0};
  if (std::sscanf(env, "%d:%d:%15s", &r, &s, how) < 2 || r != rank || s != step) return;
  if (std::string(how) == "hang-help") return;  // the executor's (a helper that stops mid-help)
  if (std::string(how) == "kill") std::raise(SIGKILL);
  throw Error("injected failure on rank " + std::to_string(rank) + " at step " + std::to_string(step) +
              " (CONDUCTOR_INJECT_FAILURE)");
}

// Whether this node runs more ranks than it has cores (the executor then yields instead of spinning).
bool node_oversubscribed(int rank, MPI_Comm comm) {
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_ranks = 1;
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(local_ranks) > cores;
}

ExecutorOptions executor_options(const plan::Plan& plan, const sched::Schedule& order, int rank, MPI_Comm comm) {
  ExecutorOptions eo;
  eo.execution = sched::parse_execution(plan.schedule.execution);
  eo.hint = sched::parse_hint(plan.schedule.hint);
  eo.memory_limit = sched::rank_memory_limits(plan, order).at(static_cast<std::size_t>(rank));  // this rank's own
  eo.memory_after_b = plan.costs.memory_after_b;
  eo.comm_events = plan.trace.comm_events;
  eo.inject_full_comm_time = plan.backend == "emulated";
  eo.watchdog_s = plan.runtime.watchdog_s;
  eo.oversubscribed = node_oversubscribed(rank, comm);
  // The deck's check lets migration through on the emulated and cpu backends (schema_migration.cpp).
  if (plan.migration.enabled) eo.migration = sched::Migration(plan.migration, plan.costs, rank, order.v);
  eo.forced = plan.migration.force;
  return eo;
}

// One run of `conductor run` on one rank: set up in the constructor (every input checked collectively before
// anything is written), then steps until run.steps, a stop signal or a non-finite step, then the report.
class Training {
 public:
  Training(const plan::Plan& plan, MPI_Comm comm, const sched::PlannerFactory& make_planner);
  RunOutcome run();

 private:
  enum class After { Continue, Stop };
  void plan_first_order(const sched::PlannerFactory& make_planner);
  void open_data_plane();
  After step(int step);
  StepNumbers update_synchronously(int step, bool has_math, NonfiniteGuard::Verdict& verdict);
  StepNumbers update_post_validated(int step, bool has_math, NonfiniteGuard::Verdict& verdict);
  void report_backup_size();
  void checkpoint_if_due(int step, bool stopping, bool last);
  void replan(int step, std::vector<trace::OpEvent> all);
  void finish();

  const plan::Plan& plan_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  RunOutcome outcome_;
  bool replanning_ = false;
  std::unique_ptr<sched::OrderPlanner> planner_;  // rank 0
  std::optional<sched::PlanAhead> ahead_;         // rank 0, replanning: the global tier's loop (a planner thread)
  sched::Schedule order0_;                        // rank 0: the order the next broadcast sends
  sched::Schedule order_;                         // the order every rank runs
  double memory_limit_ = 0;
  std::optional<sim::NoiseModel> noise_;
  std::optional<CommonClock> clock_;
  std::unique_ptr<Compute> compute_;
  std::optional<RunReport> report_;  // rank 0
  int first_step_ = 0;
  std::optional<mpi::DupComm> control_comm_, data_comm_;
  std::optional<MpiTransport> control_;
  std::unique_ptr<Transport> data_;
  std::string data_transport_;
  std::optional<Executor> executor_;
  std::optional<Watchdog> watchdog_;
  std::optional<StepReducer> reducer_;
  std::optional<NonfiniteGuard> nonfinite_;
  std::size_t backup_bytes_ = 0;  // post-validation's copy of weights and AdamW moments on this rank
};

Training::Training(const plan::Plan& plan, MPI_Comm comm, const sched::PlannerFactory& make_planner)
    : plan_(plan), comm_(comm), replanning_(static_cast<bool>(make_planner)) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  install_stop_handlers();
  outcome_.output_dir = plan.run.output;
  plan_first_order(make_planner);
  memory_limit_ = sched::memory_limit_for(plan, order_);
  noise_.emplace(sim::NoiseModel::from_plan(plan, order_));
  clock_.emplace(comm);
  const std::vector<std::string> hosts = gather_hostnames(rank_, size_, comm);

  collectively(comm, kExitUsage, [&] { compute_ = make_compute(plan, order_, rank_, *noise_, comm); });
  // Checkpoints (runtime/checkpointing.hpp): checked and loaded collectively before anything runs.
  if (compute_->model() && !plan.checkpoint.path.empty()) probe_checkpoint_path(plan, comm);
  if (!plan.checkpoint.resume.empty()) first_step_ = resume_from_checkpoint(plan, compute_->model(), comm);
  outcome_.first_step = first_step_;
  // Only now, with the deck and every input checked on every rank, rank 0 writes into the run folder (the
  // command checked beforehand that it holds no other run's results and can be written).
  collectively(comm, kExitUsage, [&] {
    if (rank_ == 0) report_.emplace(plan, order_, size_, first_step_, hosts, compute_->payload_floats() > 0);
  });
  open_data_plane();
  Watchdog::open_channel(comm);  // one watchdog message per job, whichever ranks time out
  watchdog_.emplace(plan.runtime.watchdog_s, rank_);
  reducer_.emplace(*compute_, order_.num_stages(), comm);
  nonfinite_.emplace(plan.optim.skip_nonfinite_steps, order_.rank_of(order_.num_stages() - 1));
}

// The schedule is generated (or loaded from file and validated) on rank 0 and travels as text.
void Training::plan_first_order(const sched::PlannerFactory& make_planner) {
  collectively(comm_, kExitUsage, [&] {
    if (rank_ != 0) return;
    if (!replanning_ && plan_.scheduler.kind != "static")
      throw InputError("scheduler.kind = '" + plan_.scheduler.kind +
                       "' needs its planner (the conductor command wires it in)");
    const sched::Schedule generated = sched::make_schedule(plan_);
    planner_ = replanning_ ? make_planner(generated) : std::make_unique<sched::StaticPlanner>(generated);
    if (replanning_) ahead_.emplace(*planner_, plan_.run.steps, sched::PlanAhead::Threading::Background);
    order0_ = planner_->initial_order();
  });
  order_ = broadcast_order(rank_ == 0 ? &order0_ : nullptr, rank_, comm_);
}

// Two planes on communicators of their own: readiness headers (host MPI) and tensors (MPI, NCCL or host-staged
// device copies), so neither ever matches the other's messages nor the run's collectives.
void Training::open_data_plane() {
  const ExecutorOptions eo = executor_options(plan_, order_, rank_, comm_);
  control_comm_.emplace(comm_);
  data_comm_.emplace(comm_);
  control_.emplace(control_comm_->get());
  collectively(comm_, kExitFailure, [&] {
    data_ = make_data_transport(plan_, order_, rank_, *compute_, data_comm_->get(), data_transport_);
  });
  executor_.emplace(rank_, *control_, *data_, *compute_, *clock_, *noise_, eo);
  if (rank_ != 0) return;
  log::info("conductor run: " + plan_.run.name + ", " + std::to_string(size_) + " ranks, schedule " +
            plan_.schedule.kind + " (" + plan_.schedule.execution +
            (eo.execution == sched::Execution::Readiness ? ", hint " + plan_.schedule.hint : "") + "), backend " +
            plan_.backend + " (tensors over " + data_transport_ + "), " + std::to_string(order_.m) +
            " microbatches, steps " + std::to_string(first_step_) + ".." + std::to_string(plan_.run.steps - 1));
}

RunOutcome Training::run() {
  for (int step = first_step_; step < plan_.run.steps; ++step) {
    if (this->step(step) == After::Stop) break;
  }
  finish();
  return outcome_;
}

Training::After Training::step(int step) {
  maybe_inject_failure(rank_, step);
  StepOutcome so = executor_->run_step(step, order_);
  outcome_.migration_control_ns += so.migration_control_ns;
  outcome_.slices_given += so.slices_given;
  outcome_.migration_decisions += so.migration_decisions;

  // One reduction carries the gradient norm, the loss and whether anyone was asked to stop; every rank gets the
  // same numbers, so every rank takes the same decision on a non-finite step without another message.
  const bool has_math = compute_->payload_floats() > 0;
  NonfiniteGuard::Verdict verdict = NonfiniteGuard::Verdict::Update;
  const StepNumbers numbers = plan_.schedule.post_validation ? update_post_validated(step, has_math, verdict)
                                                             : update_synchronously(step, has_math, verdict);
  const double loss = has_math ? numbers.loss : std::numeric_limits<double>::quiet_NaN();
  double valid_loss = std::numeric_limits<double>::quiet_NaN();
  if (compute_->model() && verdict != NonfiniteGuard::Verdict::Stop && model::eval_due(plan_, step)) {
    valid_loss = pipeline_eval_loss(*compute_->model(), order_, rank_, comm_, plan_.eval.batches, *watchdog_);
  }

  std::vector<trace::OpEvent> all = gather_events(so.events, rank_, size_, comm_, *watchdog_, step);
  // Each rank's peaks: activations in flight (M_F, the memory model's unit) and bytes of its backend's memory.
  const double mine[2] = {so.peak_memory, compute_->peak_memory_bytes()};
  std::vector<double> peaks(2 * static_cast<std::size_t>(size_));
  watched_gather(*watchdog_, mine, 2, MPI_DOUBLE, peaks.data(), 2, MPI_DOUBLE, 0, comm_,
                 "the end-of-step gather of peak memory" +
                     (size_ == 2 ? " from rank " + std::to_string(1 - rank_) : std::string()) + " (step " +
                     std::to_string(step) + ")");
  if (report_) {
    StepFigures figures;
    figures.loss = loss;
    figures.valid_loss = valid_loss;
    if (has_math) {
      figures.grad_norm = std::sqrt(numbers.grad_sq_norm);
      figures.learning_rate = model::learning_rate(plan_.optim, step);
    }
    for (int r = 0; r < size_; ++r) {
      figures.peak_activations.push_back(peaks[2 * static_cast<std::size_t>(r)]);
      figures.peak_memory_bytes.push_back(peaks[2 * static_cast<std::size_t>(r) + 1]);
    }
    report_->record_step(step, all, figures);
    if (verdict != NonfiniteGuard::Verdict::Update) {
      (verdict == NonfiniteGuard::Verdict::Skip ? log::warn : log::error)(nonfinite_->message());
    } else if (const std::string warning = nonfinite_->divergence(loss, step); !warning.empty()) {
      log::warn(warning);
    }
  }
  outcome_.steps_done = step + 1 - first_step_;
  if (verdict == NonfiniteGuard::Verdict::Stop) {
    outcome_.nonfinite = true;  // the step is in the trace; the model is not updated and not checkpointed
    return After::Stop;
  }
  const bool last = step + 1 == plan_.run.steps;
  checkpoint_if_due(step, numbers.stop, last);
  if (!last && !numbers.stop && replanning_) replan(step, std::move(all));
  if (!numbers.stop) return After::Continue;
  outcome_.stop_signal = stop_requested() ? stop_signal_number() : SIGTERM;
  if (rank_ == 0) log::warn("stop requested (signal): stopped after step " + std::to_string(step + 1));
  return After::Stop;
}

StepNumbers Training::update_synchronously(int step, bool has_math, NonfiniteGuard::Verdict& verdict) {
  const StepNumbers numbers = reducer_->reduce(step, stop_requested(), *watchdog_);
  const int nonfinite_rank = numbers.nonfinite_stage >= 0 ? order_.rank_of(numbers.nonfinite_stage) : -1;
  verdict = nonfinite_->judge(numbers, step, nonfinite_rank, has_math);
  if (verdict == NonfiniteGuard::Verdict::Update) compute_->optimizer_step(std::sqrt(numbers.grad_sq_norm), step);
  return numbers;
}

// Optimizer post-validation (the Zero Bubble paper's): the reduction is posted, this rank keeps a copy of its
// weights and AdamW moments and steps optimistically, unclipped, while the slower ranks still compute; then the
// global numbers decide. A step that needed clipping, or that the non-finite policy skips or stops at, is rolled
// back to the copy and redone exactly as update_synchronously does it, so every step's result is bit-identical.
StepNumbers Training::update_post_validated(int step, bool has_math, NonfiniteGuard::Verdict& verdict) {
  StepReducer::Pending pending;
  reducer_->start(step, stop_requested(), pending);
  model::StageModel* stages = compute_->model();
  if (stages) {
    backup_bytes_ = stages->keep_backup();
    stages->optimizer_step_unclipped(step);
  }
  const StepNumbers numbers = reducer_->finish(pending, *watchdog_);
  if (step == first_step_) report_backup_size();
  const int nonfinite_rank = numbers.nonfinite_stage >= 0 ? order_.rank_of(numbers.nonfinite_stage) : -1;
  verdict = nonfinite_->judge(numbers, step, nonfinite_rank, has_math);
  const double norm = std::sqrt(numbers.grad_sq_norm);
  const bool clipped = verdict == NonfiniteGuard::Verdict::Update && model::clipping_applies(plan_.optim, norm);
  if (!clipped && verdict == NonfiniteGuard::Verdict::Update) return numbers;  // the optimistic step stands
  ++outcome_.rollbacks;
  if (stages) {
    stages->restore_backup();
    if (clipped) stages->optimizer_step(norm, step);
  }
  if (rank_ == 0) {
    log::info("step " + std::to_string(step + 1) + ": post-validation rolled back the optimistic update (" +
              (clipped ? "gradient norm above optim.grad_clip; redone clipped" : "non-finite; not redone") + ")");
  }
  return numbers;
}

// The price of post-validation: one more copy of weights and both AdamW moments (rank 0 names the largest).
void Training::report_backup_size() {
  const double mine = static_cast<double>(backup_bytes_);
  double largest = 0;
  MPI_Reduce(&mine, &largest, 1, MPI_DOUBLE, MPI_MAX, 0, comm_);
  if (rank_ != 0 || largest <= 0) return;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "post-validation: a copy of weights and AdamW moments for rollback, %.3f MiB on the largest rank",
                largest / (1024.0 * 1024.0));
  log::info(buf);
}

void Training::checkpoint_if_due(int step, bool stopping, bool last) {
  if (!compute_->model() || plan_.checkpoint.path.empty()) return;
  const int every = plan_.checkpoint.every;
  if (!(last || stopping || (every > 0 && (step + 1) % every == 0))) return;
  collectively(comm_, kExitFailure, [&] {
    // Never a checkpoint of non-finite state (NaN weights pass the loss check for one step: the update that made
    // them ran after it).
    if (std::string where; !state_is_finite(*compute_, where))
      throw Error("step " + std::to_string(step + 1) + ": non-finite " + where +
                  " after the update; stopping without writing the checkpoint");
  });
  save_checkpoint_step(plan_, *compute_->model(), step + 1, comm_);
}

// The global tier (rank 0) plans while the ranks train: the order computed from step k's timings is ready by the
// end of step k+1 and runs at step k+2, so the policy's latency never stalls the pipeline.
void Training::replan(int step, std::vector<trace::OpEvent> all) {
  collectively(comm_, kExitFailure, [&] {
    if (rank_ != 0) return;
    std::optional<sched::Schedule> next = ahead_->after_step(step, order_, std::move(all));  // planner errors too
    if (!next) return;
    sched::validate_or_throw(*next, memory_limit_, plan_.costs.memory_after_b, "the global scheduler's order");
    order0_ = std::move(*next);
  });
  order_ = broadcast_order(rank_ == 0 ? &order0_ : nullptr, rank_, comm_);
}

void Training::finish() {
  if (!report_) return;
  outcome_.losses = report_->losses();
  outcome_.valid_losses = report_->valid_losses();
  PlannerFigures figures;
  if (ahead_) {
    ahead_->finish();  // stopped early: let the planner finish before reading its figures
    figures = {ahead_->orders_from_planner(), ahead_->latency_ms()};
  }
  report_->finish(order_, memory_limit_, outcome_.steps_done, figures);
}

}  // namespace

RunOutcome train(const plan::Plan& plan, MPI_Comm comm, const sched::PlannerFactory& make_planner) {
  Training training(plan, comm, make_planner);
  return training.run();
}

}  // namespace conductor::runtime

// Deck keys of the scheduling layers: schedule, cost, noise, scheduler.
#include <algorithm>
#include "conductor/config/resolve.hpp"
#include "conductor/config/schema.hpp"
#include "conductor/util/format.hpp"

namespace conductor::config {

namespace {
constexpr double kMaxLogSigma = 3.0;  // noise.level's bound for the log-normal kinds (finalize_sched)
}  // namespace

void add_sched_fields(std::vector<Field>& f) {
  f.push_back(field<std::string>(
                  "schedule.kind", [](Deck & d) -> auto& { return d.schedule.kind; },
                  "Pipeline schedule generator, or `file:PATH` for a schedule file: conductor's text form or "
                  "torch.distributed.pipelining's CSV (docs/schedules.md). `1f1b-interleaved` needs "
                  "parallel.virtual >= 2 and parallel.microbatches a multiple of parallel.pipeline (Megatron's "
                  "rule); `zb-v`, `zb-v-greedy` and `dualpipev` need parallel.virtual = 2, `dualpipev` also "
                  "parallel.microbatches >= 2 parallel.pipeline; the others parallel.virtual = 1.")
                  .one_of({"gpipe", "1f1b", "1f1b-interleaved", "zb-h1", "zb-h2", "zb-1p", "zb-2p", "zb-v",
                           "zb-v-greedy", "dualpipev"})
                  .or_prefix("file:"));
  f.push_back(field<std::string>(
                  "schedule.execution", [](Deck & d) -> auto& { return d.schedule.execution; },
                  "`strict`: each rank runs its list in order; `readiness`: each rank runs the best "
                  "ready op under the hint policy.")
                  .one_of({"strict", "readiness"}));
  f.push_back(
      field<std::string>(
          "schedule.hint", [](Deck & d) -> auto& { return d.schedule.hint; },
          "Readiness ranking under schedule.execution: readiness (strict runs the list and ignores it, so a deck "
          "can switch execution alone; which to pick: docs/design.md, 'Readiness hints'): `backfill` (the list's next "
          "op "
          "as soon as it can run, or, when its output stays on the rank, the list's next op that feeds another rank "
          "if that is ready with only ready ops between; while it waits for an input, only ops expected to end "
          "before that input arrives, "
          "those that unblock another rank first; memory budget: the list's own peak per rank; its order is never "
          "slower than "
          "strict's without noise (migration's helps are a greedy decision on top: docs/migration.md); `conductor run` "
          "estimates ops by the previous step's measured durations, so its "
          "first step runs each list in order; from a spread of op times or input arrivals of "
          "`schedule.wide_spread` on it ranks as `critical`). Greedy rankings (any ready op may start; RRFP's; no "
          "guarantee "
          "against the list): `schedule` (list order; wins under heavy variability on zero-bubble lists), `bf` "
          "(B and W before F: for lists without a W split (GPipe, 1F1B, interleaved); with split W it starves the "
          "next stage), `bfw` (B, then F, W fills idle time: the most under heavy variability on zero-bubble "
          "lists, up to 1.56x, but below 0.998 of strict in 40 of `bench_sim --grid`'s 64 cells), `critical` (ops "
          "another rank waits for first, B or F in list order, then the rank's own B and F, W only into idle "
          "time: the most under heavy variability on every list of `bench_sim --heavy`).")
          .one_of({"schedule", "bf", "bfw", "backfill", "critical"}));
  f.push_back(field<std::string>(
                  "schedule.placement", [](Deck & d) -> auto& { return d.schedule.placement; },
                  "Which rank holds each virtual stage of a `file:` schedule: `loop` (stage % p), `v` (two chunks "
                  "per rank in a V), or `auto` (the text form's own line; a CSV's stage indices decide). A generator "
                  "fixes its own (zb-v, zb-v-greedy, dualpipev: v; the others: loop).")
                  .one_of({"auto", "loop", "v"}));
  f.push_back(field<bool>(
      "schedule.post_validation", [](Deck & d) -> auto& { return d.schedule.post_validation; },
      "Optimizer post-validation (Zero Bubble): each rank steps its optimizer without waiting for the global "
      "gradient norm and non-finite check, which completes in the background, and starts step k+1 as soon as it "
      "has finished step k (`conductor run` and `conductor simulate`); a step that needed clipping or had a "
      "non-finite value is rolled back and redone, and the next step rerun, so results are bit-identical to "
      "`false`. Costs a copy of the weights, AdamW moments and gradients per rank (16 bytes per parameter) "
      "(docs/post-validation.md). zb-1p and zb-2p then pick the candidate with the shortest longest rank span "
      "instead of the shortest makespan, and the PPO environment rolls out a window of two overlapping steps."));
  f.push_back(
      field<double>(
          "schedule.wide_spread", [](Deck & d) -> auto& { return d.schedule.wide_spread; },
          "`backfill` only: from this spread of op times (the log-normal sigma of durations around their "
          "means) or of input arrivals (the standard deviation of a transfer's extra delay, in mean forward "
          "times) on, a rank ranks as `critical` with the configured memory limit, greedily, instead of "
          "keeping to the list. Op times: the noise model's in `conductor simulate`, each rank's own, "
          "measured over its steps so far (each step's ops around that step's means), in `conductor run`; arrivals: "
          "the noise model's congestion (delay "
          "x sqrt(p (1 - p))) in both. At sigma 1 `critical` wins 1.05-1.43x over strict on every generator, where "
          "backfill's reservations keep 1.00-1.10x; under congestion p 0.5 of 2F up to 1.56x against "
          "1.00-1.14x (docs/design.md). Set it high (e.g. 100) to keep backfilling's reservations at any "
          "spread. A rank without spread (noise-free) keeps backfilling at any value, 0 included.")
          .range(0, 1e9));
  f.push_back(field<double>(
                  "schedule.memory_limit", [](Deck & d) -> auto& { return d.schedule.memory_limit; },
                  "In-flight activation limit per rank in units of one microbatch's activations (M_F); "
                  "0 = the schedule kind's default (m for gpipe; p for 1f1b, zb-h1, zb-1p, zb-v and zb-v-greedy; 2p "
                  "for zb-h2 and zb-2p; ((v + 1) p - 1) / v for 1f1b-interleaved; p + 0.5 for dualpipev).")
                  .range(0, 1e9));
  f.push_back(field<std::vector<double>>(
                  "cost.forward", [](Deck & d) -> auto& { return d.cost.forward; },
                  "Forward (F) time per microbatch in ms: one value, or one per stage.")
                  .range(0, 1e9));
  f.push_back(field<std::vector<double>>(
                  "cost.backward_input", [](Deck & d) -> auto& { return d.cost.backward_input; },
                  "Backward-for-input (B) time per microbatch in ms: one value or one per stage.")
                  .range(0, 1e9));
  f.push_back(field<std::vector<double>>(
                  "cost.backward_weight", [](Deck & d) -> auto& { return d.cost.backward_weight; },
                  "Backward-for-weights (W) time per microbatch in ms: one value or one per "
                  "stage.")
                  .range(0, 1e9));
  f.push_back(field<double>(
                  "cost.comm", [](Deck & d) -> auto& { return d.cost.comm; },
                  "Time in ms of one point-to-point transfer, added to every cross-stage dependency.")
                  .range(0, 1e9));
  f.push_back(field<double>(
                  "cost.memory_after_b", [](Deck & d) -> auto& { return d.cost.memory_after_b; },
                  "Fraction of M_F still held between B and W; negative = from the model "
                  "(32h / (34h + 5as)).")
                  .range(-1, 1));
  f.push_back(field<double>(
                  "cost.device_tflops", [](Deck & d) -> auto& { return d.cost.device_tflops; },
                  "Sustained TFLOP/s of one device; > 0 derives F, B and W times from the model dimensions "
                  "(model.*, parallel.microbatch_size) instead of cost.forward/backward_*.")
                  .range(0, 1e9));
  f.push_back(field<double>(
                  "cost.bandwidth_gbps", [](Deck & d) -> auto& { return d.cost.bandwidth_gbps; },
                  "Point-to-point bandwidth in GB/s; > 0 adds activation bytes / bandwidth to every "
                  "transfer (on top of cost.comm, the latency). 0 = size not modelled.")
                  .range(0, 1e9));
  f.push_back(field<std::vector<double>>(
                  "cost.encoder_tflop", [](Deck & d) -> auto& { return d.cost.encoder_tflop; },
                  "TFLOP per microbatch of the first stage's F, B and W beyond its transformer layers: work the "
                  "model dimensions do not describe, such as a vision encoder and its projector ahead of the "
                  "language model; three values [F, B, W]. Derived costs (cost.device_tflops > 0) add it to stage "
                  "0's times and model.layers_per_stage: balanced weighs it; hand-written cost lists already hold it "
                  "in stage 0's values. Migration never slices it (the sliced fraction of stage 0's ops counts it as "
                  "the fixed part). The simulator and the emulated backend only: the cpu and cuda models have no "
                  "encoder.")
                  .range(0, 1e9));
  f.push_back(field<std::vector<std::string>>(
                  "noise.kind", [](Deck & d) -> auto& { return d.noise.kind; },
                  "Noise models, one or a list: none, gaussian, lognormal, straggler, "
                  "congestion, heterogeneous (a fixed per-stage speed factor), sample (a log-normal factor per "
                  "microbatch and step, the same on every stage and op: a heavier sample is heavier everywhere).")
                  .one_of({"none", "gaussian", "lognormal", "straggler", "congestion", "heterogeneous", "sample"}));
  f.push_back(field<double>(
                  "noise.level", [](Deck & d) -> auto& { return d.noise.level; },
                  "Relative noise level (0.10 = 10% per-op jitter); for lognormal, sample and heterogeneous the "
                  "log-normal sigma, at most 3. Ignored with noise.kind: none (so a noisy deck runs noise-free "
                  "with that one override).")
                  .range(0, 100));
  f.push_back(field<unsigned long long>(
      "noise.seed", [](Deck & d) -> auto& { return d.noise.seed; }, "Seed of the noise streams."));
  f.push_back(field<int>(
                  "noise.straggler_rank", [](Deck & d) -> auto& { return d.noise.straggler_rank; },
                  "Rank slowed by the straggler model; -1 = one drawn from noise.seed.")
                  .range(-1, 65535));
  f.push_back(field<double>(
                  "noise.straggler_factor", [](Deck & d) -> auto& { return d.noise.straggler_factor; },
                  "Slow-down factor of the straggler's compute ops (2 = twice as slow).")
                  .range(1, 1000));
  f.push_back(field<int>(
                  "noise.straggler_start", [](Deck & d) -> auto& { return d.noise.straggler_start; },
                  "First step of the straggler window; with straggler in noise.kind, before run.steps (steps count "
                  "from 0).")
                  .range(0, 1e9));
  f.push_back(field<int>(
                  "noise.straggler_steps", [](Deck & d) -> auto& { return d.noise.straggler_steps; },
                  "Length of the straggler window in steps; 0 = until the last step.")
                  .range(0, 1e9));
  f.push_back(field<double>(
                  "noise.congestion_prob", [](Deck & d) -> auto& { return d.noise.congestion_prob; },
                  "Probability that a burst of congestion is on, per link, direction and burst.")
                  .range(0, 1));
  f.push_back(field<int>(
                  "noise.congestion_burst", [](Deck & d) -> auto& { return d.noise.congestion_burst; },
                  "Length of a congestion burst in consecutive microbatches.")
                  .range(1, 1 << 20));
  f.push_back(field<double>(
                  "noise.congestion_delay", [](Deck & d) -> auto& { return d.noise.congestion_delay; },
                  "Extra ms of a congested transfer; negative = noise.level x the mean forward time.")
                  .range(-1, 1e9));
  f.push_back(field<std::string>(
                  "scheduler.kind", [](Deck & d) -> auto& { return d.scheduler.kind; },
                  "Global tier: `static` keeps the generator's order; `ppo` replans every step with the "
                  "learned policy (scheduler.policy) from the op times just measured.")
                  .one_of({"static", "ppo"}));
}

void finalize_sched(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems) {
  const int p = deck.parallel.pipeline;
  const std::string& src = options.source_name;
  auto check_per_stage = [&](const std::vector<double>& v, const char* key) {
    if (v.size() != 1 && static_cast<int>(v.size()) != p) {
      problems.push_back(src + ": " + key + " has " + std::to_string(v.size()) +
                         " values; give one value, or one per stage (parallel.pipeline = " + std::to_string(p) + ")");
    }
  };
  // With cost.device_tflops > 0 the op times come from the model and the lists are not read: a deck's lists for
  // its own pipeline do not stop `parallel.pipeline=4 cost.device_tflops=150` on an 8-stage deck.
  if (deck.cost.device_tflops <= 0) {
    check_per_stage(deck.cost.forward, "cost.forward");
    check_per_stage(deck.cost.backward_input, "cost.backward_input");
    check_per_stage(deck.cost.backward_weight, "cost.backward_weight");
  }
  if (deck.cost.encoder_tflop.size() != 3) {
    problems.push_back(src + ": cost.encoder_tflop has " + std::to_string(deck.cost.encoder_tflop.size()) +
                       " values; give three, the TFLOP per microbatch of the encoder's F, B and W (e.g. [2.82, "
                       "3.0, 2.64]), or [0, 0, 0] for none");
  }

  const int v = deck.parallel.virtual_chunks;
  const int m = deck.parallel.microbatches;
  const std::string& kind = deck.schedule.kind;
  const bool from_file = kind.rfind("file:", 0) == 0;
  if (kind == "1f1b-interleaved") {
    if (v < 2) {
      problems.push_back(src + ": schedule.kind = 1f1b-interleaved needs parallel.virtual >= 2 (got " +
                         std::to_string(v) + ")");
    }
    if (m % p != 0) {
      problems.push_back(src +
                         ": schedule.kind = 1f1b-interleaved runs microbatches in groups of p (Megatron's "
                         "rule): parallel.microbatches = " +
                         std::to_string(m) + " must be a multiple of parallel.pipeline = " + std::to_string(p) +
                         " (e.g. " + std::to_string(((m + p - 1) / p) * p) + ")");
    }
  } else if (plan::v_shaped_kind(kind)) {
    if (v != 2) {
      problems.push_back(src + ": schedule.kind = " + kind +
                         " places two chunks per rank in a V: set parallel.virtual = 2 (got " + std::to_string(v) +
                         ")");
    }
    if (kind == "dualpipev" && m < 2 * p) {
      problems.push_back(src + ": schedule.kind = dualpipev needs parallel.microbatches >= 2 x parallel.pipeline = " +
                         std::to_string(2 * p) + " (got " + std::to_string(m) + ")");
    }
  } else if (!from_file && v != 1) {
    problems.push_back(src + ": schedule.kind = " + kind +
                       " uses one chunk per rank, but parallel.virtual = " + std::to_string(v) +
                       "; use 1f1b-interleaved, zb-v, zb-v-greedy or dualpipev for virtual chunks, or set "
                       "parallel.virtual = 1");
  }
  if (deck.schedule.placement != "auto") {
    if (!from_file) {
      problems.push_back(src + ": schedule.placement = " + deck.schedule.placement + " applies to file: schedules; " +
                         "schedule.kind = " + kind + " fixes its own placement (leave schedule.placement auto)");
    } else if (deck.schedule.placement == "v" && v != 2) {
      problems.push_back(src + ": schedule.placement = v places two chunks per rank: set parallel.virtual = 2 (got " +
                         std::to_string(v) + ")");
    }
  }
  if (deck.noise.straggler_rank >= p) {
    problems.push_back(src + ": noise.straggler_rank = " + std::to_string(deck.noise.straggler_rank) +
                       " is not a rank (0 .. " + std::to_string(p - 1) + ", or -1 for a drawn one)");
  }
  // A straggler window that opens after the run's last step slows nothing: the run would be reported as a
  // straggler run without one. (train-policy draws its own episodes; run.steps is not their length.)
  const auto& listed = deck.noise.kind;
  if (options.command != Command::TrainPolicy && std::find(listed.begin(), listed.end(), "straggler") != listed.end() &&
      deck.noise.straggler_start >= deck.run.steps) {
    problems.push_back(src + ": noise.straggler_start = " + std::to_string(deck.noise.straggler_start) +
                       " is past the run's last step (run.steps = " + std::to_string(deck.run.steps) + ": steps 0 .. " +
                       std::to_string(deck.run.steps - 1) +
                       "), so the straggler never slows a step; start it before step " +
                       std::to_string(deck.run.steps) + ", or drop straggler from noise.kind");
  }
  // Each kind once, and none alone: a repeated kind would apply twice (two jitters of the same draw), and none
  // beside another kind says two contrary things.
  const auto& kinds = deck.noise.kind;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    if (std::find(kinds.begin(), kinds.begin() + static_cast<std::ptrdiff_t>(i), kinds[i]) !=
        kinds.begin() + static_cast<std::ptrdiff_t>(i)) {
      problems.push_back(src + ": noise.kind lists " + kinds[i] + " twice; name each kind once");
      break;
    }
  }
  if (kinds.size() > 1 && std::find(kinds.begin(), kinds.end(), "none") != kinds.end())
    problems.push_back(src + ": noise.kind lists none beside other kinds; none stands alone (or drop it)");
  // The log-normal kinds take noise.level as sigma: above 3 a mean-1 factor's median is below e^-4.5 = 0.011 (and
  // at 10 below e^-50, so every op takes no time and a step's figures are all zero), a per-stage factor reaches
  // e^(+-3 sigma): no longer noise on a pipeline but a different one.
  for (const std::string& k : deck.noise.kind) {
    if ((k == "lognormal" || k == "sample" || k == "heterogeneous") && deck.noise.level > kMaxLogSigma) {
      problems.push_back(src + ": noise.level = " + format_double(deck.noise.level) + " with noise.kind " + k +
                         " is a log-normal sigma; allowed 0 .. 3 for lognormal, sample and heterogeneous (1.0 is "
                         "already heavy variability; gaussian, straggler and congestion take up to 100)");
      break;
    }
  }

  // Derived defaults (config::resolve computes them), written back so resolved.yaml shows the values used.
  deck.cost.memory_after_b = resolved_memory_after_b(deck);
  deck.schedule.memory_limit = resolved_memory_limit(deck);
}

}  // namespace conductor::config

#include "conductor/config/resolve.hpp"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <string>

#include "conductor/plan/flops.hpp"
#include "conductor/trace/event.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"

namespace conductor::config {

plan::ModelDims resolved_model(const ModelConfig& m) {
  return plan::ModelDims{m.precision, m.vocab,     m.seq_len,   m.d_model,         m.n_heads,
                         m.n_layers,  m.mlp_ratio, m.init_seed, m.layers_per_stage};
}

namespace {

bool from_file(const Deck& d) { return d.schedule.kind.rfind("file:", 0) == 0; }

plan::Costs resolved_costs(const Deck& d) {
  plan::Costs c;
  if (d.cost.device_tflops > 0) {
    c = costs_from_model(d);
  } else {
    c.forward = d.cost.forward;
    c.backward_input = d.cost.backward_input;
    c.backward_weight = d.cost.backward_weight;
  }
  c.comm = d.cost.comm;
  if (d.cost.bandwidth_gbps > 0) c.comm += activation_bytes(d) / (d.cost.bandwidth_gbps * 1e9) * 1e3;
  c.memory_after_b = resolved_memory_after_b(d);
  return c;
}

plan::Noise resolved_noise(const NoiseConfig& n) {
  return plan::Noise{n.kind,
                     n.level,
                     n.seed,
                     n.straggler_rank,
                     n.straggler_factor,
                     n.straggler_start,
                     n.straggler_steps,
                     n.congestion_prob,
                     n.congestion_burst,
                     n.congestion_delay};
}

plan::Optim resolved_optim(const Deck& d) {
  const OptimConfig& o = d.optim;
  const int decay = o.decay_steps > 0 ? o.decay_steps : d.run.steps;
  return plan::Optim{o.lr,    o.lr_min_ratio, o.warmup_steps, decay,       o.beta1,
                     o.beta2, o.eps,          o.weight_decay, o.grad_clip, o.skip_nonfinite_steps};
}

// runtime.peak_tflops = 0: the backend's device. cuda: NVIDIA's dense figures for an H100/H200 SXM (bf16 tensor
// cores, TF32 tensor cores, plain fp32); emulated: the device its cost model describes; cpu: a nominal figure.
double resolved_peak_tflops(const Deck& d) {
  if (d.runtime.peak_tflops > 0) return d.runtime.peak_tflops;
  if (d.backend == "cuda") return d.model.precision == "bf16" ? 989.4 : d.cuda.tf32 ? 494.7 : 66.9;
  if (d.backend == "emulated" && d.cost.device_tflops > 0) return d.cost.device_tflops;
  return 1.0;
}

}  // namespace

double resolved_memory_after_b(const Deck& d) {
  return d.cost.memory_after_b >= 0
             ? d.cost.memory_after_b
             : plan::memory_after_b_from_model(d.model.d_model, d.model.n_heads, d.model.seq_len);
}

double resolved_memory_limit(const Deck& d) {
  if (d.schedule.memory_limit > 0) return d.schedule.memory_limit;
  if (from_file(d)) return 0.0;
  const ParallelConfig& par = d.parallel;
  return plan::default_memory_limit(d.schedule.kind, par.pipeline, par.microbatches, par.virtual_chunks);
}

double activation_bytes(const Deck& d) {
  return 4.0 * d.parallel.microbatch_size * static_cast<double>(d.model.seq_len) * d.model.d_model;
}

namespace {

struct LayerFlops {
  double mm = 0, att = 0, head = 0;  // per pass: matmuls and attention of one layer; the LM head
};

LayerFlops layer_flops(const Deck& d) {
  const double tokens = static_cast<double>(d.parallel.microbatch_size) * d.model.seq_len;
  const plan::ModelDims m = resolved_model(d.model);
  return {tokens * plan::layer_matmul_flops_per_token(m), tokens * plan::layer_attention_flops_per_token(m),
          tokens * plan::head_flops_per_token(m)};
}

}  // namespace

double encoder_flops(const Deck& d, int kind) {
  const std::vector<double>& e = d.cost.encoder_tflop;
  return e.size() == 3 ? e[static_cast<std::size_t>(kind)] * 1e12 : 0.0;  // another size: refused in finalize
}

StageWork stage_work_from_model(const Deck& d) {
  const LayerFlops l = layer_flops(d);
  // F + B + W: (mm + att) + (mm + 2 att) + mm per layer, the head once in each pass; the first stage's encoder.
  const double first = encoder_flops(d, 0) + encoder_flops(d, 1) + encoder_flops(d, 2);
  return {3.0 * l.mm + 3.0 * l.att, first, 3.0 * l.head};
}

std::vector<int> balanced_split(const std::vector<double>& layer_work, int stages, double first, double last) {
  const int L = static_cast<int>(layer_work.size());
  // A first stage with work of its own (an encoder) is a stage without layers, where that is the lighter split;
  // any other stage holds at least one. z: 1 where stage 0 may be empty.
  const int z = first > 0 && stages > 1 ? 1 : 0;
  if (stages < 1 || L < stages - z) {
    throw InputError("model.layers_per_stage: balanced needs at least one layer per stage" +
                     std::string(z ? " but the first (it holds the encoder)" : "") +
                     ", but model.n_layers = " + std::to_string(L) + " is fewer than the " + std::to_string(stages) +
                     " virtual stages (parallel.pipeline x parallel.virtual); list the layers explicitly instead");
  }
  std::vector<double> prefix(L + 1, 0.0);
  for (int i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + layer_work[i];
  auto work = [&](int stage, int from, int to) {
    return prefix[to] - prefix[from] + (stage == 0 ? first : 0.0) + (stage == stages - 1 ? last : 0.0);
  };
  // Two exact passes over the cut points: the least heaviest stage M, then, among the splits with no stage above
  // M, the fewest stages within 5% of it. Stages at or near the maximum wait on each other under noise: multimodal's
  // [0, 4, 4, 4, 4, 4, 1, 1] (five at M) ran ZB-2p 3.7% slower than [0, 4, 4, 3, 3, 3, 3, 2] (two), and gpt3-6.2b's
  // [4, 4, 4, 4, 4, 4, 3, 3] (six at M, its head stage 1.5% below) 0.6% slower than [4, 4, 4, 4, 4, 4, 4, 2]
  // (seven at M, the head stage 26% below): the count at M alone would pick the slower one. best[s][i]: the
  // pass's best over splits of layers [0, i) into stages 0..s; cut[s][i]: where stage s starts in it, the latest
  // cut winning ties (earlier stages hold more layers).
  constexpr double kNear = 0.05;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> cut(stages, std::vector<int>(L + 1, 0));
  // best[s][i] = min over j of combine(best[s - 1][j], stage(s, j, i)). j runs down from i - 1, so the first j to
  // reach the least value is the latest; stage s's cost only grows as j falls (layer work is never negative) and
  // combine(a, b) >= b, so once that cost reaches best[s][i] no smaller j can do better: each i looks at about
  // one stage's layers, not all (10,000 layers on 4,096 stages ran past a minute, 100,000 on 4 for minutes).
  const auto pass = [&](auto stage, auto combine) {
    for (auto& row : best) std::fill(row.begin(), row.end(), inf);
    for (int i = 1 - z; i <= L; ++i) best[0][i] = stage(0, 0, i);
    for (int s = 1; s < stages; ++s) {
      for (int i = s + 1 - z; i <= L; ++i) {
        for (int j = i - 1; j >= s - z; --j) {  // stage s holds [j, i)
          const double own = stage(s, j, i);
          if (own >= best[s][i]) break;
          const double c = combine(best[s - 1][j], own);
          if (c < best[s][i]) {
            best[s][i] = c;
            cut[s][i] = j;
          }
        }
      }
    }
  };
  pass(work, [](double a, double b) { return std::max(a, b); });
  // Within a relative 1e-9 of M counts as M: the prefix sums make equal stages differ by ulps.
  const double heaviest = best[stages - 1][L], cap = heaviest * (1 + 1e-9), near = heaviest * (1 - kNear);
  pass(
      [&](int stage, int from, int to) {
        const double w = work(stage, from, to);
        return w > cap ? inf : (w >= near ? 1.0 : 0.0);
      },
      [](double a, double b) { return a + b; });
  std::vector<int> split(stages, 0);
  for (int s = stages - 1, end = L; s >= 0; --s) {
    const int start = s == 0 ? 0 : cut[s][end];
    split[s] = end - start;
    end = start;
  }
  return split;
}

int rank_layers(const Deck& d, int r) {
  const int p = d.parallel.pipeline, v = d.parallel.virtual_chunks;
  const std::vector<int>& listed = d.model.layers_per_stage;
  if (static_cast<int>(listed.size()) != p * v) return d.model.n_layers / p + (r < d.model.n_layers % p ? 1 : 0);
  // A listed split with v > 1 was read as the even one (a rank of [3, 1, 1, 1] timed as 2 layers, not 4).
  const std::string& kind = d.schedule.kind;
  const bool v_shape =
      v == 2 && (kind == "zb-v" || kind == "zb-v-greedy" || kind == "dualpipev" || d.schedule.placement == "v");
  int layers = 0;
  for (int c = 0; c < v; ++c) {
    const int stage = v_shape ? (c == 0 ? r : 2 * p - 1 - r) : c * p + r;
    layers += listed[static_cast<std::size_t>(stage)];
  }
  return layers;
}

plan::Costs costs_from_model(const Deck& d) {
  const int p = d.parallel.pipeline;
  const auto [mm, att, head] = layer_flops(d);
  const double flops_per_ms = d.cost.device_tflops * 1e12 / 1e3;
  plan::Costs c;
  c.forward.assign(p, 0.0);
  c.backward_input.assign(p, 0.0);
  c.backward_weight.assign(p, 0.0);
  for (int r = 0; r < p; ++r) {
    const int layers = rank_layers(d, r);
    double f = layers * (mm + att), b = layers * (mm + 2 * att), w = layers * mm;
    if (r == 0) {
      f += encoder_flops(d, 0);
      b += encoder_flops(d, 1);
      w += encoder_flops(d, 2);
    }
    if (r == p - 1) {
      f += head;
      b += head;
      w += head;
    }
    c.forward[r] = f / flops_per_ms;
    c.backward_input[r] = b / flops_per_ms;
    c.backward_weight[r] = w / flops_per_ms;
  }
  return c;
}

namespace {

// The paths `pattern` names: itself when it exists as written (a literal path wins over its reading as a glob:
// 'run[1]/x.bin' read a file 'run1/x.bin'), else its glob's matches, sorted. Every match, a file or not: the
// deck's check refuses the others by name (a glob skipped a dangling link or a folder without a word).
std::vector<std::string> glob_files(const std::string& pattern) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(pattern, ec))) return {pattern};
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; i++) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::vector<std::string> expand_data_path(const std::string& source, const std::string& path) {
  if (path.empty()) return {};
  if (source != "megatron") return glob_files(path);
  std::string prefix = path;
  if (ends_with(prefix, ".bin") || ends_with(prefix, ".idx")) prefix.resize(prefix.size() - 4);
  // A prefix is a dataset where either of its files matches: one whose .idx is missing is named (the deck's check
  // refuses it), not skipped (a glob trained without its largest shard, silently).
  std::set<std::string> prefixes;
  for (const char* ext : {".idx", ".bin"}) {
    for (const std::string& f : glob_files(prefix + ext)) prefixes.insert(f.substr(0, f.size() - 4));
  }
  return {prefixes.begin(), prefixes.end()};
}

namespace {

// Values inside every key's range can still combine into op times no clock holds: a tiny cost.device_tflops or
// cost.bandwidth_gbps gives infinite times, huge costs times many microbatches a step past what the trace's
// nanosecond clock (int64) holds. Refused here, naming the keys, rather than found as an empty step later.
void check_op_times(const Deck& d, const plan::Costs& c) {
  const std::string costs = d.cost.device_tflops > 0 ? "cost.device_tflops = " + format_double(d.cost.device_tflops) +
                                                           " (op times derived from the model)"
                                                     : "cost.forward, cost.backward_input and cost.backward_weight";
  double work = 0;
  for (const std::vector<double>* list : {&c.forward, &c.backward_input, &c.backward_weight}) {
    for (std::size_t r = 0; r < list->size(); ++r) {
      const double t = (*list)[r];
      if (!std::isfinite(t)) {
        throw InputError(costs + " give an op time of " + format_double(t) + " ms on stage " + std::to_string(r) +
                         "; every op time must be finite");
      }
      // The trace counts nanoseconds: a shorter op rounds to nothing, and the step's figures contradict each other
      // (a makespan of 0 beside a run throughput of 1e13).
      if (t > 0 && t < trace::kTickMs) {
        throw InputError(costs + " give an op time of " + format_double(t) + " ms on stage " + std::to_string(r) +
                         ", below the trace clock's 1 ns (" + format_double(trace::kTickMs) +
                         " ms); every op time is 0 or at least that");
      }
      work += t;
    }
  }
  if (work <= 0) {
    throw InputError(costs +
                     " give every op a time of 0 ms: a step would take no time, so no makespan, bubble or "
                     "throughput means anything; give the ops their times");
  }
  const std::string comm =
      "cost.comm = " + format_double(d.cost.comm) +
      (d.cost.bandwidth_gbps > 0 ? " with cost.bandwidth_gbps = " + format_double(d.cost.bandwidth_gbps) +
                                       " (activations of " + format_double(activation_bytes(d)) + " bytes per transfer)"
                                 : std::string());
  if (!std::isfinite(c.comm)) {
    throw InputError(comm + " gives a transfer time of " + format_double(c.comm) + " ms; it must be finite");
  }
  // The trace's clock (nanoseconds in an int64) holds 9.2e12 ms from the run's start, over all its steps: a run
  // may take 1e12 ms (31 years) of noise-free time, a straggler's factor included, leaving a factor of 9 for the
  // random noise's draws (the simulator stops with a message naming the keys where they go further: to_ns).
  constexpr double kMaxRunMs = 1e12;
  const double m = d.parallel.microbatches, compute = m * work, transfers = m * 2.0 * d.parallel.pipeline * c.comm;
  const bool straggler = std::find(d.noise.kind.begin(), d.noise.kind.end(), "straggler") != d.noise.kind.end();
  const double slower = straggler ? d.noise.straggler_factor : 1.0;
  if ((compute + transfers) * slower * d.run.steps > kMaxRunMs) {
    throw InputError("one step would take " + format_double(compute) + " ms of compute (" + costs + ", " +
                     "parallel.microbatches = " + std::to_string(d.parallel.microbatches) + ") and " +
                     format_double(transfers) + " ms of transfers (" + comm + ")" +
                     (straggler ? ", up to noise.straggler_factor = " + format_double(slower) + " times that" : "") +
                     "; run.steps = " + std::to_string(d.run.steps) + " of them exceed the " +
                     format_double(kMaxRunMs) + " ms a run may take (traces count nanoseconds in 64 bits)");
  }
}

}  // namespace

plan::Plan resolve(const Deck& d) {
  plan::Plan out;
  out.backend = d.backend;
  out.run = plan::Run{d.run.name, d.run.steps, d.run.seed, d.run.output, d.run.log_every};
  out.pipeline = plan::Pipeline{d.parallel.pipeline, d.parallel.microbatches, d.parallel.virtual_chunks,
                                d.parallel.microbatch_size};
  out.schedule = plan::ScheduleOptions{d.schedule.kind,      d.schedule.execution,       d.schedule.hint,
                                       d.schedule.placement, d.schedule.post_validation, d.schedule.wide_spread};
  out.costs = resolved_costs(d);
  check_op_times(d, out.costs);
  const double limit = resolved_memory_limit(d);
  if (limit > 0) out.memory.rank_limit.assign(static_cast<std::size_t>(d.parallel.pipeline), limit);
  // The loaded deck holds the derived default too (resolved.yaml shows it): a limit is the user's when it differs.
  const ParallelConfig& par = d.parallel;
  if (d.schedule.memory_limit > 0 &&
      (from_file(d) || d.schedule.memory_limit != plan::default_memory_limit(d.schedule.kind, par.pipeline,
                                                                             par.microbatches, par.virtual_chunks)))
    out.memory.limit_key = "schedule.memory_limit";
  out.noise = resolved_noise(d.noise);
  out.model = resolved_model(d.model);
  out.data = plan::Data{d.data.source, d.data.path, expand_data_path(d.data.source, d.data.path),
                        expand_data_path(d.data.source, d.data.valid_path), d.data.valid_fraction};
  out.eval = plan::Eval{d.eval.every, d.eval.batches};
  out.optim = resolved_optim(d);
  out.runtime = plan::Runtime{d.runtime.watchdog_s, resolved_peak_tflops(d), d.runtime.watchdog_steps,
                              d.backend != "emulated" || d.cost.device_tflops > 0};
  out.checkpoint = plan::Checkpoint{d.checkpoint.path, d.checkpoint.every, d.checkpoint.resume, d.checkpoint.keep,
                                    d.checkpoint.allow_data_change};
  out.trace = plan::Trace{d.trace.enabled, d.trace.enabled && d.trace.comm_events};
  out.cuda = plan::Cuda{d.cuda.tf32, d.cuda.allow_gpu_sharing, d.cuda.transport, d.cuda.queue_depth};
  out.scheduler = plan::GlobalTier{d.scheduler.kind, d.policy.path, d.policy.ema, d.policy.verify_samples};
  out.migration = migration_from_model(d);
  out.activation_bytes = activation_bytes(d);
  out.deck_yaml = resolved_yaml(d);
  return out;
}

}  // namespace conductor::config

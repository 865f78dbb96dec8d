#pragma once
// The resolved plan: what the layers below config (sched, sim, model, runtime, policy) need from a deck, as
// plain structs with every derived default already filled in. config::resolve (config/resolve.hpp) builds it
// once from a deck; nothing below config ever sees the deck. Header-only, standard library only.
#include <array>
#include <string>
#include <vector>

namespace conductor::plan {

// The kind's default activation-memory limit (M_F per rank) when schedule.memory_limit is 0: rank 0 of a
// 1F1B-like schedule holds p microbatches; gpipe all m; zb-h2 and zb-2p 2p; interleaved Megatron's warm-up + 1.
inline double default_memory_limit(const std::string& kind, int p, int m, int v) {
  if (kind == "gpipe") return m;
  if (kind == "zb-h2" || kind == "zb-2p") return 2.0 * p;
  if (kind == "1f1b-interleaved") return ((v + 1.0) * p - 1.0) / v;
  if (kind == "dualpipev") return p + 0.5;  // an overlapped pair's F lands before its B frees
  return p;
}

// Generator kinds that place two chunks per rank in a V (parallel.virtual = 2).
inline bool v_shaped_kind(const std::string& kind) {
  return kind == "zb-v" || kind == "zb-v-greedy" || kind == "dualpipev";
}

// The Zero Bubble paper's fraction of a GPT layer's activations still needed by W after B (16-bit activations:
// B frees what only the input gradient needs; W still holds 32sbh of the layer's 34sbh + 5as^2b):
// 32h / (34h + 5as) (h width, a heads, s sequence length).
inline double memory_after_b_from_model(int d_model, int n_heads, int seq_len) {
  const double h = d_model, a = n_heads, s = seq_len;
  return 32.0 * h / (34.0 * h + 5.0 * a * s);
}

struct Run {
  std::string name = "conductor";
  int steps = 10;
  unsigned long long seed = 1234;  // data order and every derived random stream
  std::string output;              // the run's folder
  int log_every = 1;               // `conductor run`: a console step line every this many steps
  // A resume replaces the folder's trace and metrics (they are another configuration's: run.overwrite=true)
  // instead of continuing them. Set by the command line (cli::resume_replaces_results), not a deck key.
  bool replace_results = false;
};

struct Pipeline {
  int p = 4;                // pipeline ranks
  int m = 8;                // microbatches per step
  int v = 1;                // chunks (virtual stages) per rank
  int microbatch_size = 4;  // sequences per microbatch
};

// From this spread of op times or input arrivals on, backfill ranks as critical (schedule.wide_spread's default;
// sched::ranking, driver.hpp).
inline constexpr double kWideSpread = 0.6;

struct ScheduleOptions {
  std::string kind = "1f1b";         // a generator, or file:PATH
  std::string execution = "strict";  // strict | readiness (sched::parse_execution)
  std::string hint = "backfill";     // schedule | bf | bfw | backfill | critical (sched::parse_hint)
  std::string placement = "auto";    // auto | loop | v: where a file: schedule's stages live (sched/torch_csv.hpp)
  // Optimizer post-validation: each rank steps its optimizer without waiting for the global check, rolls back
  // and redoes the step when the check fails (runtime); the next step starts per rank (simulator).
  bool post_validation = false;
  double wide_spread = kWideSpread;  // backfill ranks as critical from this spread on (sched::ranking)
};

// The noise-free cost model's numbers (sched::CostModel adds its queries): per-rank F, B, W times (ms per
// microbatch for the rank's whole share; one value = every rank), one transfer's time (bandwidth folded in),
// and the memory model's fraction a of M_F held between B and W.
struct Costs {
  std::vector<double> forward{1.0};
  std::vector<double> backward_input{1.0};
  std::vector<double> backward_weight{1.0};
  double comm = 0.0;
  double memory_after_b = 0.0;
};

struct Memory {
  // Activation-memory limit of each rank (M_F), one entry per rank. Empty only for a file: schedule given
  // without schedule.memory_limit: its limit is then its own peak (sched::memory_limit_for, a function of the
  // loaded schedule).
  std::vector<double> rank_limit;
  // The deck key that set the limit ("schedule.memory_limit"), empty when it is the schedule's own default: a list
  // that needs more than a limit the user set is refused naming the key.
  std::string limit_key;
};

struct Noise {
  std::vector<std::string> kind = {"none"};  // none | gaussian | lognormal | straggler | congestion | heterogeneous
  double level = 0.0;
  unsigned long long seed = 0;
  int straggler_rank = -1;  // -1 = a rank drawn from the seed (sim::NoiseModel)
  double straggler_factor = 2.0;
  int straggler_start = 0;
  int straggler_steps = 0;  // 0 = until the last step
  double congestion_prob = 0.2;
  int congestion_burst = 4;
  double congestion_delay = -1;  // <0 = level x the mean forward time of the costs the noise model perturbs
};

struct ModelDims {
  std::string precision = "fp32";
  int vocab = 256;
  int seq_len = 64;
  int d_model = 64;
  int n_heads = 4;
  int n_layers = 4;
  int mlp_ratio = 4;
  unsigned long long init_seed = 42;
  std::vector<int> layers_per_stage;  // empty = even split (model::split_layers)
};

struct Data {
  std::string source = "synthetic";      // synthetic | file | llmc | megatron
  std::string path;                      // as the deck wrote it (a file, glob or dataset prefix), for messages
  std::vector<std::string> train_files;  // path expanded: files (megatron: dataset prefixes), sorted
  std::vector<std::string> valid_files;  // data.valid_path expanded; empty: valid_fraction of train_files
  double valid_fraction = 0;
};

struct Eval {
  int every = 0;  // 0: no validation loss
  int batches = 4;
};

struct Optim {
  double lr = 6e-3;
  double lr_min_ratio = 0.1;
  int warmup_steps = 0;
  int decay_steps = 10;  // resolved: run.steps when the deck gave 0
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;        // 0 = no clipping
  int skip_nonfinite_steps = 0;  // steps with non-finite gradients skipped before stopping (0: stop at once)
};

// The runtime's own settings.
struct Runtime {
  double watchdog_s = 300;     // a rank that hears nothing it waits for this long aborts every rank
  double peak_tflops = 1;      // resolved: peak TFLOP/s of one device, for MFU
  double watchdog_steps = 10;  // a step's waits also at most this x the slowest step so far, >= 30 s (0: off)
  // Whether an op's time follows the model's FLOPs, so MFU means something: a backend with math (cpu, cuda), or the
  // emulated one timing its ops from the model (cost.device_tflops > 0); not emulated ops timed by cost lists.
  bool times_follow_model = true;
};

struct Checkpoint {
  std::string path;  // "" = none written
  int every = 0;     // 0 = after the last step only
  std::string resume;
  int keep = 2;                    // complete steps kept (0: all)
  bool allow_data_change = false;  // resume although the data files differ from the checkpoint's record
};

struct Trace {
  bool enabled = true;
  bool comm_events = true;  // resolved: false when tracing is off
};

struct Cuda {
  bool tf32 = false;
  bool allow_gpu_sharing = false;
  std::string transport = "auto";  // auto | nccl | mpi
  int queue_depth = 2;
};

// Computation migration (docs/migration.md), simulated and run on the emulated backend: a helper rank computes some of
// the equal slices of an owner's op (attention head groups and MLP column groups of every layer, LM-head vocabulary
// column groups on the last stage) while the owner computes the rest. config::resolve derives the numbers from the
// model dimensions; the decision is sched::Migration's.
struct SliceCosts {  // one op kind (F, B or W) of one rank's whole share; a chunk of v takes 1/v of everything
  double sliced_fraction = 0;  // of the op's time: `slices` equal slices; the rest is the owner's fixed part
  double helper_factor = 1;    // a slice's time on a helper / on its owner (> 1: LM-head logits recomputed)
  double bytes_fixed = 0;      // bytes moved per migrated op whatever its slices (activations out, partials back)
  double bytes_per_slice = 0;  // bytes moved per slice (weight slices, stashes, weight-gradient slices)
  double weight_bytes_per_slice = 0;  // of bytes_per_slice: the weight slices (a replica holder has them)
  int messages = 0;                   // transfers paying the link latency per migrated op
};

// migration.force: every op of `owner` of a listed kind gives `slices` slices to `helper`, without a decision.
struct ForcedHelp {
  int owner = -1;
  int helper = -1;
  std::array<bool, 4> kinds{};  // F, B, W, BW (sched::OpKind's order)
  int slices = 1;
};

struct Migration {
  bool enabled = false;
  int slices = 8;             // equal slices per op
  double max_fraction = 0.5;  // most of an op's slices one helper takes
  int helpers = 1;            // most helpers of one op
  std::string link = "infiniband";
  double bandwidth_gbps = 25;                  // of the link between owner and helper, each direction
  double latency_ms = 0.01;                    // per message
  std::vector<std::array<SliceCosts, 3>> ops;  // per rank: F, B, W
  // Per rank: bytes of one M_F (the memory limit's unit). A helper holds the bytes of its help (what it receives
  // and what it returns) while it computes, counted in these units against its own limit.
  std::vector<double> memory_unit_bytes;
  std::vector<ForcedHelp> force;  // migration.force (empty: decided)
  // migration.weights = replicas: each rank's sliced weights are kept on up to `replica_peers` peers (the nearest
  // in the ring with room in their memory budget), refreshed after every optimizer step, so a help by a holder
  // moves no weights. replica_bytes, per rank: its sliced weights (every slice of every unit), what one holds.
  bool replicas = false;
  int replica_peers = 1;
  std::vector<double> replica_bytes;
  // Math backends: F, B and W compute the MLP in this many column groups (migration on with unit mlp: `slices`;
  // else 1), and the attention in head_groups head groups (unit heads), so the bits do not depend on where a group
  // ran (model/stage.hpp).
  int mlp_groups = 1;
  int head_groups = 1;
  int vocab_groups = 1;  // the LM head and loss in vocabulary groups (unit vocab; model/stage.hpp)
};

// The global tier's settings a run needs (scheduler.*); train-policy's ppo.* stay in the policy layer's deck.
struct GlobalTier {
  std::string kind = "static";  // static | ppo
  std::string policy_path;      // "" = the shipped policy
  double ema = 0.5;
  int verify_samples = 2;
};

struct Plan {
  std::string backend = "cpu";  // cpu | cuda | emulated
  Run run;
  Pipeline pipeline;
  ScheduleOptions schedule;
  Costs costs;
  Memory memory;
  Noise noise;
  ModelDims model;
  Data data;
  Eval eval;
  Optim optim;
  Checkpoint checkpoint;
  Runtime runtime;
  Trace trace;
  Cuda cuda;
  GlobalTier scheduler;
  Migration migration;
  double activation_bytes = 0;  // bytes of one microbatch crossing a stage boundary (fp32)
  std::string deck_yaml;        // config::resolved_yaml: recorded verbatim (resolved.yaml, traces, checkpoints)
};

}  // namespace conductor::plan

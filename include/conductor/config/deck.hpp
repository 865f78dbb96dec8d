#pragma once
// A deck is the typed form of a YAML input file. Defaults live here, in code; the schema (schema.hpp) maps
// keys to these fields. Sections owned by other layers live in their own headers.
#include <string>
#include <vector>

#include "conductor/config/model_config.hpp"
#include "conductor/config/policy_config.hpp"
#include "conductor/config/sched_config.hpp"

namespace conductor::config {

struct RunConfig {
  std::string name = "conductor";
  int steps = 10;
  unsigned long long seed = 1234;
  std::string output;          // "" resolves to runs/<name> (simulate: runs/<name>-sim)
  bool overwrite = false;      // write into a folder that holds another run's results
  double memory_limit_gb = 0;  // size guard: refuse decks estimated above this; 0 = the machine's available memory
  int log_every = 1;           // `conductor run`: a console step line every this many steps
};

struct ParallelConfig {
  int pipeline = 4;         // p: pipeline stages = MPI ranks for `run`
  int virtual_chunks = 1;   // v: model chunks per rank (key "virtual")
  int microbatches = 8;     // m
  int microbatch_size = 4;  // sequences per microbatch
};

struct TraceConfig {
  bool enabled = true;
  bool comm_events = true;  // record send/recv events besides compute ops
};

struct CudaConfig {
  bool tf32 = false;               // fp32 GEMMs on TF32 tensor cores
  bool allow_gpu_sharing = false;  // more ranks than GPUs on a node share them round-robin
  std::string transport = "auto";  // tensors between stages: auto | nccl | mpi (host-staged)
  int queue_depth = 2;             // ops kept queued on the GPU per rank
};

struct RuntimeConfig {
  double watchdog_s = 300.0;     // a rank that hears nothing from a peer it waits on this long aborts the run
  double watchdog_steps = 10.0;  // once steps ran, a step's waits also at most this x the slowest step (>= 30 s)
  double peak_tflops = 0.0;      // peak TFLOP/s of one device for MFU; 0 = the backend's default (resolve.cpp)
};

struct Deck {
  std::string backend = "cpu";
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  EvalConfig eval;
  OptimConfig optim;
  CheckpointConfig checkpoint;
  ParallelConfig parallel;
  ScheduleConfig schedule;
  CostConfig cost;
  NoiseConfig noise;
  SchedulerConfig scheduler;
  MigrationConfig migration;
  PolicyConfig policy;  // keys under scheduler.* and ppo.* (schema_policy.cpp)
  TraceConfig trace;
  CudaConfig cuda;
  RuntimeConfig runtime;
  // Not a key: where the values came from, in the order they were applied ("deck PATH", "fragment PATH",
  // "override key=value"); resolved_yaml() records it. Empty for a deck built in code.
  std::vector<std::string> sources;
};

// What the deck is loaded for; cross-field checks depend on it (`run` needs pipeline == MPI world size).
// Schedule: `conductor schedule` prints a deck's lists; checked as simulate's but for what only decides helps
// (migration.force: a run deck's forced helps do not change its lists).
enum class Command { Validate, Simulate, Run, TrainPolicy, Schedule };

// A YAML text and the file name its messages name.
struct DeckText {
  std::string name;
  std::string text;
};

struct LoadOptions {
  std::string source_name = "<deck>";  // file name used in messages
  // Deck fragments, merged onto the deck in order before the overrides: mappings merge key by key (a later
  // source wins), anything else (a value, a list) is replaced whole. Each is checked like the deck.
  std::vector<DeckText> fragments;
  std::vector<std::string> overrides;  // "key.path=value", applied after the deck and its fragments, in order
  Command command = Command::Validate;
  int world_size = 1;      // the job's MPI ranks; 0: not known (validate --output-for run, one process on a login node)
  bool from_file = false;  // the text is a deck file the user named: an empty one is an error
};

// Parses, merges the fragments, applies overrides, type- and range-checks every key, derives defaults, runs
// cross-field checks. Throws DeckError with every problem found, each at the file:line:col (or command-line
// override) its value came from.
Deck parse_deck(const std::string& text, const LoadOptions& options);

// The fully resolved deck (defaults included) as YAML, in schema order. parse_deck(to_yaml(d)) == d.
std::string to_yaml(const Deck& deck);

// to_yaml() after a comment naming deck.sources: what resolved.yaml, traces and checkpoints record.
std::string resolved_yaml(const Deck& deck);

// The deck text of a resolved_yaml() text (its leading comment lines removed).
std::string without_header(const std::string& resolved);

// Per-layer derived defaults and cross-field checks, run after all keys are set (each appends problems).
void finalize_core(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems);
void finalize_sched(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems);
void finalize_model(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems);
void finalize_policy(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems);
void finalize_migration(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems);

}  // namespace conductor::config

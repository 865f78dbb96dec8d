#pragma once
// The deck, resolved once into the plan the lower layers run (plan/plan.hpp). Every derived default (costs from
// the model dimensions and bandwidth, memory_after_b, the schedule kind's memory limit per rank, the decay
// horizon, trace options, activation bytes) is computed here and nowhere below config.
#include <optional>
#include <string>

#include "conductor/config/deck.hpp"
#include "conductor/plan/plan.hpp"

namespace conductor::config {

plan::Plan resolve(const Deck& deck);

// The files a data path names for data.source `source`, sorted: a file or glob (file, llmc: the path itself when
// it exists as written, else the glob's matches, files or not: the deck's check refuses what is not a file), or
// a Megatron dataset prefix or glob of prefixes (megatron: each prefix whose .idx exists; a trailing .bin or .idx
// is dropped). Empty when nothing matches.
std::vector<std::string> expand_data_path(const std::string& source, const std::string& path);

// Pieces of resolve(), for the deck's own derived keys (finalize_sched writes them back for resolved.yaml).
double resolved_memory_after_b(const Deck& deck);
// schedule.memory_limit, or the kind's default; 0 for a file: schedule without one (its own peak then).
double resolved_memory_limit(const Deck& deck);
// Activation bytes of one microbatch crossing a stage boundary (fp32: microbatch_size * seq_len * d_model * 4).
double activation_bytes(const Deck& deck);
// Per-rank F, B, W from the model dimensions and cost.device_tflops. Per-layer FLOPs of a GPT layer for one
// microbatch of `tokens` tokens, width h, sequence s: matmuls 24*tokens*h^2 per pass, attention 4*tokens*s*h.
// F = mm + att, B = mm + 2 att, W = mm; the last rank also runs the LM head (2*tokens*h*vocab per pass), the
// first the encoder of cost.encoder_tflop.
// Times = FLOPs / (tflops * 1e12), in ms.
// Rank r holds rank_layers(deck, r) layers (below).
plan::Costs costs_from_model(const Deck& deck);

// The transformer layers rank r holds: with model.layers_per_stage listed (one entry per virtual stage), the
// entries of its virtual stages summed (loop placement: chunk c is stage c p + r; V placement, for zb-v,
// zb-v-greedy, dualpipev and schedule.placement v: r and 2p - 1 - r); else n_layers split as evenly as possible,
// the first ranks taking the remainder. With v > 1 the cost model times a rank's chunks alike (its total over v).
int rank_layers(const Deck& deck, int r);

// The deck's model section as the plan's dimensions (plan/flops.hpp counts FLOPs from them).
plan::ModelDims resolved_model(const ModelConfig& model);

// F+B+W FLOPs of one microbatch, the terms of costs_from_model: per transformer layer, the first stage's extra
// (the embedding is a table lookup, no matmul, so 0 in this model; cost.encoder_tflop's encoder) and the last
// stage's (LM head and loss).
struct StageWork {
  double layer = 0, first = 0, last = 0;
};
StageWork stage_work_from_model(const Deck& deck);
// FLOPs of one microbatch of the first stage's encoder (cost.encoder_tflop) in op kind 0 F, 1 B, 2 W.
double encoder_flops(const Deck& deck, int kind);

// The migration section resolved (docs/migration.md): the link preset's numbers and, per rank and op kind, the
// slice split, bytes and memory from the model dimensions; disabled: a default plan::Migration.
plan::Migration migration_from_model(const Deck& deck);
struct LinkPreset {
  double bandwidth_gbps, latency_us;
};
// nvlink: 300 GB/s, 5 us; infiniband (HDR, 200 Gb/s): 25 GB/s, 10 us; custom: none (the deck gives both).
LinkPreset link_preset(const std::string& link);
// One migration.force entry, "OWNER->HELPER:KINDS:SLICES" (KINDS: F, B, W, BW joined by commas), e.g. "1->0:W,BW:2".
// Checks the form only (ranks and slices against the deck: finalize_migration); on a malformed entry returns
// nothing and says why.
std::optional<plan::ForcedHelp> parse_forced_help(const std::string& entry, std::string& why);

// The contiguous split of the layers (layer_work[i]: work of layer i) over `stages` stages, each holding at
// least one layer (stage 0 may hold none when first > 0: an encoder stage), that minimises the heaviest stage's
// work, and among those has the fewest stages within 5% of that work; stage 0 adds `first`, stage stages-1 adds
// `last`.
// Exact (dynamic programming over split points); among optimal splits, earlier stages hold more layers.
// Throws InputError naming model.layers_per_stage when there are fewer layers than stages.
std::vector<int> balanced_split(const std::vector<double>& layer_work, int stages, double first, double last);

}  // namespace conductor::config

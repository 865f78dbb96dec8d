// Deck keys of the trainer: model, data, optim, checkpoint.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "conductor/config/resolve.hpp"
#include "conductor/config/schema.hpp"
#include "conductor/util/error.hpp"

namespace conductor::config {

void add_model_fields(std::vector<Field>& f) {
  f.push_back(
      field<int>(
          "model.vocab", [](Deck & d) -> auto& { return d.model.vocab; }, "Vocabulary size (byte-level data uses 256).")
          .range(2, 1 << 24));
  f.push_back(field<int>(
                  "model.seq_len", [](Deck & d) -> auto& { return d.model.seq_len; }, "Sequence length T.")
                  .range(1, 1 << 20));
  f.push_back(field<int>(
                  "model.d_model", [](Deck & d) -> auto& { return d.model.d_model; }, "Model width C.")
                  .range(1, 1 << 20));
  f.push_back(field<int>(
                  "model.n_heads", [](Deck & d) -> auto& { return d.model.n_heads; },
                  "Attention heads; must divide model.d_model.")
                  .range(1, 4096));
  f.push_back(field<int>(
                  "model.n_layers", [](Deck & d) -> auto& { return d.model.n_layers; },
                  "Transformer layers, split over pipeline stages and virtual chunks.")
                  .range(1, 100000));
  f.push_back(field<int>(
                  "model.mlp_ratio", [](Deck & d) -> auto& { return d.model.mlp_ratio; },
                  "MLP hidden width as a multiple of model.d_model.")
                  .range(1, 64));
  f.push_back(field<std::string>(
                  "model.precision", [](Deck & d) -> auto& { return d.model.precision; },
                  "GEMM precision: fp32, or bf16 (bf16 operands, fp32 accumulation and master "
                  "weights; backend cuda only).")
                  .one_of({"fp32", "bf16"}));
  f.push_back(field<unsigned long long>(
      "model.init_seed", [](Deck & d) -> auto& { return d.model.init_seed; }, "Seed of the weight initialisation."));
  {
    // `even` (the default), `balanced` or an explicit list; a custom field because an empty list is not a deck
    // value. `balanced` becomes a list in finalize_model, so resolved.yaml shows the split it chose.
    Field lps;
    lps.path = "model.layers_per_stage";
    lps.type_name = "`even`, `balanced` or list of integers";
    lps.doc =
        "Transformer layers held by each virtual stage, in virtual-stage order: parallel.pipeline x "
        "parallel.virtual entries summing to model.n_layers (0 is allowed). `even`: as even as possible, "
        "earlier stages taking the remainder. `balanced`: the contiguous split (at least one layer per stage) "
        "that minimises the heaviest stage's F+B+W work in the cost model derived from the model (per layer, "
        "the LM head and loss on the last stage, the embedding on the first); needs cost.device_tflops > 0, and "
        "resolved.yaml lists the split chosen.";
    lps.min = 0;
    lps.max = 100000;
    lps.get = [](const Deck& d) {
      if (!d.model.layers_per_stage.empty()) return codec::emit(d.model.layers_per_stage);
      return codec::emit(std::string(d.model.balance_layers ? "balanced" : "even"));
    };
    lps.set = [](Deck& d, const YAML::Node& n, const Field& self) -> std::string {
      if (n.IsScalar() && (n.Scalar() == "even" || n.Scalar() == "balanced")) {
        d.model.layers_per_stage.clear();
        d.model.balance_layers = n.Scalar() == "balanced";
        return {};
      }
      std::vector<int> value;
      if (auto p = codec::parse(n, value); !p.empty()) return p + " (or `even`, `balanced`)";
      if (auto p = codec::check(self, value); !p.empty()) return p;
      d.model.layers_per_stage = std::move(value);
      d.model.balance_layers = false;
      return {};
    };
    f.push_back(std::move(lps));
  }

  f.push_back(field<std::string>(
                  "data.source", [](Deck & d) -> auto& { return d.data.source; },
                  "Training tokens: `synthetic` (a built-in first-order Markov source with learnable "
                  "structure, seeded by run.seed) or `file` (byte-level windows of data.path).")
                  .one_of({"synthetic", "file"}));
  f.push_back(field<std::string>(
      "data.path", [](Deck & d) -> auto& { return d.data.path; },
      "Text file read as bytes when data.source is `file` (needs model.vocab >= 256)."));

  f.push_back(field<double>(
                  "optim.lr", [](Deck & d) -> auto& { return d.optim.lr; }, "Peak learning rate of AdamW.")
                  .range(0, 10));
  f.push_back(field<double>(
                  "optim.lr_min_ratio", [](Deck & d) -> auto& { return d.optim.lr_min_ratio; },
                  "Floor of the cosine decay as a fraction of optim.lr (1 = constant rate).")
                  .range(0, 1));
  f.push_back(field<int>(
                  "optim.warmup_steps", [](Deck & d) -> auto& { return d.optim.warmup_steps; },
                  "Linear learning-rate warm-up steps.")
                  .range(0, 1e9));
  f.push_back(field<int>(
                  "optim.decay_steps", [](Deck & d) -> auto& { return d.optim.decay_steps; },
                  "Step at which the cosine decay reaches its floor; 0 means run.steps.")
                  .range(0, 1e9));
  f.push_back(field<double>(
                  "optim.beta1", [](Deck & d) -> auto& { return d.optim.beta1; }, "AdamW beta1.")
                  .range(0, 0.999999));
  f.push_back(field<double>(
                  "optim.beta2", [](Deck & d) -> auto& { return d.optim.beta2; }, "AdamW beta2.")
                  .range(0, 0.999999));
  f.push_back(field<double>(
                  "optim.eps", [](Deck & d) -> auto& { return d.optim.eps; }, "AdamW epsilon.")
                  .range(0, 1));
  f.push_back(field<double>(
                  "optim.weight_decay", [](Deck & d) -> auto& { return d.optim.weight_decay; },
                  "Decoupled weight decay, applied to weight matrices and embeddings (not to biases "
                  "or LayerNorm parameters).")
                  .range(0, 10));
  f.push_back(field<double>(
                  "optim.grad_clip", [](Deck & d) -> auto& { return d.optim.grad_clip; },
                  "Clip gradients to this global norm (over all stages); 0 disables clipping.")
                  .range(0, 1e12));
  f.push_back(field<int>(
                  "optim.skip_nonfinite_steps", [](Deck & d) -> auto& { return d.optim.skip_nonfinite_steps; },
                  "Steps whose loss or global gradient norm is NaN/Inf that are skipped (no update of weights "
                  "or AdamW moments; data, learning-rate schedule and AdamW's step count still advance) before "
                  "the run gives up. 0: the first non-finite step stops the run (exit 1).")
                  .range(0, 1e9));

  f.push_back(field<std::string>(
      "checkpoint.path", [](Deck & d) -> auto& { return d.checkpoint.path; },
      "Checkpoint root: one folder per step (step-NNNNNN: an HDF5 file per virtual stage and a manifest with "
      "their CRC-32), and `latest` naming the newest complete step; empty: none written."));
  f.push_back(field<int>(
                  "checkpoint.every", [](Deck & d) -> auto& { return d.checkpoint.every; },
                  "Write a checkpoint every N steps; 0: only after the last step.")
                  .range(0, 1e9));
  f.push_back(field<int>(
                  "checkpoint.keep", [](Deck & d) -> auto& { return d.checkpoint.keep; },
                  "Complete checkpoint steps kept under checkpoint.path (older ones are removed once a newer step "
                  "is complete); 0: keep all.")
                  .range(0, 1e6));
  f.push_back(field<std::string>(
      "checkpoint.resume", [](Deck & d) -> auto& { return d.checkpoint.resume; },
      "Checkpoint to resume from (weights, optimizer state, step): a checkpoint root (its `latest` step) or "
      "one step folder; every file is checked against the manifest first. Empty: start from the initialisation."));
}

namespace {

// Whether the command would build the model from this deck: `run` and `validate` with a math backend (cpu,
// cuda); `simulate` and the emulated backend time ops from the cost model and never split layers.
bool builds_model(const Deck& deck, const LoadOptions& options) {
  const bool command = options.command == Command::Run || options.command == Command::Validate;
  return command && (deck.backend == "cpu" || deck.backend == "cuda");
}

}  // namespace

namespace {

// `layers_per_stage: balanced` resolved into the list it stands for (resolve.hpp, balanced_split).
void balance_layers(Deck& deck, const std::string& src, std::vector<std::string>& problems) {
  const int stages = deck.parallel.pipeline * deck.parallel.virtual_chunks;
  if (deck.cost.device_tflops <= 0) {
    problems.push_back(src +
                       ": model.layers_per_stage = balanced needs the cost model derived from the model "
                       "(cost.device_tflops > 0): the per-stage lists cost.forward/backward_input/backward_weight "
                       "describe one fixed split and cannot follow another");
    return;
  }
  const StageWork w = stage_work_from_model(deck);
  try {
    deck.model.layers_per_stage =
        balanced_split(std::vector<double>(static_cast<std::size_t>(std::max(0, deck.model.n_layers)), w.layer), stages,
                       w.first, w.last);
  } catch (const InputError& e) {
    problems.push_back(src + ": " + e.what());
  }
}

}  // namespace

void finalize_model(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems) {
  const std::string& src = options.source_name;
  if (deck.model.balance_layers && deck.model.layers_per_stage.empty()) balance_layers(deck, src, problems);
  const auto& m = deck.model;
  if (m.d_model % m.n_heads != 0) {
    problems.push_back(src + ": model.n_heads = " + std::to_string(m.n_heads) +
                       " does not divide model.d_model = " + std::to_string(m.d_model));
  }
  const int stages = deck.parallel.pipeline * deck.parallel.virtual_chunks;
  if (!m.layers_per_stage.empty()) {
    long long sum = 0;
    for (int l : m.layers_per_stage) sum += l;
    if (static_cast<int>(m.layers_per_stage.size()) != stages) {
      problems.push_back(src + ": model.layers_per_stage has " + std::to_string(m.layers_per_stage.size()) +
                         " entries but there are parallel.pipeline x parallel.virtual = " + std::to_string(stages) +
                         " virtual stages");
    } else if (sum != m.n_layers) {
      problems.push_back(src + ": model.layers_per_stage sums to " + std::to_string(sum) +
                         " but model.n_layers = " + std::to_string(m.n_layers));
    }
  } else if (builds_model(deck, options) && m.n_layers < stages) {
    problems.push_back(src + ": model.n_layers = " + std::to_string(m.n_layers) + " is fewer than the " +
                       std::to_string(stages) +
                       " virtual stages (parallel.pipeline x parallel.virtual); add layers or list "
                       "model.layers_per_stage explicitly (0 layers on a stage is allowed there)");
  }
  // A path the user named but the trainer would not read: training on synthetic bytes instead gives a
  // plausible loss curve from the wrong data, found only after the run, so it is an error, not a warning.
  if (deck.data.source != "file" && !deck.data.path.empty()) {
    problems.push_back(src + ": data.path = '" + deck.data.path + "' is set but data.source = '" + deck.data.source +
                       "' does not read it (set data.source: file to train on it, or drop data.path)");
  }
  if (deck.data.source == "file") {
    if (deck.data.path.empty()) {
      problems.push_back(src + ": data.source = file needs data.path (a text file read as bytes)");
    } else if (!std::filesystem::is_regular_file(deck.data.path)) {
      problems.push_back(src + ": data.path = '" + deck.data.path + "' is not a readable file");
    }
    if (m.vocab < 256) {
      problems.push_back(src + ": data.source = file reads bytes, so model.vocab must be >= 256, got " +
                         std::to_string(m.vocab));
    }
  }
}

}  // namespace conductor::config

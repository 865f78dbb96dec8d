// Deck keys of the trainer: model, data, optim, checkpoint.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "conductor/config/resolve.hpp"
#include "conductor/config/schema.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"

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
        "earlier stages taking the remainder. `balanced`: the contiguous split (at least one layer per stage; "
        "the first may hold none when it carries cost.encoder_tflop's encoder) that minimises the heaviest "
        "stage's F+B+W work, and then the number of stages within 5% of it, in the cost model derived from the model "
        "(per layer, the LM head and loss on the "
        "last stage, the embedding and the encoder on the first); needs cost.device_tflops > 0, and "
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
      if (auto p = codec::parse(n, value); !p.empty())
        return p + " (allowed: " + codec::allowed_range(self) + " per stage, or `even`, `balanced`)";
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
                  "structure, seeded by run.seed), `file` (byte-level windows of data.path), `llmc` (llm.c "
                  "token shards: a 256-int32 header, magic 20240520 with uint16 tokens or 20240801 with uint32) "
                  "or `megatron` (a Megatron-LM indexed dataset: PREFIX.bin + PREFIX.idx). Read by the cpu and "
                  "cuda backends; `emulated` has no math and reads no data (so one override switches a deck).")
                  .one_of({"synthetic", "file", "llmc", "megatron"}));
  f.push_back(field<std::string>(
      "data.path", [](Deck & d) -> auto& { return d.data.path; },
      "Training data: a file or glob (`file`: read as bytes, needs model.vocab >= 256; `llmc`: shards such as "
      "`fineweb_train_*.bin`, in sorted order), or a Megatron dataset prefix or glob of prefixes (`megatron`: "
      "the path without .bin/.idx). A path that exists as written is read as is ('[' and '*' included); every "
      "match of a glob must be a file (a dangling link or a folder is refused, not skipped), and every shard of "
      "one token type (llm.c's GPT-2 uint16 and Llama-3 uint32 are not mixed). Every token id must be below "
      "model.vocab."));
  f.push_back(field<std::string>(
      "data.valid_path", [](Deck & d) -> auto& { return d.data.valid_path; },
      "Validation data in data.source's format (file, glob or prefix as data.path), none of data.path's files; "
      "empty: the last data.valid_fraction of each training file (synthetic: a separate stream of the same "
      "source)."));
  f.push_back(field<double>(
                  "data.valid_fraction", [](Deck & d) -> auto& { return d.data.valid_fraction; },
                  "Tail of each training file held out for validation when data.valid_path is empty (never "
                  "trained on); 0: none.")
                  .range(0, 0.5));
  f.push_back(field<int>(
                  "eval.every", [](Deck & d) -> auto& { return d.eval.every; },
                  "Validation loss (forward only, through the pipeline) after every N steps and after the last "
                  "step; printed in the step line and stored in summary.json. 0: never. Backend `emulated` "
                  "computes no loss: its runs report none (valid_losses empty), whatever this key.")
                  .range(0, 1e9));
  f.push_back(field<int>(
                  "eval.batches", [](Deck & d) -> auto& { return d.eval.batches; },
                  "Validation microbatches (parallel.microbatch_size sequences each) per evaluation: the same "
                  "ones every time.")
                  .range(1, 1e6));

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
                  "optim.eps", [](Deck & d) -> auto& { return d.optim.eps; },
                  "AdamW epsilon, above 0: the update divides by sqrt(v) + eps, and v is 0 for a weight whose "
                  "gradient has been 0 (0 / 0 would make the weights NaN).")
                  .range(1e-30, 1));
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
  f.push_back(field<bool>(
      "checkpoint.allow_data_change", [](Deck & d) -> auto& { return d.checkpoint.allow_data_change; },
      "Resume although the data files differ from those the checkpoint's run read (its manifest records each "
      "file's size and CRC-32): a warning names them. false: such a resume is refused, naming the file and what "
      "differs (the resumed run would train on other tokens than an uninterrupted one)."));
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

namespace {

// data.* and eval.*: the files exist and the keys fit together; the files' contents (headers, token ids against
// model.vocab) are checked where they are read (model/data.hpp).
namespace {

// Why `file` (a data file a path named) cannot be read as one, or "".
std::string not_a_data_file(const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec, target_ec;
  const fs::file_status link = fs::symlink_status(file, ec), target = fs::status(file, target_ec);
  if (fs::is_regular_file(target)) return "";
  if (fs::is_symlink(link) && !fs::exists(target)) {
    std::error_code rc;
    const std::string to = fs::read_symlink(file, rc).string();
    if (target_ec == std::errc::too_many_symbolic_link_levels)
      return "a symbolic link to " + quoted_path(to) + " in a loop of links (it never reaches a file)";
    return "a symbolic link to " + quoted_path(to) + ", which does not exist";
  }
  if (!fs::exists(target)) return "which does not exist";
  if (fs::is_directory(target)) return "which is a folder, not a data file";
  if (fs::is_fifo(target)) return "which is a named pipe, not a data file (its tokens are read by offset)";
  return "which is a device or socket, not a data file";
}

// Where a path that matched nothing was looked for: a leading ~ is no home folder here (a deck is not a shell),
// and a relative path starts at the working folder, which a job script may have changed.
std::string path_hint(const std::string& path) {
  if (!path.empty() && path[0] == '~')
    return " (a leading ~ is not expanded: a deck is not read by a shell; write the folder out)";
  if (!path.empty() && path[0] != '/') {
    std::error_code ec;
    const std::string cwd = std::filesystem::current_path(ec).string();
    if (!ec) return " (a relative path, looked for from the working folder " + cwd + ")";
  }
  return "";
}

}  // namespace

void finalize_data(const Deck& deck, const std::string& src, std::vector<std::string>& problems) {
  const DataConfig& d = deck.data;
  // A path the user named but the trainer would not read: training on synthetic tokens instead gives a
  // plausible loss curve from the wrong data, found only after the run, so it is an error, not a warning.
  if (d.source == "synthetic") {
    for (const auto& [key, value] : {std::pair{"data.path", d.path}, std::pair{"data.valid_path", d.valid_path}}) {
      if (!value.empty()) {
        problems.push_back(src + ": " + key + " = '" + value +
                           "' is set but data.source = 'synthetic' does not read it (set data.source: file, llmc "
                           "or megatron to train on it, or drop " +
                           key + ")");
      }
    }
    if (d.valid_fraction > 0) {
      problems.push_back(src + ": data.valid_fraction is set but data.source = 'synthetic' has no files to split");
    }
    return;
  }
  const std::string what = d.source == "file"   ? "a text file read as bytes"
                           : d.source == "llmc" ? "llm.c .bin token shards: a file or glob"
                                                : "a Megatron dataset prefix: PREFIX.bin + PREFIX.idx";
  const std::string noun = d.source == "file"   ? "file"
                           : d.source == "llmc" ? "file (llm.c token shards)"
                                                : "Megatron dataset (PREFIX.idx + PREFIX.bin)";
  const auto files_of = [&](const char* key, const std::string& path) {
    const std::vector<std::string> files = expand_data_path(d.source, path);
    if (files.empty()) problems.push_back(src + ": " + key + " = '" + path + "' matches no " + noun + path_hint(path));
    // Each match must be a file the trainer can read (a Megatron prefix: its .idx and .bin), named when not.
    for (const std::string& f : files) {
      for (const std::string& file : d.source == "megatron" ? std::vector{f + ".idx", f + ".bin"} : std::vector{f}) {
        if (const std::string why = not_a_data_file(file); !why.empty())
          problems.push_back(src + ": " + key + " = '" + path + "' names " + quoted_path(file) + ", " + why);
      }
    }
    return files;
  };
  std::vector<std::string> train;
  if (d.path.empty()) {
    problems.push_back(src + ": data.source = " + d.source + " needs data.path (" + what + ")");
  } else {
    train = files_of("data.path", d.path);
  }
  if (!d.valid_path.empty()) {
    for (const std::string& v : files_of("data.valid_path", d.valid_path)) {
      const auto same = std::find_if(train.begin(), train.end(), [&](const std::string& t) {
        std::error_code ec;
        return std::filesystem::equivalent(t + (d.source == "megatron" ? ".bin" : ""),
                                           v + (d.source == "megatron" ? ".bin" : ""), ec);
      });
      if (same != train.end()) {
        problems.push_back(src + ": data.valid_path = '" + d.valid_path + "' names " + quoted_path(v) +
                           ", which data.path names too (" + quoted_path(*same) +
                           "): the validation loss would be measured on training tokens; hold data out with "
                           "data.valid_fraction instead, or name other files");
      }
    }
  }
  if (!d.valid_path.empty() && d.valid_fraction > 0) {
    problems.push_back(src +
                       ": data.valid_path and data.valid_fraction are both set; validation data comes from "
                       "one of them");
  }
  if (deck.eval.every > 0 && d.valid_path.empty() && d.valid_fraction == 0) {
    problems.push_back(src + ": eval.every = " + std::to_string(deck.eval.every) +
                       " needs validation data: set data.valid_path or data.valid_fraction");
  }
  if (d.source == "file" && deck.model.vocab < 256) {
    problems.push_back(src + ": data.source = file reads bytes, so model.vocab must be >= 256, got " +
                       std::to_string(deck.model.vocab));
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
  const auto& o = deck.optim;
  if (builds_model(deck, options) && o.decay_steps > 0 && o.decay_steps <= o.warmup_steps) {
    // The cosine runs from the warm-up's end to decay_steps: none is left, and the rate stayed at its peak.
    // (Checked where a model trains: simulate and the emulated backend never step an optimizer.)
    problems.push_back(src + ": optim.decay_steps = " + std::to_string(o.decay_steps) +
                       " is not after optim.warmup_steps = " + std::to_string(o.warmup_steps) +
                       ": the cosine decay runs from the end of the warm-up to decay_steps; set decay_steps above "
                       "warmup_steps, or 0 (run.steps); for a constant rate after the warm-up, optim.lr_min_ratio: 1");
  }
  const std::vector<double>& enc = deck.cost.encoder_tflop;
  if (builds_model(deck, options) && std::any_of(enc.begin(), enc.end(), [](double x) { return x > 0; })) {
    problems.push_back(src + ": cost.encoder_tflop describes an encoder the " + deck.backend +
                       " model does not have (it builds the language model alone); set it to [0, 0, 0], or time "
                       "the deck with `conductor simulate` or backend: emulated");
  }
  finalize_data(deck, src, problems);
}

}  // namespace conductor::config

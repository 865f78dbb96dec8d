#pragma once
// Training and validation tokens. A microbatch's tokens are a pure function of (run.seed, step, microbatch
// index), a validation batch's of (run.seed, batch index), so the first and the last virtual stage each generate
// the inputs / targets they need locally, and every schedule, rank count and restart sees the same data.
//   synthetic: a first-order Markov source over model.vocab (each token has 4 successors with probabilities
//              0.55, 0.25, 0.12, 0.08, chosen from run.seed), so a model can learn far below the unigram entropy.
//              Validation rows come from streams training never draws.
//   file, llmc, megatron: the files of data.path (token_files.hpp) as one list of token runs; a training row is
//              a window of seq_len + 1 tokens inside one run, at a position drawn from (seed, step, microbatch,
//              row). Validation rows are consecutive windows (stride seq_len) of data.valid_path's runs, or of
//              the last data.valid_fraction of each training file (then held out of training).
//              A window is read from its file when drawn (token_files.hpp: pread, never a mapping): a file
//              truncated under the run is an InputError naming it, the step and the bytes, or, after
//              defer_read_errors(), a recorded error (the runtime ends every rank with it after the step).
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "conductor/model/token_files.hpp"
#include "conductor/plan/plan.hpp"

namespace conductor::model {

// The data files' headers (llm.c shards) and indexes (Megatron datasets, with their .bin's size) read and
// checked without their tokens: what `conductor validate` checks before a job waits in a queue. Throws
// InputError naming the key (data.path or data.valid_path) and the file; the token ids are checked when a run
// opens the files (DataSource). Also what a run refuses before reading a token: no file, a byte file under a
// vocabulary below 256, files holding no window of model.seq_len + 1 tokens (to train or, with eval.every, to
// validate on).
void check_data_headers(const plan::Plan& plan);

class DataSource {
 public:
  explicit DataSource(const plan::Plan& plan);
  int batch_size() const { return batch_; }
  int seq_len() const { return seq_len_; }
  int vocab() const { return vocab_; }
  // inputs [B,T] and targets [B,T] (targets = inputs shifted by one) of microbatch mb at step `step`.
  void microbatch(int step, int mb, std::vector<int>& inputs, std::vector<int>& targets) const;
  // The same for validation batch `batch` (0 <= batch < eval.batches; the same tokens at every evaluation).
  void valid_microbatch(int batch, std::vector<int>& inputs, std::vector<int>& targets) const;
  // Entropy (nats) of the token distribution measured over `steps` x `microbatches` microbatches: the loss of
  // the best model that ignores context.
  double empirical_unigram_entropy(int steps, int microbatches) const;
  // Entropy rate (nats per token) of the synthetic source measured on the same sample: the best achievable
  // loss given the previous token. NaN for file data.
  double empirical_conditional_entropy(int steps, int microbatches) const;

  // The data files read (data.path's, then data.valid_path's; empty for synthetic), as they were when opened:
  // what a checkpoint records of its data (model/checkpoint.hpp).
  const std::vector<DataFileIdentity>& files() const { return files_; }
  // From now on a read that fails (a data file truncated while the run reads it) does not throw: the rows it
  // would fill are token 0, and read_error() holds the first such error, naming the file, the step and the bytes.
  // The runtime turns it into one collective error after the step (a rank that threw mid-step would leave its
  // peers waiting on it). Without this call microbatch() and valid_microbatch() throw InputError instead.
  void defer_read_errors() const;
  std::string read_error() const;  // "" while every read succeeded

 private:
  // The token runs of a file-backed source and the number of seq_len + 1 windows that start in each.
  struct Corpus {
    std::vector<TokenSpan> runs;
    std::vector<std::size_t> windows_before;  // windows in runs [0, i); back() = total
    std::size_t windows() const { return windows_before.empty() ? 0 : windows_before.back(); }
    void add(TokenSpan run, int window);
    void copy_window(std::size_t w, int window, int* tokens) const;
  };
  void load_files(const plan::Plan& plan);
  void row(std::uint64_t stream, int* tokens) const;  // seq_len + 1 tokens
  // inputs / targets of one microbatch whose row b (seq_len + 1 tokens) row_of(b, tokens) writes.
  void fill(const std::function<void(int, int*)>& row_of, std::vector<int>& inputs, std::vector<int>& targets) const;
  // fill() whose read errors are prefixed with where() (the step or validation batch), thrown or recorded.
  void fill_checked(const std::function<std::string()>& where, const std::function<void(int, int*)>& row_of,
                    std::vector<int>& inputs, std::vector<int>& targets) const;
  struct ReadErrors {
    std::mutex mutex;
    bool deferred = false;
    std::string first;
  };
  std::string source_;
  int batch_, seq_len_, vocab_;
  std::uint64_t seed_;
  std::vector<int> successors_;  // [vocab][4] (synthetic)
  Corpus train_, valid_;         // file, llmc, megatron
  // The key validation windows come from, for read errors: data.path's held-out part unless data.valid_path.
  std::string valid_key_ = "data.path (its data.valid_fraction)";
  std::vector<DataFileIdentity> files_;
  std::unique_ptr<ReadErrors> read_errors_ = std::make_unique<ReadErrors>();
};

// Whether the validation loss is computed after step `step` (0-based): every eval.every steps and after the last.
inline bool eval_due(const plan::Plan& plan, int step) {
  return plan.eval.every > 0 && ((step + 1) % plan.eval.every == 0 || step + 1 == plan.run.steps);
}

// SplitMix64: the counter-based hash behind every random stream of the model layer.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return splitmix64(a ^ splitmix64(b)); }

}  // namespace conductor::model

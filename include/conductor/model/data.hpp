#pragma once
// Training tokens. A microbatch's tokens are a pure function of (run.seed, step, microbatch index), so the first
// and the last virtual stage each generate the inputs / targets they need locally, and every schedule, rank
// count and restart sees the same data.
//   synthetic: a first-order Markov source over model.vocab (each token has 4 successors with probabilities
//              0.55, 0.25, 0.12, 0.08, chosen from run.seed), so a model can learn far below the unigram entropy.
//   file:      windows of seq_len + 1 bytes of data.path at positions drawn from (seed, step, microbatch, row).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conductor/plan/plan.hpp"

namespace conductor::model {

class DataSource {
 public:
  explicit DataSource(const plan::Plan& plan);
  int batch_size() const { return batch_; }
  int seq_len() const { return seq_len_; }
  int vocab() const { return vocab_; }
  // inputs [B,T] and targets [B,T] (targets = inputs shifted by one) of microbatch mb at step `step`.
  void microbatch(int step, int mb, std::vector<int>& inputs, std::vector<int>& targets) const;
  // Entropy (nats) of the token distribution measured over `steps` x `microbatches` microbatches: the loss of
  // the best model that ignores context.
  double empirical_unigram_entropy(int steps, int microbatches) const;
  // Entropy rate (nats per token) of the synthetic source measured on the same sample: the best achievable
  // loss given the previous token. NaN for file data.
  double empirical_conditional_entropy(int steps, int microbatches) const;

 private:
  void row(std::uint64_t stream, int* tokens) const;  // seq_len + 1 tokens
  std::string source_;
  int batch_, seq_len_, vocab_;
  std::uint64_t seed_;
  std::vector<int> successors_;                       // [vocab][4] (synthetic)
  std::shared_ptr<std::vector<std::uint8_t>> bytes_;  // file contents (file)
};

// SplitMix64: the counter-based hash behind every random stream of the model layer.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return splitmix64(a ^ splitmix64(b)); }

}  // namespace conductor::model

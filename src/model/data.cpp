// Deterministic training data (see data.hpp).
#include "conductor/model/data.hpp"

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>

#include "conductor/util/error.hpp"

namespace conductor::model {

namespace {
constexpr int kSuccessors = 4;
constexpr double kSuccessorProb[kSuccessors] = {0.55, 0.25, 0.12, 0.08};

// Uniform double in [0, 1) from a counter.
inline double uniform(std::uint64_t stream, std::uint64_t i) {
  return static_cast<double>(mix(stream, i) >> 11) * 0x1.0p-53;
}
}  // namespace

DataSource::DataSource(const plan::Plan& plan)
    : source_(plan.data.source),
      batch_(plan.pipeline.microbatch_size),
      seq_len_(plan.model.seq_len),
      vocab_(plan.model.vocab),
      seed_(plan.run.seed) {
  if (source_ == "synthetic") {
    successors_.resize(static_cast<std::size_t>(vocab_) * kSuccessors);
    const std::uint64_t table = mix(seed_, 0x5eed7ab1eull);
    for (int a = 0; a < vocab_; a++) {
      for (int j = 0; j < kSuccessors; j++) {
        successors_[a * kSuccessors + j] = static_cast<int>(mix(table, a * kSuccessors + j) % vocab_);
      }
    }
  } else if (source_ == "file") {
    if (vocab_ < 256) {
      throw InputError("data.source = file reads bytes, so model.vocab must be >= 256, got " + std::to_string(vocab_));
    }
    std::ifstream in(plan.data.path, std::ios::binary);
    if (!in) throw InputError("data.path: cannot open '" + plan.data.path + "'");
    bytes_ = std::make_shared<std::vector<std::uint8_t>>(std::istreambuf_iterator<char>(in),
                                                         std::istreambuf_iterator<char>());
    if (bytes_->size() < static_cast<std::size_t>(seq_len_) + 1) {
      throw InputError("data.path: '" + plan.data.path + "' has " + std::to_string(bytes_->size()) +
                       " bytes; model.seq_len = " + std::to_string(seq_len_) + " needs at least " +
                       std::to_string(seq_len_ + 1));
    }
  } else {
    throw InputError("data.source = '" + source_ + "' is not one of synthetic, file");
  }
}

void DataSource::row(std::uint64_t stream, int* tokens) const {
  const int n = seq_len_ + 1;
  if (source_ == "file") {
    const std::size_t windows = bytes_->size() - n + 1;
    const std::size_t start = mix(stream, 0) % windows;
    for (int t = 0; t < n; t++) tokens[t] = (*bytes_)[start + t];
    return;
  }
  int cur = static_cast<int>(mix(stream, 0) % vocab_);
  tokens[0] = cur;
  for (int t = 1; t < n; t++) {
    const double u = uniform(stream, t);
    int j = 0;
    double acc = kSuccessorProb[0];
    while (j + 1 < kSuccessors && u >= acc) acc += kSuccessorProb[++j];
    cur = successors_[cur * kSuccessors + j];
    tokens[t] = cur;
  }
}

void DataSource::microbatch(int step, int mb, std::vector<int>& inputs, std::vector<int>& targets) const {
  const int T = seq_len_;
  inputs.resize(static_cast<std::size_t>(batch_) * T);
  targets.resize(static_cast<std::size_t>(batch_) * T);
  std::vector<int> buf(T + 1);
  for (int b = 0; b < batch_; b++) {
    const std::uint64_t stream = mix(mix(mix(seed_, static_cast<std::uint64_t>(step)), mb), b);
    row(stream, buf.data());
    for (int t = 0; t < T; t++) {
      inputs[b * T + t] = buf[t];
      targets[b * T + t] = buf[t + 1];
    }
  }
}

double DataSource::empirical_unigram_entropy(int steps, int microbatches) const {
  std::vector<double> count(vocab_, 0.0);
  std::vector<int> in, tg;
  double n = 0;
  for (int s = 0; s < steps; s++) {
    for (int m = 0; m < microbatches; m++) {
      microbatch(s, m, in, tg);
      for (int t : tg) count[t] += 1;
      n += tg.size();
    }
  }
  double h = 0;
  for (double c : count) {
    if (c > 0) h -= c / n * std::log(c / n);
  }
  return h;
}

double DataSource::empirical_conditional_entropy(int steps, int microbatches) const {
  if (source_ != "synthetic") return std::numeric_limits<double>::quiet_NaN();
  std::map<std::pair<int, int>, double> pair;
  std::vector<double> prev(vocab_, 0.0);
  std::vector<int> in, tg;
  double n = 0;
  for (int s = 0; s < steps; s++) {
    for (int m = 0; m < microbatches; m++) {
      microbatch(s, m, in, tg);
      for (std::size_t i = 0; i < tg.size(); i++) {
        pair[{in[i], tg[i]}] += 1;
        prev[in[i]] += 1;
        n += 1;
      }
    }
  }
  double h = 0;
  for (const auto& [k, c] : pair) h -= c / n * std::log(c / prev[k.first]);
  return h;
}

}  // namespace conductor::model

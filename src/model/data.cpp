// Deterministic training data (see data.hpp).
#include "conductor/model/data.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"

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
  } else if (source_ == "file" || source_ == "llmc" || source_ == "megatron") {
    load_files(plan);
  } else {
    throw InputError("data.source = '" + source_ + "' is not one of synthetic, file, llmc, megatron");
  }
}

namespace {

TokenSpan read_run(const std::string& source, const std::string& path) {
  if (source == "llmc") return read_llmc_shard(path);
  if (source == "megatron") return read_megatron_dataset(path);
  return read_bytes_file(path);
}

// A file's own errors (its header, its size) name the key that listed it, as its token checks do.
TokenSpan read_keyed(const std::string& source, const std::string& path, const char* key) {
  try {
    return read_run(source, path);
  } catch (const InputError& e) {
    throw InputError(std::string(key) + ": " + e.what());
  }
}

std::string listed(const std::vector<std::string>& files) {
  return files.size() == 1 ? quoted_path(files[0]) : std::to_string(files.size()) + " files";
}

// Windows of `window` tokens starting in a run of `count` tokens.
std::size_t windows_in(std::size_t count, int window) {
  return count >= static_cast<std::size_t>(window) ? count - static_cast<std::size_t>(window) + 1 : 0;
}

// Tokens of a training file held out for validation (data.valid_fraction): its last ones.
std::size_t held_out_of(std::size_t count, const plan::Data& d) {
  return static_cast<std::size_t>(static_cast<double>(count) * d.valid_fraction);
}

// What the files must give a run, before any is read: some file, bytes only where the vocabulary holds them.
void check_sources(const plan::Plan& plan) {
  const plan::Data& d = plan.data;
  if (d.train_files.empty()) throw InputError("data.path = " + quoted_path(d.path) + " matches no file");
  if (d.source == "file" && plan.model.vocab < 256) {
    throw InputError("data.source = file reads bytes, so model.vocab must be >= 256, got " +
                     std::to_string(plan.model.vocab));
  }
}

// And once their sizes are known: a window to train on, and one to validate on where eval.every asks for it.
void check_windows(const plan::Plan& plan, std::size_t train_windows, std::size_t valid_windows) {
  const plan::Data& d = plan.data;
  const int window = plan.model.seq_len + 1;
  const auto too_short = [&](const std::string& key, const std::vector<std::string>& files, const char* part) {
    return InputError(key + ": " + listed(files) + " hold" + (files.size() == 1 ? "s" : "") + " no " + part +
                      "window of model.seq_len + 1 = " + std::to_string(window) +
                      " tokens; use longer files or a shorter model.seq_len");
  };
  if (train_windows == 0) throw too_short("data.path", d.train_files, d.valid_fraction > 0 ? "training " : "");
  if (plan.eval.every > 0 && valid_windows == 0) {
    throw d.valid_files.empty() ? too_short("data.valid_fraction", d.train_files, "held-out ")
                                : too_short("data.valid_path", d.valid_files, "");
  }
}

// Every file's tokens of one type: llm.c's GPT-2 (uint16) and Llama-3 (uint32) shards come from different
// tokenizers, so one run mixing them trains on ids that mean different words. The header check (validate) and
// the loader (the run) refuse them alike.
class OneTokenType {
 public:
  void operator()(const TokenSpan& run, const char* key) {
    if (!first_) first_ = run;
    if (run.type != first_->type) {
      throw InputError(std::string(key) + ": " + quoted_path(run.name()) + " holds " + type_name(run.type) +
                       " tokens, " + quoted_path(first_->name()) + " " + type_name(first_->type) +
                       " tokens: shards of two tokenizers; use files of one");
    }
  }

 private:
  std::optional<TokenSpan> first_;
};

}  // namespace

void check_data_headers(const plan::Plan& plan) {
  const plan::Data& data = plan.data;
  if (data.source == "synthetic") return;
  check_sources(plan);
  const int window = plan.model.seq_len + 1;
  std::size_t train = 0, valid = 0;
  OneTokenType same_type;
  for (const std::string& f : data.train_files) {
    const TokenSpan run = read_keyed(data.source, f, "data.path");
    same_type(run, "data.path");
    const std::size_t held_out = held_out_of(run.count, data);
    train += windows_in(run.count - held_out, window);
    valid += windows_in(held_out, window);
  }
  for (const std::string& f : data.valid_files) {
    const TokenSpan run = read_keyed(data.source, f, "data.valid_path");
    same_type(run, "data.valid_path");
    valid += windows_in(run.count, window);
  }
  check_windows(plan, train, valid);
}

void DataSource::Corpus::add(TokenSpan run, int window) {
  if (windows_before.empty()) windows_before.push_back(0);
  const std::size_t n = windows_in(run.count, window);
  windows_before.push_back(windows_before.back() + n);
  runs.push_back(std::move(run));
}

namespace {
// The run (file) the calling thread's last window came from: what a row that fails its check names.
thread_local const TokenSpan* last_run_read = nullptr;
}  // namespace

void DataSource::Corpus::copy_window(std::size_t w, int window, int* tokens) const {
  // The run holding window w: the last run whose first window is <= w (runs too short for a window hold none).
  const auto it = std::upper_bound(windows_before.begin(), windows_before.end(), w);
  const std::size_t r = static_cast<std::size_t>(it - windows_before.begin()) - 1;
  last_run_read = &runs[r];
  runs[r].copy(w - windows_before[r], static_cast<std::size_t>(window), tokens);
}

void DataSource::load_files(const plan::Plan& plan) {
  const plan::Data& d = plan.data;
  check_sources(plan);
  const int window = seq_len_ + 1;
  OneTokenType same_type;
  for (const std::string& f : d.train_files) {
    TokenSpan run = read_keyed(source_, f, "data.path");
    same_type(run, "data.path");
    files_.push_back(scan_token_file(run, vocab_, "data.path"));
    const std::size_t held_out = held_out_of(run.count, d);
    if (held_out > 0) valid_.add(run.slice(run.count - held_out, held_out), window);
    train_.add(run.slice(0, run.count - held_out), window);
  }
  if (!d.valid_files.empty()) valid_key_ = "data.valid_path";
  for (const std::string& f : d.valid_files) {
    TokenSpan run = read_keyed(source_, f, "data.valid_path");
    same_type(run, "data.valid_path");
    files_.push_back(scan_token_file(run, vocab_, "data.valid_path"));
    valid_.add(std::move(run), window);
  }
  check_windows(plan, train_.windows(), valid_.windows());
}

void DataSource::row(std::uint64_t stream, int* tokens) const {
  const int n = seq_len_ + 1;
  if (source_ != "synthetic") {
    train_.copy_window(mix(stream, 0) % train_.windows(), n, tokens);
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

void DataSource::fill(const std::function<void(int, int*)>& row_of, std::vector<int>& inputs,
                      std::vector<int>& targets) const {
  const int T = seq_len_;
  inputs.resize(static_cast<std::size_t>(batch_) * T);
  targets.resize(static_cast<std::size_t>(batch_) * T);
  std::vector<int> buf(T + 1);
  for (int b = 0; b < batch_; b++) {
    row_of(b, buf.data());
    for (int t = 0; t < T; t++) {
      inputs[b * T + t] = buf[t];
      targets[b * T + t] = buf[t + 1];
    }
  }
}

void DataSource::fill_checked(const std::function<std::string()>& where, const std::function<void(int, int*)>& row_of,
                              std::vector<int>& inputs, std::vector<int>& targets) const {
  try {
    // The files' ids were checked when they were opened; a file rewritten in place since (same size) can hold ids
    // past the vocabulary, which index past the embedding's rows: checked again as each row is read, naming its file.
    const auto checked_row = [&](int b, int* tokens) {
      last_run_read = nullptr;
      row_of(b, tokens);
      for (int t = 0; t <= seq_len_; ++t) {
        if (const int id = tokens[t]; id < 0 || id >= vocab_) {
          throw InputError("token id " + std::to_string(id) + " (row " + std::to_string(b) + ", position " +
                           std::to_string(t) + ") is outside the vocabulary (model.vocab = " + std::to_string(vocab_) +
                           "): " + (last_run_read ? quoted_path(last_run_read->name()) : std::string("the file")) +
                           " was rewritten since the run opened it");
        }
      }
    };
    fill(checked_row, inputs, targets);
  } catch (const InputError& e) {
    const std::string message =
        where() + ": " + e.what() + "; restore the file (or its copy as it was) and resume from the last checkpoint";
    std::lock_guard<std::mutex> lock(read_errors_->mutex);
    if (!read_errors_->deferred) throw InputError(message);
    if (read_errors_->first.empty()) read_errors_->first = message;
    std::fill(inputs.begin(), inputs.end(), 0);
    std::fill(targets.begin(), targets.end(), 0);
  }
}

void DataSource::defer_read_errors() const {
  std::lock_guard<std::mutex> lock(read_errors_->mutex);
  read_errors_->deferred = true;
}

std::string DataSource::read_error() const {
  std::lock_guard<std::mutex> lock(read_errors_->mutex);
  return read_errors_->first;
}

void DataSource::microbatch(int step, int mb, std::vector<int>& inputs, std::vector<int>& targets) const {
  const auto row_of = [&](int b, int* tokens) {
    row(mix(mix(mix(seed_, static_cast<std::uint64_t>(step)), mb), b), tokens);
  };
  if (source_ == "synthetic") return fill(row_of, inputs, targets);
  fill_checked(
      [&] { return "data.path: step " + std::to_string(step + 1) + " (microbatch " + std::to_string(mb) + ")"; },
      row_of, inputs, targets);
}

void DataSource::valid_microbatch(int batch, std::vector<int>& inputs, std::vector<int>& targets) const {
  if (source_ == "synthetic") {
    // Training streams start from mix(seed, step); a base no step reaches keeps validation rows apart.
    const std::uint64_t base = mix(seed_ ^ 0x7a11d7a1ull, 0xe7a1ull);
    fill([&](int b, int* tokens) { row(mix(mix(base, static_cast<std::uint64_t>(batch)), b), tokens); }, inputs,
         targets);
    return;
  }
  if (valid_.windows() == 0) throw InputError("no validation data: set data.valid_path or data.valid_fraction");
  fill_checked([&] { return valid_key_ + ": validation batch " + std::to_string(batch); },
               [&](int b, int* tokens) {
                 const std::size_t k = static_cast<std::size_t>(batch) * static_cast<std::size_t>(batch_) + b;
                 valid_.copy_window(k * static_cast<std::size_t>(seq_len_) % valid_.windows(), seq_len_ + 1, tokens);
               },
               inputs, targets);
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

// StageModel's LM head and loss in vocabulary groups (unit `vocab` of computation migration; stage.hpp,
// "vocabulary groups"): group g holds the LM head's rows [g V/G, (g+1) V/G), i.e. those vocabulary columns of the
// logits. The loss is vocabulary-parallel, as Megatron computes it: per group and token the max logit, the sum of
// exponentials relative to that max and the target's logit where the group holds the target; the owner combines
// the groups in index order into the token's loss. No logits leave the rank: a helper gets the hidden state (and for
// B the global per-token max and sum), recomputes its groups' logits, and answers with the statistics (F) or its
// part of the hidden state's gradient (B); for W it gets the hidden state, the per-token max and sum, and answers with
// its groups' LM-head weight gradients. The owner recomputes the logits and logit gradients of groups whose F or B ran
// elsewhere where it needs them.
//
// Same bits wherever a group ran: each group's logits are one product of the group's rows (owner and helper run the
// same call), the per-token loops are one kernel call per group on either side (cpu: scalar loops in column order;
// cuda: fixed-order reductions, one block per token), and B's partial gradients are added
// from the last group down (acc = q[G-1], then acc = q[g] + acc), so a helper holding the last groups answers with
// a prefix of that sum. The per-token loops are kernels (crossentropy.hpp: vocab_*), so any backend runs them; what
// crosses to or from the host (a request, an answer) goes through the backend's upload and download, and a helper
// stages its request into its backend's memory (staged.hpp), as the layers' groups do.
#include <algorithm>
#include <span>
#include <vector>

#include "conductor/model/crossentropy.hpp"
#include "conductor/model/gelu.hpp"  // residual_forward
#include "conductor/model/layernorm.hpp"
#include "conductor/model/matmul.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/error.hpp"
#include "stage_internal.hpp"
#include "staged.hpp"

namespace conductor::model {

namespace {

constexpr float kVocabRequest = 2.0f;  // the unit a request names in its last float (stage_migration.cpp: 0, 1)
constexpr float kNoVocab = 3.0f;       // W's request from a stage without the LM head, with vocabulary groups on

// The helper's targets, sent as floats (token ids are exact in a float below 2^24), as ints in its backend's memory.
DeviceBuffer targets_of(Backend& be, const float* f, long rows) {
  std::vector<int> t(static_cast<std::size_t>(rows));
  for (long i = 0; i < rows; ++i) t[static_cast<std::size_t>(i)] = static_cast<int>(f[i]);
  DeviceBuffer out(be, t.size() * sizeof(int));
  be.upload(out.get(), t.data(), t.size() * sizeof(int));
  return out;
}

// A helper's view of a request in vocab_request's B layout (host floats `at`, staged into backend memory at `dev`):
// the final LayerNorm output [B,T,C], the targets, the whole vocabulary's per-token max M and sum S [B,T], then the
// groups' LM-head rows; dloss = 1 / (microbatches BT).
struct VocabBackward {
  const float* lnf;
  DeviceBuffer targets;
  const float *M, *S, *w;
  float dloss;
};

VocabBackward read_vocab_backward(Backend& be, const float* at, const float* dev, const Dims& d, int microbatches) {
  const long bt = d.BT();
  const std::size_t m = static_cast<std::size_t>(bt) * d.C + bt;  // M's offset
  return {dev,
          targets_of(be, at + m - bt, bt),
          dev + m,
          dev + m + bt,
          dev + m + 2 * bt,
          1.0f / (static_cast<float>(microbatches) * static_cast<float>(bt))};
}

}  // namespace

void StageModel::check_vocab_groups() const {
  if (vocab_groups_ > dims_.V) {
    throw Error("model: " + std::to_string(vocab_groups_) + " vocabulary groups for a vocabulary of " +
                std::to_string(dims_.V));
  }
}

// Floats of a request's part that the owner sends for groups [first, G): the hidden state, the targets (and in
// B the per-token max and sum), then each group's LM-head rows; downloaded from the backend's memory.
std::vector<float> StageModel::vocab_request(const VStage& s, const Micro& m, int first, bool backward) const {
  const Dims& d = dims_;
  const long bt = d.BT();
  const std::size_t btc = static_cast<std::size_t>(bt) * d.C;
  const std::size_t rows = static_cast<std::size_t>(d.V - vocab_begin(first)) * d.C;
  const std::size_t w_at = btc + static_cast<std::size_t>(bt) * (backward ? 3 : 1);
  std::vector<float> in(w_at + rows + 1);
  backend_->download(in.data(), m.lnf, btc * sizeof(float));
  std::vector<int> targets(static_cast<std::size_t>(bt));
  backend_->download(targets.data(), m.targets, targets.size() * sizeof(int));
  std::copy(targets.begin(), targets.end(), in.begin() + static_cast<std::ptrdiff_t>(btc));
  if (backward) {
    backend_->download(in.data() + btc + bt, m.vocab_max, static_cast<std::size_t>(bt) * sizeof(float));
    backend_->download(in.data() + btc + 2 * bt, m.vocab_sum, static_cast<std::size_t>(bt) * sizeof(float));
  }
  const float* w = s.params.f() + s.offset("lm_head_w");
  backend_->download(in.data() + w_at, w + static_cast<std::size_t>(vocab_begin(first)) * d.C, rows * sizeof(float));
  in.back() = kVocabRequest;
  return in;
}

// F: final LayerNorm, then the loss group by group; the last give_groups_ groups' statistics from the helper.
void StageModel::head_forward_vocab(VStage& s, Micro& m) {
  const Dims& d = dims_;
  const float* p = s.params.f();
  const float* w = p + s.offset("lm_head_w");
  const long bt = d.BT();
  const int G = vocab_groups_, first = G - give_groups_;
  layernorm_forward(m.lnf, m.meanf, m.rstdf, m.res[s.n_layers], p + s.offset("lnf_w"), p + s.offset("lnf_b"), d.B, d.T,
                    d.C, *backend_);
  if (give_groups_ > 0)
    exchange_.send(vocab_request(s, m, first, false), 3 * static_cast<std::size_t>(bt) * give_groups_);
  float* stats = vocab_stats_.f();  // per group: max, sum, target logit [BT] each
  m.vocab_logits.assign(static_cast<std::size_t>(G), 0);
  for (int k = 0; k < first; ++k) {
    const int v0 = vocab_begin(k), nv = vocab_begin(k + 1) - v0;
    float* lg = m.logits + bt * v0;  // group k's compact [BT, nv] block, kept for B
    matmul_forward(lg, m.lnf, w + static_cast<long>(v0) * d.C, nullptr, d.B, d.T, d.C, nv, WeightLayout::out_in,
                   Accumulate::no, *backend_);
    float* st = stats + 3 * bt * k;
    vocab_stats_forward(st, st + bt, st + 2 * bt, lg, m.targets, v0, d.B, d.T, nv, *backend_);
    m.vocab_logits[static_cast<std::size_t>(k)] = 1;
  }
  if (give_groups_ > 0) {
    const std::vector<float> answer = exchange_.receive();
    if (answer.size() != 3 * static_cast<std::size_t>(bt) * give_groups_) {
      throw Error("model: a helper's LM-head answer of " + std::to_string(answer.size()) + " floats (expected " +
                  std::to_string(3 * bt * give_groups_) + ")");
    }
    backend_->upload(stats + 3 * bt * first, answer.data(), answer.size() * sizeof(float));
  }
  vocab_loss_forward(m.losses, m.vocab_max, m.vocab_sum, stats, m.targets, G, d.V, d.B, d.T, *backend_);
}

// B: the groups' logit gradients and their parts of the hidden state's gradient, added from the last group down
// (the helper's answer is the last give_groups_ groups' sum); then the final LayerNorm.
void StageModel::head_backward_input_vocab(VStage& s, Micro& m) {
  const Dims& d = dims_;
  const float* p = s.params.f();
  const float* w = p + s.offset("lm_head_w");
  const long bt = d.BT();
  const std::size_t btc = static_cast<std::size_t>(bt) * d.C;
  const int G = vocab_groups_, first = G - give_groups_, L = s.n_layers;
  const float dloss = 1.0f / (static_cast<float>(microbatches_) * static_cast<float>(bt));
  if (give_groups_ > 0) exchange_.send(vocab_request(s, m, first, true), btc);
  float* parts = vocab_parts_.f();
  m.vocab_dlogits.assign(static_cast<std::size_t>(G), 0);
  for (int k = 0; k < first; ++k) {
    vocab_group_dlogits(s, m, k, dloss);
    const int v0 = vocab_begin(k), nv = vocab_begin(k + 1) - v0;
    matmul_backward_input(parts + btc * k, m.probs + bt * v0, w + static_cast<long>(v0) * d.C, d.B, d.T, d.C, nv,
                          WeightLayout::out_in, Accumulate::no, *backend_);
  }
  int last = first - 1;  // the highest group not yet in m.dlnf
  if (give_groups_ > 0) {
    const std::vector<float> answer = exchange_.receive();
    if (answer.size() != btc) {
      throw Error("model: a helper's LM-head gradient of " + std::to_string(answer.size()) + " floats (expected " +
                  std::to_string(btc) + ")");
    }
    backend_->upload(m.dlnf, answer.data(), btc * sizeof(float));
  } else {
    backend_->copy(m.dlnf, parts + btc * last, btc * sizeof(float));
    --last;
  }
  for (int k = last; k >= 0; --k) residual_forward(m.dlnf, parts + btc * k, m.dlnf, btc, *backend_);
  backend_->zero(m.dres[L], btc * sizeof(float));
  layernorm_backward_input(m.dres[L], m.dlnf, m.res[L], p + s.offset("lnf_w"), m.meanf, m.rstdf, d.B, d.T, d.C,
                           *backend_);
}

// Group k's logit gradients into its block of m.probs, recomputing its logits first where F gave them away.
void StageModel::vocab_group_dlogits(const VStage& s, Micro& m, int k, float dloss) {
  const Dims& d = dims_;
  const long bt = d.BT();
  const int v0 = vocab_begin(k), nv = vocab_begin(k + 1) - v0;
  float* lg = m.logits + bt * v0;
  if (!m.vocab_logits[static_cast<std::size_t>(k)]) {
    matmul_forward(lg, m.lnf, s.params.f() + s.offset("lm_head_w") + static_cast<long>(v0) * d.C, nullptr, d.B, d.T,
                   d.C, nv, WeightLayout::out_in, Accumulate::no, *backend_);
    m.vocab_logits[static_cast<std::size_t>(k)] = 1;
  }
  vocab_dlogits_backward(m.probs + bt * v0, lg, m.targets, m.vocab_max, m.vocab_sum, dloss, v0, d.B, d.T, nv,
                         *backend_);
  m.vocab_dlogits[static_cast<std::size_t>(k)] = 1;
}

// W: the LM-head weight gradient of groups [0, groups_here) on the owner (logit gradients recomputed where B gave
// them away; the others are a helper's: weight_inputs), into the zeroed slot `g`, then the final LayerNorm's.
void StageModel::head_backward_weight_vocab(const VStage& s, Micro& m, float* g, int groups_here) {
  const Dims& d = dims_;
  const long bt = d.BT();
  const float dloss = 1.0f / (static_cast<float>(microbatches_) * static_cast<float>(bt));
  for (int k = 0; k < groups_here; ++k) {
    if (!m.vocab_dlogits[static_cast<std::size_t>(k)]) vocab_group_dlogits(s, m, k, dloss);
    const int v0 = vocab_begin(k), nv = vocab_begin(k + 1) - v0;
    matmul_backward_weight(g + s.offset("lm_head_w") + static_cast<long>(v0) * d.C, nullptr, m.probs + bt * v0, m.lnf,
                           d.B, d.T, d.C, nv, WeightLayout::out_in, *backend_);
  }
  layernorm_backward_weight(g + s.offset("lnf_w"), g + s.offset("lnf_b"), m.dlnf, m.res[s.n_layers], m.meanf, m.rstdf,
                            d.B, d.T, d.C, *backend_);
}

// The helper's expected request size for the last `groups` groups (vocab_request's layout, less the unit float).
std::size_t StageModel::vocab_request_floats(int groups, bool backward) const {
  const Dims& d = dims_;
  return static_cast<std::size_t>(d.BT()) * (d.C + (backward ? 3 : 1)) +
         static_cast<std::size_t>(d.V - vocab_begin(vocab_groups_ - groups)) * d.C;
}

std::vector<float> StageModel::vocab_forward_help(int groups, std::span<const float> input) const {
  check_groups(groups, "a helper's LM-head F");
  const Dims& d = dims_;
  const long bt = d.BT();
  if (input.size() != vocab_request_floats(groups, false)) {
    throw Error("model: a helper's LM-head forward input of " + std::to_string(input.size()) + " floats (expected " +
                std::to_string(vocab_request_floats(groups, false)) + " for " + std::to_string(groups) + " groups)");
  }
  const int first = vocab_groups_ - groups;
  const StagedRequest in(*backend_, input);
  const float* lnf = in.f();
  const DeviceBuffer targets = targets_of(*backend_, input.data() + bt * d.C, bt);
  const float* w = lnf + bt * (d.C + 1);  // the rows of groups first.. (vocabulary ids from vocab_begin(first))
  DeviceBuffer logits(*backend_, static_cast<std::size_t>(bt) * (d.V / vocab_groups_ + 1) * sizeof(float));
  StagedAnswer out(*backend_, 3 * static_cast<std::size_t>(bt) * groups);
  for (int k = first; k < vocab_groups_; ++k) {
    const int v0 = vocab_begin(k), nv = vocab_begin(k + 1) - v0;
    matmul_forward(logits.f(), lnf, w + static_cast<long>(v0 - vocab_begin(first)) * d.C, nullptr, d.B, d.T, d.C, nv,
                   WeightLayout::out_in, Accumulate::no, *backend_);
    float* st = out.f() + 3 * bt * (k - first);
    vocab_stats_forward(st, st + bt, st + 2 * bt, logits.f(), targets.i(), v0, d.B, d.T, nv, *backend_);
  }
  return out.take();
}

std::vector<float> StageModel::vocab_backward_input_help(int groups, std::span<const float> input) const {
  check_groups(groups, "a helper's LM-head B");
  const Dims& d = dims_;
  const long bt = d.BT();
  const std::size_t btc = static_cast<std::size_t>(bt) * d.C;
  if (input.size() != vocab_request_floats(groups, true)) {
    throw Error("model: a helper's LM-head backward input of " + std::to_string(input.size()) + " floats (expected " +
                std::to_string(vocab_request_floats(groups, true)) + " for " + std::to_string(groups) + " groups)");
  }
  const int first = vocab_groups_ - groups;
  const StagedRequest in(*backend_, input);
  const VocabBackward r = read_vocab_backward(*backend_, input.data(), in.f(), d, microbatches_);
  const std::size_t block = static_cast<std::size_t>(bt) * (d.V / vocab_groups_ + 1) * sizeof(float);
  DeviceBuffer logits(*backend_, block), dlogits(*backend_, block), part(*backend_, btc * sizeof(float));
  StagedAnswer acc(*backend_, btc);
  for (int k = vocab_groups_ - 1; k >= first; --k) {  // the fixed order of addition, from the last group down
    const int v0 = vocab_begin(k), nv = vocab_begin(k + 1) - v0;
    const float* wk = r.w + static_cast<long>(v0 - vocab_begin(first)) * d.C;
    matmul_forward(logits.f(), r.lnf, wk, nullptr, d.B, d.T, d.C, nv, WeightLayout::out_in, Accumulate::no, *backend_);
    vocab_dlogits_backward(dlogits.f(), logits.f(), r.targets.i(), r.M, r.S, r.dloss, v0, d.B, d.T, nv, *backend_);
    float* to = k == vocab_groups_ - 1 ? acc.f() : part.f();
    matmul_backward_input(to, dlogits.f(), wk, d.B, d.T, d.C, nv, WeightLayout::out_in, Accumulate::no, *backend_);
    if (k < vocab_groups_ - 1) residual_forward(acc.f(), part.f(), acc.f(), btc, *backend_);
  }
  return acc.take();
}

// W's request with vocabulary groups (weight_inputs): the layers' part, then on the last stage vocab_request's B
// layout (ending in the unit float 2), elsewhere the one float kNoVocab, so the helper can tell them apart.
void StageModel::append_vocab_weight_inputs(const VStage& s, const Micro& m, int groups,
                                            std::vector<float>& out) const {
  if (vocab_groups_ < 2) return;
  if (!s.head) {
    out.push_back(kNoVocab);
    return;
  }
  const std::vector<float> tail = vocab_request(s, m, vocab_groups_ - groups, true);
  out.insert(out.end(), tail.begin(), tail.end());
}

std::size_t StageModel::vocab_grads_floats(const VStage& s, int groups) const {
  if (vocab_groups_ < 2 || !s.head) return 0;
  return static_cast<std::size_t>(dims_.V - vocab_begin(vocab_groups_ - groups)) * dims_.C;
}

// Helper: W's answer with vocabulary groups: the layers' weight gradients (layer_weight_grads), then, when the request
// carries the LM head's part, its last `groups` groups' LM-head weight gradients [V_k, C] from recomputed logit
// gradients, into zeroed blocks (as the owner's slot is zeroed).
std::vector<float> StageModel::weight_grads(int groups, const std::vector<float>& request) const {
  if (vocab_groups_ < 2) return layer_weight_grads(groups, request);
  if (request.empty()) throw Error("model: an empty weight-gradient request to a helper");
  const bool head = request.back() == kVocabRequest;
  if (!head && request.back() != kNoVocab) {
    throw Error("model: a helper's weight-gradient request ends in " + std::to_string(request.back()) +
                ", which names no LM-head part");
  }
  const std::size_t tail = head ? vocab_request_floats(groups, true) + 1 : 1;
  if (request.size() < tail) throw Error("model: a helper's weight-gradient request is shorter than its LM-head part");
  const std::span<const float> layers(request.data(), request.size() - tail);  // read in place
  std::vector<float> out = layers.empty() ? std::vector<float>{} : layer_weight_grads(groups, layers);
  if (!head) return out;
  check_groups(groups, "a helper's LM-head W");
  const Dims& d = dims_;
  const long bt = d.BT();
  const int first = vocab_groups_ - groups;
  const float* at = request.data() + layers.size();
  const StagedRequest in(*backend_, std::span<const float>(at, tail - 1));
  const VocabBackward r = read_vocab_backward(*backend_, at, in.f(), d, microbatches_);
  const std::size_t block = static_cast<std::size_t>(bt) * (d.V / vocab_groups_ + 1) * sizeof(float);
  DeviceBuffer logits(*backend_, block), dlogits(*backend_, block);
  StagedAnswer grads(*backend_, static_cast<std::size_t>(d.V - vocab_begin(first)) * d.C);  // zeroed, as a slot is
  for (int k = first; k < vocab_groups_; ++k) {
    const int v0 = vocab_begin(k), nv = vocab_begin(k + 1) - v0;
    const std::size_t row = static_cast<std::size_t>(v0 - vocab_begin(first)) * d.C;
    matmul_forward(logits.f(), r.lnf, r.w + row, nullptr, d.B, d.T, d.C, nv, WeightLayout::out_in, Accumulate::no,
                   *backend_);
    vocab_dlogits_backward(dlogits.f(), logits.f(), r.targets.i(), r.M, r.S, r.dloss, v0, d.B, d.T, nv, *backend_);
    matmul_backward_weight(grads.f() + row, nullptr, dlogits.f(), r.lnf, d.B, d.T, d.C, nv, WeightLayout::out_in,
                           *backend_);
  }
  const std::vector<float> vocab = grads.take();
  out.insert(out.end(), vocab.begin(), vocab.end());
  return out;
}

// Owner: the helper's LM-head weight gradients (after the layers' in its answer, from `at`) into the held-back slot
// of s (its lm_head_w rows of the last `groups` groups); returns the end of what it read.
const float* StageModel::land_vocab_weight_grads(const VStage& s, float* slot, int groups, const float* at) {
  const std::size_t n = vocab_grads_floats(s, groups);
  if (n == 0) return at;
  backend_->upload(
      slot + s.offset("lm_head_w") + static_cast<std::size_t>(vocab_begin(vocab_groups_ - groups)) * dims_.C, at,
      n * sizeof(float));
  return at + n;
}

bool StageModel::is_vocab_request(const std::vector<float>& request) const {
  return vocab_groups_ > 1 && !request.empty() && request.back() == kVocabRequest;
}

}  // namespace conductor::model

// LibTorch oracle: the same model (our weights copied in) built from LibTorch ops; logits, loss and every
// parameter gradient must agree, then 5 AdamW steps (warm-up, cosine decay, global-norm clipping) of losses.
// LibTorch is only the oracle here; it never runs in the training path.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "conductor/config/resolve.hpp"
#include "conductor/model/attention.hpp"
#include "conductor/model/backend.hpp"
#include "conductor/model/optimizer.hpp"
#include "conductor/model/stage.hpp"
#include "model_test_util.hpp"
#include "torch_gpt.hpp"

using namespace conductor;
using namespace conductor::model;

namespace {

config::Deck oracle_deck() {
  config::Deck d;
  d.model.vocab = 37;
  d.model.seq_len = 12;
  d.model.d_model = 32;
  d.model.n_heads = 4;
  d.model.n_layers = 3;
  d.model.mlp_ratio = 4;
  d.parallel.pipeline = 2;  // two virtual stages: the activation and its gradient cross a stage boundary
  d.parallel.microbatches = 3;
  d.parallel.microbatch_size = 2;
  d.run.steps = 5;
  d.optim.lr = 1e-2;
  d.optim.warmup_steps = 2;
  d.optim.lr_min_ratio = 0.2;
  d.optim.weight_decay = 0.1;
  d.optim.grad_clip = 0.5;
  return d;
}

using test::TorchGpt;

double rel(const torch::Tensor& ours, const torch::Tensor& ref) {
  return (ours - ref).norm().item<double>() / std::max(ref.norm().item<double>(), 1e-30);
}

torch::Tensor to_torch(const std::vector<float>& v, const std::vector<int>& shape) {
  std::vector<int64_t> s(shape.begin(), shape.end());
  return torch::from_blob(const_cast<float*>(v.data()), s, torch::kFloat32).clone();
}

}  // namespace

TEST(Oracle, LogitsLossGradientsAndAdamWMatchLibTorch) {
  torch::set_num_threads(1);
  const config::Deck deck = oracle_deck();
  StageModel ours(config::resolve(deck), {0, 1}, 2);
  // Perturb the GPT-2 init so LayerNorm weights, biases and every path carry non-trivial values.
  {
    std::mt19937 gen(11);
    std::normal_distribution<float> nd(0.0f, 0.1f);
    for (int vs : {0, 1}) {
      auto p = ours.read(vs, Buffer::Params);
      for (auto& x : p) x += nd(gen);
      ours.write(vs, Buffer::Params, p);
    }
  }
  TorchGpt ref(ours);
  const int layers = deck.model.n_layers, M = deck.parallel.microbatches;
  const std::size_t n = ours.activation_elements();
  std::vector<float> act(n), grad(n);
  std::vector<int> in, tg;
  double worst_logits = 0, worst_grad = 0, worst_loss = 0, worst_param = 0;

  for (int step = 0; step < 5; step++) {
    // ---- ours: F of every microbatch, then B and W
    ours.begin_step(step);
    std::vector<std::vector<float>> logits(M);
    for (int mb = 0; mb < M; mb++) {
      ours.forward(0, mb, nullptr, act.data());
      ours.forward(1, mb, act.data(), nullptr);
      logits[mb] = ours.logits(mb);
      ours.backward_input(1, mb, nullptr, grad.data());
      ours.backward_input(0, mb, grad.data(), nullptr);
      ours.backward_weight(1, mb);
      ours.backward_weight(0, mb);
    }
    // ---- LibTorch: loss = mean over microbatches of the per-microbatch mean token loss
    for (auto& [name, t] : ref.p) {
      if (t.grad().defined()) t.mutable_grad().zero_();
    }
    torch::Tensor total = torch::zeros({});
    for (int mb = 0; mb < M; mb++) {
      ours.data().microbatch(step, mb, in, tg);
      auto [lg, loss] = ref.forward(in, tg, layers);
      if (step == 0) {
        const double e = rel(
            to_torch(logits[mb], {deck.parallel.microbatch_size, deck.model.seq_len, deck.model.vocab}), lg.detach());
        worst_logits = std::max(worst_logits, e);
        EXPECT_LT(e, 1e-5) << "logits of microbatch " << mb;
      }
      EXPECT_NEAR(ours.loss(mb), loss.item<double>(), 1e-5 * loss.item<double>()) << "step " << step << " mb " << mb;
      total = total + loss / M;
    }
    EXPECT_NEAR(ours.step_loss(), total.item<double>(), 1e-5 * total.item<double>()) << "step " << step;
    worst_loss = std::max(worst_loss, std::fabs(ours.step_loss() - total.item<double>()) / total.item<double>());
    total.backward();
    if (step == 0) {
      int checked = 0;
      for (int vs : {0, 1}) {
        for (const auto& t : ours.tensors(vs)) {
          const auto g = to_torch(ours.read_tensor(vs, Buffer::Grads, t.name), t.shape);
          const auto& rg = ref.p[t.name].grad();
          ASSERT_TRUE(rg.defined()) << t.name;
          EXPECT_GT(rg.norm().item<double>(), 0.0) << t.name;
          worst_grad = std::max(worst_grad, rel(g, rg));
          EXPECT_LT(rel(g, rg), 1e-4) << t.name;
          EXPECT_LT((g - rg).abs().max().item<double>(), 1e-4 * rg.abs().max().item<double>() + 1e-9) << t.name;
          checked++;
        }
      }
      EXPECT_EQ(checked, static_cast<int>(ref.p.size()));
    }
    // ---- optimizer: global-norm clipping then AdamW at the scheduled rate, on both sides
    const double norm = std::sqrt(ours.local_grad_sq_norm());
    std::vector<torch::Tensor> all;
    for (auto& [name, t] : ref.p) all.push_back(t);
    const double ref_norm = torch::nn::utils::clip_grad_norm_(all, deck.optim.grad_clip);
    EXPECT_NEAR(norm, ref_norm, 1e-4 * ref_norm);
    if (step == 0) {
      EXPECT_GT(norm, deck.optim.grad_clip) << "clipping should be exercised";
    }
    ours.optimizer_step(norm, step);
    static std::unique_ptr<torch::optim::AdamW> opt;
    if (!opt) {
      auto options = [&](double wd) {
        auto o = std::make_unique<torch::optim::AdamWOptions>(deck.optim.lr);
        o->betas({deck.optim.beta1, deck.optim.beta2}).eps(deck.optim.eps).weight_decay(wd);
        return o;
      };
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(ref.decay, options(deck.optim.weight_decay));
      groups.emplace_back(ref.no_decay, options(0.0));
      opt = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(deck.optim.lr));
    }
    for (auto& group : opt->param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(learning_rate(config::resolve(deck).optim, step));
    }
    torch::NoGradGuard guard;
    opt->step();
  }
  // After 5 updates the weights still agree. Exception: the key bias. Adding a constant to every score of a
  // softmax row changes nothing, so its true gradient is exactly 0 and both sides hold only rounding noise
  // (~1e-9), which Adam's normalisation turns into lr-sized, implementation-specific steps. It cannot change
  // any output, so it is excluded (and its gradient checked to be noise-sized).
  for (int vs : {0, 1}) {
    for (const auto& t : ours.tensors(vs)) {
      auto mine = to_torch(ours.read_tensor(vs, Buffer::Params, t.name), t.shape);
      auto theirs = ref.p[t.name].detach();
      if (t.name.size() > 6 && t.name.substr(t.name.size() - 6) == ".qkv_b") {
        const auto grad_k = to_torch(ours.read_tensor(vs, Buffer::Grads, t.name), t.shape).select(1, 1);
        EXPECT_LT(grad_k.abs().max().item<double>(), 1e-6) << t.name;
        auto keep = torch::ones(t.shape[1], torch::kBool);
        keep[1] = false;
        mine = mine.index({torch::indexing::Slice(), keep});
        theirs = theirs.index({torch::indexing::Slice(), keep});
      }
      worst_param = std::max(worst_param, rel(mine, theirs));
      EXPECT_LT(rel(mine, theirs), 1e-4) << t.name;
    }
  }
  std::printf(
      "oracle: max relative error: logits %.2e, gradients %.2e (per-tensor norm), step losses over 5 AdamW "
      "steps %.2e, weights after 5 steps %.2e\n",
      worst_logits, worst_grad, worst_loss, worst_param);
}

// The fused attention alone against LibTorch's materialised causal attention (autograd for the backward), at a
// sequence longer than the kernel's key block (64) so that the online softmax rescales: relative error <= 1e-4.
TEST(Oracle, FusedAttentionMatchesLibTorch) {
  const int B = 2, T = 150, NH = 3, HS = 16, C = NH * HS;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> qkv(static_cast<std::size_t>(B) * T * 3 * C), dout(static_cast<std::size_t>(B) * T * C);
  for (auto& x : qkv) x = dist(rng);
  for (auto& x : dout) x = dist(rng);
  std::vector<float> out(dout.size()), lse(static_cast<std::size_t>(B) * NH * T), delta(lse.size()), dqkv(qkv.size());
  Backend& be = cpu_backend();
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, be);
  attention_backward(dqkv.data(), delta.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, be);

  torch::Tensor x = to_torch(qkv, {B, T, NH, 3, HS}).requires_grad_(true);
  const auto q = x.select(3, 0).transpose(1, 2), k = x.select(3, 1).transpose(1, 2), v = x.select(3, 2).transpose(1, 2);
  const auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(HS));
  const auto mask = torch::ones({T, T}, torch::kBool).triu(1);
  const auto masked = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  const auto ref_lse = torch::logsumexp(masked, -1);  // (B,NH,T)
  const auto y = torch::matmul(torch::softmax(masked, -1), v).transpose(1, 2).reshape({B, T, C});
  y.backward(to_torch(dout, {B, T, C}));
  EXPECT_LE(rel(to_torch(out, {B, T, C}), y.detach()), 1e-4);
  EXPECT_LE(rel(to_torch(lse, {B, NH, T}), ref_lse.detach()), 1e-4);
  EXPECT_LE(rel(to_torch(dqkv, {B, T, NH, 3, HS}), x.grad()), 1e-4);
}

#pragma once
// The GPT of conductor::model built from LibTorch ops, with the weights copied from a StageModel (every
// virtual stage it holds): the oracle of tests/model/test_oracle.cpp and the baseline of bench/bench_model.cpp.
// LibTorch never runs in the training path.
// The narrow LibTorch headers (<torch/torch.h> alone costs ~20 s of compile time).
#include <torch/types.h>  // first: clip_grad.h needs it and does not include it

#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "conductor/model/stage.hpp"

namespace conductor::test {

struct TorchGpt {
  std::map<std::string, torch::Tensor> p;  // name -> leaf tensor (our shapes, requires_grad)
  std::vector<torch::Tensor> decay, no_decay;
  model::Dims d;

  explicit TorchGpt(const model::StageModel& m) : d(m.dims()) {
    for (int vs : m.virtual_stages_held()) {
      const std::vector<float> host = m.read(vs, model::Buffer::Params);
      for (const auto& t : m.tensors(vs)) {
        std::vector<int64_t> shape(t.shape.begin(), t.shape.end());
        auto x = torch::from_blob(const_cast<float*>(host.data() + t.offset), shape, torch::kFloat32).clone();
        x.set_requires_grad(true);
        p[t.name] = x;
        (t.decay ? decay : no_decay).push_back(x);
      }
    }
  }

  // Logits [B,T,V] and mean token loss of one microbatch; tok, tgt: int64 [B*T].
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& tok, const torch::Tensor& tgt, int layers) {
    const int64_t B = d.B, T = d.T, C = d.C, NH = d.NH, HS = d.HS, V = d.V;
    auto x = p["wte"].index_select(0, tok).view({B, T, C}) + p["wpe"].unsqueeze(0);
    auto mask = torch::ones({T, T}, torch::kBool).triu(1);
    for (int l = 0; l < layers; l++) {
      const std::string n = "layer" + std::to_string(l) + ".";
      auto ln1 = torch::layer_norm(x, {C}, p[n + "ln1_w"], p[n + "ln1_b"], 1e-5);
      auto qkv =
          torch::linear(ln1, p[n + "qkv_w"].view({3 * C, C}), p[n + "qkv_b"].view({3 * C})).view({B, T, NH, 3, HS});
      auto q = qkv.select(3, 0).permute({0, 2, 1, 3});
      auto k = qkv.select(3, 1).permute({0, 2, 1, 3});
      auto v = qkv.select(3, 2).permute({0, 2, 1, 3});
      auto att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(HS));
      att = torch::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
      auto y = torch::matmul(att, v).permute({0, 2, 1, 3}).reshape({B, T, C});
      x = x + torch::matmul(y, p[n + "proj_w"]) + p[n + "proj_b"];
      auto ln2 = torch::layer_norm(x, {C}, p[n + "ln2_w"], p[n + "ln2_b"], 1e-5);
      auto h = torch::gelu(torch::linear(ln2, p[n + "fc_w"], p[n + "fc_b"]), "tanh");
      x = x + torch::matmul(h, p[n + "fcproj_w"]) + p[n + "fcproj_b"];
    }
    auto lnf = torch::layer_norm(x, {C}, p["lnf_w"], p["lnf_b"], 1e-5);
    auto logits = torch::linear(lnf, p["lm_head_w"]);
    auto loss = torch::nn::functional::cross_entropy(logits.view({B * T, V}), tgt);
    return {logits, loss};
  }

  std::pair<torch::Tensor, torch::Tensor> forward(const std::vector<int>& in, const std::vector<int>& tg, int layers) {
    return forward(torch::tensor(std::vector<int64_t>(in.begin(), in.end()), torch::kInt64),
                   torch::tensor(std::vector<int64_t>(tg.begin(), tg.end()), torch::kInt64), layers);
  }
};

}  // namespace conductor::test

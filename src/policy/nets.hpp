#pragma once
// LibTorch modules of the policy (private to the policy layer: only training and the file code see LibTorch).
// The narrow LibTorch headers, not <torch/torch.h>: that one alone costs ~20 s of compile time per translation
// unit (make test builds four of them).
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "conductor/policy/policy.hpp"

namespace conductor::policy::detail {

// Scores candidates: input [N, K, kNumFeatures] -> logits [N, K]. Mirrors Policy::score exactly.
struct ActorImpl : torch::nn::Module {
  ActorImpl(int hidden);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr}, skip{nullptr};
};
TORCH_MODULE(Actor);

// State value: input [N, kNumGlobal] -> [N].
struct CriticImpl : torch::nn::Module {
  CriticImpl(int hidden);
  torch::Tensor forward(const torch::Tensor& g);
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr};
};
TORCH_MODULE(Critic);

// Fresh modules (weights from the current torch seed), the actor set up to reproduce the heuristic.
void init_heuristic(Actor& actor);

// Plain-float copy of the modules (for inference) and back (for loading).
Policy to_policy(Actor& actor, Critic& critic, sched::Hint heuristic);
void from_policy(const Policy& p, Actor& actor, Critic& critic);

}  // namespace conductor::policy::detail

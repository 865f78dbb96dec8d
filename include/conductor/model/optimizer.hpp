#pragma once
// The optimizer schedule of a training step: the learning rate per step and the global-norm clipping scale. The
// update itself is StageModel::optimizer_step (defined in optimizer.cpp), through the AdamW kernel (adamw.hpp).
#include "conductor/plan/plan.hpp"

namespace conductor::model {

// Learning rate at 0-based step: linear warm-up over optim.warmup_steps, then cosine decay to
// optim.lr * optim.lr_min_ratio at optim.decay_steps (resolved: run.steps when the deck gave 0).
double learning_rate(const plan::Optim& optim, int step);

// Gradient scale of global-norm clipping: min(1, optim.grad_clip / (global_grad_norm + 1e-6)); 1 when
// optim.grad_clip <= 0 (no clipping).
double clip_scale(const plan::Optim& optim, double global_grad_norm);

// Whether clipping changes the update at this norm: the AdamW kernel's float scale differs from 1 (optimizer
// post-validation redoes an unclipped optimistic step exactly when this holds).
bool clipping_applies(const plan::Optim& optim, double global_grad_norm);

}  // namespace conductor::model
